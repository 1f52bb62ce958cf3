//! The `BOINC_SEQUENCE_*` commands, a file each, carried out on a
//! project's SequenceRelocator: the command becomes the relocator's
//! message, the outcome its result (errors rendered here, at the edge).
//! The one dispatch (the session's) and a pool's sequences (the broker's)
//! both run them through [`run`].

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{SequenceCommand, SequenceResult};

use crate::relocator::{SequenceError, SequenceRelocator};

mod abort;
mod create;
mod end;
mod extend;
mod fetch;
mod query;

/// What the relocator answered, or that it stopped first.
type Outcome = Result<Result<SequenceResult, SequenceError>, MailboxError>;

/// `pool`: the pool that placed the sequence (for a create).
pub async fn run(relocator: Addr<SequenceRelocator>, command: SequenceCommand, pool: Option<String>) -> SequenceResult {
    let code = command.code();
    let outcome = match command {
        SequenceCommand::Create(c) => create::run(&relocator, c, pool).await,
        SequenceCommand::Extend { name, steps } => extend::run(&relocator, name, steps).await,
        SequenceCommand::End { name } => end::run(&relocator, name).await,
        SequenceCommand::Abort { name } => abort::run(&relocator, name).await,
        SequenceCommand::Query { name } => query::run(&relocator, name).await,
        SequenceCommand::Fetch(f) => fetch::run(&relocator, f).await,
    };
    match outcome {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => SequenceResult::Error(format!("{code} failed: {e}")),
        Err(_) => SequenceResult::Error(format!("{code} failed: internal error (the sequence worker stopped)")),
    }
}
