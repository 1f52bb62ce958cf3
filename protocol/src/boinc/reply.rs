//! Parsers for the replies of `submit_rpc_handler.php` and `job_file.php`
//! (`docs/spec/boinc-rpc.md` §4, §5, §10), and the message for a failed download
//! (§7.1).
//!
//! Every parser applies the same rules, in this order:
//!
//! 1. an `<error>` with an `<error_num>` that reads as non-zero is
//!    [`ReplyError::Boinc`] (the last one wins, as in the C client);
//! 2. without the reply's success marker, a PHP fatal error page is
//!    [`ReplyError::PhpFatal`], anything else [`ReplyError::Malformed`];
//! 3. a reply with its marker but unusable content is `Malformed` too.
//!
//! Markers are stricter than the C client's where a torn body could pass
//! for a short answer (`</query_batch2>`, `</absent_files>`, `</templates>`).

use super::xml::{self, find, parse_double, parse_int, Token, Tokens};
use super::{BatchInfo, BatchStates, CompletedJob, JobDetails, JobState, ReplyError, Templates};

/// Longest `error_msg` kept; the C client drops messages over 255 bytes, we
/// keep more but not a hostile megabyte.
const MAX_ERROR_MSG: usize = 1024;
/// Longest message of a PHP fatal error.
const MAX_FATAL_MSG: usize = 500;
/// Longest download error message.
const MAX_DOWNLOAD_MSG: usize = 300;

/// `ping`: success ⇔ a `<success>` element.
pub fn parse_ping(body: &[u8]) -> Result<(), ReplyError> {
    parse_success(body)
}

/// `abort_jobs`, `retire_batch`, `set_expire_time` (and `ping`,
/// `upload_files`): success ⇔ `<success>` or `<success/>`, whatever its value
/// (as in the C client).
pub fn parse_success(body: &[u8]) -> Result<(), ReplyError> {
    let marker = Reader::new(body).any(|t| matches!(t, Token::Start(b"success") | Token::Empty(b"success")));
    settle(body, marker, "no <success>", Ok(()))
}

/// `upload_files`: `<success/>`.
pub fn parse_upload_files(body: &[u8]) -> Result<(), ReplyError> {
    parse_success(body)
}

/// Why PHP refused an `upload_files` call before the script stored any file
/// (its stock limits, seen on a real server; spec §5.2). Nothing was
/// stored, so the same files may be sent again in smaller calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadRefusal {
    /// The body was over `post_max_size`: PHP dropped it whole, and the
    /// script found no request to parse.
    BodyDropped,
    /// A file part was over `upload_max_filesize`; `filename` is the part's
    /// file name as the server names it (the first such part).
    FileTooBig { filename: String },
    /// More file parts than `max_file_uploads`: PHP kept `kept` of `sent`.
    TooManyFiles { kept: usize, sent: usize },
}

/// An error reply of any script saying PHP dropped the request's body (over
/// `post_max_size`): the request itself is what the script did not get,
/// so nothing follows the colon.
pub fn body_dropped(num: i64, msg: &str) -> bool {
    num == -1 && msg.trim_end() == "can't parse request message:"
}

/// The refusal an `upload_files` error reply stands for, if it is one.
pub fn upload_refusal(num: i64, msg: &str) -> Option<UploadRefusal> {
    const TOO_BIG: &str = " upload failed because: The uploaded file exceeds upload_max_filesize of php.ini.";
    if body_dropped(num, msg) {
        return Some(UploadRefusal::BodyDropped);
    }
    if num != -1 {
        return None;
    }
    if let Some(filename) = msg.strip_suffix(TOO_BIG) {
        return Some(UploadRefusal::FileTooBig { filename: filename.to_string() });
    }
    let counts = msg.strip_prefix("# of uploaded files (")?;
    let (kept, rest) = counts.split_once(") doesn't agree with request (")?;
    let (kept, sent): (usize, usize) = (kept.parse().ok()?, rest.strip_suffix(')')?.parse().ok()?);
    (kept < sent).then_some(UploadRefusal::TooManyFiles { kept, sent })
}

/// `get_templates`: the `<open_name>`s inside `<input_template>` and
/// `<output_template>`, in document order. The position of an output name is
/// the `file_num` of its download.
pub fn parse_templates(body: &[u8]) -> Result<Templates, ReplyError> {
    enum In {
        Nothing,
        Input,
        Output,
    }
    let mut templates = Templates::default();
    let (mut opened, mut closed) = (false, false);
    let mut inside = In::Nothing;
    let mut problem = None;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::Start(b"templates") => opened = true,
            Token::End(b"templates") if opened => {
                closed = true;
                break;
            }
            _ if !opened => {}
            Token::Start(b"input_template") => inside = In::Input,
            Token::Start(b"output_template") => inside = In::Output,
            Token::End(b"input_template" | b"output_template") => inside = In::Nothing,
            Token::Start(b"open_name") | Token::Empty(b"open_name") => {
                let name = match token {
                    Token::Start(name) => r.value(name),
                    _ => Some(String::new()),
                };
                // A name dropped would shift the output file numbers.
                let Some(name) = name else {
                    problem = Some("unreadable <open_name>");
                    continue;
                };
                match inside {
                    In::Input => templates.inputs.push(name),
                    In::Output => templates.outputs.push(name),
                    In::Nothing => {}
                }
            }
            _ => {}
        }
    }
    let marker = opened && closed;
    settle(body, marker, "no <templates>...</templates>", checked(templates, problem))
}

/// `server_status.php?xml=1` (a page, not an RPC; no login needed): the
/// app names of its `<tasks_by_app>`, in page order. The remote-submission
/// API has no call that lists apps; this page does, for anyone.
pub fn parse_server_status_apps(body: &[u8]) -> Result<Vec<String>, ReplyError> {
    let mut apps = Vec::new();
    let (mut opened, mut closed) = (false, false);
    let mut in_app = false;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::Start(b"tasks_by_app") => opened = true,
            Token::Empty(b"tasks_by_app") => (opened, closed) = (true, true),
            Token::End(b"tasks_by_app") if opened => {
                closed = true;
                break;
            }
            _ if !opened => {}
            Token::Start(b"app") => in_app = true,
            Token::End(b"app") => in_app = false,
            Token::Start(b"name") if in_app => {
                if let Some(name) = r.value(b"name").map(|n| n.trim().to_string()).filter(|n| !n.is_empty()) {
                    apps.push(name);
                }
            }
            _ => {}
        }
    }
    settle(body, opened && closed, "no <tasks_by_app>...</tasks_by_app>", Ok(apps))
}

/// `get_project_config.php` (a page anyone may read): what the project
/// says of itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProjectConfig {
    pub name: String,
    /// `<server_version>`, as the server writes it (empty if absent).
    pub server_version: String,
    /// The project's web site is stopped (maintenance): RPCs fail.
    pub web_stopped: bool,
}

/// `get_project_config.php`: its `<project_config>`, read past PHP notices.
pub fn parse_project_config(body: &[u8]) -> Result<ProjectConfig, ReplyError> {
    let mut config = ProjectConfig::default();
    let (mut opened, mut closed) = (false, false);
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::Start(b"project_config") => opened = true,
            Token::End(b"project_config") if opened => {
                closed = true;
                break;
            }
            _ if !opened => {}
            Token::Start(b"name") => config.name = r.value(b"name").unwrap_or_default().trim().to_string(),
            Token::Start(b"server_version") => config.server_version = r.value(b"server_version").unwrap_or_default().trim().to_string(),
            Token::Start(b"web_stopped") => config.web_stopped = r.int(b"web_stopped").is_some_and(|v| v != 0),
            // Nested blocks have names of their own (`<platform_name>`).
            Token::Start(b"platforms") => r.0.skip_past_end(b"platforms"),
            _ => {}
        }
    }
    settle(body, opened && closed, "no <project_config>...</project_config>", Ok(config))
}

/// `create_batch`: the new batch's id, which must be positive (the C client
/// takes a reply without one as batch 0).
pub fn parse_create_batch(body: &[u8]) -> Result<i64, ReplyError> {
    let id = last_int(body, b"batch_id").filter(|&id| id > 0);
    settle(body, id.is_some(), "no positive <batch_id>", Ok(id.unwrap_or(0)))
}

/// `submit_batch`: success ⇔ a `<batch_id>`; its value is returned.
pub fn parse_submit_batch(body: &[u8]) -> Result<i64, ReplyError> {
    let id = last_int(body, b"batch_id");
    settle(body, id.is_some(), "no <batch_id>", Ok(id.unwrap_or(0)))
}

/// `query_files`: the 0-based indexes (into the request's `<phys_name>`s) of
/// the files the server does not have. `<absent_files>`...`</absent_files>`
/// is required, so a torn body never reads as "nothing absent".
pub fn parse_query_files(body: &[u8]) -> Result<Vec<usize>, ReplyError> {
    let mut absent = Vec::new();
    let mut marker = false;
    let mut problem = None;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::Empty(b"absent_files") => marker = true,
            Token::Start(b"absent_files") => {
                marker = read_block(&mut r, b"absent_files", b"query_files", |name, r| {
                    if name == b"file" {
                        match r.int(name).and_then(|i| usize::try_from(i).ok()) {
                            Some(i) => absent.push(i),
                            // A dropped index would make us believe the
                            // server has a file it lacks.
                            None => problem = Some("unreadable <file> index"),
                        }
                    }
                });
            }
            _ => continue,
        }
        break;
    }
    settle(body, marker, "no <absent_files>...</absent_files>", checked(absent, problem))
}

/// `query_batch2`: `server_time` and, per requested batch in request order,
/// the jobs reported (all of them, or those changed since `min_mod_time`).
pub fn parse_query_batch2(body: &[u8]) -> Result<BatchStates, ReplyError> {
    struct Collect(Vec<Vec<JobState>>);
    impl QueryBatch2Sink for Collect {
        fn group(&mut self, _: usize) {
            self.0.push(Vec::new());
        }
        fn job(&mut self, name: &str, status: &str) {
            if let Some(jobs) = self.0.last_mut() {
                jobs.push(JobState { name: name.to_string(), status: status.to_string() });
            }
        }
    }
    let mut batches = Collect(Vec::new());
    let server_time = read_query_batch2(body, &mut batches)?;
    Ok(BatchStates { server_time, batches: batches.0 })
}

/// Where [`read_query_batch2`] hands what it reads.
pub trait QueryBatch2Sink {
    /// A batch begins; `batch_size` jobs are announced.
    fn group(&mut self, batch_size: usize);
    /// A job of the batch begun last.
    fn job(&mut self, name: &str, status: &str);
}

/// `query_batch2` read without building it: `sink.group(batch_size)` at
/// each batch, then `sink.job(name, status)` for each of its jobs, in reply order;
/// the server time at the end. The names are borrowed from `body` where
/// they are plain, so a million jobs cost no allocation each. On an error
/// what was handed out so far is to be thrown away.
///
/// The reply is flat: each `<batch_size>N</batch_size>` is followed by its
/// N `<job>`s. Both the start and the end tag of `<query_batch2>` are
/// required and every group must hold exactly its `batch_size` jobs, so a
/// torn body is never taken for a short answer.
pub fn read_query_batch2(body: &[u8], sink: &mut impl QueryBatch2Sink) -> Result<f64, ReplyError> {
    let mut scan = Q2Scan::default();
    scan.scan(body, sink);
    scan.finish(body, false)
}

/// The state of [`read_query_batch2`] between the pieces of a body it is
/// handed: what it would hold at that point of the whole body.
#[derive(Default)]
struct Q2Scan {
    opened: bool,
    closed: bool,
    server_time: Option<f64>,
    /// The batch being read: its batch_size and the jobs seen so far.
    current: Option<(i64, usize)>,
    miscount: Option<String>,
    problem: Option<&'static str>,
}

impl Q2Scan {
    /// Reads `buf`: a whole body, or a piece of one that ends where the
    /// whole body's reading is between two top-level elements.
    fn scan(&mut self, buf: &[u8], sink: &mut impl QueryBatch2Sink) {
        if self.closed {
            return;
        }
        let mut r = Reader::new(buf);
        while let Some(token) = r.next() {
            match token {
                Token::Start(b"query_batch2") => self.opened = true,
                Token::End(b"query_batch2") if self.opened => {
                    self.closed = true;
                    break;
                }
                Token::Start(name @ b"server_time") => self.server_time = r.double(name),
                // An unreadable size reads as 0 and then fails the count check.
                Token::Start(name @ b"batch_size") => {
                    self.end_group();
                    let size = r.int(name).unwrap_or(0);
                    self.current = Some((size, 0));
                    sink.group(usize::try_from(size).unwrap_or(0));
                }
                Token::Start(b"job") => {
                    let (mut name, mut status) = (None, None);
                    let closed = read_block(&mut r, b"job", b"query_batch2", |field, r| match field {
                        b"job_name" => name = r.0.value_ref(field),
                        b"status" => status = r.0.value_ref(field),
                        _ => {}
                    });
                    match (self.current.as_mut(), name, status) {
                        (None, _, _) => self.problem = Some("<job> before any <batch_size>"),
                        (Some((_, seen)), Some(name), Some(status)) if closed => {
                            *seen += 1;
                            sink.job(&name, &status);
                        }
                        _ => self.problem = Some("unreadable <job>"),
                    }
                }
                _ => {}
            }
        }
    }

    fn end_group(&mut self) {
        if let Some((size, seen)) = self.current {
            if usize::try_from(size) != Ok(seen) && self.miscount.is_none() {
                self.miscount = Some(format!("batch_size {size} but {seen} jobs"));
            }
        }
    }

    /// The answer, once the body has been read: `tail` is what was not
    /// read piece by piece (the whole body unless `pieces_read`).
    fn finish(mut self, tail: &[u8], pieces_read: bool) -> Result<f64, ReplyError> {
        self.end_group();
        let value = checked((), self.problem).and_then(|()| {
            let server_time = self.server_time.ok_or("no readable <server_time>")?;
            self.miscount.map_or(Ok(server_time), Err)
        });
        settle_tail(tail, pieces_read, self.opened && self.closed, "no <query_batch2>...</query_batch2>", value)
    }
}

/// [`read_query_batch2`] on a body handed over as it arrives, so that a
/// reply of a million jobs (about 94 MB) is never held whole: each piece
/// up to the last whole `<job>` is read and dropped, the rest waits for
/// the next. The answer is exactly the whole body's, the same `Ok` or the
/// same error, so a torn or error reply never passes: `sink` is the
/// caller's scratch, to be thrown away unless [`finish`](Self::finish)
/// says `Ok`.
///
/// A piece is read early only where reading it alone cannot differ from
/// reading it within the whole body: it ends with a `</job>` that is a
/// tag of its own, and holds no `<!` (a comment or CDATA could run past
/// its end), no `<error` and no PHP fatal error (which the whole body's
/// error rules look for). A body that holds one of them is kept from
/// there on and read at the end, as [`read_query_batch2`] would.
pub struct QueryBatch2Reader<S> {
    sink: S,
    scan: Q2Scan,
    /// The bytes not read yet.
    pending: Vec<u8>,
    /// `pending` has no `</job>` before this offset.
    searched: usize,
    /// Some piece was read early.
    pieces_read: bool,
    /// Nothing more is read early.
    whole: bool,
}

impl<S: QueryBatch2Sink> QueryBatch2Reader<S> {
    pub fn new(sink: S) -> Self {
        QueryBatch2Reader { sink, scan: Q2Scan::default(), pending: Vec::new(), searched: 0, pieces_read: false, whole: false }
    }

    /// The next bytes of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
        if self.whole {
            return;
        }
        const END: &[u8] = b"</job>";
        let found = memchr::memmem::rfind(&self.pending[self.searched..], END).map(|at| self.searched + at);
        self.searched = self.pending.len().saturating_sub(END.len() - 1);
        let Some(at) = found else { return };
        let cut = at + END.len();
        if !readable_alone(&self.pending[..cut], at) {
            self.whole = true;
            return;
        }
        self.scan.scan(&self.pending[..cut], &mut self.sink);
        self.pending.drain(..cut);
        self.searched = self.pending.len().saturating_sub(END.len() - 1);
        self.pieces_read = true;
    }

    /// The sink and the server time, or the error the whole body is.
    pub fn finish(mut self) -> Result<(S, f64), ReplyError> {
        self.scan.scan(&self.pending, &mut self.sink);
        let server_time = self.scan.finish(&self.pending, self.pieces_read)?;
        Ok((self.sink, server_time))
    }
}

/// `piece` (ending with the `</job>` at `end_tag`) reads alone as it
/// reads at the start of its body, up to its last byte: see
/// [`QueryBatch2Reader`].
fn readable_alone(piece: &[u8], end_tag: usize) -> bool {
    use memchr::memmem::find;
    if find(piece, b"<!").is_some() || find(piece, b"<error").is_some() || find(piece, b"Fatal error").is_some() {
        return false;
    }
    // The `</job>` is a tag of its own unless a tag opened after the last
    // `>` before it is still open there (text before it ends at its `<`).
    let from = memchr::memrchr(b'>', &piece[..end_tag]).map_or(0, |gt| gt + 1);
    !(from..end_tag).any(|i| xml::opens_markup(&piece[i..]))
}

/// `query_completed_job`: the `<completed_job>` block. A block cut short
/// (a PHP fatal error after `<error_mask>` for a job without a finished
/// instance, on PHP ≥ 8.1) is `PhpFatal`, or `Malformed` without the error
/// page.
pub fn parse_query_completed_job(body: &[u8]) -> Result<CompletedJob, ReplyError> {
    let mut job = CompletedJob::default();
    let mut r = Reader::new(body);
    let found = r.any(|t| t == Token::Start(b"completed_job"));
    let marker = found
        && read_block(&mut r, b"completed_job", b"query_completed_job", |name, r| {
            // Unreadable fields stay 0, as in the C client.
            let j = &mut job;
            match name {
                b"error_mask" => j.error_mask = r.int(name).unwrap_or(j.error_mask),
                b"canonical_resultid" => j.canonical_resultid = r.int(name).unwrap_or(j.canonical_resultid),
                b"error_resultid" => j.error_resultid = r.int(name).unwrap_or(j.error_resultid),
                b"exit_status" => j.exit_status = r.int(name).unwrap_or(j.exit_status),
                b"elapsed_time" => j.elapsed_time = r.double(name).unwrap_or(j.elapsed_time),
                b"cpu_time" => j.cpu_time = r.double(name).unwrap_or(j.cpu_time),
                b"stderr_out" => j.stderr_out = r.value(name).unwrap_or_default(),
                _ => {}
            }
        });
    settle(body, marker, "no <completed_job>...</completed_job>", Ok(job))
}

/// `query_batch` (by id or name): the batch's fields and its jobs' names.
pub fn parse_query_batch(body: &[u8]) -> Result<BatchInfo, ReplyError> {
    let mut batch = BatchInfo::default();
    let mut marker = false;
    let mut problem = None;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::End(b"query_batch") => {
                marker = true;
                break;
            }
            Token::Start(b"job") => {
                let mut name = String::new();
                let closed = read_block(&mut r, b"job", b"query_batch", |field, r| {
                    if field == b"name" {
                        name = r.value(field).unwrap_or_default();
                    }
                });
                if !closed {
                    problem = Some("unterminated <job>");
                }
                batch.jobs.push(name);
            }
            Token::Start(name) => batch_field(&mut batch, name, &mut r),
            _ => {}
        }
    }
    settle(body, marker, "no </query_batch>", checked(batch, problem))
}

/// `query_batch` with `get_job_details`: each job's status, error bits and
/// failed exit statuses. Read with the plain scanner, since the job's
/// `<error>` texts are wanted here (they carry no `error_num`).
pub fn parse_query_batch_details(body: &[u8]) -> Result<Vec<JobDetails>, ReplyError> {
    let mut jobs = Vec::new();
    let mut current: Option<JobDetails> = None;
    let mut marker = false;
    let mut t = Tokens::new(body);
    while let Some(token) = t.next() {
        match (token, current.as_mut()) {
            (Token::End(b"query_batch"), _) => {
                marker = true;
                break;
            }
            (Token::Start(b"job"), _) => current = Some(JobDetails::default()),
            (Token::End(b"job"), _) => jobs.extend(current.take()),
            (Token::Start(name), Some(job)) => match name {
                b"name" => job.name = t.value(name).unwrap_or_default(),
                b"status" => job.status = t.value(name).unwrap_or_default(),
                b"error" => job.errors.extend(t.value(name)),
                b"exit_status" => job.exit_statuses.extend(t.value(name).and_then(|v| parse_int(&v))),
                _ => {}
            },
            _ => {}
        }
    }
    let problem = current.is_some().then_some("unterminated <job>");
    settle(body, marker, "no </query_batch>", checked(jobs, problem))
}

/// `query_batches`: every batch of the user except retired ones.
pub fn parse_query_batches(body: &[u8]) -> Result<Vec<BatchInfo>, ReplyError> {
    let mut batches = Vec::new();
    let mut marker = false;
    let mut problem = None;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        match token {
            Token::End(b"query_batches") => {
                marker = true;
                break;
            }
            Token::Start(b"batch") => {
                let mut batch = BatchInfo::default();
                let closed = read_block(&mut r, b"batch", b"query_batches", |name, r| batch_field(&mut batch, name, r));
                if !closed {
                    problem = Some("unterminated <batch>");
                }
                batches.push(batch);
            }
            _ => {}
        }
    }
    settle(body, marker, "no </query_batches>", checked(batches, problem))
}

/// Reads one batch field (of `query_batches`' `<batch>` or `query_batch`'s
/// head) if `name` is one we keep. Unreadable numbers stay 0.
fn batch_field(batch: &mut BatchInfo, name: &[u8], r: &mut Reader) {
    match name {
        b"id" => batch.id = r.int(name).unwrap_or(0),
        b"state" => batch.state = r.int(name).unwrap_or(0),
        b"njobs" => batch.njobs = r.int(name).unwrap_or(0),
        b"create_time" => batch.create_time = r.double(name).unwrap_or(0.0),
        b"expire_time" => batch.expire_time = r.double(name).unwrap_or(0.0),
        b"completion_time" => batch.completion_time = r.double(name).unwrap_or(0.0),
        b"fraction_done" => batch.fraction_done = r.double(name).unwrap_or(0.0),
        b"nerror_jobs" => batch.nerror_jobs = r.int(name).unwrap_or(0),
        b"name" => batch.name = r.value(name).unwrap_or_default(),
        b"app_name" => batch.app_name = r.value(name).unwrap_or_default(),
        _ => {}
    }
}

/// Reads the children of the `<tag>` just opened up to `</tag>`, handing
/// each start tag to `child`. False if the block is cut short: the body
/// ends, or the next `<tag>` or the end of `parent` comes first (then
/// nothing of the rest is swallowed).
fn read_block<'a>(r: &mut Reader<'a>, tag: &[u8], parent: &[u8], mut child: impl FnMut(&[u8], &mut Reader<'a>)) -> bool {
    while let Some(token) = r.next() {
        match token {
            Token::End(t) if t == tag => return true,
            Token::Start(t) if t == tag => return false,
            Token::End(t) if t == parent => return false,
            Token::Start(name) => child(name, r),
            _ => {}
        }
    }
    false
}

/// `value`, unless the content had a problem.
fn checked<T>(value: T, problem: Option<&str>) -> Result<T, String> {
    match problem {
        Some(p) => Err(p.to_string()),
        None => Ok(value),
    }
}

/// What to report for a `get_output.php` reply that is not a file: the
/// server's `ERROR: ...` text, or a short description of what came instead.
/// At most ~300 bytes, on one line.
pub fn download_error(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let trimmed = xml::trim_ascii(&text);
    let mut msg = if trimmed.starts_with("ERROR:") {
        // Names in these messages are HTML-escaped.
        xml::collapse_whitespace(&xml::decode_entities(trimmed))
    } else if let Some(ReplyError::PhpFatal { message }) = php_fatal(body) {
        format!("server script failed: {message}")
    } else if trimmed.is_empty() {
        "empty reply".to_string()
    } else if looks_like_text(body) {
        let page = xml::collapse_whitespace(&xml::text_value(&xml::strip_tags(body)));
        format!("unexpected reply: {page}")
    } else {
        format!("unexpected reply of {} bytes", body.len())
    };
    xml::truncate_at(&mut msg, MAX_DOWNLOAD_MSG);
    msg
}

/// Valid UTF-8 without control characters other than whitespace: worth
/// quoting in a message, unlike a binary file.
fn looks_like_text(body: &[u8]) -> bool {
    std::str::from_utf8(body).is_ok_and(|s| !s.chars().any(|c| c.is_control() && !c.is_whitespace()))
}

/// The scanner every parser uses: [`Tokens`] without `<error>` elements.
/// Fatal errors are found separately ([`boinc_error`]); the rest are PHP
/// notices or `query_batch`'s job errors, whose `<file>`, `<line>` and texts
/// must not be taken for the reply's own elements.
struct Reader<'a>(Tokens<'a>);

impl<'a> Reader<'a> {
    fn new(body: &'a [u8]) -> Self {
        Reader(Tokens::new(body))
    }

    /// See [`Tokens::value`].
    fn value(&mut self, name: &[u8]) -> Option<String> {
        self.0.value(name)
    }

    fn int(&mut self, name: &[u8]) -> Option<i64> {
        self.value(name).and_then(|t| parse_int(&t))
    }

    fn double(&mut self, name: &[u8]) -> Option<f64> {
        self.value(name).and_then(|t| parse_double(&t))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        loop {
            let token = self.0.next()?;
            if token == Token::Start(b"error") {
                self.0.skip_past_end(b"error");
                continue;
            }
            return Some(token);
        }
    }
}

/// The value of the last `<name>` that reads as an integer.
fn last_int(body: &[u8], name: &[u8]) -> Option<i64> {
    let mut value = None;
    let mut r = Reader::new(body);
    while let Some(token) = r.next() {
        if token == Token::Start(name) {
            value = r.int(name).or(value);
        }
    }
    value
}

/// The rules every reply shares (see the module doc). `marker`: the
/// reply's success marker was found; `missing`: what to say when it was not;
/// `value`: the parse result, or why the content is unusable.
fn settle<T>(body: &[u8], marker: bool, missing: &str, value: Result<T, String>) -> Result<T, ReplyError> {
    settle_tail(body, false, marker, missing, value)
}

/// [`settle`] of a body of which only `tail` is left, the rest read
/// before (`read_before`) and holding no error and no PHP fatal error.
fn settle_tail<T>(tail: &[u8], read_before: bool, marker: bool, missing: &str, value: Result<T, String>) -> Result<T, ReplyError> {
    if let Some(error) = boinc_error(tail) {
        return Err(error);
    }
    if !marker {
        if let Some(fatal) = php_fatal(tail) {
            return Err(fatal);
        }
        let empty = !read_before && xml::trim_ascii(&String::from_utf8_lossy(tail)).is_empty();
        let reason = if empty { "empty reply".to_string() } else { missing.to_string() };
        return Err(ReplyError::Malformed(reason));
    }
    value.map_err(ReplyError::Malformed)
}

/// The last `<error>` with a non-zero `<error_num>`, if any.
///
/// Read straight from the bytes rather than with [`Tokens`]: `error_msg` is
/// mostly not escaped and may hold raw `<` and `&`, so it is taken raw up to
/// `</error_msg>`.
fn boinc_error(body: &[u8]) -> Option<ReplyError> {
    let mut found = None;
    let mut pos = 0;
    while let Some(start) = find(body, b"<error>", pos) {
        let (num, msg, end) = read_error(body, start + b"<error>".len());
        if num != 0 {
            found = Some(ReplyError::Boinc { num, msg });
        }
        pos = end;
    }
    found
}

/// The `error_num` (0 if none or unreadable) and `error_msg` of the error
/// whose content starts at `from`, and where scanning should go on.
fn read_error(body: &[u8], from: usize) -> (i64, String, usize) {
    let (mut num, mut msg) = (0, String::new());
    let mut msg_closed = false;
    let mut i = from;
    // One pass over the `<`s: linear however hostile the body.
    while let Some(lt) = body[i..].iter().position(|&b| b == b'<') {
        let at = i + lt;
        let rest = &body[at..];
        if rest.starts_with(b"</error>") {
            return (num, msg, at + b"</error>".len());
        }
        if rest.starts_with(b"<error>") {
            // The previous error was never closed.
            return (num, msg, at);
        }
        if let Some(text) = rest.strip_prefix(b"<error_num>") {
            let len = text.iter().position(|&b| b == b'<').unwrap_or(text.len());
            // Without its end tag the number may be cut (`-13` of `-138`).
            if text[len..].starts_with(b"</error_num>") {
                num = parse_int(&String::from_utf8_lossy(&text[..len])).unwrap_or(0);
            }
            i = at + b"<error_num>".len() + len;
            continue;
        }
        if let Some(text) = rest.strip_prefix(b"<error_msg>") {
            let len = find(text, b"</error_msg>", 0).unwrap_or(text.len());
            msg = error_msg(&text[..len]);
            msg_closed = len < text.len();
            i = at + b"<error_msg>".len() + len;
            continue;
        }
        i = at + 1;
    }
    // The body ends inside this error before its message did: a reply cut
    // in transit, not the server's verdict (its message would be lost, and
    // "no such batch" cut to "no su" reads as a different error).
    if !msg_closed {
        num = 0;
    }
    (num, msg, body.len())
}

/// An `error_msg`'s raw content: CDATA wrapper stripped, entities decoded,
/// trimmed, capped.
fn error_msg(raw: &[u8]) -> String {
    let raw = raw.trim_ascii();
    let raw = match raw.strip_prefix(b"<![CDATA[") {
        Some(inner) => inner.strip_suffix(b"]]>").unwrap_or(inner),
        None => raw,
    };
    let mut msg = xml::text_value(raw);
    xml::truncate_at(&mut msg, MAX_ERROR_MSG);
    msg
}

/// A PHP fatal error page (`<b>Fatal error</b>: ...`, or the plain-text
/// form without HTML errors): its text without tags and stack trace,
/// whitespace collapsed.
pub fn php_fatal(body: &[u8]) -> Option<ReplyError> {
    let start = [&b"<b>Fatal error</b>:"[..], b"\nPHP Fatal error:", b"\nFatal error:"]
        .iter()
        .filter_map(|marker| find(body, marker, 0).map(|at| at + marker.len()))
        .min()?;
    let text = xml::text_value(&xml::strip_tags(&body[start..]));
    // The stack trace adds server paths, not meaning.
    let text = text.split("Stack trace:").next().unwrap_or_default();
    let mut message = xml::collapse_whitespace(text);
    xml::truncate_at(&mut message, MAX_FATAL_MSG);
    Some(ReplyError::PhpFatal { message })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECL: &str = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n";

    fn body(s: &str) -> Vec<u8> {
        format!("{DECL}{s}").into_bytes()
    }

    fn boinc(num: i64, msg: &str) -> ReplyError {
        ReplyError::Boinc { num, msg: msg.to_string() }
    }

    #[test]
    fn error_msg_may_hold_raw_markup() {
        let b = body(
            "<submit_batch>\n<error>\n<error_num>-1</error_num>\n\
             <error_msg>create_work failed: <b>x</b> & a < b</error_msg>\n</error>\n</submit_batch>\n",
        );
        assert_eq!(parse_submit_batch(&b), Err(boinc(-1, "create_work failed: <b>x</b> & a < b")));
    }

    #[test]
    fn notices_without_error_num_are_ignored_and_last_error_wins() {
        let b = body(
            "<abort_jobs>\n<error><error_msg><![CDATA[Undefined index]]></error_msg>\
             <type>8</type><file>x.php</file><line>3</line></error>\n\
             <error><error_num>-138</error_num><error_msg>first</error_msg></error>\n\
             <error><error_num>0</error_num><error_msg>zero</error_msg></error>\n\
             <error><error_num>-1</error_num><error_msg><![CDATA[ last &amp; ]]></error_msg></error>\n\
             </abort_jobs>\n",
        );
        assert_eq!(parse_success(&b), Err(boinc(-1, "last &")));
    }

    #[test]
    fn notice_elements_are_not_taken_for_reply_elements() {
        let b = body(
            "<query_files>\n<error><error_msg>n</error_msg><file>/x.php</file></error>\n\
             <absent_files>\n<file>2</file>\n</absent_files>\n</query_files>\n",
        );
        assert_eq!(parse_query_files(&b), Ok(vec![2]));
    }

    #[test]
    fn error_wins_over_success_marker() {
        let b = body(
            "<abort_jobs>\n<aborted a>\n<success>1</success>\n<error><error_num>-1</error_num><error_msg>no job b</error_msg></error>\n",
        );
        assert_eq!(parse_success(&b), Err(boinc(-1, "no job b")));
    }

    #[test]
    fn missing_markers() {
        assert_eq!(parse_success(b""), Err(ReplyError::Malformed("empty reply".into())));
        assert!(matches!(parse_success(&body("<ping>\n")), Err(ReplyError::Malformed(_))));
        assert!(matches!(parse_create_batch(&body("<create_batch>\n<batch_id>0</batch_id>\n")), Err(ReplyError::Malformed(_))));
        assert!(matches!(parse_create_batch(&body("<create_batch>\n<batch_id>x</batch_id>\n")), Err(ReplyError::Malformed(_))));
        assert_eq!(parse_submit_batch(&body("<submit_batch>\n<batch_id>7</batch_id>\n")), Ok(7));
    }

    #[test]
    fn query_files_without_closing_tag_is_torn() {
        let b = body("<query_files>\n<absent_files>\n<file>0</file>\n");
        assert!(matches!(parse_query_files(&b), Err(ReplyError::Malformed(_))));
        let b = body("<query_files>\n<absent_files>\n<file>x</file>\n</absent_files>\n");
        assert!(matches!(parse_query_files(&b), Err(ReplyError::Malformed(_))));
        assert_eq!(parse_query_files(&body("<query_files>\n<absent_files/>\n")), Ok(vec![]));
    }

    #[test]
    fn query_batch2_groups_and_counts() {
        let b = body(
            "<query_batch2>\n<server_time>100.5</server_time>\n\
             <batch_size>2</batch_size>\n<job><job_name>a</job_name><status>DONE</status></job>\n\
             <job><job_name>b</job_name><status>UNSENT</status></job>\n\
             <batch_size>0</batch_size>\n\
             <batch_size>1</batch_size>\n<job><job_name>c</job_name><status>ERROR</status></job>\n\
             </query_batch2>\n",
        );
        let states = parse_query_batch2(&b).unwrap();
        assert_eq!(states.server_time, 100.5);
        let names: Vec<Vec<&str>> = states.batches.iter().map(|g| g.iter().map(|j| j.name.as_str()).collect()).collect();
        assert_eq!(names, [vec!["a", "b"], vec![], vec!["c"]]);
        assert_eq!(states.batches[2][0].status, "ERROR");

        let short = body(
            "<query_batch2>\n<server_time>1</server_time>\n<batch_size>2</batch_size>\n\
             <job><job_name>a</job_name><status>DONE</status></job>\n</query_batch2>\n",
        );
        assert!(matches!(parse_query_batch2(&short), Err(ReplyError::Malformed(_))));
        let no_time = body("<query_batch2>\n<batch_size>0</batch_size>\n</query_batch2>\n");
        assert!(matches!(parse_query_batch2(&no_time), Err(ReplyError::Malformed(_))));
        let orphan = body(
            "<query_batch2>\n<server_time>1</server_time>\n\
             <job><job_name>a</job_name><status>DONE</status></job>\n</query_batch2>\n",
        );
        assert!(matches!(parse_query_batch2(&orphan), Err(ReplyError::Malformed(_))));
    }

    #[test]
    fn fatal_only_without_marker() {
        let fatal = "<br />\n<b>Fatal error</b>:  Uncaught mysqli_sql_exception: Duplicate entry 'x' for key 'y' in <b>f</b>";
        let e = parse_upload_files(&body(&format!("<upload_files>\n{fatal}"))).unwrap_err();
        assert!(e.is_duplicate_entry(), "{e:?}");
        assert_eq!(e, ReplyError::PhpFatal { message: "Uncaught mysqli_sql_exception: Duplicate entry 'x' for key 'y' in f".into() });
        assert_eq!(parse_success(&body(&format!("<retire_batch>\n{fatal}\n<success>1</success>\n"))), Ok(()));
    }

    #[test]
    fn completed_job_without_end_is_malformed() {
        let b = body("<query_completed_job>\n<completed_job>\n<error_mask>0</error_mask>\n");
        assert!(matches!(parse_query_completed_job(&b), Err(ReplyError::Malformed(_))));
    }

    #[test]
    fn query_batch_details_as_the_spec_shows_them() {
        let b = body(
            "<query_batch>\n\n        <id>118</id>\n        <name>b</name>\n\
             <job>\n<id>5001</id>\n<name>b#0</name>\n<canonical_instance_id>9001</canonical_instance_id>\n\
             <cpu_time>3590.125</cpu_time>\n<status>done</status>\n</job>\n\
             <job>\n<id>5002</id>\n<name>b#1</name>\n<canonical_instance_id>0</canonical_instance_id>\n\
             <error>too_many_error_results</error>\n<error>cancelled</error>\n\
             <exit_status>3</exit_status>\n<exit_status>-161</exit_status>\n<status>error</status>\n</job>\n\
             </query_batch>\n",
        );
        let jobs = parse_query_batch_details(&b).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].name.as_str(), jobs[0].status.as_str()), ("b#0", "done"));
        assert!(jobs[0].errors.is_empty() && jobs[0].exit_statuses.is_empty());
        assert_eq!(jobs[1].errors, ["too_many_error_results", "cancelled"]);
        assert_eq!(jobs[1].exit_statuses, [3, -161]);
        let err =
            body("<query_batch>\n<error>\n<error_num>-1</error_num>\n<error_msg>no such batch</error_msg>\n</error>\n</query_batch>\n");
        assert_eq!(parse_query_batch_details(&err), Err(boinc(-1, "no such batch")));
        assert!(matches!(parse_query_batch_details(&body("<query_batch>\n<job><name>x</name>")), Err(ReplyError::Malformed(_))));
    }

    #[test]
    fn upload_refusals() {
        use UploadRefusal::*;
        assert_eq!(upload_refusal(-1, "can't parse request message:"), Some(BodyDropped));
        assert_eq!(upload_refusal(-1, "can't parse request message: junk"), None);
        assert_eq!(
            upload_refusal(-1, "big in.dat upload failed because: The uploaded file exceeds upload_max_filesize of php.ini."),
            Some(FileTooBig { filename: "big in.dat".into() })
        );
        assert_eq!(
            upload_refusal(-1, "# of uploaded files (20) doesn't agree with request (21)"),
            Some(TooManyFiles { kept: 20, sent: 21 })
        );
        assert_eq!(upload_refusal(-1, "# of uploaded files (1) doesn't agree with request (2)"), Some(TooManyFiles { kept: 1, sent: 2 }));
        assert_eq!(upload_refusal(-1, "# of uploaded files (3) doesn't agree with request (2)"), None);
        assert_eq!(upload_refusal(-1, "bad filename"), None);
        assert_eq!(upload_refusal(-183, "can't parse request message:"), None);
    }

    #[test]
    fn download_errors() {
        assert_eq!(download_error(b"ERROR: no workunit x\n"), "ERROR: no workunit x");
        assert_eq!(download_error(b""), "empty reply");
        assert_eq!(download_error(b"\x00\x01PK"), "unexpected reply of 4 bytes");
        assert_eq!(download_error(b"<html><h1>Not Found</h1></html>"), "unexpected reply: Not Found");
        assert!(download_error(&[b'a'; 10_000]).len() <= MAX_DOWNLOAD_MSG);
    }

    #[test]
    fn an_error_reply_cut_in_transit_is_malformed_not_a_boinc_error() {
        let full = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<error>\n    <error_num>-1</error_num>\n    <error_msg>no such batch</error_msg>\n</error>\n";
        assert_eq!(parse_query_batch(full), Err(ReplyError::Boinc { num: -1, msg: "no such batch".into() }));
        for cut in [60, 70, 80, 90] {
            let e = parse_query_batch(&full[..cut]).unwrap_err();
            assert!(matches!(e, ReplyError::Malformed(_)), "cut at {cut}: {e:?}");
        }
        // Cut after the message: the verdict is whole.
        let after = full.len() - "</error>\n".len();
        assert_eq!(parse_query_batch(&full[..after]), Err(ReplyError::Boinc { num: -1, msg: "no such batch".into() }));
    }

    #[test]
    fn server_status_lists_the_apps_after_php_notices() {
        let body = b"<br />\n<b>Deprecated</b>:  unserialize(): x<br />\n<?xml version=\"1.0\" ?>\n<server_status>\n<daemon_status><daemon><command>feeder</command></daemon></daemon_status>\n<database_file_states>\n<tasks_by_app>\n<app>\n   <id>1</id>\n   <name>uppercase</name>\n   <unsent>0</unsent>\n</app>\n<app>\n   <id>2</id>\n   <name>stepper</name>\n</app>\n</tasks_by_app>\n</database_file_states>\n</server_status>\n";
        assert_eq!(parse_server_status_apps(body).unwrap(), ["uppercase", "stepper"]);
        assert!(matches!(parse_server_status_apps(b"<html>Log in</html>"), Err(ReplyError::Malformed(_))));
        assert!(matches!(parse_server_status_apps(b"<tasks_by_app>\n<app><name>a</name></app>"), Err(ReplyError::Malformed(_))));
    }

    #[test]
    fn project_config_gives_the_name_and_version() {
        let body = b"<?xml version=\"1.0\" ?>\n<project_config>\n    <name>boinctest</name>\n<server_version>1.1.0</server_version>\n    <web_stopped>0</web_stopped>\n<br />\n<b>Deprecated</b>:  unserialize(): x<br />\n    <platforms>\n<platform><platform_name>x86_64</platform_name></platform>\n    </platforms>\n</project_config>\n";
        let c = parse_project_config(body).unwrap();
        assert_eq!((c.name.as_str(), c.server_version.as_str(), c.web_stopped), ("boinctest", "1.1.0", false));
        assert!(parse_project_config(b"<project_config><web_stopped>1</web_stopped></project_config>").unwrap().web_stopped);
        assert!(parse_project_config(b"<html>Not Found</html>").is_err());
    }

    /// Every call a query_batch2 reader makes, in order.
    #[derive(Debug, Default, PartialEq)]
    struct Calls(Vec<(usize, String, String)>);

    impl QueryBatch2Sink for Calls {
        fn group(&mut self, size: usize) {
            self.0.push((size, String::new(), String::new()));
        }
        fn job(&mut self, name: &str, status: &str) {
            self.0.push((usize::MAX, name.to_string(), status.to_string()));
        }
    }

    fn whole(body: &[u8]) -> Result<(Calls, f64), ReplyError> {
        let mut calls = Calls::default();
        read_query_batch2(body, &mut calls).map(|t| (calls, t))
    }

    fn streamed(body: &[u8], piece: usize) -> Result<(Calls, f64), ReplyError> {
        let mut reader = QueryBatch2Reader::new(Calls::default());
        for chunk in body.chunks(piece.max(1)) {
            reader.feed(chunk);
        }
        reader.finish()
    }

    const JOBS: &str = "<query_batch2>\n<server_time>100.5</server_time>\n<batch_size>2</batch_size>\n\
        <job><job_name>a_0</job_name><status>DONE</status></job>\n<job><job_name>a&amp;1</job_name><status>NEW_ONE</status></job>\n\
        <batch_size>0</batch_size>\n<batch_size>1</batch_size>\n<job>\n  <job_name>c_0</job_name>\n  <status>UNSENT</status>\n</job>\n";

    #[test]
    fn a_streamed_status_reply_reads_as_the_whole_body_in_pieces_of_any_size() {
        let bodies = [
            body(&format!("{JOBS}</query_batch2>\n")),
            // Errors, whole or after jobs: never an answer.
            body("<query_batch2>\n<error>\n<error_num>-1</error_num>\n<error_msg>no batch named x</error_msg>\n</error>\n</query_batch2>\n"),
            body(&format!("{JOBS}<error><error_num>-1</error_num><error_msg>late</error_msg></error></query_batch2>\n")),
            body(&format!("<error><error_num>-1</error_num><error_msg>early</error_msg></error>\n{JOBS}</query_batch2>\n")),
            body(&format!("{JOBS}<br />\n<b>Fatal error</b>:  Allowed memory size exhausted in <b>x.php</b><br />\n")),
            // Notices before the jobs (no error_num): the reply still reads.
            body(&format!("<error><error_msg><![CDATA[Undefined index]]></error_msg></error>\n{JOBS}</query_batch2>\n")),
            // What could run past a piece's end: CDATA and comments holding `</job>`, a tag left open.
            body(&format!("{JOBS}<job><job_name><![CDATA[x</job>y]]></job_name><status>DONE</status></job>\n</query_batch2>\n")),
            body(&format!("{JOBS}<!-- </job> --><job><job_name>d</job_name><status>DONE</status></job>\n</query_batch2>\n")),
            body(&format!("{JOBS}<job><job_name><![CDATA[x<a></job>y]]></job_name><status>DONE</status></job>\n</query_batch2>\n")),
            body(&format!("{JOBS}<!-- <a></job><job> --><job><job_name>d</job_name><status>DONE</status></job>\n</query_batch2>\n")),
            body(&format!("{JOBS}<job><job_name>e</job_name><status>DONE</status><odd </job>\n</query_batch2>\n")),
            body(&format!("{JOBS}<job><job_name>e</job_name><status>DONE</status><?odd </job> ?></job>\n</query_batch2>\n")),
            // A miscount, a job before any batch, nothing at all.
            body("<query_batch2>\n<server_time>1</server_time>\n<batch_size>2</batch_size>\n<job><job_name>a</job_name><status>DONE</status></job>\n</query_batch2>\n"),
            body("<query_batch2>\n<server_time>1</server_time>\n<job><job_name>a</job_name><status>DONE</status></job>\n</query_batch2>\n"),
            b"".to_vec(),
            b"  \n ".to_vec(),
        ];
        for b in &bodies {
            let expected = whole(b);
            for piece in [1, 2, 3, 5, 7, 13, 64, 1000, b.len()] {
                assert_eq!(streamed(b, piece), expected, "pieces of {piece}: {}", String::from_utf8_lossy(b));
            }
        }
        assert_eq!(whole(&bodies[0]).unwrap().0 .0.len(), 6, "the plain reply is an answer");
        assert!(whole(&bodies[3]).is_err() && whole(&bodies[2]).is_err());
    }

    #[test]
    fn a_torn_status_reply_is_never_an_answer_streamed() {
        let full = body(&format!("{JOBS}</query_batch2>\n"));
        // Cut anywhere before its end tag is whole.
        for cut in 0..full.len() - "\n".len() - 1 {
            let torn = &full[..cut];
            for piece in [1, 4, 16, cut.max(1)] {
                let r = streamed(torn, piece);
                assert!(r.is_err(), "torn at {cut}, pieces of {piece}: {r:?}");
                assert_eq!(r, whole(torn));
            }
        }
    }

    #[test]
    fn a_long_streamed_reply_is_read_piece_by_piece() {
        let mut text = String::from("<query_batch2>\n<server_time>7</server_time>\n<batch_size>10000</batch_size>\n");
        for k in 0..10_000 {
            text.push_str(&format!("<job><job_name>b_{k}</job_name><status>IN_PROGRESS</status></job>\n"));
        }
        text.push_str("</query_batch2>\n");
        let mut reader = QueryBatch2Reader::new(Calls::default());
        let mut held = 0;
        for chunk in text.as_bytes().chunks(8192) {
            reader.feed(chunk);
            held = held.max(reader.pending.len());
        }
        assert!(held <= 8192 + 64, "at most a piece and a job are held, not the body: {held}");
        let (calls, t) = reader.finish().unwrap();
        assert_eq!((calls.0.len(), t), (10_001, 7.0));
    }
}
