//! The project's jobs in the process's metrics (`boinc_gahp_jobs`):
//! counted by state every few seconds, so that a job's every step is not
//! a write to a shared gauge.

use std::time::Duration;

use gahp_protocol::gahp::blah::job_status;

use super::*;

/// How often the counts are published.
pub(super) const EVERY: Duration = Duration::from_secs(5);

impl ProjectJobs {
    pub(super) fn publish_job_counts(&mut self) {
        let mut counts = [("submitting", 0), ("idle", 0), ("running", 0), ("completed", 0), ("held", 0), ("removed", 0)];
        for (_, job) in self.jobs.iter() {
            let state = state_of(job);
            if let Some(c) = counts.iter_mut().find(|(s, _)| *s == state) {
                c.1 += 1;
            }
        }
        self.job_counts.set(&counts);
    }
}

/// A job's state as HTCondor sees it (as `status` answers it), or
/// `submitting` before it reaches BOINC.
fn state_of(job: &Job) -> &'static str {
    match (job.final_status(), job.phase, job.boinc()) {
        (Some((job_status::REMOVED, _)), ..) | (None, Phase::Cancelled, _) => "removed",
        (Some((job_status::COMPLETED, _)), ..) => "completed",
        (Some(_), ..) => "held",
        (None, Phase::Submitting, _) => "submitting",
        (None, Phase::Active, Some("IN_PROGRESS" | "DONE" | "ERROR")) => "running",
        _ => "idle",
    }
}
