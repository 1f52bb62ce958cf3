//! The `BOINC_SEQUENCE_*` commands (work sequences, `docs/sequences.md`):
//! their grammar, their inverse, and their result lines.
//!
//! Same discipline as the rest of the `BOINC_*` dialect: a request id first,
//! counted lists whose counts must match exactly, names in UTF-8, paths as
//! raw bytes, `NULL` for "none". A syntax error is a [`ParseError`] (`E`);
//! anything else (unknown sequence, missing file) goes in the result line.

use std::path::PathBuf;

use super::args::{parse_digits, Args, InputFile, LineWriter, ParseError};
use super::escape::{escape_into, split_args};
use super::reqid::ReqId;

/// The command codes, as HTCondor spells them (upper case, sorted).
pub const SEQUENCE_COMMANDS: &[&str] = &[
    "BOINC_SEQUENCE_ABORT",
    "BOINC_SEQUENCE_CREATE",
    "BOINC_SEQUENCE_END",
    "BOINC_SEQUENCE_EXTEND",
    "BOINC_SEQUENCE_FETCH",
    "BOINC_SEQUENCE_QUERY",
];

#[derive(Debug, Clone, PartialEq)]
pub enum SequenceCommand {
    Create(CreateSequence),
    /// Adds `steps` steps after the last one planned.
    Extend {
        name: String,
        steps: u32,
    },
    /// No step after the current one.
    End {
        name: String,
    },
    Query {
        name: String,
    },
    Fetch(FetchSequence),
    Abort {
        name: String,
    },
}

impl SequenceCommand {
    pub fn code(&self) -> &'static str {
        match self {
            SequenceCommand::Create(_) => "BOINC_SEQUENCE_CREATE",
            SequenceCommand::Extend { .. } => "BOINC_SEQUENCE_EXTEND",
            SequenceCommand::End { .. } => "BOINC_SEQUENCE_END",
            SequenceCommand::Query { .. } => "BOINC_SEQUENCE_QUERY",
            SequenceCommand::Fetch(_) => "BOINC_SEQUENCE_FETCH",
            SequenceCommand::Abort { .. } => "BOINC_SEQUENCE_ABORT",
        }
    }

    /// The sequence the command is about.
    pub fn name(&self) -> &str {
        match self {
            SequenceCommand::Create(c) => &c.name,
            SequenceCommand::Fetch(f) => &f.name,
            SequenceCommand::Extend { name, .. }
            | SequenceCommand::End { name }
            | SequenceCommand::Query { name }
            | SequenceCommand::Abort { name } => name,
        }
    }
}

/// `BOINC_SEQUENCE_CREATE <n> <name> <app> <steps> <max_step_time>
/// <max_attempts> <end_marker|NULL> <nstate> {<path> <state name>}*nstate
/// <nargs> {<arg>}*nargs <ninputs> {<path> <name>}*ninputs`
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSequence {
    pub name: String,
    pub app_name: String,
    /// Planned steps; at least 1.
    pub steps: u32,
    /// Real seconds a step may take before it is relocated; at least 1.
    pub max_step_time: u32,
    /// Attempts per step before the sequence fails; at least 1.
    pub max_attempts: u32,
    /// An output file of this name ends the sequence after its step.
    pub end_marker: Option<String>,
    /// The initial state files (W1's); at least one. `dst_name` is the
    /// state file's name, which every step reads and writes.
    pub state_files: Vec<InputFile>,
    /// Command-line arguments of every step.
    pub args: Vec<String>,
    /// Inputs of every step besides the state files.
    pub inputs: Vec<InputFile>,
}

/// Which step's files `BOINC_SEQUENCE_FETCH` wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSelector {
    /// The last completed step (the final state once the sequence is done).
    Latest,
    /// Step `n`, counted from 1; only completed steps have files.
    Step(u32),
}

/// `BOINC_SEQUENCE_FETCH <n> <name> <LATEST|step> <dir>`
#[derive(Debug, Clone, PartialEq)]
pub struct FetchSequence {
    pub name: String,
    pub step: StepSelector,
    pub dir: PathBuf,
}

/// Parses a `BOINC_SEQUENCE_*` line; `None` when the code is not one of
/// [`SEQUENCE_COMMANDS`] (so the caller tries its other commands).
pub fn parse(line: &[u8]) -> Option<Result<(ReqId, SequenceCommand), ParseError>> {
    let mut tokens = split_args(line).into_iter();
    let code = tokens.next().unwrap_or_default().to_ascii_uppercase();
    let command = SEQUENCE_COMMANDS.iter().copied().find(|c| c.as_bytes() == code.as_slice())?;
    let mut a = Args::new(command, tokens);
    Some(parse_body(command, &mut a))
}

fn parse_body(command: &'static str, a: &mut Args) -> Result<(ReqId, SequenceCommand), ParseError> {
    let reqid = a.reqid()?;
    let parsed = match command {
        "BOINC_SEQUENCE_CREATE" => SequenceCommand::Create(parse_create(a)?),
        "BOINC_SEQUENCE_EXTEND" => {
            let name = a.name("sequence name")?;
            let steps = positive(a, "step count")?;
            SequenceCommand::Extend { name, steps }
        }
        "BOINC_SEQUENCE_FETCH" => {
            let name = a.name("sequence name")?;
            let step = match a.raw("step")?.as_slice() {
                b"LATEST" => StepSelector::Latest,
                digits => match parse_digits(digits).and_then(|n| u32::try_from(n).ok()) {
                    Some(n) if n > 0 => StepSelector::Step(n),
                    _ => return Err(a.error("step is neither LATEST nor an integer in 1..=4294967295".into())),
                },
            };
            let dir = a.path("directory")?;
            SequenceCommand::Fetch(FetchSequence { name, step, dir })
        }
        other => {
            let name = a.name("sequence name")?;
            match other {
                "BOINC_SEQUENCE_END" => SequenceCommand::End { name },
                "BOINC_SEQUENCE_QUERY" => SequenceCommand::Query { name },
                _ => SequenceCommand::Abort { name },
            }
        }
    };
    a.end()?;
    Ok((reqid, parsed))
}

fn parse_create(a: &mut Args) -> Result<CreateSequence, ParseError> {
    let name = a.name("sequence name")?;
    let app_name = a.name("app name")?;
    let steps = positive(a, "step count")?;
    let max_step_time = positive(a, "max step time")?;
    let max_attempts = positive(a, "max attempts")?;
    let end_marker = match a.name("end marker")? {
        marker if marker == "NULL" => None,
        marker if marker.is_empty() || marker.contains('/') => {
            return Err(a.error("end marker must be a plain file name or NULL".into()));
        }
        marker => Some(marker),
    };
    let state_files = file_list(a, "state file")?;
    if state_files.is_empty() {
        return Err(a.error("a sequence needs at least one state file".into()));
    }
    let nargs = a.count("argument count")?;
    if nargs > a.remaining() {
        return Err(a.error(format!("argument count {nargs} exceeds the arguments given")));
    }
    let mut args = Vec::with_capacity(nargs);
    for _ in 0..nargs {
        args.push(a.name("step argument")?);
    }
    let inputs = file_list(a, "input file")?;
    Ok(CreateSequence { name, app_name, steps, max_step_time, max_attempts, end_marker, state_files, args, inputs })
}

/// `<k> {<path> <name>}*k`
fn file_list(a: &mut Args, what: &str) -> Result<Vec<InputFile>, ParseError> {
    let n = a.count(&format!("{what} count"))?;
    if n > a.remaining() / 2 {
        return Err(a.error(format!("{what} count {n} exceeds the arguments given")));
    }
    let mut files = Vec::with_capacity(n);
    for _ in 0..n {
        let src = a.path(&format!("{what} path"))?;
        let dst_name = a.name(&format!("{what} name"))?;
        files.push(InputFile { src, dst_name });
    }
    Ok(files)
}

fn positive(a: &mut Args, what: &str) -> Result<u32, ParseError> {
    match u32::try_from(a.count(what)?) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(a.error(format!("{what} is not an integer in 1..=4294967295"))),
    }
}

/// Writes the request as the gridmanager would; the inverse of [`parse`].
pub fn format(reqid: ReqId, command: &SequenceCommand) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut w = LineWriter(Vec::new());
    w.code(command.code());
    w.arg(reqid.to_string());
    w.arg(command.name());
    let files = |w: &mut LineWriter, files: &[InputFile]| {
        w.arg(files.len().to_string());
        for f in files {
            w.arg(f.src.as_os_str().as_bytes());
            w.arg(&f.dst_name);
        }
    };
    match command {
        SequenceCommand::Create(c) => {
            w.arg(&c.app_name);
            w.arg(c.steps.to_string());
            w.arg(c.max_step_time.to_string());
            w.arg(c.max_attempts.to_string());
            w.arg(c.end_marker.as_deref().unwrap_or("NULL"));
            files(&mut w, &c.state_files);
            w.arg(c.args.len().to_string());
            for arg in &c.args {
                w.arg(arg);
            }
            files(&mut w, &c.inputs);
        }
        SequenceCommand::Extend { steps, .. } => w.arg(steps.to_string()),
        SequenceCommand::Fetch(f) => {
            match f.step {
                StepSelector::Latest => w.arg("LATEST"),
                StepSelector::Step(n) => w.arg(n.to_string()),
            }
            w.arg(f.dir.as_os_str().as_bytes());
        }
        SequenceCommand::End { .. } | SequenceCommand::Query { .. } | SequenceCommand::Abort { .. } => {}
    }
    w.0
}

/// Where a sequence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceStatus {
    /// A step is planned or live.
    Running,
    /// Every planned step completed, or it was ended (command or marker).
    Completed,
    /// A step ran out of attempts.
    Failed,
    Aborted,
}

impl SequenceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SequenceStatus::Running => "RUNNING",
            SequenceStatus::Completed => "COMPLETED",
            SequenceStatus::Failed => "FAILED",
            SequenceStatus::Aborted => "ABORTED",
        }
    }
}

/// A relocated attempt of a step: the job that was given up.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadBranch {
    pub step: u32,
    pub attempt: u32,
    /// Why it was given up (`deadline`, `error: ...`, `lost`).
    pub reason: String,
    /// Seconds since the epoch.
    pub submitted: f64,
    pub abandoned: f64,
}

/// Result lines of the `BOINC_SEQUENCE_*` commands; every command may also
/// answer with the ordinary one-argument error line.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceResult {
    /// `<n> NULL`: CREATE, EXTEND, END, ABORT.
    Ok,
    Error(String),
    /// `<n> NULL <status> <steps_done> <steps_planned> <current_step>
    /// <attempt> <relocations> <project_url> <reason|NULL> <ndead>
    /// {<step> <attempt> <reason> <submitted> <abandoned>}*ndead`
    Query(SequenceState),
    /// `<n> NULL <step> <nfiles> {<file name>}*nfiles`: the step whose
    /// files were written and the names written into the directory.
    Fetched {
        step: u32,
        files: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SequenceState {
    pub status: SequenceStatus,
    pub steps_done: u32,
    pub steps_planned: u32,
    /// The step live now (0 when none is).
    pub current_step: u32,
    pub attempt: u32,
    pub relocations: u32,
    pub project_url: String,
    /// Why it failed or was aborted.
    pub reason: Option<String>,
    pub dead_branches: Vec<DeadBranch>,
}

impl SequenceResult {
    /// This result as the result queue keeps every result: success and
    /// error as any command's, the rest as its arguments, encoded once.
    pub fn into_result(self) -> super::reply::CommandResult {
        use super::reply::CommandResult;
        match self {
            SequenceResult::Ok => CommandResult::Ok,
            SequenceResult::Error(message) => CommandResult::Error(message),
            other => {
                // The arguments after the request id, whatever id it is.
                let line = other.encode(ReqId(0));
                CommandResult::Encoded(bytes::Bytes::copy_from_slice(&line[1..]))
            }
        }
    }

    pub fn encode(&self, reqid: ReqId) -> Vec<u8> {
        use super::reply::CommandResult;
        let mut out = match self {
            // One spelling of success and error for every command.
            SequenceResult::Ok => return CommandResult::Ok.encode(reqid),
            SequenceResult::Error(message) => return CommandResult::error(message.as_str()).encode(reqid),
            _ => CommandResult::Ok.encode(reqid),
        };
        let mut arg = |a: &str| {
            out.push(b' ');
            escape_into(a.as_bytes(), &mut out);
        };
        match self {
            SequenceResult::Query(s) => {
                arg(s.status.as_str());
                for n in [s.steps_done, s.steps_planned, s.current_step, s.attempt, s.relocations] {
                    arg(&n.to_string());
                }
                arg(&s.project_url);
                arg(s.reason.as_deref().filter(|r| !r.is_empty() && *r != "NULL").unwrap_or("NULL"));
                arg(&s.dead_branches.len().to_string());
                for d in &s.dead_branches {
                    arg(&d.step.to_string());
                    arg(&d.attempt.to_string());
                    arg(&d.reason);
                    arg(&format!("{:.6}", finite(d.submitted)));
                    arg(&format!("{:.6}", finite(d.abandoned)));
                }
            }
            SequenceResult::Fetched { step, files } => {
                arg(&step.to_string());
                arg(&files.len().to_string());
                for f in files {
                    arg(f);
                }
            }
            SequenceResult::Ok | SequenceResult::Error(_) => {}
        }
        out
    }
}

fn finite(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sequence_command_is_advertised() {
        // The parser knows them from its own list; COMMANDS must not drift from it.
        for c in SEQUENCE_COMMANDS {
            assert!(super::super::reply::COMMANDS.contains(c), "{c}");
        }
    }

    fn ok(line: &str) -> (ReqId, SequenceCommand) {
        match parse(line.as_bytes()) {
            Some(Ok(r)) => r,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    fn bad(line: &str) -> String {
        match parse(line.as_bytes()) {
            Some(Err(e)) => e.to_string(),
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    #[test]
    fn create_with_everything() {
        let (id, c) = ok("boinc_sequence_create 4 seq\\ 1 stepper 20 600 3 DONE 1 /tmp/s\\ 0 state 2 -n 5 1 /tmp/in params");
        assert_eq!(id, ReqId(4));
        let SequenceCommand::Create(c) = c else { panic!() };
        assert_eq!(c.name, "seq 1");
        assert_eq!((c.steps, c.max_step_time, c.max_attempts), (20, 600, 3));
        assert_eq!(c.end_marker.as_deref(), Some("DONE"));
        assert_eq!(c.state_files, vec![InputFile { src: "/tmp/s 0".into(), dst_name: "state".into() }]);
        assert_eq!(c.args, vec!["-n", "5"]);
        assert_eq!(c.inputs[0].dst_name, "params");
    }

    #[test]
    fn short_commands() {
        assert_eq!(ok("BOINC_SEQUENCE_EXTEND 2 s 5").1, SequenceCommand::Extend { name: "s".into(), steps: 5 });
        assert_eq!(ok("BOINC_SEQUENCE_END 2 s").1, SequenceCommand::End { name: "s".into() });
        assert_eq!(ok("BOINC_SEQUENCE_QUERY 2 s").1, SequenceCommand::Query { name: "s".into() });
        assert_eq!(ok("BOINC_SEQUENCE_ABORT 2 s").1, SequenceCommand::Abort { name: "s".into() });
        let fetch = |step| SequenceCommand::Fetch(FetchSequence { name: "s".into(), step, dir: "/o".into() });
        assert_eq!(ok("BOINC_SEQUENCE_FETCH 2 s LATEST /o").1, fetch(StepSelector::Latest));
        assert_eq!(ok("BOINC_SEQUENCE_FETCH 2 s 7 /o").1, fetch(StepSelector::Step(7)));
        assert!(parse(b"BOINC_SUBMIT 1 b a 0").is_none());
        assert!(parse(b"").is_none());
    }

    #[test]
    fn arity_and_ranges_are_syntax_errors() {
        assert!(bad("BOINC_SEQUENCE_END 2 s x").contains("extra"));
        assert!(bad("BOINC_SEQUENCE_END 0 s").contains("request id"));
        assert!(bad("BOINC_SEQUENCE_QUERY 2").contains("missing sequence name"));
        assert!(bad("BOINC_SEQUENCE_EXTEND 2 s 0").contains("step count"));
        assert!(bad("BOINC_SEQUENCE_EXTEND 2 s 4294967296").contains("step count"));
        assert!(bad("BOINC_SEQUENCE_FETCH 2 s 0 /o").contains("LATEST"));
        assert!(bad("BOINC_SEQUENCE_FETCH 2 s latest /o").contains("LATEST"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 NULL 0 0 0").contains("state file"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 ../x 1 /s st 0 0").contains("end marker"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 0 NULL 1 /s st 0 0").contains("max attempts"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 NULL 2 /s st 0").contains("state file count"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 NULL 1 /s st 0 1 /i").contains("input file count"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 NULL 1 /s st 0 0 x").contains("extra"));
        assert!(bad("BOINC_SEQUENCE_CREATE 1 s a 2 60 3 NULL 1 /s st 5 a 0").contains("argument count"));
    }

    #[test]
    fn format_inverts_parse() {
        for line in [
            "BOINC_SEQUENCE_CREATE 9 a\\ b app 3 60 1 NULL 2 /x s1 /y s2 1 \\  0",
            "BOINC_SEQUENCE_FETCH 1 s 4294967295 /a\\ b",
            "BOINC_SEQUENCE_EXTEND 3 s 1",
            "BOINC_SEQUENCE_ABORT 3 s",
        ] {
            let (id, c) = ok(line);
            assert_eq!(String::from_utf8(format(id, &c)).unwrap(), line);
        }
    }

    #[test]
    fn results() {
        let id = ReqId(5);
        let text = |r: SequenceResult| String::from_utf8(r.encode(id)).unwrap();
        assert_eq!(text(SequenceResult::Ok), "5 NULL");
        assert_eq!(text(SequenceResult::Error("no such sequence".into())), "5 no\\ such\\ sequence");
        let state = SequenceState {
            status: SequenceStatus::Running,
            steps_done: 4,
            steps_planned: 20,
            current_step: 5,
            attempt: 2,
            relocations: 1,
            project_url: "http://127.0.0.1:8/p/".into(),
            reason: None,
            dead_branches: vec![DeadBranch { step: 5, attempt: 1, reason: "deadline missed".into(), submitted: 10.0, abandoned: 70.5 }],
        };
        assert_eq!(
            text(SequenceResult::Query(state)),
            "5 NULL RUNNING 4 20 5 2 1 http://127.0.0.1:8/p/ NULL 1 5 1 deadline\\ missed 10.000000 70.500000"
        );
        assert_eq!(text(SequenceResult::Fetched { step: 3, files: vec!["state".into(), "out 1".into()] }), "5 NULL 3 2 state out\\ 1");
    }
}
