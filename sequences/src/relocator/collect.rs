//! A finished step: its outputs fetched into the content store by MD5
//! name, the sequence advanced, the step's batch retired.

use std::io;
use std::path::Path;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};

use super::*;
use crate::decide::{self, LiveAttempt};
use crate::store::{Phase, StepFile};
use gahp_project::output_fetcher::check_output_names;
use gahp_project::rpc::{Rpc, RpcError};
use gahp_services::atomic_file;
use gahp_services::file_stager::md5_file;

impl SequenceRelocator {
    /// Downloads a finished step's outputs into the content store.
    pub(super) fn collect(&mut self, name: String, live: LiveAttempt, ctx: &mut Context<Self>) {
        let Some(rec) = self.seqs.get(&name) else { return };
        self.busy.insert(name.clone());
        let job = decide::job_name(&name, live.step, live.attempt);
        let (rpc, key, store, deadline) = (self.rpc.clone(), self.key.clone(), self.store.clone(), self.deadline());
        let (app, marker) = (rec.def.app_name.clone(), rec.def.end_marker.clone());
        let cached = self.templates.get(&app).cloned();
        let work = async move {
            let templates = match cached {
                Some(t) => t,
                None => rpc
                    .idempotent(
                        Script::SubmitRpcHandler,
                        request::get_templates_for_app(&key.authenticator, &app),
                        reply::parse_templates,
                        deadline,
                    )
                    .await
                    .map_err(|e| e.to_string())?,
            };
            check_output_names(&templates)?;
            let mut files = Vec::new();
            for (i, out) in templates.outputs.iter().enumerate() {
                let incoming = store.content_path("incoming");
                std::fs::create_dir_all(incoming.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
                let tmp = atomic_file::temp_beside(&incoming).map_err(|e| e.to_string())?;
                let url = request::output_url(&key.url, &key.authenticator, &job, i);
                match rpc.download(url, tmp.path().to_path_buf(), deadline).await {
                    Ok(_) => {}
                    // An optional output the step did not write (a heartbeat).
                    Err(RpcError::Boinc { msg, .. }) if msg.contains("no such file") => continue,
                    Err(e) => return Err(e.to_string()),
                }
                let kept = store.clone();
                let md5 = tokio::task::spawn_blocking(move || -> io::Result<String> {
                    let md5 = md5_file(tmp.path())?;
                    let dest = kept.content_path(&md5);
                    if !dest.exists() {
                        atomic_file::persist(tmp, &dest)?;
                    }
                    Ok(md5)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                files.push(StepFile { name: out.clone(), md5 });
            }
            let marker_seen = marker.is_some_and(|m| files.iter().any(|f| f.name == m));
            Ok::<_, String>((templates, files, marker_seen))
        };
        ctx.spawn(work.into_actor(self).map(move |r, act, ctx| {
            act.busy.remove(&name);
            let (templates, files, marker_seen) = match r {
                Ok(v) => v,
                Err(e) => {
                    tracing::info!(sequence = %name, "collecting step {} will be retried: {}", live.step, act.key.authenticator.redact_in(&e));
                    return;
                }
            };
            if let Err(e) = act.store.put_files(&name, live.step, &files) {
                tracing::error!(sequence = %name, "can't record step {}'s files: {e}", live.step);
                return;
            }
            let Some(rec) = act.seqs.get_mut(&name) else { return };
            act.templates.insert(rec.def.app_name.clone(), templates);
            rec.done = live.step;
            rec.live = None;
            rec.ended |= marker_seen;
            if decide::next_step(rec.done, rec.planned, rec.ended, false).is_none() {
                rec.phase = Phase::Completed;
            }
            act.save(&name);
            // Batches no longer needed on the server: those of the step
            // before this one, dead branches included (this step's still tie
            // the inputs the next step shares, so retiring them now would
            // make them upload again), and this step's once the sequence is
            // over.
            let Some(rec) = act.seqs.get(&name) else { return };
            let finished = rec.phase == Phase::Completed;
            let mut retire = Vec::new();
            for step in [live.step.saturating_sub(1), if finished { live.step } else { 0 }] {
                if step > 0 {
                    retire.extend(attempt_batches(rec, &name, step, 0));
                }
            }
            act.clean_up(None, retire, ctx);
            act.advance(ctx);
        }));
    }
}
