//! `boinc_gahp serve` killed with -9 and started again on its state: three
//! clients, 300 jobs on the simulated project, results queued and unread,
//! commands in flight. Every client comes back and has each result once:
//! what it had not read comes with its next RESULTS, what it had read never
//! again, and what was in flight it asks again. And what the clients of
//! one serve share: an app's templates, per project and account.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::ledger::*;
use crate::common::serve::*;
use crate::common::*;

const CLIENTS: [&str; 3] = ["ann", "bo", "cy"];
/// Per client: batches done before the kill, then one in flight at it.
const BATCHES: usize = 4;
const JOBS: usize = 25;

/// A serve on plain loopback TCP over `dir/serve-state`.
fn serve_plain(dir: &Path, tokens: &Path) -> Serve {
    serve(dir, tokens, &["--insecure-loopback"])
}

/// What a request asked, to check its result against.
#[derive(Debug, Clone, PartialEq)]
enum Asked {
    Submit(usize),
    Fetch(String),
    Query,
}

/// One client as a gridmanager would be: its request ids go on growing
/// across connections, and every result it ever read is kept.
struct Client {
    ledger: Ledger<Asked>,
    token: PathBuf,
    area: PathBuf,
    inputs: Vec<PathBuf>,
    next: u32,
    g: Option<GahpClient>,
}

impl std::ops::Deref for Client {
    type Target = Ledger<Asked>;
    fn deref(&self) -> &Ledger<Asked> {
        &self.ledger
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Ledger<Asked> {
        &mut self.ledger
    }
}

impl Client {
    fn new(name: &'static str, token: PathBuf) -> Self {
        Client { ledger: Ledger::new(name), token, area: PathBuf::new(), inputs: Vec::new(), next: 0, g: None }
    }

    fn connect(&mut self, s: &Serve, sim: &Sim, cwd: &Path) {
        // The test puts the client's files in its area itself.
        let mut g = s.connect(&self.token, cwd, &["--remote-paths"]);
        assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
        self.g = Some(g);
    }

    fn g(&mut self) -> &mut GahpClient {
        self.g.as_mut().expect("connected")
    }

    fn send(&mut self, asked: Asked, command: AsyncCommand) -> u32 {
        self.next += 1;
        let id = self.next;
        self.g().submit_async(&async_cmd(id, command)).unwrap();
        self.asked.insert(id, asked);
        id
    }

    fn batch(&self, b: usize) -> SubmitBatch {
        uppercase_batch(&format!("b{b}"), &self.inputs[b * JOBS..(b + 1) * JOBS])
    }

    fn submit(&mut self, b: usize) -> u32 {
        let batch = self.batch(b);
        self.send(Asked::Submit(b), AsyncCommand::Submit(batch))
    }

    fn fetch(&mut self, job: &str) -> u32 {
        self.send(Asked::Fetch(job.into()), fetch_out(job))
    }

    fn query(&mut self, b: usize) -> u32 {
        self.send(Asked::Query, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![format!("b{b}")] })
    }

    fn read_results(&mut self) {
        let g = self.g.as_mut().expect("connected");
        self.ledger.read_results(g);
    }

    fn wait_for(&mut self, ids: &[u32]) {
        let g = self.g.as_mut().expect("connected");
        self.ledger.wait_for(g, ids);
    }
}

/// Whether the sim ran every job of the client's batch.
fn done_on_sim(sim: &Sim, name: &str) -> bool {
    all_done_on_sim(sim, name, JOBS)
}

/// The results serve keeps for a client and has not handed out.
fn unread_stored(dir: &Path, client: &str) -> usize {
    let db = dir.join("serve-state/clients").join(client).join("state.sqlite3");
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT count(*) FROM unread_results", [], |r| r.get::<_, i64>(0)).unwrap() as usize
}

#[test]
fn kill_9_of_serve_loses_no_result_and_repeats_none() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let mut clients: Vec<Client> = CLIENTS
        .iter()
        .map(|&name| {
            let token = add_client(dir.path(), &tokens, &sim, name);
            Client::new(name, token)
        })
        .collect();
    let s = serve_plain(dir.path(), &tokens);

    for c in &mut clients {
        c.connect(&s, &sim, dir.path());
        c.area = dir.path().join("serve-state/clients").join(c.name).join("files");
        std::fs::create_dir_all(c.area.join("in")).unwrap();
        std::fs::create_dir_all(c.area.join("out")).unwrap();
        c.inputs = (0..BATCHES * JOBS)
            .map(|i| {
                std::fs::write(c.area.join(format!("in/{i}")), format!("{} job {i}\n", c.name)).unwrap();
                PathBuf::from(format!("in/{i}"))
            })
            .collect();
        for b in 0..BATCHES - 1 {
            c.submit(b);
        }
    }
    // Bo and Cy read nothing until the kill; Ann reads all she can.
    let ann_submits: Vec<u32> = clients[0].asked.keys().copied().collect();
    clients[0].wait_for(&ann_submits);
    for c in &clients {
        for b in 0..BATCHES - 1 {
            until(&format!("{}~b{b} to run", c.name), || done_on_sim(&sim, &format!("{}~b{b}", c.name)));
        }
    }
    for c in &mut clients {
        for b in 0..BATCHES - 1 {
            for job in job_names(b, JOBS) {
                c.fetch(&job);
            }
        }
    }
    let ann_fetches: Vec<u32> = clients[0].asked.iter().filter(|(_, a)| matches!(a, Asked::Fetch(_))).map(|(id, _)| *id).collect();
    clients[0].wait_for(&ann_fetches);
    for c in &clients {
        until(&format!("{}'s outputs", c.name), || {
            (0..BATCHES - 1).flat_map(|b| job_names(b, JOBS)).all(|j| c.area.join(format!("out/{j}.txt")).exists())
        });
    }
    // Every result not read is stored (a moment after it completes): Bo's
    // and Cy's submits and fetches, none of Ann's.
    for c in &clients {
        let want = if c.name == "ann" { 0 } else { (BATCHES - 1) * (JOBS + 1) };
        until(&format!("{}'s results to be stored", c.name), || unread_stored(dir.path(), c.name) == want);
    }

    // In flight at the kill: each client's last batch (its create_batch held
    // by the project) and queries of its batches (held too).
    sim.set_faults(serde_json::json!({"rules": {
        "submit_rpc_handler.php:create_batch": {"delay": 1.0, "delay_ms": 4000},
        "submit_rpc_handler.php:query_batch2": {"delay": 1.0, "delay_ms": 4000},
    }}));
    for c in &mut clients {
        c.submit(BATCHES - 1);
        for b in 0..BATCHES - 1 {
            c.query(b);
        }
    }
    let mut s = s;
    // SIGKILL: no chance to write anything more.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    sim.set_faults(serde_json::json!({}));
    for c in &mut clients {
        c.g = None;
    }
    let unread = |c: &Client| c.asked.keys().filter(|id| !c.got.contains_key(id)).count();
    assert_eq!(unread(&clients[0]), 1 + (BATCHES - 1), "Ann has read all but what is in flight");
    assert_eq!(unread(&clients[1]), BATCHES + (BATCHES - 1) * (JOBS + 1), "Bo has read nothing");

    let s = serve_plain(dir.path(), &tokens);
    let mut lost_in_flight = Vec::new();
    for c in &mut clients {
        c.connect(&s, &sim, dir.path());
        c.read_results();
        // What completed before the kill comes now (Ann's came before).
        for (&id, asked) in &c.asked {
            let completed = match asked {
                Asked::Submit(b) => *b < BATCHES - 1,
                Asked::Fetch(_) => true,
                Asked::Query => false,
            };
            if completed {
                assert_eq!(c.one(id).map(|r| r[0].as_str()), Some("NULL"), "{}: {asked:?} ({id})", c.name);
            } else {
                // In flight: at most one result (none if it had not completed).
                c.one(id);
            }
        }
        // What got no result is asked again: the submit (once by its name)
        // and the queries.
        let lost: Vec<(u32, Asked)> = c.asked.iter().filter(|(id, _)| !c.got.contains_key(id)).map(|(id, a)| (*id, a.clone())).collect();
        let mut again = Vec::new();
        for (id, asked) in lost {
            lost_in_flight.push((c.name, id));
            again.push(match asked {
                Asked::Submit(b) => c.submit(b),
                Asked::Query => c.query(0),
                Asked::Fetch(job) => panic!("{}: the fetch of {job} completed before the kill and its result is gone", c.name),
            });
        }
        c.wait_for(&again);
        for id in again {
            assert_eq!(c.one(id).map(|r| r[0].as_str()), Some("NULL"), "{}: {:?} asked again", c.name, c.asked[&id]);
        }
    }

    // The last batch runs once, and its outputs are fetched.
    for c in &mut clients {
        let name = format!("{}~b{}", c.name, BATCHES - 1);
        until(&format!("{name} to run"), || done_on_sim(&sim, &name));
        let ids: Vec<u32> = job_names(BATCHES - 1, JOBS).iter().map(|j| c.fetch(j)).collect();
        c.wait_for(&ids);
    }
    // Every job's output fetched exactly once, none missing; every batch once.
    let mut total = 0;
    for c in &mut clients {
        c.read_results();
        let mut fetched: BTreeMap<String, usize> = BTreeMap::new();
        for (id, asked) in &c.asked {
            if let Asked::Fetch(job) = asked {
                assert_eq!(c.one(*id).map(|r| r[0].as_str()), Some("NULL"), "{}: fetch of {job}", c.name);
                *fetched.entry(job.clone()).or_default() += 1;
            }
        }
        assert_eq!(fetched.len(), BATCHES * JOBS, "{}: jobs fetched", c.name);
        assert!(fetched.values().all(|&n| n == 1), "{}: a job fetched twice", c.name);
        for b in 0..BATCHES {
            for (i, job) in job_names(b, JOBS).iter().enumerate() {
                let got = std::fs::read_to_string(c.area.join(format!("out/{job}.txt"))).unwrap();
                assert_eq!(got, format!("{} JOB {}\n", c.name.to_uppercase(), b * JOBS + i));
            }
            assert_eq!(sim.batches_named(&format!("{}~b{b}", c.name)).len(), 1, "{}: batch b{b} made once", c.name);
        }
        for id in c.asked.keys().filter(|id| !lost_in_flight.contains(&(c.name, **id))) {
            assert!(c.got.get(id).is_some_and(|r| r.len() == 1), "{}: request {id} ({:?})", c.name, c.asked[id]);
        }
        total += fetched.len();
    }
    assert_eq!(total, 300);
    assert!(!lost_in_flight.is_empty(), "the kill came when nothing was in flight");
}

#[test]
fn clients_on_one_account_share_an_apps_templates_and_another_account_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let other_auth = "0123456789abcdef0123456789abcdef";
    let sim = Sim::start_config(dir.path(), &format!("[[users]]\nname = \"other\"\nauthenticator = \"{other_auth}\"\nsubmit_all = true\n"));
    let tokens = dir.path().join("tokens.toml");
    let ann = add_client(dir.path(), &tokens, &sim, "ann");
    let bo = add_client(dir.path(), &tokens, &sim, "bo");
    let cy = add_client(dir.path(), &tokens, &sim, "cy");
    // Cy's account is another one.
    std::fs::write(dir.path().join("cy.auth"), format!("{other_auth}\n")).unwrap();
    let s = serve_plain(dir.path(), &tokens);
    let templates = || sim.calls("submit_rpc_handler.php:get_templates");
    let submit = |token: &Path, name: &'static str, batch: &str| {
        let mut c = Client::new(name, token.to_path_buf());
        c.connect(&s, &sim, dir.path());
        let area = dir.path().join("serve-state/clients").join(name).join("files");
        std::fs::write(area.join("in"), format!("{name}\n")).unwrap();
        c.inputs = vec![PathBuf::from("in"); JOBS];
        let id = c.send(Asked::Submit(0), AsyncCommand::Submit(uppercase_batch(batch, &c.inputs)));
        c.wait_for(&[id]);
        assert_eq!(c.one(id).map(|r| r[0].as_str()), Some("NULL"), "{name}");
    };
    assert_eq!(templates(), 0);
    submit(&ann, "ann", "t1");
    assert_eq!(templates(), 1);
    submit(&bo, "bo", "t1");
    submit(&ann, "ann", "t2");
    assert_eq!(templates(), 1, "Bo's submit and Ann's second use the templates Ann's first fetched");
    submit(&cy, "cy", "t1");
    assert_eq!(templates(), 2, "another account asks for its own");
    assert_eq!(sim.batches_named("cy~t1").len(), 1);
}
