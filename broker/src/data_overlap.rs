//! DataOverlap: one per pool. Answers `boinc_data_overlap`: the fraction of
//! a batch's input bytes a project already holds. BOINC names input files
//! by content (MD5), so a project's download store is a data catalogue:
//! `query_files` without a batch id lists which of the names it lacks, and
//! has no side effect.
//!
//! What was learnt, per project and file name, is kept for the pool's
//! `rank_cache_ttl_secs` in one table for every pool of the thread (every
//! client of one `boinc_gahp serve`): a project's files are the project's,
//! not an account's (seen on the real server: a file one submitter
//! uploaded is present to another's `query_files`), so what one client's
//! pool learnt spares the next client's the call. The calls themselves are
//! made with the asking pool's own account. A file a batch uploaded is
//! recorded as present when the submit succeeds. A project that can't be
//! asked has no overlap (the function is `undefined` for it).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::future::join_all;
use gahp_protocol::boinc::{reply, request, Script};

use crate::matchmaker::InputData;
use crate::pool::Pool;
use crate::registry::Registry;
use crate::rpc_client_of;
use gahp_project::rpc::Rpc;

/// File names per query_files call (the request stays small).
const NAMES_PER_QUERY: usize = 1000;

/// Whether projects hold files, as learnt by any pool of the thread.
#[derive(Default)]
struct ProjectFiles {
    /// (project URL, file name) -> (present, when learnt).
    known: HashMap<(String, String), (bool, Instant)>,
    /// The longest time any pool keeps an answer: older ones are dropped.
    keep: Duration,
}

thread_local! {
    static FILES: RefCell<ProjectFiles> = RefCell::default();
}

impl ProjectFiles {
    fn fresh(&self, url: &str, name: &str, ttl: Duration) -> Option<bool> {
        self.known.get(&(url.to_string(), name.to_string())).filter(|(_, at)| at.elapsed() < ttl).map(|(p, _)| *p)
    }

    fn learnt(&mut self, url: &str, names: impl IntoIterator<Item = (String, bool)>, ttl: Duration) {
        let now = Instant::now();
        for (name, present) in names {
            self.known.insert((url.to_string(), name), (present, now));
        }
        self.keep = self.keep.max(ttl);
        let keep = self.keep;
        self.known.retain(|_, (_, at)| at.elapsed() < keep);
    }
}

pub struct DataOverlap {
    pool: Arc<Pool>,
    projects: Addr<Registry>,
}

impl DataOverlap {
    pub fn new(pool: Arc<Pool>, projects: Addr<Registry>) -> Self {
        DataOverlap { pool, projects }
    }

    /// Whether project `p` of the pool holds `name`, if known and fresh.
    fn fresh(&self, p: usize, name: &str) -> Option<bool> {
        FILES.with(|f| f.borrow().fresh(&self.pool.projects[p].key.url, name, self.pool.rank_cache_ttl))
    }
}

impl Actor for DataOverlap {
    type Context = Context<Self>;
}

/// The overlap of `files` with each of `projects` (same order); `None`
/// where the project could not be asked.
#[derive(Message)]
#[rtype(result = "Vec<Option<f64>>")]
pub struct Overlaps {
    pub files: Vec<InputData>,
    pub projects: Vec<usize>,
}

impl Handler<Overlaps> for DataOverlap {
    type Result = ResponseActFuture<Self, Vec<Option<f64>>>;

    fn handle(&mut self, msg: Overlaps, _: &mut Context<Self>) -> Self::Result {
        let asks: Vec<(usize, Vec<String>)> = msg
            .projects
            .iter()
            .map(|&p| (p, msg.files.iter().filter(|f| self.fresh(p, &f.phys_name).is_none()).map(|f| f.phys_name.clone()).collect()))
            .filter(|(_, names): &(usize, Vec<String>)| !names.is_empty())
            .collect();
        let (pool, projects) = (self.pool.clone(), self.projects.clone());
        let fut = join_all(asks.into_iter().map(move |(p, names)| {
            let (pool, projects) = (pool.clone(), projects.clone());
            async move { (p, absent_of(&pool, p, &projects, &names).await.map(|absent| (names, absent))) }
        }));
        Box::pin(fut.into_actor(self).map(move |answers, act, _| {
            let mut failed = Vec::new();
            for (p, answer) in answers {
                match answer {
                    Some((names, absent)) => FILES.with(|f| {
                        let learnt = names.into_iter().map(|n| {
                            let present = !absent.contains(&n);
                            (n, present)
                        });
                        f.borrow_mut().learnt(&act.pool.projects[p].key.url, learnt, act.pool.rank_cache_ttl)
                    }),
                    None => failed.push(p),
                }
            }
            let total: u64 = msg.files.iter().map(|f| f.size).sum();
            msg.projects
                .iter()
                .map(|&p| {
                    if failed.contains(&p) {
                        return None;
                    }
                    if total == 0 {
                        return Some(0.0);
                    }
                    let held: u64 = msg.files.iter().filter(|f| act.fresh(p, &f.phys_name) == Some(true)).map(|f| f.size).sum();
                    Some(held as f64 / total as f64)
                })
                .collect()
        }))
    }
}

/// The names project `p` lacks, or `None` if it can't be asked.
async fn absent_of(pool: &Pool, p: usize, projects: &Addr<Registry>, names: &[String]) -> Option<Vec<String>> {
    let project = &pool.projects[p];
    let rpc = rpc_client_of(projects, &project.key).await?;
    let deadline = Instant::now() + pool.probe_timeout;
    let mut absent = Vec::new();
    for chunk in names.chunks(NAMES_PER_QUERY) {
        // No batch id: the server only looks (spec §5.1).
        let xml = request::query_files(&project.key.authenticator, None, chunk);
        match rpc.idempotent(Script::JobFile, xml, reply::parse_query_files, deadline).await {
            Ok(idx) => absent.extend(idx.into_iter().filter_map(|i| chunk.get(i).cloned())),
            Err(e) => {
                let e = project.key.authenticator.redact_in(&e.to_string());
                tracing::info!(project = %project.name, "can't ask which files the project holds: {e}");
                return None;
            }
        }
    }
    Some(absent)
}

/// The files of a batch just submitted to `project` are there now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Uploaded {
    pub project: usize,
    pub names: Vec<String>,
}

impl Handler<Uploaded> for DataOverlap {
    type Result = ();
    fn handle(&mut self, msg: Uploaded, _: &mut Context<Self>) {
        let Some(project) = self.pool.projects.get(msg.project) else { return };
        FILES.with(|f| f.borrow_mut().learnt(&project.key.url, msg.names.into_iter().map(|n| (n, true)), self.pool.rank_cache_ttl));
    }
}
