//! What to do next with a sequence, from what the daemon knows of it: pure
//! functions of the sequence's record, its live attempt and the time.

/// Where the live attempt of a step stands, as the server last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Not seen on the server yet (just submitted, or not queried yet).
    Unknown,
    Unsent,
    InProgress,
    Done,
    Error,
    /// The server no longer knows the job (lost, or its batch retired).
    Missing,
}

impl ServerState {
    /// A `query_batch2` job status, verbatim.
    pub fn from_status(status: &str) -> Self {
        match status {
            "UNSENT" => ServerState::Unsent,
            "IN_PROGRESS" => ServerState::InProgress,
            "DONE" => ServerState::Done,
            "ERROR" => ServerState::Error,
            _ => ServerState::Unknown,
        }
    }
}

/// The live attempt of the current step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveAttempt {
    pub step: u32,
    pub attempt: u32,
    /// When its job was submitted (seconds since the epoch).
    pub submitted: f64,
    /// When it was first seen IN_PROGRESS.
    pub first_in_progress: Option<f64>,
    pub server: ServerState,
}

/// The limits a sequence runs under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_step_time: f64,
    pub max_attempts: u32,
    /// Extra time a step that was never sent gets on top of max_step_time.
    pub unsent_grace: f64,
}

/// Why a step's attempt is given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relocation {
    DeadlineMissed,
    NeverSent,
    Errored,
    Lost,
}

impl Relocation {
    pub fn reason(&self) -> &'static str {
        match self {
            Relocation::DeadlineMissed => "deadline missed",
            Relocation::NeverSent => "never sent",
            Relocation::Errored => "job error",
            Relocation::Lost => "lost on the server",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Nothing to do before the next status.
    Wait,
    /// Fetch the step's outputs: it is done.
    Collect,
    /// Abort the attempt, record a dead branch and submit `attempt`.
    Relocate { why: Relocation, attempt: u32 },
    /// Abort the attempt; the step used its attempts: the sequence fails.
    Fail { why: Relocation },
}

/// The verdict on the live attempt at `now`; `failures` = earlier attempts
/// of this step that failed (an owner's stop is not one).
pub fn judge(live: &LiveAttempt, limits: &Limits, failures: u32, now: f64) -> Next {
    let why = match live.server {
        ServerState::Done => return Next::Collect,
        ServerState::Error => Relocation::Errored,
        ServerState::Missing => Relocation::Lost,
        ServerState::InProgress | ServerState::Unsent | ServerState::Unknown => match live.first_in_progress {
            Some(t) if now - t > limits.max_step_time => Relocation::DeadlineMissed,
            Some(_) => return Next::Wait,
            None if now - live.submitted > limits.max_step_time + limits.unsent_grace => Relocation::NeverSent,
            None => return Next::Wait,
        },
    };
    if failures.saturating_add(1) >= limits.max_attempts {
        Next::Fail { why }
    } else {
        Next::Relocate { why, attempt: live.attempt + 1 }
    }
}

/// The step after `done` completed steps, if the sequence goes on: none
/// when the plan is used up, the owner ended it, or the step wrote the
/// end marker.
pub fn next_step(done: u32, planned: u32, ended: bool, marker_seen: bool) -> Option<u32> {
    (!ended && !marker_seen && done < planned).then_some(done + 1)
}

/// The plan after an extend by `more` steps (saturating: a plan never wraps).
pub fn extend(planned: u32, more: u32) -> u32 {
    planned.saturating_add(more)
}

/// The name of a step's attempt: its BOINC job and its one-job batch.
pub fn job_name(sequence: &str, step: u32, attempt: u32) -> String {
    format!("{sequence}#{step}#{attempt}")
}

/// Why `name` cannot name a sequence, if it cannot: it becomes part of
/// every step's BOINC job and batch name, which the server passes to
/// `create_work` on one whitespace-split line and uses in file names, and
/// `#` separates the step and attempt in those names.
pub fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it holds white space or a control character")
    } else if name.contains(['/', '\\']) {
        Some("it holds a slash or a backslash")
    } else if name.contains(['#', '\'', '"']) {
        Some("it holds '#' or a quote")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_step_time: 100.0, max_attempts: 3, unsent_grace: 50.0 };

    fn live(server: ServerState, first_in_progress: Option<f64>, attempt: u32) -> LiveAttempt {
        LiveAttempt { step: 4, attempt, submitted: 1000.0, first_in_progress, server }
    }

    #[test]
    fn a_running_step_waits_until_its_deadline_then_is_relocated() {
        let l = live(ServerState::InProgress, Some(1010.0), 1);
        assert_eq!(judge(&l, &LIMITS, 0, 1110.0), Next::Wait);
        assert_eq!(judge(&l, &LIMITS, 0, 1110.5), Next::Relocate { why: Relocation::DeadlineMissed, attempt: 2 });
    }

    #[test]
    fn a_step_never_sent_gets_the_grace_on_top() {
        let l = live(ServerState::Unsent, None, 1);
        assert_eq!(judge(&l, &LIMITS, 0, 1149.0), Next::Wait);
        assert_eq!(judge(&l, &LIMITS, 0, 1151.0), Next::Relocate { why: Relocation::NeverSent, attempt: 2 });
    }

    #[test]
    fn errors_and_lost_jobs_relocate_at_once_and_done_collects() {
        assert_eq!(judge(&live(ServerState::Error, None, 1), &LIMITS, 0, 1000.0), Next::Relocate { why: Relocation::Errored, attempt: 2 });
        assert_eq!(
            judge(&live(ServerState::Missing, Some(1000.0), 2), &LIMITS, 1, 1000.0),
            Next::Relocate { why: Relocation::Lost, attempt: 3 }
        );
        assert_eq!(judge(&live(ServerState::Done, Some(1000.0), 3), &LIMITS, 2, 9999.0), Next::Collect);
    }

    #[test]
    fn the_last_attempt_fails_the_sequence() {
        assert_eq!(judge(&live(ServerState::Error, None, 3), &LIMITS, 2, 1000.0), Next::Fail { why: Relocation::Errored });
        let l = live(ServerState::InProgress, Some(1000.0), 3);
        assert_eq!(judge(&l, &LIMITS, 2, 1101.0), Next::Fail { why: Relocation::DeadlineMissed });
    }

    #[test]
    fn an_owners_stop_does_not_use_up_an_attempt() {
        // Attempt 3 after one stop and one failure: one failure left.
        let l = live(ServerState::Error, None, 3);
        assert_eq!(judge(&l, &LIMITS, 1, 1000.0), Next::Relocate { why: Relocation::Errored, attempt: 4 });
    }

    #[test]
    fn the_plan_the_owner_and_the_marker_end_a_sequence() {
        assert_eq!(next_step(0, 3, false, false), Some(1));
        assert_eq!(next_step(2, 3, false, false), Some(3));
        assert_eq!(next_step(3, 3, false, false), None);
        assert_eq!(next_step(1, 3, true, false), None);
        assert_eq!(next_step(1, 3, false, true), None);
        assert_eq!(next_step(3, extend(3, 2), false, false), Some(4));
        assert_eq!(extend(u32::MAX, 5), u32::MAX);
    }

    #[test]
    fn statuses_map_and_names_carry_step_and_attempt() {
        assert_eq!(ServerState::from_status("IN_PROGRESS"), ServerState::InProgress);
        assert_eq!(ServerState::from_status("weird"), ServerState::Unknown);
        assert_eq!(job_name("md-7", 12, 2), "md-7#12#2");
    }

    #[test]
    fn names_a_boinc_job_name_cannot_carry_are_refused() {
        for ok in ["run7", "md-run.7_a", "na\u{ef}ve"] {
            assert_eq!(bad_name(ok), None, "{ok}");
        }
        for bad in ["", "md run", "tab\there", "a/b", "a\\b", "a#b", "it's", "say\"hi\"", "nl\n"] {
            assert!(bad_name(bad).is_some(), "{bad:?}");
        }
    }
}
