//! `BLAH_PING`: pings the default project, if there is one.

use gahp_protocol::gahp::BlahResult;

use super::{forward, ready};
use crate::jobs::{BlahJobs, Work};
use crate::map;
use crate::project_jobs::Ping;

impl BlahJobs {
    /// Pings the default project. Config problems answer 0: a failed ping
    /// makes jobs wait silently, a held job says what is wrong.
    pub(crate) fn ping(&mut self) -> Work {
        let cfg = &self.config.blah;
        let (Some(url), Some(file)) = (&cfg.project_url, &cfg.authenticator_file) else {
            return ready(BlahResult::ok());
        };
        match self.project(&map::project_key(url, file)) {
            Ok(p) => forward(p.send(Ping), "BLAH_PING"),
            Err(e) => {
                tracing::warn!("BLAH_PING: {e}");
                ready(BlahResult::ok())
            }
        }
    }
}
