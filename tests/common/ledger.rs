//! For the tests that kill `serve` under its clients: what a client asked
//! and every result it read (each request must end with one result), and
//! the workload's batches of `uppercase` jobs.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use super::{AsyncCommand, FetchMode, FetchOutput, GahpClient, OutputSpec, Sim, WAIT};

/// A client's requests by id and the results it read for each.
pub struct Ledger<A> {
    pub name: &'static str,
    pub asked: BTreeMap<u32, A>,
    pub got: HashMap<u32, Vec<Vec<String>>>,
}

impl<A: Debug> Ledger<A> {
    pub fn new(name: &'static str) -> Self {
        Ledger { name, asked: BTreeMap::new(), got: HashMap::new() }
    }

    /// One RESULTS, every line kept.
    pub fn read_results(&mut self, g: &mut GahpClient) {
        for mut line in g.results().unwrap() {
            let id: u32 = line[0].parse().unwrap();
            let rest = line.split_off(1);
            assert!(self.asked.contains_key(&id), "{}: a result for request {id}, never asked", self.name);
            self.got.entry(id).or_default().push(rest);
        }
    }

    /// RESULTS until each of `ids` has its result.
    pub fn wait_for(&mut self, g: &mut GahpClient, ids: &[u32]) {
        let until = Instant::now() + WAIT;
        loop {
            self.read_results(g);
            let missing: Vec<u32> = ids.iter().copied().filter(|id| !self.got.contains_key(id)).collect();
            if missing.is_empty() {
                return;
            }
            assert!(Instant::now() < until, "{}: no result for {missing:?}", self.name);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The one result of `id`, if it has one; fails on two.
    pub fn one(&self, id: u32) -> Option<&Vec<String>> {
        let got = self.got.get(&id)?;
        assert_eq!(got.len(), 1, "{}: request {id} ({:?}) got {} results: {got:?}", self.name, self.asked[&id], got.len());
        got.first()
    }
}

/// A fetch of `job`'s `out` into `out/<job>.txt`.
pub fn fetch_out(job: &str) -> AsyncCommand {
    AsyncCommand::FetchOutput(FetchOutput {
        job_name: job.into(),
        dir: "out".into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "out".into(), dst: format!("{job}.txt").into() }],
    })
}

/// Whether the sim ran every one of the `jobs` jobs of batch `name`.
pub fn all_done_on_sim(sim: &Sim, name: &str, jobs: usize) -> bool {
    let batches = sim.batches_named(name);
    let [batch] = batches.as_slice() else { return false };
    let on_sim = sim.jobs_of(batch["id"].as_i64().unwrap());
    on_sim.len() == jobs && on_sim.iter().all(|j| j["status"] == "DONE")
}

/// Waits, at most `WAIT`, until `ok`.
pub fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < until, "waited too long for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The names of the `jobs` jobs of batch `b<b>` (`uppercase_batch`'s).
pub fn job_names(b: usize, jobs: usize) -> Vec<String> {
    (0..jobs).map(|i| format!("b{b}#{i}.0")).collect()
}
