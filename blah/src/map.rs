//! How a `BLAH_JOB_SUBMIT` ClassAd maps onto BOINC (`docs/spec/blah-dialect.md`
//! §9, `docs/blah.md`): job ids and BOINC names, the project, the app, the
//! input files bound to the app's input template, the command line, and
//! where outputs go. Pure but for `stat` of the input files.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use gahp_protocol::boinc::command_line::{self, ArgRefused};
use gahp_protocol::boinc::Templates;
use gahp_protocol::classad::{self, ArgsError, ClassAd, Value};
use gahp_protocol::gahp::{InputFile, JobParams, JobSpec, ParamValue, SubmitBatch};

use crate::runner;
use crate::url_inputs::{self, UrlInputs};
use gahp_services::config::{BlahConfig, EnvironmentPolicy, UnpackLimits};

/// The project key of jobs submitted while no project was configured
/// (they are held; their ids still need a key).
pub const UNCONFIGURED: &str = "none";

pub const BATCH_PREFIX: &str = "blah#";

/// A job id: `boinc/<project key>/<batch>/<job>`, or `boinc/<project
/// key>/<job>` when the job's batch bears its name (a batch is named
/// after its first job; a lone job's id is as short as before shared
/// batches). Job names are `blah#<JobDirectory>#<attempt>`. It holds all
/// that status and cancel need, so it stays valid when the state database
/// is lost.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId {
    pub project: String,
    /// The BOINC batch.
    pub batch: String,
    /// The BOINC job.
    pub job: String,
}

impl JobId {
    pub fn parse(id: &str) -> Option<JobId> {
        let (project, rest) = id.strip_prefix("boinc/")?.split_once('/')?;
        let (batch, job) = rest.split_once('/').unwrap_or((rest, rest));
        let key_ok = project == UNCONFIGURED || (project.len() == 12 && project.bytes().all(|b| b.is_ascii_hexdigit()));
        // A served client's names carry `<client>~` before `blah#`.
        let name_ok = |n: &str| {
            let bare = n.split_once('~').map_or(n, |(client, bare)| if plain(client) { bare } else { n });
            bare.starts_with(BATCH_PREFIX) && bare.bytes().all(|b| b.is_ascii_alphanumeric() || b"#._-".contains(&b))
        };
        (key_ok && name_ok(batch) && name_ok(job)).then(|| JobId { project: project.into(), batch: batch.into(), job: job.into() })
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.batch == self.job {
            write!(f, "boinc/{}/{}", self.project, self.job)
        } else {
            write!(f, "boinc/{}/{}/{}", self.project, self.batch, self.job)
        }
    }
}

/// The BOINC batch and job name of one attempt. `JobDirectory` is used as
/// is when it is plain and short (it always is from HTCondor), else its MD5,
/// so the name never needs escaping on the server.
/// `prefix` goes first (a served client's `<client>~`, else empty).
pub fn batch_name(prefix: &str, job_dir: &str, attempt: u32) -> String {
    format!("{prefix}{BATCH_PREFIX}{}#{attempt}", dir_token(job_dir))
}

/// What stands for a `JobDirectory` in BOINC names: itself when plain and
/// short, else `md5-` and its MD5.
pub fn dir_token(job_dir: &str) -> String {
    if (1..=160).contains(&job_dir.len()) && plain(job_dir) {
        job_dir.to_string()
    } else {
        format!("md5-{}", hex_md5(job_dir.as_bytes()))
    }
}

/// The `JobDirectory` token of a job id's job (`[<client>~]blah#<token>#<attempt>`).
pub fn dir_token_of(id: &str) -> Option<&str> {
    let job = id.rsplit('/').next()?;
    let bare = job.split_once('~').map_or(job, |(_, b)| b);
    let (token, _attempt) = bare.strip_prefix(BATCH_PREFIX)?.rsplit_once('#')?;
    (!token.is_empty() && plain(token)).then_some(token)
}

fn plain(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The HTCondor job id (`cluster.proc`) of a BLAH submit ad, for the log:
/// `ClusterId` and `ProcId` when the ad has them, else the field the
/// gridmanager puts in `JobDirectory` (`home_bl_<schedd>_<cluster>.<proc>_<qdate>`).
pub fn condor_job_id(ad: &ClassAd) -> Option<String> {
    if let (Some(cluster), Some(proc)) = (ad.get_int("ClusterId"), ad.get_int("ProcId")) {
        return Some(format!("{cluster}.{proc}"));
    }
    condor_job_id_of_dir(ad.get_str("JobDirectory")?)
}

/// The `<cluster>.<proc>` of a gridmanager's `JobDirectory`.
pub fn condor_job_id_of_dir(dir: &str) -> Option<String> {
    let mut fields = dir.rsplit('_');
    let (_qdate, id) = (fields.next()?, fields.next()?);
    let (cluster, proc) = id.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(cluster) && digits(proc)).then(|| id.to_string())
}

/// 12 hex digits naming a (project URL, authenticator file) pair in ids.
pub fn project_key(url: &str, authenticator_file: &Path) -> String {
    let mut bytes = normalize_url(url).into_bytes();
    bytes.push(b'\n');
    bytes.extend_from_slice(authenticator_file.as_os_str().as_encoded_bytes());
    hex_md5(&bytes)[..12].to_string()
}

pub(crate) use gahp_services::file_stager::hex_md5;

/// Script names are appended to the URL: it must end with `/`.
pub fn normalize_url(url: &str) -> String {
    let url = url.trim();
    if url.ends_with('/') {
        url.to_string()
    } else {
        format!("{url}/")
    }
}

/// Why a job cannot go to BOINC as submitted. Each message says what to
/// change; it becomes the job's HoldReason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapError {
    #[error("the submit ClassAd has no {0} (a gridmanager bug?)")]
    Missing(&'static str),
    #[error(
        "no BOINC project configured: set project_url and authenticator_file in the [blah] section of {config}, \
         or +remote_BoincProjectUrl and +remote_BoincAuthenticatorFile in the submit file"
    )]
    NoProject { config: String },
    #[error(
        "this job names its own BOINC project, which {config} forbids (allow_project_override = false): \
         remove +remote_BoincProjectUrl and +remote_BoincAuthenticatorFile"
    )]
    OverrideRefused { config: String },
    #[error(
        "no BOINC app chosen: set +remote_BoincApp = \"<app>\" or batch_queue = <app> in the submit file, \
         or default_app in the [blah] section of {config}"
    )]
    NoApp { config: String },
    #[error(
        "this job sends its own executable {exe}, and no runner app is configured to run it: set runner_app in \
         {config} (docs/runner.md), or name a BOINC app with +remote_BoincApp"
    )]
    NoRunner { exe: String, config: String },
    #[error(
        "this job runs in the container image {image}, and no container runner app is configured: set \
         container_runner_app in the [blah] section of {config} (docs/runner.md \"Containers\")"
    )]
    NoContainerRunner { image: String, config: String },
    #[error(
        "app {app} can't run the job in its container image {image}: only a runner app declared with container = true in \
         [blah.apps.{app}] of {config} can (docs/runner.md \"Containers\")"
    )]
    NotAContainerRunner { app: String, image: String, config: String },
    #[error("app {0} runs jobs in container images, and this job names none: set container_image in the submit file")]
    NoImage(String),
    #[error(
        "the container image {image:?} is not an image reference ({why}): set container_image to a name such as \
         registry.example.org/group/name:tag or docker://name:tag (docs/runner.md \"Containers\")"
    )]
    BadImage { image: String, why: String },
    #[error("app {app} is not a runner (its inputs are {inputs}; a runner's are condor_exec.exe, condor_job.zip): {why}")]
    NotARunner { app: String, inputs: String, why: &'static str },
    #[error("app {0} is a runner: it needs the job's executable, but the job does not send it (transfer_executable = false)")]
    RunnerWithoutExecutable(String),
    #[error("the executable {path} can't be sent: {problem}")]
    Executable { path: String, problem: String },
    #[error(
        "app {app} can't give the job its environment ({names}): only a runner app can (docs/runner.md); remove \
         environment and getenv from the submit file, or have the admin set environment = \"ignore\" for the app"
    )]
    Environment { app: String, names: String },
    #[error("the environment variable {0} has a line break in its value, which a runner can't carry")]
    EnvironmentLine(String),
    #[error("can't parse {attr} ({err}): fix the submit file's environment")]
    BadEnvironment { attr: &'static str, err: ArgsError },
    #[error(
        "the job asks for {asked} {what}, and app {app} provides {has} (its {key} in [blah.apps.{app}] of {config}): \
         lower request_{what} or send the job to an app that provides them"
    )]
    Request { what: &'static str, asked: i64, has: u32, app: String, key: &'static str, config: String },
    #[error("{attr} = {value} is not a positive number")]
    BadRequest { attr: &'static str, value: String },
    #[error("{0}")]
    Archive(String),
    #[error("can't parse {attr} ({err}): fix the submit file's arguments")]
    BadArgs { attr: &'static str, err: ArgsError },
    #[error("{0}: change the submit file's arguments")]
    Unquotable(#[from] ArgRefused),
    #[error("input file {path} ({from}) {problem}")]
    Input { path: String, from: &'static str, problem: String },
    #[error(
        "can't tell which input file is which: app {app} takes {inputs}; {problem}. Name each file in \
         transfer_input_files after the app input it is for, or give the one input as input = <file>"
    )]
    Binding { app: String, inputs: String, problem: String },
    #[error("app {app} has no output named {name} (transfer_output_files); its outputs are: {outputs}")]
    NoSuchOutput { app: String, name: String, outputs: String },
    #[error("bad transfer_output_remaps entry {0:?}: expected name=path")]
    BadRemap(String),
}

impl MapError {
    /// The job's HoldReason: the problem, then how to go on.
    pub fn hold_reason(&self) -> String {
        format!("{self}; then condor_release the job")
    }
}

/// Which project a job goes to: the config's, or the job's own.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectChoice {
    pub url: String,
    pub authenticator_file: PathBuf,
    pub overridden: bool,
}

pub fn choose_project(ad: &ClassAd, cfg: &BlahConfig) -> Result<ProjectChoice, MapError> {
    let url = non_empty(ad, "BoincProjectUrl");
    let file = non_empty(ad, "BoincAuthenticatorFile");
    let overridden = url.is_some() || file.is_some();
    if overridden && !cfg.allow_project_override {
        return Err(MapError::OverrideRefused { config: config_name(cfg) });
    }
    let iwd = ad.get_str("Iwd").map(PathBuf::from).unwrap_or_default();
    let url = url.map(str::to_string).or_else(|| cfg.project_url.clone());
    let file = file.map(|f| iwd.join(f)).or_else(|| cfg.authenticator_file.clone());
    match (url, file) {
        (Some(url), Some(authenticator_file)) => Ok(ProjectChoice { url: normalize_url(&url), authenticator_file, overridden }),
        _ => Err(MapError::NoProject { config: config_name(cfg) }),
    }
}

/// The app and the attribute it came from (docs/runner.md "Which app a
/// `batch boinc` job runs"): the app the job names; else, for a job that
/// sends its executable, the runner; else `default_app`, else the
/// executable's base name.
pub fn choose_app(ad: &ClassAd, cfg: &BlahConfig) -> Result<(String, &'static str), MapError> {
    if let Some(app) = non_empty(ad, "BoincApp") {
        return Ok((app.to_string(), "+remote_BoincApp"));
    }
    if let Some(app) = non_empty(ad, "Queue") {
        return Ok((app.to_string(), "batch_queue"));
    }
    if let Some(image) = non_empty(ad, "ContainerImage") {
        return match cfg.container_runner_app.as_deref().filter(|a| !a.is_empty()) {
            Some(runner) => Ok((runner.to_string(), "container_runner_app")),
            None => Err(MapError::NoContainerRunner { image: image.to_string(), config: config_name(cfg) }),
        };
    }
    let cmd = non_empty(ad, "Cmd");
    if let Some(cmd) = cmd.filter(|_| sends_executable(ad)) {
        return match cfg.runner_app.as_deref().filter(|a| !a.is_empty()) {
            Some(runner) => Ok((runner.to_string(), "runner_app")),
            None => Err(MapError::NoRunner { exe: cmd.to_string(), config: config_name(cfg) }),
        };
    }
    if let Some(app) = cfg.default_app.as_deref().filter(|a| !a.is_empty()) {
        return Ok((app.to_string(), "default_app"));
    }
    let base = cmd.and_then(|c| Path::new(c).file_name()).map(|b| b.to_string_lossy().into_owned());
    match base.filter(|b| plain(b)) {
        Some(app) => Ok((app, "the executable's base name (transfer_executable = false)")),
        None => Err(MapError::NoApp { config: config_name(cfg) }),
    }
}

/// Whether the job sends its executable: HTCondor's default, unless the ad
/// says `StageCmd = false` (HTCondor 24) or `TransferExecutable = false`
/// (`+remote_TransferExecutable`, which the job router's route copies).
pub fn sends_executable(ad: &ClassAd) -> bool {
    ad.get_bool("StageCmd") != Some(false) && ad.get_bool("TransferExecutable") != Some(false)
}

pub(crate) fn config_name(cfg: &BlahConfig) -> String {
    cfg.config_file.as_ref().map_or_else(|| "~/.config/boinc-gahp/config.toml".into(), |p| p.display().to_string())
}

fn non_empty<'a>(ad: &'a ClassAd, name: &str) -> Option<&'a str> {
    ad.get_str(name).map(str::trim).filter(|s| !s.is_empty())
}

/// What a job's batch shares with every other job of it (submit_batch's
/// parameters are batch-wide): its app and its requests. `None` if no app
/// can be chosen.
pub fn gather_key(ad: &ClassAd, cfg: &BlahConfig) -> Option<String> {
    let (app, _) = choose_app(ad, cfg).ok()?;
    let attr = |n| ad.get(n).map(|v| v.to_string()).unwrap_or_default();
    Some(format!("{app}\n{}\n{}\n{}", attr("RequestMemory"), attr("RequestDisk"), attr("BatchRuntime")))
}

/// The BOINC batch of one job: the app's inputs bound to local files (for
/// a runner, the executable and the job's archive, written into `scratch`),
/// the arguments as a BOINC command line, the bounds from its requests.
/// A URL in `transfer_input_files` holds the job (a work sequence job takes
/// local files only); [`submit_batch_with_urls`] takes fetched ones.
pub fn submit_batch(
    ad: &ClassAd,
    batch: &str,
    app: &str,
    templates: &Templates,
    cfg: &BlahConfig,
    scratch: Option<&Path>,
) -> Result<SubmitBatch, MapError> {
    let urls = UrlInputs::refused("is a URL, and a work sequence job takes local files only: give local files");
    submit_batch_with_urls(ad, batch, app, templates, cfg, scratch, &urls)
}

/// [`submit_batch`], with the files the job's URL inputs were fetched into
/// (`blah::url_inputs`): each is an input under the last segment of its
/// URL's path, as any file is under its base name.
pub fn submit_batch_with_urls(
    ad: &ClassAd,
    batch: &str,
    app: &str,
    templates: &Templates,
    cfg: &BlahConfig,
    scratch: Option<&Path>,
    urls: &UrlInputs,
) -> Result<SubmitBatch, MapError> {
    let iwd = PathBuf::from(ad.get_str("Iwd").ok_or(MapError::Missing("Iwd"))?);
    let raw_args = arguments(ad)?;
    let args = command_line::quote_args(&raw_args)?;
    let params = job_params(ad, app, cfg)?;
    let env = environment(ad)?;
    // Podman on the volunteer's host reads the image's name: never an
    // option or a path there.
    let bad_image = |image: &str| crate::container_image::problem(image).map(|why| (image.to_string(), why));
    if let Some((image, why)) = non_empty(ad, "ContainerImage").and_then(bad_image) {
        return Err(MapError::BadImage { image, why });
    }
    // A container job runs in its image or not at all; a container runner
    // runs nothing outside one.
    match (non_empty(ad, "ContainerImage"), cfg.app(app).container) {
        (Some(image), false) => {
            return Err(MapError::NotAContainerRunner { app: app.to_string(), image: image.to_string(), config: config_name(cfg) })
        }
        (None, true) => return Err(MapError::NoImage(app.to_string())),
        _ => {}
    }
    let inputs = if templates.is_runner() {
        command_line::fits_wrapper(&raw_args)?;
        runner_inputs(ad, &iwd, app, &env, scratch, urls)?
    } else {
        if choose_app(ad, cfg).is_ok_and(|(_, source)| source == "runner_app") {
            let why = "it is runner_app in the config, for jobs that send their executable";
            return Err(MapError::NotARunner { app: app.to_string(), inputs: templates.inputs.join(", "), why });
        }
        if !env.is_empty() && cfg.app(app).environment == EnvironmentPolicy::Hold {
            let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
            return Err(MapError::Environment { app: app.to_string(), names: names.join(", ") });
        }
        bind_inputs(ad, &iwd, app, &templates.inputs, urls)?
    };
    Ok(SubmitBatch {
        batch_name: batch.to_string(),
        app_name: app.to_string(),
        jobs: vec![JobSpec { name: batch.to_string(), args, inputs }],
        params,
    })
}

/// A number of the ad (`Int` or `Real`), if set; refused unless positive.
fn positive(ad: &ClassAd, attr: &'static str) -> Result<Option<f64>, MapError> {
    let v = match ad.get(attr) {
        None | Some(Value::Undefined) => return Ok(None),
        Some(Value::Int(n)) => *n as f64,
        Some(Value::Real(r)) => *r,
        Some(other) => return Err(MapError::BadRequest { attr, value: other.to_string() }),
    };
    if v.is_finite() && v >= 0.0 {
        Ok(Some(v).filter(|v| *v > 0.0))
    } else {
        Err(MapError::BadRequest { attr, value: v.to_string() })
    }
}

/// The batch's bounds from the job's requests (docs/runner.md "Requests"),
/// or why the app can't take them.
fn job_params(ad: &ClassAd, app: &str, cfg: &BlahConfig) -> Result<JobParams, MapError> {
    let caps = cfg.app(app);
    let mut params = JobParams::default();
    if let Some(mib) = positive(ad, "RequestMemory")? {
        params.rsc_memory_bound = ParamValue::Value(mib * 1024.0 * 1024.0);
    }
    if let Some(kib) = positive(ad, "RequestDisk")? {
        params.rsc_disk_bound = ParamValue::Value(kib * 1024.0);
    }
    if let Some(secs) = positive(ad, "BatchRuntime")? {
        params.rsc_fpops_bound = ParamValue::Value(secs * caps.flops);
    }
    let over = |what, asked: f64, has: u32, key| MapError::Request {
        what,
        asked: asked.ceil() as i64,
        has,
        app: app.to_string(),
        key,
        config: config_name(cfg),
    };
    if let Some(cpus) = positive(ad, "RequestCpus")?.filter(|c| *c > f64::from(caps.cpus.max(1))) {
        return Err(over("cpus", cpus, caps.cpus.max(1), "cpus"));
    }
    let gpus = positive(ad, "GPUNumber")?.or(positive(ad, "RequestGpus")?);
    if let Some(gpus) = gpus.filter(|g| *g > f64::from(caps.gpus)) {
        return Err(over("gpus", gpus, caps.gpus, "gpus"));
    }
    Ok(params)
}

/// `Environment` (V2), else `Env` (V1, split at `EnvDelim`, `;` unless
/// set).
pub fn environment(ad: &ClassAd) -> Result<Vec<(String, String)>, MapError> {
    if let Some(v2) = ad.get_str("Environment") {
        return classad::parse_env_v2(v2).map_err(|err| MapError::BadEnvironment { attr: "Environment", err });
    }
    let Some(v1) = ad.get_str("Env") else { return Ok(Vec::new()) };
    let delim = ad.get_str("EnvDelim").and_then(|d| d.chars().next()).unwrap_or(';');
    let mut env: Vec<(String, String)> = Vec::new();
    for (i, entry) in v1.split(delim).map(str::trim).filter(|e| !e.is_empty()).enumerate() {
        match entry.split_once('=') {
            Some((name, value)) if !name.is_empty() => env.push((name.to_string(), value.to_string())),
            _ => return Err(MapError::BadEnvironment { attr: "Env", err: ArgsError::NotNameValue(i) }),
        }
    }
    Ok(env)
}

/// A runner's two inputs: the executable, and the job's archive of its
/// inputs, stdin and environment (docs/runner.md).
fn runner_inputs(
    ad: &ClassAd,
    iwd: &Path,
    app: &str,
    env: &[(String, String)],
    scratch: Option<&Path>,
    urls: &UrlInputs,
) -> Result<Vec<InputFile>, MapError> {
    let cmd = non_empty(ad, "Cmd").filter(|_| sends_executable(ad)).ok_or_else(|| MapError::RunnerWithoutExecutable(app.to_string()))?;
    let exe = iwd.join(cmd);
    match std::fs::metadata(&exe) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(MapError::Executable { path: exe.display().to_string(), problem: "it is not a regular file".into() }),
        Err(e) => return Err(MapError::Executable { path: exe.display().to_string(), problem: e.to_string() }),
    }
    let scratch = scratch.ok_or_else(|| MapError::Archive("a work sequence can't run through a runner app".into()))?;
    let env_text = runner::env_file(env).map_err(MapError::EnvironmentLine)?;
    let mut entries = vec![runner::Entry::Text { name: runner::ENV_FILE.into(), text: env_text }];
    if let Some(image) = non_empty(ad, "ContainerImage") {
        entries.push(runner::Entry::Text { name: runner::IMAGE_FILE.into(), text: format!("{image}\n") });
    }
    for entry in transfer_input(ad) {
        if url_inputs::is_url(entry) {
            let (src, name) = urls.local(entry).map_err(|problem| url_error(entry, problem))?;
            entries.push(runner::Entry::File { name, src });
            continue;
        }
        let contents_only = entry.ends_with('/');
        let path = iwd.join(entry.trim_end_matches('/'));
        runner::entries_of(&path, contents_only, &mut entries).map_err(|e| MapError::Input {
            path: entry.into(),
            from: "transfer_input_files",
            problem: e.to_string(),
        })?;
    }
    if let Some(stdin) = stdin_path(ad) {
        let src = iwd.join(stdin);
        if !src.is_file() {
            return Err(input_error(&src, "input", "can't be read as a file"));
        }
        entries.push(runner::Entry::File { name: runner::STDIN_FILE.into(), src });
    }
    let archive = runner::write_archive(scratch, entries).map_err(|e| MapError::Archive(e.to_string()))?;
    Ok(vec![InputFile { src: exe, dst_name: runner::EXE_INPUT.into() }, InputFile { src: archive, dst_name: runner::JOB_ZIP.into() }])
}

fn transfer_input(ad: &ClassAd) -> impl Iterator<Item = &str> {
    ad.get_str("TransferInput").unwrap_or("").split(',').map(str::trim).filter(|e| !e.is_empty())
}

fn stdin_path(ad: &ClassAd) -> Option<&str> {
    ad.get_str("In").map(str::trim).filter(|s| !s.is_empty() && *s != "/dev/null")
}

/// `Arguments` (V2), else `Args` (V1).
pub(crate) fn arguments(ad: &ClassAd) -> Result<Vec<String>, MapError> {
    if let Some(v2) = ad.get_str("Arguments") {
        return classad::parse_args_v2(v2).map_err(|err| MapError::BadArgs { attr: "Arguments", err });
    }
    Ok(ad.get_str("Args").map(classad::parse_args_v1).unwrap_or_default())
}

/// Binds `TransferInput` entries and `In` to the app's input names: a file
/// whose base name is an input's name goes there (`In` goes to `stdin` if
/// the app has it); one input left over takes the one file left over.
fn bind_inputs(ad: &ClassAd, iwd: &Path, app: &str, names: &[String], urls: &UrlInputs) -> Result<Vec<InputFile>, MapError> {
    // (path, where it came from, the input name it binds to by name, what
    // messages call it)
    let mut files: Vec<(PathBuf, &'static str, Option<String>, String)> = Vec::new();
    for entry in transfer_input(ad) {
        if url_inputs::is_url(entry) {
            let (src, name) = urls.local(entry).map_err(|problem| url_error(entry, problem))?;
            files.push((src, "transfer_input_files", Some(name), url_inputs::shown(entry)));
            continue;
        }
        if entry.ends_with('/') {
            return Err(MapError::Input {
                path: entry.into(),
                from: "transfer_input_files",
                problem: "is a directory; BOINC jobs take files (archive it)".into(),
            });
        }
        let base = Path::new(entry).file_name().map(|n| n.to_string_lossy().into_owned());
        let path = iwd.join(entry);
        let shown = path.display().to_string();
        files.push((path, "transfer_input_files", base, shown));
    }
    if let Some(stdin) = stdin_path(ad) {
        let path = iwd.join(stdin);
        let shown = path.display().to_string();
        files.push((path, "input", Some("stdin".into()), shown));
    }

    let mut slots: Vec<Option<usize>> = vec![None; names.len()];
    let mut used = vec![false; files.len()];
    for (i, (_, _, base, shown)) in files.iter().enumerate() {
        let Some(slot) = names.iter().position(|n| Some(n) == base.as_ref()) else { continue };
        if let Some(other) = slots[slot] {
            let problem = format!("both {} and {shown} are named {}", files[other].3, names[slot]);
            return Err(binding(app, names, problem));
        }
        slots[slot] = Some(i);
        used[i] = true;
    }
    let free: Vec<usize> = (0..names.len()).filter(|&s| slots[s].is_none()).collect();
    let left: Vec<usize> = (0..files.len()).filter(|&i| !used[i]).collect();
    match (free.as_slice(), left.as_slice()) {
        ([], []) => {}
        ([slot], [file]) => slots[*slot] = Some(*file),
        (free, []) => {
            let missing: Vec<&str> = free.iter().map(|&s| names[s].as_str()).collect();
            return Err(binding(app, names, format!("no file for {}", missing.join(", "))));
        }
        (_, left) => {
            let extra: Vec<String> = left.iter().map(|&i| files[i].3.clone()).collect();
            return Err(binding(app, names, format!("no input name matches {}", extra.join(", "))));
        }
    }

    let mut inputs = Vec::with_capacity(names.len());
    for (slot, name) in names.iter().enumerate() {
        let Some((path, from, _, shown)) = slots[slot].map(|i| &files[i]) else { continue };
        let problem = |problem: String| MapError::Input { path: shown.clone(), from, problem };
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(problem("is not a regular file".into())),
            Err(e) => return Err(problem(format!("can't be read: {e}"))),
        }
        inputs.push(InputFile { src: path.clone(), dst_name: name.clone() });
    }
    Ok(inputs)
}

fn binding(app: &str, names: &[String], problem: String) -> MapError {
    let inputs = if names.is_empty() { "no input files".to_string() } else { format!("the inputs {}", names.join(", ")) };
    MapError::Binding { app: app.to_string(), inputs, problem }
}

/// A URL input that has no file: the URL, as the log shows it, and why.
fn url_error(url: &str, problem: String) -> MapError {
    MapError::Input { path: url_inputs::shown(url), from: "transfer_input_files", problem }
}

fn input_error(path: &Path, from: &'static str, problem: &str) -> MapError {
    MapError::Input { path: path.display().to_string(), from, problem: problem.to_string() }
}

/// Where a finished job's files go.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OutputPlan {
    /// (app output name, destination)
    pub files: Vec<(String, PathBuf)>,
    pub out: Option<PathBuf>,
    pub err: Option<PathBuf>,
    /// `+remote_BoincUnzipOutputs = true`: zip outputs are unpacked.
    pub unzip: Option<Unzip>,
}

/// How a job that asked for it gets the files inside its app's zip outputs
/// (an app whose output names are not known in advance returns one zip).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Unzip {
    /// Where the entries go: the job's directory.
    pub dir: PathBuf,
    /// App outputs fetched only to be unpacked (not named by the job).
    pub archives: Vec<String>,
    /// Files the job named that are not outputs of the app: they must come
    /// out of the archives (name in the archive, destination after remaps).
    pub expected: Vec<(String, PathBuf)>,
}

/// The output name whose content becomes the job's stdout (`Out`).
pub const STDOUT_OUTPUT: &str = "stdout";

/// Each `TransferOutput` entry (every app output when there is none, as
/// HTCondor brings back every new file) to `Iwd`, renamed by
/// `TransferOutputRemaps`; `Out` and `Err` relative to `Iwd`.
pub fn output_plan(ad: &ClassAd, app: &str, outputs: &[String]) -> Result<OutputPlan, MapError> {
    let (iwd, out, err) = std_streams(ad)?;
    let remaps = remaps(ad)?;
    let names: Vec<String> = match ad.get_str("TransferOutput").filter(|l| !l.trim().is_empty()) {
        Some(list) => list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect(),
        None => outputs.iter().filter(|n| out.is_none() || n.as_str() != STDOUT_OUTPUT).cloned().collect(),
    };
    let unzip = ad.get_bool("BoincUnzipOutputs") == Some(true);
    let mut files = Vec::with_capacity(names.len());
    let mut expected = Vec::new();
    for name in names {
        let dest = iwd.join(remaps.get(&name).unwrap_or(&name));
        if outputs.contains(&name) {
            files.push((name, dest));
        } else if unzip {
            expected.push((name, dest));
        } else {
            return Err(MapError::NoSuchOutput { app: app.to_string(), name, outputs: outputs.join(", ") });
        }
    }
    let unzip = unzip.then(|| Unzip {
        archives: outputs
            .iter()
            .filter(|n| !files.iter().any(|(f, _)| f == *n) && (out.is_none() || n.as_str() != STDOUT_OUTPUT))
            .cloned()
            .collect(),
        dir: iwd.clone(),
        expected,
    });
    Ok(OutputPlan { files, out, err, unzip })
}

/// Where a runner job's files go (docs/runner.md "Back on the submit
/// host"): its std streams, and each `TransferOutput` entry renamed by
/// `TransferOutputRemaps` (all it made without a list).
pub fn runner_placement(ad: &ClassAd) -> Result<runner::Placement, MapError> {
    let (iwd, out, err) = std_streams(ad)?;
    let remaps = remaps(ad)?;
    let named = ad.get_str("TransferOutput").filter(|l| !l.trim().is_empty()).map(|list| {
        list.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|name| {
                let base = Path::new(name.trim_end_matches('/')).file_name().map_or(name.into(), |b| b.to_string_lossy().into_owned());
                let dest = iwd.join(remaps.get(name).unwrap_or(&base));
                (name.to_string(), dest)
            })
            .collect()
    });
    let own = own_files(ad, &iwd);
    Ok(runner::Placement { iwd, out, err, named, own })
}

/// The job's own files in its directory, which no file it made may
/// replace: its executable, its inputs, its stdin, stdout and stderr.
pub fn own_files(ad: &ClassAd, iwd: &Path) -> Vec<PathBuf> {
    let (_, out, err) = std_streams(ad).unwrap_or_default();
    let named = non_empty(ad, "Cmd").into_iter().chain(stdin_path(ad)).chain(transfer_input(ad).filter(|e| !url_inputs::is_url(e)));
    named
        .map(|p| iwd.join(p.trim_end_matches('/')))
        .chain(transfer_input(ad).filter(|e| !url_inputs::is_url(e)).filter_map(|p| Some(iwd.join(Path::new(p).file_name()?))))
        .chain(out)
        .chain(err)
        .collect()
}

/// The bounds of a job's output zips: the config's, with the job's own
/// `max_transfer_output_mb` (`MaxTransferOutputMB`) for their bytes.
pub fn unpack_limits(ad: &ClassAd, limits: UnpackLimits) -> UnpackLimits {
    limits.with_job_bytes(ad.get_int("MaxTransferOutputMB"))
}

fn remaps(ad: &ClassAd) -> Result<HashMap<String, String>, MapError> {
    let mut remaps = HashMap::new();
    for entry in ad.get_str("TransferOutputRemaps").unwrap_or("").split(';').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            Some((from, to)) if !from.trim().is_empty() && !to.trim().is_empty() => {
                remaps.insert(from.trim().to_string(), to.trim().to_string());
            }
            _ => return Err(MapError::BadRemap(entry.to_string())),
        }
    }
    Ok(remaps)
}

/// `Iwd` and the `Out` and `Err` paths (absent or `/dev/null`: none).
pub fn std_streams(ad: &ClassAd) -> Result<(PathBuf, Option<PathBuf>, Option<PathBuf>), MapError> {
    let iwd = PathBuf::from(ad.get_str("Iwd").ok_or(MapError::Missing("Iwd"))?);
    let path = |name| ad.get_str(name).map(str::trim).filter(|p| !p.is_empty() && *p != "/dev/null").map(|p| iwd.join(p));
    let (out, err) = (path("Out"), path("Err"));
    Ok((iwd, out, err))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    fn cfg() -> BlahConfig {
        BlahConfig {
            project_url: Some("http://p.example/proj".into()),
            authenticator_file: Some("/home/u/.boinc/auth".into()),
            ..BlahConfig::default()
        }
    }

    fn templates(inputs: &[&str]) -> Templates {
        Templates { inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: vec![] }
    }

    #[test]
    fn ids_round_trip_and_reject_others() {
        let id = JobId {
            project: project_key("http://p/", Path::new("/a")),
            batch: batch_name("", "home_bl_127.0.0.1_9618_vm_2.0_1795253890", 3),
            job: String::new(),
        };
        let id = JobId { job: id.batch.clone(), ..id };
        assert_eq!(id.batch, "blah#home_bl_127.0.0.1_9618_vm_2.0_1795253890#3");
        assert_eq!(JobId::parse(&id.to_string()), Some(id.clone()));
        assert_eq!(id.to_string().matches('/').count(), 2, "a lone job's id names its batch once");
        // A job in a batch named after another job.
        let shared = JobId { job: batch_name("", "other", 1), ..id.clone() };
        assert_eq!(JobId::parse(&shared.to_string()), Some(shared.clone()));
        assert!(shared.to_string().ends_with("/blah#home_bl_127.0.0.1_9618_vm_2.0_1795253890#3/blah#other#1"));
        assert!(JobId::parse("boinc/none/blah#x#1").is_some());
        // A served client's: its prefix before each name.
        let served = JobId { job: batch_name("alice~", "d", 2), batch: batch_name("alice~", "d", 2), ..id.clone() };
        assert_eq!(served.job, "alice~blah#d#2");
        assert_eq!(JobId::parse(&served.to_string()), Some(served.clone()));
        assert_eq!(dir_token_of(&served.to_string()), Some("d"));
        assert_eq!(dir_token_of("boinc/0123456789ab/blah#a#1/blah#home_bl_x_1.0_9#3"), Some("home_bl_x_1.0_9"));
        assert_eq!(dir_token_of("boinc/0123456789ab/blah#../x#1"), None);
        assert!(JobId::parse("boinc/none/alice~bob~blah#x#1").is_none(), "one prefix only");
        for bad in [
            "",
            "boinc/",
            "boinc/abc/blah#x#1",
            "lsf/0123456789ab/blah#x#1",
            "boinc/0123456789ab/other",
            "boinc/0123456789ab/blah#x/1",
            "boinc/0123456789ab/blah#x#1/blah#y#1/blah#z#1",
        ] {
            assert_eq!(JobId::parse(bad), None, "{bad}");
        }
        assert!(batch_name("", "a b/c", 1).starts_with("blah#md5-"));
        assert_eq!(project_key("http://p", Path::new("/a")), project_key("http://p/", Path::new("/a")));
        assert_ne!(project_key("http://p/", Path::new("/a")), project_key("http://p/", Path::new("/b")));
    }

    #[test]
    fn project_from_config_or_job() {
        let c = cfg();
        let p = choose_project(&ad("[ Iwd = \"/w\" ]"), &c).unwrap();
        assert_eq!((p.url.as_str(), p.overridden), ("http://p.example/proj/", false));
        let p = choose_project(&ad("[ Iwd = \"/w\"; BoincProjectUrl = \"http://q/\"; BoincAuthenticatorFile = \"key\" ]"), &c).unwrap();
        assert_eq!((p.url.as_str(), p.authenticator_file.as_path(), p.overridden), ("http://q/", Path::new("/w/key"), true));
        let refused = BlahConfig { allow_project_override: false, ..cfg() };
        assert!(matches!(choose_project(&ad("[ BoincProjectUrl = \"http://q/\" ]"), &refused), Err(MapError::OverrideRefused { .. })));
        let none = BlahConfig::default();
        let e = choose_project(&ad("[ Iwd = \"/w\" ]"), &none).unwrap_err();
        assert!(e.to_string().contains("project_url"), "{e}");
    }

    #[test]
    fn app_by_priority() {
        let c = BlahConfig { default_app: Some("d".into()), ..cfg() };
        assert_eq!(choose_app(&ad("[ BoincApp = \"a\"; Queue = \"q\" ]"), &c).unwrap().0, "a");
        assert_eq!(choose_app(&ad("[ Queue = \"q\" ]"), &c).unwrap().0, "q");
        assert_eq!(choose_app(&ad("[ Queue = \"\" ]"), &c).unwrap(), ("d".into(), "default_app"));
        assert!(matches!(choose_app(&ad("[]"), &cfg()), Err(MapError::NoApp { .. })));
    }

    #[test]
    fn a_job_that_sends_its_executable_goes_to_the_runner_or_is_held() {
        let with_default = BlahConfig { default_app: Some("uppercase".into()), ..cfg() };
        let script = "[ Cmd = \"/home/u/analyze.sh\" ]";
        // default_app never replaces an executable the job sends.
        let e = choose_app(&ad(script), &with_default).unwrap_err();
        assert!(matches!(&e, MapError::NoRunner { exe, .. } if exe == "/home/u/analyze.sh"), "{e}");
        assert!(e.to_string().contains("runner_app"), "{e}");
        let runner = BlahConfig { runner_app: Some("runner".into()), ..with_default.clone() };
        assert_eq!(choose_app(&ad(script), &runner).unwrap(), ("runner".into(), "runner_app"));
        // A named app is the program; the executable is not used.
        assert_eq!(choose_app(&ad("[ Cmd = \"/x/a.sh\"; BoincApp = \"wc\" ]"), &runner).unwrap().0, "wc");
        // Not sent: default_app, else the base name.
        for not_sent in ["TransferExecutable = false", "StageCmd = false"] {
            let a = ad(&format!("[ Cmd = \"/usr/bin/wordcount\"; {not_sent} ]"));
            assert_eq!(choose_app(&a, &with_default).unwrap().0, "uppercase");
            assert_eq!(choose_app(&a, &cfg()).unwrap().0, "wordcount");
        }
    }

    #[test]
    fn requests_become_bounds_or_holds() {
        let c = BlahConfig {
            apps: [("gpu".to_string(), gahp_services::config::AppConfig { cpus: 4, gpus: 1, flops: 2e9, ..Default::default() })].into(),
            ..cfg()
        };
        let a = ad("[ Iwd = \"/\"; RequestMemory = 64; RequestDisk = 1024; BatchRuntime = 60; RequestCpus = 4; GPUNumber = 1 ]");
        let b = submit_batch(&a, "n", "gpu", &templates(&[]), &c, None).unwrap();
        assert_eq!(b.params.rsc_memory_bound, ParamValue::Value(64.0 * 1048576.0));
        assert_eq!(b.params.rsc_disk_bound, ParamValue::Value(1024.0 * 1024.0));
        assert_eq!(b.params.rsc_fpops_bound, ParamValue::Value(120e9));
        let e = submit_batch(&a, "n", "plain", &templates(&[]), &c, None).unwrap_err();
        assert!(matches!(&e, MapError::Request { what: "cpus", asked: 4, has: 1, .. }), "{e}");
        let gpu_only = ad("[ Iwd = \"/\"; GPUNumber = 2 ]");
        let e = submit_batch(&gpu_only, "n", "gpu", &templates(&[]), &c, None).unwrap_err();
        assert!(e.to_string().contains("asks for 2 gpus") && e.to_string().contains("provides 1"), "{e}");
        let e = submit_batch(&ad("[ Iwd = \"/\"; RequestDisk = -5 ]"), "n", "u", &templates(&[]), &c, None).unwrap_err();
        assert!(matches!(e, MapError::BadRequest { attr: "RequestDisk", .. }), "{e}");
    }

    #[test]
    fn an_app_that_is_not_a_runner_holds_an_environment_unless_told_to_drop_it() {
        let a = ad("[ Iwd = \"/\"; Environment = \"FOO=bar B='x y'\" ]");
        let e = submit_batch(&a, "n", "u", &templates(&[]), &cfg(), None).unwrap_err();
        assert!(e.to_string().contains("(FOO, B)"), "{e}");
        let ignore = gahp_services::config::AppConfig { environment: EnvironmentPolicy::Ignore, ..Default::default() };
        let c = BlahConfig { apps: [("u".to_string(), ignore)].into(), ..cfg() };
        assert!(submit_batch(&a, "n", "u", &templates(&[]), &c, None).is_ok());
        assert!(submit_batch(&ad("[ Iwd = \"/\"; Environment = \"\" ]"), "n", "u", &templates(&[]), &cfg(), None).is_ok());
        let v1 = ad("[ Env = \"A=1;B=2\" ]");
        assert_eq!(environment(&v1).unwrap(), [("A".to_string(), "1".to_string()), ("B".to_string(), "2".to_string())]);
    }

    #[test]
    fn a_container_job_runs_in_its_image_at_a_container_runner_or_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::write(w.join("run.sh"), "#!/bin/sh\n").unwrap();
        let job = ad(&format!("[ Iwd = \"{}\"; Cmd = \"run.sh\"; ContainerImage = \"docker://python:3.12\" ]", w.display()));
        let runner_t = Templates { inputs: vec![runner::EXE_INPUT.into(), runner::JOB_ZIP.into()], outputs: vec![runner::OUT_ZIP.into()] };
        // A plain runner never runs it outside the container.
        let plain = BlahConfig { runner_app: Some("runner".into()), ..cfg() };
        assert!(matches!(choose_app(&job, &plain), Err(MapError::NoContainerRunner { .. })));
        let e = submit_batch(&job, "n", "runner", &runner_t, &plain, Some(w)).unwrap_err();
        assert!(matches!(e, MapError::NotAContainerRunner { .. }), "{e}");
        let box_ = gahp_services::config::AppConfig { container: true, ..Default::default() };
        let c = BlahConfig { container_runner_app: Some("docker".into()), apps: [("docker".to_string(), box_)].into(), ..plain };
        assert_eq!(choose_app(&job, &c).unwrap(), ("docker".into(), "container_runner_app"));
        let b = submit_batch(&job, "n", "docker", &runner_t, &c, Some(&w.join("s"))).unwrap();
        let zip = std::fs::File::open(&b.jobs[0].inputs[1].src).unwrap();
        let mut zip = zip::ZipArchive::new(zip).unwrap();
        let mut image = String::new();
        std::io::Read::read_to_string(&mut zip.by_name(runner::IMAGE_FILE).unwrap(), &mut image).unwrap();
        assert_eq!(image, "docker://python:3.12\n");
        // A container runner runs nothing without an image.
        let bare = ad(&format!("[ Iwd = \"{}\"; Cmd = \"run.sh\"; BoincApp = \"docker\" ]", w.display()));
        assert!(matches!(submit_batch(&bare, "n", "docker", &runner_t, &c, Some(w)), Err(MapError::NoImage(_))));
    }

    #[test]
    fn a_runner_job_sends_its_executable_and_an_archive() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::write(w.join("analyze.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(w.join("in"), "data").unwrap();
        let runner_t = Templates { inputs: vec![runner::EXE_INPUT.into(), runner::JOB_ZIP.into()], outputs: vec![runner::OUT_ZIP.into()] };
        let c = BlahConfig { runner_app: Some("runner".into()), ..cfg() };
        let job = |extra: &str| {
            ad(&format!(
                "[ Iwd = \"{}\"; Cmd = \"{}/analyze.sh\"; TransferInput = \"in\"; Environment = \"FOO=bar\"; {extra} ]",
                w.display(),
                w.display()
            ))
        };
        let scratch = w.join("scratch");
        let one = submit_batch(&job(""), "n", "runner", &runner_t, &c, Some(&scratch)).unwrap();
        let two = submit_batch(&job(""), "m", "runner", &runner_t, &c, Some(&scratch)).unwrap();
        let inputs = &one.jobs[0].inputs;
        assert_eq!(inputs[0], InputFile { src: w.join("analyze.sh"), dst_name: runner::EXE_INPUT.into() });
        assert_eq!(inputs[1].dst_name, runner::JOB_ZIP);
        assert_eq!(inputs[1].src, two.jobs[0].inputs[1].src, "one archive for the same inputs");
        let e = submit_batch(&job("TransferExecutable = false"), "n", "runner", &runner_t, &c, Some(&scratch)).unwrap_err();
        assert!(matches!(e, MapError::RunnerWithoutExecutable(_)), "{e}");
        let gone = ad(&format!("[ Iwd = \"{}\"; Cmd = \"nope.sh\" ]", w.display()));
        let e = submit_batch(&gone, "n", "runner", &runner_t, &c, Some(&scratch)).unwrap_err();
        assert!(e.to_string().contains("nope.sh can't be sent"), "{e}");
        // runner_app names an app that is no runner.
        let e = submit_batch(&job(""), "n", "runner", &templates(&["in"]), &c, Some(&scratch)).unwrap_err();
        assert!(matches!(e, MapError::NotARunner { .. }), "{e}");
    }

    #[test]
    fn uncarriable_arguments_are_a_hold_naming_the_argument() {
        let a = ad("[ Iwd = \"/\"; Arguments = \"ok 'it''s \\\"here\\\"'\" ]");
        let e = submit_batch(&a, "n", "u", &templates(&[]), &cfg(), None).unwrap_err();
        let reason = e.hold_reason();
        assert!(reason.contains("argument 2 (\"it's \\\"here\\\"\")") && reason.contains("both ' and \""), "{reason}");
    }

    #[test]
    fn inputs_bind_by_name_then_by_elimination() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        for f in ["a", "b", "data.txt", "stdin.txt"] {
            std::fs::write(w.join(f), f).unwrap();
        }
        let iwd = w.display();
        let job = |extra: &str| ad(&format!("[ Iwd = \"{iwd}\"; In = \"/dev/null\"; Arguments = \"x 'y z'\"; {extra} ]"));
        let b = submit_batch(&job("TransferInput = \"b, a\""), "n", "concat", &templates(&["a", "b"]), &cfg(), None).unwrap();
        let got: Vec<_> = b.jobs[0].inputs.iter().map(|i| (i.src.clone(), i.dst_name.clone())).collect();
        assert_eq!(got, [(w.join("a"), "a".to_string()), (w.join("b"), "b".to_string())]);
        assert_eq!(b.jobs[0].args, ["x", "&#39;y z&#39;"]);
        assert_eq!(b.jobs[0].name, "n");

        // The one leftover input takes the one leftover file, or In.
        let b = submit_batch(&job("TransferInput = \"data.txt\""), "n", "u", &templates(&["in"]), &cfg(), None).unwrap();
        assert_eq!(b.jobs[0].inputs[0].src, w.join("data.txt"));
        let b = submit_batch(&job("In = \"stdin.txt\""), "n", "u", &templates(&["in"]), &cfg(), None).unwrap();
        assert_eq!(b.jobs[0].inputs[0].src, w.join("stdin.txt"));

        let e = submit_batch(&job("TransferInput = \"data.txt,a\""), "n", "u", &templates(&["in"]), &cfg(), None).unwrap_err();
        assert!(e.to_string().contains("no input name matches"), "{e}");
        let e = submit_batch(&job(""), "n", "concat", &templates(&["a", "b"]), &cfg(), None).unwrap_err();
        assert!(e.to_string().contains("no file for a, b"), "{e}");
        let e = submit_batch(&job("TransferInput = \"missing\""), "n", "u", &templates(&["in"]), &cfg(), None).unwrap_err();
        assert!(matches!(e, MapError::Input { .. }), "{e}");
        let e = submit_batch(&job("TransferInput = \"d/\""), "n", "u", &templates(&["in"]), &cfg(), None).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    #[test]
    fn a_fetched_url_is_an_input_under_its_last_path_segment_and_a_failed_one_holds_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::write(w.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(w.join("in"), "local").unwrap();
        std::fs::write(w.join("fetched"), "from the web").unwrap();
        let (ok, gone) = ("http://h.example/d/data.txt?sig=s", "http://h.example/gone");
        let urls = UrlInputs::fetched(
            [(ok.to_string(), Ok(w.join("fetched"))), (gone.to_string(), Err("HTTP status 404 (Not Found)".to_string()))].into(),
        );
        let job = |inputs: &str| ad(&format!("[ Iwd = \"{}\"; Cmd = \"run.sh\"; TransferInput = \"{inputs}\" ]", w.display()));
        // A runner job: in its archive under the URL's name.
        let runner_t = Templates { inputs: vec![runner::EXE_INPUT.into(), runner::JOB_ZIP.into()], outputs: vec![runner::OUT_ZIP.into()] };
        let c = BlahConfig { runner_app: Some("runner".into()), ..cfg() };
        let scratch = w.join("scratch");
        let b = submit_batch_with_urls(&job(&format!("in, {ok}")), "n", "runner", &runner_t, &c, Some(&scratch), &urls).unwrap();
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&b.jobs[0].inputs[1].src).unwrap()).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("data.txt").unwrap(), &mut text).unwrap();
        assert_eq!(text, "from the web");
        assert!(zip.by_name("in").is_ok());
        let e = submit_batch_with_urls(&job(&format!("in, {gone}")), "n", "runner", &runner_t, &c, Some(&scratch), &urls).unwrap_err();
        assert_eq!(e.to_string(), "input file http://h.example/gone (transfer_input_files) can't be fetched: HTTP status 404 (Not Found)");
        // An app's input: bound by that name, or by elimination.
        let b = submit_batch_with_urls(&job(ok), "n", "u", &templates(&["data.txt"]), &cfg(), None, &urls).unwrap();
        assert_eq!(b.jobs[0].inputs, [InputFile { src: w.join("fetched"), dst_name: "data.txt".into() }]);
        let b = submit_batch_with_urls(&job(ok), "n", "u", &templates(&["in"]), &cfg(), None, &urls).unwrap();
        assert_eq!(b.jobs[0].inputs, [InputFile { src: w.join("fetched"), dst_name: "in".into() }]);
        let e = submit_batch_with_urls(&job(&format!("in,{ok}")), "n", "u", &templates(&["x"]), &cfg(), None, &urls).unwrap_err();
        assert!(e.to_string().contains("http://h.example/d/data.txt?…"), "named as the URL, without its query: {e}");
        let e = submit_batch_with_urls(&job(gone), "n", "u", &templates(&["in"]), &cfg(), None, &urls).unwrap_err();
        assert!(matches!(&e, MapError::Input { path, .. } if path == gone), "{e}");
        // Without fetching (a work sequence), a URL is refused.
        let e = submit_batch(&job(ok), "n", "u", &templates(&["in"]), &cfg(), None).unwrap_err();
        assert!(e.to_string().contains("local files only"), "{e}");
    }

    #[test]
    fn memory_and_v1_args() {
        let a = ad("[ Iwd = \"/\"; Args = \"-n  5\"; RequestMemory = 64 ]");
        let b = submit_batch(&a, "n", "u", &templates(&[]), &cfg(), None).unwrap();
        assert_eq!(b.jobs[0].args, ["-n", "5"]);
        assert_eq!(b.params.rsc_memory_bound, ParamValue::Value(64.0 * 1048576.0));
        assert!(matches!(
            submit_batch(&ad("[ Iwd = \"/\"; Arguments = \"'\" ]"), "n", "u", &templates(&[]), &cfg(), None),
            Err(MapError::BadArgs { .. })
        ));
    }

    #[test]
    fn outputs_are_renamed_into_iwd() {
        let outs = ["counts".to_string(), "summary".to_string(), "stdout".to_string()];
        let a = ad("[ Iwd = \"/w\"; Out = \"o\"; Err = \"/tmp/e\"; TransferOutput = \"counts, summary\"; \
                    TransferOutputRemaps = \"counts=c.txt; summary=/abs/s\" ]");
        let p = output_plan(&a, "wc", &outs).unwrap();
        assert_eq!(p.files, [("counts".into(), PathBuf::from("/w/c.txt")), ("summary".into(), PathBuf::from("/abs/s"))]);
        assert_eq!((p.out, p.err), (Some(PathBuf::from("/w/o")), Some(PathBuf::from("/tmp/e"))));
        // No TransferOutput: every output; stdout goes to Out instead.
        let p = output_plan(&ad("[ Iwd = \"/w\"; Out = \"o\" ]"), "wc", &outs).unwrap();
        assert_eq!(p.files.len(), 2);
        let e = output_plan(&ad("[ Iwd = \"/w\"; TransferOutput = \"nope\" ]"), "wc", &outs).unwrap_err();
        assert!(e.to_string().contains("no output named nope"), "{e}");
        assert!(matches!(output_plan(&ad("[ Iwd = \"/w\"; TransferOutputRemaps = \"x\" ]"), "wc", &outs), Err(MapError::BadRemap(_))));
    }

    #[test]
    fn a_job_that_asks_for_unzipping_may_name_files_inside_the_zip() {
        let outs = ["results.zip".to_string()];
        let a = ad("[ Iwd = \"/w\"; TransferOutput = \"upper.txt, count.txt\"; BoincUnzipOutputs = true ]");
        let p = output_plan(&a, "zipper", &outs).unwrap();
        assert!(p.files.is_empty());
        let u = p.unzip.unwrap();
        assert_eq!(u.archives, ["results.zip"], "fetched only to be unpacked");
        assert_eq!(u.expected, [("upper.txt".into(), PathBuf::from("/w/upper.txt")), ("count.txt".into(), PathBuf::from("/w/count.txt"))]);
        // Naming the archive keeps it (and it is still unpacked).
        let a = ad("[ Iwd = \"/w\"; TransferOutput = \"results.zip\"; BoincUnzipOutputs = true ]");
        let p = output_plan(&a, "zipper", &outs).unwrap();
        assert_eq!(p.files, [("results.zip".into(), PathBuf::from("/w/results.zip"))]);
        assert!(p.unzip.unwrap().archives.is_empty());
        // Without asking, a name the app does not output is an error.
        let a = ad("[ Iwd = \"/w\"; TransferOutput = \"upper.txt\" ]");
        assert!(matches!(output_plan(&a, "zipper", &outs), Err(MapError::NoSuchOutput { .. })));
    }

    #[test]
    fn the_condor_job_id_comes_from_the_ad_or_the_job_directory() {
        let ad = |t: &str| ClassAd::parse(t).unwrap();
        assert_eq!(condor_job_id(&ad("[ JobDirectory = \"home_bl_127.0.0.1_9618_vm_2.0_1795253890\" ]")).as_deref(), Some("2.0"));
        assert_eq!(condor_job_id(&ad("[ ClusterId = 12; ProcId = 3; JobDirectory = \"x\" ]")).as_deref(), Some("12.3"));
        assert_eq!(condor_job_id(&ad("[ JobDirectory = \"my_dir\" ]")), None);
        assert_eq!(condor_job_id(&ad("[]")), None);
    }
}
