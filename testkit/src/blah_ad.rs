//! A `BLAH_JOB_SUBMIT` ad as HTCondor 23.9's gridmanager writes it.

use std::path::Path;

use gahp_protocol::classad::{ClassAd, Value};

/// The attributes every `batch boinc` submit carries, for a job whose
/// directory is `iwd`, then `attrs` (which may replace any of them).
pub fn blah_job_ad(iwd: &Path, job_dir: &str, attrs: &[(&str, Value)]) -> ClassAd {
    let mut ad = ClassAd::new();
    let s = |v: &str| Value::Str(v.into());
    ad.insert("In", s("/dev/null"));
    ad.insert("Cmd", s(&iwd.join("job.sh").display().to_string()));
    ad.insert("Iwd", s(&iwd.display().to_string()));
    ad.insert("gridtype", s("boinc"));
    ad.insert("Arguments", s(""));
    ad.insert("Environment", s(""));
    ad.insert("GridResource", s("batch boinc"));
    ad.insert("JobDirectory", s(job_dir));
    for (name, value) in attrs {
        ad.insert(*name, value.clone());
    }
    ad
}
