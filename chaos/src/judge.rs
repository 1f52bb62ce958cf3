//! The invariants, as pure functions of what the daemon said and what the
//! server holds, so that each one is shown to fail on a fabricated truth.

pub mod hostile;

use std::collections::{BTreeSet, HashMap};

use crate::truth::ServerBatch;

/// One submit of the workload and what the daemon answered in the end.
#[derive(Debug, Clone)]
pub struct Submitted<'a> {
    pub batch: &'a str,
    pub jobs: Vec<&'a str>,
    /// The daemon reported success.
    pub ok: bool,
    /// The error text of the first failed attempt, if any.
    pub error: Option<&'a str>,
}

/// A success iff every job exists, exactly once; no batch name twice; an
/// error leaves nothing a resubmit would duplicate unless its text says the
/// jobs exist.
pub fn submits(submitted: &[Submitted], server: &[ServerBatch]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_name: HashMap<&str, Vec<&ServerBatch>> = HashMap::new();
    for b in server {
        by_name.entry(b.name.as_str()).or_default().push(b);
    }
    let mut names: Vec<_> = by_name.iter().filter(|(_, l)| l.len() > 1).map(|(n, l)| (*n, l.len())).collect();
    names.sort();
    for (name, n) in names {
        out.push(format!("batch name {name} exists {n} times on the server"));
    }
    for s in submitted {
        let want: BTreeSet<&str> = s.jobs.iter().copied().collect();
        let on_server = by_name.get(s.batch).cloned().unwrap_or_default();
        let jobs: Vec<&str> = on_server.iter().flat_map(|b| b.jobs.iter().map(|(n, _)| n.as_str())).collect();
        let distinct: BTreeSet<&str> = jobs.iter().copied().collect();
        if distinct.len() != jobs.len() {
            out.push(format!("batch {}: a job exists twice on the server", s.batch));
        }
        if s.ok && distinct != want {
            out.push(format!(
                "batch {}: success reported, the server has {} of {} jobs (and {} others)",
                s.batch,
                distinct.intersection(&want).count(),
                want.len(),
                distinct.difference(&want).count()
            ));
        }
        if !s.ok && !jobs.is_empty() {
            let said = s.error.unwrap_or("");
            if !said.contains("exist") {
                out.push(format!("batch {}: error {said:?} left {} jobs on the server without saying so", s.batch, jobs.len()));
            }
        }
    }
    out
}

/// A fetched output against the server's copy, byte for byte.
pub fn output(job: &str, fetched: &[u8], server: &[u8]) -> Option<String> {
    if fetched == server {
        return None;
    }
    let at = fetched.iter().zip(server).position(|(a, b)| a != b).unwrap_or(fetched.len().min(server.len()));
    Some(format!("output of {job}: {} bytes fetched, the server's copy has {}; they differ from byte {at}", fetched.len(), server.len()))
}

/// Files in an output directory that no fetch should have left there.
pub fn leftovers(present: &[String], expected: &BTreeSet<String>) -> Vec<String> {
    present.iter().filter(|n| !expected.contains(*n)).cloned().collect()
}

/// A stderr file a fetch appends to, before and after: as it was, or with
/// a whole text added (ending in a newline, as the daemon writes it);
/// never half-appended or emptied.
pub fn appended(file: &str, before: &[u8], after: Option<&[u8]>) -> Option<String> {
    match after {
        None => Some(format!("{file}: gone (it held {} bytes)", before.len())),
        Some(after) if after == before => None,
        Some(after) if after.starts_with(before) && after.ends_with(b"\n") => None,
        Some(after) => {
            Some(format!("{file}: {} bytes before the fetch, {} after, not the old text and a whole new one", before.len(), after.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, name: &str, jobs: &[&str]) -> ServerBatch {
        ServerBatch {
            id,
            name: name.into(),
            state: 1,
            expire_time: 0.0,
            jobs: jobs.iter().map(|j| (j.to_string(), "DONE".to_string())).collect(),
        }
    }

    fn ok<'a>(name: &'a str, jobs: &[&'a str]) -> Submitted<'a> {
        Submitted { batch: name, jobs: jobs.to_vec(), ok: true, error: None }
    }

    #[test]
    fn a_faithful_server_passes() {
        let server = [batch(1, "b1", &["j1", "j2"]), batch(2, "b2", &["k1"])];
        let failed = Submitted { batch: "b3", jobs: vec!["m1"], ok: false, error: Some("error creating batch: -1 x") };
        assert_eq!(submits(&[ok("b1", &["j1", "j2"]), ok("b2", &["k1"]), failed], &server), Vec::<String>::new());
    }

    #[test]
    fn a_batch_name_twice_is_a_violation() {
        let server = [batch(1, "b1", &["j1"]), batch(2, "b1", &[])];
        let v = submits(&[ok("b1", &["j1"])], &server);
        assert!(v.iter().any(|v| v.contains("exists 2 times")), "{v:?}");
    }

    #[test]
    fn a_missing_job_after_success_is_a_violation() {
        let server = [batch(1, "b1", &["j1"])];
        let v = submits(&[ok("b1", &["j1", "j2"])], &server);
        assert!(v.iter().any(|v| v.contains("has 1 of 2 jobs")), "{v:?}");
    }

    #[test]
    fn a_job_twice_is_a_violation() {
        let server = [batch(1, "b1", &["j1", "j1"])];
        let v = submits(&[ok("b1", &["j1"])], &server);
        assert!(v.iter().any(|v| v.contains("a job exists twice")), "{v:?}");
    }

    #[test]
    fn an_error_that_leaves_jobs_must_say_so() {
        let server = [batch(1, "b1", &["j1"])];
        let silent = Submitted { batch: "b1", jobs: vec!["j1"], ok: false, error: Some("error submitting jobs: -1 boom") };
        assert_eq!(submits(&[silent], &server).len(), 1);
        let honest = Submitted { batch: "b1", jobs: vec!["j1"], ok: false, error: Some("-1 a batch named b1 already exists") };
        assert!(submits(&[honest], &server).is_empty());
    }

    #[test]
    fn a_differing_output_byte_is_a_violation() {
        assert_eq!(output("j", b"HELLO", b"HELLO"), None);
        let v = output("j", b"HELLO", b"HELLo").unwrap();
        assert!(v.contains("differ from byte 4"), "{v}");
        assert!(output("j", b"HELL", b"HELLO").is_some());
    }

    #[test]
    fn a_half_appended_or_emptied_stderr_is_a_violation() {
        assert_eq!(appended("e", b"old\n", Some(b"old\n")), None);
        assert_eq!(appended("e", b"old\n", Some(b"old\nnew text\n")), None);
        assert!(appended("e", b"old\n", Some(b"old\nnew te")).is_some());
        assert!(appended("e", b"old\n", Some(b"")).is_some());
        assert!(appended("e", b"old\n", None).is_some());
    }

    #[test]
    fn a_partial_file_is_a_leftover() {
        let expected: BTreeSet<String> = ["a.out".to_string()].into();
        let present = vec!["a.out".to_string(), ".a.out.tmp123".to_string()];
        assert_eq!(leftovers(&present, &expected), vec![".a.out.tmp123".to_string()]);
    }
}
