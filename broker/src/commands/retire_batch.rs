//! `BOINC_RETIRE_BATCH` on a pool: on the project its batch's route names.

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use super::unknown;
use crate::pools::{Broker, Route};

impl Broker {
    pub(crate) async fn retire_batch(&self, batch: String) -> CommandResult {
        match self.batch_route(&batch).await {
            Ok(Route::Project(p)) => self.on(p, AsyncCommand::RetireBatch { batch }).await,
            Ok(Route::Unknown) => unknown("retire_batch() returned -1", "batch", &batch),
            Err(e) => CommandResult::Error(e),
        }
    }
}
