//! ResultQueue: completed results in completion order. It alone decides
//! whether a request id may be accepted and it delivers each accepted id's
//! result exactly once (invariants 2 and 3).
//!
//! A served client's queue is durable (`ResultQueue::durable`): each result
//! is written to the state database when it completes and deleted when a
//! RESULTS takes it, the delete committed before the lines are handed out,
//! so that a `serve` killed and restarted gives each unread result once and
//! never one already handed out (docs/serve.md, "Results that survive a
//! restart"). Writes go to a blocking thread in batches, one at a time and
//! in order; the actor's thread never waits for SQLite.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use gahp_protocol::gahp::query_answer::QueryAnswerChunks;
use gahp_protocol::gahp::{CommandResult, QueryAnswer, ReqId};
use rusqlite::params;
use tokio::sync::oneshot;

use crate::state_db::StateDb;

/// The id a reconnecting client (`boinc_gahp connect`) presents on each
/// of its connections.
pub type SessionId = Arc<str>;

/// One result line, without prefix and newline: `head` then `tail`. A
/// shared answer's tail is the one body every result of it points to.
pub struct ResultLine {
    pub head: Vec<u8>,
    pub tail: Tail,
}

impl ResultLine {
    fn new(reqid: ReqId, result: CommandResult) -> Self {
        let head = reqid.to_string().into_bytes();
        match result {
            CommandResult::Encoded(args) => ResultLine { head, tail: Tail::Bytes(args) },
            CommandResult::QueryAnswer(answer) => ResultLine { head, tail: Tail::Answer(answer) },
            other => ResultLine { head: other.encode(reqid), tail: Tail::Bytes(Bytes::new()) },
        }
    }
}

/// The rest of a line after its head, shared by every result of one
/// answer: bytes, or a status answer rendered only as it is written (the
/// line of a million jobs, 19 MB, is never whole in memory).
#[derive(Clone)]
pub enum Tail {
    Bytes(Bytes),
    Answer(Arc<QueryAnswer>),
}

/// What the session renders a tail in: a chunk of at most about this
/// (one job's fields more) is written at a time.
pub const TAIL_CHUNK: usize = 64 << 10;

impl Tail {
    fn is_empty(&self) -> bool {
        matches!(self, Tail::Bytes(b) if b.is_empty())
    }

    /// Its text in chunks (bytes: one chunk, as they are).
    pub fn chunks(&self) -> TailChunks<'_> {
        match self {
            Tail::Bytes(b) => TailChunks::Bytes(Some(b)),
            Tail::Answer(a) => TailChunks::Answer(a.chunks(TAIL_CHUNK)),
        }
    }

    /// Its text whole: what a durable queue stores.
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Tail::Bytes(b) => b.clone(),
            Tail::Answer(a) => {
                let mut out = Vec::new();
                a.encode_into(&mut out);
                out.into()
            }
        }
    }
}

pub enum TailChunks<'a> {
    Bytes(Option<&'a [u8]>),
    Answer(QueryAnswerChunks<'a>),
}

impl TailChunks<'_> {
    pub fn next_chunk(&mut self) -> Option<&[u8]> {
        match self {
            TailChunks::Bytes(b) => b.take().filter(|b| !b.is_empty()),
            TailChunks::Answer(a) => a.next_chunk(),
        }
    }
}

/// Result lines, oldest first, kept compactly: every head in one buffer
/// (a `Vec` a line costs its header and the allocator's rounding, about
/// 60 bytes, and a gridmanager may leave 100,000 results unread), the few
/// tails (shared bodies) beside them.
#[derive(Default)]
pub struct ResultLines {
    /// The heads, in chunks of [`ResultLines::CHUNK`] bytes (a longer head
    /// has one of its own): grown a chunk at a time, where one doubling
    /// buffer held its old and new copies at once as it grew.
    text: Vec<Vec<u8>>,
    /// Where each line's head ends in its chunk.
    ends: Vec<usize>,
    /// The first line of each chunk.
    chunk_starts: Vec<usize>,
    /// The lines that have a tail: (line, tail), in line order.
    tails: Vec<(usize, Tail)>,
}

impl ResultLines {
    const CHUNK: usize = 1 << 20;

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn push(&mut self, head: &[u8], tail: Tail) {
        if !tail.is_empty() {
            self.tails.push((self.ends.len(), tail));
        }
        let chunk = match self.text.last_mut() {
            Some(c) if c.capacity() - c.len() >= head.len() => c,
            _ => {
                self.chunk_starts.push(self.ends.len());
                self.text.push(Vec::with_capacity(head.len().max(ResultLines::CHUNK)));
                // Just pushed.
                let Some(c) = self.text.last_mut() else { return };
                c
            }
        };
        chunk.extend_from_slice(head);
        self.ends.push(chunk.len());
    }

    /// Each line as its head and its tail, if it has one.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&Tail>)> {
        let mut tails = self.tails.iter().peekable();
        let mut chunks = self.chunk_starts.iter().copied().zip(&self.text).peekable();
        let (mut chunk, mut start): (&[u8], usize) = (&[], 0);
        self.ends.iter().enumerate().map(move |(i, &end)| {
            if let Some((_, c)) = chunks.next_if(|(first, _)| *first == i) {
                (chunk, start) = (c, 0);
            }
            let tail = tails.next_if(|(line, _)| *line == i).map(|(_, t)| t);
            let head = chunk.get(start..end).unwrap_or_default();
            start = end;
            (head, tail)
        })
    }
}

/// Request ids, each with the session that sent it, if any. The ids of
/// no session (every one of the stdio daemon's) are kept bare: 100,000
/// unread results cost about 0.6 MB here, not 3.3 as `Option<SessionId>`s.
#[derive(Default)]
struct Senders {
    bare: HashSet<ReqId>,
    of: HashMap<ReqId, SessionId>,
}

impl Senders {
    fn get(&self, id: &ReqId) -> Option<Option<&SessionId>> {
        if self.bare.contains(id) {
            return Some(None);
        }
        self.of.get(id).map(Some)
    }

    fn insert(&mut self, id: ReqId, session: Option<SessionId>) {
        match session {
            None => {
                self.of.remove(&id);
                self.bare.insert(id);
            }
            Some(s) => {
                self.bare.remove(&id);
                self.of.insert(id, s);
            }
        }
    }

    fn remove(&mut self, id: &ReqId) -> Option<Option<SessionId>> {
        if self.bare.remove(id) {
            return Some(None);
        }
        self.of.remove(id).map(Some)
    }
}

#[derive(Default)]
pub struct ResultQueue {
    /// Accepted, no result yet; with the session that sent it.
    in_flight: Senders,
    /// Result queued, not yet handed out by a RESULTS; with its session.
    queued: Senders,
    /// Encoded result lines, oldest first.
    ready: ResultLines,
    /// The sequence number of the last of them (a durable queue's).
    last_seq: u64,
    async_mode: bool,
    /// An `R` was written since the last RESULTS.
    notified: bool,
    session: Option<Recipient<Notify>>,
    /// Where a served client's results are kept (None: in memory only).
    store: Option<Store>,
}

impl Actor for ResultQueue {
    type Context = Context<Self>;
}

/// One change to the stored results, applied in order.
enum Op {
    Put {
        seq: u64,
        reqid: ReqId,
        session: Option<SessionId>,
        head: Vec<u8>,
        /// An answer is rendered when written, on the writer's thread.
        tail: Tail,
    },
    /// Every result up to this one (a RESULTS takes all that are queued).
    DeleteUpTo(u64),
}

/// The durable side of a queue: the changes not yet handed to the writer,
/// and the RESULTS waiting for them to be committed.
struct Store {
    db: StateDb,
    next_seq: u64,
    pending: Vec<Op>,
    /// Each is answered once everything pending when it was added is committed.
    waiters: Vec<oneshot::Sender<()>>,
    /// A batch of changes is being written.
    writing: bool,
}

impl ResultQueue {
    /// A queue whose results survive a restart: what an earlier run left
    /// unread in `db` is queued again, in its order. Call from a blocking
    /// context (start-up): it reads the database.
    pub fn durable(db: StateDb) -> rusqlite::Result<Self> {
        let rows = db.with_conn(|c| {
            c.prepare("SELECT seq, reqid, head, tail, session FROM unread_results ORDER BY seq")?
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, Vec<u8>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?;
        let mut queue = ResultQueue::default();
        let mut next_seq = 0;
        for (seq, reqid, head, tail, session) in rows {
            let (seq, reqid) = (seq as u64, ReqId(reqid as u32));
            next_seq = seq + 1;
            queue.queued.insert(reqid, session.map(SessionId::from));
            queue.ready.push(&head, Tail::Bytes(Bytes::from(tail)));
            queue.last_seq = seq;
        }
        if !queue.ready.is_empty() {
            tracing::info!(results = queue.ready.len(), "results left unread before a restart are queued again");
        }
        queue.store = Some(Store { db, next_seq, pending: Vec::new(), waiters: Vec::new(), writing: false });
        Ok(queue)
    }

    /// Hands what is pending to a blocking thread, unless a batch is being
    /// written (then it goes when that one is done).
    fn write_pending(&mut self, ctx: &mut Context<Self>) {
        let Some(store) = &mut self.store else { return };
        if store.writing || (store.pending.is_empty() && store.waiters.is_empty()) {
            return;
        }
        store.writing = true;
        let (ops, waiters, db) = (std::mem::take(&mut store.pending), std::mem::take(&mut store.waiters), store.db.clone());
        let write = tokio::task::spawn_blocking(move || db.with_conn(|c| apply(c, &ops)));
        ctx.spawn(write.into_actor(self).map(move |done, act, ctx| {
            match done {
                Ok(Ok(())) => {}
                // A result handed out may then come again after a restart;
                // one not stored is lost only if serve dies before it is read.
                Ok(Err(e)) => tracing::error!("can't store or delete results in the state database: {e}"),
                Err(e) => tracing::error!("the results' writer failed: {e}"),
            }
            for w in waiters {
                let _ = w.send(());
            }
            if let Some(store) = &mut act.store {
                store.writing = false;
            }
            act.write_pending(ctx);
        }));
    }
}

/// One transaction: every change of a batch, in order.
fn apply(c: &mut rusqlite::Connection, ops: &[Op]) -> rusqlite::Result<()> {
    let tx = c.transaction()?;
    {
        let mut put =
            tx.prepare_cached("INSERT OR REPLACE INTO unread_results (seq, reqid, head, tail, session) VALUES (?1, ?2, ?3, ?4, ?5)")?;
        let mut delete = tx.prepare_cached("DELETE FROM unread_results WHERE seq <= ?1")?;
        for op in ops {
            match op {
                Op::Put { seq, reqid, session, head, tail } => {
                    put.execute(params![*seq as i64, i64::from(reqid.0), head, &tail.to_bytes()[..], session.as_deref()])?;
                }
                Op::DeleteUpTo(last) => {
                    delete.execute([*last as i64])?;
                }
            }
        }
    }
    tx.commit()
}

impl ResultQueue {
    fn maybe_notify(&mut self) {
        if self.async_mode && !self.notified && !self.ready.is_empty() {
            if let Some(s) = &self.session {
                self.notified = true;
                s.do_send(Notify);
            }
        }
    }
}

/// Asks the Session to write one `R` line.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Notify;

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetSession(pub Recipient<Notify>);

impl Handler<SetSession> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: SetSession, _: &mut Context<Self>) {
        // A new session (a served client back on a new connection) starts
        // in synchronous mode and owes no RESULTS for an earlier `R`.
        self.session = Some(msg.0);
        self.async_mode = false;
        self.notified = false;
    }
}

/// Registers a request id sent in `session` (a reconnecting client's, or
/// None).
#[derive(Message)]
#[rtype(result = "Accepted")]
pub struct Accept {
    pub reqid: ReqId,
    pub session: Option<SessionId>,
}

impl Accept {
    pub fn new(reqid: ReqId) -> Self {
        Accept { reqid, session: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, MessageResponse)]
pub enum Accepted {
    /// A new request: answer `S` and run it.
    New,
    /// Already accepted from this session (it sent it again after its link
    /// dropped): answer `S`, don't run it again; its one result comes.
    Again,
    /// Pending for another sender: answer `E`.
    Busy,
}

impl Handler<Accept> for ResultQueue {
    type Result = Accepted;
    fn handle(&mut self, msg: Accept, _: &mut Context<Self>) -> Accepted {
        let owner = self.queued.get(&msg.reqid).or_else(|| self.in_flight.get(&msg.reqid));
        match (owner, &msg.session) {
            (None, _) => {
                self.in_flight.insert(msg.reqid, msg.session);
                Accepted::New
            }
            (Some(Some(owner)), Some(session)) if owner == session => Accepted::Again,
            (Some(_), _) => Accepted::Busy,
        }
    }
}

/// The one result of an accepted request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Complete {
    pub reqid: ReqId,
    pub result: CommandResult,
}

impl Handler<Complete> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: Complete, ctx: &mut Context<Self>) {
        let Some(session) = self.in_flight.remove(&msg.reqid) else {
            tracing::error!(reqid = msg.reqid.0, "dropping a second result for one request");
            return;
        };
        self.queued.insert(msg.reqid, session.clone());
        let line = ResultLine::new(msg.reqid, msg.result);
        self.ready.push(&line.head, line.tail.clone());
        if let Some(store) = &mut self.store {
            let seq = store.next_seq;
            store.next_seq += 1;
            self.last_seq = seq;
            store.pending.push(Op::Put { seq, reqid: msg.reqid, session, head: line.head, tail: line.tail });
        }
        self.write_pending(ctx);
        self.maybe_notify();
    }
}

/// Takes every queued result line (the body of a RESULTS reply). A durable
/// queue answers once their deletion is committed: a line is never handed
/// out while a restart could queue it again.
#[derive(Message)]
#[rtype(result = "ResultLines")]
pub struct Drain;

impl Handler<Drain> for ResultQueue {
    type Result = ResponseFuture<ResultLines>;
    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        self.notified = false;
        // Its room given back too: a flood of unread results is not kept.
        self.queued = Senders::default();
        let lines = std::mem::take(&mut self.ready);
        let Some(store) = &mut self.store else {
            return Box::pin(std::future::ready(lines));
        };
        if lines.is_empty() {
            return Box::pin(std::future::ready(lines));
        }
        // Every line up to the last taken is taken: those whose Put has not
        // gone to the writer yet are simply not stored, the rest deleted.
        let last = self.last_seq;
        let before = store.pending.len();
        store.pending.retain(|op| !matches!(op, Op::Put { seq, .. } if *seq <= last));
        let unsent = before - store.pending.len();
        if unsent == lines.len() {
            return Box::pin(std::future::ready(lines));
        }
        store.pending.push(Op::DeleteUpTo(last));
        let (tx, rx) = oneshot::channel();
        store.waiters.push(tx);
        self.write_pending(ctx);
        Box::pin(async move {
            let _ = rx.await;
            lines
        })
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetAsync(pub bool);

impl Handler<SetAsync> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: SetAsync, _: &mut Context<Self>) {
        self.async_mode = msg.0;
        if !msg.0 {
            self.notified = false;
        }
        // Results queued before async mode was switched on are announced too.
        self.maybe_notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &ResultLines) -> Vec<String> {
        lines
            .iter()
            .map(|(head, tail)| {
                let mut line = head.to_vec();
                if let Some(tail) = tail {
                    let mut chunks = tail.chunks();
                    while let Some(chunk) = chunks.next_chunk() {
                        line.extend_from_slice(chunk);
                    }
                }
                String::from_utf8_lossy(&line).into_owned()
            })
            .collect()
    }

    async fn complete(q: &Addr<ResultQueue>, ids: std::ops::RangeInclusive<u32>) {
        for id in ids {
            assert_eq!(q.send(Accept::new(ReqId(id))).await.unwrap(), Accepted::New);
            q.send(Complete { reqid: ReqId(id), result: CommandResult::Error(format!("r{id}")) }).await.unwrap();
        }
    }

    fn stored(db: &StateDb) -> i64 {
        db.with_conn(|c| c.query_row("SELECT count(*) FROM unread_results", [], |r| r.get(0))).unwrap()
    }

    #[test]
    fn lines_in_one_buffer_come_back_each_with_its_own_tail() {
        let mut lines = ResultLines::default();
        assert!(lines.is_empty() && lines.iter().next().is_none());
        let body = Bytes::from_static(b" shared body");
        let answer = Tail::Answer(Arc::new(QueryAnswer::from_groups(1.0, &[vec![("j 1".into(), "DONE".into())]])));
        let none = || Tail::Bytes(Bytes::new());
        for (head, tail) in [
            ("1 a", none()),
            ("2", Tail::Bytes(body.clone())),
            ("", none()),
            ("4", Tail::Bytes(body.clone())),
            ("5 e", none()),
            ("6", answer),
        ] {
            lines.push(head.as_bytes(), tail);
        }
        assert_eq!(lines.len(), 6);
        assert_eq!(text(&lines), ["1 a", "2 shared body", "", "4 shared body", "5 e", "6 NULL 1.000000 1 j\\ 1 DONE"]);
    }

    #[test]
    fn senders_keep_each_id_with_its_session_or_none() {
        let mut s = Senders::default();
        let a: SessionId = "a".into();
        s.insert(ReqId(1), None);
        s.insert(ReqId(2), Some(a.clone()));
        assert_eq!(s.get(&ReqId(1)), Some(None));
        assert_eq!(s.get(&ReqId(2)), Some(Some(&a)));
        assert_eq!(s.get(&ReqId(3)), None);
        // An id taken again by the other kind of sender is that one's only.
        s.insert(ReqId(1), Some(a.clone()));
        s.insert(ReqId(2), None);
        assert_eq!(s.get(&ReqId(1)), Some(Some(&a)));
        assert_eq!(s.get(&ReqId(2)), Some(None));
        assert_eq!(s.remove(&ReqId(2)), Some(None));
        assert_eq!(s.remove(&ReqId(1)), Some(Some(a)));
        assert_eq!(s.remove(&ReqId(1)), None);
        assert!(s.bare.is_empty() && s.of.is_empty());
    }

    #[test]
    fn lines_over_many_chunks_come_back_whole_and_in_order() {
        let mut lines = ResultLines::default();
        let mut want = Vec::new();
        let long = "x".repeat(ResultLines::CHUNK + 7);
        for i in 0..40_000 {
            let head = match i {
                12_345 => format!("{i} {long}"),
                _ => format!("{i} S 0 {}", "y".repeat(i % 97)),
            };
            let tail = if i % 1000 == 0 { Bytes::from(format!(" tail{i}")) } else { Bytes::new() };
            want.push(format!("{head}{}", String::from_utf8_lossy(&tail)));
            lines.push(head.as_bytes(), Tail::Bytes(tail));
        }
        assert!(lines.text.len() > 2, "{} chunks", lines.text.len());
        // Never grown: every chunk but the long head's has the room it was made with.
        assert_eq!(lines.text.iter().filter(|c| c.capacity() == ResultLines::CHUNK).count(), lines.text.len() - 1);
        assert_eq!(text(&lines), want);
    }

    #[test]
    fn a_durable_queue_gives_again_what_was_not_taken_and_never_what_was() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB, crate::schema::RESULT_QUEUE]).unwrap();
        actix_rt::System::new().block_on(async {
            let q = ResultQueue::durable(db.clone()).unwrap().start();
            complete(&q, 1..=3).await;
            assert_eq!(q.send(Drain).await.unwrap().len(), 3);
            complete(&q, 4..=5).await;
            // A status answer, kept compact in memory, is stored rendered.
            let groups = vec![vec![("a b".to_string(), "DONE".to_string())], vec![]];
            let answer = CommandResult::QueryAnswer(Arc::new(QueryAnswer::from_groups(2.5, &groups)));
            assert_eq!(q.send(Accept::new(ReqId(6))).await.unwrap(), Accepted::New);
            q.send(Complete { reqid: ReqId(6), result: answer }).await.unwrap();
            // Stored a moment after they complete (a blocking thread writes).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while stored(&db) != 3 {
                assert!(std::time::Instant::now() < until, "{} stored", stored(&db));
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }

            // A restart: the unread two, in order; their ids still pending.
            let again = ResultQueue::durable(db.clone()).unwrap().start();
            assert_eq!(again.send(Accept::new(ReqId(4))).await.unwrap(), Accepted::Busy, "an unread result's id is still in use");
            assert_eq!(again.send(Accept::new(ReqId(1))).await.unwrap(), Accepted::New, "a taken result's id is free");
            // Their deletion is committed before the lines are handed out.
            let lines = again.send(Drain).await.unwrap();
            assert_eq!(text(&lines), ["4 r4", "5 r5", "6 NULL 2.500000 1 a\\ b DONE 0"]);
            assert_eq!(stored(&db), 0);
            assert!(text(&ResultQueue::durable(db.clone()).unwrap().ready).is_empty());
        });
    }

    #[test]
    fn a_request_its_session_sends_again_is_known_also_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB, crate::schema::RESULT_QUEUE]).unwrap();
        actix_rt::System::new().block_on(async {
            let q = ResultQueue::durable(db.clone()).unwrap().start();
            let (a, b): (SessionId, SessionId) = ("a".into(), "b".into());
            let accept = |id, s: &SessionId| Accept { reqid: ReqId(id), session: Some(s.clone()) };
            assert_eq!(q.send(accept(1, &a)).await.unwrap(), Accepted::New);
            assert_eq!(q.send(accept(1, &a)).await.unwrap(), Accepted::Again, "in flight");
            assert_eq!(q.send(accept(1, &b)).await.unwrap(), Accepted::Busy);
            assert_eq!(q.send(Accept::new(ReqId(1))).await.unwrap(), Accepted::Busy);
            q.send(Complete { reqid: ReqId(1), result: CommandResult::Error("r1".into()) }).await.unwrap();
            assert_eq!(q.send(accept(1, &a)).await.unwrap(), Accepted::Again, "its result unread");
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while stored(&db) != 1 {
                assert!(std::time::Instant::now() < until);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }

            let again = ResultQueue::durable(db.clone()).unwrap().start();
            assert_eq!(again.send(accept(1, &a)).await.unwrap(), Accepted::Again, "its stored result is its session's");
            assert_eq!(again.send(accept(1, &b)).await.unwrap(), Accepted::Busy);
            assert_eq!(text(&again.send(Drain).await.unwrap()), ["1 r1"]);
            assert_eq!(again.send(accept(1, &a)).await.unwrap(), Accepted::New, "read: the id is free again");
        });
    }
}
