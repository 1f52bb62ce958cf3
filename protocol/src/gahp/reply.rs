//! What we write back (`docs/spec/gahp-protocol.md` §4-§7): return lines and
//! result lines, each without response prefix and without newline (the
//! session adds both).

use std::borrow::Cow;
use std::sync::Arc;

use super::blah::BlahResult;
use super::error_text::truncate;
pub use super::error_text::MAX_ERROR_LEN;
use super::escape::{escape_into, join_args, split_args};
use super::query_answer::{seconds, QueryAnswer};
use super::reqid::ReqId;

/// The banner (§1.3), also the `VERSION` reply after `S `. Spaces inside
/// the description are escaped; at most 149 bytes not counting backslashes.
pub const BANNER: &str = "$GahpVersion: 1.0.2 Nov 21 2026 BOINC\\ GAHP\\ (rust)\\ 0.1.0 $";

/// The commands we implement, alphabetical: the reference's list plus
/// `RESPONSE_PREFIX` (§5.1), so the gridmanager uses the prefix, plus the
/// `BLAH_*` commands (`docs/spec/blah-dialect.md`) and the work sequences'
/// `BOINC_SEQUENCE_*` (`docs/sequences.md`).
pub const COMMANDS: &[&str] = &[
    "ASYNC_MODE_OFF",
    "ASYNC_MODE_ON",
    "BLAH_JOB_CANCEL",
    "BLAH_JOB_REFRESH_PROXY",
    "BLAH_JOB_STATUS",
    "BLAH_JOB_SUBMIT",
    "BLAH_PING",
    "BOINC_ABORT_JOBS",
    "BOINC_FETCH_OUTPUT",
    "BOINC_PING",
    "BOINC_QUERY_BATCHES",
    "BOINC_RETIRE_BATCH",
    "BOINC_SELECT_PROJECT",
    "BOINC_SEQUENCE_ABORT",
    "BOINC_SEQUENCE_CREATE",
    "BOINC_SEQUENCE_END",
    "BOINC_SEQUENCE_EXTEND",
    "BOINC_SEQUENCE_FETCH",
    "BOINC_SEQUENCE_QUERY",
    "BOINC_SET_LEASE",
    "BOINC_SUBMIT",
    "COMMANDS",
    "QUIT",
    "RESPONSE_PREFIX",
    "RESULTS",
    "VERSION",
];

/// A line written in direct answer to a request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnLine {
    /// `S`
    Success,
    /// `E`
    Error,
    /// `S <banner>`
    Version,
    /// `S <command> ...`
    Commands,
    /// `S <n>`: the header of a `RESULTS` block of `n` result lines.
    ResultsHeader(usize),
    /// `R`: the async-mode notification (not really a return line, but
    /// written the same way).
    Notify,
}

impl ReturnLine {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ReturnLine::Success => b"S".to_vec(),
            ReturnLine::Error => b"E".to_vec(),
            ReturnLine::Notify => b"R".to_vec(),
            // The banner is already escaped: written as is.
            ReturnLine::Version => format!("S {BANNER}").into_bytes(),
            ReturnLine::Commands => {
                let mut out = b"S ".to_vec();
                out.extend_from_slice(&join_args(COMMANDS));
                out
            }
            ReturnLine::ResultsHeader(n) => format!("S {n}").into_bytes(),
        }
    }
}

/// The outcome of an asynchronous command, written as a result line.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandResult {
    /// `NULL`: PING, SUBMIT, ABORT_JOBS, RETIRE_BATCH, SET_LEASE.
    Ok,
    /// One argument, the message (any command).
    Error(String),
    /// QUERY_BATCHES: one group of `(job name, status)` per requested
    /// batch, in request order.
    Batches { server_time: f64, groups: Vec<Vec<(String, String)>> },
    /// FETCH_OUTPUT.
    Output { exit_status: i64, elapsed_time: f64, cpu_time: f64 },
    /// Any `BLAH_*` command.
    Blah(BlahResult),
    /// The arguments already encoded (each escaped, each after a space),
    /// shared by every request with the same answer.
    Encoded(bytes::Bytes),
    /// A QUERY_BATCHES answer kept compactly, rendered when written;
    /// shared by every request with the same answer: a storm of identical
    /// queries holds one answer however many results wait to be read.
    QueryAnswer(Arc<QueryAnswer>),
}

impl CommandResult {
    pub fn error(message: impl Into<String>) -> Self {
        CommandResult::Error(message.into())
    }

    pub fn is_error(&self) -> bool {
        match self {
            CommandResult::Error(_) => true,
            CommandResult::Blah(result) => result.is_error(),
            _ => false,
        }
    }

    /// `<reqid> <args...>`, every argument escaped.
    pub fn encode(&self, reqid: ReqId) -> Vec<u8> {
        if let CommandResult::Blah(result) = self {
            return result.encode(reqid);
        }
        let mut out = reqid.to_string().into_bytes();
        self.encode_args(&mut out);
        out
    }

    /// This result as [`CommandResult::Encoded`] (a `BLAH_*` result, whose
    /// fields are not the BOINC_* ones, stays as it is).
    pub fn into_encoded(self) -> CommandResult {
        match self {
            CommandResult::Blah(_) | CommandResult::Encoded(_) | CommandResult::QueryAnswer(_) => self,
            other => {
                let mut args = Vec::new();
                other.encode_args(&mut args);
                CommandResult::Encoded(args.into())
            }
        }
    }

    /// The answer of a BOINC_QUERY_BATCHES, structured, compact or already
    /// encoded (the batch monitor shares one compact answer among all who asked): the
    /// server time and, per batch, its (job, status) pairs. `None` for any
    /// other result or an encoding that is not such an answer.
    #[allow(clippy::type_complexity)]
    pub fn batches(&self) -> Option<(f64, Vec<Vec<(String, String)>>)> {
        match self {
            CommandResult::Batches { server_time, groups } => Some((*server_time, groups.clone())),
            CommandResult::QueryAnswer(answer) => Some((answer.server_time(), answer.groups()?)),
            CommandResult::Encoded(args) => {
                // ` NULL <server_time> {<n> {<job> <status>}*n}*`
                let fields = split_args(args.strip_prefix(b" ")?);
                let mut it = fields.into_iter().map(|f| String::from_utf8(f).ok());
                if it.next()?? != "NULL" {
                    return None;
                }
                let server_time: f64 = it.next()??.parse().ok()?;
                let mut groups = Vec::new();
                while let Some(n) = it.next() {
                    let n: usize = n?.parse().ok()?;
                    let mut group = Vec::new();
                    for _ in 0..n {
                        group.push((it.next()??, it.next()??));
                    }
                    groups.push(group);
                }
                Some((server_time, groups))
            }
            _ => None,
        }
    }

    /// ` <arg>...` of a BOINC_* result.
    fn encode_args(&self, out: &mut Vec<u8>) {
        let mut arg = |a: &[u8]| {
            out.push(b' ');
            escape_into(a, out);
        };
        match self {
            CommandResult::Ok => arg(b"NULL"),
            CommandResult::Error(message) => arg(sanitize_message(message).as_bytes()),
            CommandResult::Batches { server_time, groups } => {
                arg(b"NULL");
                arg(seconds(*server_time).as_bytes());
                for group in groups {
                    arg(group.len().to_string().as_bytes());
                    for (job, status) in group {
                        arg(job.as_bytes());
                        arg(status.as_bytes());
                    }
                }
            }
            CommandResult::Output { exit_status, elapsed_time, cpu_time } => {
                arg(b"NULL");
                arg(exit_status.to_string().as_bytes());
                arg(seconds(*elapsed_time).as_bytes());
                arg(seconds(*cpu_time).as_bytes());
            }
            CommandResult::Encoded(args) => out.extend_from_slice(args),
            CommandResult::QueryAnswer(answer) => answer.encode_into(out),
            // Encoded by `encode`: its fields are not the BOINC_* ones.
            CommandResult::Blah(_) => {}
        }
    }
}

/// An error message must be non-empty and not `NULL` (which means success,
/// §3.3), and is cut beyond [`MAX_ERROR_LEN`] at a char boundary, keeping
/// the start.
fn sanitize_message(message: &str) -> Cow<'_, str> {
    if message.is_empty() {
        return Cow::Borrowed("unknown error (empty message)");
    }
    if message == "NULL" {
        return Cow::Borrowed("error: NULL");
    }
    truncate(message)
}

#[cfg(test)]
mod tests {
    use super::super::query_answer::QueryAnswerBuilder;
    use super::*;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn banner_fits_the_gridmanagers_buffer() {
        assert!(BANNER.starts_with('$') && BANNER.ends_with(" $"));
        let counted = BANNER.bytes().filter(|&b| b != b'\\').count();
        assert!(counted <= 149, "{counted}");
        // The description is one argument: no unescaped space inside it.
        let args = super::super::escape::split_args(BANNER.as_bytes());
        assert_eq!(args.len(), 7, "{args:?}");
        assert_eq!(args[5], b"BOINC GAHP (rust) 0.1.0");
    }

    #[test]
    fn return_lines() {
        assert_eq!(text(ReturnLine::Success.encode()), "S");
        assert_eq!(text(ReturnLine::Error.encode()), "E");
        assert_eq!(text(ReturnLine::Notify.encode()), "R");
        assert_eq!(text(ReturnLine::ResultsHeader(0).encode()), "S 0");
        assert_eq!(text(ReturnLine::Version.encode()), "S $GahpVersion: 1.0.2 Nov 21 2026 BOINC\\ GAHP\\ (rust)\\ 0.1.0 $");
        assert_eq!(
            text(ReturnLine::Commands.encode()),
            "S ASYNC_MODE_OFF ASYNC_MODE_ON BLAH_JOB_CANCEL BLAH_JOB_REFRESH_PROXY BLAH_JOB_STATUS \
             BLAH_JOB_SUBMIT BLAH_PING BOINC_ABORT_JOBS BOINC_FETCH_OUTPUT BOINC_PING \
             BOINC_QUERY_BATCHES BOINC_RETIRE_BATCH BOINC_SELECT_PROJECT BOINC_SEQUENCE_ABORT \
             BOINC_SEQUENCE_CREATE BOINC_SEQUENCE_END BOINC_SEQUENCE_EXTEND BOINC_SEQUENCE_FETCH \
             BOINC_SEQUENCE_QUERY BOINC_SET_LEASE \
             BOINC_SUBMIT COMMANDS QUIT RESPONSE_PREFIX RESULTS VERSION"
        );
    }

    #[test]
    fn commands_are_sorted_and_unique() {
        assert!(COMMANDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn results() {
        let id = ReqId(7);
        assert_eq!(text(CommandResult::Ok.encode(id)), "7 NULL");
        assert_eq!(text(CommandResult::error("a b\\c\nd").encode(id)), "7 a\\ b\\\\c\\\nd");
        let batches = CommandResult::Batches { server_time: 1716400010.5123, groups: vec![vec![("j 1".into(), "DONE".into())], vec![]] };
        assert_eq!(text(batches.encode(id)), "7 NULL 1716400010.512300 1 j\\ 1 DONE 0");
        let output = CommandResult::Output { exit_status: -3, elapsed_time: 3612.25, cpu_time: f64::NAN };
        assert_eq!(text(output.encode(id)), "7 NULL -3 3612.250000 0.000000");
        assert!(CommandResult::error("x").is_error());
        assert!(!CommandResult::Ok.is_error());
        let blah = CommandResult::Blah(BlahResult::Simple { code: 2, error: "e".into() });
        assert_eq!(text(blah.encode(id)), "7 2 e");
        // Encoded once, the same line for every request id.
        let batches = CommandResult::Batches { server_time: 1.0, groups: vec![vec![("j 1".into(), "DONE".into())]] };
        let shared = batches.clone().into_encoded();
        assert!(matches!(shared, CommandResult::Encoded(_)));
        assert_eq!(shared.encode(ReqId(9)), batches.encode(ReqId(9)));
        assert_eq!(text(shared.encode(ReqId(10))), "10 NULL 1.000000 1 j\\ 1 DONE");
        assert!(blah.is_error());
        assert!(!CommandResult::Blah(BlahResult::ok()).is_error());
    }

    #[test]
    fn error_messages_are_sanitised() {
        let id = ReqId(1);
        assert_eq!(text(CommandResult::error("").encode(id)), "1 unknown\\ error\\ (empty\\ message)");
        assert_eq!(text(CommandResult::error("NULL").encode(id)), "1 error:\\ NULL");
        assert_eq!(text(CommandResult::error("a\0b").encode(id)), "1 a?b");

        let exact = "é".repeat(MAX_ERROR_LEN / 2);
        assert_eq!(sanitize_message(&exact), exact);
        let long = format!("x{exact}");
        let cut = sanitize_message(&long);
        assert!(cut.starts_with("xé") && cut.ends_with("... (truncated)"));
        assert!(cut.len() <= MAX_ERROR_LEN + 20);
    }

    #[test]
    fn a_query_answer_encoded_while_read_is_the_same_line() {
        use crate::boinc::reply::{parse_query_batch2, read_query_batch2};
        let body = "<query_batch2>\n<server_time>1795000000.25</server_time>\n<batch_size>2</batch_size>\n\
            <job><job_name>a b</job_name><status>DONE</status></job>\n\
            <job><job_name> c&amp;d\\e </job_name><status>IN_PROGRESS</status></job>\n\
            <batch_size>0</batch_size>\n<batch_size>1</batch_size>\n\
            <job><job_name>\u{e9}</job_name><status><![CDATA[UNSENT]]></status></job>\n</query_batch2>\n";
        let states = parse_query_batch2(body.as_bytes()).unwrap();
        let groups: Vec<Vec<(String, String)>> =
            states.batches.into_iter().map(|g| g.into_iter().map(|j| (j.name, j.status)).collect()).collect();
        let built = CommandResult::Batches { server_time: states.server_time, groups }.into_encoded();
        let mut builder = QueryAnswerBuilder::new();
        let server_time = read_query_batch2(body.as_bytes(), &mut builder).unwrap();
        assert_eq!(builder.groups(), 3);
        let answer = CommandResult::QueryAnswer(Arc::new(builder.finish(server_time)));
        assert_eq!(answer.encode(ReqId(4)), built.encode(ReqId(4)));
        // A head of any length.
        let mut builder = QueryAnswerBuilder::new();
        builder.group(1);
        builder.job("j", "DONE");
        let answer = CommandResult::QueryAnswer(Arc::new(builder.finish(1e60)));
        assert_eq!(text(answer.encode(ReqId(3))), format!("3 NULL {:.6} 1 j DONE", 1e60));
    }

    #[test]
    fn an_encoded_query_answer_reads_back_as_batches() {
        let groups = vec![
            vec![("a b".to_string(), "DONE".to_string()), ("c\\d".into(), "ERROR".into())],
            vec![],
            vec![("e".into(), "IN_PROGRESS".into())],
        ];
        let answer = CommandResult::Batches { server_time: 1795000000.5, groups: groups.clone() };
        assert_eq!(answer.batches(), Some((1795000000.5, groups.clone())));
        assert_eq!(answer.clone().into_encoded().batches(), Some((1795000000.5, groups.clone())));
        let compact = CommandResult::QueryAnswer(Arc::new(QueryAnswer::from_groups(1795000000.5, &groups)));
        assert_eq!(compact.batches(), Some((1795000000.5, groups)));
        assert_eq!(compact.encode(ReqId(2)), answer.encode(ReqId(2)));
        assert_eq!(CommandResult::Ok.into_encoded().batches(), None);
        assert_eq!(CommandResult::Encoded(bytes::Bytes::from_static(b" NULL 1.0 2 a DONE")).batches(), None, "a group cut short");
    }
}
