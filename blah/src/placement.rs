//! Which pool placement a BLAH job asks for: what the broker needs of its
//! ad (its app, inputs, Requirements and Rank, its sequence), read here in
//! the front end so that the broker never reads a BLAH ad.

use gahp_protocol::classad::ClassAd;

use crate::job::BlahJob;
use crate::sequence_ad;
use gahp_broker::pools::PlaceJob;
use gahp_services::config::BlahConfig;

/// Whether the pool places this job: a pool is configured and the job
/// names no project of its own. (The session asks this of the ad before
/// the job is read; [`pool_placement`] reads the typed job.)
pub fn placed_by_pool(ad: &ClassAd, cfg: &BlahConfig) -> bool {
    let named = |n: &str| ad.get_str(n).is_some_and(|v| !v.trim().is_empty());
    cfg.pool.is_some() && !named("BoincProjectUrl") && !named("BoincAuthenticatorFile")
}

/// The placement a BLAH job asks for: `None` when no pool is configured
/// or the job names its own project.
pub fn pool_placement(job: &BlahJob, cfg: &BlahConfig) -> Option<PlaceJob> {
    if job.names_project {
        return None;
    }
    let pool = cfg.pool.clone()?;
    let iwd = job.iwd.clone().unwrap_or_default();
    let inputs = job
        .local_inputs()
        // A URL is fetched at submission: it is no file here to place by.
        .filter(|e| !e.ends_with('/'))
        .map(|e| iwd.join(e))
        .collect();
    Some(PlaceJob {
        pool,
        name: job.job_dir.clone(),
        app: job.app().map(|app| app.name.clone()).map_err(|e| e.hold_reason()),
        inputs,
        requirements: job.requirements.clone(),
        rank: job.rank.clone(),
        sequence: job.is_sequence().then(|| sequence_ad::sequence_name(job, &cfg.name_prefix)),
    })
}
