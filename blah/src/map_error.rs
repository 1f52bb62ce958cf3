//! Why a job cannot go to BOINC as submitted: each problem, with what to
//! change; it becomes the job's HoldReason. Found when the submit ad is
//! read (`job`) or mapped (`map`).

use gahp_protocol::boinc::command_line::ArgRefused;
use gahp_protocol::classad::ArgsError;
use gahp_services::config::BlahConfig;

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
    /// A problem found when the submit ad was read (`crate::job`): its text.
    #[error("{0}")]
    InAd(String),
}

impl MapError {
    /// The job's HoldReason: the problem, then how to go on.
    pub fn hold_reason(&self) -> String {
        format!("{self}; then condor_release the job")
    }
}

/// The config file as messages name it.
pub(crate) fn config_name(cfg: &BlahConfig) -> String {
    cfg.config_file.as_ref().map_or_else(|| "~/.config/boinc-gahp/config.toml".into(), |p| p.display().to_string())
}
