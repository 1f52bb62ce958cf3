//! ProjectAds: one per pool. Keeps each project's ad fresh (the push model
//! of the SAMGrid paper's grid sensors): every `refresh` it pings each
//! project, counts its jobs (query_batches, query_batch2 of the batches in
//! progress) and checks the apps jobs have asked for (get_templates). An
//! ad never refreshed, or an app never checked, is measured before it is
//! used. The calls are the thread's shared ones (`project::measures`,
//! `project::templates`): the ads of every pool on the thread (of all the
//! clients of one `serve`) cost a project one set of calls a period.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures_util::future::join_all;

use crate::matchmaker::ProjectStatus;
use crate::pool::Pool;
use crate::registry::Registry;
use crate::rpc_client_of;
use gahp_project::measures::{job_counts_of, ping_of, JobCounts};
use gahp_project::rpc::RpcError;
use gahp_project::templates::templates_of;

pub struct ProjectAds {
    pool: Arc<Pool>,
    projects: Addr<Registry>,
    status: Vec<ProjectStatus>,
    refreshed: Vec<Option<Instant>>,
    /// Per project: app -> (present, when checked).
    apps: Vec<HashMap<String, (bool, Instant)>>,
    /// Apps jobs have asked for; checked at every refresh.
    wanted: BTreeSet<String>,
}

impl ProjectAds {
    pub fn new(pool: Arc<Pool>, projects: Addr<Registry>) -> Self {
        let n = pool.projects.len();
        ProjectAds {
            pool,
            projects,
            status: vec![ProjectStatus::default(); n],
            refreshed: vec![None; n],
            apps: vec![HashMap::new(); n],
            wanted: BTreeSet::new(),
        }
    }

    /// Measures projects `which`, checking these apps on each.
    fn measure(&self, which: Vec<usize>, apps: Vec<String>) -> impl Future<Output = Vec<(usize, Measured)>> {
        let pool = self.pool.clone();
        let projects = self.projects.clone();
        async move {
            join_all(which.into_iter().map(|i| {
                let (pool, projects, apps) = (pool.clone(), projects.clone(), apps.clone());
                async move { (i, measure(&pool, i, &projects, &apps).await) }
            }))
            .await
        }
    }

    fn apply(&mut self, i: usize, m: Measured) {
        let now = Instant::now();
        self.refreshed[i] = Some(now);
        let s = &mut self.status[i];
        s.up = Some(m.up);
        for (app, present) in m.apps {
            self.apps[i].insert(app, (present, now));
        }
        if let Some(stats) = m.stats {
            s.jobs_in_progress = stats.in_progress;
            s.jobs_unsent = stats.unsent;
            s.recent_error_rate = stats.error_rate;
            s.recent_turnaround = stats.turnaround;
        }
        s.apps = match &self.pool.projects[i].apps {
            Some(fixed) => fixed.clone(),
            None => self.apps[i].iter().filter(|(_, (present, _))| *present).map(|(a, _)| a.clone()).collect(),
        };
        s.apps.sort();
    }

    /// Whether project `i` still has to be asked about `app`.
    fn app_unknown(&self, i: usize, app: &str) -> bool {
        self.pool.projects[i].apps.is_none() && self.apps[i].get(app).is_none_or(|(_, at)| at.elapsed() > self.pool.refresh)
    }
}

impl Actor for ProjectAds {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.pool.refresh, |act, ctx| {
            let all: Vec<usize> = (0..act.pool.projects.len()).collect();
            let apps: Vec<String> = act.wanted.iter().cloned().collect();
            ctx.spawn(act.measure(all, apps).into_actor(act).map(|results, act, _| {
                for (i, m) in results {
                    act.apply(i, m);
                }
            }));
        });
    }
}

/// The current status of every project (pool order), with `app` checked.
#[derive(Message)]
#[rtype(result = "Vec<ProjectStatus>")]
pub struct CurrentAds {
    pub app: String,
}

impl Handler<CurrentAds> for ProjectAds {
    type Result = ResponseActFuture<Self, Vec<ProjectStatus>>;

    fn handle(&mut self, msg: CurrentAds, _: &mut Context<Self>) -> Self::Result {
        self.wanted.insert(msg.app.clone());
        let stale: Vec<usize> =
            (0..self.pool.projects.len()).filter(|&i| self.refreshed[i].is_none() || self.app_unknown(i, &msg.app)).collect();
        let fut = self.measure(stale, vec![msg.app]);
        Box::pin(fut.into_actor(self).map(|results, act, _| {
            for (i, m) in results {
                act.apply(i, m);
            }
            act.status.clone()
        }))
    }
}

/// Project `i` as seen now: a project that does not answer ping is down.
pub struct Measured {
    up: bool,
    apps: Vec<(String, bool)>,
    stats: Option<JobCounts>,
}

/// From the thread's shared measures (`project::measures`, and the
/// templates for the apps): the pools of every runtime on the thread ask
/// a project once a period between them.
async fn measure(pool: &Pool, i: usize, projects: &Addr<Registry>, apps: &[String]) -> Measured {
    let down = Measured { up: false, apps: Vec::new(), stats: None };
    let project = &pool.projects[i];
    let Some(rpc) = rpc_client_of(projects, &project.key).await else {
        return down;
    };
    let deadline = Instant::now() + pool.probe_timeout;
    let auth = &project.key.authenticator;
    if ping_of(&project.key.url, &rpc, pool.refresh, deadline).await.is_err() {
        tracing::info!(project = %project.name, "pool project does not answer ping: down");
        return down;
    }
    let mut checked = Vec::new();
    if project.apps.is_none() {
        for app in apps {
            match templates_of(&project.key, &rpc, app, deadline).await {
                Ok(_) => checked.push((app.clone(), true)),
                Err(RpcError::Boinc { .. }) => checked.push((app.clone(), false)),
                // Unknown this time; asked again next time.
                Err(e) => tracing::info!(project = %project.name, app = %app, "can't check the app: {}", auth.redact_in(&e.to_string())),
            }
        }
    }
    let stats = job_counts_of(&project.key, &rpc, pool.refresh, deadline)
        .await
        .map_err(|e| tracing::info!(project = %project.name, "can't count jobs: {}", auth.redact_in(&e.to_string())))
        .ok();
    Measured { up: true, apps: checked, stats }
}
