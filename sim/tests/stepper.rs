//! The `stepper` built-in app (one step of a work sequence): the pure step
//! function against an independent FNV-1a, the state format, streaming of
//! `extra`, the app's exit codes and optional outputs, in-process and as a
//! real process.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use boinc_sim::apps::{app_main, app_main_in, builtin_app, run_instance, stepper_next, AppSpec, StepState, APP_ENTRY_ARG};

/// As in `apps.rs`: started by `run_instance` through [`shim_app`], this
/// test binary acts as the sim's built-in app entry.
#[test]
fn app_entry_shim() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(i) = args.iter().position(|a| a == APP_ENTRY_ARG) {
        std::process::exit(app_main(&args[i + 1..]));
    }
}

fn shim_app(name: &str) -> AppSpec {
    let mut app = builtin_app(name).expect("built-in app");
    let exe = std::env::current_exe().expect("test exe");
    app.command = Some(vec![
        exe.to_string_lossy().into_owned(),
        "app_entry_shim".into(),
        "--exact".into(),
        "--quiet".into(),
        "--test-threads=1".into(),
        "--".into(),
        APP_ENTRY_ARG.into(),
        name.into(),
    ]);
    app
}

/// FNV-1a 64, written out here independently of the sim's.
fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The expected next state line, from the contract's words.
fn expect_next(counter: u64, checksum: u64, extra: &[u8]) -> String {
    let mut bytes = format!("{checksum:016x} {}\n", counter + 1).into_bytes();
    bytes.extend_from_slice(extra);
    format!("counter {} checksum {:016x}\n", counter + 1, fnv(&bytes))
}

#[test]
fn fnv_reference_vectors() {
    // Published FNV-1a 64 test vectors: the reference above is right.
    assert_eq!(fnv(b""), 0xcbf29ce484222325);
    assert_eq!(fnv(b"a"), 0xaf63dc4c8601ec8c);
    assert_eq!(fnv(b"foobar"), 0x85944171f73967e8);
}

#[test]
fn steps_chain_counter_and_checksum() {
    let s1 = stepper_next("", b"").unwrap();
    assert_eq!(s1, expect_next(0, 0, b""));
    assert!(s1.starts_with("counter 1 checksum ") && s1.len() == "counter 1 checksum ".len() + 17, "{s1}");
    // The explicit initial state is the same as the empty one.
    assert_eq!(stepper_next("counter 0 checksum 0000000000000000\n", b"").unwrap(), s1);
    let s2 = stepper_next(&s1, b"extra bytes\x00\xff").unwrap();
    let st1 = StepState::parse(&s1).unwrap();
    assert_eq!(s2, expect_next(1, st1.checksum, b"extra bytes\x00\xff"));
    // Order matters: the same steps with the extras swapped end elsewhere.
    let a = stepper_next(&stepper_next("", b"x").unwrap(), b"y").unwrap();
    let b = stepper_next(&stepper_next("", b"y").unwrap(), b"x").unwrap();
    assert_ne!(a, b);
    // Twenty steps: counter 20, and the checksum a replay gives.
    let mut s = String::new();
    let (mut n, mut c) = (0u64, 0u64);
    for i in 0..20u64 {
        let extra = format!("step {i}");
        s = stepper_next(&s, extra.as_bytes()).unwrap();
        let want = expect_next(n, c, extra.as_bytes());
        assert_eq!(s, want);
        let st = StepState::parse(&s).unwrap();
        (n, c) = (st.counter, st.checksum);
    }
    assert_eq!(n, 20);
    // A state line without its final newline is read too.
    assert_eq!(stepper_next(s.trim_end(), b"").unwrap(), stepper_next(&s, b"").unwrap());
}

#[test]
fn malformed_states_are_refused() {
    for bad in [
        "garbage",
        "\n",
        "counter 1 checksum 00",
        "counter -1 checksum 0000000000000000\n",
        "counter +1 checksum 0000000000000000\n",
        "counter 01 checksum 0000000000000000\n",
        "counter 1 checksum 00000000000000000\n",
        "counter 1 checksum 000000000000000G\n",
        "counter 1 checksum 00000000000000AB\n",
        "counter 1  checksum 0000000000000000\n",
        "counter 1 checksum 0000000000000000\n\n",
        "counter 1 checksum 0000000000000000 more\n",
        "counter 99999999999999999999 checksum 0000000000000000\n",
    ] {
        let e = stepper_next(bad, b"").unwrap_err();
        assert!(e.to_string().starts_with("malformed state"), "{bad:?}: {e}");
    }
    let e = stepper_next(&format!("counter {} checksum 0000000000000000\n", u64::MAX), b"").unwrap_err();
    assert!(e.to_string().contains("can't be advanced"), "{e}");
}

/// `n` bytes of a pattern, generated as read (never held whole).
struct Pattern {
    left: u64,
    pos: u64,
}

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left).min(7777) as usize;
        for b in &mut buf[..n] {
            *b = (self.pos % 251) as u8;
            self.pos += 1;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[test]
fn extra_is_hashed_in_chunks() {
    // Across many short reads, the same as the whole buffer at once.
    let len = 300_000u64;
    let whole: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let start = StepState { counter: 4, checksum: 0x0123_4567_89ab_cdef };
    let streamed = start.next_from(Pattern { left: len, pos: 0 }).unwrap();
    assert_eq!(streamed.line(), stepper_next(&start.line(), &whole).unwrap());
    assert_eq!(streamed.line(), expect_next(4, 0x0123_4567_89ab_cdef, &whole));
    // 1 GiB streams through without 1 GiB of memory (the reader makes it).
    if std::env::var_os("BOINC_SIM_BIG_EXTRA").is_some() {
        let big = start.next_from(Pattern { left: 1 << 30, pos: 0 }).unwrap();
        assert_eq!(big.counter, 5);
    }
}

fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut log = Vec::new();
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let code = app_main_in(dir, &args, &mut log);
    (code, String::from_utf8(log).unwrap())
}

fn slot(state: &[u8], extra: &[u8]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("state"), state).unwrap();
    std::fs::write(d.path().join("extra"), extra).unwrap();
    d
}

fn read(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

#[test]
fn the_app_in_process() {
    // A plain step: state written, no DONE.
    let d = slot(b"", b"abc");
    let (code, log) = run_in(d.path(), &["stepper"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read(d.path(), "state").unwrap(), expect_next(0, 0, b"abc"));
    assert!(read(d.path(), "DONE").is_none());
    assert!(log.contains("state in: counter 0 checksum 0000000000000000"), "{log}");

    // --end-at: DONE (the new state line) once the counter reaches K.
    let s1 = expect_next(0, 0, b"");
    let d = slot(s1.as_bytes(), b"");
    let (code, log) = run_in(d.path(), &["stepper", "--end-at", "3"]);
    assert_eq!(code, 0, "{log}");
    assert!(read(d.path(), "DONE").is_none(), "counter 2 < 3");
    let s2 = read(d.path(), "state").unwrap();
    std::fs::write(d.path().join("extra"), b"").unwrap();
    let (code, log) = run_in(d.path(), &["stepper", "--end-at", "3"]);
    assert_eq!(code, 0, "{log}");
    let s3 = read(d.path(), "state").unwrap();
    assert!(s3.starts_with("counter 3 "), "{s3}");
    assert_eq!(read(d.path(), "DONE").unwrap(), s3);
    assert_eq!(s3, stepper_next(&s2, b"").unwrap());

    // --heartbeat: no state output; the input state is gone from the slot.
    let d = slot(s1.as_bytes(), b"");
    let (code, log) = run_in(d.path(), &["stepper", "--heartbeat"]);
    assert_eq!(code, 0, "{log}");
    assert!(read(d.path(), "state").is_none(), "{log}");
    assert!(log.contains("heartbeat: counter 2"), "{log}");
    let d = slot(s1.as_bytes(), b"");
    let (code, _) = run_in(d.path(), &["stepper", "--heartbeat", "--end-at", "2"]);
    assert_eq!(code, 0);
    assert!(read(d.path(), "state").is_none());
    assert_eq!(read(d.path(), "DONE").unwrap(), expect_next(1, StepState::parse(&s1).unwrap().checksum, b""));

    // Malformed state: exit 1, a clear line, nothing written.
    let d = slot(b"counter x\n", b"");
    let (code, log) = run_in(d.path(), &["stepper"]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("stepper: input file 'state': malformed state \"counter x\\n\""), "{log}");
    assert_eq!(read(d.path(), "state").unwrap(), "counter x\n", "the input is left as it was");
    assert!(log.trim_end().ends_with("called boinc_finish(1)"), "{log}");
    // A huge state file is not read whole.
    let d = slot(&vec![b'1'; 10_000], b"");
    let (code, log) = run_in(d.path(), &["stepper"]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("is over 4096 bytes"), "{log}");
    // Missing inputs, bad values, --fail.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("state"), b"").unwrap();
    let (code, log) = run_in(d.path(), &["stepper"]);
    assert_eq!(code, 1);
    assert!(log.contains("can't read input file 'extra'"), "{log}");
    let d = slot(b"", b"");
    assert_eq!(run_in(d.path(), &["stepper", "--end-at", "x"]).0, 2);
    assert_eq!(run_in(d.path(), &["stepper", "--end-at"]).0, 2);
    let (code, _) = run_in(d.path(), &["stepper", "--fail", "7", "--end-at", "1"]);
    assert_eq!(code, 7);
    assert!(read(d.path(), "DONE").is_none());
}

const LONG: Duration = Duration::from_secs(30);

#[actix_rt::test]
async fn the_app_as_a_process_with_optional_outputs() {
    let src = tempfile::tempdir().unwrap();
    let state_in: PathBuf = src.path().join("s");
    let extra_in: PathBuf = src.path().join("e");
    std::fs::write(&state_in, b"").unwrap();
    std::fs::write(&extra_in, b"payload").unwrap();
    let inputs = [state_in.clone(), extra_in.clone()];
    let work = tempfile::tempdir().unwrap();
    let exe = Path::new("/unused");
    let app = shim_app("stepper");

    let run = run_instance(&app, exe, "", &inputs, &work.path().join("a"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(run.outputs[0].as_ref().unwrap()).unwrap(), expect_next(0, 0, b"payload"));
    assert!(run.outputs[1].is_none(), "no DONE");
    // The optional outputs are marked so in the output template.
    assert!(app.output_is_optional(0) && app.output_is_optional(1));
    assert_eq!(app.output_template().matches("<copy_file/>\n            <optional/>\n        </file_ref>").count(), 2);

    let run = run_instance(&app, exe, "--heartbeat --end-at 1", &inputs, &work.path().join("b"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 0, "{}", run.stderr);
    assert!(run.outputs[0].is_none(), "a heartbeat leaves no state");
    assert_eq!(std::fs::read_to_string(run.outputs[1].as_ref().unwrap()).unwrap(), expect_next(0, 0, b"payload"));

    std::fs::write(&state_in, b"bogus").unwrap();
    let run = run_instance(&app, exe, "", &inputs, &work.path().join("c"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 1);
    assert!(run.stderr.contains("malformed state \"bogus\""), "{}", run.stderr);
}
