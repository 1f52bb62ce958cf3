//! Built-in apps (run in-process and as real processes), templates, the
//! command-line splitter, stderr wrapping, and `run_instance` with real
//! processes (argv only, no shell). At the end, `stepper` (one step of a
//! work sequence): the step function against an independent FNV-1a, the
//! state format, streaming of `extra`, exit codes and optional outputs.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use boinc_sim::apps::{
    app_main, app_main_in, builtin_app, builtin_apps, run_instance, split_command_line, stepper_next, wrap_stderr, xml_unescape, AppSpec,
    StepState, APP_ENTRY_ARG, EXIT_TIME_LIMIT_EXCEEDED, STDERR_CAP,
};

/// When this test binary is started by `run_instance` through
/// [`shim_app`], it acts as the sim binary's built-in app entry: libtest
/// runs only this test (`--exact`), and the words after `--` (filters that
/// match no test) carry `APP_ENTRY_ARG <app> [job args]`. In a normal test
/// run it does nothing.
#[test]
fn app_entry_shim() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(i) = args.iter().position(|a| a == APP_ENTRY_ARG) {
        std::process::exit(app_main(&args[i + 1..]));
    }
}

/// A built-in app whose command re-enters this test binary as the app.
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

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn bin(name: &str) -> String {
    for dir in ["/bin", "/usr/bin"] {
        let p = format!("{dir}/{name}");
        if Path::new(&p).exists() {
            return p;
        }
    }
    panic!("{name} not found in /bin or /usr/bin");
}

fn custom(inputs: &[&str], outputs: &[&str], argv: &[&str]) -> AppSpec {
    let mut app = AppSpec::new("custom", inputs, outputs);
    app.command = Some(argv.iter().map(|s| s.to_string()).collect());
    app
}

fn write_input(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

const TEXT: &str = "the quick brown fox\njumps over the lazy dog\nthe end\n";

// ---- the apps in-process ----

fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut log = Vec::new();
    let code = app_main_in(dir, &os(args), &mut log);
    (code, String::from_utf8(log).unwrap())
}

#[test]
fn builtin_app_list() {
    let apps = builtin_apps();
    let names: Vec<_> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["uppercase", "wordcount", "zipper", "concat", "stepper", "runner"]);
    let st = builtin_app("stepper").unwrap();
    assert_eq!(st.inputs, ["state", "extra"]);
    assert_eq!(st.outputs, ["state", "DONE"]);
    assert_eq!(st.optional_outputs, ["state", "DONE"]);
    let wc = builtin_app("wordcount").unwrap();
    assert_eq!(wc.inputs, ["in"]);
    assert_eq!(wc.outputs, ["counts", "summary"]);
    assert_eq!(builtin_app("zipper").unwrap().outputs, ["results.zip"]);
    assert_eq!(builtin_app("concat").unwrap().inputs, ["a", "b"]);
    for a in &apps {
        assert_eq!(a.fpops_est, 1e9);
        assert!(a.command.is_none());
    }
    assert!(builtin_app("nope").is_none());
}

#[test]
fn uppercase_in_process() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "in", b"Hello, World 42\n\xff");
    let (code, log) = run_in(d.path(), &["uppercase"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), b"HELLO, WORLD 42\n\xff");
    assert!(log.contains("uppercase: app started"), "{log}");
    assert!(log.contains("wrote 17 bytes to 'out'"), "{log}");
    assert!(log.trim_end().ends_with("called boinc_finish(0)"), "{log}");
    // BOINC-style prefix: "YYYY-MM-DD HH:MM:SS (pid): "
    let first = log.lines().next().unwrap();
    let b = first.as_bytes();
    assert_eq!((b[4], b[7], b[10], b[13], b[16], b[19]), (b'-', b'-', b' ', b':', b':', b' '));
    assert!(first.contains(&format!("({}): ", std::process::id())), "{first}");
}

#[test]
fn wordcount_in_process() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "in", TEXT.as_bytes());
    let (code, log) = run_in(d.path(), &["wordcount"]);
    assert_eq!(code, 0, "{log}");
    let counts = std::fs::read_to_string(d.path().join("counts")).unwrap();
    assert_eq!(counts, "brown 1\ndog 1\nend 1\nfox 1\njumps 1\nlazy 1\nover 1\nquick 1\nthe 3\n");
    let summary = std::fs::read_to_string(d.path().join("summary")).unwrap();
    assert_eq!(summary, format!("lines 3\nwords 11\nbytes {}\n", TEXT.len()));
}

#[test]
fn zipper_in_process_makes_a_real_zip() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "in", TEXT.as_bytes());
    let (code, log) = run_in(d.path(), &["zipper"]);
    assert_eq!(code, 0, "{log}");
    let f = std::fs::File::open(d.path().join("results.zip")).unwrap();
    let mut z = zip::ZipArchive::new(f).unwrap();
    assert_eq!(z.len(), 2);
    let names: Vec<_> = z.file_names().map(str::to_string).collect();
    assert!(names.contains(&"upper.txt".to_string()), "{names:?}");
    assert!(names.contains(&"count.txt".to_string()), "{names:?}");
    let mut s = String::new();
    z.by_name("upper.txt").unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, TEXT.to_uppercase());
    s.clear();
    z.by_name("count.txt").unwrap().read_to_string(&mut s).unwrap();
    assert!(s.starts_with("lines 3\nwords 11\n"), "{s}");
    // Deterministic bytes (fixed timestamps): same input, same zip.
    let first = std::fs::read(d.path().join("results.zip")).unwrap();
    assert_eq!(run_in(d.path(), &["zipper"]).0, 0);
    assert_eq!(std::fs::read(d.path().join("results.zip")).unwrap(), first);
}

#[test]
fn concat_in_process() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "a", b"one\n");
    write_input(d.path(), "b", b"two\n");
    assert_eq!(run_in(d.path(), &["concat"]).0, 0);
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), b"one\ntwo\n");
}

#[test]
fn job_args_fail_sleep_cpu_and_errors() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "in", b"x");

    let (code, log) = run_in(d.path(), &["uppercase", "--fail", "7"]);
    assert_eq!(code, 7);
    assert!(log.contains("failing on request with exit code 7"), "{log}");
    assert!(log.contains("called boinc_finish(7)"), "{log}");
    assert!(!d.path().join("out").exists(), "no output on --fail");

    let t = Instant::now();
    let (code, _) = run_in(d.path(), &["uppercase", "--sleep-ms", "120"]);
    assert_eq!(code, 0);
    assert!(t.elapsed() >= Duration::from_millis(120));

    let t = Instant::now();
    let (code, log) = run_in(d.path(), &["uppercase", "--cpu-ms", "80", "--bogus"]);
    assert_eq!(code, 0);
    assert!(t.elapsed() >= Duration::from_millis(80));
    assert!(log.contains("ignoring unknown argument \"--bogus\""), "{log}");

    for bad in [
        &["uppercase", "--fail"][..],
        &["uppercase", "--fail", "x"],
        &["uppercase", "--sleep-ms", "-1"],
        &["uppercase", "--cpu-ms", "1e3"],
        &["no-such-app"],
        &[],
    ] {
        assert_eq!(run_in(d.path(), bad).0, 2, "{bad:?}");
    }

    let empty = tempfile::tempdir().unwrap();
    let (code, log) = run_in(empty.path(), &["wordcount"]);
    assert_eq!(code, 1);
    assert!(log.contains("can't read input file 'in'"), "{log}");
    assert!(log.contains("called boinc_finish(1)"), "{log}");
}

/// The only test that changes the process's working directory; every other
/// test uses absolute paths.
#[test]
fn app_main_uses_the_current_directory() {
    let d = tempfile::tempdir().unwrap();
    write_input(d.path(), "in", b"cwd\n");
    let old = std::env::current_dir().unwrap();
    std::env::set_current_dir(d.path()).unwrap();
    let code = app_main(&os(&["uppercase"]));
    std::env::set_current_dir(old).unwrap();
    assert_eq!(code, 0);
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), b"CWD\n");
}

// ---- templates ----

/// `get_templates.txt` from a real server (stock `uppercase` app), between
/// `<templates>⏎` and `</templates>`.
const REAL_TEMPLATES: &str = "<input_template>
    <file_info>
        <number>0</number>
        <no_delete/>
    </file_info>
    <workunit>
        <file_ref>
            <file_number>0</file_number>
            <open_name>in</open_name>
            <copy_file/>
        </file_ref>
        <rsc_fpops_est>1e10</rsc_fpops_est>
        <rsc_fpops_bound>1e14</rsc_fpops_bound>
        <rsc_memory_bound>1e8</rsc_memory_bound>
        <rsc_disk_bound>1e8</rsc_disk_bound>
        <delay_bound>86400</delay_bound>
        <min_quorum>1</min_quorum>
        <target_nresults>1</target_nresults>
        <max_error_results>3</max_error_results>
        <max_total_results>5</max_total_results>
        <max_success_results>3</max_success_results>
    </workunit>
</input_template>

<output_template>
    <file_info>
        <name><OUTFILE_0/></name>
        <generated_locally/>
        <upload_when_present/>
        <max_nbytes>5000000</max_nbytes>
        <url><UPLOAD_URL/></url>
    </file_info>
    <result>
        <file_ref>
            <file_name><OUTFILE_0/></file_name>
            <open_name>out</open_name>
            <copy_file/>
        </file_ref>
    </result>
</output_template>

";

#[test]
fn templates_match_a_real_server_byte_for_byte() {
    let mut app = builtin_app("uppercase").unwrap();
    app.fpops_est = 1e10; // the real project's value
    let got = format!("{}\n{}\n", app.input_template(), app.output_template());
    assert_eq!(got, REAL_TEMPLATES);
}

#[test]
fn templates_with_several_files() {
    let wc = builtin_app("wordcount").unwrap();
    let out = wc.output_template();
    assert_eq!(out.matches("<file_info>").count(), 2);
    let i0 = out.find("<open_name>counts</open_name>").unwrap();
    let i1 = out.find("<open_name>summary</open_name>").unwrap();
    assert!(i0 < i1);
    assert!(out.contains("<name><OUTFILE_1/></name>"));
    assert!(out.contains("<file_name><OUTFILE_1/></file_name>"));
    let inp = wc.input_template();
    assert!(inp.contains("<rsc_fpops_est>1e9</rsc_fpops_est>"), "{inp}");
    assert!(inp.contains("<rsc_fpops_bound>1e13</rsc_fpops_bound>"), "{inp}");

    let cat = builtin_app("concat").unwrap().input_template();
    assert!(cat.contains("<number>1</number>"));
    assert!(cat.contains("<file_number>1</file_number>\n            <open_name>b</open_name>"));

    let mut odd = AppSpec::new("odd", &["a<b&c"], &[]);
    odd.delay_bound = 3600.5;
    let t = odd.input_template();
    assert!(t.contains("<open_name>a&lt;b&amp;c</open_name>"), "{t}");
    assert!(t.contains("<delay_bound>3600.5</delay_bound>"), "{t}");
    assert!(odd.output_template().contains("<result>\n    </result>"));
}

#[test]
fn argv_of_builtin_and_custom_apps() {
    let up = builtin_app("uppercase").unwrap();
    let argv = up.argv(Path::new("/opt/sim"), r#"--fail 3 "a b""#).unwrap();
    assert_eq!(argv, os(&["/opt/sim", APP_ENTRY_ARG, "uppercase", "--fail", "3", "a b"]));
    let c = custom(&[], &[], &["/bin/echo", "x"]);
    assert_eq!(c.argv(Path::new("/opt/sim"), "").unwrap(), os(&["/bin/echo", "x"]));
    assert!(custom(&[], &[], &[]).argv(Path::new("/x"), "").is_err());
}

// ---- command line and stderr ----

#[test]
fn split_command_line_like_boinc() {
    let cases: &[(&str, &[&str])] = &[
        ("", &[]),
        ("   \t\n ", &[]),
        ("a b  c", &["a", "b", "c"]),
        ("  --fail 3 ", &["--fail", "3"]),
        (r#""a b" c"#, &["a b", "c"]),
        (r#"'a "b"' c"#, &["a \"b\"", "c"]),
        // Seen on a real server: the character after an opening quote is
        // the word's, so `""` does not close.
        (r#""" x"#, &["\" x"]),
        (r#""" x" y"#, &["\" x", "y"]),
        (r#"a"b c"#, &["a\"b", "c"]),
        (r#""ab"cd"#, &["ab", "cd"]),
        (r#""unterminated x"#, &["unterminated x"]),
        ("tab\tsep\x0bvt\rcr", &["tab", "sep", "vt", "cr"]),
        ("ünï cödé", &["ünï", "cödé"]),
    ];
    for (input, want) in cases {
        assert_eq!(split_command_line(input), *want, "{input:?}");
    }
}

#[test]
fn the_client_unescapes_the_command_line_before_splitting_it() {
    // What a real server stored and what reached the app's argv.
    let stored = "alpha &#39;two words&#39; &#34;it&#39;s here&#34; &#39;tab&#9;here&#39; &#39;line&#10;break&#39; back&#92;slash amp&amp;er lt&lt; x&#127;y";
    assert_eq!(
        split_command_line(&xml_unescape(stored)),
        ["alpha", "two words", "it's here", "tab\there", "line\nbreak", "back\\slash", "amp&er", "lt<", "x\u{7f}y"]
    );
    assert_eq!(xml_unescape("&#xA;&#xd;&quot;&apos;&bogus; &#39"), "\n\r\"'&bogus; '");
}

#[test]
fn stderr_wrapping() {
    assert_eq!(
        wrap_stderr("starting\ndone\n", None),
        "\n<core_client_version>8.0.2</core_client_version>\n<![CDATA[\n<stderr_txt>\nstarting\ndone\n\n</stderr_txt>\n]]>\n"
    );
    assert_eq!(
        wrap_stderr("", Some("process exited with code 1 (0x1, -255)")),
        "\n<core_client_version>8.0.2</core_client_version>\n<![CDATA[\n<message>\nprocess exited with code 1 (0x1, -255)</message>\n<stderr_txt>\n\n</stderr_txt>\n]]>\n"
    );
}

// ---- run_instance with real processes ----

const LONG: Duration = Duration::from_secs(30);

#[actix_rt::test]
async fn run_instance_copies_inputs_and_finds_outputs() {
    let src = tempfile::tempdir().unwrap();
    let input = write_input(src.path(), "phys_1234", b"payload\n");
    let work = tempfile::tempdir().unwrap();
    let wd = work.path().join("slots/0");
    let app = custom(&["in"], &["out", "missing"], &[&bin("cp"), "in"]);
    let run = run_instance(&app, Path::new("/unused"), "out", std::slice::from_ref(&input), &wd, LONG).await.unwrap();
    assert_eq!(run.exit_status, 0);
    assert!(!run.timed_out);
    assert_eq!(run.outputs.len(), 2);
    let out = run.outputs[0].as_ref().expect("out created");
    assert_eq!(out, &wd.join("out"));
    assert_eq!(std::fs::read(out).unwrap(), b"payload\n");
    assert_eq!(run.outputs[1], None);
    assert!(run.wall_secs > 0.0 && run.wall_secs < 10.0, "{}", run.wall_secs);
    assert!(run.cpu_secs >= 0.0 && run.cpu_secs <= run.wall_secs + 0.05);
    assert_eq!(run.stderr, "\n<core_client_version>8.0.2</core_client_version>\n<![CDATA[\n<stderr_txt>\n\n</stderr_txt>\n]]>\n");
    // The input was copied, not moved or linked.
    assert_eq!(std::fs::read(&input).unwrap(), b"payload\n");
    std::fs::write(wd.join("in"), b"changed").unwrap();
    assert_eq!(std::fs::read(&input).unwrap(), b"payload\n");
}

#[actix_rt::test]
async fn run_instance_reports_exit_codes_and_stderr() {
    let work = tempfile::tempdir().unwrap();
    let app = custom(&[], &["out"], &[&bin("false")]);
    let run = run_instance(&app, Path::new("/x"), "", &[], &work.path().join("f"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 1);
    assert_eq!(run.outputs, vec![None]);
    assert!(run.stderr.contains("<message>\nprocess exited with code 1 (0x1, -255)</message>\n<stderr_txt>\n"), "{}", run.stderr);

    // Job args are appended to a custom command; stderr is captured.
    let app = custom(&[], &[], &[&bin("ls")]);
    let run = run_instance(&app, Path::new("/x"), r#""/nonexistent dir/zz""#, &[], &work.path().join("l"), LONG).await.unwrap();
    assert_ne!(run.exit_status, 0);
    assert!(run.stderr.contains("/nonexistent dir/zz"), "{}", run.stderr);
}

#[actix_rt::test]
async fn run_instance_kills_at_the_timeout() {
    let work = tempfile::tempdir().unwrap();
    let app = custom(&[], &[], &[&bin("sleep"), "5"]);
    let t = Instant::now();
    let run = run_instance(&app, Path::new("/x"), "", &[], &work.path().join("s"), Duration::from_millis(200)).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(run.timed_out);
    assert_eq!(run.exit_status, EXIT_TIME_LIMIT_EXCEEDED);
    assert!(run.wall_secs >= 0.2 && run.wall_secs < 3.0, "{}", run.wall_secs);
    assert!(run.stderr.contains("<message>\nexceeded elapsed time limit 0.20</message>"), "{}", run.stderr);
}

#[actix_rt::test]
async fn run_instance_measures_real_cpu_time() {
    let work = tempfile::tempdir().unwrap();
    // `yes` writes to the null stdout as fast as it can: pure CPU.
    let app = custom(&[], &[], &[&bin("yes")]);
    let run = run_instance(&app, Path::new("/x"), "", &[], &work.path().join("y"), Duration::from_millis(600)).await.unwrap();
    assert!(run.timed_out);
    assert!(run.cpu_secs > 0.05, "cpu {}", run.cpu_secs);
    assert!(run.cpu_secs <= run.wall_secs + 0.05, "cpu {} wall {}", run.cpu_secs, run.wall_secs);
}

#[actix_rt::test]
async fn run_instance_keeps_the_tail_of_a_long_stderr() {
    let work = tempfile::tempdir().unwrap();
    // ls complains about each of ~300 KB of missing names, in order.
    let names: Vec<String> = (0..2000).map(|i| format!("missing-{i:05}-{}", "x".repeat(120))).collect();
    let mut argv = vec![bin("ls")];
    argv.extend(names.iter().cloned());
    let mut app = AppSpec::new("custom", &[], &[]);
    app.command = Some(argv);
    let run = run_instance(&app, Path::new("/x"), "", &[], &work.path().join("l"), LONG).await.unwrap();
    assert!(run.stderr.len() <= STDERR_CAP + 200, "{}", run.stderr.len());
    assert!(run.stderr.len() > STDERR_CAP / 2);
    assert!(run.stderr.contains("missing-01999-"));
    assert!(!run.stderr.contains("missing-00000-"));
}

#[actix_rt::test]
async fn run_instance_setup_errors() {
    let work = tempfile::tempdir().unwrap();
    let wd = work.path().join("e");
    let app = custom(&["in"], &[], &[&bin("true")]);
    let e = run_instance(&app, Path::new("/x"), "", &[], &wd, LONG).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);

    let e = run_instance(&app, Path::new("/x"), "", &[work.path().join("nope")], &wd, LONG).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);

    let bad = custom(&["../escape"], &[], &[&bin("true")]);
    let src = write_input(work.path(), "src", b"x");
    let e = run_instance(&bad, Path::new("/x"), "", &[src], &wd, LONG).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);

    let missing = custom(&[], &[], &["/nonexistent/program"]);
    let e = run_instance(&missing, Path::new("/x"), "", &[], &wd, LONG).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);

    let empty = custom(&[], &[], &[]);
    assert!(run_instance(&empty, Path::new("/x"), "", &[], &wd, LONG).await.is_err());
}

// ---- built-in apps as real processes ----

#[actix_rt::test]
async fn builtin_apps_as_processes() {
    let src = tempfile::tempdir().unwrap();
    let input = write_input(src.path(), "phys", TEXT.as_bytes());
    let work = tempfile::tempdir().unwrap();
    let exe = Path::new("/unused");

    let run = run_instance(&shim_app("uppercase"), exe, "", std::slice::from_ref(&input), &work.path().join("u"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(run.outputs[0].as_ref().unwrap()).unwrap(), TEXT.to_uppercase());
    assert!(run.stderr.contains("uppercase: app started"), "{}", run.stderr);
    assert!(run.stderr.contains("called boinc_finish(0)\n\n</stderr_txt>"), "{}", run.stderr);

    let run = run_instance(&shim_app("wordcount"), exe, "", std::slice::from_ref(&input), &work.path().join("w"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 0, "{}", run.stderr);
    assert!(run.outputs.iter().all(Option::is_some));

    let run = run_instance(&shim_app("zipper"), exe, "", std::slice::from_ref(&input), &work.path().join("z"), LONG).await.unwrap();
    assert_eq!(run.exit_status, 0, "{}", run.stderr);
    let z = zip::ZipArchive::new(std::fs::File::open(run.outputs[0].as_ref().unwrap()).unwrap()).unwrap();
    assert_eq!(z.len(), 2);

    let run =
        run_instance(&shim_app("uppercase"), exe, "--cpu-ms 300 --fail 3", std::slice::from_ref(&input), &work.path().join("f"), LONG)
            .await
            .unwrap();
    assert_eq!(run.exit_status, 3);
    assert_eq!(run.outputs, vec![None]);
    assert!(run.stderr.contains("failing on request with exit code 3"), "{}", run.stderr);
    assert!(run.stderr.contains("process exited with code 3 (0x3, -253)"), "{}", run.stderr);
    assert!(run.cpu_secs >= 0.25, "cpu {}", run.cpu_secs);

    let run = run_instance(&shim_app("uppercase"), exe, "--sleep-ms 5000", &[input], &work.path().join("t"), Duration::from_millis(300))
        .await
        .unwrap();
    assert!(run.timed_out);
    assert_eq!(run.outputs, vec![None]);
    assert!(run.stderr.contains("sleeping 5000 ms"), "{}", run.stderr);
}

/// Processes whose argv is exactly `argv` (Linux /proc; empty elsewhere).
fn processes_with_argv(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| std::fs::read(e.path().join("cmdline")).map(|c| c == want).unwrap_or(false))
        .count()
}

#[actix_rt::test]
async fn dropping_a_run_kills_its_process() {
    if !Path::new("/proc/self/cmdline").exists() {
        return;
    }
    let sleep = bin("sleep");
    let marker = "31.41592";
    let work = tempfile::tempdir().unwrap();
    let app = custom(&[], &[], &[&sleep, marker]);
    let wd = work.path().join("c");
    let run = run_instance(&app, Path::new("/x"), "", &[], &wd, LONG);
    assert!(tokio::time::timeout(Duration::from_millis(300), run).await.is_err(), "still running");
    // The guard killed it (SIGKILL) and a thread reaps it.
    let t = Instant::now();
    while processes_with_argv(&[&sleep, marker]) > 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the app outlived its run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---- stepper ----

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

#[actix_rt::test]
async fn the_app_as_a_process_with_optional_outputs() {
    let src = tempfile::tempdir().unwrap();
    let state_in = src.path().join("s");
    let extra_in = src.path().join("e");
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
