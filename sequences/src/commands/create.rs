//! `BOINC_SEQUENCE_CREATE`: the sequence's definition and its first state
//! files, kept by the relocator, which submits step 1.

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{CreateSequence as Create, SequenceResult};

use super::Outcome;
use crate::relocator::{CreateSequence, SequenceRelocator};
use crate::store::SequenceDef;

pub(super) async fn run(relocator: &Addr<SequenceRelocator>, c: Create, pool: Option<String>) -> Outcome {
    let def = SequenceDef {
        name: c.name,
        app_name: c.app_name,
        max_step_time: c.max_step_time,
        max_attempts: c.max_attempts,
        end_marker: c.end_marker,
        state_names: c.state_files.iter().map(|f| f.dst_name.clone()).collect(),
        args: c.args,
        inputs: c.inputs.into_iter().map(|f| (f.src, f.dst_name)).collect(),
        pool,
    };
    let state_files = c.state_files.into_iter().map(|f| (f.src, f.dst_name)).collect();
    let sent = relocator.send(CreateSequence { def, steps: c.steps, state_files }).await;
    sent.map(|r| r.map(|()| SequenceResult::Ok))
}
