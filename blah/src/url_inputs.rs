//! `transfer_input_files` entries that are URLs (docs/blah.md "Inputs"):
//! fetched on the submit side, once per batch, into files that are then
//! sent up like any other input (content-addressed by the FileStager).
//!
//! http and https are fetched with the daemon's own HTTP client; any other
//! scheme by an HTCondor file transfer plugin that claims it (HTCondor's
//! multi-file plugin protocol: `plugin -classad` says which schemes it
//! handles; `plugin -infile IN -outfile OUT` transfers the URLs of IN and
//! writes one result ad each to OUT). Each fetch is bounded in size
//! (`url_input_max_bytes`) and time (`url_input_timeout_secs`); a failure
//! becomes the job's hold reason.
//!
//! A URL's file is named by the MD5 of the URL, so jobs of a batch that
//! name one URL share one fetch; in the job it takes the name of the URL
//! path's last segment, as HTCondor names it ([`file_name`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use awc::http::{header, StatusCode};
use futures_util::StreamExt;
use gahp_protocol::classad::{ClassAd, ClassAdError, Value, MAX_DEPTH};
use tokio::io::AsyncReadExt;

use crate::map_error::config_name;
use gahp_project::rpc::{self, BodyError};
use gahp_services::atomic_file;
use gahp_services::config::{BlahConfig, DaemonConfig};
use gahp_services::digest::hex_md5;

/// URLs fetched at once per batch (each a download, or a plugin's run).
pub const CONCURRENT_FETCHES: usize = 4;

/// Redirects an http(s) URL may take (as a browser or curl -L would).
pub const MAX_REDIRECTS: u8 = 5;

/// Attempts at an http(s) URL whose failure may pass (a refused or reset
/// connection, a 5xx, a stalled body), all within the timeout.
const HTTP_ATTEMPTS: u32 = 3;

/// `condor_config_val` and a plugin's `-classad` answer within this.
const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// Largest plugin output (its `-classad` ad, or its result ads) read.
const MAX_PLUGIN_OUTPUT: u64 = 16 << 20;

/// How often a running plugin's files are measured against the bound.
const PLUGIN_POLL: Duration = Duration::from_millis(100);

/// Longest text of a plugin's own (its TransferError, its stderr) kept for
/// a hold reason.
const MAX_PLUGIN_TEXT: usize = 400;

/// Whether a `transfer_input_files` entry is a URL.
pub fn is_url(entry: &str) -> bool {
    entry.contains("://")
}

/// Every URL among `transfer_input_files` entries (of a batch's jobs).
pub fn urls_of<'a>(entries: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    entries.into_iter().filter(|e| is_url(e)).map(String::from).collect()
}

/// Why a URL input has no file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UrlError {
    #[error("is not a URL (scheme://...)")]
    NotAUrl,
    #[error("names no file (the last segment of its path is empty, . or ..), which a job's input needs")]
    NoFileName,
    #[error("HTTP status {status}{}", reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Http { status: u16, reason: Option<String> },
    #[error("HTTP status {0}: more than {MAX_REDIRECTS} redirects")]
    Redirects(u16),
    #[error("{0}")]
    Unusable(String),
    #[error("{detail} (after {attempts} attempt(s))")]
    Connect { detail: String, attempts: u32 },
    #[error("it is larger than url_input_max_bytes ({max} bytes) of the [blah] section of {config}")]
    TooBig { max: u64, config: String },
    #[error("not fetched within url_input_timeout_secs ({secs} s) of the [blah] section of {config}")]
    Timeout { secs: u64, config: String },
    #[error("the download failed: {0}")]
    Body(String),
    #[error(
        "no file transfer plugin handles {scheme}:// URLs: set transfer_plugins in the [blah] section of {config} \
         (or HTCondor's FILETRANSFER_PLUGINS)"
    )]
    NoPlugin { scheme: String, config: String },
    #[error("the file transfer plugin {plugin} failed: {why}")]
    Plugin { plugin: String, why: String },
    #[error("can't write it on this host: {0}")]
    Local(String),
}

/// What the URL entries of a batch's jobs became: each URL's file, or why
/// it has none; URLs not fetched at all are refused with `otherwise`.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlInputs {
    fetched: HashMap<String, Result<PathBuf, String>>,
    otherwise: String,
}

impl UrlInputs {
    /// No URL is fetched: a URL entry holds its job with `why`.
    pub fn refused(why: impl Into<String>) -> Self {
        UrlInputs { fetched: HashMap::new(), otherwise: why.into() }
    }

    /// The files of [`fetch_all`].
    pub fn fetched(fetched: HashMap<String, Result<PathBuf, String>>) -> Self {
        UrlInputs { fetched, otherwise: "was not fetched (an internal error)".into() }
    }

    /// The local file of a URL entry and the name it takes in the job's
    /// directory; else the problem, for the hold reason.
    pub fn local(&self, url: &str) -> Result<(PathBuf, String), String> {
        let name = file_name(url).map_err(|e| e.to_string())?;
        match self.fetched.get(url) {
            Some(Ok(path)) => Ok((path.clone(), name)),
            Some(Err(why)) => Err(format!("can't be fetched: {why}")),
            None => Err(self.otherwise.clone()),
        }
    }
}

/// The scheme of a URL, lower-cased: letters, digits, `+`, `-`, `.`,
/// starting with a letter (RFC 3986), before `://`. A URL with white space
/// or control characters is none.
pub fn scheme(url: &str) -> Result<String, UrlError> {
    let (scheme, rest) = url.split_once("://").ok_or(UrlError::NotAUrl)?;
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok || rest.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::NotAUrl);
    }
    Ok(scheme.to_ascii_lowercase())
}

/// The name a URL input takes in the job's directory: the last segment of
/// the URL's path, as written (`%` escapes kept), without the query or
/// fragment (`https://h/d/data.txt?sig=x` is `data.txt`). A path that ends
/// with `/`, or whose last segment is `.` or `..`, names no file.
pub fn file_name(url: &str) -> Result<String, UrlError> {
    scheme(url)?;
    let (_, rest) = url.split_once("://").ok_or(UrlError::NotAUrl)?;
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    // After the authority (`host:port`, possibly empty as in osdf:///x).
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let name = path.rsplit('/').next().unwrap_or("");
    if name.is_empty() || name == "." || name == ".." || name.contains('\\') {
        return Err(UrlError::NoFileName);
    }
    Ok(name.to_string())
}

/// A URL as the log shows it: without a password or query string, which
/// may carry credentials (a pre-signed URL's signature).
pub fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (rest, query) = match rest.find(['?', '#']) {
        Some(i) => (&rest[..i], "?…"),
        None => (rest, ""),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => format!("…@{}", &rest[at + 1..]),
        None => rest.to_string(),
    };
    format!("{scheme}://{rest}{query}")
}

/// Where a URL's file goes in `dir`: the MD5 of the URL.
fn dest_of(dir: &Path, url: &str) -> PathBuf {
    dir.join(hex_md5(url.as_bytes()))
}

/// Fetches each URL once into `dir` (made if need be), at most
/// [`CONCURRENT_FETCHES`] at a time: the URL's file, or what failed.
pub async fn fetch_all(urls: BTreeSet<String>, dir: &Path, config: &DaemonConfig) -> HashMap<String, Result<PathBuf, String>> {
    let mut done: HashMap<String, Result<PathBuf, String>> = HashMap::new();
    if urls.is_empty() {
        return done;
    }
    if let Err(e) = std::fs::create_dir_all(dir) {
        let why = UrlError::Local(format!("can't make {}: {e}", dir.display())).to_string();
        return urls.into_iter().map(|u| (u, Err(why.clone()))).collect();
    }
    let cfg = &config.blah;
    let (mut http, mut by_scheme): (Vec<String>, BTreeMap<String, Vec<String>>) = (Vec::new(), BTreeMap::new());
    for url in urls {
        match scheme(&url).and_then(|s| file_name(&url).map(|_| s)) {
            Err(e) => {
                done.insert(url, Err(e.to_string()));
            }
            Ok(s) if s == "http" || s == "https" => http.push(url),
            Ok(s) => by_scheme.entry(s).or_default().push(url),
        }
    }
    // Plugins are asked only when a scheme needs one.
    let plugins = if by_scheme.is_empty() { Vec::new() } else { plugins(cfg).await };
    let mut runs: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (scheme, urls) in by_scheme {
        // The last plugin that claims a scheme has it, as in HTCondor.
        match plugins.iter().rposition(|p| p.methods.contains(&scheme)) {
            Some(i) => runs.entry(i).or_default().extend(urls),
            None => {
                let why = UrlError::NoPlugin { scheme, config: config_name(cfg) }.to_string();
                done.extend(urls.into_iter().map(|u| (u, Err(why.clone()))));
            }
        }
    }

    let client = (!http.is_empty()).then(|| rpc::http_client(config, MAX_REDIRECTS, cfg.url_input_timeout));
    let units = http.into_iter().map(Unit::Http).chain(runs.into_iter().map(|(i, urls)| Unit::Plugin(i, urls)));
    let fetched: Vec<Vec<(String, Result<PathBuf, UrlError>)>> = futures_util::stream::iter(units)
        .map(|unit| {
            let (client, plugins) = (&client, &plugins);
            async move {
                match unit {
                    Unit::Http(url) => {
                        let dest = dest_of(dir, &url);
                        let got = match client {
                            Some(client) => fetch_http(client, &url, &dest, config).await.map(|()| dest),
                            None => Err(UrlError::Local("no HTTP client (an internal error)".into())),
                        };
                        vec![(url, got)]
                    }
                    Unit::Plugin(i, urls) => run_plugin(&plugins[i], urls, dir, cfg).await,
                }
            }
        })
        .buffer_unordered(CONCURRENT_FETCHES)
        .collect()
        .await;
    for (url, got) in fetched.into_iter().flatten() {
        match &got {
            Ok(path) => {
                let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                tracing::info!(url = %shown(&url), bytes, "fetched a URL input");
            }
            Err(e) => tracing::warn!(url = %shown(&url), "can't fetch a URL input: {e}"),
        }
        done.insert(url, got.map_err(|e| e.to_string()));
    }
    done
}

enum Unit {
    Http(String),
    /// A plugin (its index) and the URLs it transfers in one run.
    Plugin(usize, Vec<String>),
}

/// One attempt's failure: `again` when another attempt may pass.
struct Failed {
    error: UrlError,
    again: bool,
}

impl Failed {
    fn last(error: UrlError) -> Failed {
        Failed { error, again: false }
    }
    fn again(error: UrlError) -> Failed {
        Failed { error, again: true }
    }
}

/// An http(s) URL into `dest`, whole (a temporary file, then a rename):
/// transient failures are tried again, up to [`HTTP_ATTEMPTS`] in all,
/// within `url_input_timeout_secs`.
async fn fetch_http(client: &awc::Client, url: &str, dest: &Path, config: &DaemonConfig) -> Result<(), UrlError> {
    let cfg = &config.blah;
    let deadline = Instant::now() + cfg.url_input_timeout;
    let timeout = || UrlError::Timeout { secs: cfg.url_input_timeout.as_secs_f64().ceil() as u64, config: config_name(cfg) };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let whole = deadline.saturating_duration_since(Instant::now());
        if whole < Duration::from_millis(50) {
            return Err(timeout());
        }
        let tmp = atomic_file::temp_beside(dest).map_err(|e| UrlError::Local(format!("{}: {e}", dest.display())))?;
        let attempt = async {
            let req = client.get(url).timeout(whole).no_decompress().insert_header((header::ACCEPT_ENCODING, "identity"));
            let mut res = req.send().await.map_err(|e| {
                use awc::error::SendRequestError as E;
                match e {
                    E::Url(e) => Failed::last(UrlError::Unusable(format!("not a URL this host can fetch: {e}"))),
                    E::Timeout => Failed::again(timeout()),
                    e => Failed::again(UrlError::Connect { detail: e.to_string(), attempts }),
                }
            })?;
            let status = res.status();
            if !status.is_success() || status == StatusCode::NO_CONTENT || status == StatusCode::PARTIAL_CONTENT {
                let http = UrlError::Http { status: status.as_u16(), reason: status.canonical_reason().map(String::from) };
                return Err(match status {
                    s if s.is_redirection() => Failed::last(UrlError::Redirects(s.as_u16())),
                    s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT => {
                        Failed::again(http)
                    }
                    _ => Failed::last(http),
                });
            }
            // awc reads an HTTP/1.1 body that is neither counted nor
            // chunked as empty (only HTTP/1.0 may end a body by closing).
            let framed = |name| res.headers().contains_key(name);
            if res.version() == awc::http::Version::HTTP_11 && !framed(header::CONTENT_LENGTH) && !framed(header::TRANSFER_ENCODING) {
                return Err(Failed::last(UrlError::Unusable(
                    "the server's reply says neither its length nor that it is chunked, so its end can't be told".into(),
                )));
            }
            let stall = config.download_stall_timeout;
            rpc::body_to_file(&mut res, tmp.path(), cfg.url_input_max_bytes, deadline, whole, stall).await.map_err(|e| match e {
                BodyError::TooBig(max) => Failed::last(UrlError::TooBig { max, config: config_name(cfg) }),
                BodyError::Deadline { .. } => Failed::last(timeout()),
                e if e.is_transient() => Failed::again(UrlError::Body(e.to_string())),
                e => Failed::last(UrlError::Local(e.to_string())),
            })
        };
        match attempt.await {
            Ok(_) => {
                return atomic_file::persist(tmp, dest).map_err(|e| UrlError::Local(format!("{}: {e}", dest.display())));
            }
            Err(Failed { error, again: true }) if attempts < HTTP_ATTEMPTS => {
                tracing::info!(url = %shown(url), attempts, "fetching a URL input failed, trying again: {error}");
                if !rpc::backoff(config, attempts, deadline).await {
                    return Err(error);
                }
            }
            Err(Failed { error, .. }) => return Err(error),
        }
    }
}

/// A file transfer plugin and the schemes it handles (lower case).
#[derive(Debug, Clone, PartialEq)]
pub struct Plugin {
    pub path: PathBuf,
    pub methods: Vec<String>,
}

/// The plugins that answer `-classad` as multi-file file transfer
/// plugins: those of `transfer_plugins`, else HTCondor's.
async fn plugins(cfg: &BlahConfig) -> Vec<Plugin> {
    let paths = match &cfg.transfer_plugins {
        Some(paths) => paths.clone(),
        None => condor_plugins().await,
    };
    let mut plugins = Vec::with_capacity(paths.len());
    for path in paths {
        match query(&path, QUERY_TIMEOUT.min(cfg.url_input_timeout)).await {
            Ok(methods) => plugins.push(Plugin { path, methods }),
            Err(e) => tracing::warn!(plugin = %path.display(), "not used as a file transfer plugin: {e}"),
        }
    }
    plugins
}

/// `condor_config_val FILETRANSFER_PLUGINS`: none when HTCondor is not
/// installed or sets none.
async fn condor_plugins() -> Vec<PathBuf> {
    let mut cmd = tokio::process::Command::new("condor_config_val");
    cmd.arg("FILETRANSFER_PLUGINS");
    match run(cmd, QUERY_TIMEOUT).await {
        Ok((status, out)) if status.success() => {
            String::from_utf8_lossy(&out).split([',', ' ', '\t', '\n', '\r']).filter(|p| !p.is_empty()).map(PathBuf::from).collect()
        }
        Ok((status, _)) => {
            tracing::debug!("condor_config_val FILETRANSFER_PLUGINS: {status}: no plugins");
            Vec::new()
        }
        Err(e) => {
            tracing::debug!("condor_config_val FILETRANSFER_PLUGINS: {e}: no plugins");
            Vec::new()
        }
    }
}

/// The schemes a plugin handles, from its `-classad` ad.
async fn query(path: &Path, timeout: Duration) -> Result<Vec<String>, String> {
    let mut cmd = tokio::process::Command::new(path);
    cmd.arg("-classad");
    let (status, out) = run(cmd, timeout).await?;
    if !status.success() {
        return Err(format!("-classad {status}"));
    }
    let text = String::from_utf8_lossy(&out);
    let ad = read_ads(&text).map_err(|e| format!("its -classad output: {e}"))?.into_iter().next().ok_or("-classad printed no ad")?;
    plugin_methods(&ad)
}

/// The schemes of a plugin's `-classad` ad, if it is a multi-file file
/// transfer plugin (the protocol this daemon speaks).
pub fn plugin_methods(ad: &ClassAd) -> Result<Vec<String>, String> {
    if ad.get_str("PluginType").is_some_and(|t| !t.eq_ignore_ascii_case("FileTransfer")) {
        return Err("its PluginType is not FileTransfer".into());
    }
    if ad.get_bool("MultipleFileSupport") != Some(true) {
        return Err("it is not a multi-file plugin (MultipleFileSupport = true), which this daemon needs".into());
    }
    let methods: Vec<String> = ad
        .get_str("SupportedMethods")
        .ok_or("its -classad ad has no SupportedMethods")?
        .split(',')
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty())
        .collect();
    if methods.is_empty() {
        return Err("its SupportedMethods is empty".into());
    }
    Ok(methods)
}

/// Why a child process gave nothing.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("can't start it: {0}")]
    Start(std::io::Error),
    #[error("no answer within {0:.0} s (killed)")]
    Timeout(f64),
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<RunError> for String {
    fn from(e: RunError) -> String {
        e.to_string()
    }
}

/// Runs `cmd` (stdin empty, stderr dropped) and reads at most
/// [`MAX_PLUGIN_OUTPUT`] of its stdout, all within `timeout`; over time,
/// its process group is killed.
async fn run(mut cmd: tokio::process::Command, timeout: Duration) -> Result<(std::process::ExitStatus, Vec<u8>), RunError> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).process_group(0).kill_on_drop(true);
    let mut child = cmd.spawn().map_err(RunError::Start)?;
    let pid = child.id();
    let mut stdout = child.stdout.take().ok_or_else(|| RunError::Io(std::io::Error::other("no stdout")))?;
    let work = async {
        let mut out = Vec::new();
        (&mut stdout).take(MAX_PLUGIN_OUTPUT).read_to_end(&mut out).await.map_err(RunError::Io)?;
        let status = child.wait().await.map_err(RunError::Io)?;
        Ok((status, out))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            kill_group(pid);
            Err(RunError::Timeout(timeout.as_secs_f64()))
        }
    }
}

/// Kills a child's process group (it was started as its leader, and not
/// reaped yet: the id is still ours).
fn kill_group(pid: Option<u32>) {
    use rustix::process::{kill_process_group, Pid, Signal};
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

/// One run of a plugin for `urls` (its working directory in `dir`): each
/// URL's file moved to its place in `dir`, or why it failed.
async fn run_plugin(plugin: &Plugin, urls: Vec<String>, dir: &Path, cfg: &BlahConfig) -> Vec<(String, Result<PathBuf, UrlError>)> {
    let name = plugin.path.display().to_string();
    let fail_all = |urls: Vec<String>, why: String| {
        urls.into_iter().map(|u| (u, Err(UrlError::Plugin { plugin: name.clone(), why: why.clone() }))).collect::<Vec<_>>()
    };
    let work = match tempfile::Builder::new().prefix(".plugin-").tempdir_in(dir) {
        Ok(w) => w,
        Err(e) => return fail_all(urls, format!("can't make its directory in {}: {e}", dir.display())),
    };
    let (infile, outfile, errfile) = (work.path().join("in.ads"), work.path().join("out.ads"), work.path().join("stderr"));
    let locals: Vec<PathBuf> = urls.iter().map(|u| work.path().join(hex_md5(u.as_bytes()))).collect();
    let input = plugin_input(urls.iter().zip(&locals));
    let prepared =
        std::fs::write(&infile, input).and_then(|()| std::fs::write(&outfile, "")).and_then(|()| std::fs::File::create(&errfile));
    let errors = match prepared {
        Ok(f) => f,
        Err(e) => return fail_all(urls, format!("can't write its input in {}: {e}", work.path().display())),
    };
    let mut cmd = tokio::process::Command::new(&plugin.path);
    cmd.arg("-infile")
        .arg(&infile)
        .arg("-outfile")
        .arg(&outfile)
        .current_dir(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(errors))
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail_all(urls, format!("can't start it: {e}")),
    };
    let pid = child.id();
    let deadline = tokio::time::Instant::now() + cfg.url_input_timeout;
    let max = cfg.url_input_max_bytes;
    // Waited for, and measured meanwhile: a file over the bound or a run
    // over the time stops the plugin and everything it started.
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| format!("can't wait for it: {e}")),
            _ = tokio::time::sleep(PLUGIN_POLL) => {
                let over = locals.iter().position(|l| std::fs::metadata(l).is_ok_and(|m| m.len() > max));
                if let Some(i) = over {
                    kill_group(pid);
                    let _ = child.wait().await;
                    let too_big = UrlError::TooBig { max, config: config_name(cfg) };
                    let why = format!("stopped: {} is larger than url_input_max_bytes ({max} bytes)", shown(&urls[i]));
                    let mut out = fail_all(urls, why);
                    out[i].1 = Err(too_big);
                    return out;
                }
                if tokio::time::Instant::now() >= deadline {
                    kill_group(pid);
                    let _ = child.wait().await;
                    let secs = cfg.url_input_timeout.as_secs_f64().ceil() as u64;
                    let timeout = UrlError::Timeout { secs, config: config_name(cfg) };
                    return urls.into_iter().map(|u| (u, Err(timeout.clone()))).collect();
                }
            }
        }
    };
    let status = match status {
        Ok(s) => s,
        Err(why) => return fail_all(urls, why),
    };
    let stderr_tail = || {
        let text = read_bounded(&errfile).unwrap_or_default();
        let text = String::from_utf8_lossy(&text[text.len().saturating_sub(4 * MAX_PLUGIN_TEXT)..]).into_owned();
        let line = one_line(&text, usize::MAX);
        let tail: String = line.chars().rev().take(MAX_PLUGIN_TEXT).collect::<Vec<_>>().into_iter().rev().collect();
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends: {tail}")
        }
    };
    let results = match read_bounded(&outfile).map(|b| String::from_utf8_lossy(&b).into_owned()) {
        Ok(text) => match read_ads(&text) {
            Ok(ads) => ads,
            Err(e) => return fail_all(urls, format!("{status}, and its -outfile can't be read: {e}{}", stderr_tail())),
        },
        Err(e) => return fail_all(urls, format!("{status}, and its -outfile can't be read: {e}{}", stderr_tail())),
    };
    let mut out = Vec::with_capacity(urls.len());
    for (url, local) in urls.into_iter().zip(locals) {
        let local_name = local.display().to_string();
        let ad = results
            .iter()
            .find(|ad| ad.get_str("TransferUrl") == Some(url.as_str()))
            .or_else(|| results.iter().find(|ad| ad.get_str("TransferFileName") == Some(local_name.as_str())));
        let failed = |why: String| Err(UrlError::Plugin { plugin: name.clone(), why });
        let got = match ad.map(|ad| (ad.get_bool("TransferSuccess"), ad.get_str("TransferError"))) {
            Some((Some(false), error)) => failed(
                error.map(|e| one_line(e, MAX_PLUGIN_TEXT)).unwrap_or_else(|| "TransferSuccess = false, with no TransferError".into()),
            ),
            Some((Some(true), _)) if status.success() => place(&local, &dest_of(dir, &url), max, cfg).map_err(|e| match e {
                e @ (UrlError::TooBig { .. } | UrlError::Local(_)) => e,
                e => UrlError::Plugin { plugin: name.clone(), why: e.to_string() },
            }),
            Some((Some(true), _)) => failed(format!("{status}, though it reported this URL transferred{}", stderr_tail())),
            Some((None, _)) => failed(format!("{status}, and its result for this URL has no TransferSuccess{}", stderr_tail())),
            None => failed(format!("{status}, with no result for this URL{}", stderr_tail())),
        };
        out.push((url, got));
    }
    out
}

/// Moves a file a plugin wrote to its place in the batch's directory: a
/// regular file (not a link) within the bound.
fn place(local: &Path, dest: &Path, max: u64, cfg: &BlahConfig) -> Result<PathBuf, UrlError> {
    let meta = std::fs::symlink_metadata(local).map_err(|e| UrlError::Unusable(format!("it wrote no file: {e}")))?;
    if !meta.is_file() {
        return Err(UrlError::Unusable("what it wrote is not a regular file".into()));
    }
    if meta.len() > max {
        return Err(UrlError::TooBig { max, config: config_name(cfg) });
    }
    std::fs::rename(local, dest).map_err(|e| UrlError::Local(format!("{}: {e}", dest.display())))?;
    Ok(dest.to_path_buf())
}

/// A file of at most [`MAX_PLUGIN_OUTPUT`] bytes.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(path)?, MAX_PLUGIN_OUTPUT + 1), &mut bytes)?;
    if bytes.len() as u64 > MAX_PLUGIN_OUTPUT {
        return Err(std::io::Error::other(format!("more than {MAX_PLUGIN_OUTPUT} bytes")));
    }
    Ok(bytes)
}

/// A text of a plugin's as one line of at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    let line: String = line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// Why a plugin's output is no sequence of ads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdsError {
    #[error("ad {ad}: {source}")]
    Syntax { ad: usize, source: ClassAdError },
    #[error("ad {0}: its brackets or quotes are not closed")]
    Unclosed(usize),
    #[error("ad {0}: nested deeper than {MAX_DEPTH}")]
    TooDeep(usize),
    #[error("more than {MAX_ADS} ads")]
    TooMany,
}

/// Ads a plugin's output may hold, at most.
pub const MAX_ADS: usize = 100_000;

/// The ads of a plugin's output, in either of HTCondor's forms, even
/// mixed: new ClassAds (`[ A = 1; B = "x" ]`, one after another, across
/// lines or not), or old ones (a `Name = value` line per attribute, an
/// empty line between ads). `#` lines are comments.
pub fn read_ads(text: &str) -> Result<Vec<ClassAd>, AdsError> {
    let mut ads = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(ads);
        }
        if ads.len() >= MAX_ADS {
            return Err(AdsError::TooMany);
        }
        let n = ads.len() + 1;
        if rest.starts_with('[') {
            let end = bracket_end(rest, n)?;
            ads.push(ClassAd::parse(&rest[..end]).map_err(|source| AdsError::Syntax { ad: n, source })?);
            rest = &rest[end..];
            continue;
        }
        // Old form: lines up to an empty one, or the start of a new ad.
        let mut ad = ClassAd::new();
        while !rest.is_empty() {
            let (line, next) = rest.split_once('\n').unwrap_or((rest, ""));
            let line = line.trim();
            if line.starts_with('[') {
                break;
            }
            rest = next;
            if line.is_empty() {
                break;
            }
            if line.starts_with('#') {
                continue;
            }
            let one = ClassAd::parse(&format!("[ {line} ]")).map_err(|source| AdsError::Syntax { ad: n, source })?;
            for (name, value) in one.iter() {
                ad.insert(name, value.clone());
            }
        }
        if !ad.is_empty() {
            ads.push(ad);
        }
    }
}

/// Where the new ClassAd that `text` starts with ends: after the `]`
/// that closes its `[` (strings, quoted names and nesting respected).
fn bracket_end(text: &str, n: usize) -> Result<usize, AdsError> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if i >= b.len() {
                    return Err(AdsError::Unclosed(n));
                }
            }
            b'[' | b'{' | b'(' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(AdsError::TooDeep(n));
                }
            }
            b']' | b'}' | b')' => {
                depth = depth.checked_sub(1).ok_or(AdsError::Unclosed(n))?;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(AdsError::Unclosed(n))
}

/// A plugin's input file: an ad per URL, with the local file it goes to.
fn plugin_input<'a>(urls: impl IntoIterator<Item = (&'a String, &'a PathBuf)>) -> String {
    let mut text = String::new();
    for (url, local) in urls {
        let mut ad = ClassAd::new();
        ad.insert("Url", Value::Str(url.clone()));
        ad.insert("LocalFileName", Value::Str(local.display().to_string()));
        text.push_str(&format!("{ad}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_input_is_named_by_the_last_segment_of_its_path() {
        for (url, name) in [
            ("http://127.0.0.1:8080/data.txt", "data.txt"),
            ("https://h.example/a/b/c.tar.gz?X-Amz-Signature=abc&x=/y", "c.tar.gz"),
            ("https://h.example/a/b/c#frag/x", "c"),
            ("osdf:///ospool/ap40/data/u/in.dat", "in.dat"),
            ("s3://bucket/key/part%201", "part%201"),
            ("PELICAN://fed.example/ns/obj", "obj"),
        ] {
            assert_eq!(file_name(url).as_deref(), Ok(name), "{url}");
        }
        for url in ["http://h.example", "http://h.example/", "http://h/dir/", "http://h/..", "http://h/a/.", "osdf:///?x=/y"] {
            assert_eq!(file_name(url), Err(UrlError::NoFileName), "{url}");
        }
        for url in ["://x/y", "1http://h/x", "ht tp://h/x", "http://h/a b", "http://h/a\nb", "http://", "a_b://h/x"] {
            assert_eq!(file_name(url), Err(UrlError::NotAUrl), "{url}");
        }
        assert_eq!(scheme("OSDF:///x/y").as_deref(), Ok("osdf"));
        assert_eq!(scheme("my+https://h/x").as_deref(), Ok("my+https"));
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(shown("https://h.example/a/b?sig=secret"), "https://h.example/a/b?…");
        assert_eq!(shown("https://user:pw@h.example/a"), "https://…@h.example/a");
        assert_eq!(shown("http://127.0.0.1:1/data.txt"), "http://127.0.0.1:1/data.txt");
        assert_eq!(shown("osdf:///ns/a@b"), "osdf:///ns/a@b", "an @ in the path is no password");
    }

    #[test]
    fn the_urls_of_a_batch_are_its_members_url_entries_once_each() {
        // Two jobs' entries, as the typed job splits them.
        let entries = ["in", "http://h/x", "osdf:///n/y", "http://h/x", "other"];
        let urls: Vec<String> = urls_of(entries).into_iter().collect();
        assert_eq!(urls, ["http://h/x", "osdf:///n/y"]);
    }

    #[test]
    fn a_url_entry_is_its_file_under_its_name_or_the_reason_it_has_none() {
        let fetched = UrlInputs::fetched(
            [
                ("http://h/d/in.txt?s=1".to_string(), Ok(PathBuf::from("/s/urls/abc"))),
                ("http://h/gone".to_string(), Err("HTTP status 404 (Not Found)".to_string())),
            ]
            .into(),
        );
        assert_eq!(fetched.local("http://h/d/in.txt?s=1"), Ok((PathBuf::from("/s/urls/abc"), "in.txt".to_string())));
        assert_eq!(fetched.local("http://h/gone").unwrap_err(), "can't be fetched: HTTP status 404 (Not Found)");
        assert!(fetched.local("http://h/dir/").unwrap_err().contains("names no file"));
        assert!(fetched.local("http://h/other").unwrap_err().contains("not fetched"));
        let refused = UrlInputs::refused("is a URL, and no");
        assert_eq!(refused.local("http://h/x").unwrap_err(), "is a URL, and no");
    }

    #[test]
    fn plugin_output_in_either_form_is_read() {
        // Old form (what -classad prints), ads apart by an empty line.
        let old = "MultipleFileSupport = true\nPluginVersion = \"0.2\"\nPluginType = \"FileTransfer\"\n\
                   SupportedMethods = \"stash, OSDF,pelican\"\nStartdAttrs = \"X\"\nX = [ V = \"7.1\"; ]\n";
        let ads = read_ads(old).unwrap();
        assert_eq!(ads.len(), 1);
        assert_eq!(plugin_methods(&ads[0]).unwrap(), ["stash", "osdf", "pelican"]);
        let two = "# a comment\nTransferUrl = \"osdf:///a\"\nTransferSuccess = TRUE\n\n\n\
                   TransferUrl = \"osdf:///b\"\r\nTransferSuccess = false\r\nTransferError = \"no such \\\"object\\\"\"\r\n";
        let ads = read_ads(two).unwrap();
        assert_eq!(ads.len(), 2);
        assert_eq!((ads[0].get_bool("transfersuccess"), ads[1].get_str("TransferError")), (Some(true), Some("no such \"object\"")));
        // New form, one after another (as curl_plugin writes them), across
        // lines and nested, or mixed with the old.
        let new = "[ TransferUrl = \"http://h/x]\"; TransferSuccess = true; DeveloperData = [ a = { [ b = 1 ] } ] ][TransferUrl = \"y\"; \
                   TransferSuccess = false; TransferError = \"a ] b\" ]\n[\n  TransferUrl = \"z\";\n  TransferSuccess = true;\n]\n\
                   TransferUrl = \"w\"\nTransferSuccess = true\n";
        let ads = read_ads(new).unwrap();
        let urls: Vec<&str> = ads.iter().map(|a| a.get_str("TransferUrl").unwrap()).collect();
        assert_eq!(urls, ["http://h/x]", "y", "z", "w"]);
        assert_eq!(ads[1].get_str("TransferError"), Some("a ] b"));
        assert_eq!(read_ads("\n \n").unwrap(), Vec::<ClassAd>::new());
    }

    #[test]
    fn hostile_plugin_output_is_an_error_never_a_panic() {
        for bad in [
            "[ TransferUrl = \"x\"",
            "[ a = \"unterminated ]",
            "]",
            "[ a = 1 ] ]",
            "TransferSuccess = \n",
            "A = 1 ] [ B = 2",
            "[ a = 1; ] junk = ",
            "\u{0}",
            "[ a = \"\\",
        ] {
            assert!(read_ads(bad).is_err(), "{bad:?}");
        }
        let deep = format!("[ a = {}1{} ]", "{".repeat(MAX_DEPTH + 5), "}".repeat(MAX_DEPTH + 5));
        assert!(matches!(read_ads(&deep), Err(AdsError::TooDeep(1))));
        // Arbitrary bytes: an error or ads, never a panic.
        let mut seed = 7u64;
        for _ in 0..2000 {
            let text: String = (0..64)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ['[', ']', '{', '}', '(', ')', '"', '\'', '\\', '=', ';', '\n', ' ', 'a', 'Z', '1', '#', 'é']
                        [(seed >> 33) as usize % 18]
                })
                .collect();
            let _ = read_ads(&text);
        }
        // Not a multi-file transfer plugin.
        let single = read_ads("PluginType = \"FileTransfer\"\nSupportedMethods = \"x\"\n").unwrap();
        assert!(plugin_methods(&single[0]).unwrap_err().contains("multi-file"));
        let other = read_ads("MultipleFileSupport = true\nPluginType = \"Other\"\nSupportedMethods = \"x\"\n").unwrap();
        assert!(plugin_methods(&other[0]).is_err());
        let none = read_ads("MultipleFileSupport = true\nSupportedMethods = \" , \"\n").unwrap();
        assert!(plugin_methods(&none[0]).is_err());
    }

    #[test]
    fn a_plugins_input_is_one_new_ad_per_url_and_reads_back() {
        let (a, b) = ("osdf:///n/a \"q\"".to_string(), "s3://b/k".to_string());
        let (la, lb) = (PathBuf::from("/w/1"), PathBuf::from("/w/2"));
        let text = plugin_input([(&a, &la), (&b, &lb)]);
        assert_eq!(text.lines().count(), 2);
        let ads = read_ads(&text).unwrap();
        assert_eq!(ads[0].get_str("Url"), Some(a.as_str()));
        assert_eq!(ads[1].get_str("LocalFileName"), Some("/w/2"));
    }

    #[test]
    fn a_plugins_text_becomes_one_bounded_line() {
        assert_eq!(one_line("a\n\n  b \r\n\tc", 100), "a; b; c");
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(one_line("é\u{7}x", 10), "é x");
    }
}
