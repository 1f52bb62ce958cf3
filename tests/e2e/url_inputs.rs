//! URLs in `transfer_input_files` end to end (docs/blah.md "Inputs"): the
//! real daemon over pipes, as a gridmanager drives it, against the
//! simulated project (whose `runner` app really runs the job's script),
//! fetching from a small HTTP server on loopback and through HTCondor file
//! transfer plugins (shell scripts written here) for other schemes.

use crate::common::blah::{str_value, submit, wait_final};
use crate::common::script::ScriptWorld;
use crate::common::*;
use gahp_protocol::classad::ClassAd;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A world whose daemon config has the runner and `extra`.
fn world(extra: &str) -> ScriptWorld {
    ScriptWorld::new(&format!("batch_window_secs = 1.5\nrunner_app = \"runner\"\n{extra}"))
}

/// A job directory with `run.sh` and `in`.
fn job_dir(w: &ScriptWorld, name: &str, script: &str) -> PathBuf {
    w.job_dir(name, "run.sh", script, "local in of")
}

/// A script job (`executable = run.sh`, sent) in `iwd` with `inputs`.
fn script_job(iwd: &Path, inputs: &str) -> ClassAd {
    crate::common::script::script_job(iwd, "run.sh", &[("TransferInput", str_value(inputs))])
}

/// A job of the project's `uppercase` app (its input named `in`).
fn uppercase_job(iwd: &Path, inputs: &str) -> ClassAd {
    let name = iwd.file_name().unwrap().to_string_lossy().into_owned();
    let attrs = [("BoincApp", str_value("uppercase")), ("TransferInput", str_value(inputs))];
    gahp_testkit::blah_job_ad(iwd, &format!("home_bl_{name}"), &attrs)
}

/// The final status ad of a job (asserting its status).
fn final_ad(g: &mut GahpClient, id: &str, status: &str) -> ClassAd {
    let r = wait_final(g, id, WAIT);
    assert_eq!((r[0].as_str(), r[2].as_str()), ("0", status), "{r:?}");
    ClassAd::parse(&r[3]).unwrap()
}

fn hold_reason(g: &mut GahpClient, id: &str) -> String {
    final_ad(g, id, "5").get_str("HoldReason").unwrap().to_string()
}

/// A small HTTP/1.1 server on loopback: each path's reply, and how many
/// times each path was asked for.
struct Web {
    port: u16,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Web {
    fn start() -> Web {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let hits = counted.clone();
                std::thread::spawn(move || serve(conn, &hits));
            }
        });
        Web { port, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// One request per connection.
fn serve(mut conn: TcpStream, hits: &Mutex<HashMap<String, usize>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
    *hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let reply = |status: &str, headers: &str, body: &[u8]| {
        let head = format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        [head.as_bytes(), body].concat()
    };
    let bytes = match path.as_str() {
        "/data.txt" => reply("200 OK", "", b"fetched from the web\n"),
        "/moved/data.txt" => reply("302 Found", "Location: /data.txt\r\n", b""),
        "/in" => reply("200 OK", "", b"hello from a url\n"),
        "/told-big" => reply("200 OK", "", &vec![b'x'; 10_000]),
        "/big" => {
            // Chunked, no length said: only the bytes tell.
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
            for _ in 0..100 {
                let chunk = [b"3e8\r\n".as_slice(), &[b'y'; 1000], b"\r\n"].concat();
                if conn.write_all(&chunk).is_err() {
                    return;
                }
            }
            let _ = conn.write_all(b"0\r\n\r\n");
            return;
        }
        "/unframed" => {
            // Neither counted nor chunked: its end is the connection's.
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nsome bytes");
            return;
        }
        _ => reply("404 Not Found", "", b"no such file\n"),
    };
    let _ = conn.write_all(&bytes);
}

/// A runner job's script that prints what it was given.
const SHOW: &str = "#!/bin/sh\ncat data.txt in > got.txt\n";

#[test]
fn http_inputs_are_fetched_once_per_batch_bounded_and_a_failure_holds_only_its_job() {
    let web = Web::start();
    // No plugins: HTCondor's are not asked for.
    let w = world("url_input_max_bytes = 4096\ntransfer_plugins = []\n");
    let mut g = w.start();
    // Two script jobs of one batch name one URL (after a redirect), an app's
    // job binds one by name, and five jobs can't have theirs.
    let moved = web.url("/moved/data.txt");
    let (j1, j2) = (job_dir(&w, "j1", SHOW), job_dir(&w, "j2", SHOW));
    let up = job_dir(&w, "up", "");
    let cases: Vec<(&str, String)> = vec![
        ("missing", web.url("/missing/x.txt")),
        ("toldbig", web.url("/told-big")),
        ("big", web.url("/big")),
        ("osdf", "osdf:///ospool/data/x".to_string()),
        ("unframed", web.url("/unframed")),
    ];
    let id1 = submit(&mut g, script_job(&j1, &format!("in, {moved}")));
    let id2 = submit(&mut g, script_job(&j2, &format!("{moved},in")));
    let held: Vec<(String, String)> = cases
        .iter()
        .map(|(name, url)| (submit(&mut g, script_job(&job_dir(&w, name, SHOW), &format!("in, {url}"))), url.clone()))
        .collect();
    let id_up = submit(&mut g, uppercase_job(&up, &web.url("/in")));

    for (iwd, id) in [(&j1, &id1), (&j2, &id2)] {
        let done = final_ad(&mut g, id, "4");
        assert_eq!(done.get_int("ExitCode"), Some(0), "{done}");
        let name = iwd.file_name().unwrap().to_string_lossy().into_owned();
        let got = std::fs::read_to_string(iwd.join("got.txt")).unwrap();
        assert_eq!(got, format!("fetched from the web\nlocal in of {name}\n"));
        assert!(!iwd.join("data.txt").exists(), "an input does not come back");
    }
    assert_eq!((web.hits("/moved/data.txt"), web.hits("/data.txt")), (1, 1), "one fetch for the batch");
    assert_eq!(final_ad(&mut g, &id_up, "4").get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(up.join("out")).unwrap(), "HELLO FROM A URL\n");

    let reasons: Vec<String> = held.iter().map(|(id, _)| hold_reason(&mut g, id)).collect();
    let (missing, told_big, big, osdf, unframed) = (&reasons[0], &reasons[1], &reasons[2], &reasons[3], &reasons[4]);
    assert!(missing.contains(&held[0].1) && missing.contains("HTTP status 404"), "{missing}");
    assert!(missing.contains("transfer_input_files") && missing.contains("condor_release"), "{missing}");
    for reason in [told_big, big] {
        assert!(reason.contains("larger than url_input_max_bytes (4096 bytes)"), "{reason}");
    }
    assert!(osdf.contains("no file transfer plugin handles osdf://"), "{osdf}");
    assert!(unframed.contains("neither its length nor that it is chunked"), "{unframed}");
    assert_eq!(web.hits("/missing/x.txt"), 1, "a 404 is not asked again");
    // Nothing of the batch's scratch is left.
    let archives = w.dir.path().join("state/job-archives");
    let left: Vec<_> = std::fs::read_dir(&archives).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn other_schemes_go_through_htcondor_file_transfer_plugins() {
    let w = world("");
    let store = w.dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("data.txt"), "fetched by a plugin\n").unwrap();
    std::fs::write(store.join("in"), "plugin input\n").unwrap();
    // osdf:// and stash://: a copy from `store` of the URL's last segment,
    // the results written as old ClassAds.
    let copy = w.script(
        "copy_plugin",
        &format!(
            "#!/bin/sh\n\
             if [ \"$1\" = -classad ]; then\n\
             printf 'MultipleFileSupport = true\\nPluginVersion = \"0.1\"\\nPluginType = \"FileTransfer\"\\nSupportedMethods = \"stash, osdf\"\\n'\n\
             exit 0\nfi\n\
             [ \"$1\" = -infile ] && [ \"$3\" = -outfile ] || exit 9\n\
             sed -n 's/.*Url = \"\\([^\"]*\\)\".*LocalFileName = \"\\([^\"]*\\)\".*/\\1 \\2/p' \"$2\" | while read url local; do\n\
             cp \"{store}/${{url##*/}}\" \"$local\"\n\
             printf 'TransferUrl = \"%s\"\\nTransferFileName = \"%s\"\\nTransferSuccess = true\\n\\n' \"$url\" \"$local\" >> \"$4\"\n\
             done\n",
            store = store.display()
        ),
    );
    // pelican://: fails, saying why in a new ClassAd.
    let refuse = w.script(
        "refuse_plugin",
        "#!/bin/sh\n\
         if [ \"$1\" = -classad ]; then\n\
         printf 'MultipleFileSupport = true\\nPluginType = \"FileTransfer\"\\nSupportedMethods = \"pelican\"\\n'\n\
         exit 0\nfi\n\
         url=$(sed -n 's/.*Url = \"\\([^\"]*\\)\".*/\\1/p' \"$2\")\n\
         printf '[ TransferUrl = \"%s\"; TransferSuccess = false; TransferError = \"pelican: object not found\\\\nat the origin\" ]' \"$url\" > \"$4\"\n\
         exit 1\n",
    );
    // slow://: never ends (nor does what it started) until it is killed.
    let slow = w.script(
        "slow_plugin",
        "#!/bin/sh\n\
         if [ \"$1\" = -classad ]; then\n\
         echo 'MultipleFileSupport = true'; echo 'SupportedMethods = \"slow\"'; exit 0\nfi\n\
         sleep 300 &\nsleep 300\n",
    );
    // Not a plugin at all: left out, the others still used.
    let broken = w.script("broken_plugin", "#!/bin/sh\necho garbage [\n");
    let plugins = [&copy, &refuse, &slow, &broken, &w.dir.path().join("no_such_plugin")]
        .iter()
        .map(|p| format!("\"{}\"", p.file_name().unwrap().to_string_lossy()))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        &w.config,
        std::fs::read_to_string(&w.config).unwrap() + &format!("transfer_plugins = [{plugins}]\nurl_input_timeout_secs = 3\n"),
    )
    .unwrap();
    let mut g = w.start();

    let (j1, up) = (job_dir(&w, "p1", SHOW), job_dir(&w, "pup", ""));
    let id1 = submit(&mut g, script_job(&j1, "in, osdf:///ospool/ap40/data.txt"));
    let id_up = submit(&mut g, uppercase_job(&up, "stash:///osgconnect/public/in"));
    let id_refused = submit(&mut g, script_job(&job_dir(&w, "p2", SHOW), "in, pelican://fed.example/ns/data.txt"));
    let id_slow = submit(&mut g, script_job(&job_dir(&w, "p3", SHOW), "in, slow://x/data.txt"));

    assert_eq!(final_ad(&mut g, &id1, "4").get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(j1.join("got.txt")).unwrap(), "fetched by a plugin\nlocal in of p1\n");
    assert_eq!(final_ad(&mut g, &id_up, "4").get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(up.join("out")).unwrap(), "PLUGIN INPUT\n");
    let refused = hold_reason(&mut g, &id_refused);
    assert!(refused.contains("pelican://fed.example/ns/data.txt") && refused.contains("refuse_plugin"), "{refused}");
    assert!(refused.contains("pelican: object not found; at the origin"), "{refused}");
    let slow = hold_reason(&mut g, &id_slow);
    assert!(slow.contains("not fetched within url_input_timeout_secs (3 s)"), "{slow}");
    let log = log_text(w.dir.path());
    assert!(log.contains("broken_plugin") && log.contains("not used as a file transfer plugin"), "{log}");
}
