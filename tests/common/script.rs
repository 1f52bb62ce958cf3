//! Script jobs (docs/runner.md): the simulated project, whose built-in
//! `runner` app really runs a job's script, a daemon config for it, and
//! job directories holding a script.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gahp_protocol::classad::{ClassAd, Value};

use super::blah::str_value;
use super::{gahp_with, GahpClient, Sim};

/// The simulated project, a directory, and a daemon config for it with
/// `extra` in its `[blah]` section (after the project, its key and a
/// 0.3 s status refresh).
pub struct ScriptWorld {
    pub sim: Sim,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl ScriptWorld {
    pub fn new(extra: &str) -> ScriptWorld {
        let sim = Sim::start();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", sim.auth)).unwrap();
        let config = dir.path().join("config.toml");
        let text =
            format!("[blah]\nproject_url = \"{}\"\nauthenticator_file = \"boinc.auth\"\nstatus_refresh_secs = 0.3\n{extra}", sim.url);
        std::fs::write(&config, text).unwrap();
        ScriptWorld { sim, dir, config }
    }

    /// A daemon on this config, in async mode.
    pub fn start(&self) -> GahpClient {
        let mut g = gahp_with(self.dir.path(), &["--config", self.config.to_str().unwrap()], &[]);
        assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
        g
    }

    /// An executable file `name` in the world's directory.
    pub fn script(&self, name: &str, text: &str) -> PathBuf {
        executable(&self.dir.path().join(name), text)
    }

    /// A job directory `name` with the executable `exe` holding `script`,
    /// and `in` holding a line that names the job.
    pub fn job_dir(&self, name: &str, exe: &str, script: &str, input: &str) -> PathBuf {
        let iwd = self.dir.path().join(name);
        std::fs::create_dir_all(&iwd).unwrap();
        executable(&iwd.join(exe), script);
        std::fs::write(iwd.join("in"), format!("{input} {name}\n")).unwrap();
        iwd
    }

    /// How many files the project holds (each uploaded once).
    pub fn project_files(&self) -> usize {
        self.sim.state()["files"].as_array().unwrap().len()
    }
}

fn executable(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// A job's submit ad as the gridmanager writes it for `executable = exe`
/// (sent, as by default) in `iwd`, named after `iwd`, then `attrs`.
pub fn script_job(iwd: &Path, exe: &str, attrs: &[(&str, Value)]) -> ClassAd {
    let name = iwd.file_name().unwrap().to_string_lossy().into_owned();
    let mut ad = gahp_testkit::blah_job_ad(iwd, &format!("home_bl_{name}"), &[]);
    ad.insert("Cmd", str_value(&iwd.join(exe).display().to_string()));
    for (name, value) in attrs {
        ad.insert(*name, value.clone());
    }
    ad
}
