//! `BOINC_FETCH_OUTPUT` on a pool: on the project its job's route names.

use gahp_protocol::gahp::{AsyncCommand, CommandResult, FetchOutput};

use super::unknown;
use crate::pools::{Broker, Route};

impl Broker {
    pub(crate) async fn fetch_output(&self, fetch: FetchOutput) -> CommandResult {
        match self.job_route(&fetch.job_name).await {
            Ok(Route::Project(p)) => self.on(p, AsyncCommand::FetchOutput(fetch)).await,
            Ok(Route::Unknown) => unknown("get_output_file() returned -1", "job", &fetch.job_name),
            Err(e) => CommandResult::Error(e),
        }
    }
}
