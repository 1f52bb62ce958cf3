//! The volunteer hosts and the server daemons behind them, in one loop that
//! runs every `tick_ms`:
//!
//! * finished instances are reported (outputs moved into the upload store),
//! * instances past their deadline time out ("no reply"),
//! * the transitioner looks at changed jobs: validation (a quorum of
//!   successful instances with identical outputs gives the canonical one),
//!   error limits, new instances when more are needed,
//! * expired batches are aborted and retired, unneeded files deleted,
//! * idle hosts get unsent instances (at most one instance of a job per
//!   host) and really run the app on the inputs.
//!
//! An instance takes `rsc_fpops_est / flops` simulated seconds on its host
//! (times `straggler_factor` for stragglers); its real process runs at once
//! and its report waits until that much sim time has passed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection};
use tokio::sync::{oneshot, watch, Semaphore};

use crate::apps::{self, AppSpec, InstanceRun};
use crate::ctx::Ctx;
use crate::lifecycle;
use crate::project_db::{self, secs, Instance, Res, Workunit, NEVER};
use crate::replica;

/// Exit status of an instance the host itself failed (the `error_rate`
/// draw, or an instance that could not be started).
pub const HOST_ERROR_EXIT: i64 = -1;
/// Exit status when the app exited 0 but an output file is missing
/// (BOINC's ERR_FILE_MISSING).
pub const MISSING_OUTPUT_EXIT: i64 = -161;

/// The scheduler's view of a host (its behaviour lives in `Ctx::hosts`).
struct Host {
    id: i64,
    name: String,
    user_id: i64,
    /// The instance it is working on.
    busy: Option<i64>,
}

/// An idle host asking for work.
struct FreeHost {
    idx: usize,
    id: i64,
    name: String,
    user_id: i64,
}

enum RunOutcome {
    Ran(InstanceRun),
    HostError(String),
}

struct InFlight {
    host: usize,
    /// The host's speed when it got the instance (for the credit).
    flops: f64,
    sent_time: f64,
    report_at: f64,
    lost: bool,
    /// The host changes an output before it reports (`lie_rate`).
    lie: bool,
    slot: PathBuf,
    rx: Option<oneshot::Receiver<RunOutcome>>,
    outcome: Option<RunOutcome>,
    task: Option<tokio::task::AbortHandle>,
}

/// A finished instance to record.
struct Report {
    result_id: i64,
    host: usize,
    host_name: String,
    lie: bool,
    sent_time: f64,
    elapsed: f64,
    host_flops: f64,
    slot: PathBuf,
    outcome: RunOutcome,
}

/// An instance handed to a host.
struct Dispatch {
    result_id: i64,
    host: usize,
    app: AppSpec,
    command_line: String,
    inputs: Vec<PathBuf>,
    fpops_est: f64,
    fpops_bound: f64,
    sent_time: f64,
}

pub struct Engine {
    ctx: Arc<Ctx>,
    hosts: Vec<Host>,
    inflight: HashMap<i64, InFlight>,
    rng: StdRng,
    runs: Arc<Semaphore>,
}

impl Engine {
    pub fn new(ctx: Arc<Ctx>) -> Engine {
        let hosts = ctx.hosts().into_iter().map(|h| Host { id: h.id, name: h.name, user_id: h.user_id, busy: None }).collect();
        let rng = StdRng::seed_from_u64(ctx.cfg.seed);
        let runs = Arc::new(Semaphore::new(ctx.cfg.max_parallel_runs));
        Engine { ctx, hosts, inflight: HashMap::new(), rng, runs }
    }

    /// Runs rounds until `stop` turns true; then kills running instances.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.resume().await;
        // The first round a tick after the start, not at once: a test that
        // sets a long tick gets no round at all (an immediate one could
        // run late, after its first requests, on a busy machine).
        let period = Duration::from_millis(self.ctx.cfg.tick_ms);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            if *stop.borrow() {
                break;
            }
            self.round().await;
        }
        for f in self.inflight.values() {
            if let Some(t) = &f.task {
                t.abort();
            }
        }
        let ctx = self.ctx.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let c = ctx.store.lock();
            let _ = project_db::meta_set(&c, "sim_time", &ctx.clock.now().to_string());
        })
        .await;
    }

    /// After a restart: the hosts go on with the instances they had (a
    /// volunteer's client keeps computing while the server is down), so
    /// each instance in progress on a host that still exists runs again
    /// and reports as if it had never stopped.
    async fn resume(&mut self) {
        let ctx = self.ctx.clone();
        let host_ids: Vec<i64> = self.hosts.iter().map(|h| h.id).collect();
        let res = tokio::task::spawn_blocking(move || {
            let c = ctx.store.lock();
            resume_db(&ctx, &c, &host_ids)
        })
        .await;
        match res {
            Ok(Ok(list)) => {
                if !list.is_empty() {
                    tracing::info!(instances = list.len(), "hosts resume their instances");
                }
                for d in list {
                    self.start_instance(d);
                }
            }
            Ok(Err(e)) => tracing::error!(error = %e, "can't resume instances in progress"),
            Err(e) => tracing::error!(error = %e, "resuming instances panicked"),
        }
    }

    async fn round(&mut self) {
        let now = self.ctx.clock.now();
        let mut reports = Vec::new();
        let mut done = Vec::new();
        for (id, f) in self.inflight.iter_mut() {
            if f.outcome.is_none() {
                if let Some(rx) = f.rx.as_mut() {
                    match rx.try_recv() {
                        Ok(o) => f.outcome = Some(o),
                        Err(oneshot::error::TryRecvError::Empty) => {}
                        Err(oneshot::error::TryRecvError::Closed) => f.outcome = Some(RunOutcome::HostError("the run was lost".into())),
                    }
                }
            }
            if now < f.report_at {
                continue;
            }
            // A lost instance just frees its host; others report once run.
            if f.lost || f.outcome.is_some() {
                done.push(*id);
            }
        }
        for id in done {
            let Some(f) = self.inflight.remove(&id) else {
                continue;
            };
            self.hosts[f.host].busy = None;
            if f.lost {
                // Never run, so no work directory to clean.
                tracing::debug!(result = id, host = %self.hosts[f.host].name, "instance lost");
                continue;
            }
            reports.push(Report {
                result_id: id,
                host: f.host,
                host_name: self.hosts[f.host].name.clone(),
                lie: f.lie,
                sent_time: f.sent_time,
                // The planned time, or longer when the real run took longer
                // (it reports only once the process has finished).
                elapsed: now.max(f.report_at) - f.sent_time,
                host_flops: f.flops,
                slot: f.slot,
                outcome: f.outcome.unwrap_or(RunOutcome::HostError("no outcome".into())),
            });
        }
        let free: Vec<FreeHost> = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.busy.is_none())
            .map(|(idx, h)| FreeHost { idx, id: h.id, name: h.name.clone(), user_id: h.user_id })
            .collect();

        let ctx = self.ctx.clone();
        let res = tokio::task::spawn_blocking(move || {
            let c = ctx.store.lock();
            round_db(&ctx, &c, now, reports, &free)
        })
        .await;
        let dispatches = match res {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "scheduler round failed");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "scheduler round panicked");
                return;
            }
        };
        for d in dispatches {
            self.start_instance(d);
        }
    }

    fn start_instance(&mut self, d: Dispatch) {
        // The behaviour in force now (it may have changed at run time).
        let Some(b) = self.ctx.host_behaviour(d.host) else {
            return;
        };
        let h = &mut self.hosts[d.host];
        h.busy = Some(d.result_id);
        let factor = if self.rng.gen::<f64>() < b.straggler_rate { b.straggler_factor } else { 1.0 };
        let lost = self.rng.gen::<f64>() < b.lost_rate;
        let host_error = self.rng.gen::<f64>() < b.error_rate;
        // No draw for honest hosts: seeds keep their old sequences.
        let lie = b.lie_rate > 0.0 && self.rng.gen::<f64>() < b.lie_rate;
        let mut duration = d.fpops_est / b.flops * factor;
        // The client ends an instance that runs longer than rsc_fpops_bound
        // / flops (BOINC's max_elapsed_time). Its run time is the planned
        // one, or the real process's time on the sim clock; a straggler's
        // extra time is time the host does not run it, which does not count.
        let limit = (d.fpops_bound.is_finite() && d.fpops_bound > 0.0).then(|| d.fpops_bound / b.flops);
        let limit_msg = |l: f64| format!("exceeded elapsed time limit {l:.2} ({:.2}G/{:.2}G)", d.fpops_bound / 1e9, b.flops / 1e9);
        let over = limit.filter(|l| d.fpops_est / b.flops > *l);
        if let Some(l) = over {
            duration = l * factor;
        }
        let slot = self.ctx.dirs.slots.join(d.result_id.to_string());
        let mut f = InFlight {
            host: d.host,
            flops: b.flops,
            sent_time: d.sent_time,
            report_at: d.sent_time + duration,
            lost,
            lie,
            slot: slot.clone(),
            rx: None,
            outcome: None,
            task: None,
        };
        tracing::debug!(result = d.result_id, host = %h.name, duration, lost, host_error, "instance dispatched");
        if lost {
            // The host vanishes with it: nothing to compute.
        } else if host_error {
            f.outcome = Some(RunOutcome::HostError(format!("simulated failure on host {}", h.name)));
        } else if let Some(l) = over {
            // Killed at the limit whatever it would have made: not run.
            f.outcome = Some(RunOutcome::Ran(InstanceRun {
                exit_status: apps::EXIT_TIME_LIMIT_EXCEEDED,
                stderr: apps::wrap_stderr("", Some(&limit_msg(l))),
                outputs: vec![None; d.app.outputs.len()],
                wall_secs: 0.0,
                cpu_secs: 0.0,
                timed_out: true,
            }));
        } else {
            let (tx, rx) = oneshot::channel();
            let runs = self.runs.clone();
            let exe = self.ctx.app_exe.clone();
            // The limit in real seconds: the process runs on the real clock.
            let run_timeout = self.ctx.cfg.run_timeout_secs;
            let (secs, msg) = match limit.map(|l| (l / self.ctx.clock.scale(), l)) {
                Some((real, l)) if real < run_timeout => (real, Some(limit_msg(l))),
                _ => (run_timeout, None),
            };
            let timeout = Duration::from_secs_f64(secs.max(0.001));
            let task = tokio::spawn(async move {
                let _permit = runs.acquire_owned().await;
                let out = match apps::run_instance_with(&d.app, &exe, &d.command_line, &d.inputs, &slot, timeout, msg).await {
                    Ok(run) => RunOutcome::Ran(run),
                    Err(e) => RunOutcome::HostError(format!("can't start the app: {e}")),
                };
                let _ = tx.send(out);
            });
            f.rx = Some(rx);
            f.task = Some(task.abort_handle());
        }
        self.inflight.insert(d.result_id, f);
    }
}

/// One round of database work; returns the instances to start.
fn round_db(ctx: &Ctx, c: &Connection, now: f64, reports: Vec<Report>, free: &[FreeHost]) -> Res<Vec<Dispatch>> {
    let tx = c.unchecked_transaction()?;
    for r in reports {
        let slot = r.slot.clone();
        apply_report(ctx, &tx, r, now)?;
        let _ = std::fs::remove_dir_all(slot);
    }
    time_out(&tx, now)?;
    let due = project_db::wus_due(&tx, now, ctx.cfg.transition_batch)?;
    for wu in due {
        transition(&tx, &wu, now)?;
    }
    lifecycle::expire_batches(&tx, now)?;
    lifecycle::collect_garbage(ctx, &tx, now)?;
    let d = dispatch(ctx, &tx, now, free)?;
    project_db::meta_set(&tx, "sim_time", &now.to_string())?;
    tx.commit()?;
    Ok(d)
}

/// Rounds to microseconds (what the client reports).
fn micro(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// A physical name for output `i` of an instance: `<instance>_r<rand>_<i>`.
fn output_name(instance: &str, i: usize) -> String {
    let mut base: String = instance.chars().map(|c| if c == '/' || c == '\0' { '_' } else { c }).collect();
    if base.len() > 200 {
        let mut cut = 200;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    format!("{base}_r{}_{i}", rand::thread_rng().gen_range(0..1_000_000_000u32))
}

fn apply_report(ctx: &Ctx, c: &Connection, r: Report, now: f64) -> Res<()> {
    let Some(x) = project_db::result_by_id(c, r.result_id)? else {
        return Ok(());
    };
    if x.server_state != project_db::RS_IN_PROGRESS || x.sent_time != r.sent_time {
        // Timed out meanwhile: the late report is dropped.
        tracing::debug!(result = x.id, "late report dropped");
        return Ok(());
    }
    let elapsed = micro(r.elapsed);
    // The simulated host took `r.elapsed`; it was as busy as the real run
    // was (measured CPU over wall time of the process).
    let busy = match &r.outcome {
        RunOutcome::Ran(run) if run.wall_secs > 0.0 => (run.cpu_secs / run.wall_secs).clamp(0.0, 1.0),
        _ => 0.0,
    };
    let cpu = micro(r.elapsed * busy);
    // The outputs of a retired batch are not kept (its files are gone).
    let keep_outputs = project_db::batch_by_id(c, x.batch)?.map(|b| b.state != project_db::BATCH_RETIRED).unwrap_or(false);
    let wu = project_db::wu_by_id(c, x.workunitid)?;
    let app = wu.as_ref().and_then(|w| ctx.app_by_id(w.appid));
    // A hostile host sends an output zip of its own (the fault plan's
    // hostile_outputs, hostile.rs), before anything reads it.
    let mut r = r;
    if let (Some(w), Some(a), RunOutcome::Ran(run)) = (&wu, app, &mut r.outcome) {
        crate::hostile::tamper(ctx, &a.spec, w, &x, run);
    }
    let optional = |i: usize| app.is_some_and(|a| a.spec.output_is_optional(i));
    let runner_zip = |i: usize| app.is_some_and(|a| a.spec.outputs.get(i).is_some_and(|n| n == crate::apps::runner::OUT_ZIP));
    let quorum = wu.as_ref().is_some_and(|w| w.min_quorum > 1);
    // A runner's zip that its validator would refuse (replica.rs).
    let mut refused = None;
    let (outcome, exit_status, stderr, outputs, hash) = match r.outcome {
        RunOutcome::HostError(msg) => {
            (project_db::OUTCOME_CLIENT_ERROR, HOST_ERROR_EXIT, apps::wrap_stderr("", Some(&msg)), Vec::new(), String::new())
        }
        RunOutcome::Ran(run) => {
            // A missing optional output is no error (the client just does
            // not upload it).
            let complete = run.outputs.iter().enumerate().all(|(i, o)| o.is_some() || optional(i));
            if run.exit_status != 0 {
                (project_db::OUTCOME_CLIENT_ERROR, run.exit_status as i64, run.stderr, Vec::new(), String::new())
            } else if !complete {
                (project_db::OUTCOME_CLIENT_ERROR, MISSING_OUTPUT_EXIT, run.stderr, Vec::new(), String::new())
            } else {
                let mut names = Vec::new();
                let mut h = Md5::new();
                for (i, p) in run.outputs.iter().enumerate() {
                    if let Some(p) = p {
                        if let Err(e) = host_copy(p, runner_zip(i), quorum, (r.host, &r.host_name, r.lie)) {
                            tracing::info!(result = x.id, host = %r.host_name, error = %e, "a runner's output is refused");
                            refused = Some(e);
                        }
                    }
                    // Every output gets its physical name (the result's
                    // record names them all); an absent optional one has
                    // no file in the upload store.
                    let name = output_name(&x.name, i);
                    let Some(p) = p else {
                        h.update(u64::MAX.to_le_bytes());
                        names.push(name);
                        continue;
                    };
                    let data = std::fs::read(p)?;
                    // Replicas of a runner job agree on what their zips
                    // hold, whatever their bytes (replica.rs).
                    match (quorum && runner_zip(i) && refused.is_none()).then(|| replica::digest(p)) {
                        Some(Ok(d)) => h.update(d.as_bytes()),
                        Some(Err(e)) => refused = Some(e),
                        None => {
                            h.update((data.len() as u64).to_le_bytes());
                            h.update(&data);
                        }
                    }
                    if keep_outputs {
                        let dst = ctx.dirs.upload.join(&name);
                        if std::fs::rename(p, &dst).is_err() {
                            std::fs::write(&dst, &data)?;
                        }
                    }
                    names.push(name);
                }
                (project_db::OUTCOME_SUCCESS, 0, run.stderr, names, crate::files::hex(&h.finalize()))
            }
        }
    };
    // Cobblestones: 200 per day of 1 GFLOPS.
    let credit = if outcome == project_db::OUTCOME_SUCCESS { cpu * r.host_flops / 1e9 * 200.0 / 86400.0 } else { 0.0 };
    // Reported after the canonical instance was chosen: compared with it.
    let mut validate_state = project_db::VALIDATE_INIT;
    if refused.is_some() && outcome == project_db::OUTCOME_SUCCESS {
        // As a validator's init_result refusing it: never part of a quorum.
        validate_state = project_db::VALIDATE_INVALID;
    } else if let Some(wu) = &wu {
        if wu.canonical_resultid != 0 && outcome == project_db::OUTCOME_SUCCESS {
            let canon = project_db::result_by_id(c, wu.canonical_resultid)?;
            validate_state = match canon {
                Some(k) if k.output_hash == hash => project_db::VALIDATE_VALID,
                _ => project_db::VALIDATE_INVALID,
            };
        }
    }
    c.prepare_cached(
        "UPDATE result SET server_state = 5, outcome = ?1, exit_status = ?2, elapsed_time = ?3, \
         cpu_time = ?4, stderr_out = ?5, output_files = ?6, output_hash = ?7, received_time = ?8, \
         validate_state = ?9, granted_credit = ?10 WHERE id = ?11",
    )?
    .execute(params![outcome, exit_status, elapsed, cpu, stderr, outputs.join("\n"), hash, now, validate_state, credit, x.id])?;
    project_db::set_transition_time(c, x.workunitid, now)?;
    Ok(())
}

/// What the host reports of output `path`: a runner's zip of a quorum job
/// zipped at the host's own time; a liar's changed. Only a zip the
/// validator would read is rewritten (never a bomb).
fn host_copy(path: &std::path::Path, runner_zip: bool, quorum: bool, host: (usize, &str, bool)) -> Result<(), replica::Refused> {
    let (host, host_name, lie) = host;
    if !runner_zip {
        if lie {
            replica::lie_plain(path, host_name)?;
        }
        return Ok(());
    }
    if !(quorum || lie) {
        return Ok(());
    }
    match replica::digest(path) {
        Ok(_) => {}
        // A quorum job's refused zip is invalid; with one result a host's
        // zip is the daemon's to judge.
        Err(e) if quorum => return Err(e),
        Err(_) => return Ok(()),
    }
    if quorum {
        replica::restamp(path, host)?;
    }
    if lie {
        replica::lie(path, host_name)?;
    }
    Ok(())
}

/// Instances past their deadline: over, "no reply".
fn time_out(c: &Connection, now: f64) -> Res<()> {
    let late: Vec<(i64, i64)> = c
        .prepare_cached("SELECT id, workunitid FROM result WHERE server_state = 4 AND report_deadline < ?1")?
        .query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, wu) in late {
        tracing::debug!(result = id, "instance timed out");
        c.prepare_cached("UPDATE result SET server_state = 5, outcome = 4 WHERE id = ?1")?.execute([id])?;
        project_db::set_transition_time(c, wu, now)?;
    }
    Ok(())
}

/// Validation, error limits and new instances for one job.
fn transition(c: &Connection, wu: &Workunit, now: f64) -> Res<()> {
    let mut results: Vec<Instance> = project_db::results_of_wu(c, wu.id)?;
    let mut canonical = wu.canonical_resultid;
    let mut error_mask = wu.error_mask;
    let mut target = wu.target_nresults;

    if canonical == 0 && error_mask == 0 {
        let ok: Vec<usize> = (0..results.len())
            .filter(|&i| results[i].outcome == project_db::OUTCOME_SUCCESS && results[i].validate_state != project_db::VALIDATE_INVALID)
            .collect();
        if ok.len() as i64 >= wu.min_quorum {
            // Group identical outputs; the first group to reach the quorum wins.
            let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
            for &i in &ok {
                match groups.iter_mut().find(|(h, _)| *h == results[i].output_hash) {
                    Some((_, g)) => g.push(i),
                    None => groups.push((results[i].output_hash.clone(), vec![i])),
                }
            }
            let winner = groups.iter().filter(|(_, g)| g.len() as i64 >= wu.min_quorum).min_by_key(|(_, g)| results[g[0]].id);
            match winner {
                Some((hash, g)) => {
                    canonical = results[g[0]].id;
                    for &i in &ok {
                        results[i].validate_state =
                            if results[i].output_hash == *hash { project_db::VALIDATE_VALID } else { project_db::VALIDATE_INVALID };
                    }
                }
                None => {
                    for &i in &ok {
                        results[i].validate_state = project_db::VALIDATE_INCONCLUSIVE;
                    }
                    target = target.max(ok.len() as i64 + 1);
                }
            }
            for &i in &ok {
                c.prepare_cached("UPDATE result SET validate_state = ?1 WHERE id = ?2")?
                    .execute(params![results[i].validate_state, results[i].id])?;
            }
        }
    }

    let count = |f: &dyn Fn(&Instance) -> bool| results.iter().filter(|x| f(x)).count() as i64;
    let nunsent = count(&|x| x.server_state == project_db::RS_UNSENT);
    let ninprog = count(&|x| x.server_state == project_db::RS_IN_PROGRESS);
    let nsuccess = count(&|x| x.outcome == project_db::OUTCOME_SUCCESS && x.validate_state != project_db::VALIDATE_INVALID);
    let nerrors = count(&|x| {
        matches!(x.outcome, project_db::OUTCOME_CLIENT_ERROR | project_db::OUTCOME_VALIDATE_ERROR)
            || (x.outcome == project_db::OUTCOME_SUCCESS && x.validate_state == project_db::VALIDATE_INVALID)
    });
    let ntotal = results.len() as i64;

    if canonical == 0 && error_mask == 0 {
        if nerrors > wu.max_error_results {
            error_mask |= project_db::WU_ERROR_TOO_MANY_ERRORS;
        } else if nsuccess > wu.max_success_results {
            error_mask |= project_db::WU_ERROR_TOO_MANY_SUCCESS;
        } else {
            let need = target - nunsent - ninprog - nsuccess;
            if need > 0 {
                if ntotal + need > wu.max_total_results {
                    error_mask |= project_db::WU_ERROR_TOO_MANY_TOTAL;
                } else if project_db::wu_target(c, wu.id)?.is_some() {
                    // TRANSITION_NO_NEW_RESULTS: the scheduler makes the
                    // instance when the target asks for work.
                } else {
                    let mut ins = c.prepare_cached("INSERT INTO result (name, workunitid, batch, server_state) VALUES (?1, ?2, ?3, 2)")?;
                    for k in 0..need {
                        ins.execute(params![format!("{}_{}", wu.name, ntotal + k), wu.id, wu.batch])?;
                    }
                }
            }
        }
    }
    if canonical != 0 || error_mask != 0 {
        c.prepare_cached("UPDATE result SET server_state = 5, outcome = 5 WHERE workunitid = ?1 AND server_state = 2")?.execute([wu.id])?;
    }
    if target != wu.target_nresults {
        c.prepare_cached("UPDATE workunit SET target_nresults = ?1 WHERE id = ?2")?.execute(params![target, wu.id])?;
    }
    project_db::set_wu_outcome(c, wu, canonical, error_mask, now)?;
    project_db::set_transition_time(c, wu.id, NEVER)
}

/// The instances in progress on hosts of the current configuration (host
/// `i` has id `i + 1`), as dispatches with their original send time.
fn resume_db(ctx: &Ctx, c: &Connection, host_ids: &[i64]) -> Res<Vec<Dispatch>> {
    let rows: Vec<(i64, i64, f64, i64)> = c
        .prepare_cached("SELECT id, host_id, sent_time, workunitid FROM result WHERE server_state = 4 ORDER BY id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    let mut busy = std::collections::HashSet::new();
    for (rid, host_id, sent_time, wuid) in rows {
        let Some(host) = host_ids.iter().position(|h| *h == host_id) else {
            continue;
        };
        // One instance per host at a time.
        if !busy.insert(host) {
            continue;
        }
        let Some(wu) = project_db::wu_by_id(c, wuid)? else {
            continue;
        };
        let Some(app) = ctx.app_by_id(wu.appid) else {
            continue;
        };
        out.push(Dispatch {
            result_id: rid,
            host,
            app: app.spec.clone(),
            command_line: wu.command_line.clone(),
            inputs: wu.input_files.iter().map(|f| ctx.dirs.download.join(f)).collect(),
            fpops_est: wu.rsc_fpops_est,
            fpops_bound: wu.rsc_fpops_bound,
            sent_time,
        });
    }
    Ok(out)
}

/// Gives work to idle hosts: first a job targeted at the host (or its
/// owner) that needs an instance, made on the spot as BOINC's scheduler
/// does; else the oldest unsent instance. Never two instances of one job to
/// the same host.
fn dispatch(ctx: &Ctx, c: &Connection, now: f64, free: &[FreeHost]) -> Res<Vec<Dispatch>> {
    let mut out = Vec::new();
    if free.is_empty() {
        return Ok(out);
    }
    let limit = (free.len() * 4 + 16) as i64;
    let mut candidates: Vec<Option<(i64, i64)>> = c
        .prepare_cached("SELECT id, workunitid FROM result WHERE server_state = 2 ORDER BY id LIMIT ?1")?
        .query_map([limit], |r| Ok(Some((r.get(0)?, r.get(1)?))))?
        .collect::<rusqlite::Result<_>>()?;
    for host in free {
        let mut picked = targeted_instance(c, host, now)?;
        if picked.is_none() {
            for slot in candidates.iter_mut() {
                let Some((rid, wuid)) = *slot else { continue };
                if !ran_on(c, wuid, host.id)? {
                    picked = Some((rid, wuid));
                    *slot = None;
                    break;
                }
            }
        }
        let Some((rid, wuid)) = picked else { continue };
        let Some(wu) = project_db::wu_by_id(c, wuid)? else { continue };
        let Some(app) = ctx.app_by_id(wu.appid) else {
            tracing::warn!(job = %wu.name, "job of an app the sim no longer has; left unsent");
            continue;
        };
        c.prepare_cached(
            "UPDATE result SET server_state = 4, sent_time = ?1, report_deadline = ?2, host_id = ?3, \
             host_name = ?4 WHERE id = ?5",
        )?
        .execute(params![now, now + wu.delay_bound, host.id, host.name, rid])?;
        if !wu.ever_sent {
            if ctx.cfg.quirks.first_dispatch_bumps_mod_time {
                c.prepare_cached("UPDATE workunit SET ever_sent = 1, mod_time = ?1 WHERE id = ?2")?.execute(params![secs(now), wu.id])?;
            } else {
                c.prepare_cached("UPDATE workunit SET ever_sent = 1 WHERE id = ?1")?.execute([wu.id])?;
            }
        }
        out.push(Dispatch {
            result_id: rid,
            host: host.idx,
            app: app.spec.clone(),
            command_line: wu.command_line.clone(),
            inputs: wu.input_files.iter().map(|f| ctx.dirs.download.join(f)).collect(),
            fpops_est: wu.rsc_fpops_est,
            fpops_bound: wu.rsc_fpops_bound,
            sent_time: now,
        });
    }
    Ok(out)
}

/// Whether an instance of job `wuid` was ever sent to host `host_id`.
fn ran_on(c: &Connection, wuid: i64, host_id: i64) -> Res<bool> {
    Ok(c.prepare_cached("SELECT 1 FROM result WHERE workunitid = ?1 AND host_id = ?2 LIMIT 1")?.exists(params![wuid, host_id])?)
}

/// A new unsent instance of the first job targeted at `host` (by host, or
/// by its owner) that needs one, as BOINC's `send_targeted_jobs`: not
/// errored or done, no transition pending, never sent to this host, and
/// fewer unsent, in-progress and successful instances than its target.
fn targeted_instance(c: &Connection, host: &FreeHost, now: f64) -> Res<Option<(i64, i64)>> {
    use crate::rpc::submit_rpc::{ASSIGN_HOST, ASSIGN_USER};
    // Done, errored and already-tried jobs are filtered here: the
    // assignments stay for ever, and a stalled host's jobs pile up.
    let wus: Vec<i64> = c
        .prepare_cached(
            "SELECT a.workunitid FROM assignment a JOIN workunit w ON w.id = a.workunitid \
             WHERE ((a.target_type = ?1 AND a.target_id = ?2) OR (a.target_type = ?3 AND a.target_id = ?4 AND ?4 != 0)) \
             AND w.error_mask = 0 AND w.canonical_resultid = 0 AND w.transition_time > ?5 \
             AND NOT EXISTS (SELECT 1 FROM result r WHERE r.workunitid = a.workunitid AND r.host_id = ?2) \
             ORDER BY a.id",
        )?
        .query_map(params![ASSIGN_HOST, host.id, ASSIGN_USER, host.user_id, now], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for wuid in wus {
        let Some(wu) = project_db::wu_by_id(c, wuid)? else { continue };
        let results = project_db::results_of_wu(c, wu.id)?;
        let live = results
            .iter()
            .filter(|x| {
                x.server_state != project_db::RS_OVER
                    || (x.outcome == project_db::OUTCOME_SUCCESS && x.validate_state != project_db::VALIDATE_INVALID)
            })
            .count() as i64;
        if wu.target_nresults - live <= 0 {
            continue;
        }
        c.prepare_cached("INSERT INTO result (name, workunitid, batch, server_state) VALUES (?1, ?2, ?3, 2)")?.execute(params![
            format!("{}_{}", wu.name, results.len()),
            wu.id,
            wu.batch
        ])?;
        return Ok(Some((c.last_insert_rowid(), wu.id)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project_db::Store;

    /// A job with successful instances whose outputs hash as given.
    fn job_with(hashes: &[&str], min_quorum: i64, target: i64) -> (Store, i64) {
        let s = Store::open(std::path::Path::new(":memory:")).unwrap();
        {
            let c = s.lock();
            c.execute(
                "INSERT INTO workunit (name, appid, batch, create_time, mod_time, transition_time, \
                 rsc_fpops_est, rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, delay_bound, \
                 min_quorum, target_nresults, max_error_results, max_total_results, max_success_results) \
                 VALUES ('j', 1, 1, 0, 0, 0, 1e9, 1e13, 1e8, 1e8, 100, ?1, ?2, 3, 10, 6)",
                params![min_quorum, target],
            )
            .unwrap();
            for (i, h) in hashes.iter().enumerate() {
                c.execute(
                    "INSERT INTO result (name, workunitid, batch, server_state, outcome, output_hash) \
                     VALUES (?1, 1, 1, 5, 1, ?2)",
                    params![format!("j_{i}"), h],
                )
                .unwrap();
            }
        }
        (s, 1)
    }

    fn run(s: &Store, id: i64) -> (Workunit, Vec<Instance>) {
        let c = s.lock();
        let wu = project_db::wu_by_id(&c, id).unwrap().unwrap();
        transition(&c, &wu, 1000.0).unwrap();
        (project_db::wu_by_id(&c, id).unwrap().unwrap(), project_db::results_of_wu(&c, id).unwrap())
    }

    #[test]
    fn a_quorum_of_identical_outputs_gives_the_canonical_instance() {
        let (s, id) = job_with(&["a", "b", "a"], 2, 3);
        let (wu, xs) = run(&s, id);
        assert_eq!(wu.canonical_resultid, xs[0].id);
        assert_eq!(wu.mod_time, 1000);
        let states: Vec<i64> = xs.iter().map(|x| x.validate_state).collect();
        assert_eq!(states, [1, 2, 1]);
    }

    #[test]
    fn disagreement_asks_for_one_more_instance() {
        let (s, id) = job_with(&["a", "b"], 2, 2);
        let (wu, xs) = run(&s, id);
        assert_eq!((wu.canonical_resultid, wu.error_mask), (0, 0));
        assert_eq!(wu.target_nresults, 3);
        assert_eq!(xs.len(), 3);
        assert_eq!((xs[2].name.as_str(), xs[2].server_state), ("j_2", project_db::RS_UNSENT));
        assert!(xs[..2].iter().all(|x| x.validate_state == project_db::VALIDATE_INCONCLUSIVE));
        assert_eq!(wu.mod_time, 0, "no change of the job's own fields, no bump");
    }

    #[test]
    fn too_many_successes_without_agreement_is_an_error() {
        let (s, id) = job_with(&["a", "b", "c", "d", "e", "f", "g"], 2, 2);
        let (wu, _) = run(&s, id);
        assert_eq!(wu.error_mask, project_db::WU_ERROR_TOO_MANY_SUCCESS);
        assert_eq!(wu.mod_time, 1000);
    }
}
