//! Typed requests of the `BOINC_*` and `BLAH_*` dialects and their parser.
//!
//! Everything that is a syntax error per `docs/spec/gahp-protocol.md` (unknown
//! command, wrong argument count, a count that is not a non-negative integer,
//! a bad request id, 1-5 or >6 trailing job parameters, a mode other than
//! `ALL`/`SOME`, invalid UTF-8 in a name) is a [`ParseError`] and becomes `E`.
//! Anything else (unknown project, bad job parameter value, ...) is decided
//! later and reported in the result line.

use std::path::PathBuf;

use super::args::{Args, LineWriter};
pub use super::args::{InputFile, ParamValue, ParseError};
use super::blah::{BlahCommand, BlahResult};
use super::escape::split_args;
use super::reply::CommandResult;
pub use super::reqid::ReqId;
use super::sequence_commands::SequenceCommand;
use crate::classad::ClassAd;
use crate::secret::Authenticator;

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Commands,
    Version,
    Quit,
    Results,
    AsyncModeOn,
    AsyncModeOff,
    /// The new prefix, unescaped (may be empty).
    ResponsePrefix(Vec<u8>),
    /// Synchronous; `url` as given (a missing trailing `/` is added later).
    SelectProject {
        url: String,
        authenticator: Authenticator,
    },
    /// Every command answered by its own result line: the `BOINC_*`
    /// commands but SELECT_PROJECT, the `BOINC_SEQUENCE_*` and the
    /// `BLAH_*` ones.
    Command {
        reqid: ReqId,
        command: Command,
    },
}

impl Request {
    /// The request id of a request that has one (a command's).
    pub fn reqid(&self) -> Option<ReqId> {
        match self {
            Request::Command { reqid, .. } => Some(*reqid),
            _ => None,
        }
    }
}

/// Every asynchronous command of the three families, as one type: the
/// session hands each to the one dispatch, which hands it to whoever
/// answers it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `BOINC_*`.
    Boinc(AsyncCommand),
    /// `BOINC_SEQUENCE_*` (`docs/sequences.md`).
    Sequence(SequenceCommand),
    /// `BLAH_*` (`docs/spec/blah-dialect.md`).
    Blah(BlahCommand),
}

impl Command {
    /// The command code as the gridmanager spells it.
    pub fn code(&self) -> &'static str {
        match self {
            Command::Boinc(c) => c.code(),
            Command::Sequence(c) => c.code(),
            Command::Blah(c) => c.code(),
        }
    }

    /// A failure shaped as this command's result must be (a `BLAH_*`
    /// result has its own fields), so that any command can be failed the
    /// same way.
    pub fn failure(&self, error: impl Into<String>) -> CommandResult {
        Self::failure_of(self.code(), error)
    }

    /// The failure of the command with this code: what a dispatch keeps
    /// of a command while it runs is its code (a 100,000-job submit is
    /// not held twice).
    pub fn failure_of(code: &str, error: impl Into<String>) -> CommandResult {
        match code.starts_with("BLAH_") {
            true => CommandResult::Blah(BlahResult::failure_of(code, error)),
            false => CommandResult::Error(error.into()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum AsyncCommand {
    Ping,
    Submit(SubmitBatch),
    /// `min_mod_time` as a finite non-negative number; 0 = all jobs.
    QueryBatches {
        min_mod_time: f64,
        batches: Vec<String>,
    },
    FetchOutput(FetchOutput),
    /// One or more job names.
    AbortJobs {
        jobs: Vec<String>,
    },
    RetireBatch {
        batch: String,
    },
    /// Seconds since the epoch.
    SetLease {
        batch: String,
        lease_time: f64,
    },
}

impl AsyncCommand {
    /// The command code as HTCondor spells it, for logs and error texts.
    pub fn code(&self) -> &'static str {
        match self {
            AsyncCommand::Ping => "BOINC_PING",
            AsyncCommand::Submit(_) => "BOINC_SUBMIT",
            AsyncCommand::QueryBatches { .. } => "BOINC_QUERY_BATCHES",
            AsyncCommand::FetchOutput(_) => "BOINC_FETCH_OUTPUT",
            AsyncCommand::AbortJobs { .. } => "BOINC_ABORT_JOBS",
            AsyncCommand::RetireBatch { .. } => "BOINC_RETIRE_BATCH",
            AsyncCommand::SetLease { .. } => "BOINC_SET_LEASE",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SubmitBatch {
    pub batch_name: String,
    pub app_name: String,
    /// May be empty (syntactically valid; the pipeline reports `no jobs`).
    pub jobs: Vec<JobSpec>,
    pub params: JobParams,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub name: String,
    /// Unescaped arguments, each possibly empty.
    pub args: Vec<String>,
    pub inputs: Vec<InputFile>,
}

/// The six trailing parameters of BOINC_SUBMIT, applied to every job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobParams {
    pub rsc_fpops_est: ParamValue<f64>,
    pub rsc_fpops_bound: ParamValue<f64>,
    pub rsc_memory_bound: ParamValue<f64>,
    pub rsc_disk_bound: ParamValue<f64>,
    pub delay_bound: ParamValue<f64>,
    pub app_version_num: ParamValue<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchMode {
    All,
    Some,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FetchOutput {
    pub job_name: String,
    pub dir: PathBuf,
    /// Absolute, or relative to `dir`.
    pub stderr_file: PathBuf,
    pub mode: FetchMode,
    pub specs: Vec<OutputSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputSpec {
    /// Logical (template `open_name`) name of an output file.
    pub src: String,
    /// Absolute, or relative to `dir`.
    pub dst: PathBuf,
}

impl FetchMode {
    /// The mode as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchMode::All => "ALL",
            FetchMode::Some => "SOME",
        }
    }
}

/// Longest command code quoted in [`ParseError::UnknownCommand`], so a line
/// of junk does not become a huge log line.
const MAX_QUOTED_CODE: usize = 64;

/// Parses one logical line (terminator removed, escapes intact).
///
/// Command codes are case-insensitive, arguments case-sensitive. Argument
/// rules, per command (`n` = request id, `[0-9]+`, non-zero, fits a `u32`):
///
/// * `COMMANDS`, `VERSION`, `QUIT`, `RESULTS`, `ASYNC_MODE_ON`,
///   `ASYNC_MODE_OFF`: extra arguments are ignored (spec §5.1).
/// * `RESPONSE_PREFIX <prefix>`: exactly one argument, may be empty.
/// * `BOINC_SELECT_PROJECT <url> <authenticator>`: exactly two.
/// * `BOINC_PING <n>`: nothing more.
/// * `BOINC_SUBMIT <n> <batch> <app> <njobs> {job}*njobs [6 params]`: after
///   the jobs exactly 0 or 6 tokens.
/// * `BOINC_QUERY_BATCHES <n> <min_mod_time> <nbatches> {<batch>}*nbatches`:
///   exactly `nbatches` names.
/// * `BOINC_FETCH_OUTPUT <n> <job> <dir> <stderr> <ALL|SOME> <k> {<src> <dst>}*k`:
///   exactly `k` pairs.
/// * `BOINC_ABORT_JOBS <n> <job>+`: one or more names.
/// * `BOINC_RETIRE_BATCH <n> <batch>`, `BOINC_SET_LEASE <n> <batch> <time>`:
///   nothing more.
/// * `BLAH_PING <n> <batch type>`, `BLAH_JOB_SUBMIT <n> <ClassAd>`,
///   `BLAH_JOB_STATUS <n> <job id>`, `BLAH_JOB_CANCEL <n> <job id>`,
///   `BLAH_JOB_REFRESH_PROXY <n> <job id> <proxy path>`: nothing more; a
///   ClassAd that does not parse is an error.
///
/// Names must be UTF-8; paths are taken as raw bytes. `BLAH_*` text is
/// decoded lossily instead: `E` makes the gridmanager abort, and it would
/// send the same line again after its restart, so a stray byte is better
/// left for the result line to report. An empty command code
/// (empty line, or a line starting with a space) is [`ParseError::Empty`].
pub fn parse(line: &[u8]) -> Result<Request, ParseError> {
    let mut tokens = split_args(line).into_iter();
    let code = tokens.next().unwrap_or_default();
    if code.is_empty() {
        return Err(ParseError::Empty);
    }
    match code.to_ascii_uppercase().as_slice() {
        b"COMMANDS" => Ok(Request::Commands),
        b"VERSION" => Ok(Request::Version),
        b"QUIT" => Ok(Request::Quit),
        b"RESULTS" => Ok(Request::Results),
        b"ASYNC_MODE_ON" => Ok(Request::AsyncModeOn),
        b"ASYNC_MODE_OFF" => Ok(Request::AsyncModeOff),
        b"RESPONSE_PREFIX" => {
            let mut a = Args::new("RESPONSE_PREFIX", tokens);
            let prefix = a.raw("prefix")?;
            a.end()?;
            Ok(Request::ResponsePrefix(prefix))
        }
        b"BOINC_SELECT_PROJECT" => parse_select_project(Args::new("BOINC_SELECT_PROJECT", tokens)),
        b"BOINC_PING" => parse_async("BOINC_PING", tokens, |a| {
            a.end()?;
            Ok(AsyncCommand::Ping)
        }),
        b"BOINC_SUBMIT" => parse_async("BOINC_SUBMIT", tokens, parse_submit),
        b"BOINC_QUERY_BATCHES" => parse_async("BOINC_QUERY_BATCHES", tokens, parse_query_batches),
        b"BOINC_FETCH_OUTPUT" => parse_async("BOINC_FETCH_OUTPUT", tokens, parse_fetch_output),
        b"BOINC_ABORT_JOBS" => parse_async("BOINC_ABORT_JOBS", tokens, |a| {
            if a.remaining() == 0 {
                return Err(a.error("no job names".into()));
            }
            let mut jobs = Vec::with_capacity(a.remaining());
            while a.remaining() > 0 {
                jobs.push(a.name("job name")?);
            }
            Ok(AsyncCommand::AbortJobs { jobs })
        }),
        b"BOINC_RETIRE_BATCH" => parse_async("BOINC_RETIRE_BATCH", tokens, |a| {
            let batch = a.name("batch name")?;
            a.end()?;
            Ok(AsyncCommand::RetireBatch { batch })
        }),
        b"BOINC_SET_LEASE" => parse_async("BOINC_SET_LEASE", tokens, |a| {
            let batch = a.name("batch name")?;
            let lease_time = a.number("lease time")?;
            a.end()?;
            Ok(AsyncCommand::SetLease { batch, lease_time })
        }),
        b"BLAH_PING" => parse_blah("BLAH_PING", tokens, |a| {
            let batch_type = a.text("batch type")?;
            Ok(BlahCommand::Ping { batch_type })
        }),
        b"BLAH_JOB_SUBMIT" => parse_blah("BLAH_JOB_SUBMIT", tokens, |a| {
            let text = a.text("ClassAd")?;
            let ad = ClassAd::parse(&text).map_err(|e| a.error(e.to_string()))?;
            Ok(BlahCommand::JobSubmit { ad })
        }),
        b"BLAH_JOB_STATUS" => parse_blah("BLAH_JOB_STATUS", tokens, |a| {
            let job_id = a.text("job id")?;
            Ok(BlahCommand::JobStatus { job_id })
        }),
        b"BLAH_JOB_CANCEL" => parse_blah("BLAH_JOB_CANCEL", tokens, |a| {
            let job_id = a.text("job id")?;
            Ok(BlahCommand::JobCancel { job_id })
        }),
        b"BLAH_JOB_REFRESH_PROXY" => parse_blah("BLAH_JOB_REFRESH_PROXY", tokens, |a| {
            let job_id = a.text("job id")?;
            let proxy = a.path("proxy path")?;
            Ok(BlahCommand::JobRefreshProxy { job_id, proxy })
        }),
        _ => match super::sequence_commands::parse(line) {
            Some(parsed) => parsed.map(|(reqid, command)| Request::Command { reqid, command: Command::Sequence(command) }),
            None => {
                let shown = code.get(..MAX_QUOTED_CODE).unwrap_or(&code);
                Err(ParseError::UnknownCommand(String::from_utf8_lossy(shown).into_owned()))
            }
        },
    }
}

fn parse_select_project(mut a: Args) -> Result<Request, ParseError> {
    // Never quote these arguments in an error: one is the secret.
    if a.remaining() != 2 {
        let got = a.remaining();
        return Err(a.error(format!("expected 2 arguments (url, authenticator), got {got}")));
    }
    let url = a.name("project url")?;
    let authenticator = Authenticator::new(a.name("authenticator")?);
    Ok(Request::SelectProject { url, authenticator })
}

fn parse_async(
    command: &'static str,
    tokens: std::vec::IntoIter<Vec<u8>>,
    body: impl FnOnce(&mut Args) -> Result<AsyncCommand, ParseError>,
) -> Result<Request, ParseError> {
    let mut a = Args::new(command, tokens);
    let reqid = a.reqid()?;
    let command = body(&mut a)?;
    Ok(Request::Command { reqid, command: Command::Boinc(command) })
}

/// Request id, the body's arguments, and nothing more.
fn parse_blah(
    command: &'static str,
    tokens: std::vec::IntoIter<Vec<u8>>,
    body: impl FnOnce(&mut Args) -> Result<BlahCommand, ParseError>,
) -> Result<Request, ParseError> {
    let mut a = Args::new(command, tokens);
    let reqid = a.reqid()?;
    let command = body(&mut a)?;
    a.end()?;
    Ok(Request::Command { reqid, command: Command::Blah(command) })
}

fn parse_submit(a: &mut Args) -> Result<AsyncCommand, ParseError> {
    let batch_name = a.name("batch name")?;
    let app_name = a.name("app name")?;
    let njobs = a.count("job count")?;
    // A job takes at least 3 tokens; checking first means a huge count
    // fails at once and the capacity below is bounded by the input size.
    if njobs > a.remaining() / 3 {
        return Err(a.error(format!("job count {njobs} exceeds the arguments given")));
    }
    let mut jobs = Vec::with_capacity(njobs);
    for i in 0..njobs {
        jobs.push(parse_job(a).map_err(|e| in_job(e, i))?);
    }
    let params = match a.remaining() {
        0 => JobParams::default(),
        6 => JobParams {
            rsc_fpops_est: a.param_f64()?,
            rsc_fpops_bound: a.param_f64()?,
            rsc_memory_bound: a.param_f64()?,
            rsc_disk_bound: a.param_f64()?,
            delay_bound: a.param_f64()?,
            app_version_num: a.param_i64()?,
        },
        n => return Err(a.error(format!("expected 0 or 6 job parameters after the jobs, got {n}"))),
    };
    Ok(AsyncCommand::Submit(SubmitBatch { batch_name, app_name, jobs, params }))
}

fn parse_job(a: &mut Args) -> Result<JobSpec, ParseError> {
    let name = a.name("job name")?;
    let nargs = a.count("argument count")?;
    if nargs > a.remaining() {
        return Err(a.error(format!("argument count {nargs} exceeds the arguments given")));
    }
    let mut args = Vec::with_capacity(nargs);
    for _ in 0..nargs {
        args.push(a.name("job argument")?);
    }
    let ninfiles = a.count("input file count")?;
    if ninfiles > a.remaining() / 2 {
        return Err(a.error(format!("input file count {ninfiles} exceeds the arguments given")));
    }
    let mut inputs = Vec::with_capacity(ninfiles);
    for _ in 0..ninfiles {
        let src = a.path("input path")?;
        let dst_name = a.name("input file name")?;
        inputs.push(InputFile { src, dst_name });
    }
    Ok(JobSpec { name, args, inputs })
}

/// Says which job (0-based) an error is about.
fn in_job(e: ParseError, index: usize) -> ParseError {
    match e {
        ParseError::Malformed { command, reason } => ParseError::Malformed { command, reason: format!("job {index}: {reason}") },
        other => other,
    }
}

fn parse_query_batches(a: &mut Args) -> Result<AsyncCommand, ParseError> {
    let min_mod_time = a.decimal("min_mod_time")?;
    let n = a.count("batch count")?;
    if n != a.remaining() {
        let got = a.remaining();
        return Err(a.error(format!("batch count {n} but {got} names given")));
    }
    let mut batches = Vec::with_capacity(n);
    for _ in 0..n {
        batches.push(a.name("batch name")?);
    }
    Ok(AsyncCommand::QueryBatches { min_mod_time, batches })
}

fn parse_fetch_output(a: &mut Args) -> Result<AsyncCommand, ParseError> {
    let job_name = a.name("job name")?;
    let dir = a.path("directory")?;
    let stderr_file = a.path("stderr file")?;
    let mode = match a.raw("mode")?.as_slice() {
        b"ALL" => FetchMode::All,
        b"SOME" => FetchMode::Some,
        _ => return Err(a.error("mode is neither ALL nor SOME".into())),
    };
    let n = a.count("file spec count")?;
    let got = a.remaining();
    if n.checked_mul(2) != Some(got) {
        return Err(a.error(format!("file spec count {n} but {got} arguments follow (need {n} pairs)")));
    }
    let mut specs = Vec::with_capacity(n);
    for _ in 0..n {
        let src = a.name("output file name")?;
        let dst = a.path("output destination")?;
        specs.push(OutputSpec { src, dst });
    }
    Ok(AsyncCommand::FetchOutput(FetchOutput { job_name, dir, stderr_file, mode, specs }))
}

/// Writes `req` as HTCondor's gridmanager would: upper-case code, every
/// argument escaped, no terminator. The inverse of [`parse`]: for every
/// request `r` that `parse` returns, `parse(&format(&r)) == Ok(r)`. (So a
/// NUL byte is written as is rather than as `?`; the gridmanager never
/// sends one.) Job parameters are always written as six tokens.
pub fn format(req: &Request) -> Vec<u8> {
    let mut w = LineWriter(Vec::new());
    match req {
        Request::Commands => w.code("COMMANDS"),
        Request::Version => w.code("VERSION"),
        Request::Quit => w.code("QUIT"),
        Request::Results => w.code("RESULTS"),
        Request::AsyncModeOn => w.code("ASYNC_MODE_ON"),
        Request::AsyncModeOff => w.code("ASYNC_MODE_OFF"),
        Request::ResponsePrefix(prefix) => {
            w.code("RESPONSE_PREFIX");
            w.arg(prefix);
        }
        Request::SelectProject { url, authenticator } => {
            w.code("BOINC_SELECT_PROJECT");
            w.arg(url);
            // The request line is one of the two places the secret goes.
            w.arg(authenticator.expose());
        }
        Request::Command { reqid, command: Command::Boinc(command) } => {
            w.code(command.code());
            w.arg(reqid.to_string());
            format_async(&mut w, command);
        }
        Request::Command { reqid, command: Command::Blah(command) } => {
            use std::os::unix::ffi::OsStrExt;
            w.code(command.code());
            w.arg(reqid.to_string());
            match command {
                BlahCommand::Ping { batch_type } => w.arg(batch_type),
                BlahCommand::JobSubmit { ad } => w.arg(ad.to_string()),
                BlahCommand::JobStatus { job_id } | BlahCommand::JobCancel { job_id } => w.arg(job_id),
                BlahCommand::JobRefreshProxy { job_id, proxy } => {
                    w.arg(job_id);
                    w.arg(proxy.as_os_str().as_bytes());
                }
            }
        }
        Request::Command { reqid, command: Command::Sequence(command) } => return super::sequence_commands::format(*reqid, command),
    }
    w.0
}

fn format_async(w: &mut LineWriter, command: &AsyncCommand) {
    use std::os::unix::ffi::OsStrExt;
    match command {
        AsyncCommand::Ping => {}
        AsyncCommand::Submit(batch) => {
            w.arg(&batch.batch_name);
            w.arg(&batch.app_name);
            w.arg(batch.jobs.len().to_string());
            for job in &batch.jobs {
                w.arg(&job.name);
                w.arg(job.args.len().to_string());
                for arg in &job.args {
                    w.arg(arg);
                }
                w.arg(job.inputs.len().to_string());
                for input in &job.inputs {
                    w.arg(input.src.as_os_str().as_bytes());
                    w.arg(&input.dst_name);
                }
            }
            let p = &batch.params;
            for value in [&p.rsc_fpops_est, &p.rsc_fpops_bound, &p.rsc_memory_bound, &p.rsc_disk_bound, &p.delay_bound] {
                w.param(value);
            }
            w.param(&p.app_version_num);
        }
        AsyncCommand::QueryBatches { min_mod_time, batches } => {
            if *min_mod_time == 0.0 {
                w.arg("0");
            } else {
                // Display is the shortest form that parses back exactly,
                // and never uses an exponent.
                w.arg(min_mod_time.to_string());
            }
            w.arg(batches.len().to_string());
            for batch in batches {
                w.arg(batch);
            }
        }
        AsyncCommand::FetchOutput(f) => {
            w.arg(&f.job_name);
            w.arg(f.dir.as_os_str().as_bytes());
            w.arg(f.stderr_file.as_os_str().as_bytes());
            w.arg(f.mode.as_str());
            w.arg(f.specs.len().to_string());
            for spec in &f.specs {
                w.arg(&spec.src);
                w.arg(spec.dst.as_os_str().as_bytes());
            }
        }
        AsyncCommand::AbortJobs { jobs } => {
            for job in jobs {
                w.arg(job);
            }
        }
        AsyncCommand::RetireBatch { batch } => w.arg(batch),
        AsyncCommand::SetLease { batch, lease_time } => {
            w.arg(batch);
            w.arg(lease_time.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Request {
        match parse(line.as_bytes()) {
            Ok(r) => r,
            Err(e) => panic!("{line:?}: {e}"),
        }
    }

    fn cmd(line: &str) -> AsyncCommand {
        match ok(line) {
            Request::Command { command: Command::Boinc(command), .. } => command,
            other => panic!("{other:?}"),
        }
    }

    fn bad(line: &str) -> ParseError {
        match parse(line.as_bytes()) {
            Ok(r) => panic!("{line:?} parsed as {r:?}"),
            Err(e) => e,
        }
    }

    fn roundtrip(line: &str) {
        let r = ok(line);
        assert_eq!(parse(&format(&r)), Ok(r), "{line:?}");
    }

    #[test]
    fn generic_commands_ignore_extra_arguments() {
        assert_eq!(ok("COMMANDS"), Request::Commands);
        assert_eq!(ok("version x y"), Request::Version);
        assert_eq!(ok("Quit"), Request::Quit);
        assert_eq!(ok("RESULTS "), Request::Results);
        assert_eq!(ok("async_mode_on 1"), Request::AsyncModeOn);
        assert_eq!(ok("ASYNC_MODE_OFF"), Request::AsyncModeOff);
    }

    #[test]
    fn empty_and_unknown() {
        assert_eq!(bad(""), ParseError::Empty);
        assert_eq!(bad(" COMMANDS"), ParseError::Empty);
        assert_eq!(bad("BOINC_BOGUS 13"), ParseError::UnknownCommand("BOINC_BOGUS".into()));
        assert!(matches!(bad("NOT_A_COMMAND"), ParseError::UnknownCommand(_)));
        let long = "X".repeat(1000);
        match bad(&long) {
            ParseError::UnknownCommand(c) => assert_eq!(c.len(), MAX_QUOTED_CODE),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn response_prefix() {
        assert_eq!(ok("RESPONSE_PREFIX GAHP:"), Request::ResponsePrefix(b"GAHP:".to_vec()));
        assert_eq!(ok("RESPONSE_PREFIX "), Request::ResponsePrefix(vec![]));
        assert_eq!(ok("RESPONSE_PREFIX a\\ b"), Request::ResponsePrefix(b"a b".to_vec()));
        bad("RESPONSE_PREFIX");
        bad("RESPONSE_PREFIX a b");
    }

    #[test]
    fn select_project() {
        let r = ok("BOINC_SELECT_PROJECT http://x/p/ 888feb");
        assert_eq!(r, Request::SelectProject { url: "http://x/p/".into(), authenticator: Authenticator::new("888feb") });
        assert_eq!(format(&r), b"BOINC_SELECT_PROJECT http://x/p/ 888feb");
        bad("BOINC_SELECT_PROJECT http://x/p/");
        let e = bad("BOINC_SELECT_PROJECT http://x/p/ secret123 extra");
        assert!(!e.to_string().contains("secret123"));
        let e = parse(b"BOINC_SELECT_PROJECT u secret\xff").unwrap_err();
        assert!(!e.to_string().contains("secret"));
    }

    #[test]
    fn request_ids() {
        assert_eq!(ok("boinc_ping 0002"), Request::Command { reqid: ReqId(2), command: Command::Boinc(AsyncCommand::Ping) });
        ok("BOINC_PING 4294967295");
        for id in ["0", "00", "-1", "+1", "12abc", "", "4294967296", "1.0", " 1"] {
            bad(&format!("BOINC_PING {id}"));
        }
        bad("BOINC_PING");
        bad("BOINC_PING 1 extra");
    }

    #[test]
    fn submit_from_the_spec() {
        let line = "BOINC_SUBMIT 3 condor#s#worker#1716400000 worker 2 \
            condor#s#worker#1716400000#42.0 2 -n 5 1 /home/ann/my\\ run/in.dat in.dat \
            condor#s#worker#1716400000#42.1 2 -n 6 1 /home/ann/my\\ run/in.dat in.dat \
            NULL NULL NULL NULL NULL NULL";
        let AsyncCommand::Submit(b) = cmd(line) else { panic!() };
        assert_eq!(b.batch_name, "condor#s#worker#1716400000");
        assert_eq!(b.app_name, "worker");
        assert_eq!(b.jobs.len(), 2);
        assert_eq!(b.jobs[1].name, "condor#s#worker#1716400000#42.1");
        assert_eq!(b.jobs[1].args, vec!["-n", "6"]);
        assert_eq!(b.jobs[1].inputs[0].src, PathBuf::from("/home/ann/my run/in.dat"));
        assert_eq!(b.jobs[1].inputs[0].dst_name, "in.dat");
        assert_eq!(b.params, JobParams::default());
        roundtrip(line);
    }

    #[test]
    fn submit_params() {
        let AsyncCommand::Submit(b) = cmd("BOINC_SUBMIT 1 b a 1 j 0 0 1e12 3600 1.5E9 0 x 3") else { panic!() };
        assert_eq!(b.params.rsc_fpops_est, ParamValue::Value(1e12));
        assert_eq!(b.params.rsc_fpops_bound, ParamValue::Value(3600.0));
        assert_eq!(b.params.rsc_memory_bound, ParamValue::Value(1.5e9));
        assert_eq!(b.params.rsc_disk_bound, ParamValue::Value(0.0));
        assert_eq!(b.params.delay_bound, ParamValue::Invalid("x".into()));
        assert_eq!(b.params.app_version_num, ParamValue::Value(3));

        let AsyncCommand::Submit(b) = cmd("BOINC_SUBMIT 1 b a 0 inf nan 1e999 null NULL 3.0") else { panic!() };
        assert_eq!(b.params.rsc_fpops_est, ParamValue::Invalid("inf".into()));
        assert_eq!(b.params.rsc_fpops_bound, ParamValue::Invalid("nan".into()));
        assert_eq!(b.params.rsc_memory_bound, ParamValue::Invalid("1e999".into()));
        assert_eq!(b.params.rsc_disk_bound, ParamValue::Invalid("null".into()));
        assert_eq!(b.params.delay_bound, ParamValue::Unset);
        assert_eq!(b.params.app_version_num, ParamValue::Invalid("3.0".into()));
        roundtrip("BOINC_SUBMIT 1 b a 0 inf nan 1e999 null NULL 3.0");
        roundtrip("BOINC_SUBMIT 1 b a 1 j 0 0 1e12 3600 1.5E9 0 x 3");
    }

    #[test]
    fn submit_structure_errors() {
        // 1-5 and 7 trailing tokens
        for n in [1, 2, 3, 4, 5, 7] {
            bad(&format!("BOINC_SUBMIT 1 b a 0{}", " NULL".repeat(n)));
        }
        ok("BOINC_SUBMIT 1 b a 0");
        bad("BOINC_SUBMIT 1 b a");
        bad("BOINC_SUBMIT 1 b a -1");
        bad("BOINC_SUBMIT 1 b a x");
        bad("BOINC_SUBMIT 1 b a 1 j 0");
        bad("BOINC_SUBMIT 1 b a 1 j 1 0");
        bad("BOINC_SUBMIT 1 b a 1 j 0 1 /src");
        bad("BOINC_SUBMIT 1 b a 4000000000 j 0 0");
        bad("BOINC_SUBMIT 1 b a 1 j 4000000000 0");
        bad("BOINC_SUBMIT 1 b a 1 j 0 4000000000 /a a");
        bad("BOINC_SUBMIT 1 b a 99999999999999999999999 j 0 0");
        // an empty job argument survives
        let AsyncCommand::Submit(b) = cmd("BOINC_SUBMIT 1 b a 1 j 2  x 0") else { panic!() };
        assert_eq!(b.jobs[0].args, vec!["", "x"]);
    }

    #[test]
    fn names_must_be_utf8_paths_need_not() {
        assert!(parse(b"BOINC_RETIRE_BATCH 1 \xff").is_err());
        assert!(parse(b"BOINC_SUBMIT 1 b a 1 j 1 \xff 0").is_err());
        let AsyncCommand::Submit(b) = cmd_bytes(b"BOINC_SUBMIT 1 b a 1 j 0 1 /x\xff y") else { panic!() };
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(b.jobs[0].inputs[0].src.as_os_str().as_bytes(), b"/x\xff");
    }

    fn cmd_bytes(line: &[u8]) -> AsyncCommand {
        match parse(line) {
            Ok(Request::Command { command: Command::Boinc(command), .. }) => command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn query_batches() {
        assert_eq!(
            cmd("BOINC_QUERY_BATCHES 5 0 2 a b"),
            AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["a".into(), "b".into()] }
        );
        assert_eq!(
            cmd("BOINC_QUERY_BATCHES 7 1716400070.904100 0"),
            AsyncCommand::QueryBatches { min_mod_time: 1716400070.9041, batches: vec![] }
        );
        ok("BOINC_QUERY_BATCHES 7 1. 0");
        ok("BOINC_QUERY_BATCHES 7 .5 0");
        for t in ["-1", "1e9", "+1", "inf", "nan", ".", "", "1.2.3", "0x10"] {
            bad(&format!("BOINC_QUERY_BATCHES 7 {t} 0"));
        }
        bad(&format!("BOINC_QUERY_BATCHES 7 1{} 0", "0".repeat(400)));
        bad("BOINC_QUERY_BATCHES 12 0 x");
        bad("BOINC_QUERY_BATCHES 12 0 2 a");
        bad("BOINC_QUERY_BATCHES 12 0 1 a b");
        bad("BOINC_QUERY_BATCHES 12 0");
        roundtrip("BOINC_QUERY_BATCHES 7 1716400070.904100 1 a");
        roundtrip("BOINC_QUERY_BATCHES 7 0.0 1 a");
        roundtrip("BOINC_QUERY_BATCHES 7 0.0000001 1 a");
    }

    #[test]
    fn fetch_output() {
        let line = "BOINC_FETCH_OUTPUT 8 j /home/ann/my\\ run err.42.0 SOME 2 out.dat out.42.0 b /abs/b";
        let AsyncCommand::FetchOutput(f) = cmd(line) else { panic!() };
        assert_eq!(f.job_name, "j");
        assert_eq!(f.dir, PathBuf::from("/home/ann/my run"));
        assert_eq!(f.stderr_file, PathBuf::from("err.42.0"));
        assert_eq!(f.mode, FetchMode::Some);
        assert_eq!(
            f.specs,
            vec![OutputSpec { src: "out.dat".into(), dst: "out.42.0".into() }, OutputSpec { src: "b".into(), dst: "/abs/b".into() },]
        );
        roundtrip(line);
        ok("BOINC_FETCH_OUTPUT 7 j /d e ALL 0");
        bad("BOINC_FETCH_OUTPUT 7 j /d e all 0");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ANY 0");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ALL");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ALL 1");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ALL 1 a");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ALL 1 a b c");
        bad("BOINC_FETCH_OUTPUT 7 j /d e ALL 0 a");
    }

    #[test]
    fn abort_retire_lease() {
        assert_eq!(cmd("BOINC_ABORT_JOBS 9 a b"), AsyncCommand::AbortJobs { jobs: vec!["a".into(), "b".into()] });
        bad("BOINC_ABORT_JOBS 9");
        assert_eq!(cmd("BOINC_RETIRE_BATCH 10 b"), AsyncCommand::RetireBatch { batch: "b".into() });
        bad("BOINC_RETIRE_BATCH 10");
        bad("BOINC_RETIRE_BATCH 10 b c");
        assert_eq!(cmd("BOINC_SET_LEASE 4 b 1716421605"), AsyncCommand::SetLease { batch: "b".into(), lease_time: 1716421605.0 });
        ok("BOINC_SET_LEASE 4 b 1.5e9");
        bad("BOINC_SET_LEASE 4 b inf");
        bad("BOINC_SET_LEASE 4 b");
        bad("BOINC_SET_LEASE 4 b 1 2");
        roundtrip("BOINC_SET_LEASE 4 b 1716421605");
        assert_eq!(format(&ok("boinc_set_lease 4 b 1716421605")), b"BOINC_SET_LEASE 4 b 1716421605");
    }

    #[test]
    fn format_escapes_and_keeps_nul() {
        let r = Request::Command {
            reqid: ReqId(3),
            command: Command::Boinc(AsyncCommand::AbortJobs { jobs: vec!["a b".into(), "c\\\n".into(), "".into(), "n\0".into()] }),
        };
        assert_eq!(format(&r), b"BOINC_ABORT_JOBS 3 a\\ b c\\\\\\\n  n\0");
        assert_eq!(parse(&format(&r)), Ok(r));
    }

    #[test]
    fn a_failure_kept_as_its_code_has_the_shape_of_its_commands_result() {
        let fields = |c: &Command| {
            let line = Command::failure_of(c.code(), "it broke").encode(ReqId(7));
            split_args(&line).len()
        };
        let blah = |b: BlahCommand| Command::Blah(b);
        // The request id, then the command's own fields.
        assert_eq!(fields(&blah(BlahCommand::JobSubmit { ad: ClassAd::default() })), 4);
        assert_eq!(fields(&blah(BlahCommand::JobStatus { job_id: "j".into() })), 5);
        assert_eq!(fields(&blah(BlahCommand::JobCancel { job_id: "j".into() })), 3);
        assert_eq!(fields(&blah(BlahCommand::Ping { batch_type: "boinc".into() })), 3);
        assert_eq!(fields(&Command::Boinc(AsyncCommand::Ping)), 2);
        assert_eq!(fields(&Command::Sequence(SequenceCommand::End { name: "s".into() })), 2);
        let c = Command::Blah(BlahCommand::JobStatus { job_id: "j".into() });
        assert_eq!(c.failure("x"), Command::failure_of("BLAH_JOB_STATUS", "x"));
    }
}
