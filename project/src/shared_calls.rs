//! Calls to a project whose answer every actor of the thread may share:
//! the first asker's call is handed to every later one (single flight) and
//! reused while it is fresh; a failed call is not reused.
//!
//! The futures are local to the thread, so one table serves the trees,
//! BLAH projects and pools of the stdio daemon and of all the clients of
//! one `boinc_gahp serve`, whose runtimes share the thread: what does not
//! depend on who asks is then asked once for all of them. Each user keys
//! its table by what the answer depends on (the project's URL, or its URL
//! and account where the server answers per account).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use futures_util::future::{FutureExt, LocalBoxFuture, Shared};

use crate::rpc::RpcError;

/// One call, shared by everyone who waits for it.
pub type SharedCall<T> = Shared<LocalBoxFuture<'static, Result<T, RpcError>>>;

/// How long a call's answer is reused.
#[derive(Debug, Clone, Copy)]
pub enum Fresh {
    /// For this long after the call was made.
    For(Duration),
    /// Within the same period of this length (periods counted from the
    /// thread's first call): askers who each come once a period, at any
    /// offset from one another, share one call a period between them,
    /// where a reuse "for a period" would let every asker find the call
    /// just out of date when its turn comes.
    SamePeriod(Duration),
}

pub struct SharedCalls<K, T> {
    epoch: Instant,
    calls: HashMap<K, (Instant, SharedCall<T>)>,
}

impl<K, T> Default for SharedCalls<K, T> {
    fn default() -> Self {
        SharedCalls { epoch: Instant::now(), calls: HashMap::new() }
    }
}

impl<K: Hash + Eq, T: Clone + 'static> SharedCalls<K, T> {
    /// The call for `key` in flight or still fresh, else `call()`.
    pub fn get(&mut self, key: K, fresh: Fresh, call: impl FnOnce() -> LocalBoxFuture<'static, Result<T, RpcError>>) -> SharedCall<T> {
        let now = Instant::now();
        if let Some((at, shared)) = self.calls.get(&key) {
            if self.is_fresh(*at, now, fresh) && !matches!(shared.peek(), Some(Err(_))) {
                return shared.clone();
            }
        }
        let shared = call().shared();
        self.calls.insert(key, (now, shared.clone()));
        shared
    }

    fn is_fresh(&self, at: Instant, now: Instant, fresh: Fresh) -> bool {
        match fresh {
            Fresh::For(age) => now.duration_since(at) < age,
            Fresh::SamePeriod(period) => {
                let period = period.as_secs_f64().max(1e-3);
                let slot = |t: Instant| (t.duration_since(self.epoch).as_secs_f64() / period).floor();
                slot(at) == slot(now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn counting(calls: &Rc<Cell<u32>>, ok: bool) -> impl FnOnce() -> LocalBoxFuture<'static, Result<u32, RpcError>> {
        let calls = calls.clone();
        move || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move {
                if ok {
                    Ok(n)
                } else {
                    Err(RpcError::Boinc { num: -1, msg: "down".into() })
                }
            }
            .boxed_local()
        }
    }

    #[test]
    fn one_call_per_key_while_fresh_and_a_failure_is_asked_again() {
        actix_rt::System::new().block_on(async {
            let mut table: SharedCalls<&str, u32> = SharedCalls::default();
            let n = Rc::new(Cell::new(0));
            let fresh = Fresh::For(Duration::from_secs(60));
            let (a, b) = (table.get("a", fresh, counting(&n, true)), table.get("a", fresh, counting(&n, true)));
            assert_eq!((a.await.ok(), b.await.ok(), n.get()), (Some(1), Some(1), 1));
            assert_eq!(table.get("b", fresh, counting(&n, true)).await.ok(), Some(2), "another key is another call");
            assert!(table.get("c", fresh, counting(&n, false)).await.is_err());
            assert_eq!(table.get("c", fresh, counting(&n, true)).await.ok(), Some(4), "a failure is not reused");
            let stale = Fresh::For(Duration::ZERO);
            assert_eq!(table.get("a", stale, counting(&n, true)).await.ok(), Some(5));
        });
    }

    #[test]
    fn same_period_askers_share_and_the_next_period_asks_again() {
        actix_rt::System::new().block_on(async {
            let mut table: SharedCalls<&str, u32> = SharedCalls::default();
            let n = Rc::new(Cell::new(0));
            let period = Fresh::SamePeriod(Duration::from_millis(200));
            // Just after a period began, so that both asks fall in it.
            let since = table.epoch.elapsed().as_secs_f64() % 0.2;
            tokio::time::sleep(Duration::from_secs_f64(0.2 - since + 0.01)).await;
            assert_eq!(table.get("a", period, counting(&n, true)).await.ok(), Some(1));
            assert_eq!(table.get("a", period, counting(&n, true)).await.ok(), Some(1));
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(table.get("a", period, counting(&n, true)).await.ok(), Some(2));
        });
    }
}
