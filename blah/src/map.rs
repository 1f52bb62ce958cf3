//! How a `BLAH_JOB_SUBMIT` job maps onto BOINC (`docs/spec/blah-dialect.md`
//! §9, `docs/blah.md`): job ids and BOINC names, the input files bound to
//! the app's input template, the command line, the bounds, and where
//! outputs go. Pure: it reads the typed job (`crate::job`), the app's
//! templates and the config; `crate::input_files` does the IO its inputs
//! need (checks, the runner's archive).

use std::fmt;
use std::path::{Path, PathBuf};

use gahp_protocol::boinc::command_line;
use gahp_protocol::boinc::Templates;
use gahp_protocol::gahp::{JobParams, JobSpec, ParamValue, SubmitBatch};

use crate::job::{checked, plain, AppSource, BlahJob};
pub use crate::job::{condor_job_id_of_dir, normalize_url};
use crate::map_error::config_name;
pub use crate::map_error::MapError;
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

/// 12 hex digits naming a (project URL, authenticator file) pair in ids.
pub fn project_key(url: &str, authenticator_file: &Path) -> String {
    let mut bytes = normalize_url(url).into_bytes();
    bytes.push(b'\n');
    bytes.extend_from_slice(authenticator_file.as_os_str().as_encoded_bytes());
    hex_md5(&bytes)[..12].to_string()
}

use gahp_services::digest::hex_md5;

/// What a job's batch shares with every other job of it (submit_batch's
/// parameters are batch-wide): its app and its requests. `None` if it has
/// no app.
pub fn gather_key(job: &BlahJob) -> Option<String> {
    let app = job.app.as_ref().ok()?;
    Some(format!("{}\n{}", app.name, job.requests.batch_wide))
}

/// A job mapped onto BOINC: its batch (one job, its inputs still to be
/// staged) and where each input comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedJob {
    pub batch: SubmitBatch,
    pub inputs: InputSources,
}

/// Where a mapped job's inputs come from; `crate::input_files` checks
/// them and (for a runner) writes the job's archive.
#[derive(Debug, Clone, PartialEq)]
pub enum InputSources {
    /// A runner's two inputs: the executable, and the job's archive of its
    /// inputs, stdin, environment and container image (docs/runner.md).
    Runner { exe: PathBuf, env: Vec<(String, String)>, image: Option<String>, entries: Vec<ArchiveSource>, stdin: Option<PathBuf> },
    /// Files bound to the app's inputs, in the template's order.
    Bound(Vec<BoundInput>),
}

/// One `transfer_input_files` entry of a runner job's archive.
#[derive(Debug, Clone, PartialEq)]
pub enum ArchiveSource {
    /// A fetched URL: its file, under the URL's name.
    Fetched { name: String, src: PathBuf },
    /// A local file or directory (its contents only if the entry ends in `/`).
    Local { entry: String, path: PathBuf, contents_only: bool },
}

/// A local file bound to an app input.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundInput {
    pub src: PathBuf,
    pub dst_name: String,
    /// Where it came from (`transfer_input_files`, `input`) and what
    /// messages call it.
    pub from: &'static str,
    pub shown: String,
}

/// The BOINC batch of one job: the app's inputs bound to its files (for a
/// runner, the executable and the job's archive), the arguments as a BOINC
/// command line, the bounds from its requests. A URL in
/// `transfer_input_files` holds the job (a work sequence job takes local
/// files only); [`submit_batch_with_urls`] takes fetched ones.
pub fn submit_batch(job: &BlahJob, batch: &str, templates: &Templates, cfg: &BlahConfig) -> Result<MappedJob, MapError> {
    let urls = UrlInputs::refused("is a URL, and a work sequence job takes local files only: give local files");
    submit_batch_with_urls(job, batch, templates, cfg, &urls)
}

/// [`submit_batch`], with the files the job's URL inputs were fetched into
/// (`blah::url_inputs`): each is an input under the last segment of its
/// URL's path, as any file is under its base name.
pub fn submit_batch_with_urls(
    job: &BlahJob,
    batch: &str,
    templates: &Templates,
    cfg: &BlahConfig,
    urls: &UrlInputs,
) -> Result<MappedJob, MapError> {
    let app = job.app()?;
    let iwd = job.iwd()?;
    let raw_args = checked(&job.args)?;
    let args = command_line::quote_args(raw_args)?;
    let params = job_params(job, &app.name, cfg)?;
    let env = checked(&job.environment)?;
    // Podman on the volunteer's host reads the image's name: never an
    // option or a path there.
    let bad_image = |image: &str| crate::container_image::problem(image).map(|why| (image.to_string(), why));
    if let Some((image, why)) = job.container_image.as_deref().and_then(bad_image) {
        return Err(MapError::BadImage { image, why });
    }
    // A container job runs in its image or not at all; a container runner
    // runs nothing outside one.
    match (job.container_image.as_deref(), cfg.app(&app.name).container) {
        (Some(image), false) => {
            return Err(MapError::NotAContainerRunner { app: app.name.clone(), image: image.to_string(), config: config_name(cfg) })
        }
        (None, true) => return Err(MapError::NoImage(app.name.clone())),
        _ => {}
    }
    let inputs = if templates.is_runner() {
        command_line::fits_wrapper(raw_args)?;
        runner_sources(job, iwd, &app.name, env, urls)?
    } else {
        if app.source == AppSource::RunnerApp {
            let why = "it is runner_app in the config, for jobs that send their executable";
            return Err(MapError::NotARunner { app: app.name.clone(), inputs: templates.inputs.join(", "), why });
        }
        if !env.is_empty() && cfg.app(&app.name).environment == EnvironmentPolicy::Hold {
            let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
            return Err(MapError::Environment { app: app.name.clone(), names: names.join(", ") });
        }
        InputSources::Bound(bind_inputs(job, iwd, &app.name, &templates.inputs, urls)?)
    };
    let batch = SubmitBatch {
        batch_name: batch.to_string(),
        app_name: app.name.clone(),
        jobs: vec![JobSpec { name: batch.to_string(), args, inputs: Vec::new() }],
        params,
    };
    Ok(MappedJob { batch, inputs })
}

/// The batch's bounds from the job's requests (docs/runner.md "Requests"),
/// or why the app can't take them.
fn job_params(job: &BlahJob, app: &str, cfg: &BlahConfig) -> Result<JobParams, MapError> {
    let caps = cfg.app(app);
    let r = &job.requests;
    let mut params = JobParams::default();
    if let Some(mib) = checked(&r.memory_mib)? {
        params.rsc_memory_bound = ParamValue::Value(mib * 1024.0 * 1024.0);
    }
    if let Some(kib) = checked(&r.disk_kib)? {
        params.rsc_disk_bound = ParamValue::Value(kib * 1024.0);
    }
    if let Some(secs) = checked(&r.runtime_secs)? {
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
    if let Some(cpus) = checked(&r.cpus)?.filter(|c| *c > f64::from(caps.cpus.max(1))) {
        return Err(over("cpus", cpus, caps.cpus.max(1), "cpus"));
    }
    if let Some(gpus) = checked(&r.gpus)?.filter(|g| *g > f64::from(caps.gpus)) {
        return Err(over("gpus", gpus, caps.gpus, "gpus"));
    }
    Ok(params)
}

/// What a runner job sends: its executable, and what goes into its archive.
fn runner_sources(job: &BlahJob, iwd: &Path, app: &str, env: &[(String, String)], urls: &UrlInputs) -> Result<InputSources, MapError> {
    let cmd =
        job.executable.as_deref().filter(|_| job.sends_executable).ok_or_else(|| MapError::RunnerWithoutExecutable(app.to_string()))?;
    let mut entries = Vec::with_capacity(job.inputs.len());
    for entry in &job.inputs {
        if url_inputs::is_url(entry) {
            let (src, name) = urls.local(entry).map_err(|problem| url_error(entry, problem))?;
            entries.push(ArchiveSource::Fetched { name, src });
            continue;
        }
        let contents_only = entry.ends_with('/');
        let path = iwd.join(entry.trim_end_matches('/'));
        entries.push(ArchiveSource::Local { entry: entry.clone(), path, contents_only });
    }
    Ok(InputSources::Runner {
        exe: iwd.join(cmd),
        env: env.to_vec(),
        image: job.container_image.clone(),
        entries,
        stdin: job.stdin.as_deref().map(|s| iwd.join(s)),
    })
}

/// Binds `TransferInput` entries and `In` to the app's input names: a file
/// whose base name is an input's name goes there (`In` goes to `stdin` if
/// the app has it); one input left over takes the one file left over.
fn bind_inputs(job: &BlahJob, iwd: &Path, app: &str, names: &[String], urls: &UrlInputs) -> Result<Vec<BoundInput>, MapError> {
    // (path, where it came from, the input name it binds to by name, what
    // messages call it)
    let mut files: Vec<(PathBuf, &'static str, Option<String>, String)> = Vec::new();
    for entry in &job.inputs {
        if url_inputs::is_url(entry) {
            let (src, name) = urls.local(entry).map_err(|problem| url_error(entry, problem))?;
            files.push((src, "transfer_input_files", Some(name), url_inputs::shown(entry)));
            continue;
        }
        if entry.ends_with('/') {
            return Err(MapError::Input {
                path: entry.clone(),
                from: "transfer_input_files",
                problem: "is a directory; BOINC jobs take files (archive it)".into(),
            });
        }
        let base = Path::new(entry).file_name().map(|n| n.to_string_lossy().into_owned());
        let path = iwd.join(entry);
        let shown = path.display().to_string();
        files.push((path, "transfer_input_files", base, shown));
    }
    if let Some(stdin) = &job.stdin {
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
        inputs.push(BoundInput { src: path.clone(), dst_name: name.clone(), from, shown: shown.clone() });
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
/// `TransferOutputRemaps`; `Out` and `Err` relative to `Iwd`. `app` is the
/// job's, whose outputs are `outputs`.
pub fn output_plan(job: &BlahJob, app: &str, outputs: &[String]) -> Result<OutputPlan, MapError> {
    let (iwd, out, err) = std_streams(job)?;
    let remaps = checked(&job.remaps)?;
    let names: Vec<String> = match &job.outputs {
        Some(list) => list.clone(),
        None => outputs.iter().filter(|n| out.is_none() || n.as_str() != STDOUT_OUTPUT).cloned().collect(),
    };
    let unzip = job.unzip_outputs;
    let mut files = Vec::with_capacity(names.len());
    let mut expected = Vec::new();
    for name in names {
        let dest = iwd.join(remapped(remaps, &name).unwrap_or(&name));
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

fn remapped<'a>(remaps: &'a [(String, String)], name: &str) -> Option<&'a String> {
    remaps.iter().find(|(from, _)| from == name).map(|(_, to)| to)
}

/// Where a runner job's files go (docs/runner.md "Back on the submit
/// host"): its std streams, and each `TransferOutput` entry renamed by
/// `TransferOutputRemaps` (all it made without a list).
pub fn runner_placement(job: &BlahJob) -> Result<runner::Placement, MapError> {
    let (iwd, out, err) = std_streams(job)?;
    let remaps = checked(&job.remaps)?;
    let named = job.outputs.as_ref().map(|list| {
        list.iter()
            .map(|name| {
                let base = Path::new(name.trim_end_matches('/')).file_name().map_or(name.clone(), |b| b.to_string_lossy().into_owned());
                let dest = iwd.join(remapped(remaps, name).unwrap_or(&base));
                (name.clone(), dest)
            })
            .collect()
    });
    let own = own_files(job, &iwd);
    Ok(runner::Placement { iwd, out, err, named, own })
}

/// The job's own files in its directory, which no file it made may
/// replace: its executable, its inputs, its stdin, stdout and stderr.
pub fn own_files(job: &BlahJob, iwd: &Path) -> Vec<PathBuf> {
    let (_, out, err) = std_streams(job).unwrap_or_default();
    let named = job.executable.as_deref().into_iter().chain(job.stdin.as_deref()).chain(job.local_inputs());
    named
        .map(|p| iwd.join(p.trim_end_matches('/')))
        .chain(job.local_inputs().filter_map(|p| Some(iwd.join(Path::new(p).file_name()?))))
        .chain(out)
        .chain(err)
        .collect()
}

/// The bounds of a job's output zips: the config's, with the job's own
/// `max_transfer_output_mb` (`MaxTransferOutputMB`) for their bytes.
pub fn unpack_limits(job: &BlahJob, limits: UnpackLimits) -> UnpackLimits {
    limits.with_job_bytes(job.max_transfer_output_mb)
}

/// `Iwd` and the `Out` and `Err` paths (absent or `/dev/null`: none).
pub fn std_streams(job: &BlahJob) -> Result<(PathBuf, Option<PathBuf>, Option<PathBuf>), MapError> {
    let iwd = job.iwd()?.to_path_buf();
    let path = |p: &Option<String>| p.as_deref().map(|p| iwd.join(p));
    let (out, err) = (path(&job.out), path(&job.err));
    Ok((iwd, out, err))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    pub(crate) fn cfg() -> BlahConfig {
        BlahConfig {
            project_url: Some("http://p.example/proj".into()),
            authenticator_file: Some("/home/u/.boinc/auth".into()),
            ..BlahConfig::default()
        }
    }

    pub(crate) fn templates(inputs: &[&str]) -> Templates {
        Templates { inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: vec![] }
    }

    /// The typed job of `a` (a `JobDirectory` added if it has none),
    /// running `app`: the app it chooses if that is `app`, else as if it
    /// named `app`.
    pub(crate) fn typed(a: &ClassAd, app: &str, cfg: &BlahConfig) -> BlahJob {
        let mut a = a.clone();
        if a.get("JobDirectory").is_none() {
            a.insert("JobDirectory", gahp_protocol::classad::Value::Str("d".into()));
        }
        let mut job = BlahJob::parse(&a, cfg).unwrap();
        if job.app.as_ref().map_or(true, |chosen| chosen.name != app) {
            job.app = Ok(crate::job::AppChoice { name: app.into(), source: AppSource::BoincApp });
        }
        job
    }

    fn output_plan(a: &ClassAd, app: &str, outputs: &[String]) -> Result<OutputPlan, MapError> {
        super::output_plan(&typed(a, app, &cfg()), app, outputs)
    }

    /// The app a job of `a` runs (a `JobDirectory` added), or why none.
    pub(crate) fn app_of(a: &ClassAd, cfg: &BlahConfig) -> Result<(String, &'static str), String> {
        let mut a = a.clone();
        a.insert("JobDirectory", gahp_protocol::classad::Value::Str("d".into()));
        BlahJob::parse(&a, cfg).unwrap().app.map(|app| (app.name, app.source.as_str()))
    }

    use crate::job::{choose_project, condor_job_id};
    use gahp_protocol::classad::ClassAd;

    #[test]
    fn the_mapping_is_pure_and_names_each_input_source_before_any_file_is_read() {
        // Nothing on disk: the mapping still binds, the staging then checks.
        let a = ad("[ Iwd = \"/nowhere\"; TransferInput = \"b, a\"; In = \"s\" ]");
        let job = typed(&a, "u", &cfg());
        let mapped = super::submit_batch(&job, "n", &templates(&["a", "b", "stdin"]), &cfg()).unwrap();
        let InputSources::Bound(bound) = &mapped.inputs else { panic!("bound inputs") };
        let names: Vec<(&str, &str)> = bound.iter().map(|b| (b.dst_name.as_str(), b.from)).collect();
        assert_eq!(names, [("a", "transfer_input_files"), ("b", "transfer_input_files"), ("stdin", "input")]);
        assert!(mapped.batch.jobs[0].inputs.is_empty(), "staged later");
        assert_eq!((mapped.batch.app_name.as_str(), mapped.batch.jobs[0].name.as_str()), ("u", "n"));
        // A runner job: its executable and archive sources, in order.
        let r = BlahConfig { runner_app: Some("runner".into()), ..cfg() };
        let a = ad("[ JobDirectory = \"d\"; Iwd = \"/w\"; Cmd = \"x.sh\"; TransferInput = \"dir/, f\"; Environment = \"A=1\" ]");
        let job = BlahJob::parse(&a, &r).unwrap();
        let runner_t = Templates { inputs: vec![runner::EXE_INPUT.into(), runner::JOB_ZIP.into()], outputs: vec![runner::OUT_ZIP.into()] };
        let mapped = super::submit_batch(&job, "n", &runner_t, &r).unwrap();
        let InputSources::Runner { exe, env, entries, .. } = mapped.inputs else { panic!("runner inputs") };
        assert_eq!((exe, env), (PathBuf::from("/w/x.sh"), vec![("A".to_string(), "1".to_string())]));
        assert_eq!(
            entries,
            [
                ArchiveSource::Local { entry: "dir/".into(), path: "/w/dir".into(), contents_only: true },
                ArchiveSource::Local { entry: "f".into(), path: "/w/f".into(), contents_only: false }
            ]
        );
        // The gathering key: the app and the batch-wide requests.
        assert_eq!(gather_key(&job).unwrap(), "runner\n\n\n");
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
        let e = output_plan(&ad("[ Iwd = \"/w\"; TransferOutputRemaps = \"x\" ]"), "wc", &outs).unwrap_err();
        assert_eq!(e.to_string(), MapError::BadRemap("x".into()).to_string());
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
