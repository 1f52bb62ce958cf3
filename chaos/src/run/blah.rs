//! A run's `BLAH_*` jobs through the `[blah]` config: submitted, polled
//! until their output is in their directory, one re-sent after stdin
//! closed (same `JobDirectory`).

use super::*;

impl Run<'_> {
    /// BLAH_* jobs on lane b as HTCondor 23 submits them; one is re-sent
    /// after closing stdin on the daemon (same ad, same JobDirectory).
    pub(super) fn blah_jobs(&mut self) -> Result<(), String> {
        let n = self.rng.gen_range(1..=2);
        let mut ids = Vec::new();
        for k in 0..n {
            let iwd = self.spec.dir.join(format!("blah{k}"));
            std::fs::create_dir_all(&iwd).map_err(io_err)?;
            std::fs::write(iwd.join("in"), format!("blah job {k} of {}\n", self.prefix())).map_err(io_err)?;
            let s = |v: &str| Value::Str(v.into());
            let attrs = [("BoincApp", s(APP)), ("TransferInput", s("in")), ("TransferOutput", s("out"))];
            let ad = gahp_testkit::blah_job_ad(&iwd, &format!("{}_blah_{k}", self.prefix()), &attrs);
            let r = self.blah(BlahCommand::JobSubmit { ad: ad.clone() })?;
            if k == 0 {
                // The gridmanager lost its GAHP (stdin closed): it starts a
                // new one and sends the same submit again.
                self.g.close_stdin();
                if self.g.wait_exit(Duration::from_secs(30)).map_err(io_err)?.is_none() {
                    self.violation("the daemon did not exit within 30 s of stdin closing".into());
                    self.g.kill();
                }
                self.restart()?;
                let again = self.blah(BlahCommand::JobSubmit { ad })?;
                if r.get(2) != again.get(2) && r.first().map(String::as_str) == Some("0") {
                    self.violation(format!("the same BLAH submit got two job ids: {r:?} then {again:?}"));
                }
                ids.push((again, iwd));
            } else {
                ids.push((r, iwd));
            }
        }
        let until = Instant::now() + self.spec.finish_wait;
        for (r, iwd) in ids {
            if r.first().map(String::as_str) != Some("0") {
                self.violation(format!("BLAH submit failed: {r:?}"));
                continue;
            }
            let Some(id) = r.get(2).cloned() else { continue };
            self.report.blah_jobs += 1;
            loop {
                let s = self.blah(BlahCommand::JobStatus { job_id: id.clone() })?;
                let code: i32 = s.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
                if s.first().map(String::as_str) == Some("0") && code == 4 {
                    let name = id.rsplit('/').next().unwrap_or("");
                    let got = std::fs::read(iwd.join("out")).unwrap_or_default();
                    // The copy first: a retire between the two reads then
                    // shows in the batch list.
                    let server_copy = self.spec.truth.output(name, 0);
                    let batches = self.spec.truth.batches(name).map_err(|e| e.to_string())?;
                    let same: Vec<_> = batches.iter().filter(|b| b.name == name).collect();
                    // A real server stops listing a batch once it is retired.
                    let unlisted = same.is_empty() && !self.spec.truth.lists_retired();
                    let retired = unlisted || (!same.is_empty() && same.iter().all(|b| b.state == BATCH_RETIRED));
                    match server_copy {
                        Ok(server) => {
                            if let Some(v) = judge::output(&format!("BLAH job {id}"), &got, &server) {
                                self.violation(v);
                            }
                        }
                        // The daemon retires a finished BLAH job's batch once
                        // its output is in Iwd, and the server then drops its
                        // copy: the app's own function stands in for it.
                        Err(_) if retired => {
                            let input = std::fs::read(iwd.join("in")).map_err(io_err)?;
                            if let Some(v) = judge::output(&format!("BLAH job {id}"), &got, &input.to_ascii_uppercase()) {
                                self.violation(v);
                            }
                        }
                        Err(e) => self.violation(format!("BLAH job {id}: the server's copy: {e}")),
                    }
                    if !unlisted && (same.len() != 1 || same[0].jobs.len() != 1) {
                        self.violation(format!("BLAH job {id}: {} batches of that name on the server", same.len()));
                    }
                    break;
                }
                if code >= 3 || Instant::now() > until {
                    self.violation(format!("BLAH job {id} did not complete: {s:?}"));
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        Ok(())
    }

    pub(super) fn blah(&mut self, command: BlahCommand) -> Result<Vec<String>, String> {
        let id = self.reqid();
        self.g.submit_async(&Request::Command { reqid: ReqId(id), command: Command::Blah(command) }).map_err(io_err)?;
        self.wait(id)
    }
}
