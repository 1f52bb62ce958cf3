//! JobMap: the jobs in memory of a BLAH project by name, compactly. A
//! `HashMap<Box<str>, Job>` cost about 190 bytes a job at 100,000 (a table
//! of key and job a bucket, a third of them empty, and a heap block per
//! name); here the names are in one buffer, a job is a record in one
//! `Vec`, and the hashed index holds a `u32` a bucket (about 90 bytes a
//! job with a 40-byte job and a 25-byte name).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

/// A map from name to `V` with the API of the `HashMap` it replaces
/// (`get`, `get_mut`, `insert`, `remove`, `iter`).
pub(super) struct JobMap<V> {
    /// Every name an entry holds, and the holes removed ones left.
    names: String,
    entries: Chunked<Entry<V>>,
    /// Positions in `entries`, hashed by their names.
    index: HashTable<u32>,
    hasher: RandomState,
    /// Bytes of `names` no entry holds any more.
    dead: usize,
}

struct Entry<V> {
    /// Where its name is in `names`.
    start: u32,
    len: u32,
    value: V,
}

impl<V> Default for JobMap<V> {
    fn default() -> Self {
        JobMap { names: String::new(), entries: Chunked::default(), index: HashTable::new(), hasher: RandomState::new(), dead: 0 }
    }
}

/// Records a `Vec` would hold, in chunks of [`CHUNK`]: grown a chunk at a
/// time, where a doubling `Vec` held its old and new copies at once as it
/// grew (6 MB of records at 100,000 jobs). Every chunk but the last is
/// full, and none is empty.
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

const CHUNK: usize = 4096;

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new(), len: 0 }
    }
}

impl<T> Chunked<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(value),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    fn pop(&mut self) -> Option<T> {
        let last = self.chunks.last_mut()?;
        let value = last.pop()?;
        if last.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        Some(value)
    }

    /// As `Vec::swap_remove`: the last record takes its place.
    fn swap_remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let last = self.pop()?;
        if i == self.len {
            return Some(last);
        }
        let slot = self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)?;
        Some(std::mem::replace(slot, last))
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks.iter_mut().flatten()
    }
}

impl<T> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T> std::ops::IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

/// Holes in `names` are squeezed out once they are more than half of it
/// (and more than this, so that a few jobs coming and going don't copy).
const COMPACT_AFTER: usize = 64 * 1024;

impl<V> JobMap<V> {
    fn name_of<'a>(names: &'a str, e: &Entry<V>) -> &'a str {
        &names[e.start as usize..(e.start + e.len) as usize]
    }

    fn position(&self, name: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        let (names, entries) = (&self.names, &self.entries);
        self.index.find(hash, |&at| Self::name_of(names, &entries[at as usize]) == name).map(|&at| at as usize)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    pub(super) fn get(&self, name: &str) -> Option<&V> {
        self.position(name).map(|at| &self.entries[at].value)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.position(name).map(|at| &mut self.entries[at].value)
    }

    /// Adds `value` as `name`'s, or replaces (and returns) the one it had.
    /// Beyond 4 GiB of names (the `u32` offsets) a new job is not held:
    /// logged, and answered as a job not loaded.
    pub(super) fn insert(&mut self, name: &str, value: V) -> Option<V> {
        if let Some(at) = self.position(name) {
            return Some(std::mem::replace(&mut self.entries[at].value, value));
        }
        if u32::try_from(self.names.len() + name.len()).is_err() {
            self.compact();
        }
        let (start, len, at) = match (u32::try_from(self.names.len()), u32::try_from(name.len()), u32::try_from(self.entries.len())) {
            (Ok(start), Ok(len), Ok(at)) if start.checked_add(len).is_some() => (start, len, at),
            _ => {
                tracing::error!(job = name, "more than 4 GiB of BLAH job names in memory; the job is not held");
                return None;
            }
        };
        self.names.push_str(name);
        self.entries.push(Entry { start, len, value });
        let (hasher, names, entries) = (&self.hasher, &self.names, &self.entries);
        self.index.insert_unique(hasher.hash_one(name), at, |&i| hasher.hash_one(Self::name_of(names, &entries[i as usize])));
        None
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<V> {
        let hash = self.hasher.hash_one(name);
        let (names, entries) = (&self.names, &self.entries);
        let found = self.index.find_entry(hash, |&at| Self::name_of(names, &entries[at as usize]) == name).ok()?;
        let at = found.remove().0 as usize;
        let removed = self.entries.swap_remove(at)?;
        self.dead += removed.len as usize;
        // The last entry moved into its place: its index bucket follows.
        if let Some(moved) = self.entries.get(at) {
            let (from, to) = (self.entries.len() as u32, at as u32);
            let hash = self.hasher.hash_one(Self::name_of(&self.names, moved));
            if let Some(slot) = self.index.find_mut(hash, |&i| i == from) {
                *slot = to;
            }
        }
        if self.entries.is_empty() {
            self.names.clear();
            self.dead = 0;
        } else if self.dead > COMPACT_AFTER && self.dead > self.names.len() / 2 {
            self.compact();
        }
        Some(removed.value)
    }

    /// Squeezes the holes out of `names`.
    fn compact(&mut self) {
        let mut names = String::with_capacity(self.names.len() - self.dead);
        for e in self.entries.iter_mut() {
            let start = names.len();
            names.push_str(Self::name_of(&self.names, e));
            // Shorter than the buffer it came from: it fits.
            e.start = start as u32;
        }
        self.names = names;
        self.dead = 0;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|e| (Self::name_of(&self.names, e), &e.value))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        let names = &self.names;
        self.entries.iter_mut().map(move |e| (Self::name_of(names, e), &mut e.value))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|e| &e.value)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, u32),
        Remove(String),
        Get(String),
        Bump(String),
    }

    /// Names from a small set, so that operations meet the same ones.
    fn name() -> impl Strategy<Value = String> {
        (0u32..300, 0usize..40).prop_map(|(n, pad)| format!("blah#{}#{n}", "d".repeat(pad)))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (name(), any::<u32>()).prop_map(|(n, v)| Op::Insert(n, v)),
            2 => name().prop_map(Op::Remove),
            1 => name().prop_map(Op::Get),
            1 => name().prop_map(Op::Bump),
        ]
    }

    fn same<V: PartialEq + Clone + std::fmt::Debug + Ord>(store: &JobMap<V>, model: &HashMap<String, V>) {
        assert_eq!(store.len(), model.len());
        let mut all: Vec<(String, V)> = store.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let mut want: Vec<(String, V)> = model.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        all.sort();
        want.sort();
        assert_eq!(all, want);
        for (n, v) in model {
            assert_eq!(store.get(n), Some(v), "{n}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The store holds what a HashMap would, after any run of inserts,
        /// removes and changes: no job is lost, none is mixed with another.
        #[test]
        fn it_holds_what_a_hashmap_holds(ops in proptest::collection::vec(op(), 1..600)) {
            let mut store = JobMap::default();
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(n, v) => prop_assert_eq!(store.insert(&n, v), model.insert(n, v)),
                    Op::Remove(n) => prop_assert_eq!(store.remove(&n), model.remove(&n)),
                    Op::Get(n) => {
                        prop_assert_eq!(store.get(&n), model.get(&n));
                        prop_assert_eq!(store.contains_key(&n), model.contains_key(&n));
                    }
                    Op::Bump(n) => {
                        if let Some(v) = store.get_mut(&n) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&n) {
                            *v = v.wrapping_add(1);
                        }
                    }
                }
            }
            same(&store, &model);
            for (_, v) in store.iter_mut() {
                *v = v.wrapping_mul(3);
            }
            for v in model.values_mut() {
                *v = v.wrapping_mul(3);
            }
            same(&store, &model);
        }
    }

    /// Over many chunks of records: inserts and removes anywhere (the last
    /// record moving across chunks) against a HashMap.
    #[test]
    fn records_over_many_chunks_hold_what_a_hashmap_holds() {
        let (mut store, mut model) = (JobMap::default(), HashMap::new());
        let mut x: u64 = 7;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as usize
        };
        for round in 0..80_000 {
            let n = format!("blah#d#{}", next() % 40_000);
            if round < 30_000 || next() % 3 != 0 {
                assert_eq!(store.insert(&n, round), model.insert(n, round));
            } else {
                assert_eq!(store.remove(&n), model.remove(&n));
            }
        }
        assert!(store.entries.chunks.len() > 2, "{} chunks", store.entries.chunks.len());
        assert!(store.entries.chunks.iter().all(|c| !c.is_empty()));
        same(&store, &model);
        for n in model.keys() {
            assert_eq!(store.remove(n), Some(model[n]));
        }
        assert!(store.entries.is_empty() && store.entries.chunks.is_empty());
    }

    #[test]
    fn its_names_are_compacted_as_jobs_go_and_all_stay_found() {
        let mut store = JobMap::default();
        let name = |i: usize| format!("blah#job_directory_{i}#0");
        for i in 0..20_000 {
            assert_eq!(store.insert(&name(i), i), None);
        }
        let full = store.names.len();
        for i in (0..20_000).filter(|i| i % 4 != 0) {
            assert_eq!(store.remove(&name(i)), Some(i));
        }
        assert!(store.names.len() < full / 2, "{} of {full}: the holes stayed", store.names.len());
        assert_eq!(store.len(), 5_000);
        for i in 0..20_000 {
            assert_eq!(store.get(&name(i)), (i % 4 == 0).then_some(&i), "{i}");
        }
        for i in (0..20_000).step_by(4) {
            assert_eq!(store.remove(&name(i)), Some(i));
        }
        assert_eq!((store.len(), store.names.len()), (0, 0));
    }
}
