//! RpcClient: one per project. Speaks HTTP to the project's scripts through
//! one awc client (connection reuse, bounded concurrency, timeouts) and
//! classifies what comes back: a BOINC error reply (reported), a transient
//! failure (connect, timeout, 5xx, 429, torn or unusable reply: retried with
//! backoff and jitter when the call is idempotent), or a permanent one.
//!
//! Calls that create something on the server (create_batch, submit_batch,
//! query_files with a batch, upload_files) are sent with [`Rpc::once`]:
//! after a lost reply the caller must first ask the server what happened
//! (see `submit_pipeline.rs`), so a retry never creates anything twice.

use std::io;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use awc::body::SizedStream;
use awc::http::{header, StatusCode};
use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use futures_util::stream::LocalBoxStream;
use futures_util::StreamExt;
use gahp_protocol::boinc::reply::{QueryBatch2Reader, QueryBatch2Sink};
use gahp_protocol::boinc::{reply, ReplyError, Script};
use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::ProjectKey;
use gahp_services::config::DaemonConfig;

/// Largest reply body we read (a query_batch2 over 100,000 jobs is ~15 MB).
const MAX_REPLY: usize = 256 << 20;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    /// The server answered with a BOINC error.
    #[error("{num} {msg}")]
    Boinc { num: i64, msg: String },
    /// Transient failures until the deadline (or after one attempt for
    /// [`Rpc::once`]).
    #[error("-184 transient HTTP failure ({detail}); gave up after {attempts} attempt(s) in {secs} s")]
    Transient { detail: String, attempts: u32, secs: u64 },
    /// The server script died (a PHP fatal error page).
    #[error("-1 server error: {message}")]
    ServerFatal { message: String, duplicate_entry: bool },
    /// An HTTP status that retrying will not change (404, 403, a redirect).
    #[error("-224 HTTP status {status} from the project (check the project URL)")]
    HttpStatus { status: u16 },
    /// Something on our side (a file, an internal error).
    #[error("-1 {0}")]
    Local(String),
}

impl RpcError {
    pub fn is_transient(&self) -> bool {
        matches!(self, RpcError::Transient { .. })
    }

    /// We cannot tell whether the server acted: the reply was lost, torn,
    /// or the script died part-way (other than on a duplicate key, which
    /// says exactly what happened).
    pub fn outcome_unknown(&self) -> bool {
        self.is_transient() || matches!(self, RpcError::ServerFatal { duplicate_entry: false, .. })
    }

    pub fn is_duplicate_entry(&self) -> bool {
        matches!(self, RpcError::ServerFatal { duplicate_entry: true, .. })
    }

    fn from_reply(e: ReplyError) -> Attempt {
        match e {
            ReplyError::Boinc { num, msg } => Attempt::Failed(RpcError::Boinc { num, msg }),
            // Retried like a torn reply: it may pass, and its outcome is
            // unknown (the script may have acted before it died).
            ReplyError::PhpFatal { ref message } if e.is_database_unavailable() => {
                Attempt::Transient(format!("the server script lost its database: {message}"))
            }
            ReplyError::PhpFatal { .. } => {
                let duplicate_entry = e.is_duplicate_entry();
                let ReplyError::PhpFatal { message } = e else { unreachable!() };
                Attempt::Failed(RpcError::ServerFatal { message, duplicate_entry })
            }
            ReplyError::Malformed(why) => Attempt::Transient(why),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Safe to repeat: retried on transient failures until the deadline.
    Idempotent,
    /// May have acted even when the reply was lost: one attempt only.
    Once,
}

/// A file part of an upload_files request. Its content is streamed from
/// `path` while the request is sent, so a file larger than memory uploads
/// in bounded memory.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub filename: String,
    pub path: PathBuf,
    /// The length announced for the part; a file that is not exactly this
    /// long when it is read fails the request (never a torn upload).
    pub size: u64,
}

/// A reply parser of the protocol crate.
pub type Parse<T> = fn(&[u8]) -> Result<T, ReplyError>;

/// A reply read as its body arrives, so that a large one is never held
/// whole (a query_batch2 of a million jobs is about 94 MB). What it
/// builds is scratch until `finish` says the whole body was a reply.
pub trait StreamedReply {
    type Output;
    /// The next bytes of the body.
    fn feed(&mut self, chunk: &[u8]);
    /// Its answer, or what the whole body was instead.
    fn finish(self: Box<Self>) -> Result<Self::Output, ReplyError>;
}

/// Starts the reading of one attempt's reply.
pub type StartReply<T> = fn() -> Box<dyn StreamedReply<Output = T>>;

/// A query_batch2 reply read as it arrives into its sink: the sink and
/// the server time.
impl<S: QueryBatch2Sink> StreamedReply for QueryBatch2Reader<S> {
    type Output = (S, f64);
    fn feed(&mut self, chunk: &[u8]) {
        QueryBatch2Reader::feed(self, chunk);
    }
    fn finish(self: Box<Self>) -> Result<(S, f64), ReplyError> {
        QueryBatch2Reader::finish(*self)
    }
}

/// How a call's reply is read.
enum Reading<T> {
    Whole(Parse<T>),
    Streamed(StartReply<T>),
}

/// One RPC: a POST of `xml` (form field `request`) to `script`, its reply
/// parsed with `parse`. Made by the methods of [`Rpc`].
pub struct Call<T> {
    script: Script,
    /// Shared with each attempt's body, not copied into it: a 10,000-job
    /// submit_batch request is about 1.9 MB.
    xml: Bytes,
    attachments: Vec<Attachment>,
    reading: Reading<T>,
    retry: Retry,
    deadline: Instant,
}

impl<T: Send + 'static> Message for Call<T> {
    type Result = Result<T, RpcError>;
}

/// A download: see [`Rpc::download`].
#[derive(Message)]
#[rtype(result = "Result<u64, RpcError>")]
pub struct Download {
    url: String,
    dest: PathBuf,
    /// A longer body fails the download (not retried).
    max_bytes: u64,
    deadline: Instant,
}

/// A GET of one of the project's pages (`server_status.php?xml=1`): its
/// body, at most `max_bytes`. Idempotent: retried like an RPC.
#[derive(Message)]
#[rtype(result = "Result<Bytes, RpcError>")]
pub struct Page {
    url: String,
    max_bytes: usize,
    deadline: Instant,
}

/// The shapes of an RPC, as methods of the client's address. Each turns a
/// dead mailbox into an error.
#[allow(async_fn_in_trait)] // used by this crate's own (single-threaded) actors only
pub trait Rpc {
    /// Safe to repeat: retried on transient failures until `deadline`.
    async fn idempotent<T: Send + 'static>(&self, script: Script, xml: String, parse: Parse<T>, deadline: Instant) -> Result<T, RpcError>;
    /// [`Rpc::idempotent`] whose reply is read as it arrives.
    async fn idempotent_streamed<T: Send + 'static>(
        &self,
        script: Script,
        xml: String,
        start: StartReply<T>,
        deadline: Instant,
    ) -> Result<T, RpcError>;
    /// May have acted even when its reply is lost: one attempt; the caller
    /// asks the server what happened before trying again. `xml` may be
    /// shared `Bytes` (a request kept for a retry is not copied per attempt).
    async fn once<T: Send + 'static>(
        &self,
        script: Script,
        xml: impl Into<Bytes>,
        attachments: Vec<Attachment>,
        parse: Parse<T>,
        deadline: Instant,
    ) -> Result<T, RpcError>;
    /// Downloads `url` (it carries the authenticator: never logged) into
    /// `dest`, created or truncated per attempt. Returns the byte count.
    async fn download(&self, url: String, dest: PathBuf, deadline: Instant) -> Result<u64, RpcError>;
    /// [`Rpc::download`] of at most `max_bytes`: a longer body is an error.
    async fn download_at_most(&self, url: String, dest: PathBuf, max_bytes: u64, deadline: Instant) -> Result<u64, RpcError>;
    /// The body of a page of the project (`path` after the project URL).
    async fn page(&self, path: &str, max_bytes: usize, deadline: Instant) -> Result<Bytes, RpcError>;
}

fn stopped<T>(_: MailboxError) -> Result<T, RpcError> {
    Err(RpcError::Local("internal error: HTTP client stopped".into()))
}

impl Rpc for Addr<RpcClient> {
    async fn idempotent<T: Send + 'static>(&self, script: Script, xml: String, parse: Parse<T>, deadline: Instant) -> Result<T, RpcError> {
        let c =
            Call { script, xml: xml.into(), attachments: Vec::new(), reading: Reading::Whole(parse), retry: Retry::Idempotent, deadline };
        self.send(c).await.unwrap_or_else(stopped)
    }

    async fn idempotent_streamed<T: Send + 'static>(
        &self,
        script: Script,
        xml: String,
        start: StartReply<T>,
        deadline: Instant,
    ) -> Result<T, RpcError> {
        let reading = Reading::Streamed(start);
        let c = Call { script, xml: xml.into(), attachments: Vec::new(), reading, retry: Retry::Idempotent, deadline };
        self.send(c).await.unwrap_or_else(stopped)
    }

    async fn once<T: Send + 'static>(
        &self,
        script: Script,
        xml: impl Into<Bytes>,
        attachments: Vec<Attachment>,
        parse: Parse<T>,
        deadline: Instant,
    ) -> Result<T, RpcError> {
        let c = Call { script, xml: xml.into(), attachments, reading: Reading::Whole(parse), retry: Retry::Once, deadline };
        self.send(c).await.unwrap_or_else(stopped)
    }

    async fn download(&self, url: String, dest: PathBuf, deadline: Instant) -> Result<u64, RpcError> {
        self.download_at_most(url, dest, u64::MAX, deadline).await
    }

    async fn download_at_most(&self, url: String, dest: PathBuf, max_bytes: u64, deadline: Instant) -> Result<u64, RpcError> {
        self.send(Download { url, dest, max_bytes, deadline }).await.unwrap_or_else(stopped)
    }

    async fn page(&self, path: &str, max_bytes: usize, deadline: Instant) -> Result<Bytes, RpcError> {
        self.send(Page { url: path.to_string(), max_bytes, deadline }).await.unwrap_or_else(stopped)
    }
}

/// Outcome of one attempt.
enum Attempt {
    Failed(RpcError),
    Transient(String),
}

/// A PHP fatal error is retried this many times for an idempotent call: it
/// may be passing (a lost database connection) or certain (a server bug
/// that hits every time, as query_completed_job has for unfinished jobs).
const FATAL_ATTEMPTS: u32 = 3;

#[derive(Clone)]
pub struct RpcClient {
    key: ProjectKey,
    client: awc::Client,
    limit: Rc<Semaphore>,
    config: Arc<DaemonConfig>,
}

impl Actor for RpcClient {
    type Context = Context<Self>;
}

impl RpcClient {
    pub fn new(key: ProjectKey, config: Arc<DaemonConfig>) -> Self {
        let client = http_client(&config, 0, config.rpc_timeout);
        RpcClient { key, client, limit: Rc::new(Semaphore::new(config.max_concurrent_rpcs.max(1))), config }
    }

    fn per_attempt_timeout(&self, deadline: Instant) -> Option<Duration> {
        let left = deadline.checked_duration_since(Instant::now())?;
        (left > Duration::from_millis(50)).then(|| left.min(self.config.rpc_timeout))
    }

    async fn post_once<T>(&self, call: &Call<T>, timeout: Duration) -> Result<T, Attempt> {
        let url = format!("{}{}", self.key.url, call.script.path());
        let (content_type, body) = multipart(&call.xml, &call.attachments);
        let _permit = self.limit.acquire().await.map_err(|_| Attempt::Transient("client closed".into()))?;
        // awc's timeout ends at the headers: the body must be whole by the
        // same instant, or a server that stalls mid-reply holds the call.
        let until = tokio::time::Instant::now() + timeout;
        let mut req = self.client.post(url).timeout(timeout).insert_header((header::CONTENT_TYPE, content_type));
        // Compression is asked for only where a reply can be large (the
        // streamed status answers): for the small ones the server's deflate
        // and our inflate cost more CPU than the bytes they save.
        if !matches!(call.reading, Reading::Streamed(_)) {
            req = req.no_decompress();
        }
        let mut res = req.send_body(body).await.map_err(send_error)?;
        classify_status(res.status())?;
        let parse = match &call.reading {
            Reading::Whole(parse) => *parse,
            Reading::Streamed(start) => {
                let mut reply = start();
                let read = async {
                    let mut len = 0;
                    while let Some(chunk) = res.next().await {
                        let chunk = chunk.map_err(|e| Attempt::Transient(format!("reply cut short: {e}")))?;
                        len += chunk.len();
                        if len > MAX_REPLY {
                            return Err(Attempt::Transient(format!("reply cut short: over {MAX_REPLY} bytes")));
                        }
                        reply.feed(&chunk);
                    }
                    Ok(())
                };
                tokio::time::timeout_at(until, read).await.map_err(|_| body_stalled(timeout))??;
                return reply.finish().map_err(RpcError::from_reply);
            }
        };
        let body = tokio::time::timeout_at(until, res.body().limit(MAX_REPLY))
            .await
            .map_err(|_| body_stalled(timeout))?
            .map_err(|e| Attempt::Transient(format!("reply cut short: {e}")))?;
        parse(&body).map_err(RpcError::from_reply)
    }

    /// The one retry loop: `attempt` gets the time left for it (bounded by
    /// the RPC timeout). Transient failures are retried with backoff until
    /// the deadline unless the call is [`Retry::Once`]; a PHP fatal page a
    /// few times for an idempotent call (it may be passing: a lost database
    /// connection); anything else is final.
    async fn with_retries<T, Fut>(
        &self,
        what: &str,
        retry: Retry,
        deadline: Instant,
        mut attempt: impl FnMut(Duration) -> Fut,
    ) -> Result<T, RpcError>
    where
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let started = Instant::now();
        let mut attempts = 0;
        // Fatal pages are counted apart: transient failures before them
        // must not use up their few tries.
        let mut fatals = 0;
        loop {
            attempts += 1;
            let Some(timeout) = self.per_attempt_timeout(deadline) else {
                return Err(RpcError::Transient { detail: "no time left".into(), attempts, secs: started.elapsed().as_secs() });
            };
            match attempt(timeout).await {
                Ok(v) => return Ok(v),
                Err(Attempt::Failed(e @ RpcError::ServerFatal { duplicate_entry: false, .. }))
                    if retry == Retry::Idempotent && fatals + 1 < FATAL_ATTEMPTS =>
                {
                    fatals += 1;
                    tracing::info!(project = %self.key.url, what, attempts, "server script died: {e}");
                    let again = backoff(&self.config, attempts, deadline).await;
                    gahp_services::metrics::global().fault(&self.key.url, "server script died", again);
                    if !again {
                        return Err(e);
                    }
                }
                Err(Attempt::Failed(e)) => return Err(e),
                Err(Attempt::Transient(detail)) => {
                    tracing::info!(project = %self.key.url, what, attempts, "transient failure: {detail}");
                    let again = retry == Retry::Idempotent && backoff(&self.config, attempts, deadline).await;
                    gahp_services::metrics::global().fault(&self.key.url, &detail, again);
                    if !again {
                        return Err(RpcError::Transient { detail, attempts, secs: started.elapsed().as_secs() });
                    }
                }
            }
        }
    }

    async fn run_call<T>(self, call: Call<T>) -> Result<T, RpcError> {
        let started = Instant::now();
        let r = self.with_retries(call.script.path(), call.retry, call.deadline, |timeout| self.post_once(&call, timeout)).await;
        self.count(gahp_services::metrics::rpc_kind(&call.xml), &r, started);
        if r.is_ok() && !call.attachments.is_empty() {
            gahp_services::metrics::global().uploaded(&self.key.url, call.attachments.iter().map(|a| a.size).sum());
        }
        r
    }

    /// An RPC ended: counted by kind and outcome, with its time.
    fn count<T>(&self, kind: &'static str, r: &Result<T, RpcError>, started: Instant) {
        let outcome = match r {
            Ok(_) => "ok",
            Err(RpcError::Boinc { .. }) => "boinc_error",
            Err(RpcError::Transient { .. }) => "transient",
            Err(RpcError::ServerFatal { .. }) => "server_error",
            Err(RpcError::HttpStatus { .. }) => "http_status",
            Err(RpcError::Local(_)) => "local",
        };
        gahp_services::metrics::global().rpc(&self.key.url, kind, outcome, started.elapsed());
    }

    /// One download attempt: the headers and the whole body by `whole`
    /// (the download's deadline: outputs may be large), and the body must
    /// keep flowing: fewer than [`MIN_PROGRESS`] bytes in a stall window
    /// (`download_stall_secs`) is a stall, as is nothing at all.
    async fn get_once(&self, d: &Download, whole: Duration) -> Result<u64, Attempt> {
        let _permit = self.limit.acquire().await.map_err(|_| Attempt::Transient("client closed".into()))?;
        let until = Instant::now() + whole;
        let mut res = self.client.get(&d.url).timeout(whole).send().await.map_err(send_error)?;
        classify_status(res.status())?;
        // Only a real file carries Content-Disposition; errors are 200 + text.
        if !res.headers().contains_key(header::CONTENT_DISPOSITION) {
            let wait = until.saturating_duration_since(Instant::now()).min(self.config.download_stall_timeout);
            let body = match tokio::time::timeout(wait, res.body().limit(4096)).await {
                Err(_) => return Err(body_stalled(wait)),
                Ok(body) => body.unwrap_or_default(),
            };
            // A PHP fatal page (a lost database connection) may pass: tried
            // again as for an RPC; the download is idempotent.
            if let Some(fatal) = reply::php_fatal(&body) {
                return Err(RpcError::from_reply(fatal));
            }
            return Err(Attempt::Failed(RpcError::Boinc { num: -1, msg: reply::download_error(&body) }));
        }
        body_to_file(&mut res, &d.dest, d.max_bytes, until, whole, self.config.download_stall_timeout).await.map_err(|e| {
            if e.is_transient() {
                Attempt::Transient(e.to_string())
            } else {
                Attempt::Failed(RpcError::Local(e.to_string()))
            }
        })
    }

    async fn get_page_once(&self, p: &Page, timeout: Duration) -> Result<Bytes, Attempt> {
        let _permit = self.limit.acquire().await.map_err(|_| Attempt::Transient("client closed".into()))?;
        let until = tokio::time::Instant::now() + timeout;
        let url = format!("{}{}", self.key.url, p.url);
        let mut res = self.client.get(url).timeout(timeout).send().await.map_err(send_error)?;
        classify_status(res.status())?;
        tokio::time::timeout_at(until, res.body().limit(p.max_bytes))
            .await
            .map_err(|_| body_stalled(timeout))?
            .map_err(|e| Attempt::Transient(format!("reply cut short: {e}")))
    }

    async fn run_download(self, d: Download) -> Result<u64, RpcError> {
        let started = Instant::now();
        // Large files: an attempt may take until the download's deadline
        // (not the RPC timeout), as long as its body keeps flowing.
        let r = self
            .with_retries("download", Retry::Idempotent, d.deadline, |_| {
                let whole = d.deadline.saturating_duration_since(Instant::now());
                self.get_once(&d, whole)
            })
            .await;
        self.count("download", &r, started);
        if let Ok(bytes) = r {
            gahp_services::metrics::global().downloaded(&self.key.url, bytes);
        }
        r
    }
}

/// Why a response body did not land whole in its file.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("download not done by its deadline: {total} bytes in {secs:.1} s")]
    Deadline { total: u64, secs: f64 },
    #[error("download stalled: {bytes} bytes in {secs:.1} s")]
    Stalled { bytes: u64, secs: f64 },
    #[error("download cut short: {0}")]
    Cut(String),
    #[error("the file is larger than {0} bytes")]
    TooBig(u64),
    #[error("can't create {path}: {source}")]
    Create { path: String, source: io::Error },
    #[error("can't write {path}: {source}")]
    Write { path: String, source: io::Error },
}

impl BodyError {
    /// A stalled, late or torn body: another attempt may pass.
    pub fn is_transient(&self) -> bool {
        matches!(self, BodyError::Deadline { .. } | BodyError::Stalled { .. } | BodyError::Cut(_))
    }
}

/// Streams a response body into `dest` (created or truncated): at most
/// `max_bytes` (a longer `Content-Length` is refused before anything is
/// read), whole by `until` (`whole` is that attempt's length, for the
/// message), and flowing: fewer than [`MIN_PROGRESS`] bytes in a `window`
/// is a stall, as is nothing at all. Returns the byte count, the file
/// flushed and synced.
pub async fn body_to_file<S>(
    res: &mut awc::ClientResponse<S>,
    dest: &std::path::Path,
    max_bytes: u64,
    until: Instant,
    whole: Duration,
    window: Duration,
) -> Result<u64, BodyError>
where
    S: futures_util::Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin,
{
    // awc ends the body stream quietly when the connection drops early,
    // so a torn download is recognised by its length.
    let expected: Option<u64> = res.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    if expected.is_some_and(|n| n > max_bytes) {
        return Err(BodyError::TooBig(max_bytes));
    }
    let mut file = tokio::fs::File::create(dest).await.map_err(|source| BodyError::Create { path: dest.display().to_string(), source })?;
    let cant_write = |source| BodyError::Write { path: dest.display().to_string(), source };
    let mut window_end = Instant::now() + window;
    let mut in_window = 0u64;
    let mut total = 0u64;
    loop {
        let now = Instant::now();
        if now >= until {
            return Err(BodyError::Deadline { total, secs: whole.as_secs_f64() });
        }
        // Checked also while bytes trickle in: a drip never lets the
        // wait below time out.
        if now >= window_end {
            if in_window < MIN_PROGRESS {
                return Err(BodyError::Stalled { bytes: in_window, secs: window.as_secs_f64() });
            }
            window_end = now + window;
            in_window = 0;
        }
        let next = tokio::time::timeout_at(window_end.min(until).into(), res.next()).await;
        match next {
            // The loop's top says which bound it was.
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Cut(e.to_string())),
            Ok(Some(Ok(chunk))) => {
                total += chunk.len() as u64;
                in_window += chunk.len() as u64;
                if total > max_bytes {
                    return Err(BodyError::TooBig(max_bytes));
                }
                file.write_all(&chunk).await.map_err(cant_write)?;
            }
        }
    }
    if let Some(expected) = expected.filter(|n| *n != total) {
        return Err(BodyError::Cut(format!("{total} of {expected} bytes")));
    }
    // tokio writes in the background: the error of the last write (a
    // full disk) comes out of flush, which sync_all does not report.
    file.flush().await.map_err(cant_write)?;
    file.sync_all().await.map_err(cant_write)?;
    Ok(total)
}

/// A download slower than this many bytes per stall window
/// (`download_stall_secs`) is stalled: a server that drips a byte now and
/// then must not hold it until its deadline.
const MIN_PROGRESS: u64 = 512;

/// A reply whose body did not come whole within the attempt's time: a
/// stalled or dripping server. Transient: retried when the call is
/// idempotent, outcome unknown otherwise.
fn body_stalled(within: Duration) -> Attempt {
    Attempt::Transient(format!("reply body stalled: not whole within {:.1} s", within.as_secs_f64()))
}

/// Waits before attempt `attempt + 1`: exponential from `retry_base`, capped
/// at `retry_max`, with jitter so that many clients do not retry in step.
/// Returns `false` (without waiting) when that would pass the deadline.
pub async fn backoff(config: &DaemonConfig, attempt: u32, deadline: Instant) -> bool {
    let exp = config.retry_base.saturating_mul(1u32 << attempt.clamp(1, 16).saturating_sub(1));
    let delay = exp.min(config.retry_max).mul_f64(rand::thread_rng().gen_range(0.5..=1.0));
    if Instant::now() + delay + Duration::from_millis(100) >= deadline {
        return false;
    }
    tokio::time::sleep(delay).await;
    true
}

/// A request that could not be sent: a bad URL is permanent (retrying
/// cannot fix it); the rest (refused, reset, timed out) may pass.
fn send_error(e: awc::error::SendRequestError) -> Attempt {
    use awc::error::SendRequestError as E;
    match e {
        E::Url(e) => Attempt::Failed(RpcError::Local(format!("unusable project URL: {e}"))),
        E::TunnelNotSupported => Attempt::Failed(RpcError::Local("unusable project URL: tunnels are not supported".into())),
        e => Attempt::Transient(e.to_string()),
    }
}

fn classify_status(status: StatusCode) -> Result<(), Attempt> {
    if status == StatusCode::OK {
        Ok(())
    } else if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::REQUEST_TIMEOUT {
        Err(Attempt::Transient(format!("HTTP {}", status.as_u16())))
    } else {
        Err(Attempt::Failed(RpcError::HttpStatus { status: status.as_u16() }))
    }
}

/// A multipart/form-data body as BOINC's C client sends it: the XML in the
/// field `request`, then one part per file, paired with names by position.
/// Its length is known up front (sent as Content-Length, as curl does); the
/// files are read in chunks as the connection takes them.
fn multipart(xml: &Bytes, files: &[Attachment]) -> (String, SizedStream<LocalBoxStream<'static, io::Result<Bytes>>>) {
    let boundary = format!("------------------------{:016x}", rand::random::<u64>());
    let mut parts: Vec<Part> = Vec::with_capacity(2 * files.len() + 3);
    let field = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n");
    parts.push(Part::Bytes(Bytes::from(field)));
    parts.push(Part::Bytes(xml.clone()));
    let mut head = b"\r\n".to_vec();
    for (i, f) in files.iter().enumerate() {
        let filename: String = f.filename.chars().map(|c| if c == '"' || c.is_control() { '_' } else { c }).collect();
        head.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file_{i}\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        parts.push(Part::Bytes(Bytes::from(std::mem::take(&mut head))));
        parts.push(Part::File { path: f.path.clone(), size: f.size });
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    parts.push(Part::Bytes(Bytes::from(head)));
    let length = parts.iter().map(Part::len).sum();
    let body = futures_util::stream::iter(parts).flat_map(Part::into_stream).boxed_local();
    (format!("multipart/form-data; boundary={boundary}"), SizedStream::new(length, body))
}

/// The length of the upload_files body [`Rpc::once`] sends for `xml` and
/// `files` (the files are not read): what PHP compares with `post_max_size`.
pub fn upload_body_len(xml: &str, files: &[Attachment]) -> u64 {
    use awc::body::{BodySize, MessageBody};
    match multipart(&Bytes::copy_from_slice(xml.as_bytes()), files).1.size() {
        BodySize::Sized(n) => n,
        BodySize::None | BodySize::Stream => 0,
    }
}

/// A piece of a multipart body.
enum Part {
    Bytes(Bytes),
    File { path: PathBuf, size: u64 },
}

/// Bytes read from a file per chunk of an upload.
const UPLOAD_CHUNK: usize = 256 << 10;

impl Part {
    fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File { size, .. } => *size,
        }
    }

    fn into_stream(self) -> LocalBoxStream<'static, io::Result<Bytes>> {
        match self {
            Part::Bytes(b) => futures_util::stream::once(async move { Ok(b) }).boxed_local(),
            Part::File { path, size } => file_chunks(path, size).boxed_local(),
        }
    }
}

/// The `size` bytes of the file at `path`, in chunks; an error if the file
/// is shorter or longer than that by the time it is read.
fn file_chunks(path: PathBuf, size: u64) -> impl futures_util::Stream<Item = io::Result<Bytes>> {
    futures_util::stream::try_unfold((None, path, size), |(file, path, left): (Option<tokio::fs::File>, PathBuf, u64)| async move {
        let mut file = match file {
            Some(f) => f,
            None => tokio::fs::File::open(&path).await?,
        };
        let changed = || io::Error::other(format!("{} changed size while it was being uploaded", path.display()));
        if left == 0 {
            let mut probe = [0u8; 1];
            return if file.read(&mut probe).await? == 0 { Ok(None) } else { Err(changed()) };
        }
        let mut buf = BytesMut::zeroed(left.min(UPLOAD_CHUNK as u64) as usize);
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Err(changed());
        }
        buf.truncate(n);
        Ok(Some((buf.freeze(), (Some(file), path, left - n as u64))))
    })
}

/// The daemon's HTTP client: connect timeout and trust roots from the
/// config, its User-Agent, at most `max_redirects` redirects followed (a
/// project's: none), `timeout` until the headers of a reply.
pub fn http_client(config: &DaemonConfig, max_redirects: u8, timeout: Duration) -> awc::Client {
    let tcp = NoDelay(actix_tls::connect::Connector::new(actix_tls::connect::Resolver::default()).service());
    let mut connector = awc::Connector::new().connector(tcp).timeout(config.connect_timeout);
    match tls_config(&config.ca_files) {
        Ok(tls) => connector = connector.rustls_0_23(Arc::new(tls)),
        Err(e) => tracing::error!("TLS set-up failed, https will not work: {e}"),
    }
    awc::Client::builder()
        .connector(connector)
        .max_redirects(max_redirects)
        .timeout(timeout)
        .add_default_header((header::USER_AGENT, "BOINC Condor adapter (boinc-gahp)"))
        .finish()
}

/// The TCP connector with TCP_NODELAY set on each connection, as curl (and
/// so BOINC's C daemon) sets it. Without it a request written in pieces (an
/// upload's parts, each file read as the connection takes it) waited for
/// the server's delayed ACK of the piece before: 40 ms on Linux, in a
/// 100-job submit's upload of its ten inputs.
#[derive(Clone)]
struct NoDelay<S>(S);

/// What awc's connector asks a TCP connector for, and what it gets.
type ConnectTo = actix_tls::connect::ConnectInfo<awc::http::Uri>;
type TcpConnection = actix_tls::connect::Connection<awc::http::Uri, actix_rt::net::TcpStream>;

impl<S> actix_service::Service<ConnectTo> for NoDelay<S>
where
    S: actix_service::Service<ConnectTo, Response = TcpConnection, Error = actix_tls::connect::ConnectError>,
    S::Future: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = LocalBoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&self, req: ConnectTo) -> Self::Future {
        let connecting = self.0.call(req);
        Box::pin(async move {
            let conn = connecting.await?;
            if let Err(e) = conn.io_ref().set_nodelay(true) {
                tracing::debug!("TCP_NODELAY not set: {e}");
            }
            Ok(conn)
        })
    }
}

/// Web roots plus the CA files HTCondor passes in GAHP_SSL_CAFILE/CADIR.
pub fn tls_config(ca_files: &[PathBuf]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for path in ca_files {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(file)) {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl<T: Send + 'static> Handler<Call<T>> for RpcClient {
    type Result = ResponseFuture<Result<T, RpcError>>;
    fn handle(&mut self, msg: Call<T>, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.clone().run_call(msg))
    }
}

impl Handler<Page> for RpcClient {
    type Result = ResponseFuture<Result<Bytes, RpcError>>;
    fn handle(&mut self, msg: Page, _: &mut Context<Self>) -> Self::Result {
        let this = self.clone();
        Box::pin(async move {
            let started = Instant::now();
            let r = this.with_retries("page", Retry::Idempotent, msg.deadline, |timeout| this.get_page_once(&msg, timeout)).await;
            this.count("page", &r, started);
            r
        })
    }
}

impl Handler<Download> for RpcClient {
    type Result = ResponseFuture<Result<u64, RpcError>>;
    fn handle(&mut self, msg: Download, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.clone().run_download(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_service::Service;

    /// Connects to a listener on loopback through `service` and says
    /// whether the connection has TCP_NODELAY.
    fn nodelay_of<S: Service<ConnectTo, Response = TcpConnection, Error = actix_tls::connect::ConnectError>>(service: S) -> bool {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri: awc::http::Uri = format!("http://{}/", listener.local_addr().unwrap()).parse().unwrap();
        actix_rt::System::new().block_on(async move {
            let conn = service.call(ConnectTo::new(uri)).await.expect("connects on loopback");
            conn.io_ref().nodelay().unwrap()
        })
    }

    /// The metrics name a fault's cause from the words given here.
    #[test]
    fn each_kind_of_fault_has_its_cause_in_the_metrics() {
        use awc::error::{ConnectError, SendRequestError};
        use gahp_services::metrics::fault_cause;
        let cause = |a: Attempt| match a {
            Attempt::Transient(detail) => fault_cause(&detail),
            Attempt::Failed(e) => panic!("not transient: {e}"),
        };
        assert_eq!(cause(classify_status(StatusCode::SERVICE_UNAVAILABLE).unwrap_err()), "http_5xx");
        assert_eq!(cause(classify_status(StatusCode::TOO_MANY_REQUESTS).unwrap_err()), "http_429");
        assert_eq!(cause(classify_status(StatusCode::REQUEST_TIMEOUT).unwrap_err()), "timeout");
        assert_eq!(cause(send_error(SendRequestError::Timeout)), "timeout");
        assert_eq!(cause(send_error(SendRequestError::Connect(ConnectError::Timeout))), "connect");
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(cause(send_error(SendRequestError::Connect(ConnectError::Io(refused)))), "connect");
        assert_eq!(cause(body_stalled(Duration::from_secs(1))), "stalled");
        assert_eq!(fault_cause(&BodyError::Stalled { bytes: 3, secs: 1.0 }.to_string()), "stalled");
        assert_eq!(fault_cause(&BodyError::Deadline { total: 3, secs: 1.0 }.to_string()), "stalled");
        assert_eq!(fault_cause(&BodyError::Cut("3 of 9 bytes".into()).to_string()), "torn");
        let lost = "<b>Fatal error</b>: Uncaught mysqli_sql_exception: Connection refused in /x/boinc_db.inc";
        let lost = RpcError::from_reply(reply::php_fatal(lost.as_bytes()).expect("a fatal page"));
        assert_eq!(cause(lost), "server_script");
    }

    #[test]
    fn project_connections_have_tcp_nodelay() {
        let plain = || actix_tls::connect::Connector::new(actix_tls::connect::Resolver::default()).service();
        assert!(!nodelay_of(plain()), "a plain connection waits for the delayed ACK");
        assert!(nodelay_of(NoDelay(plain())));
    }
}
