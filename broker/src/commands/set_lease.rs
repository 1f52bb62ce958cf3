//! `BOINC_SET_LEASE` on a pool: on the project its batch's route names.

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use super::unknown;
use crate::pools::{Broker, Route};

impl Broker {
    pub(crate) async fn set_lease(&self, batch: String, lease_time: f64) -> CommandResult {
        match self.batch_route(&batch).await {
            Ok(Route::Project(p)) => self.on(p, AsyncCommand::SetLease { batch, lease_time }).await,
            Ok(Route::Unknown) => unknown("set_lease() returned -1", "batch", &batch),
            Err(e) => CommandResult::Error(e),
        }
    }
}
