//! The runner's launcher, `deploy/boinc-runner/condor_runner.sh`, run for
//! real under dash, `bash --posix` and busybox sh, in a directory laid out
//! as BOINC's wrapper leaves a slot, with a stand-in `podman` that plays
//! the job's container: honest ones, and hostile ones that try to write
//! past the slot, leave links and special files to be zipped, or steer the
//! runner through the job's environment. Each run checks that nothing
//! outside the slot changed and that the honest result (exit code,
//! outputs) is right. docs/runner.md "What the runner does".
//!
//! A shell that is missing fails the test under CI (`CI=true`); elsewhere
//! the test says which shell it skipped and goes on. To watch the tests
//! fail, point `RUNNER_SCRIPT` at another launcher (an older one, say:
//! `git show REV:deploy/boinc-runner/condor_runner.sh`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The launcher under test: `RUNNER_SCRIPT`, else the repository's.
fn launcher() -> PathBuf {
    std::env::var_os("RUNNER_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/boinc-runner/condor_runner.sh"))
}

/// A run that takes longer is a runner stuck on a FIFO (or worse).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The stand-in podman: records each call in `$STUB/log`, and plays the
/// container by running `/srv/condor_exec.exe` as the job's program, in
/// the directory mounted at /srv, with only the env file's variables.
const PODMAN: &str = r#"#!/bin/sh
S=$STUB
echo "$*" >>"$S/log"
cmd=$1
shift
case $cmd in
create)
    vol="" envf="" sep=""
    while [ $# -gt 0 ]; do
        case $1 in
        --env-file) envf=$2; shift ;;
        --volume) vol=${2%:/srv}; shift ;;
        --) sep=yes; shift; break ;;
        -*) ;;
        esac
        shift
    done
    [ -n "$sep" ] || { echo "stand-in podman: no -- before the image" >&2; exit 125; }
    printf '%s\n' "$1" >"$S/image"
    shift
    [ "$1" = /srv/condor_exec.exe ] || { echo "stand-in podman: command $1" >&2; exit 125; }
    shift
    printf '%s\n' "$vol" >"$S/volume"
    cp "$envf" "$S/env"
    : >"$S/args"
    for a in "$@"; do printf '%s\n' "$a" >>"$S/args"; done
    echo cid-of-the-job ;;
init) ;;
start)
    vol=$(cat "$S/volume")
    set --
    while IFS= read -r a; do set -- "$@" "$a"; done <"$S/args"
    n=$#
    while IFS= read -r l; do set -- "$@" "$l"; done <"$S/env"
    set -- "$@" ./condor_exec.exe
    while [ "$n" -gt 0 ]; do set -- "$@" "$1"; shift; n=$((n - 1)); done
    cd "$vol" && env -i SRV="$vol" OUTSIDE="$OUTSIDE" PATH=/usr/bin:/bin "$@"
    echo $? >"$S/exit"
    exit "$(cat "$S/exit")" ;;
inspect) echo "exited $(cat "$S/exit")" ;;
rm | pause | unpause) ;;
*) echo "stand-in podman: $cmd?" >&2; exit 125 ;;
esac
"#;

/// A shell to run the launcher with, if this host has it.
struct Shell {
    name: &'static str,
    argv: Vec<String>,
}

fn shells() -> Vec<Shell> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let found = |cmd: &str| ["/usr/bin", "/bin", "/usr/local/bin"].iter().map(|d| Path::new(d).join(cmd)).find(|p| p.is_file());
    let mut out = Vec::new();
    for (name, cmd, args) in [("dash", "dash", &[][..]), ("bash --posix", "bash", &["--posix"][..]), ("busybox sh", "busybox", &["sh"][..])]
    {
        match found(cmd) {
            Some(p) => {
                let mut argv = vec![p.display().to_string()];
                argv.extend(args.iter().map(|a| a.to_string()));
                out.push(Shell { name, argv });
            }
            None if ci => panic!("{cmd} is not installed, and CI must run the launcher under {name} (.ci/run installs it)"),
            None => eprintln!("runner_script: skipped {name}: {cmd} is not installed here (apt-get install {cmd})"),
        }
    }
    out
}

/// One run's directories: the slot, the host's files beside it, the stand-in.
struct Slot {
    _root: tempfile::TempDir,
    root: PathBuf,
    slot: PathBuf,
    outside: PathBuf,
    stub: PathBuf,
}

/// What the wrapper's files look like in a slot (BOINC's soft links, its
/// stderr and init data), which the job must not touch.
const BOINC_FILES: [(&str, &str); 5] = [
    ("stderr.txt", "wrapper: starting\n"),
    ("init_data.xml", "<app_init_data><authenticator>volunteer-key</authenticator></app_init_data>\n"),
    ("condor_out.zip", "<soft_link>../../projects/p/out_0</soft_link>\n"),
    ("job.xml", "<soft_link>../../projects/p/runner_1.0_x86_64-pc-linux-gnu_job.xml</soft_link>\n"),
    ("wrapper_checkpoint.txt", "0 0 0\n"),
];

impl Slot {
    /// A slot with the job's program and `inputs`, listed as the wrapper
    /// lists it before running the launcher.
    fn new(program: &[u8], inputs: &[(&str, &str)]) -> Slot {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let (slot, outside, stub) = (root.join("slot"), root.join("outside"), root.join("stub"));
        for d in [&slot, &outside.join("dir"), &stub.join("bin"), &root.join("tmp")] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(outside.join("secret.txt"), "the volunteer's file\n").unwrap();
        fs::write(outside.join("dir/kept.txt"), "kept\n").unwrap();
        let podman = stub.join("bin/podman");
        fs::write(&podman, PODMAN).unwrap();
        fs::set_permissions(&podman, fs::Permissions::from_mode(0o755)).unwrap();
        for (name, text) in BOINC_FILES.iter().chain(inputs) {
            if let Some(parent) = Path::new(name).parent() {
                fs::create_dir_all(slot.join(parent)).unwrap();
            }
            fs::write(slot.join(name), text).unwrap();
        }
        fs::write(slot.join("condor_exec.exe"), program).unwrap();
        let mut listed: Vec<String> = fs::read_dir(&slot).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        listed.sort();
        fs::write(slot.join("initial_file_list"), listed.iter().map(|n| format!("{n}\n")).collect::<String>()).unwrap();
        Slot { _root: dir, root, slot, outside, stub }
    }

    /// Runs the launcher (a container runner's with `network`) under
    /// `shell` with `args`: whether it exited 0, and its stderr.
    fn run_status(&self, shell: &Shell, network: &str, args: &[&str]) -> (bool, String) {
        self.run_with_path(shell, network, args, &format!("{}:/usr/bin:/bin", self.stub.join("bin").display()))
    }

    /// [`Slot::run_status`] with the client's `PATH` given.
    fn run_with_path(&self, shell: &Shell, network: &str, args: &[&str], path: &str) -> (bool, String) {
        let mut child = self.spawn(shell, network, args, path);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{}: the launcher ran {RUN_LIMIT:?} without ending", shell.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        (status.success(), stderr)
    }

    /// Starts the launcher as [`Slot::run_with_path`] runs it.
    fn spawn(&self, shell: &Shell, network: &str, args: &[&str], path: &str) -> std::process::Child {
        let text = fs::read_to_string(launcher()).unwrap();
        let set = format!("CONTAINER_NETWORK=\"{network}\"");
        assert!(text.contains("\nCONTAINER_NETWORK=\"\"\n"), "the launcher has the line register sets");
        let launcher = self.root.join("runner_1.0_x86_64-pc-linux-gnu_launcher.sh");
        fs::write(&launcher, text.replace("\nCONTAINER_NETWORK=\"\"\n", &format!("\n{set}\n"))).unwrap();
        Command::new(&shell.argv[0])
            .args(&shell.argv[1..])
            .arg(&launcher)
            .args(args)
            .current_dir(&self.slot)
            .env_clear()
            .env("PATH", path)
            .env("TMPDIR", self.root.join("tmp"))
            .env("STUB", &self.stub)
            .env("OUTSIDE", &self.outside)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// [`Slot::run_status`] of a run that must succeed: its stderr.
    fn run(&self, shell: &Shell, network: &str, args: &[&str]) -> String {
        let (ok, stderr) = self.run_status(shell, network, args);
        assert!(ok, "{}: the launcher failed: {stderr}", shell.name);
        stderr
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.slot.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// What the wrapper would zip: the slot's top-level names that it did
    /// not list and its pattern takes. Each must be a regular file.
    fn zipped(&self, shell: &Shell) -> BTreeMap<String, String> {
        let listed = self.read("initial_file_list");
        let listed: Vec<&str> = listed.lines().collect();
        let mut out = BTreeMap::new();
        for e in fs::read_dir(&self.slot).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let skipped = name == "stderr.txt"
                || name.starts_with("boinc_")
                || name.starts_with("initial_file_list")
                || matches!(name.as_str(), "wrapper_checkpoint.txt" | "init_data.xml" | "temp.zip" | "condor_out.zip" | ".condor_parked");
            if skipped || listed.contains(&name.as_str()) {
                continue;
            }
            let meta = fs::symlink_metadata(self.slot.join(&name)).unwrap();
            assert!(meta.file_type().is_file(), "{}: {name} would be zipped, and is not a regular file: {meta:?}", shell.name);
            out.insert(name.clone(), self.read(&name));
        }
        out
    }

    /// The stand-in's calls, one line each.
    fn podman_calls(&self) -> Vec<String> {
        fs::read_to_string(self.stub.join("log")).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
    }
}

/// Every file, directory and link under `dir`, with its kind, mode and
/// content, to tell whether anything there changed.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = fs::symlink_metadata(&p).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", meta.mode())
            } else if meta.is_file() {
                format!("file {:o} {:?}", meta.mode(), fs::read(&p).unwrap())
            } else {
                // Never opened: a FIFO would block.
                format!("special {:o}", meta.mode())
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// Runs `check` on a fresh slot under each shell, asserting that nothing
/// outside the slot and none of BOINC's files in it changed.
fn each_shell(program: &str, inputs: &[(&str, &str)], network: &str, args: &[&str], check: impl Fn(&Shell, &Slot, &str)) {
    for shell in shells() {
        let s = Slot::new(program.as_bytes(), inputs);
        let before = snapshot(&s.outside);
        let stderr = s.run(&shell, network, args);
        assert_eq!(snapshot(&s.outside), before, "{}: files outside the slot changed; stderr: {stderr}", shell.name);
        for (name, text) in BOINC_FILES {
            let meta = fs::symlink_metadata(s.slot.join(name)).unwrap();
            assert!(meta.file_type().is_file(), "{}: {name} is no longer a file", shell.name);
            assert_eq!(s.read(name), text, "{}: BOINC's {name} changed", shell.name);
        }
        check(&shell, &s, &stderr);
    }
}

fn names(map: &BTreeMap<String, String>) -> Vec<&str> {
    map.keys().map(String::as_str).collect()
}

/// An honest container job: what it prints, makes and exits with.
const HONEST: &str = "#!/bin/sh\n\
echo \"in $(pwd) as $GREETING\"\n\
for a in \"$@\"; do echo \"arg:$a\"; done\n\
cat data.txt\n\
read l; echo \"stdin:$l\"\n\
ls -A | tr '\\n' ' '; echo\n\
echo made > result.txt\n\
mkdir tree; echo x > tree/inside.txt\n\
echo to-stderr >&2\n\
exit 5\n";

fn container_inputs(image: &str) -> Vec<(&'static str, String)> {
    vec![
        ("_condor_container_image", format!("{image}\n")),
        ("_condor_env", "GREETING=hello world\nTRICKY=$(touch /tmp/x) `id` ;\n1BAD=x\n".into()),
        ("_condor_stdin", "from stdin\n".into()),
        ("data.txt", "input data\n".into()),
    ]
}

fn as_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(n, t)| (*n, t.as_str())).collect()
}

#[test]
fn an_honest_container_job_runs_in_its_directory_and_returns_its_files_and_exit_code() {
    let inputs = container_inputs("localhost/boinc-gahp-test:1");
    each_shell(HONEST, &as_refs(&inputs), "none", &["two words", "-x"], |shell, s, stderr| {
        let n = shell.name;
        let calls = s.podman_calls();
        let verbs: Vec<&str> = calls.iter().map(|c| c.split(' ').next().unwrap()).collect();
        assert_eq!(verbs, ["create", "init", "start", "inspect", "rm"], "{n}: {calls:?}");
        let create = &calls[0];
        for part in ["--init --interactive --network=none", "--ulimit nofile=", "--ulimit nproc=", "--workdir /srv", "--entrypoint "] {
            assert!(create.contains(part), "{n}: {create}");
        }
        assert!(create.ends_with("-- localhost/boinc-gahp-test:1 /srv/condor_exec.exe two words -x"), "{n}: {create}");
        let parked = s.slot.join(".condor_parked");
        assert_eq!(fs::read_to_string(s.stub.join("volume")).unwrap().trim(), parked.display().to_string(), "{n}: /srv");
        let env = fs::read_to_string(s.stub.join("env")).unwrap();
        assert_eq!(env, "GREETING=hello world\nTRICKY=$(touch /tmp/x) `id` ;\n", "{n}");
        assert!(stderr.contains("skipped environment line 1BAD"), "{n}: {stderr}");

        let out = s.zipped(shell);
        assert_eq!(names(&out), ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt"], "{n}: {stderr}");
        assert_eq!(out["_condor_exit_code"], "5\n", "{n}");
        assert_eq!(out["_condor_stderr"], "to-stderr\n", "{n}");
        assert_eq!(out["result.txt"], "made\n", "{n}");
        let stdout = &out["_condor_stdout"];
        let want = format!(
            "in {} as hello world\narg:two words\narg:-x\ninput data\nstdin:from stdin\n\
             _condor_container_image _condor_env _condor_stdin condor_exec.exe data.txt \n",
            parked.display()
        );
        assert_eq!(stdout, &want, "{n}: the job sees its own files only");
        assert!(parked.join("tree/inside.txt").is_file(), "{n}: the directory stays parked");
        assert!(stderr.contains("not returned (not a file): tree"), "{n}: {stderr}");
        assert!(!s.slot.join("_condor_container").exists(), "{n}: the container's id goes with it");
    });
}

#[test]
fn a_container_job_gets_signal_n_for_128_plus_n() {
    let inputs = container_inputs("python:3.12");
    each_shell("#!/bin/sh\nexit 137\n", &as_refs(&inputs), "none", &[], |shell, s, _| {
        assert_eq!(s.zipped(shell)["_condor_exit_code"], "signal 9\n", "{}", shell.name);
    });
}

/// A container that makes links to the host's files and directories where
/// the runner writes and parks, leaves a link and a FIFO to be zipped,
/// forges the runner's files and rewrites the wrapper's list.
const HOSTILE: &str = "#!/bin/sh\n\
ln -s \"$OUTSIDE/secret.txt\" _condor_exit_code\n\
ln -s \"$OUTSIDE/dir\" .condor_parked\n\
ln -s \"$OUTSIDE/secret.txt\" leak.txt\n\
ln -s \"$OUTSIDE/dir\" leakdir\n\
ln -s \"$OUTSIDE/secret.txt\" _condor_stdout\n\
mkfifo fifo\n\
mkdir tree; echo x > tree/inside.txt\n\
echo forged > stderr.txt\n\
echo forged > job.xml\n\
echo 0 > boinc_finish_called\n\
echo '<soft_link>/etc/passwd</soft_link>' > condor_out.zip\n\
: > initial_file_list\n\
echo 'real output' > result.txt\n\
echo '#!/bin/sh' > suid.sh; chmod 4755 suid.sh\n\
mkdir -p deep; cp suid.sh deep/sgid.sh; chmod 2755 deep/sgid.sh\n\
echo done >&2\n\
exit 7\n";

#[test]
fn a_hostile_container_writes_nothing_past_its_job_and_leaves_nothing_to_be_zipped_but_files() {
    let inputs = container_inputs("localhost/boinc-gahp-test:1");
    each_shell(HOSTILE, &as_refs(&inputs), "none", &[], |shell, s, stderr| {
        let n = shell.name;
        let out = s.zipped(shell);
        assert_eq!(names(&out), ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt", "suid.sh"], "{n}: {stderr}");
        assert_eq!(out["_condor_exit_code"], "7\n", "{n}: the runner's own exit code");
        assert_eq!(out["_condor_stderr"], "done\n", "{n}");
        assert_eq!(out["result.txt"], "real output\n", "{n}");
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&s.slot.join("suid.sh")), 0o755, "{n}: no set-user-id file is left");
        assert_eq!(mode(&s.slot.join(".condor_parked/deep/sgid.sh")), 0o755, "{n}: nor a set-group-id one");
        assert_eq!(s.read("initial_file_list").lines().count(), inputs.len() + BOINC_FILES.len() + 1, "{n}: the slot's list");
        let parked = s.slot.join(".condor_parked");
        for name in ["leak.txt", "leakdir", "fifo", "tree", ".condor_parked", "_condor_stdout", "_condor_exit_code"] {
            assert!(fs::symlink_metadata(parked.join(name)).is_ok(), "{n}: {name} stays in the job's directory");
            assert!(stderr.contains(&format!("not returned (not a file): {name}")), "{n}: {name}: {stderr}");
        }
        // The job's own files under the slot's names stay in its directory
        // (the slot's are checked above); those the wrapper did not list
        // are noted.
        for name in ["stderr.txt", "job.xml", "condor_out.zip"] {
            assert!(!fs::read_to_string(parked.join(name)).unwrap_or_default().is_empty(), "{n}: {name}");
        }
        for name in ["initial_file_list", "boinc_finish_called"] {
            assert!(stderr.contains(&format!("not returned (a name of BOINC's or the runner's): {name}")), "{n}: {name}: {stderr}");
        }
    });
}

#[test]
fn a_container_job_from_a_runner_run_again_ends_the_container_before_it() {
    // The wrapper restarted: the job's files are in its directory, and the
    // id of the first run's container is beside it.
    let inputs = container_inputs("localhost/boinc-gahp-test:1");
    for shell in shells() {
        let s = Slot::new(b"#!/bin/sh\necho again > again.txt\n", &as_refs(&inputs));
        let parked = s.slot.join(".condor_parked");
        fs::create_dir(&parked).unwrap();
        for name in ["condor_exec.exe", "_condor_container_image", "_condor_env", "_condor_stdin", "data.txt"] {
            fs::rename(s.slot.join(name), parked.join(name)).unwrap();
        }
        fs::write(s.slot.join("_condor_container"), "cid-of-the-first-run\n").unwrap();
        s.run(&shell, "none", &[]);
        let calls = s.podman_calls();
        assert_eq!(calls[0], "rm --force -- cid-of-the-first-run", "{}: {calls:?}", shell.name);
        assert_eq!(s.zipped(&shell)["again.txt"], "again\n", "{}", shell.name);
    }
}

#[test]
fn an_image_name_that_is_an_option_or_a_path_is_refused_by_the_runner() {
    for image in ["-v/:/host", "oci-archive:/etc/shadow", "dir:/", "oci:layout", "a b", "a\tb"] {
        for shell in shells() {
            let inputs = container_inputs(image);
            let s = Slot::new(b"#!/bin/sh\necho ran > ran.txt\n", &as_refs(&inputs));
            let (ok, stderr) = s.run_status(&shell, "none", &[]);
            assert!(!ok && stderr.contains("not an image name"), "{}: {image:?}: {stderr}", shell.name);
            assert!(s.podman_calls().is_empty(), "{}: podman never ran", shell.name);
        }
    }
}

/// A plain job whose program is env(1): it prints the environment it got.
fn env_program() -> Vec<u8> {
    let env = ["/usr/bin/env", "/bin/env"].iter().find(|p| Path::new(p).is_file()).expect("env(1)");
    fs::read(env).unwrap()
}

#[test]
fn environment_lines_reach_the_plain_job_only_and_never_steer_the_runner() {
    let lines = "CONTAINER_NETWORK=host\nUID=5\nPPID=7\nEUID=9\nSHELLOPTS=x\nIFS=x\nPATH=/nonexistent\n\
                 stdin=/etc/passwd\nline=x\nLD_PRELOAD=\nGREETING=hello world\n1BAD=x\n";
    for shell in shells() {
        let s = Slot::new(&env_program(), &[("_condor_env", lines), ("_condor_stdin", "in\n")]);
        let stderr = s.run(&shell, "", &[]);
        let n = shell.name;
        assert!(s.podman_calls().is_empty(), "{n}: CONTAINER_NETWORK=host made a container: {stderr}");
        let out = s.zipped(&shell);
        assert_eq!(names(&out), ["_condor_exit_code", "_condor_stderr", "_condor_stdout"], "{n}: {stderr}");
        assert_eq!(out["_condor_exit_code"], "0\n", "{n}: {stderr}");
        let env: Vec<&str> = out["_condor_stdout"].lines().collect();
        for want in lines.lines().filter(|l| !l.starts_with('1')) {
            assert!(env.contains(&want), "{n}: the job did not get {want}: {env:?}");
        }
        assert!(stderr.contains("skipped environment line 1BAD"), "{n}: {stderr}");
        assert!(!stderr.contains("UID"), "{n}: {stderr}");
    }
}

#[test]
fn a_plain_job_gets_the_clients_path_and_its_arguments() {
    for shell in shells() {
        let s = Slot::new(&env_program(), &[]);
        s.run(&shell, "", &["-u", "STUB"]);
        let env = s.read("_condor_stdout");
        let path = format!("PATH={}:/usr/bin:/bin", s.stub.join("bin").display());
        assert!(env.lines().any(|l| l == path), "{}: {env}", shell.name);
        assert!(env.contains("OUTSIDE=") && !env.contains("STUB="), "{}: the arguments are the job's: {env}", shell.name);
        assert!(!s.slot.join(".condor_parked").exists(), "{}: nothing parked", shell.name);
    }
}

#[test]
fn an_honest_plain_job_runs_as_before() {
    let inputs = [
        ("_condor_env", "GREETING=hello world\n"),
        ("_condor_stdin", "from stdin\n"),
        ("data.txt", "input data\n"),
        ("indir/a.txt", "a\n"),
    ];
    let program = "#!/bin/sh\necho \"$GREETING $*\"\ncat data.txt\nread l; echo \"stdin:$l\"\n\
                   echo made > result.txt\nmkdir tree\necho e >&2\nkill -TERM $$\n";
    each_shell(program, &inputs, "", &["two words"], |shell, s, stderr| {
        let n = shell.name;
        let out = s.zipped(shell);
        assert_eq!(names(&out), ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt"], "{n}: {stderr}");
        assert_eq!(out["_condor_exit_code"], "signal 15\n", "{n}");
        assert_eq!(out["_condor_stdout"], "hello world two words\ninput data\nstdin:from stdin\n", "{n}");
        assert!(s.slot.join(".condor_parked/tree").is_dir(), "{n}: the directory it made is parked");
        assert!(s.slot.join("indir/a.txt").is_file(), "{n}: an input directory stays");
        assert!(stderr.contains("not returned (not a file): tree") && !stderr.contains("indir"), "{n}: {stderr}");
    });
}

#[test]
fn a_hostile_plain_job_gets_no_link_or_special_file_zipped_or_written_through() {
    let program = "#!/bin/sh\n\
ln -s \"$OUTSIDE/secret.txt\" _condor_exit_code\n\
ln -s \"$OUTSIDE/dir\" .condor_parked\n\
ln -s \"$OUTSIDE/secret.txt\" leak.txt\n\
mkfifo fifo\n\
mkdir tree\n\
echo ok > result.txt\n\
exit 4\n";
    // The job finds where the host's files are in its environment
    // ($OUTSIDE), as a hostile one would know.
    for shell in shells() {
        let s = Slot::new(program.as_bytes(), &[]);
        let before = snapshot(&s.outside);
        let stderr = s.run(&shell, "", &[]);
        let n = shell.name;
        assert_eq!(snapshot(&s.outside), before, "{n}: {stderr}");
        let out = s.zipped(&shell);
        assert_eq!(names(&out), ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt"], "{n}: {stderr}");
        assert_eq!(out["_condor_exit_code"], "4\n", "{n}");
        let parked = fs::symlink_metadata(s.slot.join(".condor_parked")).unwrap();
        assert!(parked.is_dir(), "{n}: the runner's own parking place");
        for name in ["leak.txt", "fifo", "tree"] {
            assert!(fs::symlink_metadata(s.slot.join(".condor_parked").join(name)).is_ok(), "{n}: {name} parked: {stderr}");
        }
    }
}

#[test]
fn a_podman_among_the_jobs_files_is_never_run() {
    // A relative entry of the client's PATH (empty, ".") is the slot.
    let mut inputs = container_inputs("localhost/boinc-gahp-test:1");
    inputs.push(("podman", "#!/bin/sh\necho ran > \"$OUTSIDE/ran\"\nexit 0\n".into()));
    for shell in shells() {
        let s = Slot::new(b"#!/bin/sh\necho in-container\n", &as_refs(&inputs));
        fs::set_permissions(s.slot.join("podman"), fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(":.:{}:/usr/bin:/bin", s.stub.join("bin").display());
        let (ok, stderr) = s.run_with_path(&shell, "none", &[], &path);
        assert!(ok, "{}: {stderr}", shell.name);
        assert!(!s.outside.join("ran").exists(), "{}: the job's podman ran", shell.name);
        assert_eq!(s.read("_condor_stdout"), "in-container\n", "{}: the stand-in ran it", shell.name);
    }
}

/// The volunteer in charge (docs/runner.md "The volunteer in charge"):
/// the wrapper, started with --use_tstp, sends the launcher SIGTSTP to
/// suspend, SIGCONT to resume and SIGTERM to end the task; the launcher
/// pauses, unpauses and removes the container, and ends with no exit
/// code for the job.
#[test]
fn a_container_job_follows_the_wrappers_suspend_resume_and_end() {
    let slow = "#!/bin/sh\ni=0\nwhile [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done\n";
    let inputs = container_inputs("localhost/boinc-gahp-test:1");
    for shell in shells() {
        let n = shell.name;
        let s = Slot::new(slow.as_bytes(), &as_refs(&inputs));
        let mut child = s.spawn(&shell, "none", &[], &format!("{}:/usr/bin:/bin", s.stub.join("bin").display()));
        let pid = child.id().to_string();
        let signal = |sig: &str| assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success(), "{n}: kill {sig}");
        let called = |call: &str| {
            let end = Instant::now() + Duration::from_secs(10);
            while !s.podman_calls().iter().any(|c| c == call) {
                assert!(Instant::now() < end, "{n}: no podman {call}: {:?}", s.podman_calls());
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        called("start --attach --interactive --sig-proxy=false cid-of-the-job");
        signal("-TSTP");
        called("pause -- cid-of-the-job");
        signal("-CONT");
        called("unpause -- cid-of-the-job");
        signal("-TERM");
        let end = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < end, "{n}: the launcher goes on after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{n}: an ended task is no success: {stderr}");
        called("rm --force --time 0 -- cid-of-the-job");
        for note in ["condor_runner: suspended\n", "condor_runner: resumed\n", "condor_runner: ended by BOINC: the container is removed\n"]
        {
            assert!(stderr.contains(note), "{n}: {note:?} not in {stderr}");
        }
        assert!(!s.slot.join("_condor_exit_code").exists(), "{n}: an ended job has no exit code");
    }
}
