//! Fault injection: plan parsing and validation, decisions (rules, most
//! specific key, seeded determinism, scripted one-shots), and what a real
//! HTTP client (awc) sees for each kind through a tiny actix-web server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use boinc_sim::faults::{Fault, FaultKind, FaultPlan, FaultPlanError, FaultRule, Faults, Peer, ScriptedFault};
use bytes::Bytes;

const BODY: &str = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<create_batch>\n<batch_id>42</batch_id>\n</create_batch>\n";

struct Server {
    base: String,
    acted: Arc<AtomicU64>,
    handle: actix_web::dev::ServerHandle,
}

#[derive(Clone)]
struct State {
    faults: Faults,
    acted: Arc<AtomicU64>,
}

async fn handler(req: HttpRequest, st: web::Data<State>) -> HttpResponse {
    let rpc = req.match_info().get("rpc").unwrap_or("").to_string();
    let fault = st.faults.draw(&format!("t.php:{rpc}")).watching(Peer::of(&req));
    if let Some(resp) = fault.before().await {
        return resp;
    }
    st.acted.fetch_add(1, Ordering::SeqCst);
    fault.after(
        StatusCode::OK,
        "text/xml",
        Bytes::from_static(BODY.as_bytes()),
        &[("Content-Disposition", "attachment; filename=x_0".to_string())],
    )
}

async fn start(plan: FaultPlan) -> (Server, Faults) {
    let faults = Faults::new(plan);
    let acted = Arc::new(AtomicU64::new(0));
    let state = web::Data::new(State { faults: faults.clone(), acted: acted.clone() });
    let srv = HttpServer::new(move || App::new().app_data(state.clone()).route("/t.php/{rpc}", web::to(handler)))
        .workers(1)
        // As the simulated project: a held reply watches its client.
        .on_connect(Peer::on_connect)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .expect("bind");
    let addr = srv.addrs()[0];
    let server = srv.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    (Server { base: format!("http://{addr}/t.php"), acted, handle }, faults)
}

fn rule_plan(endpoint: &str, rule: FaultRule) -> FaultPlan {
    let mut plan = FaultPlan { seed: 7, ..Default::default() };
    plan.rules.insert(endpoint.to_string(), rule);
    plan
}

/// One request on a fresh connection: Ok((status, content-disposition?, body)).
async fn get(url: &str) -> Result<(StatusCode, Option<String>, Bytes), String> {
    let client = awc::Client::builder().timeout(Duration::from_secs(10)).finish();
    let mut resp = client.get(url).send().await.map_err(|e| format!("{e:?}"))?;
    let cd = resp.headers().get("content-disposition").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = resp.body().await.map_err(|e| format!("body: {e:?}"))?;
    Ok((resp.status(), cd, body))
}

#[actix_web::test]
async fn no_fault_passes_the_reply_through() {
    let (srv, _f) = start(FaultPlan::default()).await;
    let (status, cd, body) = get(&format!("{}/x", srv.base)).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cd.as_deref(), Some("attachment; filename=x_0"));
    assert_eq!(body, BODY.as_bytes());
    assert_eq!(srv.acted.load(Ordering::SeqCst), 1);
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn http500_and_http503_are_html_errors_and_do_not_act() {
    let rule500 = FaultRule { http500: 1.0, ..Default::default() };
    let (srv, faults) = start(rule_plan("t.php:x", rule500)).await;
    let (status, cd, body) = get(&format!("{}/x", srv.base)).await.unwrap();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(cd, None);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("<title>500 Internal Server Error</title>"), "{text}");

    faults.set_plan(rule_plan("t.php:*", FaultRule { http503: 1.0, ..Default::default() }));
    let (status, _, body) = get(&format!("{}/y", srv.base)).await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8_lossy(&body).contains("503 Service Unavailable"));
    assert_eq!(srv.acted.load(Ordering::SeqCst), 0, "the handler must not act");
    assert_eq!(faults.injected().get("t.php:y http503"), Some(&1));
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn reset_kills_the_connection_without_acting() {
    let rule = FaultRule { reset: 1.0, ..Default::default() };
    let (srv, _f) = start(rule_plan("*", rule)).await;
    let err = get(&format!("{}/x", srv.base)).await.unwrap_err();
    // What awc reports for a connection closed before any response byte:
    // SendRequestError::Connect(ConnectError::Disconnected), although the
    // request was sent (see docs/sim-faults.md).
    assert_eq!(err, "Connect(Disconnected)");
    assert_eq!(srv.acted.load(Ordering::SeqCst), 0);
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn lose_reply_acts_then_kills_the_connection() {
    let rule = FaultRule { lose_reply: 1.0, ..Default::default() };
    let (srv, _f) = start(rule_plan("t.php:x", rule)).await;
    let err = get(&format!("{}/x", srv.base)).await.unwrap_err();
    assert_eq!(err, "Connect(Disconnected)");
    assert_eq!(srv.acted.load(Ordering::SeqCst), 1, "the server acted");
    // The server is still fine afterwards (other endpoint: no rule).
    let (status, _, body) = get(&format!("{}/other", srv.base)).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, BODY.as_bytes());
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn truncate_tears_a_file_download() {
    // The fixture's reply is a file (it has Content-Disposition): a
    // truncated one announces its full length and then the connection
    // dies, so a client can tell it from a whole file.
    let rule = FaultRule { truncate: 1.0, ..Default::default() };
    let (srv, _f) = start(rule_plan("t.php:x", rule)).await;
    for _ in 0..5 {
        // Raw bytes: the head promises the whole body, fewer bytes follow.
        let addr = srv.base.trim_start_matches("http://").split('/').next().unwrap().to_string();
        let raw = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /t.php/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            out
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
        assert!(head.to_ascii_lowercase().contains(&format!("content-length: {}", BODY.len())), "{head}");
        assert!(body.len() < BODY.len(), "torn: {} of {} bytes", body.len(), BODY.len());
    }
    assert_eq!(srv.acted.load(Ordering::SeqCst), 5);
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn malformed_gives_a_200_with_garbage() {
    let rule = FaultRule { malformed: 1.0, ..Default::default() };
    let (srv, _f) = start(rule_plan("t.php:x", rule)).await;
    for _ in 0..6 {
        let (status, cd, body) = get(&format!("{}/x", srv.base)).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_ne!(body, BODY.as_bytes());
        assert!(!body.ends_with(b"</create_batch>\n"));
        assert_eq!(cd, None, "no Content-Disposition on garbage");
    }
    assert_eq!(srv.acted.load(Ordering::SeqCst), 6);
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn hang_waits_then_kills_the_connection() {
    let rule = FaultRule { hang: 1.0, hang_ms: 300, ..Default::default() };
    let (srv, _f) = start(rule_plan("t.php:x", rule)).await;
    let t = Instant::now();
    let err = get(&format!("{}/x", srv.base)).await.unwrap_err();
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(290), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(err, "Connect(Disconnected)");
    assert_eq!(srv.acted.load(Ordering::SeqCst), 0);
    srv.handle.stop(false).await;
}

/// Raw HTTP on a blocking socket: the head and what of the body arrives
/// within `within`, then the socket is closed (the client gives up).
async fn head_then_give_up(base: &str, within: Duration) -> (String, Vec<u8>) {
    let addr = base.trim_start_matches("http://").split('/').next().unwrap().to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /t.php/x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let until = Instant::now() + within;
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        while let Some(left) = until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
        (head.to_string(), body.as_bytes().to_vec())
    })
    .await
    .unwrap()
}

/// Waits (bounded) until the server has let go of every held reply.
async fn released(faults: &Faults) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while faults.held_bodies() != 0 {
        if Instant::now() > until {
            return false;
        }
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[actix_web::test]
async fn stall_body_sends_the_head_and_part_of_the_body_then_holds_until_the_client_leaves() {
    let rule = FaultRule { stall_body: 1.0, ..Default::default() };
    let (srv, faults) = start(rule_plan("t.php:x", rule)).await;
    for _ in 0..3 {
        let (head, body) = head_then_give_up(&srv.base, Duration::from_millis(700)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.to_ascii_lowercase().contains(&format!("content-length: {}", BODY.len())), "{head}");
        assert!(body.len() < BODY.len(), "stalled: {} of {} bytes", body.len(), BODY.len());
        assert!(BODY.as_bytes().starts_with(&body), "a part of the real body");
    }
    assert_eq!(srv.acted.load(Ordering::SeqCst), 3, "the server acted");
    assert!(released(&faults).await, "{} replies still held after their clients left", faults.held_bodies());
    assert_eq!(faults.injected().get("t.php:x stall_body"), Some(&3));
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn drip_body_sends_a_byte_per_pause_and_stops_when_the_client_leaves() {
    let rule = FaultRule { drip_body: 1.0, drip_ms: 100, ..Default::default() };
    let (srv, faults) = start(rule_plan("t.php:x", rule)).await;
    let (head, body) = head_then_give_up(&srv.base, Duration::from_millis(1050)).await;
    assert!(head.to_ascii_lowercase().contains(&format!("content-length: {}", BODY.len())), "{head}");
    assert!((5..=12).contains(&body.len()), "about a byte per 100 ms: {} bytes in 1 s", body.len());
    assert!(BODY.as_bytes().starts_with(&body));
    assert_eq!(srv.acted.load(Ordering::SeqCst), 1);
    assert!(released(&faults).await, "the drip goes on after its client left");
    // A client that waits long enough gets the whole reply, dripped.
    faults.set_plan(rule_plan("t.php:x", FaultRule { drip_body: 1.0, drip_ms: 1, ..Default::default() }));
    let (status, _, body) = get(&format!("{}/x", srv.base)).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, BODY.as_bytes());
    srv.handle.stop(false).await;
}

#[test]
fn stall_and_drip_are_exclusive_kinds_with_a_bounded_pause() {
    assert!(matches!(
        FaultPlan::from_toml("[rules.\"a.php:b\"]\nstall_body = 0.6\ndrip_body = 0.6"),
        Err(FaultPlanError::SumExceedsOne { .. })
    ));
    assert!(matches!(
        FaultPlan::from_toml("[rules.\"a.php:b\"]\ndrip_body = 0.1\ndrip_ms = 99999999"),
        Err(FaultPlanError::Duration { field: "drip_ms", .. })
    ));
    let plan = FaultPlan::from_json(r#"{"script": [{"endpoint": "*", "nth": 1, "kind": "drip_body", "drip_ms": 5}]}"#).unwrap();
    assert_eq!(plan.script[0].kind, FaultKind::DripBody);
    assert!(FaultKind::StallBody.acts() && FaultKind::DripBody.acts(), "the server did the work");
}

#[actix_web::test]
async fn delay_combines_with_a_normal_reply() {
    let rule = FaultRule { delay: 1.0, delay_ms: 200, ..Default::default() };
    let (srv, faults) = start(rule_plan("t.php:x", rule)).await;
    let t = Instant::now();
    let (status, _, body) = get(&format!("{}/x", srv.base)).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(190));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, BODY.as_bytes());
    assert_eq!(faults.injected().get("t.php:x delay"), Some(&1));
    srv.handle.stop(false).await;
}

#[actix_web::test]
async fn scripted_fault_fires_on_the_nth_call_over_http() {
    let plan = FaultPlan {
        seed: 1,
        rules: Default::default(),
        script: vec![ScriptedFault { endpoint: "t.php:create_batch".into(), nth: 2, kind: FaultKind::LoseReply, hang_ms: 0, drip_ms: 0 }],
        hostile_outputs: None,
    };
    let (srv, faults) = start(plan).await;
    let url = format!("{}/create_batch", srv.base);
    assert!(get(&url).await.is_ok());
    assert!(get(&url).await.is_err());
    assert!(get(&url).await.is_ok());
    assert_eq!(srv.acted.load(Ordering::SeqCst), 3);
    assert_eq!(faults.injected().into_iter().collect::<Vec<_>>(), vec![("t.php:create_batch lose_reply".to_string(), 1)]);
    srv.handle.stop(false).await;
}

// ---- decisions without a server ----

fn kinds(f: &Faults, endpoint: &str, n: usize) -> Vec<Option<FaultKind>> {
    (0..n).map(|_| f.draw(endpoint).kind).collect()
}

fn mixed_plan(seed: u64) -> FaultPlan {
    let mut plan = rule_plan(
        "*",
        FaultRule {
            http500: 0.1,
            http503: 0.1,
            reset: 0.1,
            truncate: 0.1,
            malformed: 0.1,
            lose_reply: 0.1,
            delay: 0.5,
            delay_ms: 5,
            ..Default::default()
        },
    );
    plan.seed = seed;
    plan
}

#[test]
fn same_seed_same_decisions() {
    let a = Faults::new(mixed_plan(42));
    let b = Faults::new(mixed_plan(42));
    let ka = kinds(&a, "s.php:q", 500);
    assert_eq!(ka, kinds(&b, "s.php:q", 500));
    // Every kind shows up, and "no fault" roughly 40% of the time.
    for k in [FaultKind::Http500, FaultKind::Http503, FaultKind::Reset, FaultKind::Truncate, FaultKind::Malformed, FaultKind::LoseReply] {
        assert!(ka.contains(&Some(k)), "{k:?} never drawn");
    }
    assert!(!ka.contains(&Some(FaultKind::Hang)));
    let none = ka.iter().filter(|k| k.is_none()).count();
    assert!((120..280).contains(&none), "{none}");

    let c = Faults::new(mixed_plan(43));
    assert_ne!(ka, kinds(&c, "s.php:q", 500));

    // set_plan restarts the sequence.
    a.set_plan(mixed_plan(42));
    assert_eq!(ka, kinds(&a, "s.php:q", 500));

    // Delays are part of the decision and reproducible too.
    let d1: Vec<_> = (0..50).map(|_| b.draw("s.php:q").delay).collect();
    let b2 = Faults::new(mixed_plan(42));
    let _ = kinds(&b2, "s.php:q", 500);
    let d2: Vec<_> = (0..50).map(|_| b2.draw("s.php:q").delay).collect();
    assert_eq!(d1, d2);
    assert!(d1.contains(&Some(Duration::from_millis(5))));
    assert!(d1.contains(&None));
}

#[actix_web::test]
async fn truncation_point_and_garbage_are_seeded() {
    async fn bodies(kind_rule: FaultRule) -> Vec<Bytes> {
        let f = Faults::new(rule_plan("*", kind_rule));
        let mut out = Vec::new();
        for _ in 0..20 {
            let resp = f.draw("a.php:b").after(StatusCode::OK, "text/xml", Bytes::from_static(BODY.as_bytes()), &[]);
            out.push(actix_web::body::to_bytes(resp.into_body()).await.unwrap());
        }
        out
    }
    let truncate = FaultRule { truncate: 1.0, ..Default::default() };
    let a = bodies(truncate.clone()).await;
    assert_eq!(a, bodies(truncate).await);
    assert!(a.iter().all(|b| b.len() < BODY.len()));
    // The cut points vary.
    assert!(a.iter().any(|b| b.len() != a[0].len()));
    let malformed = FaultRule { malformed: 1.0, ..Default::default() };
    let m = bodies(malformed.clone()).await;
    assert_eq!(m, bodies(malformed).await);
    assert!(m.iter().all(|b| b != BODY.as_bytes()));
}

#[test]
fn most_specific_rule_wins() {
    let mut plan = FaultPlan::default();
    plan.rules.insert("*".into(), FaultRule { http500: 1.0, ..Default::default() });
    plan.rules.insert("t.php:*".into(), FaultRule { http503: 1.0, ..Default::default() });
    plan.rules.insert("t.php:x".into(), FaultRule::default());
    let f = Faults::new(plan);
    assert_eq!(f.draw("t.php:x").kind, None);
    assert_eq!(f.draw("t.php:y").kind, Some(FaultKind::Http503));
    assert_eq!(f.draw("u.php:z").kind, Some(FaultKind::Http500));
    assert_eq!(f.draw("noscript").kind, Some(FaultKind::Http500));
}

#[test]
fn scripted_faults_fire_exactly_on_the_nth_call() {
    let plan = FaultPlan {
        seed: 3,
        rules: Default::default(),
        script: vec![
            ScriptedFault {
                endpoint: "submit_rpc_handler.php:create_batch".into(),
                nth: 1,
                kind: FaultKind::LoseReply,
                hang_ms: 0,
                drip_ms: 0,
            },
            ScriptedFault {
                endpoint: "submit_rpc_handler.php:create_batch".into(),
                nth: 3,
                kind: FaultKind::Http503,
                hang_ms: 0,
                drip_ms: 0,
            },
            // Counts every call to the script, whatever the rpc.
            ScriptedFault { endpoint: "job_file.php:*".into(), nth: 2, kind: FaultKind::Truncate, hang_ms: 0, drip_ms: 0 },
            ScriptedFault { endpoint: "*".into(), nth: 10, kind: FaultKind::Hang, hang_ms: 25, drip_ms: 0 },
        ],
        hostile_outputs: None,
    };
    let f = Faults::new(plan.clone());
    let cb = "submit_rpc_handler.php:create_batch";
    assert_eq!(f.draw(cb).kind, Some(FaultKind::LoseReply)); // call 1 overall
    assert_eq!(f.draw(cb).kind, None); // 2
    assert_eq!(f.draw(cb).kind, Some(FaultKind::Http503)); // 3
    assert_eq!(f.draw(cb).kind, None); // 4
    assert_eq!(f.draw("job_file.php:query_files").kind, None); // 5
    assert_eq!(f.draw("job_file.php:upload_files").kind, Some(FaultKind::Truncate)); // 6
    assert_eq!(f.draw("job_file.php:upload_files").kind, None); // 7
    assert_eq!(f.draw("get_output.php:workunit_file").kind, None); // 8
    assert_eq!(f.draw(cb).kind, None); // 9
    let tenth = f.draw("get_output.php:workunit_file"); // 10
    assert_eq!(tenth.kind, Some(FaultKind::Hang));
    assert_eq!(tenth.hang_duration(), Duration::from_millis(25));
    for _ in 0..20 {
        assert_eq!(f.draw(cb).kind, None);
    }
    let inj = f.injected();
    assert_eq!(inj.get(&format!("{cb} lose_reply")), Some(&1));
    assert_eq!(inj.get(&format!("{cb} http503")), Some(&1));
    assert_eq!(inj.get("job_file.php:upload_files truncate"), Some(&1));
    assert_eq!(inj.get("get_output.php:workunit_file hang"), Some(&1));
    assert_eq!(inj.values().sum::<u64>(), 4);

    // set_plan resets the counters: the 1st create_batch fails again.
    f.set_plan(plan.clone());
    assert!(f.injected().is_empty());
    assert_eq!(f.draw(cb).kind, Some(FaultKind::LoseReply));
    assert_eq!(f.plan(), plan);
}

#[tokio::test]
async fn before_and_acts() {
    let none = Fault::none();
    assert!(none.acts());
    assert!(none.before().await.is_none());
    let f = Faults::new(rule_plan("*", FaultRule { truncate: 1.0, ..Default::default() }));
    let t = f.draw("a:b");
    assert!(t.acts());
    assert!(t.before().await.is_none());
    f.set_plan(rule_plan("*", FaultRule { http500: 1.0, ..Default::default() }));
    let e = f.draw("a:b");
    assert!(!e.acts());
    let resp = e.before().await.expect("a response");
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

// ---- parsing and validation ----

fn doc_toml_example() -> String {
    let doc = include_str!("../../docs/sim-faults.md");
    let start = doc.find("```toml\n").expect("a ```toml block in docs/sim-faults.md") + 8;
    let len = doc[start..].find("```").expect("end of the block");
    doc[start..start + len].to_string()
}

#[test]
fn the_documented_example_parses() {
    let plan = FaultPlan::from_toml(&doc_toml_example()).expect("doc example is valid");
    assert_ne!(plan.seed, 0);
    let r = plan.rules.get("submit_rpc_handler.php:*").expect("rule");
    assert!(r.http500 > 0.0 && r.delay > 0.0);
    assert!(!plan.script.is_empty());
    // And round-trips through JSON.
    let json = serde_json::to_string(&plan).unwrap();
    assert_eq!(FaultPlan::from_json(&json).unwrap(), plan);
}

#[test]
fn toml_and_json_parse() {
    let t = r#"
seed = 9
[rules."*"]
reset = 0.25
[rules."get_output.php:workunit_file"]
truncate = 0.5
delay = 1.0
delay_ms = 10
[[script]]
endpoint = "submit_rpc_handler.php:create_batch"
nth = 1
kind = "lose_reply"
"#;
    let p = FaultPlan::from_toml(t).unwrap();
    assert_eq!(p.seed, 9);
    assert_eq!(p.rules["*"].reset, 0.25);
    assert_eq!(p.rules["get_output.php:workunit_file"].delay_ms, 10);
    assert_eq!(p.script[0].kind, FaultKind::LoseReply);

    let j = r#"{"seed": 9, "rules": {"*": {"reset": 0.25}, "get_output.php:workunit_file": {"truncate": 0.5, "delay": 1.0, "delay_ms": 10}},
               "script": [{"endpoint": "submit_rpc_handler.php:create_batch", "nth": 1, "kind": "lose_reply"}]}"#;
    assert_eq!(FaultPlan::from_json(j).unwrap(), p);
    assert_eq!(FaultPlan::from_json("{}").unwrap(), FaultPlan::default());
    assert_eq!(FaultPlan::from_toml("").unwrap(), FaultPlan::default());
}

#[test]
fn parse_and_validation_errors() {
    let parse = |r: Result<FaultPlan, FaultPlanError>| match r {
        Err(FaultPlanError::Parse { .. }) => {}
        other => panic!("expected a parse error, got {other:?}"),
    };
    parse(FaultPlan::from_toml("seed = \"x\""));
    parse(FaultPlan::from_toml("[rules.\"*\"]\nhttp404 = 0.5")); // unknown field
    parse(FaultPlan::from_toml("colour = 1")); // unknown top-level field
    parse(FaultPlan::from_toml("[[script]]\nendpoint = \"*\"\nnth = 1\nkind = \"explode\""));
    parse(FaultPlan::from_json("{\"seed\": -1}"));
    parse(FaultPlan::from_json("not json"));

    assert!(matches!(FaultPlan::from_toml("[rules.\"*\"]\nreset = 1.5"), Err(FaultPlanError::Probability { field: "reset", .. })));
    assert!(matches!(
        FaultPlan::from_json(r#"{"rules": {"*": {"delay": -0.1}}}"#),
        Err(FaultPlanError::Probability { field: "delay", .. })
    ));
    assert!(matches!(
        FaultPlan::from_toml("[rules.\"a.php:b\"]\nhttp500 = 0.6\nlose_reply = 0.6"),
        Err(FaultPlanError::SumExceedsOne { .. })
    ));
    // delay does not count towards the sum.
    assert!(FaultPlan::from_toml("[rules.\"a.php:b\"]\nhttp500 = 0.5\nlose_reply = 0.5\ndelay = 1.0").is_ok());
    assert!(matches!(
        FaultPlan::from_toml("[rules.\"a.php:b\"]\nhang = 0.1\nhang_ms = 99999999"),
        Err(FaultPlanError::Duration { field: "hang_ms", .. })
    ));
    for bad in ["", "a.php", "*:x", "a.php:", ":x", "a:b:c", "a b:c"] {
        let mut p = FaultPlan::default();
        p.rules.insert(bad.to_string(), FaultRule::default());
        assert!(matches!(p.validate(), Err(FaultPlanError::Endpoint(_))), "{bad:?} accepted");
    }
    assert!(matches!(
        FaultPlan::from_toml("[[script]]\nendpoint = \"a.php:b\"\nnth = 0\nkind = \"reset\""),
        Err(FaultPlanError::Nth { index: 0, .. })
    ));
    assert!(matches!(FaultPlan::from_toml("[[script]]\nendpoint = \"nope\"\nnth = 1\nkind = \"reset\""), Err(FaultPlanError::Endpoint(_))));
    // Messages are readable.
    let e = FaultPlan::from_toml("[rules.\"*\"]\nreset = 2").unwrap_err();
    assert!(e.to_string().contains("reset = 2"), "{e}");
}
