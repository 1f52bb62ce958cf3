//! A pool's sequence on the move: handed to the pool's next-best project
//! when a step is abandoned here, and messages for one that moved away
//! forwarded to where it is now. The relocator reaches the broker only
//! through a [`PoolLink`] it is handed: the two questions it asks, as
//! messages defined here, which the broker answers.

use std::path::PathBuf;

use actix::prelude::*;

use super::*;
use crate::store::SequenceStore;
use gahp_project::ProjectKey;

/// The project of the pool to take a pool sequence whose step was
/// abandoned on `from`: the best match but `from` that takes the app now;
/// `None` if there is no other.
#[derive(Message)]
#[rtype(result = "Result<Option<(ProjectKey, Addr<SequenceRelocator>)>, String>")]
pub struct NextProject {
    pub pool: String,
    pub name: String,
    pub app: String,
    /// The next step's data: the state it starts from and the inputs.
    pub inputs: Vec<PathBuf>,
    pub from: ProjectKey,
}

/// The relocator that holds sequence `name` of pool `pool` now (`None`:
/// no project of the pool does).
#[derive(Message)]
#[rtype(result = "Result<Option<Addr<SequenceRelocator>>, String>")]
pub struct SequenceHolder {
    pub pool: String,
    pub name: String,
}

/// The broker, as a relocator sees it.
#[derive(Clone)]
pub struct PoolLink {
    pub next_project: Recipient<NextProject>,
    pub holder: Recipient<SequenceHolder>,
}

impl PoolLink {
    /// The link to an actor that answers both questions (the broker).
    pub fn to<A>(addr: Addr<A>) -> PoolLink
    where
        A: Actor<Context = Context<A>> + Handler<NextProject> + Handler<SequenceHolder>,
    {
        PoolLink { next_project: addr.clone().recipient(), holder: addr.recipient() }
    }
}

impl SequenceRelocator {
    /// Hands a pool sequence whose step was abandoned on this project to
    /// the pool's next-best project; if there is none (or the move fails),
    /// the next attempt is made here.
    pub(super) fn move_on(&mut self, name: String, pool: String, pools: PoolLink, step: u32, late: Option<f64>, ctx: &mut Context<Self>) {
        let Some(rec) = self.seqs.get(&name) else { return };
        // No attempt is made here while the broker is asked.
        self.busy.insert(name.clone());
        let state_paths = match self.store.state_before(&name, step, &rec.def.state_names) {
            Ok(files) => files.iter().map(|f| self.store.content_path(&f.md5)).collect::<Vec<_>>(),
            Err(e) => {
                tracing::error!(sequence = %name, "can't read the state to relocate: {e}");
                Vec::new()
            }
        };
        let mut inputs = state_paths;
        inputs.extend(rec.def.inputs.iter().map(|(p, _)| p.clone()));
        let ask = NextProject { pool, name: name.clone(), app: rec.def.app_name.clone(), inputs, from: self.key.clone() };
        ctx.spawn(pools.next_project.send(ask).into_actor(self).map(move |r, act, ctx| {
            let next = match r {
                Ok(Ok(next)) => next,
                Ok(Err(e)) => {
                    tracing::info!(sequence = %name, "no other project of the pool takes the step: {e}");
                    None
                }
                Err(_) => None,
            };
            let moved = next.and_then(|(key, relocator)| {
                let to = SequenceStore::new(act.store.db().clone(), &act.config.state_dir, &key.url, &key.account());
                let pool = act.seqs.get(&name)?.def.pool.clone()?;
                match act.store.move_to(&to, &name, &pool) {
                    Ok(()) => Some((key, relocator)),
                    Err(e) => {
                        tracing::warn!(sequence = %name, project = %key.url, "can't move the sequence: {e}");
                        None
                    }
                }
            });
            act.busy.remove(&name);
            let Some((key, relocator)) = moved else {
                // Here, then.
                act.advance(ctx);
                return;
            };
            tracing::info!(sequence = %name, project = %key.url, "sequence moved to another project of its pool");
            act.unsubmitted.remove(&name);
            if let Some(rec) = act.seqs.remove(&name) {
                // Nothing of it is needed here any more.
                act.clean_up(None, batches_left(&rec, &name, step, 0), ctx);
            }
            relocator.do_send(AdoptSequence { name, late_deadline: late });
        }));
    }

    /// The pool of a sequence that is not here because it moved away.
    pub(super) fn moved_away(&self, name: &str) -> Option<String> {
        if self.seqs.contains_key(name) {
            return None;
        }
        self.store.moved_away(name).unwrap_or_else(|e| {
            tracing::error!(sequence = name, "can't read where the sequence went: {e}");
            None
        })
    }

    /// Sends `msg` on to the relocator that holds sequence `name` of `pool`
    /// now.
    pub(super) fn forward<M, T>(&self, pool: String, name: String, msg: M, ctx: &Context<Self>) -> ResponseFuture<Result<T, SequenceError>>
    where
        M: Message<Result = Result<T, SequenceError>> + Send + 'static,
        T: Send + 'static,
        SequenceRelocator: Handler<M>,
    {
        let (pools, me) = (self.pools.clone(), ctx.address());
        Box::pin(async move {
            let pools = pools.ok_or_else(|| SequenceError::NoSuchSequence(name.clone()))?;
            let holder = pools
                .holder
                .send(SequenceHolder { pool, name: name.clone() })
                .await
                .map_err(|_| local("internal error: the broker stopped"))?
                .map_err(SequenceError::Local)?;
            match holder {
                Some(relocator) if relocator != me => {
                    relocator.send(msg).await.map_err(|_| local("internal error: the sequence worker stopped"))?
                }
                _ => Err(SequenceError::NoSuchSequence(name)),
            }
        })
    }
}
