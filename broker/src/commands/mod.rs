//! The `BOINC_*` commands on a pool, a file each: a new batch is placed
//! by matchmaking (`submit`); every later command goes where the durable
//! routes say, on that project's tree (`Run`, as on one project).

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::pools::Broker;

mod abort_jobs;
mod fetch_output;
mod ping;
mod query_batches;
mod retire_batch;
mod set_lease;
mod submit;

impl Broker {
    pub(crate) async fn run(self, command: AsyncCommand) -> CommandResult {
        let code = command.code();
        let result = match command {
            AsyncCommand::Ping => self.ping().await,
            AsyncCommand::Submit(batch) => self.submit(batch).await,
            AsyncCommand::QueryBatches { min_mod_time, batches } => self.query(min_mod_time, batches).await,
            AsyncCommand::FetchOutput(fetch) => self.fetch_output(fetch).await,
            AsyncCommand::AbortJobs { jobs } => self.abort(jobs).await,
            AsyncCommand::RetireBatch { batch } => self.retire_batch(batch).await,
            AsyncCommand::SetLease { batch, lease_time } => self.set_lease(batch, lease_time).await,
        };
        if let CommandResult::Error(e) = &result {
            tracing::info!(pool = %self.pool.id, "{code} failed: {e}");
        }
        result
    }
}

fn unknown(operation: &str, what: &str, name: &str) -> CommandResult {
    CommandResult::Error(format!("{operation} no such {what} in the pool: {name}"))
}
