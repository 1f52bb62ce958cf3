//! The Prometheus metrics (docs/metrics.md), scraped from the real binary
//! over loopback while it runs jobs on the simulated project: the daemon
//! with `[metrics] listen`, and `serve --metrics-listen`. Each scrape is
//! read by the text format's rules (a strict parser below), and the values
//! are checked against what the project saw.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::blah::{submit, wait_final};
use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::classad::Value;

/// One sample: its name, labels and value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape's samples.
#[derive(Debug)]
struct Scrape(Vec<Sample>);

impl Scrape {
    /// The sum over the samples named `name` whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).map(|s| s.value).sum()
    }

    /// The one sample `name` with exactly the labels `with`.
    fn get(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = with.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.0.iter().find(|s| s.name == name && s.labels == want).map(|s| s.value)
    }

    fn matching<'a>(&'a self, name: &'a str, with: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.0.iter().filter(move |s| s.name == name && with.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
    }
}

/// Parses the Prometheus text format (0.0.4) strictly: `# HELP` and
/// `# TYPE` lines, samples `name{label="value",...} value`, nothing else;
/// a family typed at most once and before its samples; no series twice; a
/// histogram's buckets cumulative up to `+Inf`, which equals its `_count`.
fn parse(text: &str) -> Result<Scrape, String> {
    if !text.ends_with('\n') {
        return Err("the text does not end with a newline".into());
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !metric_name(name) || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(bad("bad TYPE"));
                    }
                    if types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(bad("a second TYPE for the family"));
                    }
                    if samples.iter().any(|s: &Sample| family(&s.name, &types) == name) {
                        return Err(bad("TYPE after the family's samples"));
                    }
                }
                (Some("HELP"), Some(name), _) if metric_name(name) => {}
                _ => return Err(bad("a comment that is neither HELP nor TYPE")),
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
        let name = &line[..name_end];
        if !metric_name(name) {
            return Err(bad("bad metric name"));
        }
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let (parsed, after) = label_set(inner).map_err(|e| bad(&e))?;
            labels = parsed;
            rest = after;
        }
        let mut fields = rest.strip_prefix(' ').ok_or_else(|| bad("no space before the value"))?.split(' ');
        let value = match fields.next() {
            Some("+Inf") => f64::INFINITY,
            Some("-Inf") => f64::NEG_INFINITY,
            Some("NaN") => f64::NAN,
            Some(v) => v.parse::<f64>().map_err(|_| bad("bad value"))?,
            None => return Err(bad("no value")),
        };
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().map_err(|_| bad("bad timestamp"))?;
        }
        if fields.next().is_some() {
            return Err(bad("more after the timestamp"));
        }
        if !types.contains_key(family(name, &types)) {
            return Err(bad("a sample of an untyped family"));
        }
        if !seen.insert(format!("{name}{labels:?}")) {
            return Err(bad("the same series twice"));
        }
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    let scrape = Scrape(samples);
    for (name, kind) in &types {
        if kind == "histogram" {
            check_histogram(&scrape, name)?;
        }
    }
    Ok(scrape)
}

/// The family a sample belongs to: a histogram's `_bucket`, `_sum` and
/// `_count` are its own.
fn family<'a>(sample: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            if types.get(base).is_some_and(|k| k == "histogram") {
                return base;
            }
        }
    }
    sample
}

fn metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `label="value",...}` and what follows it; values unescaped (`\\`,
/// `\"`, `\n` only).
fn label_set(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find("=\"").ok_or("a label without =\"")?;
        let name = &s[..eq];
        if !label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = s[eq + 2..].char_indices();
        let end = loop {
            match chars.next().ok_or("an unterminated label value")? {
                (i, '"') => break eq + 2 + i + 1,
                (_, '\\') => match chars.next().ok_or("an escape at the end")?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, '\n') => return Err("a newline in a label value".into()),
                (_, c) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        s = &s[end..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// Each series of the histogram: cumulative buckets, `+Inf` = `_count`.
fn check_histogram(scrape: &Scrape, name: &str) -> Result<(), String> {
    let bucket = format!("{name}_bucket");
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in scrape.0.iter().filter(|s| s.name == bucket) {
        let le = s.labels.get("le").ok_or("a bucket without le")?;
        let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().map_err(|_| format!("bad le {le}"))? };
        let mut rest = s.labels.clone();
        rest.remove("le");
        series.entry(format!("{rest:?}")).or_default().push((le, s.value));
    }
    for (labels, mut buckets) in series {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err(format!("{name}{labels}: buckets not cumulative"));
        }
        let inf = buckets.last().filter(|b| b.0.is_infinite()).ok_or(format!("{name}{labels}: no +Inf bucket"))?.1;
        let count = scrape.0.iter().find(|s| {
            s.name == format!("{name}_count") && {
                let mut l = s.labels.clone();
                l.remove("le");
                format!("{l:?}") == labels
            }
        });
        if count.map(|c| c.value) != Some(inf) {
            return Err(format!("{name}{labels}: +Inf bucket {inf} is not _count {count:?}"));
        }
    }
    Ok(())
}

#[test]
fn the_parser_refuses_what_the_format_does_not_allow() {
    let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v \\\"q\\\" \\\\ \\n\"} 3\n";
    assert_eq!(parse(ok).unwrap().get("a_total", &[("k", "v \"q\" \\ \n")]), Some(3.0));
    for bad in [
        "a_total 1\n",                                                                    // no TYPE
        "# TYPE a counter\na 1",                                                          // no final newline
        "# TYPE a counter\na{k=\"v} 1\n",                                                 // unterminated value
        "# TYPE a counter\na{k=\"\\x\"} 1\n",                                             // bad escape
        "# TYPE a counter\na 1\na 2\n",                                                   // a series twice
        "# TYPE a counter\na one\n",                                                      // not a number
        "# TYPE a gauge\n# TYPE a gauge\n",                                               // typed twice
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 1\n",                       // +Inf is not the count
        "# a stray comment\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} parsed");
    }
}

/// A GET of `path` on `addr`: status line and body, the head checked.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: e2e\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a head and a body");
    let length: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).expect("a length").parse().unwrap();
    assert_eq!(length, body.len(), "{head}");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn scrape(addr: &str) -> Scrape {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// Scrapes until `ok` holds (within WAIT); the last scrape.
fn scrape_until(addr: &str, what: &str, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let until = Instant::now() + WAIT;
    loop {
        let m = scrape(addr);
        if ok(&m) {
            return m;
        }
        assert!(Instant::now() < until, "{what}: {m:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A loopback port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn sim_calls(sim: &Sim, endpoint: &str) -> f64 {
    sim.state()["rpc_counts"][endpoint].as_u64().unwrap_or(0) as f64
}

/// Hosts slow enough (10 s a job) that a scrape sees the jobs run.
const SLOW_HOSTS: &str = "[[hosts]]\nname = \"host\"\ncount = 4\nflops = 1e8\n";

#[test]
fn the_daemons_metrics_count_its_rpcs_faults_bytes_and_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let sim = Sim::start_config(dir, SLOW_HOSTS);
    // The first status query fails once: retried, counted by its cause.
    sim.set_faults(serde_json::json!({"script": [{"endpoint": "submit_rpc_handler.php:query_batch2", "nth": 1, "kind": "http503"}]}));
    std::fs::write(dir.join("boinc.auth"), format!("{}\n", sim.auth)).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"boinc.auth\"\nstatus_refresh_secs = 0.3\n[metrics]\nlisten = \"{addr}\"\n",
            sim.url
        ),
    )
    .unwrap();
    let mut g = gahp_with(dir, &["--config", config.to_str().unwrap()], &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    let project = sim.url.as_str();

    // Three batch boinc jobs, each with its own input.
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let iwd = dir.join(format!("job{i}"));
            std::fs::create_dir_all(&iwd).unwrap();
            std::fs::write(iwd.join("in"), format!("job {i} text\n")).unwrap();
            let attrs = [("BoincApp", Value::Str("uppercase".into())), ("TransferInput", Value::Str("in".into()))];
            submit(&mut g, gahp_testkit::blah_job_ad(&iwd, &format!("job{i}"), &attrs))
        })
        .collect();
    let live = |m: &Scrape| ["submitting", "idle", "running"].iter().map(|s| m.sum("boinc_gahp_jobs", &[("state", s)])).sum::<f64>();
    scrape_until(&addr, "the three jobs in the jobs gauge", |m| live(m) == 3.0);
    for id in &ids {
        assert_eq!(wait_final(&mut g, id, WAIT)[2], "4");
    }
    // And a BOINC_* batch of two jobs.
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let files = inputs(dir, 2, "star");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("star", &files))), WAIT).unwrap(), ["NULL"]);
    wait_finished(&mut g, "star");

    let p = ("project", project);
    let ok = ("outcome", "ok");
    let m = scrape_until(&addr, "the counts match the project's", |m| {
        let q2 = m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "query_batch2")]);
        live(m) == 0.0
            && m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "submit_batch"), ok]) == sim_calls(&sim, "submit_rpc_handler.php:submit_batch")
            && m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "create_batch"), ok]) == sim_calls(&sim, "submit_rpc_handler.php:create_batch")
            && m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "upload_files"), ok]) == sim_calls(&sim, "job_file.php:upload_files")
            // The project counts the attempt that got the 503 too.
            && q2 + 1.0 == sim_calls(&sim, "submit_rpc_handler.php:query_batch2")
    });
    // Both front ends submitted: at least two batches.
    assert!(m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "submit_batch"), ok]) >= 2.0, "{m:#?}");
    assert_eq!(
        m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "submit_batch")]),
        m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "submit_batch"), ok])
    );
    assert_eq!(
        m.get("boinc_gahp_rpc_duration_seconds_count", &[p, ("kind", "submit_batch")]),
        Some(m.sum("boinc_gahp_rpcs_total", &[p, ("kind", "submit_batch")]))
    );
    assert_eq!(m.get("boinc_gahp_rpc_faults_total", &[p, ("cause", "http_5xx")]), Some(1.0), "{m:#?}");
    assert_eq!(m.get("boinc_gahp_rpc_retries_total", &[p, ("cause", "http_5xx")]), Some(1.0));
    // Each input went up once: the jobs' three and the batch's two.
    let written: u64 = (0..3).map(|i| format!("job {i} text\n").len() as u64).sum::<u64>()
        + files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum::<u64>();
    assert_eq!(m.get("boinc_gahp_uploaded_bytes_total", &[p]), Some(written as f64), "{m:#?}");
    assert!(m.get("boinc_gahp_downloaded_bytes_total", &[p]).is_some_and(|b| b > 0.0), "{m:#?}");
    assert_eq!(m.get("boinc_gahp_jobs_finished_total", &[("client", ""), p, ("state", "completed")]), Some(3.0));
    assert_eq!(m.get("boinc_gahp_batches", &[("client", ""), p, ("state", "watched")]), Some(1.0));
    assert!(m.get("boinc_gahp_state_db_size_bytes", &[("client", "")]).is_some_and(|b| b > 0.0), "{m:#?}");
    // Every label value of a project is the project's URL.
    assert!(m.0.iter().filter_map(|s| s.labels.get("project")).all(|u| u == project));

    // One path; the rest is refused.
    assert!(get(&addr, "/").0.starts_with("HTTP/1.1 404"));
    g.close(WAIT).unwrap();
}

#[test]
fn the_daemon_serves_metrics_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[metrics]\nlisten = \"0.0.0.0:9631\"\n").unwrap();
    let out = Command::new(boinc_gahp())
        .args(["--state-dir", dir.path().join("state").to_str().unwrap(), "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.listen") && err.contains("loopback"), "{err}");
    assert!(out.stdout.is_empty(), "nothing on the protocol's stdout");
}

#[test]
fn serve_counts_each_clients_connections_and_jobs_by_its_name() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let addr = format!("127.0.0.1:{}", free_port());
    let s = serve(dir.path(), &tokens, &["--metrics-listen", &addr]);

    // A wrong token is counted as refused, under no client's name.
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "not-a-token\n").unwrap();
    let out = Command::new(boinc_gahp()).args(s.connect_args(&wrong, &[])).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success());

    let area = s.files("alice");
    std::fs::create_dir_all(area.join("in")).unwrap();
    std::fs::write(area.join("in/f0"), "hello\n").unwrap();
    let mut a = s.connect(&alice, dir.path(), &["--remote-paths"]);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    let files = [Path::new("in/f0").to_path_buf()];
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("b1", &files))), WAIT).unwrap(), ["NULL"]);
    wait_finished(&mut a, "b1");

    let alice_is = ("client", "alice");
    let m = scrape(&addr);
    assert_eq!(m.get("boinc_gahp_serve_auth_failures_total", &[]), Some(1.0), "{m:#?}");
    assert_eq!(m.get("boinc_gahp_serve_connections", &[alice_is]), Some(1.0));
    assert_eq!(m.get("boinc_gahp_serve_connections_opened_total", &[alice_is]), Some(1.0));
    assert_eq!(m.get("boinc_gahp_batches", &[alice_is, ("project", &sim.url), ("state", "watched")]), Some(1.0));
    assert_eq!(m.sum("boinc_gahp_rpcs_total", &[("kind", "submit_batch"), ("outcome", "ok")]), 1.0);
    assert!(m.get("boinc_gahp_state_db_size_bytes", &[alice_is]).is_some_and(|b| b > 0.0), "{m:#?}");
    // No label carries the token.
    let token = std::fs::read_to_string(&alice).unwrap();
    let (_, body) = get(&addr, "/metrics");
    assert!(!body.contains(token.trim()), "the token is in the metrics");

    a.close(WAIT).unwrap();
    scrape_until(&addr, "the closed connection is no longer counted", |m| m.get("boinc_gahp_serve_connections", &[alice_is]) == Some(0.0));
}
