//! A 100,000-job batch: submit_batch accepted in seconds, query_batch2 over
//! it well under a second (BOINC_SIM_BIG_JOBS changes the size).

use std::time::Instant;

use crate::common::*;

pub async fn big_batch() {
    let n: usize = std::env::var("BOINC_SIM_BIG_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    // Generous bounds for unoptimized builds; the budgets hold in release.
    let (submit_budget, query_budget) = if cfg!(debug_assertions) { (30.0, 3.0) } else { (10.0, 1.0) };
    // BOINC_SIM_BIG_HOSTS=1 keeps the default hosts busy meanwhile.
    let busy = std::env::var_os("BOINC_SIM_BIG_HOSTS").is_some();
    let sim = TestSim::start(|o| {
        if !busy {
            o.config.hosts.clear()
        }
        // The request is ~15 MB: a stock PHP (post_max_size 8M) drops it.
        o.config.quirks.post_max_size = 0;
    })
    .await;
    let b = sim.create_batch("big", 0.0).await;
    let names = sim.stage(b, &[b"shared input\n"]).await;
    let jobs: Vec<(String, String, Vec<String>)> =
        (0..n).map(|i| (format!("condor#submit.example.org#worker#1716400000#{i}.0"), "-n 5 ".to_string(), names.clone())).collect();
    let xml = submit_xml(&sim.auth, b, "uppercase", &jobs);
    drop(jobs);
    let t0 = Instant::now();
    let body = sim.rpc(&xml).await;
    let submit_secs = t0.elapsed().as_secs_f64();
    assert!(body.contains(&format!("<batch_id>{b}</batch_id>")), "{body}");
    println!("    big_batch: {n} jobs ({} MB) submitted in {submit_secs:.2}s", xml.len() / 1_000_000);
    assert!(submit_secs < submit_budget, "submit took {submit_secs}s");

    let mut best = f64::MAX;
    let mut body = String::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        body = sim.query_batch2("big", 0.0).await;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    assert!(body.contains(&format!("<batch_size>{n}</batch_size>")));
    assert_eq!(body.matches("<job>").count(), n);
    println!("    big_batch: query_batch2 over {n} jobs in {best:.3}s");
    assert!(best < query_budget, "query_batch2 took {best}s");
    let t: f64 = between(&body, "<server_time>", "</server_time>").parse().unwrap();
    sim.h.advance_clock(2.0);
    let t0 = Instant::now();
    let body = sim.query_batch2("big", t).await;
    assert!(body.contains("<batch_size>0</batch_size>"), "{}", &body[..body.len().min(300)]);
    println!("    big_batch: partial query_batch2 in {:.3}s", t0.elapsed().as_secs_f64());
    sim.stop().await;
}
