//! `BOINC_FETCH_OUTPUT`: a job's outputs, fetched and unpacked by the
//! project's OutputFetcher within their bounds.

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::gahp::{CommandResult, FetchOutput};

use super::{condor_job_of, Workers};
use crate::output_fetcher::Fetch;

pub(super) fn run(w: &Workers, fetch: FetchOutput, deadline: Instant) -> ResponseFuture<CommandResult> {
    let (fetcher, auth) = (w.fetcher.clone(), w.key.authenticator.clone());
    let job = fetch.job_name.clone();
    Box::pin(async move {
        let result = fetcher
            .send(Fetch { fetch, deadline })
            .await
            .unwrap_or_else(|_| CommandResult::Error("get_output_file() returned -1 internal error".into()));
        if let CommandResult::Error(reason) = &result {
            // Redacted here too: the line is logged before the tree
            // redacts the result.
            let reason = auth.redact_in(reason);
            tracing::warn!(condor_job = %condor_job_of(&job), boinc_job = %job, "fetching the job's outputs failed: {reason}");
        }
        result
    })
}
