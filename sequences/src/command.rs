//! The `BOINC_SEQUENCE_*` commands carried out on a project's
//! SequenceRelocator: the command becomes a message, the outcome a result
//! line (errors rendered here, at the edge).

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{SequenceCommand, SequenceResult};
use gahp_protocol::gahp::{CommandResult, ReqId};

use crate::relocator::{
    AbortSequence, CreateSequence, EndSequence, ExtendSequence, FetchSequence, QuerySequence, SequenceError, SequenceRelocator,
};
use crate::store::SequenceDef;

/// `pool`: the pool that placed the sequence (for a create).
pub async fn execute(relocator: Addr<SequenceRelocator>, command: SequenceCommand, pool: Option<String>) -> SequenceResult {
    let code = command.code();
    let sent = match command {
        SequenceCommand::Create(c) => {
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
            relocator.send(CreateSequence { def, steps: c.steps, state_files }).await.map(|r| r.map(|()| SequenceResult::Ok))
        }
        SequenceCommand::Extend { name, steps } => {
            relocator.send(ExtendSequence { name, steps }).await.map(|r| r.map(|()| SequenceResult::Ok))
        }
        SequenceCommand::End { name } => relocator.send(EndSequence { name }).await.map(|r| r.map(|()| SequenceResult::Ok)),
        SequenceCommand::Abort { name } => relocator.send(AbortSequence { name }).await.map(|r| r.map(|()| SequenceResult::Ok)),
        SequenceCommand::Query { name } => relocator.send(QuerySequence { name }).await.map(|r| r.map(SequenceResult::Query)),
        SequenceCommand::Fetch(f) => relocator
            .send(FetchSequence { name: f.name, step: f.step, dir: f.dir })
            .await
            .map(|r| r.map(|(step, files)| SequenceResult::Fetched { step, files })),
    };
    match sent {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => SequenceResult::Error(render(code, &e)),
        Err(_) => SequenceResult::Error(format!("{code} failed: internal error (the sequence worker stopped)")),
    }
}

/// The result as the result queue keeps it: the line's arguments after the
/// request id.
pub fn encoded(reqid: ReqId, result: &SequenceResult) -> CommandResult {
    let line = result.encode(reqid);
    let skip = reqid.to_string().len();
    CommandResult::Encoded(bytes::Bytes::copy_from_slice(line.get(skip..).unwrap_or_default()))
}

fn render(code: &str, e: &SequenceError) -> String {
    format!("{code} failed: {e}")
}
