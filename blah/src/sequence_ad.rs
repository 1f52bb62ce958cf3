//! A `batch boinc` job that is a work sequence (`docs/sequences.md`, "The
//! BLAH front end"): the typed job and its sequence settings (read from
//! the ad's `BoincSequence*` attributes, `sequence_settings`) mapped to a
//! [`CreateSequence`]. Pure but for the check of its input files.

use gahp_protocol::boinc::Templates;

use crate::input_files;
use crate::job::{checked, BlahJob};
use crate::map::{self, MapError};
pub use crate::sequence_settings::{settings, SequenceAdError, Settings, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_STEP_TIME, STEPS};
use gahp_sequences::relocator::CreateSequence;
use gahp_sequences::store::SequenceDef;
use gahp_services::config::BlahConfig;

/// The sequence of a job: named after its `JobDirectory`, which a job
/// keeps across `condor_hold` and `condor_release` (unlike its BOINC job
/// names, one per attempt), so a resubmit finds it again. `prefix` is the
/// BLAH front end's `name_prefix` (a served client's `<client>~`), so the
/// sequence, and every step's BOINC batch and job, is named as the
/// client's other jobs are.
pub fn sequence_name(job: &BlahJob, prefix: &str) -> String {
    let dir = &job.job_dir;
    let plain = dir.len() <= 160 && dir.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain {
        format!("{prefix}blah-{dir}")
    } else {
        format!("{prefix}blah-md5-{}", gahp_services::digest::hex_md5(dir.as_bytes()))
    }
}

/// The work sequence of a job of `app`: its inputs bound to the app's input
/// names as for an ordinary job (`map::submit_batch`), the state files
/// among them as the initial state, the rest every step's own inputs;
/// named with `prefix` (see [`sequence_name`]).
pub fn create_sequence(
    job: &BlahJob,
    settings: &Settings,
    templates: &Templates,
    cfg: &BlahConfig,
) -> Result<CreateSequence, SequenceAdError> {
    let name = sequence_name(job, &cfg.name_prefix);
    let app = job.app()?.name.as_str();
    // Binds and checks the inputs and that the arguments can be carried.
    let batch = input_files::stage(map::submit_batch(job, &name, templates, cfg)?, None)?;
    for state in &settings.state_names {
        if !templates.outputs.contains(state) {
            return Err(SequenceAdError::StateNotOutput { name: state.clone(), app: app.into(), outputs: templates.outputs.join(", ") });
        }
    }
    let inputs = batch.jobs.into_iter().flat_map(|j| j.inputs);
    let (state, own): (Vec<_>, Vec<_>) = inputs.partition(|f| settings.state_names.contains(&f.dst_name));
    // The initial files in the order of +remote_BoincStateFiles.
    let mut state_files = Vec::with_capacity(settings.state_names.len());
    for wanted in &settings.state_names {
        match state.iter().find(|f| &f.dst_name == wanted) {
            Some(f) => state_files.push((f.src.clone(), f.dst_name.clone())),
            None => {
                let inputs = templates.inputs.join(", ");
                return Err(SequenceAdError::Map(MapError::Binding {
                    app: app.into(),
                    inputs: format!("the inputs {inputs}"),
                    problem: format!("the state file {wanted} is not one of them"),
                }));
            }
        }
    }
    let def = SequenceDef {
        name,
        app_name: app.into(),
        max_step_time: settings.max_step_time,
        max_attempts: settings.max_attempts,
        end_marker: settings.end_marker.clone(),
        state_names: settings.state_names.clone(),
        args: checked(&job.args)?.clone(),
        inputs: own.into_iter().map(|f| (f.src, f.dst_name)).collect(),
        // Set by the caller for a job its pool placed.
        pool: None,
    };
    Ok(CreateSequence { def, steps: settings.steps, state_files })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence_settings::{is_sequence, MAX_ATTEMPTS, MAX_STEP_TIME};
    use gahp_protocol::classad::ClassAd;
    use std::path::{Path, PathBuf};

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    fn stepper() -> Templates {
        Templates { inputs: vec!["state".into(), "extra".into()], outputs: vec!["state".into(), "DONE".into()] }
    }

    fn job(iwd: &Path, extra: &str) -> ClassAd {
        ad(&format!(
            "[ Iwd = \"{}\"; JobDirectory = \"home_bl_127.0.0.1_9618_vm_4.0_17\"; TransferInput = \"state, extra\"; \
             Arguments = \"--work 'a b'\"; {extra} ]",
            iwd.display()
        ))
    }

    /// The job of `a`, whose app is the stepper.
    fn typed(a: &ClassAd) -> BlahJob {
        BlahJob::parse(a, &BlahConfig { default_app: Some("stepper".into()), ..BlahConfig::default() }).unwrap()
    }

    fn create(a: &ClassAd, s: &Settings) -> Result<CreateSequence, SequenceAdError> {
        create_sequence(&typed(a), s, &stepper(), &BlahConfig::default())
    }

    fn seq_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state"), "").unwrap();
        std::fs::write(dir.path().join("extra"), "x").unwrap();
        dir
    }

    #[test]
    fn a_job_without_steps_is_no_sequence() {
        let a = ad("[ Iwd = \"/w\"; TransferInput = \"state\"; BoincStateFiles = \"state\" ]");
        assert!(!is_sequence(&a));
        assert_eq!(settings(&a), Ok(None));
    }

    #[test]
    fn a_sequence_job_maps_to_one_create_with_the_state_split_from_the_inputs() {
        let dir = seq_files();
        let w = dir.path();
        let a = job(w, "BoincSequenceSteps = 10; BoincStateFiles = \"state\"; BoincMaxStepTime = 600; BoincEndMarker = \"DONE\"");
        let s = settings(&a).unwrap().unwrap();
        assert_eq!(
            s,
            Settings { steps: 10, state_names: vec!["state".into()], max_step_time: 600, max_attempts: 3, end_marker: Some("DONE".into()) }
        );
        let c = create(&a, &s).unwrap();
        assert_eq!(c.steps, 10);
        assert_eq!(c.state_files, [(w.join("state"), "state".to_string())]);
        assert_eq!(
            c.def,
            SequenceDef {
                name: "blah-home_bl_127.0.0.1_9618_vm_4.0_17".into(),
                app_name: "stepper".into(),
                max_step_time: 600,
                max_attempts: 3,
                end_marker: Some("DONE".into()),
                state_names: vec!["state".into()],
                args: vec!["--work".into(), "a b".into()],
                inputs: vec![(w.join("extra"), "extra".into())],
                pool: None,
            }
        );
        // The same ad again (a release) gives the same definition: it resumes.
        assert_eq!(create(&a, &s).unwrap().def, c.def);
    }

    #[test]
    fn defaults_and_a_name_that_needs_hashing() {
        let a = ad("[ Iwd = \"/w\"; JobDirectory = \"a b/c\"; TransferInput = \"/in/state\"; BoincSequenceSteps = 1; \
                    BoincStateFiles = \" state \" ]");
        let s = settings(&a).unwrap().unwrap();
        assert_eq!((s.max_step_time, s.max_attempts, s.end_marker), (DEFAULT_MAX_STEP_TIME, DEFAULT_MAX_ATTEMPTS, None));
        let name = sequence_name(&typed(&a), "");
        assert!(name.starts_with("blah-md5-") && gahp_sequences::decide::bad_name(&name).is_none(), "{name}");
        let plain = sequence_name(&typed(&ad("[ JobDirectory = \"home_bl_x.0_1\" ]")), "");
        assert!(gahp_sequences::decide::bad_name(&plain).is_none(), "{plain}");
        // A served client's: its prefix, and still a name a sequence may have.
        let served = sequence_name(&typed(&ad("[ JobDirectory = \"home_bl_x.0_1\" ]")), "alice~");
        assert_eq!(served, "alice~blah-home_bl_x.0_1");
        assert!(gahp_sequences::decide::bad_name(&served).is_none(), "{served}");
        assert!(sequence_name(&typed(&a), "alice~").starts_with("alice~blah-md5-"));
    }

    #[test]
    fn bad_values_are_refused_saying_what_to_change() {
        let w = PathBuf::from("/w");
        let base = "BoincStateFiles = \"state\"";
        let refused = |extra: &str| settings(&job(&w, extra)).unwrap_err();
        for steps in ["0", "-3", "2.5", "\"10\"", "4294967296", "true"] {
            let e = refused(&format!("BoincSequenceSteps = {steps}; {base}"));
            assert!(matches!(e, SequenceAdError::NotCount { attr: STEPS, .. }), "{steps}: {e}");
            assert!(e.to_string().contains("+remote_BoincSequenceSteps must be a whole number"), "{e}");
        }
        let e = refused(&format!("BoincSequenceSteps = 5; {base}; BoincMaxStepTime = 0"));
        assert!(matches!(e, SequenceAdError::NotCount { attr: MAX_STEP_TIME, .. }), "{e}");
        let e = refused(&format!("BoincSequenceSteps = 5; {base}; BoincMaxAttempts = 1.5"));
        assert!(matches!(e, SequenceAdError::NotCount { attr: MAX_ATTEMPTS, .. }), "{e}");
        assert_eq!(refused("BoincSequenceSteps = 5"), SequenceAdError::NoStateFiles);
        assert_eq!(refused("BoincSequenceSteps = 5; BoincStateFiles = \"  \""), SequenceAdError::NoStateFiles);
        assert_eq!(refused("BoincSequenceSteps = 5; BoincStateFiles = \"state ckpt\""), SequenceAdError::StateNotInput("ckpt".into()));
        assert_eq!(refused("BoincSequenceSteps = 5; BoincStateFiles = \"s/state\""), SequenceAdError::BadStateName("s/state".into()));
        let e = refused(&format!("BoincSequenceSteps = 5; {base}; BoincEndMarker = \"out/DONE\""));
        assert_eq!(e, SequenceAdError::BadEndMarker("\"out/DONE\"".into()));
        assert!(e.hold_reason().contains("no '/'") && e.hold_reason().ends_with("condor_release the job"), "{}", e.hold_reason());
        assert_eq!(refused(&format!("BoincSequenceSteps = 5; {base}; BoincEndMarker = 3")), SequenceAdError::BadEndMarker("3".into()));
        assert_eq!(refused(&format!("BoincSequenceSteps = 5; {base}; BoincUnzipOutputs = true")), SequenceAdError::Unzip);
    }

    #[test]
    fn a_state_file_the_app_never_writes_or_a_missing_input_is_a_hold() {
        let dir = seq_files();
        let a = job(dir.path(), "BoincSequenceSteps = 2; BoincStateFiles = \"extra\"");
        let s = settings(&a).unwrap().unwrap();
        let e = create(&a, &s).unwrap_err();
        assert!(matches!(&e, SequenceAdError::StateNotOutput { name, .. } if name == "extra"), "{e}");
        std::fs::remove_file(dir.path().join("extra")).unwrap();
        let a = job(dir.path(), "BoincSequenceSteps = 2; BoincStateFiles = \"state\"");
        let s = settings(&a).unwrap().unwrap();
        let e = create(&a, &s).unwrap_err();
        assert!(matches!(e, SequenceAdError::Map(MapError::Input { .. })), "{e}");
    }
}
