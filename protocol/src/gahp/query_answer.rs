//! A BOINC_QUERY_BATCHES answer kept compactly as the query_batch2 reply
//! is read, and rendered into its result line's arguments in bounded
//! chunks only when the line is written: the line of a million jobs (about
//! 19 MB) never exists whole, and every query that shares the answer
//! renders it from the same compact form.

use std::collections::HashMap;
use std::fmt;

use super::escape::escape_into;

/// The answer: ` NULL <server_time> {<n> {<job> <status>}*}*` as the reply
/// announced and listed it. A job's name is kept as the length of the
/// start it shares with the name before it, and the rest (its length and
/// bytes; lengths in LEB128), then its status's index among the distinct
/// statuses: a batch's names differ from one another only at their end
/// (`<batch>_<k>`, or the gridmanager's `condor#<schedd>#<app>#<qdate>#
/// <cluster>.<proc>`), so a job is about 5 bytes however long its name,
/// against 19 to 70 for its encoding. Escaping is done when rendered.
#[derive(Clone, PartialEq)]
pub struct QueryAnswer {
    server_time: f64,
    /// Jobs listed before any batch began (a reply never has any; kept so
    /// the line is exactly what the reply said).
    loose: usize,
    /// Per batch: the size the reply announced, the jobs it listed.
    groups: Vec<(usize, usize)>,
    jobs: Vec<u8>,
    statuses: Vec<Box<str>>,
}

impl fmt::Debug for QueryAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryAnswer")
            .field("server_time", &self.server_time)
            .field("groups", &self.groups)
            .field("job_bytes", &self.jobs.len())
            .field("statuses", &self.statuses)
            .finish()
    }
}

/// The answer as the reply is read ([`crate::boinc::reply::QueryBatch2Sink`]).
#[derive(Default)]
pub struct QueryAnswerBuilder {
    loose: usize,
    groups: Vec<(usize, usize)>,
    jobs: Vec<u8>,
    statuses: Vec<Box<str>>,
    /// Each distinct status's index in `statuses`.
    index: HashMap<Box<str>, usize>,
    /// The name of the job added last.
    last: Vec<u8>,
}

impl QueryAnswerBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next batch, of `size` jobs as announced.
    pub fn group(&mut self, size: usize) {
        self.groups.push((size, 0));
    }

    /// A job of the batch begun last.
    pub fn job(&mut self, name: &str, status: &str) {
        match self.groups.last_mut() {
            Some((_, listed)) => *listed += 1,
            None => self.loose += 1,
        }
        let status = match self.index.get(status) {
            Some(&i) => i,
            None => {
                let i = self.statuses.len();
                self.statuses.push(status.into());
                self.index.insert(status.into(), i);
                i
            }
        };
        let name = name.as_bytes();
        let shared = self.last.iter().zip(name).take_while(|(a, b)| a == b).count();
        put_len(&mut self.jobs, shared);
        put_len(&mut self.jobs, name.len() - shared);
        self.jobs.extend_from_slice(&name[shared..]);
        put_len(&mut self.jobs, status);
        self.last.truncate(shared);
        self.last.extend_from_slice(&name[shared..]);
    }

    /// Batches begun so far.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    pub fn finish(mut self, server_time: f64) -> QueryAnswer {
        self.jobs.shrink_to_fit();
        QueryAnswer { server_time, loose: self.loose, groups: self.groups, jobs: self.jobs, statuses: self.statuses }
    }
}

impl crate::boinc::reply::QueryBatch2Sink for QueryAnswerBuilder {
    fn group(&mut self, batch_size: usize) {
        QueryAnswerBuilder::group(self, batch_size);
    }
    fn job(&mut self, name: &str, status: &str) {
        QueryAnswerBuilder::job(self, name, status);
    }
}

impl QueryAnswer {
    /// The answer of structured groups (every batch announced as the jobs
    /// it lists).
    pub fn from_groups(server_time: f64, groups: &[Vec<(String, String)>]) -> Self {
        let mut builder = QueryAnswerBuilder::new();
        for group in groups {
            builder.group(group.len());
            for (job, status) in group {
                builder.job(job, status);
            }
        }
        builder.finish(server_time)
    }

    pub fn server_time(&self) -> f64 {
        self.server_time
    }

    /// Per batch, its (job, status) pairs; `None` if a batch announced
    /// another number of jobs than it listed (the line would not read
    /// back as an answer either).
    #[allow(clippy::type_complexity)]
    pub fn groups(&self) -> Option<Vec<Vec<(String, String)>>> {
        if self.loose != 0 || self.groups.iter().any(|(announced, listed)| announced != listed) {
            return None;
        }
        let mut jobs = Jobs::of(self);
        let mut groups = Vec::with_capacity(self.groups.len());
        for &(_, listed) in &self.groups {
            let mut group = Vec::with_capacity(listed);
            for _ in 0..listed {
                let (name, status) = jobs.next()?;
                group.push((String::from_utf8_lossy(name).into_owned(), status.to_string()));
            }
            groups.push(group);
        }
        Some(groups)
    }

    /// The line's arguments in chunks of about `size` bytes each (a chunk
    /// passes `size` by at most one job's fields).
    pub fn chunks(&self, size: usize) -> QueryAnswerChunks<'_> {
        QueryAnswerChunks { jobs: Jobs::of(self), size: size.max(1), buf: Vec::new(), started: false, group: 0, left: 0 }
    }

    /// The line's arguments whole (each escaped, each after a space).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut chunks = self.chunks(64 << 10);
        while let Some(chunk) = chunks.next_chunk() {
            out.extend_from_slice(chunk);
        }
    }
}

/// The jobs of an answer, in order.
struct Jobs<'a> {
    answer: &'a QueryAnswer,
    pos: usize,
    /// The name of the job read last.
    name: Vec<u8>,
}

impl<'a> Jobs<'a> {
    fn of(answer: &'a QueryAnswer) -> Self {
        Jobs { answer, pos: 0, name: Vec::new() }
    }

    fn next(&mut self) -> Option<(&[u8], &'a str)> {
        let jobs = &self.answer.jobs;
        let shared = get_len(jobs, &mut self.pos)?;
        let len = get_len(jobs, &mut self.pos)?;
        let rest = jobs.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        if shared > self.name.len() {
            return None;
        }
        self.name.truncate(shared);
        self.name.extend_from_slice(rest);
        let status = get_len(jobs, &mut self.pos)?;
        Some((&self.name, self.answer.statuses.get(status)?))
    }
}

/// The rendering of an answer, a chunk at a time.
pub struct QueryAnswerChunks<'a> {
    jobs: Jobs<'a>,
    size: usize,
    buf: Vec<u8>,
    /// The head (` NULL <server_time>`) is written.
    started: bool,
    /// The next batch to begin.
    group: usize,
    /// Jobs still to write of the batch begun last.
    left: usize,
}

impl QueryAnswerChunks<'_> {
    /// The next chunk of the line's arguments; `None` once all are out.
    pub fn next_chunk(&mut self) -> Option<&[u8]> {
        self.buf.clear();
        let answer = self.jobs.answer;
        if !self.started {
            self.started = true;
            self.buf.extend_from_slice(b" NULL ");
            escape_into(seconds(answer.server_time).as_bytes(), &mut self.buf);
            self.left = answer.loose;
        }
        while self.buf.len() < self.size {
            if self.left > 0 {
                self.left -= 1;
                // Always there: the builder wrote as many as it counted.
                let Some((name, status)) = self.jobs.next() else { continue };
                self.buf.push(b' ');
                escape_into(name, &mut self.buf);
                self.buf.push(b' ');
                escape_into(status.as_bytes(), &mut self.buf);
                continue;
            }
            let Some(&(announced, listed)) = answer.groups.get(self.group) else { break };
            self.group += 1;
            self.left = listed;
            self.buf.push(b' ');
            self.buf.extend_from_slice(announced.to_string().as_bytes());
        }
        (!self.buf.is_empty()).then_some(&self.buf[..])
    }
}

/// C's `%f`. A non-finite value (a bug upstream) is written as 0 so the
/// client still gets a number.
pub(crate) fn seconds(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    format!("{v:.6}")
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn get_len(data: &[u8], pos: &mut usize) -> Option<usize> {
    let mut n = 0usize;
    for shift in (0..usize::BITS).step_by(7) {
        let b = *data.get(*pos)?;
        *pos += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip() {
        for n in [0, 1, 127, 128, 300, 16383, 16384, usize::MAX] {
            let mut out = Vec::new();
            put_len(&mut out, n);
            let mut pos = 0;
            assert_eq!(get_len(&out, &mut pos), Some(n));
            assert_eq!(pos, out.len());
        }
        assert_eq!(get_len(&[0x80], &mut 0), None, "cut short");
    }

    #[test]
    fn names_kept_by_what_they_add_to_the_one_before_read_back_whole() {
        let groups: Vec<Vec<(String, String)>> = vec![
            vec![("b_9".into(), "DONE".into()), ("b_10".into(), "UNSENT".into()), ("b_1".into(), "DONE".into())],
            vec![],
            vec![("éa".into(), "DONE".into()), ("èa".into(), "DONE".into()), ("".into(), "DONE".into()), ("x y".into(), "DONE".into())],
        ];
        let answer = QueryAnswer::from_groups(1.0, &groups);
        assert_eq!(answer.groups().as_ref(), Some(&groups));
        let mut out = Vec::new();
        answer.encode_into(&mut out);
        assert_eq!(out, " NULL 1.000000 3 b_9 DONE b_10 UNSENT b_1 DONE 0 4 éa DONE èa DONE  DONE x\\ y DONE".as_bytes());
        // A gridmanager's names: a few bytes a job however long the name.
        let mut b = QueryAnswerBuilder::new();
        b.group(10_000);
        for proc in 0..10_000 {
            b.job(&format!("condor#submit-01.cluster.example.org#uppercase#1764000000#1000.{proc}"), "IN_PROGRESS");
        }
        let answer = b.finish(0.0);
        assert!(answer.jobs.len() < 6 * 10_000, "{} bytes", answer.jobs.len());
        let first = &answer.groups().unwrap()[0];
        assert_eq!(first[4321].0, "condor#submit-01.cluster.example.org#uppercase#1764000000#1000.4321");
    }

    #[test]
    fn an_announced_size_is_written_as_announced() {
        let mut b = QueryAnswerBuilder::new();
        b.job("early", "DONE");
        b.group(3);
        b.job("a b", "DONE");
        b.group(0);
        let answer = b.finish(2.5);
        let mut out = Vec::new();
        answer.encode_into(&mut out);
        assert_eq!(out, b" NULL 2.500000 early DONE 3 a\\ b DONE 0");
        assert_eq!(answer.groups(), None);
    }
}
