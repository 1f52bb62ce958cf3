//! The `stepper` app: one step of a work sequence, a counter and a
//! running checksum carried in its `state` file.

use std::io::{self, Write};
use std::path::Path;

use super::AppLog;

/// The `stepper`'s own job args.
#[derive(Debug, Default)]
pub(super) struct StepArgs {
    /// Write `DONE` when the new counter reaches this.
    pub(super) end_at: Option<u64>,
    /// Write no `state`: the step only says the work goes on.
    pub(super) heartbeat: bool,
}

/// FNV-1a 64 offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Longest state file the stepper accepts (the line is < 64 bytes); more is
/// malformed, and is not read into memory.
const STATE_MAX_BYTES: u64 = 4096;

/// Why a stepper state could not be advanced.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("malformed state {0:?}: want \"counter <n> checksum <16 lowercase hex>\\n\" or nothing")]
    Malformed(String),
    #[error("state counter {0} can't be advanced")]
    Overflow(u64),
    #[error("reading extra: {0}")]
    Extra(#[from] io::Error),
}

/// A `stepper` state: how many steps ran, and the running checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepState {
    pub counter: u64,
    pub checksum: u64,
}

impl StepState {
    /// Parses a state file's text: empty = the initial state (0, 0);
    /// otherwise exactly `counter <n> checksum <16 lowercase hex>` and an
    /// optional final newline.
    pub fn parse(text: &str) -> Result<StepState, StepError> {
        if text.is_empty() {
            return Ok(StepState::default());
        }
        let bad = || {
            let shown: String = text.chars().take(80).collect();
            StepError::Malformed(shown)
        };
        let line = text.strip_suffix('\n').unwrap_or(text);
        let mut words = line.split(' ');
        let (Some("counter"), Some(n), Some("checksum"), Some(h), None) =
            (words.next(), words.next(), words.next(), words.next(), words.next())
        else {
            return Err(bad());
        };
        let digits = |s: &str, ok: fn(u8) -> bool| !s.is_empty() && s.bytes().all(ok);
        if !digits(n, |b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
            return Err(bad());
        }
        if h.len() != 16 || !digits(h, |b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let counter = n.parse().map_err(|_| bad())?;
        let checksum = u64::from_str_radix(h, 16).map_err(|_| bad())?;
        Ok(StepState { counter, checksum })
    }

    /// The state file's text: `counter <n> checksum <16 hex>\n`.
    pub fn line(&self) -> String {
        format!("counter {} checksum {:016x}\n", self.counter, self.checksum)
    }

    /// The next state: counter + 1, checksum = FNV-1a 64 over
    /// `<old checksum hex> <new counter>\n` then every byte of `extra`,
    /// read in chunks (a huge `extra` needs no memory of its size).
    pub fn next_from(&self, mut extra: impl io::Read) -> Result<StepState, StepError> {
        let counter = self.counter.checked_add(1).ok_or(StepError::Overflow(self.counter))?;
        let mut h = fnv1a64(FNV_OFFSET, format!("{:016x} {counter}\n", self.checksum).as_bytes());
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match extra.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => h = fnv1a64(h, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(StepState { counter, checksum: h })
    }
}

/// FNV-1a 64 of `data`, continuing from `hash` (start with the offset
/// basis).
fn fnv1a64(mut hash: u64, data: &[u8]) -> u64 {
    for &b in data {
        hash ^= b as u64;
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// One `stepper` step on a state file's text and the `extra` input: the
/// next state file's text. Pure; both the sim's app and the tests (here
/// and in the daemon) compute expected sequences with it.
pub fn stepper_next(state: &str, extra: &[u8]) -> Result<String, StepError> {
    Ok(StepState::parse(state)?.next_from(extra)?.line())
}

/// Writes `data` to `dir/name` whole: a temporary file, then a rename.
fn write_output_whole(dir: &Path, name: &str, data: &[u8], lg: &mut AppLog<'_>) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("can't write output file '{name}': {e}");
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(&e))?;
    tmp.write_all(data).map_err(|e| fail(&e))?;
    tmp.persist(dir.join(name)).map_err(|e| fail(&e.error))?;
    lg.line(&format!("wrote {} bytes to '{name}'", data.len()));
    Ok(())
}

/// `stepper`: reads `state` (at most [`STATE_MAX_BYTES`]) and streams
/// `extra`; removes the input `state` from the work directory (input and
/// output share the name, and a heartbeat must leave no `state` behind);
/// writes the new `state` unless `--heartbeat`, and `DONE` (the new state
/// line) once the counter reaches `--end-at`.
pub(super) fn run_stepper(dir: &Path, step: &StepArgs, lg: &mut AppLog<'_>) -> Result<(), String> {
    use std::io::Read;
    let path = dir.join("state");
    let f = std::fs::File::open(&path).map_err(|e| format!("can't read input file 'state': {e}"))?;
    let mut raw = Vec::new();
    f.take(STATE_MAX_BYTES + 1).read_to_end(&mut raw).map_err(|e| format!("can't read input file 'state': {e}"))?;
    if raw.len() as u64 > STATE_MAX_BYTES {
        return Err(format!("input file 'state' is over {STATE_MAX_BYTES} bytes: not a stepper state"));
    }
    let text = String::from_utf8(raw).map_err(|_| "input file 'state' is not text: not a stepper state".to_string())?;
    let old = StepState::parse(&text).map_err(|e| format!("input file 'state': {e}"))?;
    lg.line(&format!("state in: counter {} checksum {:016x}", old.counter, old.checksum));
    let extra = std::fs::File::open(dir.join("extra")).map_err(|e| format!("can't read input file 'extra': {e}"))?;
    let new = old.next_from(io::BufReader::new(extra)).map_err(|e| format!("input file 'extra': {e}"))?;
    std::fs::remove_file(&path).map_err(|e| format!("can't remove input file 'state': {e}"))?;
    let line = new.line();
    if step.heartbeat {
        lg.line(&format!("heartbeat: counter {} (no state written)", new.counter));
    } else {
        write_output_whole(dir, "state", line.as_bytes(), lg)?;
    }
    if step.end_at.is_some_and(|k| new.counter >= k) {
        lg.line(&format!("counter {} reached the end: writing DONE", new.counter));
        write_output_whole(dir, "DONE", line.as_bytes(), lg)?;
    }
    Ok(())
}
