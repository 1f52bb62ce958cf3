//! The IO a mapped job's inputs need before it goes to BOINC (`map` is
//! pure): each bound file checked to be a regular file; for a runner job,
//! its executable checked and the archive of its inputs, stdin,
//! environment and image written. Blocking: run off the actors' thread.

use std::path::Path;

use gahp_protocol::gahp::{InputFile, SubmitBatch};

use crate::map::{ArchiveSource, BoundInput, InputSources, MapError, MappedJob};
use crate::runner;

/// The job's batch with its inputs staged: `scratch` takes a runner job's
/// archive (`None`, a work sequence's step, can't run through a runner).
pub fn stage(mapped: MappedJob, scratch: Option<&Path>) -> Result<SubmitBatch, MapError> {
    let MappedJob { mut batch, inputs } = mapped;
    let files = match inputs {
        InputSources::Bound(bound) => checked_files(bound)?,
        InputSources::Runner { exe, env, image, entries, stdin } => {
            regular_file(&exe).map_err(|problem| MapError::Executable { path: exe.display().to_string(), problem })?;
            let scratch = scratch.ok_or_else(|| MapError::Archive("a work sequence can't run through a runner app".into()))?;
            let env_text = runner::env_file(&env).map_err(MapError::EnvironmentLine)?;
            let mut archive = vec![runner::Entry::Text { name: runner::ENV_FILE.into(), text: env_text }];
            if let Some(image) = image {
                archive.push(runner::Entry::Text { name: runner::IMAGE_FILE.into(), text: format!("{image}\n") });
            }
            for source in entries {
                match source {
                    ArchiveSource::Fetched { name, src } => archive.push(runner::Entry::File { name, src }),
                    ArchiveSource::Local { entry, path, contents_only } => runner::entries_of(&path, contents_only, &mut archive)
                        .map_err(|e| MapError::Input { path: entry, from: "transfer_input_files", problem: e.to_string() })?,
                }
            }
            if let Some(src) = stdin {
                if !src.is_file() {
                    let problem = "can't be read as a file".to_string();
                    return Err(MapError::Input { path: src.display().to_string(), from: "input", problem });
                }
                archive.push(runner::Entry::File { name: runner::STDIN_FILE.into(), src });
            }
            let zip = runner::write_archive(scratch, archive).map_err(|e| MapError::Archive(e.to_string()))?;
            vec![InputFile { src: exe, dst_name: runner::EXE_INPUT.into() }, InputFile { src: zip, dst_name: runner::JOB_ZIP.into() }]
        }
    };
    if let Some(job) = batch.jobs.first_mut() {
        job.inputs = files;
    }
    Ok(batch)
}

/// Each bound file, checked to be a regular file (in the template's order).
fn checked_files(bound: Vec<BoundInput>) -> Result<Vec<InputFile>, MapError> {
    let mut files = Vec::with_capacity(bound.len());
    for BoundInput { src, dst_name, from, shown } in bound {
        match std::fs::metadata(&src) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(MapError::Input { path: shown, from, problem: "is not a regular file".into() }),
            Err(e) => return Err(MapError::Input { path: shown, from, problem: format!("can't be read: {e}") }),
        }
        files.push(InputFile { src, dst_name });
    }
    Ok(files)
}

fn regular_file(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err("it is not a regular file".into()),
        Err(e) => Err(e.to_string()),
    }
}
