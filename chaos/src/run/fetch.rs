//! A run's output fetches: every finished job's outputs, with one kill -9
//! mid-fetch, checked byte for byte against the server's copy, no partial
//! file left, and a fetch into a full filesystem.

use super::*;

impl Run<'_> {
    /// Fetches every DONE job's output and compares it byte for byte with
    /// the server's copy; one kill -9 mid-fetch when the plan says so.
    pub(super) fn fetch_all(&mut self, plans: &[BatchPlan], statuses: &HashMap<String, String>, kill: bool) -> Result<(), String> {
        let out_dir = self.spec.dir.join("outputs");
        std::fs::create_dir_all(&out_dir).map_err(io_err)?;
        let done: Vec<(String, usize)> = plans
            .iter()
            .filter(|p| p.ok)
            .flat_map(|p| p.req.jobs.iter().map(|j| (j.name.clone(), p.lane)))
            .filter(|(j, _)| statuses.get(j).is_some_and(|s| s == "DONE"))
            .collect();
        let kill_after = kill.then(|| self.rng.gen_range(0..done.len().max(1)));
        let mut expected_files = BTreeSet::new();
        for (chunk_no, chunk) in done.chunks(4).enumerate() {
            let mut pending = Vec::new();
            for (job, lane) in chunk {
                self.switch_lane(*lane)?;
                let dst = format!("{}.out", job.replace('#', "_"));
                expected_files.insert(dst.clone());
                let fetch = FetchOutput {
                    job_name: job.clone(),
                    dir: out_dir.clone(),
                    stderr_file: "/dev/null".into(),
                    mode: FetchMode::Some,
                    specs: vec![OutputSpec { src: "out".into(), dst: dst.clone().into() }],
                };
                let id = self.send(AsyncCommand::FetchOutput(fetch.clone()))?;
                pending.push((id, job.clone(), dst, fetch, *lane));
            }
            if kill_after.is_some_and(|k| k / 4 == chunk_no) {
                std::thread::sleep(Duration::from_millis(self.rng.gen_range(0..400)));
                self.kill_and_restart("mid-fetch")?;
                // Each again where its job was submitted.
                for p in pending.iter_mut() {
                    self.switch_lane(p.4)?;
                    p.0 = self.send(AsyncCommand::FetchOutput(p.3.clone()))?;
                }
            }
            for (id, job, dst, _, _) in pending {
                let r = self.wait(id)?;
                if r.first().map(String::as_str) != Some("NULL") {
                    self.report.fetch_errors += 1;
                    self.violation(format!("fetch of DONE job {job} failed: {}", r.join(" ")));
                    continue;
                }
                self.report.fetches_ok += 1;
                let got = std::fs::read(out_dir.join(&dst)).map_err(|e| format!("{dst}: {e}"))?;
                match self.spec.truth.output(&job, 0) {
                    Ok(server) => {
                        if let Some(v) = judge::output(&job, &got, &server) {
                            self.violation(v);
                        }
                    }
                    Err(e) => self.violation(format!("output of {job}: the server's copy: {e}")),
                }
            }
        }
        self.check_no_partial(&out_dir, &expected_files);
        Ok(())
    }

    pub(super) fn check_no_partial(&mut self, dir: &Path, expected: &BTreeSet<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let present: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        for name in judge::leftovers(&present, expected) {
            self.violation(format!("{name} left in the output directory {}", dir.display()));
        }
    }

    /// An output directory on a full filesystem: the fetch must fail and
    /// leave nothing. Needs a tiny tmpfs, so root; skipped otherwise.
    pub(super) fn full_filesystem(&mut self, statuses: &HashMap<String, String>) -> Result<(), String> {
        let Some(job) = statuses.iter().filter(|(_, s)| *s == "DONE").map(|(j, _)| j.clone()).min() else {
            return Ok(());
        };
        let Ok(server) = self.spec.truth.output(&job, 0) else { return Ok(()) };
        let dir = self.spec.dir.join("fullfs");
        std::fs::create_dir_all(&dir).map_err(io_err)?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8k", "chaos-fullfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            self.report.skipped.push("full filesystem: mounting a tmpfs needs root".into());
            return Ok(());
        }
        // Fill it: whatever is left is less than the output.
        let filler = dir.join("filler");
        let mut size = 0usize;
        for _ in 0..64 {
            let chunk = vec![b'x'; 1024];
            let mut all = std::fs::read(&filler).unwrap_or_default();
            all.extend_from_slice(&chunk);
            if std::fs::write(&filler, &all).is_err() {
                break;
            }
            size = all.len();
        }
        let _ = size;
        let fetch = FetchOutput {
            job_name: job.clone(),
            dir: dir.clone(),
            stderr_file: "/dev/null".into(),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: "out".into() }],
        };
        let r = self.call(AsyncCommand::FetchOutput(fetch));
        let expected: BTreeSet<String> = ["filler".to_string()].into();
        match r {
            Ok(r) if r.first().map(String::as_str) == Some("NULL") => {
                // Fits only if the output is empty.
                if !server.is_empty() {
                    self.violation(format!("fetch of {job} onto a full filesystem reported success"));
                }
            }
            Ok(_) => self.check_no_partial(&dir, &expected),
            Err(e) => self.violation(format!("fetch onto a full filesystem: {e}")),
        }
        let _ = std::process::Command::new("umount").arg(&dir).status();
        Ok(())
    }
}
