//! The submit host's own faults: the state directory's and the log's disk
//! full, an output disk full under a stderr file that is appended to, a
//! garbled or truncated state database, and a lost state directory. A
//! daemon of its own runs on a small tmpfs in a private mount namespace
//! (root only; skipped, and said, elsewhere), through the same fault
//! proxy, judged by the usual invariants: one result per request, nothing
//! made twice, no file half-written.

use std::process::Stdio;

use gahp_testkit::tmpfs::FILLER;
use gahp_testkit::PrivateTmpfs;

use super::*;

/// Batches submitted around the faults.
const HOST_BATCHES: usize = 3;

/// The stderr file's text before the fetches append to it.
const OLD_STDERR: &[u8] = b"the stderr of an earlier fetch\n";

impl Run<'_> {
    pub(super) fn host_faults(&mut self) -> Result<(), String> {
        let dir = self.spec.dir.join("hostfs");
        let fs = match PrivateTmpfs::mount(&dir, "2m") {
            Ok(fs) => fs,
            Err(why) => {
                self.report.skipped.push(format!("the host's full disk and lost state: {why}"));
                return Ok(());
            }
        };
        // Its own RNG: the other phases' decisions stay as they were.
        let mut rng = StdRng::seed_from_u64(self.spec.seed ^ 0xd15c_f011);
        let batches: Vec<SubmitBatch> = (0..HOST_BATCHES).map(|k| self.host_batch(k, &mut rng)).collect::<Result<_, _>>()?;
        let mut host = HostDaemon::start(self, &fs)?;

        // With room: the first batch, and its outputs' directory with an
        // earlier stderr text in it.
        let first = host.submit_until_ok(self, &batches[0])?;
        let out = fs.view().join("out");
        std::fs::create_dir_all(&out).map_err(io_err)?;
        std::fs::write(out.join("stderr"), OLD_STDERR).map_err(io_err)?;

        // Full: state, log and outputs. Each request gets one result; the
        // daemon goes on.
        fs.fill().map_err(|e| format!("filling the tmpfs: {e}"))?;
        let mut errors: Vec<Option<String>> = vec![None; batches.len()];
        for (k, b) in batches.iter().enumerate().skip(1) {
            let r = host.call(self, AsyncCommand::Submit(b.clone()))?;
            if r.first().map(String::as_str) != Some("NULL") {
                errors[k] = Some(r.join(" "));
            }
        }
        let finished = self.host_wait_finished(&mut host, &batches[0])?;
        if finished {
            host.fetch_judged(self, &fs, &batches[0].jobs[0].name)?;
        }
        match host.g.command_line(b"COMMANDS") {
            Ok(c) if c.iter().any(|c| c == "BOINC_SUBMIT") => {}
            other => self.violation(format!("with its disks full the daemon stopped answering: {other:?}")),
        }

        // Space back: every batch again, as the gridmanager resubmits.
        fs.free().map_err(io_err)?;
        let mut oks = vec![first];
        for b in &batches[1..] {
            oks.push(host.submit_until_ok(self, b)?);
        }
        if finished {
            host.fetch_judged(self, &fs, &batches[0].jobs[0].name)?;
        }
        self.host_judge(&batches, &errors, &oks)?;

        // A garbled or truncated state database after a kill -9, then no
        // state directory at all: the daemon starts each time, and the same
        // submits again make nothing twice.
        host.g.kill();
        self.report.kills.push("host faults: before damaging the state database".into());
        let db = fs.view().join("state/state.sqlite3");
        // The file damaged with its write-ahead log gone (as a restore of
        // the file alone leaves it): the damage is to the database, not
        // to a log that would stand in for it. (SQLite resolves the
        // holder's root link, so no checkpoint can be made from here.)
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(fs.view().join(format!("state/state.sqlite3{suffix}")));
        }
        let damage = if rng.gen_bool(0.5) {
            let garbage: Vec<u8> = (0..rng.gen_range(100..8000)).map(|_| rng.gen()).collect();
            std::fs::write(&db, garbage).map_err(io_err)?;
            "garbled"
        } else {
            // At least a page (4 KiB) short of what its header says.
            let len = std::fs::metadata(&db).map_err(io_err)?.len();
            let cut = rng.gen_range(1..len.saturating_sub(4096).max(2));
            std::fs::OpenOptions::new().write(true).open(&db).and_then(|f| f.set_len(cut)).map_err(io_err)?;
            "truncated"
        };
        host = HostDaemon::start(self, &fs).map_err(|e| format!("with its state database {damage}: {e}"))?;
        let said = std::fs::read_to_string(&host.stderr).unwrap_or_default();
        if !said.contains("moved aside to") {
            self.violation(format!("the {damage} state database was not said to be moved aside: {said:?}"));
        }
        for b in &batches {
            host.submit_until_ok(self, b)?;
        }
        host.g.kill();
        std::fs::remove_dir_all(fs.view().join("state")).map_err(io_err)?;
        host = HostDaemon::start(self, &fs).map_err(|e| format!("with its state directory gone: {e}"))?;
        let mut oks = Vec::new();
        for b in &batches {
            oks.push(host.submit_until_ok(self, b)?);
        }
        self.host_judge(&batches, &errors, &oks)?;
        host.quit(self);
        for b in &batches {
            let _ = self.spec.truth.retire(&b.batch_name);
        }
        Ok(())
    }

    fn host_batch(&mut self, k: usize, rng: &mut StdRng) -> Result<SubmitBatch, String> {
        let name = format!("{}_host{k}", self.prefix());
        let jobs = (0..rng.gen_range(1..=3))
            .map(|j| {
                let p = self.inputs.join(format!("{name}_{j}.txt"));
                std::fs::write(&p, format!("input {j} of {name}\n")).map_err(io_err)?;
                Ok(JobSpec { name: format!("{name}#{j}.0"), args: vec![], inputs: vec![InputFile { src: p, dst_name: "in".into() }] })
            })
            .collect::<Result<_, String>>()?;
        Ok(SubmitBatch { batch_name: name, app_name: APP.into(), jobs, params: JobParams::default() })
    }

    /// Whether the batch's jobs all finished DONE within the run's wait.
    fn host_wait_finished(&mut self, host: &mut HostDaemon, b: &SubmitBatch) -> Result<bool, String> {
        let until = Instant::now() + self.spec.finish_wait;
        loop {
            let r = host.call(self, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![b.batch_name.clone()] })?;
            let states: Vec<&str> = r.iter().skip(4).step_by(2).map(String::as_str).collect();
            if r.first().map(String::as_str) == Some("NULL") && states.len() == b.jobs.len() && states.iter().all(|s| *s == "DONE") {
                return Ok(true);
            }
            if Instant::now() > until {
                self.report.skipped.push(format!("host faults: {} did not finish; its fetch was not tried", b.batch_name));
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Every batch made once, all its jobs there.
    fn host_judge(&mut self, batches: &[SubmitBatch], errors: &[Option<String>], oks: &[bool]) -> Result<(), String> {
        let server = self.spec.truth.batches(&format!("{}_host", self.prefix())).map_err(|e| format!("reading the server's truth: {e}"))?;
        let submitted: Vec<judge::Submitted> = batches
            .iter()
            .zip(errors.iter().zip(oks))
            .map(|(b, (e, ok))| judge::Submitted {
                batch: &b.batch_name,
                jobs: b.jobs.iter().map(|j| j.name.as_str()).collect(),
                ok: *ok,
                error: e.as_deref(),
            })
            .collect();
        self.report.violations.extend(judge::submits(&submitted, &server).into_iter().map(|v| format!("host faults: {v}")));
        Ok(())
    }
}

/// The daemon of this phase: its state and log on the tmpfs.
struct HostDaemon {
    g: GahpClient,
    stderr: PathBuf,
}

impl HostDaemon {
    fn start(run: &mut Run<'_>, fs: &PrivateTmpfs) -> Result<HostDaemon, String> {
        let stderr = run.spec.dir.join(format!("hostfs-stderr-{}.txt", run.report.restarts));
        let file = std::fs::File::create(&stderr).map_err(io_err)?;
        let (state, log) = (fs.dir().join("state"), fs.dir().join("logs/gahp.log"));
        let mut g = run.daemon.start_at(&state, &log, Some(fs), Stdio::from(file)).map_err(|e| format!("starting the daemon: {e}"))?;
        run.report.restarts += 1;
        select(&mut g, &run.proxy.lane_url(LANES[0]), &run.spec.auth).map_err(io_err)?;
        Ok(HostDaemon { g, stderr })
    }

    fn call(&mut self, run: &mut Run<'_>, command: AsyncCommand) -> Result<Vec<String>, String> {
        let id = run.reqid();
        self.g.submit_async(&Request::Command { reqid: ReqId(id), command: Command::Boinc(command) }).map_err(io_err)?;
        self.g.wait_result(id, RESULT_WAIT).map_err(|e| format!("request {id}: {e}"))
    }

    /// The submit, again after each error (a few times: faults and a
    /// full disk); whether it succeeded.
    fn submit_until_ok(&mut self, run: &mut Run<'_>, b: &SubmitBatch) -> Result<bool, String> {
        for _ in 0..4 {
            let r = self.call(run, AsyncCommand::Submit(b.clone()))?;
            if r.first().map(String::as_str) == Some("NULL") {
                run.report.submits_ok += 1;
                return Ok(true);
            }
            run.report.submit_errors += 1;
            run.report.resubmits += 1;
        }
        run.violation(format!("host faults: {} was never submitted, space back and the state whole", b.batch_name));
        Ok(false)
    }

    /// A fetch of `job` into the tmpfs, the stderr appended to an earlier
    /// text: what is there after is whole (the output as the server has
    /// it, the stderr as it was or with the whole new text).
    fn fetch_judged(&mut self, run: &mut Run<'_>, fs: &PrivateTmpfs, job: &str) -> Result<(), String> {
        let (inside, view) = (fs.dir().join("out"), fs.view().join("out"));
        let before = std::fs::read(view.join("stderr")).unwrap_or_default();
        let fetch = FetchOutput {
            job_name: job.to_string(),
            dir: inside.clone(),
            stderr_file: inside.join("stderr"),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: "out".into() }],
        };
        let r = self.call(run, AsyncCommand::FetchOutput(fetch))?;
        let ok = r.first().map(String::as_str) == Some("NULL");
        if ok {
            run.report.fetches_ok += 1;
        } else {
            run.report.fetch_errors += 1;
            if !r.iter().any(|f| f.contains("No space left on device")) {
                run.violation(format!("host faults: a fetch onto a full disk failed without naming the cause: {r:?}"));
            }
        }
        if let Some(v) = judge::appended("the stderr file", &before, std::fs::read(view.join("stderr")).ok().as_deref()) {
            run.violation(format!("host faults: {v}"));
        }
        match std::fs::read(view.join("out")) {
            Ok(got) => match run.spec.truth.output(job, 0) {
                Ok(server) => {
                    if let Some(v) = judge::output(job, &got, &server) {
                        run.violation(format!("host faults: {v}"));
                    }
                }
                Err(e) => run.violation(format!("host faults: output of {job}: the server's copy: {e}")),
            },
            Err(_) if ok => run.violation(format!("host faults: the fetch of {job} succeeded and left no output")),
            Err(_) => {}
        }
        let expected: BTreeSet<String> = ["stderr".to_string(), "out".to_string(), FILLER.to_string()].into();
        run.check_no_partial(&view, &expected);
        Ok(())
    }

    fn quit(mut self, run: &mut Run<'_>) {
        if let Ok(extra) = self.g.results() {
            for line in extra {
                run.violation(format!("host faults: an unclaimed result: {line:?}"));
            }
        }
        let _ = self.g.command_line(b"QUIT");
        if !matches!(self.g.wait_exit(Duration::from_secs(30)), Ok(Some(_))) {
            run.violation("host faults: the daemon did not exit after QUIT".into());
            self.g.kill();
        }
    }
}
