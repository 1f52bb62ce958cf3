//! `BOINC_SEQUENCE_ABORT`: the sequence is aborted (`docs/sequences.md`).

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::SequenceResult;

use super::Outcome;
use crate::relocator::{AbortSequence, SequenceRelocator};

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, name: String) -> Outcome {
    relocator.send(AbortSequence { name }).await.map(|r| r.map(|()| SequenceResult::Ok))
}
