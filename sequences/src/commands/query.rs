//! `BOINC_SEQUENCE_QUERY`: where the sequence is, and its dead branches.

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::SequenceResult;

use super::Outcome;
use crate::relocator::{QuerySequence, SequenceRelocator};

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, name: String) -> Outcome {
    relocator.send(QuerySequence { name }).await.map(|r| r.map(SequenceResult::Query))
}
