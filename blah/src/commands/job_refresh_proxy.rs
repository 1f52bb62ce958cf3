//! `BLAH_JOB_REFRESH_PROXY`: BOINC has no proxies to renew; success.

use gahp_protocol::gahp::BlahResult;

use super::ready;
use crate::jobs::Work;

pub(super) fn run() -> Work {
    ready(BlahResult::ok())
}
