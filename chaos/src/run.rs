//! One chaos run: the gridmanager's workload through the fault proxy, one
//! kill -9 of the daemon, a closed stdin, a stalled reader, a full output
//! filesystem, the host's own faults (host_faults.rs), then the invariants
//! judged from the server's truth. This file holds the run and its
//! `BOINC_*` workload; fetch.rs its fetches, blah.rs its `BLAH_*` jobs,
//! sequences.rs its work sequences.

mod blah;
mod fetch;
mod host_faults;
mod hostile;
mod sequences;

pub use hostile::{QUORUM_SIM_CONFIG, RSS_BOUND_MIB};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::classad::Value;
use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::{
    AsyncCommand, BlahCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ReqId, Request, SubmitBatch,
};
use gahp_protocol::Authenticator;
use gahp_testkit::GahpClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::daemon::{leftover_daemons, select, DaemonSpec};
use crate::http1::Upstream;
use crate::judge;
use crate::plan::{Plan, Profile, MAX_DELAY_MS};
use crate::proxy::{Proxy, LANES};
use crate::truth::{Truth, BATCH_RETIRED};

/// The app every project of BOINC's examples has: one input `in`, one
/// output `out` (the input in upper case).
pub const APP: &str = "uppercase";
const RESULT_WAIT: Duration = Duration::from_secs(300);

pub struct RunSpec<'a> {
    pub seed: u64,
    pub profile: Profile,
    pub batches: usize,
    pub kill: bool,
    pub gahp_exe: PathBuf,
    pub dir: PathBuf,
    /// Unique to this invocation: batch names never collide with an
    /// earlier run's on the same project.
    pub tag: String,
    pub upstream: Upstream,
    pub auth: Authenticator,
    pub auth_file: PathBuf,
    pub truth: &'a Truth,
    /// How long to wait for the project to run the jobs.
    pub finish_wait: Duration,
    /// How much faster than real time the project's clock runs (the
    /// simulated one: 100): batch expiry and leases are stretched by it,
    /// or batches expire, and lose their outputs, mid-run.
    pub time_scale: f64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub batches: usize,
    pub jobs: usize,
    pub submits_ok: usize,
    pub submit_errors: usize,
    pub resubmits: usize,
    pub queries: usize,
    pub fetches_ok: usize,
    pub fetch_errors: usize,
    pub aborts: usize,
    pub leases: usize,
    pub retired: usize,
    pub blah_jobs: usize,
    /// Batches submitted with the pool selected.
    pub pool_batches: usize,
    /// Work sequences created with the pool selected.
    pub pool_sequences: usize,
    pub sequences: usize,
    pub sequence_steps: usize,
    pub relocations: usize,
    /// Hostile-hosts profile: jobs a host lied about, the kinds sent,
    /// and the daemon's peak resident memory.
    pub hostile_jobs: usize,
    pub hostile_kinds: BTreeMap<String, usize>,
    pub peak_rss_mib: f64,
    pub kills: Vec<String>,
    pub restarts: usize,
    pub rpcs: usize,
    pub faults: BTreeMap<String, usize>,
    pub seconds: f64,
    pub skipped: Vec<String>,
    pub violations: Vec<String>,
    /// Where the decisions, logs and outputs of this run are.
    pub dir: PathBuf,
}

/// One batch of the workload and what became of it.
struct BatchPlan {
    req: SubmitBatch,
    lane: usize,
    ok: bool,
    error: Option<String>,
}

struct Run<'a> {
    spec: &'a RunSpec<'a>,
    rng: StdRng,
    daemon: DaemonSpec,
    proxy: Proxy,
    g: GahpClient,
    lane: usize,
    next_reqid: u32,
    report: RunReport,
    inputs: PathBuf,
    shared_input: PathBuf,
    /// What BOINC_SELECT_PROJECT names for lane [`POOL_LANE`].
    pool: String,
}

/// The daemon's `download_stall_secs` in a run: short, so that a dripping
/// download costs seconds, not the default minute.
const DOWNLOAD_STALL_SECS: u64 = 2;

/// Beyond its deadline, how long a stalled reply may still hold the daemon
/// before that is a violation (scheduling on a busy machine).
const HOLD_SLACK: Duration = Duration::from_secs(5);

/// The lane after the proxy's two: both of them as one pool.
const POOL_LANE: usize = LANES.len();

fn io_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs one seed; a setup failure is an error, a broken invariant a
/// violation in the report.
pub fn run(spec: &RunSpec) -> Result<RunReport, String> {
    let started = Instant::now();
    std::fs::create_dir_all(&spec.dir).map_err(io_err)?;
    let rpc_timeout = Duration::from_secs(4);
    let plan = Plan { seed: spec.seed, profile: spec.profile, rpc_timeout };
    let proxy = Proxy::start(spec.upstream.clone(), plan).map_err(io_err)?;
    let config = spec.dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "initial_expire_secs = {}\ncreate_settle_secs = {}\nsequence_poll_ms = 500\ndownload_stall_secs = {}\n[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = 0.5\n{}",
            (3600.0 * spec.time_scale).ceil(),
            // A request the proxy delays reaches the server this much later
            // at most, even after the daemon that sent it was killed.
            (MAX_DELAY_MS + 1000) as f64 / 1000.0,
            // A dripping or stalled download fails this soon (the proxy's
            // trickle stays well above the daemon's minimum rate).
            DOWNLOAD_STALL_SECS,
            proxy.lane_url(LANES[1]),
            spec.auth_file.display(),
            // Script jobs run at the simulated project's runner app.
            if spec.profile.hostile() { "runner_app = \"runner\"\n" } else { "" }
        ),
    )
    .map_err(io_err)?;
    // Both proxy lanes as one pool of two projects: the broker places a
    // batch on one of them (both reach the same server, so the truth is
    // one), and its later commands follow it there.
    let pool = spec.dir.join("pool.toml");
    let auth_file = std::fs::canonicalize(&spec.auth_file).map_err(|e| format!("{}: {e}", spec.auth_file.display()))?;
    let projects: String = LANES
        .iter()
        .map(|l| {
            format!("[[project]]\nname = \"{l}\"\nurl = \"{}\"\nauthenticator_file = \"{}\"\n", proxy.lane_url(l), auth_file.display())
        })
        .collect();
    std::fs::write(&pool, format!("refresh_secs = 5\nprobe_timeout_secs = 10\n{projects}")).map_err(io_err)?;
    let daemon = DaemonSpec { exe: spec.gahp_exe.clone(), dir: spec.dir.clone(), rpc_timeout, config };
    let g = daemon.start().map_err(|e| format!("starting the daemon: {e}"))?;
    let inputs = spec.dir.join("inputs");
    std::fs::create_dir_all(&inputs).map_err(io_err)?;
    let shared_input = inputs.join("shared.txt");
    std::fs::write(&shared_input, format!("shared input of run {} seed {}\n", spec.tag, spec.seed)).map_err(io_err)?;
    let mut run = Run {
        spec,
        rng: StdRng::seed_from_u64(spec.seed),
        daemon,
        proxy,
        g,
        lane: 0,
        next_reqid: 100,
        report: RunReport { seed: spec.seed, dir: spec.dir.clone(), ..Default::default() },
        inputs,
        shared_input,
        pool: format!("pool:{}", pool.display()),
    };
    select(&mut run.g, &run.proxy.lane_url(LANES[0]), &spec.auth).map_err(io_err)?;
    let outcome = run.workload();
    if let Err(e) = outcome {
        run.violation(format!("workload stopped: {e}"));
    }
    run.finish();
    let mut report = run.report.clone();
    report.seconds = started.elapsed().as_secs_f64();
    let decisions = run.proxy.decisions();
    report.rpcs = decisions.len();
    for d in &decisions {
        *report.faults.entry(d.fault.label().to_string()).or_default() += 1;
    }
    // Every HTTP call ends by its deadline: a stalled or dripping reply
    // holds the daemon for its RPC timeout (a download: its stall window),
    // give or take a loaded machine's slack.
    let bound_ms = (rpc_timeout.max(Duration::from_secs(DOWNLOAD_STALL_SECS)) + HOLD_SLACK).as_millis() as u64;
    for d in &decisions {
        if let Some(ms) = d.held_ms.filter(|ms| *ms > bound_ms) {
            report.violations.push(format!(
                "a {} reply of {} (call {}) held the daemon {ms} ms, past its deadline",
                d.fault.label(),
                d.endpoint,
                d.n
            ));
        }
    }
    let text: String = decisions.iter().filter_map(|d| serde_json::to_string(d).ok()).map(|l| l + "\n").collect();
    std::fs::write(spec.dir.join("decisions.jsonl"), &text).map_err(io_err)?;
    if text.contains(spec.auth.expose()) {
        report.violations.push("the authenticator is in the proxy's decision log".into());
    }
    Ok(report)
}

impl Run<'_> {
    fn violation(&mut self, text: String) {
        self.report.violations.push(text);
    }

    fn reqid(&mut self) -> u32 {
        self.next_reqid += 1;
        self.next_reqid
    }

    /// Sends a BOINC_* command; the return line must be `S`.
    fn send(&mut self, command: AsyncCommand) -> Result<u32, String> {
        let id = self.reqid();
        self.g.submit_async(&Request::Command { reqid: ReqId(id), command: Command::Boinc(command) }).map_err(io_err)?;
        Ok(id)
    }

    fn wait(&mut self, id: u32) -> Result<Vec<String>, String> {
        self.g.wait_result(id, RESULT_WAIT).map_err(|e| format!("request {id}: {e}"))
    }

    fn call(&mut self, command: AsyncCommand) -> Result<Vec<String>, String> {
        let id = self.send(command)?;
        self.wait(id)
    }

    /// kill -9, then a new daemon on the same state, the project selected
    /// again, as the gridmanager does after losing its GAHP.
    fn kill_and_restart(&mut self, why: &str) -> Result<(), String> {
        self.g.kill();
        self.report.kills.push(why.to_string());
        self.restart()
    }

    fn restart(&mut self) -> Result<(), String> {
        self.g = self.daemon.start().map_err(|e| format!("restarting the daemon: {e}"))?;
        self.report.restarts += 1;
        self.select_lane(self.lane)
    }

    /// Selects a proxy lane's project, or the pool of both.
    fn select_lane(&mut self, lane: usize) -> Result<(), String> {
        let (url, auth) = match LANES.get(lane) {
            Some(l) => (self.proxy.lane_url(l), self.spec.auth.clone()),
            None => (self.pool.clone(), Authenticator::new("-")),
        };
        select(&mut self.g, &url, &auth).map_err(io_err)
    }

    fn switch_lane(&mut self, lane: usize) -> Result<(), String> {
        if lane != self.lane {
            self.lane = lane;
            self.select_lane(lane)?;
        }
        Ok(())
    }

    fn make_batch(&mut self, i: usize) -> Result<SubmitBatch, String> {
        let name = format!("{}_{i}", self.prefix());
        let n = self.rng.gen_range(1..=self.spec.profile.max_jobs());
        let mut jobs = Vec::new();
        for j in 0..n {
            let src = if self.rng.gen_bool(0.4) {
                self.shared_input.clone()
            } else {
                // Mostly small, now and then large enough to cross chunks.
                let size = if self.rng.gen_bool(0.1) { self.rng.gen_range(20_000..200_000) } else { self.rng.gen_range(1..2_000) };
                let line = format!("input {j} of {name} ");
                let text: String = line.chars().cycle().take(size).collect();
                let p = self.inputs.join(format!("{name}_{j}.txt"));
                std::fs::write(&p, text).map_err(io_err)?;
                p
            };
            jobs.push(JobSpec { name: format!("{name}#{j}.0"), args: vec![], inputs: vec![InputFile { src, dst_name: "in".into() }] });
        }
        Ok(SubmitBatch { batch_name: name, app_name: APP.into(), jobs, params: JobParams::default() })
    }

    fn prefix(&self) -> String {
        format!("chaos{}s{}", self.spec.tag, self.spec.seed)
    }

    fn workload(&mut self) -> Result<(), String> {
        if self.spec.profile.hostile() {
            return self.hostile_hosts();
        }
        let kill_at = self.spec.kill.then(|| self.rng.gen_range(0..self.spec.batches.max(1)));
        let kill_in_fetch = self.rng.gen_bool(0.5);
        let mut plans: Vec<BatchPlan> = Vec::new();
        // Submits in waves of three, as the gridmanager sends them while
        // earlier ones are still running.
        let mut i = 0;
        while i < self.spec.batches {
            let wave: Vec<usize> = (i..(i + 3).min(self.spec.batches)).collect();
            i += wave.len();
            let mut sent = Vec::new();
            for &b in &wave {
                // Now and then to the next lane: a, b, the pool of both.
                let lane = if self.rng.gen_bool(0.2) { (self.lane + 1) % (POOL_LANE + 1) } else { self.lane };
                self.switch_lane(lane)?;
                let req = self.make_batch(b)?;
                self.report.jobs += req.jobs.len();
                let id = self.send(AsyncCommand::Submit(req.clone()))?;
                sent.push(id);
                plans.push(BatchPlan { req, lane, ok: false, error: None });
            }
            let first = plans.len() - wave.len();
            if kill_at.is_some_and(|k| wave.contains(&k)) && !kill_in_fetch {
                std::thread::sleep(Duration::from_millis(self.rng.gen_range(0..1500)));
                self.kill_and_restart("mid-submit")?;
                // The same requests again.
                sent.clear();
                for p in &plans[first..] {
                    self.switch_lane(p.lane)?;
                    sent.push(self.send(AsyncCommand::Submit(p.req.clone()))?);
                }
            }
            for (k, id) in sent.into_iter().enumerate() {
                let r = self.wait(id)?;
                self.submit_outcome(first + k, &mut plans, r)?;
            }
        }
        self.report.batches = plans.len();
        self.report.pool_batches = plans.iter().filter(|p| p.lane == POOL_LANE).count();
        self.check_submits(&plans)?;

        // Aborts of a job now and then, leases on some batches.
        let mut aborted = BTreeSet::new();
        for p in &plans {
            if !p.ok {
                continue;
            }
            // A job's later commands name the project (or pool) it was
            // submitted to, as its grid_resource does.
            self.switch_lane(p.lane)?;
            if self.rng.gen_bool(0.15) {
                let job = p.req.jobs[self.rng.gen_range(0..p.req.jobs.len())].name.clone();
                let r = self.call(AsyncCommand::AbortJobs { jobs: vec![job.clone()] })?;
                if r.first().map(String::as_str) == Some("NULL") {
                    aborted.insert(job);
                    self.report.aborts += 1;
                } else {
                    self.violation(format!("abort of {job} failed: {r:?}"));
                }
            }
            if self.rng.gen_bool(0.3) {
                let lease_time = (now_secs() + 86_400.0 * self.spec.time_scale).floor();
                let batch = p.req.batch_name.clone();
                let r = self.call(AsyncCommand::SetLease { batch: batch.clone(), lease_time })?;
                if r.first().map(String::as_str) == Some("NULL") {
                    self.report.leases += 1;
                } else {
                    self.violation(format!("lease of {batch} failed: {r:?}"));
                }
            }
        }

        // A gridmanager busy elsewhere: its reader stalls while results pile up.
        self.g.stall_reader(Duration::from_millis(self.rng.gen_range(1000..4000)));
        let statuses = self.wait_finished(&plans)?;
        self.check_statuses(&plans, &statuses, &aborted)?;

        self.blah_jobs()?;
        self.sequences()?;
        self.fetch_all(&plans, &statuses, kill_at.is_some() && kill_in_fetch)?;
        self.full_filesystem(&statuses)?;
        self.host_faults()?;
        self.retire_all(&plans)?;
        Ok(())
    }

    fn submit_outcome(&mut self, p: usize, plans: &mut [BatchPlan], r: Vec<String>) -> Result<(), String> {
        if r.first().map(String::as_str) == Some("NULL") {
            self.report.submits_ok += 1;
            plans[p].ok = true;
            return Ok(());
        }
        self.report.submit_errors += 1;
        let text = r.join(" ");
        // What the gridmanager does after an error: the same submit again.
        // The server must then hold each job exactly once.
        self.report.resubmits += 1;
        self.switch_lane(plans[p].lane)?;
        let again = self.call(AsyncCommand::Submit(plans[p].req.clone()))?;
        if again.first().map(String::as_str) == Some("NULL") {
            plans[p].ok = true;
            self.report.submits_ok += 1;
        } else {
            self.report.submit_errors += 1;
        }
        plans[p].error = Some(text);
        Ok(())
    }

    /// The submit invariants of [`judge::submits`] against the server.
    fn check_submits(&mut self, plans: &[BatchPlan]) -> Result<(), String> {
        let server = self.spec.truth.batches(&self.prefix()).map_err(|e| format!("reading the server's truth: {e}"))?;
        let submitted: Vec<judge::Submitted> = plans
            .iter()
            .map(|p| judge::Submitted {
                batch: &p.req.batch_name,
                jobs: p.req.jobs.iter().map(|j| j.name.as_str()).collect(),
                ok: p.ok,
                error: p.error.as_deref(),
            })
            .collect();
        let found = judge::submits(&submitted, &server);
        self.report.violations.extend(found);
        Ok(())
    }

    /// Queries with min_mod_time as the gridmanager does (0, then the
    /// server time it got back) until every job is DONE or ERROR.
    fn wait_finished(&mut self, plans: &[BatchPlan]) -> Result<HashMap<String, String>, String> {
        let mut status: HashMap<String, String> = HashMap::new();
        let until = Instant::now() + self.spec.finish_wait;
        // One query per lane: a batch is asked after where it was submitted.
        let mut min_mod_time: HashMap<usize, String> = HashMap::new();
        loop {
            let mut done = true;
            for lane in 0..=POOL_LANE {
                let mine: Vec<&BatchPlan> = plans.iter().filter(|p| p.ok && p.lane == lane).collect();
                if mine.is_empty() {
                    continue;
                }
                self.switch_lane(lane)?;
                let since = min_mod_time.entry(lane).or_insert_with(|| "0".into()).clone();
                let (finished, next) = self.query_lane(&mine, &since, &mut status)?;
                min_mod_time.insert(lane, next);
                done &= finished;
            }
            if done {
                return Ok(status);
            }
            if Instant::now() > until {
                self.report.skipped.push("some jobs did not finish in time; their outputs were not fetched".into());
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// One BOINC_QUERY_BATCHES of these batches since `min_mod_time`:
    /// whether all their jobs are DONE or ERROR, and the next min_mod_time.
    fn query_lane(
        &mut self,
        plans: &[&BatchPlan],
        min_mod_time: &str,
        status: &mut HashMap<String, String>,
    ) -> Result<(bool, String), String> {
        let names: Vec<String> = plans.iter().map(|p| p.req.batch_name.clone()).collect();
        let expected: HashMap<String, &str> =
            plans.iter().flat_map(|p| p.req.jobs.iter().map(move |j| (j.name.clone(), p.req.batch_name.as_str()))).collect();
        let mut next = min_mod_time.to_string();
        {
            let r = self.call(AsyncCommand::QueryBatches { min_mod_time: min_mod_time.parse().unwrap_or(0.0), batches: names.clone() })?;
            self.report.queries += 1;
            if r.first().map(String::as_str) == Some("NULL") && r.len() >= 2 {
                let mut k = 2;
                let mut group = 0;
                while k < r.len() {
                    let n: usize = r[k].parse().map_err(|_| format!("bad query result {r:?}"))?;
                    let jobs = r.get(k + 1..k + 1 + 2 * n).ok_or_else(|| format!("query result shorter than its counts: {r:?}"))?;
                    for pair in jobs.chunks(2) {
                        match expected.get(&pair[0]) {
                            Some(b) if *b == names[group] => {
                                status.insert(pair[0].clone(), pair[1].clone());
                            }
                            _ => self.violation(format!(
                                "query of {} reported job {}",
                                names.get(group).cloned().unwrap_or_default(),
                                pair[0]
                            )),
                        }
                    }
                    k += 1 + 2 * n;
                    group += 1;
                }
                if group != names.len() {
                    self.violation(format!("query of {} batches returned {group} groups", names.len()));
                }
                next = r[1].clone();
            }
        }
        let done = expected.keys().all(|j| status.get(j).is_some_and(|s| s == "DONE" || s == "ERROR"));
        Ok((done, next))
    }

    /// What the daemon reported equals what the server holds.
    fn check_statuses(&mut self, plans: &[BatchPlan], seen: &HashMap<String, String>, aborted: &BTreeSet<String>) -> Result<(), String> {
        let server = self.spec.truth.batches(&self.prefix()).map_err(|e| format!("reading the server's truth: {e}"))?;
        let truth: HashMap<&str, &str> = server.iter().flat_map(|b| b.jobs.iter().map(|(n, s)| (n.as_str(), s.as_str()))).collect();
        for p in plans.iter().filter(|p| p.ok) {
            for j in &p.req.jobs {
                let (Some(said), Some(is)) = (seen.get(&j.name), truth.get(j.name.as_str())) else { continue };
                let final_state = |s: &str| s == "DONE" || s == "ERROR";
                if final_state(said) && said != is {
                    self.violation(format!("job {}: the daemon said {said}, the server has {is}", j.name));
                }
                if aborted.contains(&j.name) && *is == "UNSENT" {
                    self.violation(format!("job {}: aborted, still unsent on the server", j.name));
                }
            }
        }
        Ok(())
    }

    /// Retires every batch it created, a closed stdin in the middle; the
    /// server must then hold them all retired.
    fn retire_all(&mut self, plans: &[BatchPlan]) -> Result<(), String> {
        for p in plans {
            self.switch_lane(p.lane)?;
            let name = &p.req.batch_name;
            let r = self.call(AsyncCommand::RetireBatch { batch: name.clone() })?;
            if r.first().map(String::as_str) == Some("NULL") {
                self.report.retired += 1;
            }
        }
        Ok(())
    }

    /// Ends the daemon, retires what is left directly, and judges what
    /// only the end shows: everything retired, the log, the processes.
    fn finish(&mut self) {
        // Results nobody asked for would be second results.
        if let Ok(extra) = self.g.results() {
            for line in extra {
                self.violation(format!("an unclaimed result: {line:?}"));
            }
        }
        let _ = self.g.command_line(b"QUIT");
        match self.g.wait_exit(Duration::from_secs(30)) {
            Ok(Some(_)) => {}
            _ => {
                self.violation("the daemon did not exit after QUIT".into());
                self.g.kill();
            }
        }
        let left = leftover_daemons(&self.daemon.exe);
        if !left.is_empty() {
            self.violation(format!("daemon processes left behind: {left:?}"));
        }
        // BLAH batches are named `blah#<job>`: the daemon retires them on
        // its own schedule (a lease), so what is left of them is only
        // cleaned up; the others must all be retired by now.
        let prefix = self.prefix();
        for (names, judged) in [(prefix.clone(), true), (format!("blah#{prefix}"), false)] {
            match self.spec.truth.batches(&names) {
                Ok(batches) => {
                    for b in batches.iter().filter(|b| b.state != BATCH_RETIRED) {
                        if judged && !b.name.contains("_blah_") {
                            self.violation(format!("batch {} not retired on the server (state {})", b.name, b.state));
                        }
                        let _ = self.spec.truth.retire(&b.name);
                    }
                }
                Err(e) => self.violation(format!("reading the server's truth at the end: {e}")),
            }
        }
        let secret = self.spec.auth.expose().to_string();
        if let Ok(rd) = std::fs::read_dir(self.daemon.log_dir()) {
            for e in rd.flatten() {
                if std::fs::read(e.path()).is_ok_and(|t| t.windows(secret.len()).any(|w| w == secret.as_bytes())) {
                    self.violation(format!("the authenticator is in the daemon's log {}", e.path().display()));
                }
            }
        }
    }
}

pub fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
