//! A run's work sequences (with `--sim`): one ended by its marker, one on
//! the pool whose relocated step moves to the other lane's project,
//! judged by their final state.

use super::*;

impl Run<'_> {
    /// Work sequences of the simulated project's `stepper` app (its final
    /// state proves every step ran once, in order, on the right state),
    /// one host losing instances so steps relocate, and now and then a
    /// kill -9 mid-sequence. The first runs on the pool of both lanes, so a
    /// relocated step moves to the other lane's project; the second on
    /// lane a. Skipped on a real project (no stepper app).
    pub(super) fn sequences(&mut self) -> Result<(), String> {
        if !self.spec.truth.lists_retired() {
            self.report.skipped.push("work sequences: the stepper app is the simulated project's".into());
            return Ok(());
        }
        // Its own RNG: the other lanes' decisions stay as they were.
        let mut rng = StdRng::seed_from_u64(self.spec.seed ^ 0x5e9_5e9);
        let mut planned = Vec::new();
        for k in 0..2 {
            let name = format!("{}_seq{k}", self.prefix());
            let lane = if k == 0 { POOL_LANE } else { 0 };
            self.switch_lane(lane)?;
            let steps: u32 = rng.gen_range(3..=5);
            // The second one is ended by its own back end (the marker).
            let end_at = (k == 1).then(|| steps - 1);
            let state = self.inputs.join(format!("{name}.state0"));
            std::fs::write(&state, b"").map_err(io_err)?;
            let extra = self.inputs.join(format!("{name}.extra"));
            let extra_text = format!("extra input of {name}\n");
            std::fs::write(&extra, &extra_text).map_err(io_err)?;
            let args = end_at.map(|e| vec!["--end-at".to_string(), e.to_string()]).unwrap_or_default();
            let create = SequenceCommand::Create(CreateSequence {
                name: name.clone(),
                app_name: "stepper".into(),
                steps,
                max_step_time: 8,
                max_attempts: 6,
                end_marker: Some("DONE".into()),
                state_files: vec![InputFile { src: state, dst_name: "state".into() }],
                args,
                inputs: vec![InputFile { src: extra, dst_name: "extra".into() }],
            });
            let r = self.sequence(create)?;
            if r != ["NULL"] {
                self.violation(format!("BOINC_SEQUENCE_CREATE {name} failed: {r:?}"));
                continue;
            }
            self.report.sequences += 1;
            self.report.pool_sequences += usize::from(lane == POOL_LANE);
            planned.push((name, lane, end_at.unwrap_or(steps), extra_text));
        }
        // One host loses a share of what it is sent: some steps relocate.
        let lost = format!("{{\"id\": 1, \"lost_rate\": {}}}", rng.gen_range(0.1..0.3));
        self.spec.truth.sim_post("__sim/hosts", &lost).map_err(|e| format!("stalling a host: {e}"))?;
        if self.spec.kill && rng.gen_bool(0.5) {
            std::thread::sleep(Duration::from_millis(rng.gen_range(200..3000)));
            self.kill_and_restart("mid-sequence")?;
        }
        let until = Instant::now() + self.spec.finish_wait;
        for (name, lane, steps, extra) in planned {
            self.switch_lane(lane)?;
            let r = loop {
                let r = self.sequence(SequenceCommand::Query { name: name.clone() })?;
                if r.first().map(String::as_str) != Some("NULL") || r.get(1).map(String::as_str) != Some("RUNNING") {
                    break r;
                }
                if Instant::now() > until {
                    break r;
                }
                std::thread::sleep(Duration::from_millis(300));
            };
            if r.first().map(String::as_str) != Some("NULL") || r.get(1).map(String::as_str) != Some("COMPLETED") {
                self.violation(format!("sequence {name} did not complete: {r:?}"));
                continue;
            }
            self.report.relocations += r.get(6).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
            if r.get(2) != Some(&steps.to_string()) {
                self.violation(format!("sequence {name}: {steps} steps expected, the daemon says {r:?}"));
            }
            let dir = self.spec.dir.join(format!("seq-{name}"));
            std::fs::create_dir_all(&dir).map_err(io_err)?;
            let fetch = FetchSequence { name: name.clone(), step: StepSelector::Latest, dir: dir.clone() };
            let f = self.sequence(SequenceCommand::Fetch(fetch))?;
            if f.first().map(String::as_str) != Some("NULL") {
                self.violation(format!("BOINC_SEQUENCE_FETCH {name} failed: {f:?}"));
                continue;
            }
            let mut expected = String::new();
            for _ in 0..steps {
                expected = boinc_sim::apps::stepper_next(&expected, extra.as_bytes()).map_err(|e| e.to_string())?;
            }
            let got = std::fs::read_to_string(dir.join("state")).unwrap_or_default();
            if got != expected {
                self.violation(format!("sequence {name}: final state {got:?}, expected {expected:?}"));
            }
            self.report.sequence_steps += steps as usize;
            let files: BTreeSet<String> = ["state".to_string(), "DONE".to_string()].into();
            self.check_no_partial(&dir, &files);
            self.check_steps(&name, steps)?;
            self.wait_sequence_retired(&name, until)?;
        }
        let _ = self.spec.truth.sim_post("__sim/hosts", "{\"id\": 1, \"lost_rate\": 0.0}");
        Ok(())
    }

    /// A completed sequence retires its batches after it answers COMPLETED
    /// (durably, retried under faults): wait for the server to show them
    /// retired, as the gridmanager would keep the daemon running, before
    /// the end judges what is left.
    pub(super) fn wait_sequence_retired(&mut self, name: &str, until: Instant) -> Result<(), String> {
        let prefix = format!("{name}#");
        loop {
            let batches = self.spec.truth.batches(&prefix).map_err(|e| format!("reading the server's truth: {e}"))?;
            if batches.iter().all(|b| b.state == BATCH_RETIRED) || Instant::now() > until {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// From the server: each step of sequence `name` completed (by one
    /// attempt or more: an instance can finish as it is given up), nothing
    /// of it still queued or running, no step past the last.
    pub(super) fn check_steps(&mut self, name: &str, steps: u32) -> Result<(), String> {
        let prefix = format!("{name}#");
        let batches = self.spec.truth.batches(&prefix).map_err(|e| format!("reading the server's truth: {e}"))?;
        let mut done: BTreeMap<u32, usize> = BTreeMap::new();
        for (job, status) in batches.iter().flat_map(|b| b.jobs.iter()) {
            let step: u32 = job.split('#').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
            if step == 0 || step > steps {
                self.violation(format!("sequence {name}: job {job} on the server is not one of its {steps} steps"));
            }
            match status.as_str() {
                "DONE" => *done.entry(step).or_default() += 1,
                "UNSENT" | "IN_PROGRESS" => self.violation(format!("sequence {name}: job {job} still {status} after it completed")),
                _ => {}
            }
        }
        for step in 1..=steps {
            if done.get(&step).copied().unwrap_or(0) == 0 {
                self.violation(format!("sequence {name}: no attempt of step {step} is DONE on the server"));
            }
        }
        Ok(())
    }

    pub(super) fn sequence(&mut self, command: SequenceCommand) -> Result<Vec<String>, String> {
        let id = self.reqid();
        self.g.submit_async(&Request::Command { reqid: ReqId(id), command: Command::Sequence(command) }).map_err(io_err)?;
        self.wait(id)
    }
}
