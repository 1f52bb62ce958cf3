//! `BOINC_QUERY_BATCHES` on a pool: each project asked for its own
//! batches, the answers merged in request order.

use std::collections::HashMap;

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::pools::{Broker, Route};

impl Broker {
    /// One query per project, answered in request order with the earliest
    /// server_time of the projects that answered (passing it back can only
    /// report a change twice, never miss one). A project that fails leaves
    /// its batches with no news this time.
    pub(crate) async fn query(&self, min_mod_time: f64, batches: Vec<String>) -> CommandResult {
        let mut by_project: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, b) in batches.iter().enumerate() {
            match self.batch_route(b).await {
                Ok(Route::Project(p)) => by_project.entry(p).or_default().push(i),
                Ok(Route::Unknown) => tracing::warn!(pool = %self.pool.id, batch = %b, "query of a batch the pool never placed"),
                Err(e) => return CommandResult::Error(format!("error querying batch: {e}")),
            }
        }
        let asks: Vec<(usize, Vec<usize>, f64)> = by_project
            .into_iter()
            .map(|(p, idx)| {
                let key = (self.pool.id.clone(), self.pool().projects[p].name.clone());
                let from = self.floors.borrow().get(&key).map_or(min_mod_time, |f| f.min(min_mod_time));
                (p, idx, from)
            })
            .collect();
        let limit = self.pool().query_timeout;
        let answers = futures_util::future::join_all(asks.iter().map(|(p, idx, from)| {
            let names: Vec<String> = idx.iter().map(|&i| batches[i].clone()).collect();
            let query = self.on(*p, AsyncCommand::QueryBatches { min_mod_time: *from, batches: names });
            async move {
                tokio::time::timeout(limit, query)
                    .await
                    .unwrap_or_else(|_| CommandResult::Error(format!("error querying batch: no answer within {} s", limit.as_secs_f64())))
            }
        }))
        .await;
        let mut groups: Vec<Vec<(String, String)>> = vec![Vec::new(); batches.len()];
        let mut server_time: Option<f64> = None;
        let mut first_error = None;
        for ((p, idx, from), answer) in asks.iter().zip(answers) {
            let key = (self.pool.id.clone(), self.pool().projects[*p].name.clone());
            match answer.batches() {
                Some((t, got)) if got.len() == idx.len() => {
                    self.floors.borrow_mut().remove(&key);
                    server_time = Some(server_time.map_or(t, |s: f64| s.min(t)));
                    for (&i, g) in idx.iter().zip(got) {
                        groups[i] = g;
                    }
                }
                _ => {
                    let why = if let CommandResult::Error(e) = answer { e } else { "unexpected reply".into() };
                    tracing::info!(pool = %self.pool.id, project = %key.1, "query failed; its batches wait: {why}");
                    self.floors.borrow_mut().insert(key, *from);
                    first_error.get_or_insert(why);
                }
            }
        }
        match (server_time, first_error) {
            (Some(server_time), _) => CommandResult::Batches { server_time, groups },
            (None, Some(e)) => CommandResult::Error(e),
            // No batch of the request was placed by the pool.
            (None, None) => CommandResult::Batches { server_time: min_mod_time, groups },
        }
    }
}
