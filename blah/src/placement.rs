//! Which pool placement a BLAH job asks for: what the broker needs of its
//! ad (its app, inputs, Requirements and Rank, its sequence), read here in
//! the front end so that the broker never reads a BLAH ad.

use std::path::PathBuf;

use gahp_protocol::classad::{ClassAd, Value};

use crate::{map, sequence_ad};
use gahp_broker::pools::PlaceJob;
use gahp_services::config::BlahConfig;

/// Whether the pool places this job: a pool is configured and the job
/// names no project of its own.
pub fn placed_by_pool(ad: &ClassAd, cfg: &BlahConfig) -> bool {
    let named = |n: &str| ad.get_str(n).is_some_and(|v| !v.trim().is_empty());
    cfg.pool.is_some() && !named("BoincProjectUrl") && !named("BoincAuthenticatorFile")
}

/// The placement a BLAH job asks for: `None` when no pool is configured
/// or the job names its own project.
pub fn pool_placement(ad: &ClassAd, cfg: &BlahConfig) -> Option<PlaceJob> {
    if !placed_by_pool(ad, cfg) {
        return None;
    }
    let pool = cfg.pool.clone()?;
    let iwd = PathBuf::from(ad.get_str("Iwd").unwrap_or(""));
    let inputs = ad
        .get_str("TransferInput")
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        // A URL is fetched at submission: it is no file here to place by.
        .filter(|e| !e.is_empty() && !e.ends_with('/') && !crate::url_inputs::is_url(e))
        .map(|e| iwd.join(e))
        .collect();
    let expr_text = |name: &str| match ad.get(name)? {
        Value::Str(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Str(_) => None,
        other => Some(other.to_string()),
    };
    Some(PlaceJob {
        pool,
        name: ad.get_str("JobDirectory").unwrap_or("blah job").to_string(),
        app: map::choose_app(ad, cfg).map(|(app, _)| app).map_err(|e| e.hold_reason()),
        inputs,
        requirements: expr_text("BoincRequirements"),
        rank: expr_text("BoincRank"),
        sequence: sequence_ad::sequence_name(ad, &cfg.name_prefix).ok().filter(|_| sequence_ad::is_sequence(ad)),
    })
}
