//! The `BLAH_*` commands today's gridmanager sends for
//! `grid_resource = batch boinc` (`docs/spec/blah-dialect.md`), and their result
//! lines. Parsing and formatting of the request lines live in
//! [`super::request`] with the `BOINC_*` ones.
//!
//! Result lines have a fixed number of fields or the gridmanager aborts:
//! submit 4, status 5, everything else 3 (request id included). Every field
//! is escaped, a ClassAd being one field; a field is never empty (`NULL`
//! stands for no error, `N/A` for no job id or ad, as blahp writes).
//!
//! `BLAH_JOB_STATUS_ALL` is not here: the gridmanager never sends it and the
//! spec does not describe its syntax.

use std::borrow::Cow;
use std::path::PathBuf;

use super::error_text::truncate;
use super::escape::escape_into;
use super::reqid::ReqId;
use crate::classad::ClassAd;

/// The usual error text of a successful result (blahp writes `No error`
/// or `No Error`; the gridmanager ignores it when the code is 0).
pub const NO_ERROR: &str = "No error";

/// The placeholder for a missing job id or status ad.
pub const NOT_AVAILABLE: &str = "N/A";

/// The job-status codes of a status result (§5).
pub mod job_status {
    pub const IDLE: i32 = 1;
    pub const RUNNING: i32 = 2;
    /// Gone from the batch system, not by the gridmanager's doing.
    pub const REMOVED: i32 = 3;
    pub const COMPLETED: i32 = 4;
    pub const HELD: i32 = 5;
}

#[derive(Debug, Clone, PartialEq)]
pub enum BlahCommand {
    /// `BLAH_PING <reqid> <batch type>`
    Ping { batch_type: String },
    /// `BLAH_JOB_SUBMIT <reqid> <ClassAd>`
    JobSubmit { ad: ClassAd },
    /// `BLAH_JOB_STATUS <reqid> <job id>`
    JobStatus { job_id: String },
    /// `BLAH_JOB_CANCEL <reqid> <job id>`
    JobCancel { job_id: String },
    /// `BLAH_JOB_REFRESH_PROXY <reqid> <job id> <proxy path>`
    JobRefreshProxy { job_id: String, proxy: PathBuf },
}

impl BlahCommand {
    /// The command code as the gridmanager spells it.
    pub fn code(&self) -> &'static str {
        match self {
            BlahCommand::Ping { .. } => "BLAH_PING",
            BlahCommand::JobSubmit { .. } => "BLAH_JOB_SUBMIT",
            BlahCommand::JobStatus { .. } => "BLAH_JOB_STATUS",
            BlahCommand::JobCancel { .. } => "BLAH_JOB_CANCEL",
            BlahCommand::JobRefreshProxy { .. } => "BLAH_JOB_REFRESH_PROXY",
        }
    }

    /// A failure (code 1) shaped as this command's result must be, so that
    /// any command can be failed without miscounting fields.
    pub fn failure(&self, error: impl Into<String>) -> BlahResult {
        BlahResult::failure_of(self.code(), error)
    }
}

/// The outcome of a `BLAH_*` command. A `code` of 0 is success; any other
/// value is a failure whose `error` the gridmanager shows (as a hold reason
/// for submit, cancel and repeated status failures).
#[derive(Debug, Clone, PartialEq)]
pub enum BlahResult {
    /// `<reqid> <code> <error> <job id | N/A>`
    Submit { code: i32, error: String, job_id: Option<String> },
    /// `<reqid> <code> <error> <job status> <ClassAd | N/A>`
    Status { code: i32, error: String, status: i32, ad: Option<ClassAd> },
    /// `<reqid> <code> <error>`: ping, cancel, refresh proxy.
    Simple { code: i32, error: String },
}

impl BlahResult {
    /// A successful status of a job that has ended (removed or completed):
    /// once the gridmanager has it, nothing more is asked of the job.
    pub fn is_final_status(&self) -> bool {
        matches!(self, BlahResult::Status { code: 0, status: job_status::REMOVED | job_status::COMPLETED, .. })
    }

    /// A failure (code 1) of the command with this code, shaped as its
    /// result must be: all a failure needs to know of its command.
    pub fn failure_of(code: &str, error: impl Into<String>) -> BlahResult {
        let error = error.into();
        match code {
            "BLAH_JOB_SUBMIT" => BlahResult::Submit { code: 1, error, job_id: None },
            "BLAH_JOB_STATUS" => BlahResult::Status { code: 1, error, status: 0, ad: None },
            _ => BlahResult::Simple { code: 1, error },
        }
    }

    /// Success of ping, cancel or refresh proxy.
    pub fn ok() -> Self {
        BlahResult::Simple { code: 0, error: NO_ERROR.into() }
    }

    pub fn submitted(job_id: impl Into<String>) -> Self {
        BlahResult::Submit { code: 0, error: NO_ERROR.into(), job_id: Some(job_id.into()) }
    }

    /// A successful status answer; `status` is one of [`job_status`].
    pub fn status(status: i32, ad: ClassAd) -> Self {
        BlahResult::Status { code: 0, error: NO_ERROR.into(), status, ad: Some(ad) }
    }

    pub fn code(&self) -> i32 {
        match self {
            BlahResult::Submit { code, .. } | BlahResult::Status { code, .. } | BlahResult::Simple { code, .. } => *code,
        }
    }

    pub fn is_error(&self) -> bool {
        self.code() != 0
    }

    /// The result line, without prefix and newline: 4, 5 or 3 fields.
    pub fn encode(&self, reqid: ReqId) -> Vec<u8> {
        let mut out = reqid.to_string().into_bytes();
        let mut field = |f: &[u8]| {
            out.push(b' ');
            escape_into(f, &mut out);
        };
        match self {
            BlahResult::Submit { code, error, job_id } => {
                field(code.to_string().as_bytes());
                field(error_text(error).as_bytes());
                field(non_empty(job_id.as_deref()).as_bytes());
            }
            BlahResult::Status { code, error, status, ad } => {
                field(code.to_string().as_bytes());
                field(error_text(error).as_bytes());
                field(status.to_string().as_bytes());
                match ad {
                    Some(ad) => field(ad.to_string().as_bytes()),
                    None => field(NOT_AVAILABLE.as_bytes()),
                }
            }
            BlahResult::Simple { code, error } => {
                field(code.to_string().as_bytes());
                field(error_text(error).as_bytes());
            }
        }
        out
    }
}

/// An empty field would shift the others: `NULL` (read as "no error" by
/// the gridmanager) instead. Long texts are cut at a char boundary.
fn error_text(error: &str) -> Cow<'_, str> {
    if error.is_empty() {
        return Cow::Borrowed("NULL");
    }
    truncate(error)
}

fn non_empty(id: Option<&str>) -> &str {
    match id {
        Some(id) if !id.is_empty() => id,
        _ => NOT_AVAILABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classad::Value;
    use crate::gahp::error_text::MAX_ERROR_LEN;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn field_counts() {
        let id = ReqId(9);
        assert_eq!(text(BlahResult::ok().encode(id)), "9 0 No\\ error");
        assert_eq!(text(BlahResult::submitted("boinc/x/1").encode(id)), "9 0 No\\ error boinc/x/1");
        let mut ad = ClassAd::new();
        ad.insert("JobStatus", Value::Int(1));
        assert_eq!(text(BlahResult::status(job_status::IDLE, ad).encode(id)), "9 0 No\\ error 1 [\\ JobStatus\\ =\\ 1\\ ]");
    }

    #[test]
    fn failures_have_the_right_shape() {
        let id = ReqId(3);
        let submit = BlahCommand::JobSubmit { ad: ClassAd::new() };
        assert_eq!(text(submit.failure("no app").encode(id)), "3 1 no\\ app N/A");
        let status = BlahCommand::JobStatus { job_id: "j".into() };
        assert_eq!(text(status.failure("gone").encode(id)), "3 1 gone 0 N/A");
        for c in [
            BlahCommand::Ping { batch_type: "boinc".into() },
            BlahCommand::JobCancel { job_id: "j".into() },
            BlahCommand::JobRefreshProxy { job_id: "j".into(), proxy: "/p".into() },
        ] {
            let r = c.failure("x");
            assert!(r.is_error());
            assert_eq!(text(r.encode(id)), "3 1 x");
        }
    }

    #[test]
    fn no_field_is_ever_empty() {
        let id = ReqId(1);
        let r = BlahResult::Submit { code: 0, error: String::new(), job_id: Some(String::new()) };
        assert_eq!(text(r.encode(id)), "1 0 NULL N/A");
        let r = BlahResult::Simple { code: -2, error: "a\0b".into() };
        assert_eq!(text(r.encode(id)), "1 -2 a?b");
        let long = "é".repeat(MAX_ERROR_LEN);
        let line = text(BlahResult::Simple { code: 1, error: long }.encode(id));
        assert!(line.ends_with("...\\ (truncated)") && line.len() < MAX_ERROR_LEN + 40);
    }
}
