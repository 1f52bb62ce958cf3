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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::environment;
    use crate::map::submit_batch_with_urls as map_with_urls;
    use crate::map::tests::{ad, app_of, cfg, templates, typed};
    use crate::url_inputs::UrlInputs;
    use gahp_protocol::boinc::Templates;
    use gahp_protocol::classad::ClassAd;
    use gahp_protocol::gahp::ParamValue;
    use gahp_services::config::{BlahConfig, EnvironmentPolicy};

    /// The ad's job mapped (pure) and its inputs staged (IO).
    fn submit_batch(
        a: &ClassAd,
        batch: &str,
        app: &str,
        templates: &Templates,
        cfg: &BlahConfig,
        scratch: Option<&Path>,
    ) -> Result<SubmitBatch, MapError> {
        let urls = UrlInputs::refused("is a URL, and a work sequence job takes local files only: give local files");
        submit_batch_with_urls(a, batch, app, templates, cfg, scratch, &urls)
    }

    fn submit_batch_with_urls(
        a: &ClassAd,
        batch: &str,
        app: &str,
        templates: &Templates,
        cfg: &BlahConfig,
        scratch: Option<&Path>,
        urls: &UrlInputs,
    ) -> Result<SubmitBatch, MapError> {
        let mapped = map_with_urls(&typed(a, app, cfg), batch, templates, cfg, urls)?;
        stage(mapped, scratch)
    }

    #[test]
    fn a_mapped_job_whose_files_are_not_there_is_held_naming_the_first() {
        let a = ad("[ Iwd = \"/nowhere\"; TransferInput = \"b, a\"; In = \"s\" ]");
        let mapped = crate::map::submit_batch(&typed(&a, "u", &cfg()), "n", &templates(&["a", "b", "stdin"]), &cfg()).unwrap();
        let e = stage(mapped, None).unwrap_err();
        assert!(matches!(&e, MapError::Input { path, .. } if path == "/nowhere/a"), "{e}");
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
        assert_eq!(e.to_string(), "RequestDisk = -5 is not a positive number");
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
        assert!(app_of(&job, &plain).unwrap_err().contains("no container runner app is configured"));
        let e = submit_batch(&job, "n", "runner", &runner_t, &plain, Some(w)).unwrap_err();
        assert!(matches!(e, MapError::NotAContainerRunner { .. }), "{e}");
        let box_ = gahp_services::config::AppConfig { container: true, ..Default::default() };
        let c = BlahConfig { container_runner_app: Some("docker".into()), apps: [("docker".to_string(), box_)].into(), ..plain };
        assert_eq!(app_of(&job, &c).unwrap(), ("docker".into(), "container_runner_app"));
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
            Err(MapError::InAd(e)) if e.starts_with("can't parse Arguments")
        ));
    }
}
