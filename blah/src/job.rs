//! A `BLAH_JOB_SUBMIT` job, typed: its submit ClassAd read once, at
//! submit, into what every later step needs (which app and project, its
//! inputs, outputs, requests, placement, sequence settings). This is what
//! the state database keeps (as JSON), so no step reads the ad again and
//! the app is chosen in one place ([`BlahJob::parse`]).
//!
//! A problem an attribute has (bad arguments, no app) is kept as its
//! message and becomes the job's hold reason where it did before (at the
//! job's submission to BOINC), with the same text.

use std::path::{Path, PathBuf};

use gahp_protocol::classad::{self, ArgsError, ClassAd, Value};
use serde::{Deserialize, Serialize};

use crate::map_error::{config_name, MapError};
use crate::sequence_settings::{self, SequenceAdError, Settings};
use gahp_services::config::BlahConfig;

/// A value of the ad, or the message of its problem (a `MapError`'s text;
/// it holds the job when a step needs the value).
pub type Checked<T> = Result<T, String>;

/// One `batch boinc` job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlahJob {
    /// `JobDirectory`, trimmed (never empty).
    pub job_dir: String,
    /// The HTCondor job id (`cluster.proc`), for the log.
    pub condor_job: Option<String>,
    /// The config's project, or the one the job names.
    pub project: Checked<ProjectChoice>,
    /// The job names a project of its own (`+remote_BoincProjectUrl` or
    /// `+remote_BoincAuthenticatorFile`).
    pub names_project: bool,
    /// The app it runs, and why that one.
    pub app: Checked<AppChoice>,
    /// `Iwd`: where relative paths start.
    pub iwd: Option<PathBuf>,
    /// `Cmd`, if set.
    pub executable: Option<String>,
    /// The job sends its executable (`transfer_executable`).
    pub sends_executable: bool,
    pub container_image: Option<String>,
    /// `Arguments` (V2), else `Args` (V1), split.
    pub args: Checked<Vec<String>>,
    /// `Environment` (V2), else `Env` (V1).
    pub environment: Checked<Vec<(String, String)>>,
    pub requests: Requests,
    /// `transfer_input_files` entries: local paths (relative to `Iwd`;
    /// a trailing `/` sends a directory's contents) and URLs.
    pub inputs: Vec<String>,
    /// `In` (not `/dev/null`).
    pub stdin: Option<String>,
    /// `transfer_output_files` entries; `None`: every output.
    pub outputs: Option<Vec<String>>,
    /// `transfer_output_remaps`: (output name, destination).
    pub remaps: Checked<Vec<(String, String)>>,
    /// `Out` and `Err` (not `/dev/null`), relative to `Iwd`.
    pub out: Option<String>,
    pub err: Option<String>,
    /// `+remote_BoincUnzipOutputs = true`.
    pub unzip_outputs: bool,
    /// `max_transfer_output_mb`.
    pub max_transfer_output_mb: Option<i64>,
    /// A work sequence's settings; `None` for a plain job.
    pub sequence: Option<Settings>,
    /// `+remote_BoincRequirements` and `+remote_BoincRank`, as text, for a
    /// pool's matchmaking.
    pub requirements: Option<String>,
    pub rank: Option<String>,
}

/// The app a job runs and the setting that chose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppChoice {
    pub name: String,
    pub source: AppSource,
}

/// Where a job's app came from (docs/runner.md "Which app a `batch boinc`
/// job runs").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AppSource {
    BoincApp,
    BatchQueue,
    ContainerRunnerApp,
    RunnerApp,
    DefaultApp,
    ExecutableName,
}

impl AppSource {
    /// What a message calls it.
    pub fn as_str(self) -> &'static str {
        match self {
            AppSource::BoincApp => "+remote_BoincApp",
            AppSource::BatchQueue => "batch_queue",
            AppSource::ContainerRunnerApp => "container_runner_app",
            AppSource::RunnerApp => "runner_app",
            AppSource::DefaultApp => "default_app",
            AppSource::ExecutableName => "the executable's base name (transfer_executable = false)",
        }
    }
}

/// What the job asks of a host, each checked to be a positive number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Requests {
    /// `RequestMemory`, MiB.
    pub memory_mib: Checked<Option<f64>>,
    /// `RequestDisk`, KiB.
    pub disk_kib: Checked<Option<f64>>,
    /// `BatchRuntime`, seconds.
    pub runtime_secs: Checked<Option<f64>>,
    pub cpus: Checked<Option<f64>>,
    /// `GPUNumber`, else `RequestGpus`.
    pub gpus: Checked<Option<f64>>,
    /// The batch-wide requests as the ad wrote them (jobs share a batch
    /// only if these are the same).
    pub batch_wide: String,
}

/// Why a submit is refused outright (no job id: there is no job to hold).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Map(MapError),
    #[error("this work sequence can't be submitted: {0}")]
    Sequence(SequenceAdError),
}

impl BlahJob {
    /// Reads and checks a submit ad with the daemon's config. This is the
    /// one place a job's app is chosen.
    pub fn parse(ad: &ClassAd, cfg: &BlahConfig) -> Result<BlahJob, Refused> {
        let job_dir = non_empty(ad, "JobDirectory").ok_or(Refused::Map(MapError::Missing("JobDirectory")))?.to_string();
        let sequence = sequence_settings::settings(ad).map_err(Refused::Sequence)?;
        let named = |n: &str| non_empty(ad, n).is_some();
        let path = |name| ad.get_str(name).map(str::trim).filter(|p| !p.is_empty() && *p != "/dev/null").map(String::from);
        let expr_text = |name: &str| match ad.get(name)? {
            Value::Str(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::Str(_) => None,
            other => Some(other.to_string()),
        };
        Ok(BlahJob {
            condor_job: condor_job_id(ad),
            project: text(choose_project(ad, cfg)),
            names_project: named("BoincProjectUrl") || named("BoincAuthenticatorFile"),
            app: text(choose_app(ad, cfg)),
            iwd: ad.get_str("Iwd").map(PathBuf::from),
            executable: non_empty(ad, "Cmd").map(String::from),
            sends_executable: sends_executable(ad),
            container_image: non_empty(ad, "ContainerImage").map(String::from),
            args: text(arguments(ad)),
            environment: text(environment(ad)),
            requests: requests(ad),
            inputs: ad
                .get_str("TransferInput")
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(String::from)
                .collect(),
            stdin: ad.get_str("In").map(str::trim).filter(|s| !s.is_empty() && *s != "/dev/null").map(String::from),
            outputs: ad
                .get_str("TransferOutput")
                .filter(|l| !l.trim().is_empty())
                .map(|list| list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()),
            remaps: text(remaps(ad)),
            out: path("Out"),
            err: path("Err"),
            unzip_outputs: ad.get_bool("BoincUnzipOutputs") == Some(true),
            max_transfer_output_mb: ad.get_int("MaxTransferOutputMB"),
            sequence,
            requirements: expr_text("BoincRequirements"),
            rank: expr_text("BoincRank"),
            job_dir,
        })
    }

    /// A recorded job: its JSON, or (a record an older daemon made) its
    /// submit ad's text, read as at submit. `None` if neither can be read.
    pub fn from_record(json: Option<&str>, ad_text: &str, cfg: &BlahConfig) -> Result<Option<BlahJob>, String> {
        if let Some(json) = json.filter(|j| !j.is_empty()) {
            return serde_json::from_str(json).map(Some).map_err(|e| format!("its recorded job is unreadable: {e}"));
        }
        if ad_text.is_empty() {
            return Ok(None);
        }
        let ad = ClassAd::parse(ad_text).map_err(|e| format!("its recorded submit ad is unreadable: {e}"))?;
        BlahJob::parse(&ad, cfg).map(Some).map_err(|e| format!("its recorded submit ad is refused: {e}"))
    }

    /// As the state database keeps it.
    pub fn to_json(&self) -> String {
        // Strings, numbers, options and lists only: it always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The job's app, or why it has none.
    pub fn app(&self) -> Result<&AppChoice, MapError> {
        self.app.as_ref().map_err(|e| MapError::InAd(e.clone()))
    }

    pub fn is_sequence(&self) -> bool {
        self.sequence.is_some()
    }

    /// `Iwd`, needed by every step that places a file.
    pub fn iwd(&self) -> Result<&Path, MapError> {
        self.iwd.as_deref().ok_or(MapError::Missing("Iwd"))
    }

    /// The local (not URL) `transfer_input_files` entries.
    pub fn local_inputs(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(String::as_str).filter(|e| !crate::url_inputs::is_url(e))
    }
}

/// A value of the ad, or its problem's message.
fn text<T>(value: Result<T, MapError>) -> Checked<T> {
    value.map_err(|e| e.to_string())
}

/// A value the job must have at a step: its problem, as a `MapError`.
pub fn checked<T>(value: &Checked<T>) -> Result<&T, MapError> {
    value.as_ref().map_err(|e| MapError::InAd(e.clone()))
}

/// The app and the attribute it came from: the app the job names; else,
/// for a job that sends its executable, the runner; else `default_app`,
/// else the executable's base name.
fn choose_app(ad: &ClassAd, cfg: &BlahConfig) -> Result<AppChoice, MapError> {
    let chosen = |name: &str, source| Ok(AppChoice { name: name.to_string(), source });
    if let Some(app) = non_empty(ad, "BoincApp") {
        return chosen(app, AppSource::BoincApp);
    }
    if let Some(app) = non_empty(ad, "Queue") {
        return chosen(app, AppSource::BatchQueue);
    }
    if let Some(image) = non_empty(ad, "ContainerImage") {
        return match cfg.container_runner_app.as_deref().filter(|a| !a.is_empty()) {
            Some(runner) => chosen(runner, AppSource::ContainerRunnerApp),
            None => Err(MapError::NoContainerRunner { image: image.to_string(), config: config_name(cfg) }),
        };
    }
    let cmd = non_empty(ad, "Cmd");
    if let Some(cmd) = cmd.filter(|_| sends_executable(ad)) {
        return match cfg.runner_app.as_deref().filter(|a| !a.is_empty()) {
            Some(runner) => chosen(runner, AppSource::RunnerApp),
            None => Err(MapError::NoRunner { exe: cmd.to_string(), config: config_name(cfg) }),
        };
    }
    if let Some(app) = cfg.default_app.as_deref().filter(|a| !a.is_empty()) {
        return chosen(app, AppSource::DefaultApp);
    }
    let base = cmd.and_then(|c| Path::new(c).file_name()).map(|b| b.to_string_lossy().into_owned());
    match base.filter(|b| plain(b)) {
        Some(app) => chosen(&app, AppSource::ExecutableName),
        None => Err(MapError::NoApp { config: config_name(cfg) }),
    }
}

/// Whether the job sends its executable: HTCondor's default, unless the ad
/// says `StageCmd = false` (HTCondor 24) or `TransferExecutable = false`
/// (`+remote_TransferExecutable`, which the job router's route copies).
fn sends_executable(ad: &ClassAd) -> bool {
    ad.get_bool("StageCmd") != Some(false) && ad.get_bool("TransferExecutable") != Some(false)
}

fn requests(ad: &ClassAd) -> Requests {
    let attr = |n| ad.get(n).map(|v| v.to_string()).unwrap_or_default();
    Requests {
        memory_mib: text(positive(ad, "RequestMemory")),
        disk_kib: text(positive(ad, "RequestDisk")),
        runtime_secs: text(positive(ad, "BatchRuntime")),
        cpus: text(positive(ad, "RequestCpus")),
        gpus: text(positive(ad, "GPUNumber").and_then(|g| Ok(g.or(positive(ad, "RequestGpus")?)))),
        batch_wide: format!("{}\n{}\n{}", attr("RequestMemory"), attr("RequestDisk"), attr("BatchRuntime")),
    }
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

/// `Arguments` (V2), else `Args` (V1).
pub fn arguments(ad: &ClassAd) -> Result<Vec<String>, MapError> {
    if let Some(v2) = ad.get_str("Arguments") {
        return classad::parse_args_v2(v2).map_err(|err| MapError::BadArgs { attr: "Arguments", err });
    }
    Ok(ad.get_str("Args").map(classad::parse_args_v1).unwrap_or_default())
}

/// `TransferOutputRemaps`: `name=path` entries separated by `;`.
fn remaps(ad: &ClassAd) -> Result<Vec<(String, String)>, MapError> {
    let mut remaps: Vec<(String, String)> = Vec::new();
    for entry in ad.get_str("TransferOutputRemaps").unwrap_or("").split(';').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            Some((from, to)) if !from.trim().is_empty() && !to.trim().is_empty() => {
                // A later entry for a name replaces an earlier one.
                let (from, to) = (from.trim().to_string(), to.trim().to_string());
                remaps.retain(|(f, _)| *f != from);
                remaps.push((from, to));
            }
            _ => return Err(MapError::BadRemap(entry.to_string())),
        }
    }
    Ok(remaps)
}

/// Which project a job goes to: the config's, or the job's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Script names are appended to the URL: it must end with `/`.
pub fn normalize_url(url: &str) -> String {
    let url = url.trim();
    if url.ends_with('/') {
        url.to_string()
    } else {
        format!("{url}/")
    }
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

/// A name of letters, digits, `.`, `_` and `-` only.
pub(crate) fn plain(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn non_empty<'a>(ad: &'a ClassAd, name: &str) -> Option<&'a str> {
    ad.get_str(name).map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    fn cfg() -> BlahConfig {
        BlahConfig { project_url: Some("http://p/".into()), authenticator_file: Some("/k".into()), ..Default::default() }
    }

    use std::path::PathBuf;

    fn choose(a: &ClassAd, cfg: &BlahConfig) -> Result<(String, &'static str), MapError> {
        choose_app(a, cfg).map(|app| (app.name, app.source.as_str()))
    }

    #[test]
    fn app_by_priority() {
        let c = BlahConfig { default_app: Some("d".into()), ..cfg() };
        assert_eq!(choose(&ad("[ BoincApp = \"a\"; Queue = \"q\" ]"), &c).unwrap().0, "a");
        assert_eq!(choose(&ad("[ Queue = \"q\" ]"), &c).unwrap().0, "q");
        assert_eq!(choose(&ad("[ Queue = \"\" ]"), &c).unwrap(), ("d".into(), "default_app"));
        assert!(matches!(choose(&ad("[]"), &cfg()), Err(MapError::NoApp { .. })));
    }

    #[test]
    fn a_job_that_sends_its_executable_goes_to_the_runner_or_is_held() {
        let with_default = BlahConfig { default_app: Some("uppercase".into()), ..cfg() };
        let script = "[ Cmd = \"/home/u/analyze.sh\" ]";
        // default_app never replaces an executable the job sends.
        let e = choose(&ad(script), &with_default).unwrap_err();
        assert!(matches!(&e, MapError::NoRunner { exe, .. } if exe == "/home/u/analyze.sh"), "{e}");
        assert!(e.to_string().contains("runner_app"), "{e}");
        let runner = BlahConfig { runner_app: Some("runner".into()), ..with_default.clone() };
        assert_eq!(choose(&ad(script), &runner).unwrap(), ("runner".into(), "runner_app"));
        // A named app is the program; the executable is not used.
        assert_eq!(choose(&ad("[ Cmd = \"/x/a.sh\"; BoincApp = \"wc\" ]"), &runner).unwrap().0, "wc");
        // Not sent: default_app, else the base name.
        for not_sent in ["TransferExecutable = false", "StageCmd = false"] {
            let a = ad(&format!("[ Cmd = \"/usr/bin/wordcount\"; {not_sent} ]"));
            assert_eq!(choose(&a, &with_default).unwrap().0, "uppercase");
            assert_eq!(choose(&a, &cfg()).unwrap().0, "wordcount");
        }
    }

    #[test]
    fn a_job_is_read_once_with_its_app_and_where_it_came_from() {
        let c = BlahConfig { runner_app: Some("runner".into()), default_app: Some("d".into()), ..cfg() };
        let app = |t: &str| BlahJob::parse(&ad(t), &c).unwrap().app;
        let named = |name: &str, source| Ok(AppChoice { name: name.into(), source });
        assert_eq!(app("[ JobDirectory = \"d\"; BoincApp = \"a\"; Queue = \"q\" ]"), named("a", AppSource::BoincApp));
        assert_eq!(app("[ JobDirectory = \"d\"; Queue = \"q\" ]"), named("q", AppSource::BatchQueue));
        assert_eq!(app("[ JobDirectory = \"d\"; Cmd = \"x.sh\" ]"), named("runner", AppSource::RunnerApp));
        assert_eq!(app("[ JobDirectory = \"d\"; Cmd = \"x\"; TransferExecutable = false ]"), named("d", AppSource::DefaultApp));
        let none = app("[ JobDirectory = \"d\"; ContainerImage = \"docker://x\" ]").unwrap_err();
        assert!(none.contains("no container runner app is configured"), "{none}");
        let bare = BlahJob::parse(&ad("[ JobDirectory = \"d\"; Cmd = \"/bin/wc\"; StageCmd = false ]"), &cfg()).unwrap();
        assert_eq!(bare.app, named("wc", AppSource::ExecutableName));
        let e = BlahJob::parse(&ad("[ JobDirectory = \"d\" ]"), &cfg()).unwrap().app().unwrap_err();
        assert!(e.hold_reason().starts_with("no BOINC app chosen") && e.hold_reason().ends_with("then condor_release the job"));
    }

    #[test]
    fn a_problem_of_an_attribute_is_kept_as_its_message_and_a_missing_directory_or_bad_sequence_is_refused() {
        let j =
            BlahJob::parse(&ad("[ JobDirectory = \" d \"; Arguments = \"'\"; RequestDisk = -5; TransferOutputRemaps = \"x\" ]"), &cfg())
                .unwrap();
        assert_eq!(j.job_dir, "d");
        assert!(j.args.unwrap_err().starts_with("can't parse Arguments"));
        assert_eq!(j.requests.disk_kib.unwrap_err(), "RequestDisk = -5 is not a positive number");
        assert_eq!(j.remaps.unwrap_err(), "bad transfer_output_remaps entry \"x\": expected name=path");
        assert!(matches!(BlahJob::parse(&ad("[ Iwd = \"/\" ]"), &cfg()), Err(Refused::Map(MapError::Missing("JobDirectory")))));
        let seq = BlahJob::parse(&ad("[ JobDirectory = \"d\"; BoincSequenceSteps = 0 ]"), &cfg()).unwrap_err();
        assert!(seq.to_string().starts_with("this work sequence can't be submitted: "), "{seq}");
    }

    #[test]
    fn a_job_reads_its_files_streams_and_placement() {
        let j = BlahJob::parse(
            &ad("[ JobDirectory = \"d\"; Iwd = \"/w\"; Cmd = \"run.sh\"; TransferInput = \"a, http://h/x ,\"; In = \"/dev/null\"; \
                 Out = \"o\"; Err = \"\"; TransferOutput = \" \"; BoincRequirements = \"Memory > 2\"; BoincRank = 3; \
                 BoincProjectUrl = \"http://q/\"; BoincAuthenticatorFile = \"key\"; ClusterId = 4; ProcId = 0 ]"),
            &BlahConfig { allow_project_override: true, ..cfg() },
        )
        .unwrap();
        assert_eq!(j.inputs, ["a", "http://h/x"]);
        assert_eq!(j.local_inputs().collect::<Vec<_>>(), ["a"]);
        assert_eq!((j.stdin, j.out.as_deref(), j.err), (None, Some("o"), None));
        assert_eq!(j.outputs, None, "a blank list is every output");
        assert_eq!((j.requirements.as_deref(), j.rank.as_deref()), (Some("Memory > 2"), Some("3")));
        assert!(j.names_project && j.sends_executable);
        assert_eq!(j.project.unwrap().authenticator_file, PathBuf::from("/w/key"));
        assert_eq!(j.condor_job.as_deref(), Some("4.0"));
    }

    #[test]
    fn a_job_is_kept_as_json_and_an_older_record_of_its_ad_reads_the_same() {
        let text = "[ JobDirectory = \"d\"; Iwd = \"/w\"; BoincApp = \"u\"; Arguments = \"a 'b c'\"; RequestMemory = 64; \
                    Environment = \"A=1\"; TransferOutputRemaps = \"o=p\" ]";
        let job = BlahJob::parse(&ad(text), &cfg()).unwrap();
        let kept = BlahJob::from_record(Some(&job.to_json()), "", &cfg()).unwrap().unwrap();
        assert_eq!(kept, job);
        // A record an older daemon made keeps the ad's text only.
        assert_eq!(BlahJob::from_record(None, text, &cfg()).unwrap(), Some(job));
        assert_eq!(BlahJob::from_record(None, "", &cfg()).unwrap(), None, "a retired record keeps neither");
        assert!(BlahJob::from_record(None, "[ x", &cfg()).is_err());
        assert!(BlahJob::from_record(Some("{"), "", &cfg()).is_err());
    }
}
