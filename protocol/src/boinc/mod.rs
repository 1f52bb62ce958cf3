//! BOINC's remote job submission API (`docs/spec/boinc-rpc.md`): request XML
//! builders and lenient reply parsers. Pure: the caller does the HTTP.
//!
//! Replies of a real server are not always well-formed XML (PHP warnings as
//! HTML, `<aborted NAME>` never closed, bodies cut short by a PHP fatal
//! error), so parsers scan for the elements they need, the way BOINC's own C
//! client does, and classify what they cannot use (see [`ReplyError`]).

pub mod command_line;
pub mod reply;
pub mod request;
pub mod xml;

/// The server scripts, appended to the project URL by plain concatenation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    SubmitRpcHandler,
    JobFile,
    GetOutput,
}

impl Script {
    pub fn path(self) -> &'static str {
        match self {
            Script::SubmitRpcHandler => "submit_rpc_handler.php",
            Script::JobFile => "job_file.php",
            Script::GetOutput => "get_output.php",
        }
    }
}

/// Why a reply could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplyError {
    /// The server answered with `<error><error_num>N</error_num>` (N != 0):
    /// a BOINC error. Reported to the client, never retried.
    #[error("{num} {msg}")]
    Boinc { num: i64, msg: String },
    /// A PHP fatal error page (`<b>Fatal error</b>: ...`): the script died
    /// part-way, possibly after acting. `message` is the fatal error's text
    /// with HTML tags removed (e.g. `Uncaught mysqli_sql_exception:
    /// Duplicate entry '7-10' for key 'job_file_id' in ...`).
    #[error("server script failed: {message}")]
    PhpFatal { message: String },
    /// No success marker, a torn body, garbage: the reply was lost or cut.
    /// Transient from the client's point of view.
    #[error("unusable reply: {0}")]
    Malformed(String),
}

impl ReplyError {
    /// A PHP fatal error caused by a duplicate key: the row the request
    /// tried to insert (a file, or a file-batch association) already exists.
    pub fn is_duplicate_entry(&self) -> bool {
        matches!(self, ReplyError::PhpFatal { message } if message.contains("Duplicate entry"))
    }

    /// A PHP fatal error that says the database connection failed: the
    /// next call may well pass (unlike a server bug such as an SQL syntax
    /// error, which hits every time).
    pub fn is_database_unavailable(&self) -> bool {
        const PASSING: [&str; 7] = [
            "Lost connection to MySQL server",
            "MySQL server has gone away",
            "Too many connections",
            "Deadlock found",
            "Lock wait timeout exceeded",
            "Connection refused",
            "Connection timed out",
        ];
        matches!(self, ReplyError::PhpFatal { message } if PASSING.iter().any(|p| message.contains(p)))
    }
}

/// Input and output logical names of an app, in template order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Templates {
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// A runner app's inputs and output, by their open names (docs/runner.md).
pub const RUNNER_EXE_INPUT: &str = "condor_exec.exe";
pub const RUNNER_JOB_ZIP: &str = "condor_job.zip";
pub const RUNNER_OUT_ZIP: &str = "condor_out.zip";

impl Templates {
    /// An app is a runner when its templates are the runner's: no
    /// configuration says which apps are, so every layer asks this.
    pub fn is_runner(&self) -> bool {
        self.inputs == [RUNNER_EXE_INPUT, RUNNER_JOB_ZIP] && self.outputs == [RUNNER_OUT_ZIP]
    }
}

/// One job of a `query_batch2` reply.
#[derive(Debug, Clone, PartialEq)]
pub struct JobState {
    pub name: String,
    /// Verbatim: DONE, ERROR, IN_PROGRESS, UNSENT, or whatever the server says.
    pub status: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchStates {
    pub server_time: f64,
    /// One group per `<batch_size>`, in reply order.
    pub batches: Vec<Vec<JobState>>,
}

/// The `<completed_job>` block of `query_completed_job`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompletedJob {
    pub error_mask: i64,
    pub canonical_resultid: i64,
    pub error_resultid: i64,
    pub exit_status: i64,
    pub elapsed_time: f64,
    pub cpu_time: f64,
    /// CDATA content, entity-decoded, trimmed.
    pub stderr_out: String,
}

/// One `<batch>` of `query_batches`, or the head of a `query_batch` reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchInfo {
    pub id: i64,
    pub name: String,
    pub app_name: String,
    pub state: i64,
    pub njobs: i64,
    pub create_time: f64,
    pub expire_time: f64,
    /// 0 until the batch is complete.
    pub completion_time: f64,
    pub fraction_done: f64,
    pub nerror_jobs: i64,
    /// Job names (only `query_batch` lists them).
    pub jobs: Vec<String>,
}

/// One `<job>` of a `query_batch` reply asked with `get_job_details`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobDetails {
    pub name: String,
    /// `done`, `error`, `in_progress` or `queued`.
    pub status: String,
    /// Names of the job's error bits: `too_many_error_results`, `cancelled`, ...
    pub errors: Vec<String>,
    /// Exit statuses of the instances that failed on their hosts.
    pub exit_statuses: Vec<i64>,
}

/// A job of a `submit_batch` request.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitJob<'a> {
    pub name: &'a str,
    /// Arguments, joined with single spaces into `<command_line>` (omitted
    /// when there are none).
    pub args: &'a [String],
    /// Physical names of the job's input files, in order (`local_staged`).
    pub files: Vec<&'a str>,
}

/// The batch-wide job parameters of `submit_batch`; 0 = unspecified.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SubmitParams {
    pub app_version_num: i64,
    pub rsc_fpops_est: f64,
    pub rsc_fpops_bound: f64,
    pub rsc_memory_bound: f64,
    pub rsc_disk_bound: f64,
    pub delay_bound: f64,
}
