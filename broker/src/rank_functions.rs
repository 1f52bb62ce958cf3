//! RankFunctions: one per pool. Runs the pool's external rank functions:
//! the command (argv, no shell) gets `{"job": {...}, "project": {...}}` on
//! stdin — each ad's attributes, literals as JSON values, expressions as
//! their ClassAd text — and prints one number on stdout. It is killed at
//! its time limit; a failure, a timeout or anything but a number makes the
//! function `undefined` for that project.
//!
//! Results (failures too) are cached per (function, job data, project) for
//! the pool's `rank_cache_ttl_secs`; the job data is the app and the input
//! files (names, sizes, MD5s), so the batches of one data set share them.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures_util::future::join_all;
use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::EvalAd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::pool::{Pool, RankFunction};

/// Largest stdout read from a rank function.
const MAX_OUTPUT: u64 = 4096;

type CacheKey = (String, String, usize);

pub struct RankFunctions {
    pool: Arc<Pool>,
    cache: HashMap<CacheKey, (Option<f64>, Instant)>,
}

impl RankFunctions {
    pub fn new(pool: Arc<Pool>) -> Self {
        RankFunctions { pool, cache: HashMap::new() }
    }
}

impl Actor for RankFunctions {
    type Context = Context<Self>;
}

/// The value of `function` for each of `projects` (same order).
#[derive(Message)]
#[rtype(result = "Vec<Option<f64>>")]
pub struct RankValues {
    /// Lower case.
    pub function: String,
    /// What identifies the job's data (see the module doc).
    pub job_data: String,
    pub job: Arc<EvalAd>,
    /// (project index, its ad).
    pub projects: Vec<(usize, Arc<EvalAd>)>,
}

impl Handler<RankValues> for RankFunctions {
    type Result = ResponseActFuture<Self, Vec<Option<f64>>>;

    fn handle(&mut self, msg: RankValues, _: &mut Context<Self>) -> Self::Result {
        let ttl = self.pool.rank_cache_ttl;
        self.cache.retain(|_, (_, at)| at.elapsed() < ttl);
        let Some(function) = self.pool.functions.iter().find(|f| f.name.eq_ignore_ascii_case(&msg.function)).cloned() else {
            let n = msg.projects.len();
            return Box::pin(async move { vec![None; n] }.into_actor(self));
        };
        let (name, data) = (msg.function.clone(), msg.job_data.clone());
        let key = move |p: usize| (name.clone(), data.clone(), p);
        let missing: Vec<(usize, Arc<EvalAd>)> = msg.projects.iter().filter(|(p, _)| !self.cache.contains_key(&key(*p))).cloned().collect();
        let job_json = ad_json(&msg.job);
        let runs = join_all(missing.into_iter().map(|(p, ad)| {
            let input = format!("{{\"job\":{job_json},\"project\":{}}}\n", ad_json(&ad));
            let function = function.clone();
            async move { (p, run(&function, input).await) }
        }));
        Box::pin(runs.into_actor(self).map(move |results, act, _| {
            let now = Instant::now();
            for (p, value) in results {
                act.cache.insert(key(p), (value, now));
            }
            msg.projects.iter().map(|(p, _)| act.cache.get(&key(*p)).and_then(|(v, _)| *v)).collect()
        }))
    }
}

/// Runs the function once; `None` on any failure (logged).
async fn run(f: &RankFunction, input: String) -> Option<f64> {
    let started = Instant::now();
    let result = tokio::time::timeout(f.timeout, async {
        let mut child = tokio::process::Command::new(&f.command[0])
            .args(&f.command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("can't start {}: {e}", f.command[0]))?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        // A function that does not read its input must not block us.
        let write = async move {
            let _ = stdin.write_all(input.as_bytes()).await;
        };
        let mut out = String::new();
        let mut stdout = child.stdout.take().ok_or("no stdout")?.take(MAX_OUTPUT);
        let (_, read) = tokio::join!(write, stdout.read_to_string(&mut out));
        read.map_err(|e| format!("reading its output: {e}"))?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("exited with {status}"));
        }
        out.trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| format!("printed {:?}, not a number", out.trim()))
    })
    .await;
    match result {
        Ok(Ok(v)) => {
            tracing::debug!(function = %f.name, ms = started.elapsed().as_millis() as u64, "rank function ran");
            Some(v)
        }
        Ok(Err(e)) => {
            tracing::warn!(function = %f.name, "rank function failed: {e}");
            None
        }
        Err(_) => {
            tracing::warn!(function = %f.name, "rank function killed after {} s", f.timeout.as_secs_f64());
            None
        }
    }
}

/// An ad as a JSON object: literals as JSON values, the rest as text.
pub fn ad_json(ad: &EvalAd) -> String {
    let mut map = serde_json::Map::new();
    for (name, e) in ad.iter() {
        map.insert(name.to_string(), expr_json(e));
    }
    serde_json::Value::Object(map).to_string()
}

fn expr_json(e: &Expr) -> serde_json::Value {
    use serde_json::Value as J;
    match e {
        Expr::Int(i) => J::from(*i),
        Expr::Real(r) => serde_json::Number::from_f64(*r).map_or(J::Null, J::Number),
        Expr::Str(s) => J::String(s.clone()),
        Expr::Bool(b) => J::Bool(*b),
        Expr::Undefined => J::Null,
        Expr::List(items) => J::Array(items.iter().map(expr_json).collect()),
        Expr::Record(attrs) => J::Object(attrs.iter().map(|(n, e)| (n.clone(), expr_json(e))).collect()),
        other => J::String(other.to_string()),
    }
}
