//! OutputFetcher: BOINC_FETCH_OUTPUT for one project. Every file is
//! downloaded to a temporary file beside its destination and renamed into
//! place, so it appears whole or not at all; a `.zip` output is extracted
//! entry by entry with a zip library, refusing paths that leave the
//! directory; renames are done here, never through a shell.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, CompletedJob, Script, Templates};
use gahp_protocol::gahp::{CommandResult, FetchMode, FetchOutput};
use gahp_protocol::Authenticator;

use crate::rpc::{Rpc, RpcClient, RpcError};
use crate::ProjectKey;
use gahp_services::atomic_file;
use gahp_services::config::UnpackLimits;
use gahp_services::unpack;

pub struct OutputFetcher {
    key: ProjectKey,
    rpc: Addr<RpcClient>,
    limits: UnpackLimits,
}

impl OutputFetcher {
    pub fn new(key: ProjectKey, rpc: Addr<RpcClient>, limits: UnpackLimits) -> Self {
        OutputFetcher { key, rpc, limits }
    }
}

impl Actor for OutputFetcher {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "CommandResult")]
pub struct Fetch {
    pub fetch: FetchOutput,
    pub deadline: Instant,
}

impl Handler<Fetch> for OutputFetcher {
    type Result = ResponseFuture<CommandResult>;

    fn handle(&mut self, msg: Fetch, _: &mut Context<Self>) -> Self::Result {
        let (key, rpc, limits) = (self.key.clone(), self.rpc.clone(), self.limits);
        Box::pin(async move {
            match fetch(&key, &rpc, &msg.fetch, limits, msg.deadline).await {
                Ok(r) => r,
                Err(e) => CommandResult::Error(key.authenticator.redact_in(&e)),
            }
        })
    }
}

async fn fetch(
    key: &ProjectKey,
    rpc: &Addr<RpcClient>,
    f: &FetchOutput,
    limits: UnpackLimits,
    deadline: Instant,
) -> Result<CommandResult, String> {
    let auth = &key.authenticator;
    // Neither answer needs the other: both asked at once (a failure of
    // the templates is the one reported, as when they were asked first).
    let (templates, job) =
        futures_util::future::join(output_templates(rpc, auth, &f.job_name, deadline), completed_job(rpc, auth, &f.job_name, deadline))
            .await;
    let (templates, job) = (templates?, job?);

    let dir = &f.dir;
    if job.canonical_resultid != 0 || job.error_resultid != 0 {
        let path = dir.join(&f.stderr_file);
        append(&path, &job.stderr_out).map_err(|e| format!("can't open stderr output file {}: {e}", path.display()))?;
    }

    let get = |i: usize, dest: PathBuf| {
        let url = request::output_url(&key.url, auth, &f.job_name, i);
        async move { fetch_file(rpc, url, &dest, deadline).await.map_err(|e| format!("get_output_file() returned {e}")) }
    };

    let outputs = &templates.outputs;
    if outputs.len() == 1 && outputs[0].ends_with(".zip") {
        if f.job_name.contains('/') {
            return Err("unzip failed: the job name contains '/'".into());
        }
        let zip = dir.join(format!("{}_output.zip", f.job_name));
        get(0, zip.clone()).await?;
        let target = dir.clone();
        let extracted = tokio::task::spawn_blocking(move || {
            let r = unzip_into(&zip, &target, &limits);
            if r.is_ok() {
                let _ = fs::remove_file(&zip);
            }
            r
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        extracted.map_err(|e| format!("unzip failed: {e}"))?;
    } else {
        match f.mode {
            FetchMode::All => {
                for (i, name) in outputs.iter().enumerate() {
                    get(i, dir.join(name)).await?;
                }
            }
            FetchMode::Some => {
                for (k, spec) in f.specs.iter().enumerate() {
                    let j = match outputs.iter().position(|n| *n == spec.src) {
                        Some(j) => j,
                        None if k >= outputs.len() => {
                            return Err(format!("too many output files specified submit:{k} template:{}", outputs.len()))
                        }
                        None => k,
                    };
                    get(j, dir.join(&spec.src)).await?;
                }
            }
        }
    }

    // Renames apply in every mode; the first failure is the one reported.
    let mut failed = None;
    for spec in &f.specs {
        if spec.src.as_bytes() == spec.dst.as_os_str().as_encoded_bytes() {
            continue;
        }
        let (from, to) = (dir.join(&spec.src), dir.join(&spec.dst));
        if let Err(e) = move_file(&from, &to) {
            tracing::info!("mv {} -> {} failed: {e}", from.display(), to.display());
            failed.get_or_insert_with(|| format!("mv failed: {} -> {}: {e}", from.display(), to.display()));
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(CommandResult::Output { exit_status: job.exit_status, elapsed_time: job.elapsed_time, cpu_time: job.cpu_time })
}

/// The app templates of a job, checked: every output name must be a plain
/// file name, since it becomes a path here.
pub(crate) async fn output_templates(
    rpc: &Addr<RpcClient>,
    auth: &Authenticator,
    job: &str,
    deadline: Instant,
) -> Result<Templates, String> {
    let xml = request::get_templates_for_job(auth, job);
    let templates = rpc
        .idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, deadline)
        .await
        .map_err(|e| format!("error getting templates: {e}"))?;
    check_output_names(&templates)?;
    Ok(templates)
}

/// Every output name must be a plain file name: it becomes a path here.
pub fn check_output_names(templates: &Templates) -> Result<(), String> {
    match templates.outputs.iter().find(|n| !plain_file_name(n)) {
        Some(bad) => Err(format!("error getting templates: -1 the app's output template names a file outside the job's directory: {bad}")),
        None => Ok(()),
    }
}

/// The finished instance of a job: exit status, times, stderr.
pub async fn completed_job(rpc: &Addr<RpcClient>, auth: &Authenticator, job: &str, deadline: Instant) -> Result<CompletedJob, String> {
    let xml = request::query_completed_job(auth, job);
    rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_completed_job, deadline).await.map_err(|e| {
        match e {
            // The real server dies part-way for a job with no finished
            // instance; the reference reports that as a parse failure.
            RpcError::ServerFatal { message, .. } => {
                format!("query_completed_job() returned -112 the job has no finished instance ({message})")
            }
            e => format!("query_completed_job() returned {e}"),
        }
    })
}

/// Downloads into a temporary file beside `dest`, then renames it over.
pub async fn fetch_file(rpc: &Addr<RpcClient>, url: String, dest: &Path, deadline: Instant) -> Result<u64, RpcError> {
    let cant = |e: io::Error| RpcError::Local(format!("can't create {}: {e}", dest.display()));
    let tmp = atomic_file::temp_beside(dest).map_err(cant)?;
    let n = rpc.download(url, tmp.path().to_path_buf(), deadline).await?;
    atomic_file::persist(tmp, dest).map_err(cant)?;
    Ok(n)
}

/// A name a server may give us: one path component, nothing special.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// Appends a stderr text as a line (a newline added if it has none),
/// whole or not at all; an empty text only makes sure the file exists.
pub fn append(path: &Path, text: &str) -> io::Result<()> {
    let mut line = text.as_bytes().to_vec();
    if !text.is_empty() && !text.ends_with('\n') {
        line.push(b'\n');
    }
    if line.is_empty() && fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    atomic_file::append_whole(path, &line)
}

/// rename(2), or across file systems a copy to a temporary file beside the
/// target, fsync, rename, then removal of the source.
fn move_file(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(18) => {
            atomic_file::write_whole(to, |f| io::copy(&mut fs::File::open(from)?, f).map(|_| ()))?;
            fs::remove_file(from)
        }
        Err(e) => Err(e),
    }
}

/// BOINC_FETCH_OUTPUT's unzip (the C daemon runs `unzip` there): the
/// archive is unpacked within `limits` beside `dir`, then every file is
/// placed at its path below `dir`, folders made as needed, never through
/// a link; a path with a dot-file or dot-folder in it is left out (a host
/// must not plant `.bashrc` in a home directory). All are checked before
/// one is placed.
pub fn unzip_into(zip_path: &Path, dir: &Path, limits: &UnpackLimits) -> Result<(), String> {
    let u = unpack::unpack(zip_path, dir, limits).map_err(|e| e.to_string())?;
    let hidden = |rel: &Path| rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
    let (files, left_out): (Vec<&PathBuf>, Vec<&PathBuf>) = u.files.iter().partition(|rel| !hidden(rel));
    if !left_out.is_empty() {
        tracing::info!(dir = %dir.display(), "not placed (dot-files): {left_out:?}");
    }
    for rel in &files {
        unpack::check_dest(dir, &dir.join(rel)).map_err(|e| e.to_string())?;
    }
    for rel in files {
        unpack::place(&u.root().join(rel), dir, &dir.join(rel)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_testkit::zip_file;

    #[test]
    fn extracts_inside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_file(&[("a.txt", b"A"), ("sub/b.txt", b"B")]);
        unzip_into(z.path(), dir.path(), &UnpackLimits::default()).unwrap();
        assert_eq!(fs::read(dir.path().join("a.txt")).unwrap(), b"A");
        assert_eq!(fs::read(dir.path().join("sub/b.txt")).unwrap(), b"B");
    }

    #[test]
    fn places_no_dot_file_and_nothing_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let (dir, elsewhere) = (t.path().join("job"), t.path().join("elsewhere"));
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        let z = zip_file(&[("a.txt", b"A"), (".bashrc", b"evil"), (".ssh/authorized_keys", b"evil")]);
        unzip_into(z.path(), &dir, &UnpackLimits::default()).unwrap();
        assert!(dir.join("a.txt").is_file());
        assert!(!dir.join(".bashrc").exists() && !dir.join(".ssh").exists());
        std::os::unix::fs::symlink(&elsewhere, dir.join("data")).unwrap();
        let z = zip_file(&[("b.txt", b"B"), ("data/x", b"evil")]);
        let e = unzip_into(z.path(), &dir, &UnpackLimits::default()).unwrap_err();
        assert!(e.contains("is a link"), "{e}");
        assert!(!dir.join("b.txt").exists(), "nothing placed when one is refused");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        let left: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "no scratch left: {left:?}");
    }

    #[test]
    fn refuses_entries_that_escape() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../evil.txt", "/etc/evil.txt", "a/../../evil.txt"] {
            let z = zip_file(&[("ok.txt", b"fine"), (bad, b"evil")]);
            assert!(unzip_into(z.path(), dir.path(), &UnpackLimits::default()).is_err(), "{bad}");
            assert!(!dir.path().join("ok.txt").exists(), "nothing written when one entry is bad");
        }
    }

    #[test]
    fn server_names_must_be_plain() {
        assert!(plain_file_name("out.dat"));
        for bad in ["", ".", "..", "../x", "a/b"] {
            assert!(!plain_file_name(bad));
        }
    }
}
