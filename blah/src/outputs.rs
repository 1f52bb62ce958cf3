//! What a finished BLAH job leaves behind before its final status goes out
//! (the gridmanager moves no files for a local GAHP: `docs/spec/blah-dialect.md`
//! §7.1), and the status ads. Downloads use OutputFetcher's machinery: a
//! temporary file beside the destination, renamed over it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, CompletedJob, Script, Templates};
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::error_text::{one_line, MAX_HOLD_REASON};
use gahp_protocol::gahp::sequence_commands::SequenceState;

use crate::batch_zip::SharedBatchZip;
use crate::job::BlahJob;
use crate::map::{self, OutputPlan, STDOUT_OUTPUT};
use crate::runner;
use gahp_project::output_fetcher::{append, check_output_names, completed_job, fetch_file};
use gahp_project::rpc::{Rpc, RpcClient};
use gahp_project::ProjectKey;
use gahp_services::atomic_file::{self, copy_whole};
use gahp_services::config::UnpackLimits;
use gahp_services::unpack;

/// `[ BatchjobId = "<batch>"; JobStatus = n ]`
pub fn status_ad(batch: &str, status: i32) -> ClassAd {
    let mut ad = ClassAd::new();
    ad.insert("BatchjobId", Value::Str(batch.to_string()));
    ad.insert("JobStatus", Value::Int(status.into()));
    ad
}

/// A held job's ad: the gridmanager puts the reason on the job, as one
/// line of at most `MAX_HOLD_REASON` characters; a longer or multi-line
/// reason goes to the log whole.
pub fn held_ad(batch: &str, reason: &str) -> ClassAd {
    const PREFIX: &str = "boinc-gahp: ";
    let line = one_line(reason, MAX_HOLD_REASON - PREFIX.len());
    if line != reason {
        tracing::warn!(batch, "holding the job; the whole reason: {reason}");
    }
    let mut ad = status_ad(batch, job_status::HELD);
    ad.insert("HoldReason", Value::Str(format!("{PREFIX}{line}")));
    ad
}

/// Places a completed (DONE) job's files: each planned output, `Out` (the
/// app's `stdout` output, else an empty file) and `Err` (the BOINC stderr
/// text, from `job`, its query_completed_job); returns its status-4 ad.
/// `templates` are its app's (the project actor's cache: no get_templates
/// per job). An output `zip` (its batch's) holds is taken from it; any
/// other is downloaded alone.
#[allow(clippy::too_many_arguments)]
pub async fn deliver_done(
    rpc: &Addr<RpcClient>,
    key: &ProjectKey,
    batch: &str,
    submitted: &BlahJob,
    templates: &Templates,
    job: &CompletedJob,
    zip: Option<&SharedBatchZip>,
    limits: UnpackLimits,
    deadline: Instant,
) -> Result<ClassAd, String> {
    check_output_names(templates)?;
    let app = submitted.app.as_ref().map(|a| a.name.as_str()).unwrap_or_default();
    let plan = map::output_plan(submitted, app, &templates.outputs).map_err(|e| e.to_string())?;

    for (name, dest) in &plan.files {
        get_output(rpc, key, batch, templates, zip, name, dest, deadline).await?;
    }
    if let Some(unzip) = &plan.unzip {
        // Every archive is fetched and unpacked, and what comes out of
        // them checked, before anything of them is placed.
        let mut fetched = Vec::new();
        for name in &unzip.archives {
            // Fetched beside its entries' destination, removed when done.
            let tmp =
                atomic_file::temp_beside(&unzip.dir.join(name)).map_err(|e| format!("can't write in {}: {e}", unzip.dir.display()))?;
            get_output(rpc, key, batch, templates, zip, name, tmp.path(), deadline).await?;
            fetched.push(tmp);
        }
        let paths: Vec<PathBuf> = fetched.iter().map(|t| t.path().to_path_buf()).chain(plan.files.iter().map(|(_, d)| d.clone())).collect();
        let (dir, expected, own) = (unzip.dir.clone(), unzip.expected.clone(), map::own_files(submitted, &unzip.dir));
        tokio::task::spawn_blocking(move || unpack_outputs(&paths, &dir, &expected, &own, &limits))
            .await
            .unwrap_or_else(|e| Err(format!("internal error: {e}")))?;
        drop(fetched);
    }
    if let Some(out) = &plan.out {
        if templates.outputs.iter().any(|n| n == STDOUT_OUTPUT) {
            get_output(rpc, key, batch, templates, zip, STDOUT_OUTPUT, out, deadline).await?;
        } else {
            write_whole(out, b"").map_err(|e| format!("can't write {}: {e}", out.display()))?;
        }
    }
    write_err(&plan, &job.stderr_out)?;

    let mut done = status_ad(batch, job_status::COMPLETED);
    done.insert("ExitCode", Value::Int(job.exit_status));
    done.insert("ExitBySignal", Value::Bool(false));
    done.insert("RemoteWallClockTime", Value::Real(job.elapsed_time));
    done.insert("RemoteUserCpu", Value::Real(job.cpu_time));
    Ok(done)
}

/// Fetches the app output `name` of job `batch` to `dest`: from the
/// batch's zip when it holds it, else downloaded alone.
#[allow(clippy::too_many_arguments)]
async fn get_output(
    rpc: &Addr<RpcClient>,
    key: &ProjectKey,
    batch: &str,
    templates: &Templates,
    zip: Option<&SharedBatchZip>,
    name: &str,
    dest: &Path,
    deadline: Instant,
) -> Result<u64, String> {
    let index = templates.outputs.iter().position(|n| n == name);
    if let Some((zip, i)) = zip.cloned().zip(index) {
        // Off the actors' thread: an entry may be large.
        let (j, d) = (batch.to_string(), dest.to_path_buf());
        let taken = tokio::task::spawn_blocking(move || zip.lock().unwrap_or_else(|e| e.into_inner()).extract(&j, i, &d))
            .await
            .unwrap_or_else(|e| Err(format!("internal error: {e}")));
        match taken {
            Ok(true) => return Ok(0),
            Ok(false) => {}
            Err(e) => tracing::info!(job = batch, "can't take {name} from the batch's zip ({e}); downloading it alone"),
        }
    }
    let url = index
        .map(|i| request::output_url(&key.url, &key.authenticator, batch, i))
        .ok_or_else(|| format!("the app has no output {name}"))?;
    fetch_file(rpc, url, dest, deadline).await.map_err(|e| format!("can't fetch {}: {e}", dest.display()))
}

/// Places a runner job's files (docs/runner.md "Back on the submit host")
/// from the runner's output archive, and returns its status-4 ad with the
/// exit code of the job's own program.
#[allow(clippy::too_many_arguments)]
pub async fn deliver_runner_done(
    rpc: &Addr<RpcClient>,
    key: &ProjectKey,
    batch: &str,
    submitted: &BlahJob,
    templates: &Templates,
    job: &CompletedJob,
    zip: Option<&SharedBatchZip>,
    limits: UnpackLimits,
    deadline: Instant,
) -> Result<ClassAd, String> {
    let plan = map::runner_placement(submitted).map_err(|e| e.to_string())?;
    let tmp =
        atomic_file::temp_beside(&plan.iwd.join(runner::OUT_ZIP)).map_err(|e| format!("can't write in {}: {e}", plan.iwd.display()))?;
    get_output(rpc, key, batch, templates, zip, runner::OUT_ZIP, tmp.path(), deadline).await?;
    // The runner's own stderr (BOINC's wrapper) is for the admin.
    tracing::debug!(job = batch, "the runner's stderr: {}", job.stderr_out);
    let exit = tokio::task::spawn_blocking(move || runner::place_outputs(tmp.path(), &plan, &limits))
        .await
        .unwrap_or_else(|e| Err(format!("internal error: {e}")))?;
    let mut done = status_ad(batch, job_status::COMPLETED);
    match exit {
        runner::Exit::Code(code) => {
            done.insert("ExitCode", Value::Int(code));
            done.insert("ExitBySignal", Value::Bool(false));
        }
        runner::Exit::Signal(signal) => {
            done.insert("ExitBySignal", Value::Bool(true));
            done.insert("ExitSignal", Value::Int(signal));
        }
    }
    done.insert("RemoteWallClockTime", Value::Real(job.elapsed_time));
    done.insert("RemoteUserCpu", Value::Real(job.cpu_time));
    Ok(done)
}

/// The final status of a job BOINC reports as ERROR: 3 if it was aborted
/// there (not by us: we stop watching what we cancel), else 4 with the
/// failed instances' exit status, and empty `Out` / BOINC stderr in `Err`
/// when the job's ad is known.
pub async fn resolve_error(
    rpc: &Addr<RpcClient>,
    key: &ProjectKey,
    boinc_batch: &str,
    batch: &str,
    job: Option<&BlahJob>,
    deadline: Instant,
) -> Result<(i32, ClassAd), String> {
    let auth = &key.authenticator;
    let xml = request::query_batch_details(auth, boinc_batch);
    let jobs = rpc
        .idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch_details, deadline)
        .await
        .map_err(|e| format!("can't query BOINC batch {boinc_batch}: {e}"))?;
    let details =
        jobs.into_iter().find(|j| j.name == batch).ok_or_else(|| format!("BOINC batch {boinc_batch} has no job named {batch}"))?;
    if details.errors.iter().any(|e| e == "cancelled") {
        let mut removed = status_ad(batch, job_status::REMOVED);
        removed.insert("RemoveReason", Value::Str("the BOINC job was aborted on the project".into()));
        return Ok((job_status::REMOVED, removed));
    }
    // Servers on PHP >= 8.1 die on this query for a job without a canonical
    // instance: stderr and times are then unknown.
    let completed = completed_job(rpc, auth, batch, deadline).await.ok().filter(|c| c.error_resultid != 0);
    let exit = details.exit_statuses.last().copied().or(completed.as_ref().map(|c| c.exit_status));
    let mut reason = format!("BOINC job failed ({})", details.errors.join(", "));
    if let Some(e) = exit {
        reason.push_str(&format!("; exit status {e}"));
    }
    if let Some(job) = job {
        let plan =
            map::std_streams(job).map(|(_, out, err)| OutputPlan { files: vec![], out, err, unzip: None }).map_err(|e| e.to_string())?;
        if let Some(out) = &plan.out {
            write_whole(out, b"").map_err(|e| format!("can't write {}: {e}", out.display()))?;
        }
        // The instance BOINC's PHP picks may be one that succeeded but was
        // never agreed on (a quorum's disagreeing host): its log is a
        // stranger's word, not the job's. A host error's log is kept.
        let host_error = completed.as_ref().filter(|c| c.exit_status != 0);
        write_err(&plan, host_error.map_or("", |c| c.stderr_out.as_str()))?;
    }
    let mut failed = status_ad(batch, job_status::COMPLETED);
    // Exit codes outside 1..=255 (BOINC's negative client errors, or none)
    // read as 1; the BOINC value is in ExitReason.
    failed.insert("ExitCode", Value::Int(exit.filter(|e| (1..=255).contains(e)).unwrap_or(1)));
    failed.insert("ExitBySignal", Value::Bool(false));
    failed.insert("ExitReason", Value::Str(reason));
    if let Some(c) = &completed {
        failed.insert("RemoteWallClockTime", Value::Real(c.elapsed_time));
        failed.insert("RemoteUserCpu", Value::Real(c.cpu_time));
    }
    Ok((job_status::COMPLETED, failed))
}

/// A sequence job's status ad: the BLAH status and how far the chain got.
pub fn sequence_ad(batch: &str, status: i32, state: &SequenceState) -> ClassAd {
    let mut ad = status_ad(batch, status);
    ad.insert("BoincStepsDone", Value::Int(state.steps_done.into()));
    ad.insert("BoincStepsPlanned", Value::Int(state.steps_planned.into()));
    ad.insert("BoincCurrentStep", Value::Int(state.current_step.into()));
    ad.insert("BoincStepAttempt", Value::Int(state.attempt.into()));
    ad.insert("BoincRelocations", Value::Int(state.relocations.into()));
    ad
}

/// Places a completed work sequence's files, fetched into `staged` (the
/// last step's outputs and the final state files), as `deliver_done` places
/// a job's: each planned output (one the app did not write is skipped
/// unless `transfer_output_files` names it), `Out` (the app's `stdout`
/// output, else empty) and an empty `Err`; returns the status-4 ad.
pub fn place_sequence(
    batch: &str,
    job: &BlahJob,
    app: &str,
    outputs: &[String],
    staged: &Path,
    state: &SequenceState,
) -> Result<ClassAd, String> {
    let plan = map::output_plan(job, app, outputs).map_err(|e| e.to_string())?;
    let named = job.outputs.is_some();
    let copy = |src: &Path, dest: &Path| copy_whole(src, dest).map_err(|e| format!("can't write {}: {e}", dest.display()));
    for (name, dest) in &plan.files {
        let src = staged.join(name);
        if src.is_file() {
            copy(&src, dest)?;
        } else if named {
            return Err(format!("the last step of the work sequence left no {name}"));
        }
    }
    if let Some(out) = &plan.out {
        let src = staged.join(STDOUT_OUTPUT);
        if src.is_file() {
            copy(&src, out)?;
        } else {
            write_whole(out, b"").map_err(|e| format!("can't write {}: {e}", out.display()))?;
        }
    }
    write_err(&plan, "")?;
    let mut done = sequence_ad(batch, job_status::COMPLETED, state);
    done.insert("ExitCode", Value::Int(0));
    done.insert("ExitBySignal", Value::Bool(false));
    Ok(done)
}

/// The final status of a failed work sequence, as a failed BOINC job's
/// (`resolve_error`): 4 with exit code 1 and the reason in `ExitReason`,
/// an empty `Out` and the reason in `Err`.
pub fn sequence_failed(batch: &str, job: &BlahJob, state: &SequenceState) -> Result<(i32, ClassAd), String> {
    let reason = format!("BOINC work sequence failed: {}", state.reason.as_deref().unwrap_or("no reason recorded"));
    let plan = map::std_streams(job).map(|(_, out, err)| OutputPlan { files: vec![], out, err, unzip: None }).map_err(|e| e.to_string())?;
    if let Some(out) = &plan.out {
        write_whole(out, b"").map_err(|e| format!("can't write {}: {e}", out.display()))?;
    }
    write_err(&plan, &reason)?;
    let mut failed = sequence_ad(batch, job_status::COMPLETED, state);
    failed.insert("ExitCode", Value::Int(1));
    failed.insert("ExitBySignal", Value::Bool(false));
    failed.insert("ExitReason", Value::Str(reason));
    Ok((job_status::COMPLETED, failed))
}

/// `+remote_BoincUnzipOutputs`: each of `paths` that is a zip archive (by
/// its content, as BOINC names outputs freely) is unpacked within
/// `limits`; the files the job named (`expected`: name in an archive,
/// destination) come from them, and without names the files they hold at
/// their top, as a runner job's (`runner::made_files`). All are checked
/// before one is placed.
fn unpack_outputs(
    paths: &[PathBuf],
    dir: &Path,
    expected: &[(String, PathBuf)],
    own: &[PathBuf],
    limits: &UnpackLimits,
) -> Result<(), String> {
    let mut unpacked = Vec::new();
    for path in paths {
        let mut magic = [0u8; 4];
        let is_zip =
            std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok() && magic == *b"PK\x03\x04";
        if is_zip {
            let u = unpack::unpack(path, dir, limits).map_err(|e| format!("{} was refused: {e}", path.display()))?;
            unpacked.push(u);
        }
    }
    let mut moves = Vec::new();
    if expected.is_empty() {
        for u in &unpacked {
            moves.extend(runner::made_files(u, dir, own, |_| true)?);
        }
    }
    for (name, dest) in expected {
        let rel = Path::new(name);
        let src = unpacked.iter().find(|u| u.files.iter().any(|f| f == rel)).map(|u| u.root().join(rel));
        let src = src.ok_or_else(|| format!("{name} is neither an output of the app nor in its zip outputs"))?;
        moves.push((src, dest.clone()));
    }
    for (_, dest) in &moves {
        unpack::check_dest(dir, dest).map_err(|e| format!("the job's file {} is not placed: {e}", dest.display()))?;
    }
    for (src, dest) in moves {
        unpack::place(&src, dir, &dest).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `Err` gets the stderr text; when it is also `Out`, after Out's content.
fn write_err(plan: &OutputPlan, stderr: &str) -> Result<(), String> {
    let Some(err) = &plan.err else { return Ok(()) };
    let r = if plan.out.as_ref() == Some(err) {
        append(err, stderr)
    } else {
        let mut text = stderr.to_string();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        write_whole(err, text.as_bytes())
    };
    r.map_err(|e| format!("can't write {}: {e}", err.display()))
}

/// The file is whole or absent.
fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    atomic_file::write_whole(path, |f| f.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_testkit::zip_file;

    /// `+remote_BoincUnzipOutputs` keeps a host's zip to what a runner
    /// job gets back: its top-level files, or the files named; never a
    /// dot-file, a folder, a file through a link in `Iwd`, or one over the
    /// job's own files; nothing placed when one is refused.
    #[test]
    fn unzipped_outputs_keep_to_the_jobs_files() {
        let t = tempfile::tempdir().unwrap();
        let (iwd, elsewhere) = (t.path().join("home"), t.path().join("elsewhere"));
        std::fs::create_dir_all(&iwd).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, iwd.join("data")).unwrap();
        std::fs::write(iwd.join("in.txt"), "mine").unwrap();
        let limits = UnpackLimits::default();
        let listing = || {
            let mut l: Vec<String> = std::fs::read_dir(&iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            l.sort();
            l
        };
        let z = zip_file(&[("upper.txt", b"UP"), (".bashrc", b"evil"), ("sub/deep.txt", b"d"), ("data/x", b"evil")]);
        unpack_outputs(&[z.path().to_path_buf()], &iwd, &[], &[], &limits).unwrap();
        assert_eq!(listing(), ["data", "in.txt", "upper.txt"]);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

        // Named, through the link: refused, nothing placed.
        let z = zip_file(&[("a.txt", b"a"), ("x", b"evil")]);
        let named = [("a.txt".to_string(), iwd.join("a.txt")), ("x".to_string(), iwd.join("data/x"))];
        let e = unpack_outputs(&[z.path().to_path_buf()], &iwd, &named, &[], &limits).unwrap_err();
        assert!(e.contains("is a link"), "{e}");
        assert!(!iwd.join("a.txt").exists() && std::fs::read_dir(&elsewhere).unwrap().count() == 0);

        // Over the job's own input: refused, the input as it was.
        let z = zip_file(&[("in.txt", b"evil"), ("b.txt", b"b")]);
        let e = unpack_outputs(&[z.path().to_path_buf()], &iwd, &[], &[iwd.join("in.txt")], &limits).unwrap_err();
        assert!(e.contains("replace its own"), "{e}");
        assert_eq!(std::fs::read_to_string(iwd.join("in.txt")).unwrap(), "mine");
        assert!(!iwd.join("b.txt").exists());

        // Over a bound: refused before anything is written.
        let z = zip_file(&[("c.txt", &[b'c'; 2000])]);
        let small = UnpackLimits { max_bytes: 1000, ..limits };
        let e = unpack_outputs(&[z.path().to_path_buf()], &iwd, &[], &[], &small).unwrap_err();
        assert!(e.contains("more than 1000"), "{e}");
        assert_eq!(listing(), ["data", "in.txt", "upper.txt"], "no scratch left");
    }
}
