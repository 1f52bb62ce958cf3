//! `boinc_gahp remote-layout`: the directory HTCondor's ssh route starts the
//! daemon from. The real binary makes it; the `blahpd` it links speaks GAHP
//! the way remote_gahp starts it (no arguments); a second run replaces the
//! links in place; a blahp of another batch system is never replaced. (The
//! route itself runs under a real HTCondor: deploy/htcondor-test, `ssh`.)

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `boinc_gahp remote-layout args` with `home` as HOME; (exit code,
/// stdout, stderr).
fn layout(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
        .arg("remote-layout")
        .args(args)
        .env("HOME", home)
        .env("USER", "ann")
        .output()
        .expect("boinc_gahp runs");
    let s = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    (out.status.code().unwrap_or(-1), s(out.stdout), s(out.stderr))
}

/// An executable file standing in for HTCondor's condor_ft-gahp.
fn fake_ft_gahp(dir: &Path) -> String {
    let p = dir.join("condor_ft-gahp");
    std::fs::write(&p, "not run by these tests\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn the_default_directory_has_the_links_the_config_and_the_directories_and_its_blahpd_speaks_gahp() {
    let home = tempfile::tempdir().unwrap();
    let ft = fake_ft_gahp(home.path());
    let (code, out, err) = layout(home.path(), &["--ft-gahp", &ft]);
    assert_eq!(code, 0, "{out}{err}");
    let dir = home.path().join("bosco/glite");
    assert!(out.contains("grid_resource = batch boinc ann@<this host>\n"), "the default needs no --rgahp-glite: {out}");
    let me = Path::new(env!("CARGO_BIN_EXE_boinc_gahp")).canonicalize().unwrap();
    assert_eq!(std::fs::read_link(dir.join("bin/blahpd")).unwrap(), me);
    assert_eq!(std::fs::read_link(dir.join("bin/condor_ft-gahp")).unwrap(), Path::new(&ft));
    let conf = std::fs::read_to_string(dir.join("etc/condor_config.ft-gahp")).unwrap();
    let d = dir.to_str().unwrap();
    assert!(conf.contains(&format!("\nBOSCO_SANDBOX_DIR = {d}/sandbox\n")), "{conf}");
    assert!(conf.contains(&format!("\nLOG = {d}/log\n")), "{conf}");
    assert!(conf.contains("\nFT_GAHP_LOG = $(LOG)/FTGahpLog\n"), "{conf}");
    assert!(dir.join("log").is_dir() && dir.join("sandbox").is_dir());
    // Nothing but the layout in bin/ and etc/: no temporary names left.
    let names = |sub: &str| {
        let mut v: Vec<String> =
            std::fs::read_dir(dir.join(sub)).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    assert_eq!(names("bin"), ["blahpd", "condor_ft-gahp"]);
    assert_eq!(names("etc"), ["condor_config.ft-gahp"]);

    // remote_gahp runs DIR/bin/blahpd with no arguments: the GAHP answers.
    let mut child = Command::new(dir.join("bin/blahpd"))
        .env("HOME", home.path())
        .env("BLAHPD_LOCATION", d)
        .env("GLITE_LOCATION", d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"COMMANDS\nQUIT\n").unwrap();
    let got = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&got.stdout);
    assert!(stdout.starts_with("$GahpVersion:"), "{stdout}");
    assert!(stdout.contains("BLAH_JOB_SUBMIT"), "the batch boinc dialect: {stdout}");
}

#[test]
fn another_directory_is_named_in_the_hint_and_a_second_run_relinks_in_place() {
    let home = tempfile::tempdir().unwrap();
    let ft1 = fake_ft_gahp(home.path());
    let other = home.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let ft2 = fake_ft_gahp(&other);
    let dir = home.path().join("boinc glite");
    let d = dir.to_str().unwrap();
    let (code, out, err) = layout(home.path(), &[d, "--ft-gahp", &ft1]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("--rgahp-glite {d}\n")), "{out}");
    let (code, out, err) = layout(home.path(), &[d, "--ft-gahp", &ft2]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(std::fs::read_link(dir.join("bin/condor_ft-gahp")).unwrap(), Path::new(&ft2));
    assert!(!home.path().join("bosco").exists(), "nothing made at the default");
}

#[test]
fn a_blahpd_that_is_not_a_link_is_left_alone_and_nothing_is_made() {
    let home = tempfile::tempdir().unwrap();
    let ft = fake_ft_gahp(home.path());
    let bin = home.path().join("bosco/glite/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("blahpd"), "slurm's blahp\n").unwrap();
    let (code, out, err) = layout(home.path(), &["--ft-gahp", &ft]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("exists and is not a link") && err.contains("--rgahp-glite"), "{err}");
    assert_eq!(std::fs::read_to_string(bin.join("blahpd")).unwrap(), "slurm's blahp\n");
    assert!(!home.path().join("bosco/glite/etc").exists());
}

#[test]
fn a_missing_or_unusable_ft_gahp_and_an_unwritable_name_are_refused_with_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let plain = home.path().join("plain");
    std::fs::write(&plain, "x").unwrap();
    let (code, _, err) = layout(home.path(), &["--ft-gahp", plain.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("not an executable file"), "{err}");
    let ft = fake_ft_gahp(home.path());
    let bad = home.path().join("a$b");
    let (code, _, err) = layout(home.path(), &[bad.to_str().unwrap(), "--ft-gahp", &ft]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot be written into HTCondor's config"), "{err}");
    assert!(!bad.exists());
    // No condor_ft-gahp anywhere it looks (PATH emptied; this machine may
    // have HTCondor in /usr/sbin, so only check the message when it has not).
    let out =
        Command::new(env!("CARGO_BIN_EXE_boinc_gahp")).arg("remote-layout").env("HOME", home.path()).env("PATH", "").output().unwrap();
    let has_condor =
        ["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/libexec/condor"].iter().any(|d| Path::new(d).join("condor_ft-gahp").exists());
    if !has_condor {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no condor_ft-gahp") && err.contains("--ft-gahp"), "{err}");
    }
}
