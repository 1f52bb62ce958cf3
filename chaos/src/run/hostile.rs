//! The hostile-hosts profile (docs/chaos.md): script jobs whose hosts
//! (the simulated project's, by its fault plan's `hostile_outputs`) send
//! hostile `condor_out.zip`s, in waves until each kind was sent once,
//! then `judge::hostile`'s verdict: nothing outside each job's directory
//! changed, nothing planted in it, the daemon's memory bounded, each job
//! that got a zip that must be refused held or failed.

use super::*;
use crate::judge::hostile::{self as verdict, Ended, Node, Tree};
use boinc_sim::hostile::HostileKind;

/// Jobs submitted at once.
const WAVE: usize = 16;
/// The share of jobs a host lies about: a quarter stay honest, so that a
/// daemon refusing everything fails too.
const HOSTILE_RATE: f64 = 0.75;
/// The daemon's peak resident memory (VmHWM) may not pass this: a quarter
/// of the bomb's 512 MiB, and several times what the daemon needs for
/// these jobs (about 20 MiB).
pub const RSS_BOUND_MIB: f64 = 128.0;

/// The simulated project of the quorum variant: three hosts (host 1 the
/// hostile one), and the runner app with a quorum of 2, as
/// `register --quorum 2` sets it.
pub const QUORUM_SIM_CONFIG: &str = "[[hosts]]\nname = \"volunteer\"\ncount = 3\n\n[[apps]]\nname = \"runner\"\n\
inputs = [\"condor_exec.exe\", \"condor_job.zip\"]\noutputs = [\"condor_out.zip\"]\njob_bounds = true\nfpops_est = 1e9\n\
delay_bound = 86400\nmin_quorum = 2\ntarget_nresults = 2\nmax_error_results = 3\nmax_total_results = 7\nmax_success_results = 4\n";

/// The job: its output comes from its input, so a forgery shows.
const SCRIPT: &str = "#!/bin/sh\ntr a-z A-Z < in > out.txt\necho done\n";

struct HostileJob {
    /// The BOINC job's name (the last part of the BLAH job id).
    name: String,
    id: String,
    iwd: PathBuf,
    before: Tree,
    input: Vec<u8>,
    ended: Ended,
}

impl Run<'_> {
    /// Script jobs against hostile hosts, judged by judge::hostile.
    pub(super) fn hostile_hosts(&mut self) -> Result<(), String> {
        if !self.spec.truth.lists_retired() {
            return Err("the hostile-hosts profile needs the simulated project (--sim): its hosts are the hostile ones".into());
        }
        let root = self.spec.dir.join("hostile");
        let outside = root.join("outside");
        let jobs_dir = root.join("home/jobs");
        lay_out(&root).map_err(io_err)?;
        let mut outside_before = verdict::snapshot(&root, &[]).map_err(io_err)?;

        let mut jobs: Vec<HostileJob> = Vec::new();
        let mut sent: BTreeMap<String, Vec<HostileKind>> = BTreeMap::new();
        let mut unsent: BTreeSet<HostileKind> = HostileKind::ALL.into_iter().collect();
        let cap = self.spec.batches.max(WAVE);
        // With a quorum, host 1 lies about every job it gets; without, every
        // host about three jobs in four.
        let quorum = self.spec.profile == Profile::HostileHostsQuorum;
        let (rate, hosts): (f64, &[i64]) = if quorum { (1.0, &[1]) } else { (HOSTILE_RATE, &[]) };
        while !unsent.is_empty() && jobs.len() < cap {
            // The kinds not sent yet: each wave's plan starts the sim's
            // tally again, so it is read after each wave.
            let kinds: Vec<&str> = unsent.iter().map(|k| k.as_str()).collect();
            let plan = serde_json::json!({
                "seed": self.spec.seed,
                "hostile_outputs": { "rate": rate, "hosts": hosts, "kinds": kinds, "aim": outside.display().to_string() },
            });
            self.spec.truth.sim_post("__sim/faults", &plan.to_string()).map_err(|e| format!("setting the hostile plan: {e}"))?;
            let mut wave = Vec::new();
            for k in jobs.len()..(jobs.len() + WAVE).min(cap) {
                let iwd = jobs_dir.join(format!("j{k}"));
                let job = self.hostile_submit(k, &iwd)?;
                outside_before.insert(iwd.strip_prefix(&root).map_err(io_err)?.to_path_buf(), Node::Dir);
                wave.push(job);
            }
            self.hostile_wait(&mut wave)?;
            for (instance, kind) in hostile_tally(&self.spec.truth.sim_state().map_err(|e| e.to_string())?) {
                let job = instance.rsplit_once('_').map_or(instance.as_str(), |(j, _)| j).to_string();
                unsent.remove(&kind);
                sent.entry(job).or_default().push(kind);
            }
            jobs.extend(wave);
        }
        self.spec.truth.sim_post("__sim/faults", "{}").map_err(|e| format!("clearing the hostile plan: {e}"))?;

        let peak = self.g.peak_rss_mib();
        self.report.peak_rss_mib = peak;
        if peak.is_nan() || peak > RSS_BOUND_MIB {
            self.violation(format!("the daemon's peak resident memory was {peak:.0} MiB, more than {RSS_BOUND_MIB} MiB"));
        }
        let iwds: Vec<PathBuf> = jobs.iter().map(|j| j.iwd.clone()).collect();
        let outside_after = verdict::snapshot(&root, &iwds).map_err(io_err)?;
        let found = verdict::outside_changes(&outside_before, &outside_after);
        self.report.violations.extend(found);
        for j in &jobs {
            let kinds = sent.get(&j.name).cloned().unwrap_or_default();
            for k in &kinds {
                *self.report.hostile_kinds.entry(k.as_str().to_string()).or_default() += 1;
            }
            self.report.hostile_jobs += usize::from(!kinds.is_empty());
            let after = verdict::snapshot(&j.iwd, &[]).map_err(io_err)?;
            let found = verdict::iwd_violations(&j.name, &j.before, &after);
            self.report.violations.extend(found);
            if matches!(j.ended, Ended::Held(_) | Ended::Completed { failed: true, .. }) {
                let found = verdict::refused_leftovers(&j.name, &j.before, &after, &["job.out", "job.err"]);
                self.report.violations.extend(found);
            }
            let read = |n: &str| std::fs::read(j.iwd.join(n)).ok();
            let honest = read("job.out").as_deref() == Some(b"done\n".as_slice())
                && read("out.txt").as_deref() == Some(j.input.to_ascii_uppercase().as_slice());
            if let Some(v) = verdict::outcome(&j.name, &kinds, &j.ended, quorum, honest) {
                self.violation(v);
            }
        }
        if !unsent.is_empty() {
            let names: Vec<&str> = unsent.iter().map(|k| k.as_str()).collect();
            self.report.skipped.push(format!("hostile kinds never sent in {} jobs: {}", jobs.len(), names.join(", ")));
        }
        self.report.blah_jobs += jobs.len();
        Ok(())
    }

    /// Job `k` in `iwd`, as a submitter lays it out (its script, its
    /// input, its submit file and log, a link to data elsewhere), sent.
    fn hostile_submit(&mut self, k: usize, iwd: &Path) -> Result<HostileJob, String> {
        std::fs::create_dir_all(iwd).map_err(io_err)?;
        let exe = iwd.join("job.sh");
        std::fs::write(&exe, SCRIPT).map_err(io_err)?;
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(io_err)?;
        // Of the seed and the job only: the hosts' choices replay.
        let input = format!("hostile-hosts job {k} of seed {}\n", self.spec.seed).into_bytes();
        std::fs::write(iwd.join("in"), &input).map_err(io_err)?;
        std::fs::write(iwd.join("job.sub"), "executable = job.sh\ntransfer_input_files = in\nqueue\n").map_err(io_err)?;
        std::fs::write(iwd.join("job.log"), "000 (001.000.000) Job submitted\n").map_err(io_err)?;
        std::os::unix::fs::symlink("../../../outside", iwd.join("data")).map_err(io_err)?;
        let before = verdict::snapshot(iwd, &[]).map_err(io_err)?;
        let s = |v: &str| Value::Str(v.into());
        let attrs = [("TransferInput", s("in")), ("Out", s("job.out")), ("Err", s("job.err"))];
        let mut ad = gahp_testkit::blah_job_ad(iwd, &format!("{}_hostile_{k}", self.prefix()), &attrs);
        ad.insert("Cmd", s(&exe.display().to_string()));
        let r = self.blah(BlahCommand::JobSubmit { ad })?;
        let id = match (r.first().map(String::as_str), r.get(2)) {
            (Some("0"), Some(id)) => id.clone(),
            _ => return Err(format!("BLAH submit of hostile-hosts job {k} failed: {r:?}")),
        };
        let name = id.rsplit('/').next().unwrap_or("").to_string();
        Ok(HostileJob { name, id, iwd: iwd.to_path_buf(), before, input, ended: Ended::NotFinal })
    }

    /// Polls the wave's jobs until each is final or the wait is over.
    fn hostile_wait(&mut self, wave: &mut [HostileJob]) -> Result<(), String> {
        let until = Instant::now() + self.spec.finish_wait;
        while Instant::now() < until {
            let mut open = 0;
            for j in wave.iter_mut().filter(|j| j.ended == Ended::NotFinal) {
                let s = self.blah(BlahCommand::JobStatus { job_id: j.id.clone() })?;
                let code: i32 = s.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
                let ad = s.get(3).and_then(|a| gahp_protocol::classad::ClassAd::parse(a).ok());
                j.ended = match (s.first().map(String::as_str), code) {
                    (Some("0"), 3) => Ended::Removed,
                    (Some("0"), 4) => {
                        let ad = ad.unwrap_or_default();
                        Ended::Completed { exit: ad.get_int("ExitCode"), failed: ad.get_str("ExitReason").is_some() }
                    }
                    (Some("0"), 5) => Ended::Held(ad.and_then(|a| a.get_str("HoldReason").map(str::to_string)).unwrap_or_default()),
                    _ => {
                        open += 1;
                        Ended::NotFinal
                    }
                };
            }
            if open == 0 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    }
}

/// A home directory's tree: `home/` with dot-files and a link out,
/// `outside/` with the files a hostile zip aims at (what a forged exit
/// link would read, a file a link would overwrite).
fn lay_out(root: &Path) -> std::io::Result<()> {
    let (home, outside) = (root.join("home"), root.join("outside"));
    std::fs::create_dir_all(home.join("jobs"))?;
    std::fs::create_dir_all(outside.join("keep"))?;
    std::fs::write(home.join(".bashrc"), "# the submitter's own\n")?;
    std::fs::write(home.join("notes.txt"), "the submitter's notes\n")?;
    std::os::unix::fs::symlink("../outside", home.join("elsewhere"))?;
    std::fs::write(outside.join("target.txt"), "a file outside every job's directory\n")?;
    std::fs::write(outside.join("exit_code"), "0\n")?;
    std::fs::write(outside.join("keep/kept.txt"), "kept\n")
}

/// The hostile outputs the simulated project's tally holds:
/// `"<instance> hostile:<kind>"` keys, as (instance, kind).
fn hostile_tally(state: &serde_json::Value) -> Vec<(String, HostileKind)> {
    let Some(m) = state["faults_injected"].as_object() else { return Vec::new() };
    m.iter()
        .filter_map(|(key, n)| {
            let (instance, kind) = key.split_once(" hostile:")?;
            let kind = HostileKind::parse(kind)?;
            Some(std::iter::repeat_n((instance.to_string(), kind), n.as_u64().unwrap_or(1) as usize))
        })
        .flatten()
        .collect()
}
