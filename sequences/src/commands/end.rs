//! `BOINC_SEQUENCE_END`: no step after the current one.

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::SequenceResult;

use super::Outcome;
use crate::relocator::{EndSequence, SequenceRelocator};

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, name: String) -> Outcome {
    relocator.send(EndSequence { name }).await.map(|r| r.map(|()| SequenceResult::Ok))
}
