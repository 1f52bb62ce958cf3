//! Work sequences (issue 10, `docs/sequences.md`): a long computation as a
//! chain of one-job BOINC batches that carries its state files from step
//! to step and relocates a step that stalls, errors or is lost.
//!
//! * `decide`: what to do next with a sequence (pure, unit-tested);
//! * `store`: the durable record (sequences, attempts, dead branches, state
//!   files by MD5 content name);
//! * `relocator`: the SequenceRelocator actor, one beside each project
//!   tree (the registry starts both), and
//!   its messages (the API the `BOINC_SEQUENCE_*` commands and the BLAH
//!   front end use);
//! * `commands`: the `BOINC_SEQUENCE_*` commands, a file each, carried out
//!   on a relocator.

#![forbid(unsafe_code)]

pub mod commands;
pub mod decide;
pub mod relocator;
pub mod store;
