//! Memory with many jobs in flight (issue 21). Prints numbers; asserts
//! nothing about time or memory. Run:
//!
//!     cargo bench --bench memory_bench                 # 10k, 100k, 1M BOINC_* jobs; 10k, 100k BLAH jobs (paced and flood)
//!     cargo bench --bench memory_bench -- --quick      # 10k and 100k BOINC_*, 10k BLAH (paced and flood)
//!     cargo bench --bench memory_bench -- boinc        # only the BOINC_* front end (or `blah`, `parse`, `at_once`, `boinc_1m`, `gridmanager_1m`, `blah_100k`, `blah_flood`)
//!     cargo bench --bench memory_bench -- script       # 10,000 script jobs (the runner) against the same jobs of a registered app
//!
//! The simulated project has one host that never finishes a job
//! (`[[hosts]] count = 1, flops = 1e-3`), so every job stays in flight.
//! Each size starts a fresh daemon: batches of 10,000 jobs named
//! `<batch>_<k>` are submitted one after another, then three
//! BOINC_QUERY_BATCHES of all batches at once; the daemon's peak RSS
//! (VmHWM) is read at each step. `at_once` sends the same submits all at
//! once instead; `gridmanager` submits the million as a gridmanager names
//! them (`condor#<schedd>#<app>#<qdate>#<cluster>.<proc>`, arguments of
//! their own) and asks for the status of all twice. The BLAH jobs are
//! sent as a gridmanager sends them, at most 50 commands pending
//! (`GRIDMANAGER_MAX_PENDING_REQUESTS`) and the results read as each `R`
//! comes; `blah_flood` sends every command before it reads a result, so
//! the daemon holds them all unread. `rss_point` lines feed
//! `benches/rss_plot.py`, which draws the SVG in BENCHMARKS.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gahp_project::submit_pipeline::CompactBatch;
use gahp_protocol::boinc::reply::QueryBatch2Reader;
use gahp_protocol::boinc::{reply, request, SubmitJob, SubmitParams};
use gahp_protocol::classad::Value;
use gahp_protocol::gahp::{
    AsyncCommand, BlahCommand, Command, CommandResult, InputFile, JobParams, JobSpec, QueryAnswerBuilder, ReqId, Request, SubmitBatch,
};
use gahp_protocol::Authenticator;
use gahp_services::result_queue::TAIL_CHUNK;
use gahp_testkit::{blah_job_ad, GahpClient, SimProcess};

const WAIT: Duration = Duration::from_secs(1200);
const BATCH: usize = 10_000;

/// Counts the bytes this process holds, to size the structures the
/// daemon builds (measured here, in-process, on the same code).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > l.size() {
            let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
        }
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Bytes allocated by `f` and still held by what it returns, and the
/// peak above the start while it ran.
fn held<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let value = f();
    (value, live().saturating_sub(before), PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn sim(dir: &Path) -> SimProcess {
    let path = dir.join("sim.toml");
    std::fs::write(&path, "[[hosts]]\nname = \"never\"\ncount = 1\nflops = 1e-3\n").unwrap();
    SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &["--config", path.to_str().unwrap()]).expect("boinc-sim starts")
}

fn daemon(dir: &Path, sim: &SimProcess, config: Option<&Path>) -> GahpClient {
    let state = dir.join("state");
    let log = dir.join("gahp.log");
    let mut args = vec!["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap()];
    if let Some(c) = config {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    // MEMORY_BENCH_WRAP=heaptrack runs the daemon under a heap profiler
    // (its RSS numbers are then the wrapper's, not the daemon's).
    let exe = env!("CARGO_BIN_EXE_boinc_gahp");
    let wrap = std::env::var("MEMORY_BENCH_WRAP").ok();
    if wrap.is_some() {
        args.insert(0, exe);
    }
    let program = wrap.as_deref().unwrap_or(exe);
    let mut g = GahpClient::spawn(Path::new(program), &args, &[], dir).expect("boinc_gahp starts");
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g.command(&sim.select()).unwrap();
    g
}

/// VmRSS and VmHWM of a process, in MiB.
fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0.0)).collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 here; in clock ticks (100 a second on Linux).
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

fn batch(name: &str, jobs: usize, input: &Path) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.into(),
        app_name: "uppercase".into(),
        jobs: (0..jobs)
            .map(|k| JobSpec {
                name: format!("{name}_{k}"),
                args: vec!["--sleep-ms".into(), "1".into()],
                inputs: vec![InputFile { src: input.to_path_buf(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    }
}

fn batch_names(n: usize) -> Vec<String> {
    (0..n).map(|b| format!("mem{b:03}")).collect()
}

/// Sends one request line and reads its result raw: the time until the
/// whole result line was read, its length and field count.
fn query_raw(g: &mut GahpClient, id: u32, batches: &[String]) -> (Duration, usize, usize) {
    let req = Request::Command {
        reqid: ReqId(id),
        command: Command::Boinc(AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: batches.to_vec() }),
    };
    let t = Instant::now();
    g.submit_async(&req).unwrap();
    // The `R` that says a result is ready, then one RESULTS.
    loop {
        let line = g.read_line_within(WAIT).unwrap();
        if line == b"R" {
            break;
        }
    }
    g.send_raw(b"RESULTS\r\n").unwrap();
    let header = g.read_line().unwrap();
    assert_eq!(header, b"S 1", "{}", String::from_utf8_lossy(&header));
    let line = g.read_line_within(WAIT).unwrap();
    let took = t.elapsed();
    assert!(line.starts_with(format!("{id} NULL ").as_bytes()), "{}", String::from_utf8_lossy(&line[..line.len().min(200)]));
    let fields = line.split(|&b| b == b' ').count();
    (took, line.len(), fields)
}

/// One POST of `xml` as the daemon sends it; the reply's body.
fn post(sim: &SimProcess, script: &str, xml: &str) -> Vec<u8> {
    let Request::SelectProject { url, .. } = sim.select() else { unreachable!() };
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let boundary = "------------------------benchboundary";
    let body = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{xml}\r\n--{boundary}--\r\n");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /{path}{script} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    raw.split_off(at)
}

/// What one status of all batches costs in the daemon's own code, step
/// by step, measured here on the same functions: the reply's bytes, the
/// parse into the compact answer, and its line rendered and written in
/// chunks as the session does.
fn status_steps(sim: &SimProcess, batches: &[String]) {
    let Request::SelectProject { authenticator, .. } = sim.select() else { unreachable!() };
    let auth: Authenticator = authenticator;
    let xml = request::query_batch2(&auth, 0.0, batches);
    let t = Instant::now();
    let body = post(sim, "submit_rpc_handler.php", &xml);
    let server = t.elapsed();
    // Before issue 21: the reply parsed into (name, status) Strings, then encoded.
    let t = Instant::now();
    let (states, parsed_bytes, _) = held(|| reply::parse_query_batch2(&body).unwrap());
    let jobs: usize = states.batches.iter().map(Vec::len).sum();
    let groups: Vec<Vec<(String, String)>> =
        states.batches.into_iter().map(|g| g.into_iter().map(|j| (j.name, j.status)).collect()).collect();
    let old_line = CommandResult::Batches { server_time: states.server_time, groups }.into_encoded();
    let old = t.elapsed();
    drop(old_line);
    // The reader alone (a sink that keeps nothing): what of the parse is
    // the XML's and what is the answer's.
    struct Discard;
    impl reply::QueryBatch2Sink for Discard {
        fn group(&mut self, _: usize) {}
        fn job(&mut self, _: &str, _: &str) {}
    }
    let t = Instant::now();
    let mut reader = QueryBatch2Reader::new(Discard);
    for piece in body.chunks(64 << 10) {
        reader.feed(piece);
    }
    reader.finish().unwrap();
    let read_only = t.elapsed();
    // Now: the reply read as it arrives (in the 64 KiB pieces of an HTTP
    // body) into the compact answer, so only a piece of it is held besides it.
    let t = Instant::now();
    let (answer, answer_bytes, parse_peak) = held(|| {
        let mut reader = QueryBatch2Reader::new(QueryAnswerBuilder::new());
        for piece in body.chunks(64 << 10) {
            reader.feed(piece);
        }
        let (builder, server_time) = reader.finish().unwrap();
        builder.finish(server_time)
    });
    let parse = t.elapsed();
    // Until this change the result line was built whole and held (to
    // compare: its size, and the time to build it).
    let t = Instant::now();
    let (whole_line, _, _) = held(|| {
        let mut line = Vec::new();
        answer.encode_into(&mut line);
        line
    });
    let build = t.elapsed();
    let fields = whole_line.split(|&b| b == b' ').count();
    let line_bytes = whole_line.len();
    drop(whole_line);
    // The session's write: rendered a chunk at a time, each written as it is produced.
    let mut null = std::fs::File::create("/dev/null").unwrap();
    let t = Instant::now();
    let ((), _, write_peak) = held(|| {
        let mut chunks = answer.chunks(TAIL_CHUNK);
        while let Some(chunk) = chunks.next_chunk() {
            null.write_all(chunk).unwrap();
        }
    });
    let write = t.elapsed();
    println!(
        "status of {jobs} jobs, in-process: server {:.3} s for a {:.1} MB reply ({:.0} B/job); \
         before issue 21: parsed into {:.1} MB of structures ({:.0} B/job) then encoded, {:.3} s; \
         now: parse {:.3} s ({:.3} s of it the reader alone), read as it arrives into a {:.1} MB compact answer ({:.1} B/job; {:.1} MB peak, the reply's pieces included); \
         render+write to /dev/null in {} KiB chunks {:.3} s ({:.2} MB peak) of the {:.1} MB line ({fields} fields), \
         which until now was built whole ({:.3} s) and held",
        server.as_secs_f64(),
        mb(body.len()),
        body.len() as f64 / jobs.max(1) as f64,
        mb(parsed_bytes),
        parsed_bytes as f64 / jobs.max(1) as f64,
        old.as_secs_f64(),
        parse.as_secs_f64(),
        read_only.as_secs_f64(),
        mb(answer_bytes),
        answer_bytes as f64 / jobs.max(1) as f64,
        mb(parse_peak),
        TAIL_CHUNK >> 10,
        write.as_secs_f64(),
        mb(write_peak),
        mb(line_bytes),
        build.as_secs_f64(),
    );
}

/// The submit side in-process: one 10,000-job request line, what it
/// parses into, and the submit_batch request built from it.
fn submit_steps(input: &Path) {
    let line = gahp_protocol::gahp::request::format(&Request::Command {
        reqid: ReqId(2),
        command: Command::Boinc(AsyncCommand::Submit(batch("mem000", BATCH, input))),
    });
    let (req, parsed, _) = held(|| gahp_protocol::gahp::request::parse(&line).unwrap());
    let Request::Command { command: Command::Boinc(AsyncCommand::Submit(b)), .. } = &req else { unreachable!() };
    // The submit_batch request built from it (an input's physical name is
    // its MD5 content name, 35 bytes).
    let phys = format!("jf_{:032x}", 0u128);
    let jobs: Vec<SubmitJob> = b.jobs.iter().map(|j| SubmitJob { name: &j.name, args: &j.args, files: vec![phys.as_str()] }).collect();
    let auth = Authenticator::new("0123456789abcdef0123456789abcdef");
    let xml = request::submit_batch(&auth, 1, &b.app_name, &SubmitParams::default(), &jobs);
    drop(jobs);
    // What a submit is kept as from the project's tree on, while it waits
    // for a permit and while its pipeline runs.
    let (compact, compact_bytes, _) = held(|| CompactBatch::quoting_args(b.clone()).unwrap());
    println!(
        "one {BATCH}-job BOINC_SUBMIT: {:.2} MB request line, {:.2} MB parsed ({:.0} B/job), kept as {:.3} MB ({:.1} B/job, {:.0} B counted by the batch itself); \
         its submit_batch request {:.2} MB ({:.0} B/job)",
        mb(line.len()),
        mb(parsed),
        parsed as f64 / BATCH as f64,
        mb(compact_bytes),
        compact_bytes as f64 / BATCH as f64,
        compact.heap_bytes(),
        mb(xml.len()),
        xml.len() as f64 / BATCH as f64
    );
}

/// A BLAH job's submit ad, as this bench sends it: its text and what the
/// parsed ad holds (the BLAH front end keeps one per job in flight).
fn blah_ad_steps(iwd: &Path) {
    let ad = blah_job_ad(iwd, "home_bl_mem_12345.0", &[("TransferInput", Value::Str("in".into()))]);
    let text = ad.to_string();
    let (parsed, bytes, _) = held(|| gahp_protocol::classad::ClassAd::parse(&text).unwrap());
    drop(parsed);
    println!("one BLAH_JOB_SUBMIT ad of this bench: {} B of text, {bytes} B parsed", text.len());
}

/// A simulated project, a daemon on it and the one input file of every
/// job (in the directory returned, which must outlive them).
fn boinc_world() -> (tempfile::TempDir, SimProcess, PathBuf, GahpClient) {
    let dir = tempfile::tempdir().unwrap();
    let sim = sim(dir.path());
    let input = dir.path().join("in.dat");
    std::fs::write(&input, "memory bench input\n").unwrap();
    let g = daemon(dir.path(), &sim, None);
    (dir, sim, input, g)
}

fn boinc_front_end(jobs: usize, steps: bool) {
    let (_dir, sim, input, mut g) = boinc_world();
    let pid = g.pid();
    let names = batch_names(jobs.div_ceil(BATCH));
    let idle = rss(pid);
    let cpu = (cpu_secs(pid), cpu_secs(sim.pid()));
    let t = Instant::now();
    for name in &names {
        let r = g
            .call(
                |id| Request::Command { reqid: ReqId(id), command: Command::Boinc(AsyncCommand::Submit(batch(name, BATCH, &input))) },
                WAIT,
            )
            .unwrap();
        assert_eq!(r, ["NULL"], "{r:?}");
    }
    let submit = t.elapsed();
    let after_submit = rss(pid);
    println!(
        "BOINC_* {jobs} jobs in flight: {} submits of {BATCH} jobs in {:.2} s (CPU: daemon {:.2} s, simulated project {:.2} s; \
         {} get_templates, {} submit_batch); RSS {:.1} MB idle, {:.1} MB after the submits (peak {:.1} MB)",
        names.len(),
        submit.as_secs_f64(),
        cpu_secs(pid) - cpu.0,
        cpu_secs(sim.pid()) - cpu.1,
        sim.calls("submit_rpc_handler.php:get_templates"),
        sim.calls("submit_rpc_handler.php:submit_batch"),
        idle.0,
        after_submit.0,
        after_submit.1
    );
    let before = sim.calls("submit_rpc_handler.php:query_batch2");
    for i in 0..3 {
        let cpu = (cpu_secs(pid), cpu_secs(sim.pid()));
        let (took, len, fields) = query_raw(&mut g, 100_000 + i, &names);
        let now = rss(pid);
        println!(
            "  status {} of all {} batches: whole result line read after {:.3} s (CPU: daemon {:.2} s, simulated project {:.2} s; \
             {:.1} MB, {fields} fields); RSS {:.1} MB (peak {:.1} MB)",
            i + 1,
            names.len(),
            took.as_secs_f64(),
            cpu_secs(pid) - cpu.0,
            cpu_secs(sim.pid()) - cpu.1,
            mb(len),
            now.0,
            now.1
        );
    }
    let (now, peak) = rss(pid);
    println!(
        "  {} query_batch2 RPC(s) for the 3 statuses; daemon peak RSS {peak:.1} MB = {:.0} B per job in flight (RSS now {now:.1} MB)",
        sim.calls("submit_rpc_handler.php:query_batch2") - before,
        peak * 1048576.0 / jobs as f64
    );
    println!("rss_point boinc {jobs} {peak:.1}");
    if steps {
        status_steps(&sim, &names);
    }
}

/// A batch as HTCondor's gridmanager names and sends it: the batch
/// `condor#<schedd>#<app>#<qdate>`, each job that and `#<cluster>.<proc>`,
/// its own arguments, the cluster's input file.
fn gridmanager_batch(cluster: usize, jobs: usize, input: &Path) -> SubmitBatch {
    let name = gridmanager_batch_name(cluster);
    SubmitBatch {
        batch_name: name.clone(),
        app_name: "uppercase".into(),
        jobs: (0..jobs)
            .map(|proc| JobSpec {
                name: format!("{name}#{}.{proc}", 1000 + cluster),
                args: vec!["--sleep-ms".into(), proc.to_string()],
                inputs: vec![InputFile { src: input.to_path_buf(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    }
}

fn gridmanager_batch_name(cluster: usize) -> String {
    format!("condor#submit-01.cluster.example.org#uppercase#{}", 1_764_000_000 + cluster)
}

/// A million jobs, polled (issue 38): 100 BOINC_SUBMITs of 10,000
/// gridmanager-named jobs one after another, then two BOINC_QUERY_BATCHES
/// of all 100 batches (min_mod_time 0), each result read with RESULTS as
/// soon as its `R` comes, the second after the first's answer is no longer
/// reused; the daemon's VmHWM after each step.
fn gridmanager_polled(jobs: usize) {
    let (_dir, _sim, input, mut g) = boinc_world();
    let pid = g.pid();
    let names: Vec<String> = (0..jobs.div_ceil(BATCH)).map(gridmanager_batch_name).collect();
    let t = Instant::now();
    for cluster in 0..names.len() {
        let r = g
            .call(
                |id| Request::Command {
                    reqid: ReqId(id),
                    command: Command::Boinc(AsyncCommand::Submit(gridmanager_batch(cluster, BATCH, &input))),
                },
                WAIT,
            )
            .unwrap();
        assert_eq!(r, ["NULL"], "{r:?}");
    }
    let after_submit = rss(pid);
    println!(
        "gridmanager {jobs} jobs polled: {} submits in {:.2} s; RSS {:.1} MB after the submits (peak {:.1} MB)",
        names.len(),
        t.elapsed().as_secs_f64(),
        after_submit.0,
        after_submit.1
    );
    for i in 0..2 {
        if i > 0 {
            // The gridmanager polls again later: past the daemon's
            // query_coalesce (5 s), so the second status is an RPC of its own.
            std::thread::sleep(Duration::from_secs(6));
        }
        let (took, len, fields) = query_raw(&mut g, 200_000 + i, &names);
        assert_eq!(fields, 3 + names.len() + 2 * jobs, "every job's status");
        let now = rss(pid);
        println!(
            "  status {} of all {} batches: {:.3} s, {:.1} MB line; RSS {:.1} MB (peak {:.1} MB)",
            i + 1,
            names.len(),
            took.as_secs_f64(),
            mb(len),
            now.0,
            now.1
        );
    }
    let (now, peak) = rss(pid);
    println!("  daemon peak RSS {peak:.1} MB = {:.0} B per job in flight (RSS now {now:.1} MB)", peak * 1048576.0 / jobs as f64);
    println!("rss_point gridmanager {jobs} {peak:.1}");
}

/// The same submits sent all at once, as a gridmanager with that many
/// submits pending does: every batch is parsed and in the daemon at once.
fn boinc_submits_at_once(jobs: usize) {
    let (_dir, _sim, input, mut g) = boinc_world();
    let pid = g.pid();
    let names = batch_names(jobs.div_ceil(BATCH));
    let t = Instant::now();
    let ids: Vec<u32> = names
        .iter()
        .map(|name| {
            let id = g.reqid();
            g.submit_async(&Request::Command {
                reqid: ReqId(id),
                command: Command::Boinc(AsyncCommand::Submit(batch(name, BATCH, &input))),
            })
            .unwrap();
            id
        })
        .collect();
    for id in ids {
        assert_eq!(g.wait_result(id, WAIT).unwrap(), ["NULL"]);
    }
    let (now, peak) = rss(pid);
    println!(
        "BOINC_* {jobs} jobs, all {} submits sent at once: done in {:.2} s; daemon peak RSS {peak:.1} MB = {:.0} B per job (RSS now {now:.1} MB)",
        names.len(),
        t.elapsed().as_secs_f64(),
        peak * 1048576.0 / jobs as f64
    );
    println!("rss_point at_once {jobs} {peak:.1}");
}

/// HTCondor's gridmanager has at most this many commands pending at a
/// GAHP (`GRIDMANAGER_MAX_PENDING_REQUESTS`, 50 unless set) and reads
/// results as each `R` comes.
const GRIDMANAGER_PENDING: usize = 50;

/// Sends `n` BLAH commands, at most `pending` of them waiting for their
/// results at once (`None`: all of them sent before any result is read);
/// their results, in the order sent.
fn send_paced(g: &mut GahpClient, n: usize, pending: Option<usize>, command: impl Fn(usize) -> BlahCommand) -> Vec<Vec<String>> {
    let cap = pending.unwrap_or(usize::MAX);
    let first = g.reqid() + 1;
    let mut out: Vec<Option<Vec<String>>> = vec![None; n];
    let (mut sent, mut done) = (0, 0);
    while done < n {
        while sent < n && sent - done < cap {
            let id = g.reqid();
            g.submit_async(&Request::Command { reqid: ReqId(id), command: Command::Blah(command(sent)) }).unwrap();
            sent += 1;
        }
        for (id, r) in g.wait_any(WAIT).unwrap() {
            let slot = &mut out[(id - first) as usize];
            assert!(slot.replace(r).is_none(), "two results for request {id}");
            done += 1;
        }
    }
    out.into_iter().map(|r| r.unwrap()).collect()
}

/// `n` BLAH_JOB_SUBMITs, each job with its own input, then a
/// BLAH_JOB_STATUS of each, `pending` as in [`send_paced`]: the daemon's
/// peak RSS and the RPCs per job.
fn blah_front_end(n: usize, pending: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let sim = sim(dir.path());
    let Request::SelectProject { url, authenticator } = sim.select() else { unreachable!() };
    std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", authenticator.expose())).unwrap();
    let config = dir.path().join("gahp.toml");
    std::fs::write(&config, format!("[blah]\nproject_url = \"{url}\"\nauthenticator_file = \"boinc.auth\"\n")).unwrap();
    let mut g = daemon(dir.path(), &sim, Some(&config));
    let pid = g.pid();
    let iwd = dir.path().join("iwd");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("in"), "blah memory bench\n").unwrap();
    let t = Instant::now();
    let submits = send_paced(&mut g, n, pending, |i| BlahCommand::JobSubmit {
        ad: blah_job_ad(
            &iwd,
            &format!("home_bl_mem_{i}.0"),
            &[("TransferInput", Value::Str("in".into())), ("BoincApp", Value::Str("uppercase".into()))],
        ),
    });
    let ids: Vec<String> = submits
        .into_iter()
        .map(|r| {
            assert_eq!(r[0], "0", "{r:?}");
            r[2].clone()
        })
        .collect();
    let submit = t.elapsed();
    let after_submit = rss(pid);
    let t = Instant::now();
    for r in send_paced(&mut g, n, pending, |i| BlahCommand::JobStatus { job_id: ids[i].clone() }) {
        assert_eq!(r[0], "0", "{r:?}");
    }
    let status = t.elapsed();
    let (now, peak) = rss(pid);
    let state = sim.state();
    let counts = state["rpc_counts"].as_object().unwrap();
    let total: u64 = counts.values().map(|v| v.as_u64().unwrap_or(0)).sum();
    println!(
        "BLAH {n} jobs in flight, {}: submitted in {:.1} s (RSS {:.1} MB, peak {:.1} MB), one status of each in {:.1} s; \
         daemon peak RSS {peak:.1} MB = {:.0} B per job (RSS now {now:.1} MB); {total} RPCs = {:.4} per job: {counts:?}",
        match pending {
            Some(p) => format!("at most {p} commands pending (as a gridmanager sends them)"),
            None => "every command sent before a result is read".into(),
        },
        submit.as_secs_f64(),
        after_submit.0,
        after_submit.1,
        status.as_secs_f64(),
        peak * 1048576.0 / n as f64,
        total as f64 / n as f64
    );
    println!("rss_point {} {n} {peak:.1}", if pending.is_some() { "blah" } else { "blah_flood" });
}

/// `n` `batch boinc` jobs of one shell script through the runner app
/// (docs/runner.md), each with its own input file and an environment, or
/// the same jobs for the registered app `uppercase` (`runner` false),
/// sent as a gridmanager sends them, until every job is on the project:
/// the time, the RPCs, the bytes uploaded and the daemon's peak RSS.
fn script_batch(n: usize, runner: bool) {
    let dir = tempfile::tempdir().unwrap();
    let sim = sim(dir.path());
    let Request::SelectProject { url, authenticator } = sim.select() else { unreachable!() };
    std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", authenticator.expose())).unwrap();
    let config = dir.path().join("gahp.toml");
    std::fs::write(&config, format!("[blah]\nproject_url = \"{url}\"\nauthenticator_file = \"boinc.auth\"\nrunner_app = \"runner\"\n"))
        .unwrap();
    let mut g = daemon(dir.path(), &sim, Some(&config));
    let pid = g.pid();
    let iwd = dir.path().join("iwd");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("job.sh"), "#!/bin/sh\n# a job script of typical length\nset -e\ntr a-z A-Z < in > out\necho \"done $MODE\"\n")
        .unwrap();
    for i in 0..n {
        std::fs::write(iwd.join(format!("in.{i}")), format!("the input of job {i}\n")).unwrap();
    }
    let t = Instant::now();
    let submits = send_paced(&mut g, n, Some(GRIDMANAGER_PENDING), |i| {
        let input = ("TransferInput", Value::Str(format!("in.{i}")));
        let job_dir = format!("home_bl_script_{i}.0");
        let ad = if runner {
            blah_job_ad(&iwd, &job_dir, &[input, ("Environment", Value::Str("MODE=fast".into()))])
        } else {
            blah_job_ad(&iwd, &job_dir, &[input, ("BoincApp", Value::Str("uppercase".into()))])
        };
        BlahCommand::JobSubmit { ad }
    });
    assert!(submits.iter().all(|r| r[0] == "0"), "{:?}", submits.iter().find(|r| r[0] != "0"));
    let until = Instant::now() + Duration::from_secs(900);
    let state = loop {
        let state = sim.state();
        if state["jobs"].as_array().map_or(0, |j| j.len()) >= n {
            break state;
        }
        assert!(Instant::now() < until, "not every job reached the project");
        std::thread::sleep(Duration::from_millis(500));
    };
    let elapsed = t.elapsed();
    let (_, peak) = rss(pid);
    let counts = state["rpc_counts"].as_object().unwrap();
    let total: u64 = counts.values().map(|v| v.as_u64().unwrap_or(0)).sum();
    let files = state["files"].as_array().unwrap();
    let bytes: i64 = files.iter().map(|f| f["size"].as_i64().unwrap_or(0)).sum();
    println!(
        "{n} {} jobs on the project in {:.1} s: {total} RPCs ({:.4} per job) {counts:?}; {} files uploaded, {bytes} bytes \
         ({:.0} per job); daemon peak RSS {peak:.1} MB",
        if runner { "script (runner)" } else { "registered-app (uppercase)" },
        elapsed.as_secs_f64(),
        total as f64 / n as f64,
        files.len(),
        bytes as f64 / n as f64,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let run = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {} cores, {cpu}; load {}; {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        if quick { "quick sizes" } else { "full sizes" }
    );
    if run("parse") {
        let dir = tempfile::tempdir().unwrap();
        let input: PathBuf = dir.path().join("in.dat");
        submit_steps(&input);
        blah_ad_steps(dir.path());
    }
    let label = |n: usize| if n >= 1_000_000 { format!("{}m", n / 1_000_000) } else { format!("{}k", n / 1000) };
    let sizes: &[usize] = if quick { &[10_000, 100_000] } else { &[10_000, 100_000, 1_000_000] };
    for &n in sizes {
        if run(&format!("boinc_{}", label(n))) {
            boinc_front_end(n, n == *sizes.last().unwrap());
        }
    }
    let n = if quick { 100_000 } else { 1_000_000 };
    if run(&format!("gridmanager_{}", label(n))) {
        gridmanager_polled(n);
    }
    if run(&format!("at_once_{}", label(n))) {
        boinc_submits_at_once(n);
    }
    let sizes: &[usize] = if quick { &[10_000] } else { &[10_000, 100_000] };
    for &n in sizes {
        if run(&format!("blah_{}", label(n))) {
            blah_front_end(n, Some(GRIDMANAGER_PENDING));
        }
        if run(&format!("blah_flood_{}", label(n))) {
            blah_front_end(n, None);
        }
    }
    // Script jobs against the same jobs for a registered app.
    if run("script_10k") {
        script_batch(10_000, false);
        script_batch(10_000, true);
    }
}
