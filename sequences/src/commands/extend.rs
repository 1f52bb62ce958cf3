//! `BOINC_SEQUENCE_EXTEND`: more steps after the last one planned.

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::SequenceResult;

use super::Outcome;
use crate::relocator::{ExtendSequence, SequenceRelocator};

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, name: String, steps: u32) -> Outcome {
    relocator.send(ExtendSequence { name, steps }).await.map(|r| r.map(|()| SequenceResult::Ok))
}
