//! The soak mode (`gahp-chaos --soak MINUTES`): one daemon, never
//! restarted, under a steady workload of both dialects against a simulated
//! project whose clock runs `time_scale` times faster than the real one
//! and which injects faults of its own (stalled and dripping bodies
//! included). The daemon's periodic intervals are its defaults divided by
//! the same factor, so a run of minutes carries the status polling of days.
//! Every `sample` it records what would grow if something leaked per job
//! or per connection: resident memory, open descriptors, threads, the state
//! database (file, WAL, rows per table) and the log files; the verdict
//! compares the second half of the run with the first. A finished BLAH
//! job's record is kept one simulated day (the daemon's retention,
//! compressed like its intervals), so the records level off early.

mod measure;

use measure::{print_header, print_sample, verdict};

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::classad::Value;
use gahp_protocol::gahp::{
    AsyncCommand, BlahCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ReqId, Request, SubmitBatch,
};
use gahp_protocol::Authenticator;
use gahp_testkit::{GahpClient, SimProcess};
use serde::Serialize;

use crate::daemon::{leftover_daemons, select, DaemonSpec};
use crate::run::APP;

pub struct SoakSpec {
    pub gahp_exe: PathBuf,
    pub sim_exe: PathBuf,
    pub dir: PathBuf,
    pub duration: Duration,
    pub sample_every: Duration,
    /// Sim seconds per real second; the daemon's intervals are divided by it.
    pub time_scale: f64,
    pub seed: u64,
    /// Batches (BOINC_*) and jobs (BLAH_*) kept in flight.
    pub in_flight: usize,
    pub dialects: Dialects,
}

/// Which dialects the workload speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialects {
    Both,
    /// `BOINC_*` batches only.
    Boinc,
    /// `BLAH_*` jobs only.
    Blah,
}

impl Dialects {
    fn boinc(self) -> bool {
        self != Dialects::Blah
    }

    fn blah(self) -> bool {
        self != Dialects::Boinc
    }
}

/// Log files the daemon keeps (rotated every minute in a soak).
const MAX_LOG_FILES: usize = 4;
/// The daemon's per-attempt RPC timeout in a soak (as in a chaos run).
const RPC_TIMEOUT: Duration = Duration::from_secs(4);
/// A result later than this is a violation (the daemon's command timeout
/// is 270 s).
const RESULT_OVERDUE: Duration = Duration::from_secs(300);
/// The gridmanager's status probe of BOINC_* batches, in sim seconds.
const PROBE_SIM_SECS: f64 = 60.0;
/// How long the daemon keeps a finished BLAH job's record, in sim seconds
/// (its default is 90 days): one simulated day, so that the records level
/// off early in a run and the second half shows whether they stay level.
const FORGET_AFTER_SIM_SECS: f64 = 86_400.0;

/// The sim's own fault plan: every endpoint, about 8% of calls faulted,
/// stalled and dripping bodies among them (each costs the daemon an RPC
/// timeout, so they stay rare).
fn fault_plan(seed: u64) -> String {
    format!(
        "seed = {seed}\n[rules.\"*\"]\nhttp503 = 0.02\nhttp500 = 0.01\nreset = 0.01\nlose_reply = 0.02\ntruncate = 0.01\nmalformed = 0.005\nhang = 0.002\nhang_ms = 6000\nstall_body = 0.003\ndrip_body = 0.003\ndrip_ms = 200\ndelay = 0.05\ndelay_ms = 200\n"
    )
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    pub secs: f64,
    pub sim_days: f64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub threads: u64,
    pub fds: u64,
    pub db_bytes: u64,
    pub wal_bytes: u64,
    pub rows: BTreeMap<String, u64>,
    pub log_files: u64,
    pub log_bytes: u64,
    pub requests: u64,
    pub jobs_done: u64,
    pub batches_done: u64,
    pub blah_done: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct Counters {
    requests: u64,
    submits: u64,
    submit_errors: u64,
    queries: u64,
    query_errors: u64,
    fetches: u64,
    fetch_errors: u64,
    retires: u64,
    retire_errors: u64,
    blah_submits: u64,
    blah_submit_errors: u64,
    blah_statuses: u64,
    blah_not_completed: u64,
    jobs_done: u64,
    batches_done: u64,
    blah_done: u64,
}

enum Phase {
    Submitting,
    Running,
    Fetching { left: usize },
    Retiring,
}

struct Batch {
    req: SubmitBatch,
    phase: Phase,
    attempts: u32,
    status: HashMap<String, String>,
    /// The server time of the last query that included it.
    since: f64,
    files: Vec<PathBuf>,
}

struct BlahJob {
    iwd: PathBuf,
    id: Option<String>,
    next_poll: Instant,
    polling: bool,
}

enum Pending {
    Submit(String),
    Query(Vec<String>),
    Fetch(String, String, u32),
    Retire(String),
    BlahSubmit(u64),
    BlahStatus(u64),
}

struct Soak<'a> {
    spec: &'a SoakSpec,
    g: GahpClient,
    daemon: DaemonSpec,
    next: u64,
    batches: HashMap<String, Batch>,
    blah: HashMap<u64, BlahJob>,
    pending: HashMap<u32, (Pending, Instant)>,
    query_due: Instant,
    probe: Duration,
    c: Counters,
    violations: Vec<String>,
    sim_addr: String,
    sim_path: String,
    sim_start: f64,
    inputs: PathBuf,
    outputs: PathBuf,
}

fn io_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs the soak; prints a table of samples and the verdict. Ok(true) when
/// nothing grew and no invariant broke.
pub fn soak(spec: &SoakSpec) -> Result<bool, String> {
    let _ = std::fs::remove_dir_all(&spec.dir);
    std::fs::create_dir_all(&spec.dir).map_err(io_err)?;
    let faults = spec.dir.join("faults.toml");
    std::fs::write(&faults, fault_plan(spec.seed)).map_err(io_err)?;
    let ts = spec.time_scale.to_string();
    let sim = SimProcess::start(&spec.sim_exe, &["--time-scale", &ts, "--faults", faults.to_str().ok_or("path not UTF-8")?])
        .map_err(|e| format!("starting {}: {e}", spec.sim_exe.display()))?;
    let auth_file = spec.dir.join("sim.auth");
    std::fs::write(&auth_file, format!("{}\n", sim.auth)).map_err(io_err)?;
    let scale = spec.time_scale;
    // Anything the sim's clock compares with the daemon's (expiry, leases)
    // lasts beyond the simulated span of the whole run.
    let long = (spec.duration.as_secs_f64() * scale * 1.5).max(14.0 * 86_400.0).ceil();
    let config = spec.dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "log_rotation = \"minutely\"\nmax_log_files = {MAX_LOG_FILES}\ninitial_expire_secs = {long}\ncreate_settle_secs = 1\ndownload_stall_secs = 2\nquery_coalesce_ms = {}\nsequence_poll_ms = {}\n[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = {}\nlease_secs = {long}\nbatch_window_secs = {}\nforget_finished_jobs_after_secs = {}\n",
            ((5000.0 / scale) as u64).max(1),
            ((30_000.0 / scale) as u64).max(1),
            sim.url,
            auth_file.display(),
            (30.0 / scale).max(0.001),
            2.0 / scale,
            FORGET_AFTER_SIM_SECS / scale,
        ),
    )
    .map_err(io_err)?;
    let daemon = DaemonSpec { exe: spec.gahp_exe.clone(), dir: spec.dir.clone(), rpc_timeout: RPC_TIMEOUT, config };
    let mut g = daemon.start().map_err(|e| format!("starting the daemon: {e}"))?;
    select(&mut g, &sim.url, &Authenticator::new(sim.auth.clone())).map_err(io_err)?;
    let rest = sim.url.strip_prefix("http://").unwrap_or(&sim.url);
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let inputs = spec.dir.join("inputs");
    let outputs = spec.dir.join("outputs");
    std::fs::create_dir_all(&inputs).map_err(io_err)?;
    std::fs::create_dir_all(&outputs).map_err(io_err)?;
    let mut s = Soak {
        spec,
        g,
        daemon,
        next: 0,
        batches: HashMap::new(),
        blah: HashMap::new(),
        pending: HashMap::new(),
        query_due: Instant::now(),
        probe: Duration::from_secs_f64(PROBE_SIM_SECS / scale),
        c: Counters::default(),
        violations: Vec::new(),
        sim_addr: addr.to_string(),
        sim_path: format!("/{path}"),
        sim_start: 0.0,
        inputs,
        outputs,
    };
    s.sim_start = s.sim_now();
    println!(
        "soak: {:.1} min, time scale {scale}, status refresh {:.1} ms, probe {:.1} ms, {} batches + {} BLAH jobs in flight; work dir {}",
        spec.duration.as_secs_f64() / 60.0,
        30_000.0 / scale,
        s.probe.as_secs_f64() * 1000.0,
        if spec.dialects.boinc() { spec.in_flight } else { 0 },
        if spec.dialects.blah() { spec.in_flight } else { 0 },
        spec.dir.display()
    );
    print_header();
    let started = Instant::now();
    let mut samples = vec![s.sample(started)];
    print_sample(&samples[0]);
    let mut next_sample = started + spec.sample_every;
    let end = started + spec.duration;
    let outcome = loop {
        if Instant::now() >= end {
            break Ok(());
        }
        if let Err(e) = s.step() {
            break Err(e);
        }
        if Instant::now() >= next_sample {
            let x = s.sample(started);
            print_sample(&x);
            samples.push(x);
            next_sample += spec.sample_every;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Err(e) = outcome {
        s.violations.push(format!("the workload stopped: {e}"));
    }
    let last = s.sample(started);
    print_sample(&last);
    samples.push(last);
    s.finish();
    // After the daemon is gone: a stalled reply must have let go of it.
    std::thread::sleep(Duration::from_millis(500));
    let sim_state = http_json(&s.sim_addr, &format!("{}__sim/state?batch=-1&jobs=0", s.sim_path));
    drop(sim);
    let verdict = verdict(&samples);
    println!("counters: {}", serde_json::to_string(&s.c).unwrap_or_default());
    if let Some(v) = &sim_state {
        println!("sim faults injected: {}", v["faults_injected"]);
        println!("sim replies still holding a connection: {}", v["fault_bodies_held"]);
    }
    for line in &verdict.lines {
        println!("{line}");
    }
    for v in &s.violations {
        println!("VIOLATION: {v}");
    }
    let ok = verdict.flat && s.violations.is_empty();
    println!("verdict: {}", if ok { "nothing grew, no violations" } else { "GROWTH OR VIOLATIONS (see above)" });
    let json = serde_json::json!({
        "time_scale": scale,
        "seconds": spec.duration.as_secs_f64(),
        "counters": s.c,
        "samples": samples,
        "verdict": verdict.lines,
        "violations": s.violations,
        "sim": sim_state.map(|v| serde_json::json!({"faults_injected": v["faults_injected"], "fault_bodies_held": v["fault_bodies_held"], "rpc_counts": v["rpc_counts"]})),
    });
    std::fs::write(spec.dir.join("soak.json"), serde_json::to_string_pretty(&json).unwrap_or_default()).map_err(io_err)?;
    println!("report: {}", spec.dir.join("soak.json").display());
    Ok(ok)
}

fn http_json(addr: &str, path: &str) -> Option<serde_json::Value> {
    let addr = addr.to_string();
    let path = path.to_string();
    // The testkit's client panics on a failure: a missing number is no reason to stop.
    std::panic::catch_unwind(move || gahp_testkit::http(&addr, "GET", &path, None)).ok().and_then(|b| serde_json::from_str(&b).ok())
}

impl Soak<'_> {
    fn sim_now(&self) -> f64 {
        http_json(&self.sim_addr, &format!("{}__sim/clock", self.sim_path)).and_then(|v| v["now"].as_f64()).unwrap_or(f64::NAN)
    }

    fn send(&mut self, req: Request, what: Pending) -> Result<(), String> {
        let Some(id) = req.reqid().map(|r| r.0) else { return Err("a request without an id".into()) };
        self.g.submit_async(&req).map_err(io_err)?;
        self.c.requests += 1;
        self.pending.insert(id, (what, Instant::now()));
        Ok(())
    }

    fn reqid(&mut self) -> u32 {
        self.g.reqid()
    }

    /// One round: new work up to the in-flight target, the probes that are
    /// due, the results that came.
    fn step(&mut self) -> Result<(), String> {
        let (boinc, blah) = (self.spec.dialects.boinc(), self.spec.dialects.blah());
        let active = self.batches.len();
        for _ in active..if boinc { self.spec.in_flight } else { 0 } {
            self.new_batch()?;
        }
        let active = self.blah.len();
        for _ in active..if blah { self.spec.in_flight } else { 0 } {
            self.new_blah()?;
        }
        let now = Instant::now();
        if now >= self.query_due && !self.pending.values().any(|(p, _)| matches!(p, Pending::Query(_))) {
            self.query_due = now + self.probe;
            let running: Vec<(&String, f64)> =
                self.batches.iter().filter(|(_, b)| matches!(b.phase, Phase::Running)).map(|(n, b)| (n, b.since)).collect();
            if !running.is_empty() {
                let since = running.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min);
                let names: Vec<String> = running.iter().map(|(n, _)| (*n).clone()).collect();
                let id = self.reqid();
                let req = Request::Command {
                    reqid: ReqId(id),
                    command: Command::Boinc(AsyncCommand::QueryBatches { min_mod_time: since, batches: names.clone() }),
                };
                self.send(req, Pending::Query(names))?;
            }
        }
        let due: Vec<u64> = self.blah.iter().filter(|(_, j)| j.id.is_some() && !j.polling && j.next_poll <= now).map(|(k, _)| *k).collect();
        for k in due {
            let job_id = match self.blah.get_mut(&k) {
                Some(j) => {
                    j.polling = true;
                    j.next_poll = now + self.probe;
                    j.id.clone().unwrap_or_default()
                }
                None => continue,
            };
            let id = self.reqid();
            self.send(
                Request::Command { reqid: ReqId(id), command: Command::Blah(BlahCommand::JobStatus { job_id }) },
                Pending::BlahStatus(k),
            )?;
        }
        for mut line in self.g.results().map_err(io_err)? {
            let id: u32 = line.first().and_then(|i| i.parse().ok()).ok_or_else(|| format!("bad result line {line:?}"))?;
            let rest = line.split_off(1);
            match self.pending.remove(&id) {
                Some((what, _)) => self.on_result(what, rest)?,
                None => self.violations.push(format!("a result for request {id}, which is not pending (a second result?)")),
            }
        }
        let late: Vec<u32> = self.pending.iter().filter(|(_, (_, t))| t.elapsed() > RESULT_OVERDUE).map(|(id, _)| *id).collect();
        for id in late {
            self.pending.remove(&id);
            self.violations.push(format!("no result for request {id} within {} s", RESULT_OVERDUE.as_secs()));
        }
        Ok(())
    }

    fn new_batch(&mut self) -> Result<(), String> {
        self.next += 1;
        let n = self.next;
        let name = format!("soak{}_{n}", self.spec.seed);
        let jobs_n = 1 + (n % 3) as usize;
        let mut jobs = Vec::new();
        let mut files = Vec::new();
        for j in 0..jobs_n {
            // Each job its own input file, as each HTCondor job has its own
            // spool; deleted once the batch is retired.
            let p = self.inputs.join(format!("{name}_{j}.txt"));
            std::fs::write(&p, format!("input {j} of batch {name}\n").repeat(1 + (n as usize * 7 + j) % 40)).map_err(io_err)?;
            files.push(p.clone());
            jobs.push(JobSpec { name: format!("{name}#{j}.0"), args: vec![], inputs: vec![InputFile { src: p, dst_name: "in".into() }] });
        }
        let req = SubmitBatch { batch_name: name.clone(), app_name: APP.into(), jobs, params: JobParams::default() };
        self.batches.insert(name.clone(), Batch { req, phase: Phase::Submitting, attempts: 0, status: HashMap::new(), since: 0.0, files });
        self.submit(&name)
    }

    fn submit(&mut self, name: &str) -> Result<(), String> {
        let Some(b) = self.batches.get_mut(name) else { return Ok(()) };
        b.attempts += 1;
        let req = b.req.clone();
        let id = self.reqid();
        self.c.submits += 1;
        self.send(
            Request::Command { reqid: ReqId(id), command: Command::Boinc(AsyncCommand::Submit(req)) },
            Pending::Submit(name.to_string()),
        )
    }

    fn new_blah(&mut self) -> Result<(), String> {
        self.next += 1;
        let k = self.next;
        let iwd = self.inputs.join(format!("blah{k}"));
        std::fs::create_dir_all(&iwd).map_err(io_err)?;
        std::fs::write(iwd.join("in"), format!("blah job {k} of soak {}\n", self.spec.seed)).map_err(io_err)?;
        let s = |v: &str| Value::Str(v.into());
        let attrs = [("BoincApp", s(APP)), ("TransferInput", s("in")), ("TransferOutput", s("out"))];
        let ad = gahp_testkit::blah_job_ad(&iwd, &format!("soak{}_blah_{k}", self.spec.seed), &attrs);
        self.blah.insert(k, BlahJob { iwd, id: None, next_poll: Instant::now(), polling: false });
        let id = self.reqid();
        self.c.blah_submits += 1;
        self.send(Request::Command { reqid: ReqId(id), command: Command::Blah(BlahCommand::JobSubmit { ad }) }, Pending::BlahSubmit(k))
    }

    fn fetch(&mut self, batch: &str, job: &str, attempt: u32) -> Result<(), String> {
        let dst = format!("{}.out", job.replace('#', "_"));
        let fetch = FetchOutput {
            job_name: job.to_string(),
            dir: self.outputs.clone(),
            stderr_file: "/dev/null".into(),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: dst.into() }],
        };
        let id = self.reqid();
        self.c.fetches += 1;
        self.send(
            Request::Command { reqid: ReqId(id), command: Command::Boinc(AsyncCommand::FetchOutput(fetch)) },
            Pending::Fetch(batch.to_string(), job.to_string(), attempt),
        )
    }

    fn retire(&mut self, name: &str) -> Result<(), String> {
        if let Some(b) = self.batches.get_mut(name) {
            b.phase = Phase::Retiring;
        }
        let id = self.reqid();
        self.c.retires += 1;
        self.send(
            Request::Command { reqid: ReqId(id), command: Command::Boinc(AsyncCommand::RetireBatch { batch: name.to_string() }) },
            Pending::Retire(name.to_string()),
        )
    }

    fn on_result(&mut self, what: Pending, r: Vec<String>) -> Result<(), String> {
        let null = r.first().map(String::as_str) == Some("NULL");
        match what {
            Pending::Submit(name) => {
                let attempts = self.batches.get(&name).map_or(0, |b| b.attempts);
                if null {
                    if let Some(b) = self.batches.get_mut(&name) {
                        b.phase = Phase::Running;
                    }
                } else {
                    self.c.submit_errors += 1;
                    // The gridmanager submits again after an error.
                    if attempts < 5 {
                        self.submit(&name)?;
                    } else {
                        self.violations.push(format!("batch {name}: 5 submits failed, the last {r:?}"));
                        self.retire(&name)?;
                    }
                }
            }
            Pending::Query(names) => {
                if !null || r.len() < 2 {
                    self.c.query_errors += 1;
                    return Ok(());
                }
                self.c.queries += 1;
                let server_time: f64 = r[1].parse().unwrap_or(0.0);
                let mut k = 2;
                let mut group = 0;
                while k < r.len() {
                    let n: usize = r[k].parse().map_err(|_| format!("bad query result {r:?}"))?;
                    let jobs = r.get(k + 1..k + 1 + 2 * n).ok_or_else(|| format!("query result shorter than its counts: {r:?}"))?;
                    if let Some(b) = names.get(group).and_then(|name| self.batches.get_mut(name)) {
                        for pair in jobs.chunks(2) {
                            b.status.insert(pair[0].clone(), pair[1].clone());
                        }
                    }
                    k += 1 + 2 * n;
                    group += 1;
                }
                let mut finished = Vec::new();
                for name in &names {
                    let Some(b) = self.batches.get_mut(name) else { continue };
                    if !matches!(b.phase, Phase::Running) {
                        continue;
                    }
                    b.since = server_time;
                    let all = b.req.jobs.iter().all(|j| b.status.get(&j.name).is_some_and(|s| s == "DONE" || s == "ERROR"));
                    if all {
                        let done: Vec<String> = b
                            .req
                            .jobs
                            .iter()
                            .filter(|j| b.status.get(&j.name).is_some_and(|s| s == "DONE"))
                            .map(|j| j.name.clone())
                            .collect();
                        b.phase = Phase::Fetching { left: done.len() };
                        finished.push((name.clone(), done));
                    }
                }
                for (name, done) in finished {
                    if done.is_empty() {
                        self.retire(&name)?;
                    }
                    for job in done {
                        self.fetch(&name, &job, 1)?;
                    }
                }
            }
            Pending::Fetch(batch, job, attempt) => {
                let dst = self.outputs.join(format!("{}.out", job.replace('#', "_")));
                if null {
                    if !dst.is_file() {
                        self.violations.push(format!("fetch of {job} succeeded, no {}", dst.display()));
                    }
                    let _ = std::fs::remove_file(&dst);
                } else {
                    self.c.fetch_errors += 1;
                    if attempt < 3 {
                        return self.fetch(&batch, &job, attempt + 1);
                    }
                    self.violations.push(format!("fetch of DONE job {job} failed 3 times: {r:?}"));
                }
                let mut retire = false;
                if let Some(b) = self.batches.get_mut(&batch) {
                    if let Phase::Fetching { left } = &mut b.phase {
                        *left = left.saturating_sub(1);
                        retire = *left == 0;
                    }
                }
                if retire {
                    self.retire(&batch)?;
                }
            }
            Pending::Retire(name) => {
                if !null {
                    self.c.retire_errors += 1;
                    return self.retire(&name);
                }
                if let Some(b) = self.batches.remove(&name) {
                    self.c.batches_done += 1;
                    self.c.jobs_done += b.req.jobs.len() as u64;
                    for f in b.files {
                        let _ = std::fs::remove_file(f);
                    }
                }
            }
            Pending::BlahSubmit(k) => {
                if r.first().map(String::as_str) == Some("0") {
                    if let Some(j) = self.blah.get_mut(&k) {
                        j.id = r.get(2).cloned();
                        j.next_poll = Instant::now() + self.probe;
                    }
                } else {
                    self.c.blah_submit_errors += 1;
                    self.violations.push(format!("BLAH submit failed: {r:?}"));
                    if let Some(j) = self.blah.remove(&k) {
                        let _ = std::fs::remove_dir_all(j.iwd);
                    }
                }
            }
            Pending::BlahStatus(k) => {
                self.c.blah_statuses += 1;
                let code: i32 = r.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
                let ok = r.first().map(String::as_str) == Some("0");
                if let Some(j) = self.blah.get_mut(&k) {
                    j.polling = false;
                }
                if ok && code >= 3 {
                    if let Some(j) = self.blah.remove(&k) {
                        if code == 4 && j.iwd.join("out").is_file() {
                            self.c.blah_done += 1;
                            self.c.jobs_done += 1;
                        } else {
                            self.c.blah_not_completed += 1;
                            self.violations.push(format!("BLAH job {:?} ended with status {code}: {r:?}", j.id));
                        }
                        let _ = std::fs::remove_dir_all(j.iwd);
                    }
                }
            }
        }
        Ok(())
    }

    fn sample(&self, started: Instant) -> Sample {
        let pid = self.g.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |k: &str| -> u64 {
            status.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|rd| rd.count() as u64).unwrap_or(0);
        let state = self.spec.dir.join("state");
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let db = state.join("state.sqlite3");
        let (mut log_files, mut log_bytes) = (0, 0);
        if let Ok(rd) = std::fs::read_dir(self.daemon.log_dir()) {
            for e in rd.flatten() {
                log_files += 1;
                log_bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
        Sample {
            secs: started.elapsed().as_secs_f64(),
            sim_days: (self.sim_now() - self.sim_start) / 86_400.0,
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
            threads: field("Threads:"),
            fds,
            db_bytes: size(&db),
            wal_bytes: size(&state.join("state.sqlite3-wal")),
            rows: table_rows(&db),
            log_files,
            log_bytes,
            requests: self.c.requests,
            jobs_done: self.c.jobs_done,
            batches_done: self.c.batches_done,
            blah_done: self.c.blah_done,
        }
    }

    /// QUIT, and the daemon must be gone; nothing it created left running.
    fn finish(&mut self) {
        let _ = self.g.command_line(b"QUIT");
        match self.g.wait_exit(Duration::from_secs(30)) {
            Ok(Some(_)) => {}
            _ => {
                self.violations.push("the daemon did not exit after QUIT".into());
                self.g.kill();
            }
        }
        let left = leftover_daemons(&self.daemon.exe);
        if !left.is_empty() {
            self.violations.push(format!("daemon processes left behind: {left:?}"));
        }
    }
}

/// Rows per table of the daemon's state database (read-only, beside the
/// daemon's own connection).
fn table_rows(db: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(c) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else { return out };
    let _ = c.busy_timeout(Duration::from_secs(5));
    let names: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default();
    for t in names {
        if let Ok(n) = c.query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get::<_, i64>(0)) {
            out.insert(t, n as u64);
        }
    }
    out
}
