//! `BOINC_SEQUENCE_FETCH`: a step's files written into a directory.

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{FetchSequence as Fetch, SequenceResult};

use super::Outcome;
use crate::relocator::{FetchSequence, SequenceRelocator};

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, f: Fetch) -> Outcome {
    let sent = relocator.send(FetchSequence { name: f.name, step: f.step, dir: f.dir }).await;
    sent.map(|r| r.map(|(step, files)| SequenceResult::Fetched { step, files }))
}
