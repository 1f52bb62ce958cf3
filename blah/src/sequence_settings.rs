//! A work sequence's settings (`docs/sequences.md`, "The BLAH front end"):
//! the submit ad's `BoincSequence*` attributes (the submit file's
//! `+remote_BoincSequenceSteps`, the gridmanager strips `remote_`), read
//! and checked when the ad is read (`job`), without the app's templates.

use std::path::Path;

use gahp_protocol::classad::{ClassAd, Value};

use crate::map_error::MapError;

/// The attribute that makes a job a sequence.
pub const STEPS: &str = "BoincSequenceSteps";
const STATE_FILES: &str = "BoincStateFiles";
pub(crate) const MAX_STEP_TIME: &str = "BoincMaxStepTime";
const END_MARKER: &str = "BoincEndMarker";
pub(crate) const MAX_ATTEMPTS: &str = "BoincMaxAttempts";

/// A day: a step is one BOINC job, which rarely runs longer on a host.
pub const DEFAULT_MAX_STEP_TIME: u32 = 24 * 3600;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Why a sequence job can't be submitted; the text says what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SequenceAdError {
    #[error("+remote_{attr} must be a whole number from 1 to 4294967295, not {value}")]
    NotCount { attr: &'static str, value: String },
    #[error("+remote_BoincStateFiles must name at least one state file (a space-separated list of input file names)")]
    NoStateFiles,
    #[error("state file {0:?} is not a plain file name")]
    BadStateName(String),
    #[error("state file {0} is not among the job's transfer_input_files (the initial state comes from there)")]
    StateNotInput(String),
    #[error("+remote_BoincEndMarker must be a plain file name (no '/'), not {0:?}")]
    BadEndMarker(String),
    #[error("+remote_BoincUnzipOutputs can't be used with a work sequence")]
    Unzip,
    #[error("state file {name} is not an output of app {app}, so no step could carry it on; its outputs are: {outputs}")]
    StateNotOutput { name: String, app: String, outputs: String },
    #[error("{0}")]
    Map(#[from] MapError),
}

impl SequenceAdError {
    /// As the job's HoldReason.
    pub fn hold_reason(&self) -> String {
        match self {
            SequenceAdError::Map(e) => e.hold_reason(),
            e => format!("{e}; then condor_release the job"),
        }
    }
}

/// The sequence settings an ad gives, checked without the app's templates
/// (so a bad value is refused at `BLAH_JOB_SUBMIT`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    pub steps: u32,
    pub state_names: Vec<String>,
    pub max_step_time: u32,
    pub max_attempts: u32,
    pub end_marker: Option<String>,
}

pub(crate) fn is_sequence(ad: &ClassAd) -> bool {
    ad.get(STEPS).is_some()
}

/// `None` for a job that is no sequence.
pub fn settings(ad: &ClassAd) -> Result<Option<Settings>, SequenceAdError> {
    if !is_sequence(ad) {
        return Ok(None);
    }
    let steps = count(ad, STEPS)?.ok_or(SequenceAdError::NotCount { attr: STEPS, value: "undefined".into() })?;
    let max_step_time = count(ad, MAX_STEP_TIME)?.unwrap_or(DEFAULT_MAX_STEP_TIME);
    let max_attempts = count(ad, MAX_ATTEMPTS)?.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    let state_names: Vec<String> = ad.get_str(STATE_FILES).unwrap_or("").split_whitespace().map(String::from).collect();
    if state_names.is_empty() {
        return Err(SequenceAdError::NoStateFiles);
    }
    let inputs: Vec<&str> = ad
        .get_str("TransferInput")
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter_map(|e| Path::new(e).file_name().and_then(|n| n.to_str()))
        .collect();
    for name in &state_names {
        if !plain_file_name(name) {
            return Err(SequenceAdError::BadStateName(name.clone()));
        }
        if !inputs.contains(&name.as_str()) {
            return Err(SequenceAdError::StateNotInput(name.clone()));
        }
    }
    let end_marker = match ad.get(END_MARKER) {
        None | Some(Value::Undefined) => None,
        Some(Value::Str(m)) if plain_file_name(m) => Some(m.clone()),
        Some(other) => return Err(SequenceAdError::BadEndMarker(other.to_string())),
    };
    if ad.get_bool("BoincUnzipOutputs") == Some(true) {
        return Err(SequenceAdError::Unzip);
    }
    Ok(Some(Settings { steps, state_names, max_step_time, max_attempts, end_marker }))
}

/// A whole number in 1..=u32::MAX; `None` if the attribute is absent.
fn count(ad: &ClassAd, attr: &'static str) -> Result<Option<u32>, SequenceAdError> {
    match ad.get(attr) {
        None | Some(Value::Undefined) => Ok(None),
        Some(Value::Int(n)) if *n >= 1 => u32::try_from(*n).map(Some).map_err(|_| not_count(attr, &Value::Int(*n))),
        Some(other) => Err(not_count(attr, other)),
    }
}

fn not_count(attr: &'static str, value: &Value) -> SequenceAdError {
    SequenceAdError::NotCount { attr, value: value.to_string() }
}

fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']) && !name.chars().any(char::is_control)
}
