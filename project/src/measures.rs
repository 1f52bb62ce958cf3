//! What a pool's ad of a project is measured from: whether the project
//! answers (ping) and how its account's jobs fare (query_batches, then
//! query_batch2 of the batches in progress). Asked once per period for
//! every pool of the thread ([`SharedCalls`] tables, as the templates are),
//! so the pools of many clients of one `boinc_gahp serve` cost a project
//! what one does.
//!
//! A ping names no account, so one is shared by every account of the
//! project. query_batches answers for the account whose authenticator it
//! carries (a BOINC server lists the batches of that submitter only), so
//! the job counts are shared per project and account. They are counts: no
//! batch or job name of one client reaches another through them.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::future::FutureExt;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::Authenticator;

use crate::rpc::{Rpc, RpcClient, RpcError};
use crate::shared_calls::{Fresh, SharedCall, SharedCalls};
use crate::ProjectKey;

/// Batches in progress whose jobs are counted per period, at most.
const MAX_COUNTED_BATCHES: usize = 200;

/// An account's jobs on a project.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobCounts {
    pub in_progress: i64,
    pub unsent: i64,
    /// Errored jobs over all jobs of its batches.
    pub error_rate: Option<f64>,
    /// Mean seconds from creation to completion of its completed batches.
    pub turnaround: Option<f64>,
}

thread_local! {
    static PINGS: RefCell<SharedCalls<String, ()>> = RefCell::default();
    static COUNTS: RefCell<SharedCalls<ProjectKey, JobCounts>> = RefCell::default();
}

/// The project's ping in this period of `every`, asked with `rpc`.
pub fn ping_of(url: &str, rpc: &Addr<RpcClient>, every: Duration, deadline: Instant) -> SharedCall<()> {
    PINGS.with(|c| {
        c.borrow_mut().get(url.trim_end_matches('/').to_string(), Fresh::SamePeriod(every), || {
            let rpc = rpc.clone();
            async move { rpc.idempotent(Script::SubmitRpcHandler, request::ping(), reply::parse_ping, deadline).await.map(|_| ()) }
                .boxed_local()
        })
    })
}

/// The account's job counts on the project in this period of `every`.
pub fn job_counts_of(key: &ProjectKey, rpc: &Addr<RpcClient>, every: Duration, deadline: Instant) -> SharedCall<JobCounts> {
    COUNTS.with(|c| {
        c.borrow_mut().get(key.clone(), Fresh::SamePeriod(every), || {
            let (rpc, auth) = (rpc.clone(), key.authenticator.clone());
            async move { count(&rpc, &auth, deadline).await }.boxed_local()
        })
    })
}

async fn count(rpc: &Addr<RpcClient>, auth: &Authenticator, deadline: Instant) -> Result<JobCounts, RpcError> {
    let xml = request::query_batches(auth);
    let batches = rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batches, deadline).await?;
    let (mut njobs, mut nerror) = (0i64, 0i64);
    let mut turnarounds = Vec::new();
    for b in &batches {
        njobs += b.njobs;
        nerror += b.nerror_jobs;
        if b.state == 2 && b.completion_time > b.create_time {
            turnarounds.push(b.completion_time - b.create_time);
        }
    }
    let running: Vec<String> = batches.iter().filter(|b| b.state == 1).take(MAX_COUNTED_BATCHES).map(|b| b.name.clone()).collect();
    let (mut in_progress, mut unsent) = (0, 0);
    if !running.is_empty() {
        let xml = request::query_batch2(auth, 0.0, &running);
        let states = rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch2, deadline).await?;
        for job in states.batches.iter().flatten() {
            match job.status.as_str() {
                "IN_PROGRESS" => in_progress += 1,
                "UNSENT" => unsent += 1,
                _ => {}
            }
        }
    }
    Ok(JobCounts {
        in_progress,
        unsent,
        error_rate: (njobs > 0).then(|| nerror as f64 / njobs as f64),
        turnaround: (!turnarounds.is_empty()).then(|| turnarounds.iter().sum::<f64>() / turnarounds.len() as f64),
    })
}
