//! Two-sided matchmaking of one batch against the pool's project ads
//! (pure): both Requirements true; the highest job Rank first, ties broken
//! by the project's Rank of the job, then by the order of the pool file.
//!
//! `boinc_data_overlap(ad)` and the external rank functions are not run
//! here: their values are gathered beforehand (cached, see
//! `data_overlap.rs` and `rank_functions.rs`) and looked up by project.

use std::collections::HashMap;

use gahp_protocol::classad::eval::{ranks, requirements_met};
use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::{Env, EvalAd, Functions, Val};

/// The built-in data-aware rank function.
pub const DATA_OVERLAP: &str = "boinc_data_overlap";

/// One input file of a batch, by content.
#[derive(Debug, Clone, PartialEq)]
pub struct InputData {
    pub phys_name: String,
    pub size: u64,
    pub md5: String,
}

/// What a batch asks for: the job side of the match.
pub struct JobSide<'a> {
    pub batch_name: &'a str,
    pub app: &'a str,
    pub job_count: usize,
    /// Distinct input files (by content).
    pub inputs: &'a [InputData],
    pub requirements: Expr,
    pub rank: Expr,
}

pub fn job_ad(job: &JobSide<'_>) -> EvalAd {
    let mut ad = EvalAd::new();
    ad.insert("MyType", Expr::Str("Job".into()));
    ad.insert("BatchName", Expr::Str(job.batch_name.into()));
    ad.insert("App", Expr::Str(job.app.into()));
    ad.insert("JobCount", Expr::Int(job.job_count as i64));
    ad.insert(
        "InputFiles",
        Expr::List(
            job.inputs
                .iter()
                .map(|f| {
                    Expr::Record(vec![
                        ("Name".into(), Expr::Str(f.phys_name.clone())),
                        ("Size".into(), Expr::Int(f.size as i64)),
                        ("Md5".into(), Expr::Str(f.md5.clone())),
                    ])
                })
                .collect(),
        ),
    );
    ad.insert("InputBytes", Expr::Int(job.inputs.iter().map(|f| f.size as i64).sum()));
    ad.insert("Requirements", job.requirements.clone());
    ad.insert("Rank", job.rank.clone());
    ad
}

/// A project as last seen by the ad refresher.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectStatus {
    /// None until the first refresh.
    pub up: Option<bool>,
    pub apps: Vec<String>,
    pub jobs_in_progress: i64,
    pub jobs_unsent: i64,
    pub recent_error_rate: Option<f64>,
    pub recent_turnaround: Option<f64>,
}

/// The static half of a project ad (from the pool file).
pub struct ProjectSide<'a> {
    pub name: &'a str,
    pub url: &'a str,
    pub attributes: &'a [(String, Expr)],
    pub requirements: &'a Expr,
    pub rank: &'a Expr,
}

pub fn project_ad(p: &ProjectSide<'_>, s: &ProjectStatus) -> EvalAd {
    let mut ad = EvalAd::new();
    // Static attributes first: the measured ones below win on a clash.
    for (name, e) in p.attributes {
        ad.insert(name, e.clone());
    }
    ad.insert("MyType", Expr::Str("Project".into()));
    ad.insert("Name", Expr::Str(p.name.into()));
    ad.insert("Url", Expr::Str(p.url.into()));
    ad.insert("Up", s.up.map_or(Expr::Undefined, Expr::Bool));
    ad.insert("Apps", Expr::List(s.apps.iter().map(|a| Expr::Str(a.clone())).collect()));
    ad.insert("JobsInProgress", Expr::Int(s.jobs_in_progress));
    ad.insert("JobsUnsent", Expr::Int(s.jobs_unsent));
    ad.insert("RecentErrorRate", s.recent_error_rate.map_or(Expr::Undefined, Expr::Real));
    ad.insert("RecentTurnaround", s.recent_turnaround.map_or(Expr::Undefined, Expr::Real));
    ad.insert("Requirements", p.requirements.clone());
    ad.insert("Rank", p.rank.clone());
    ad
}

/// Function names called by any Requirements or Rank of the match.
pub fn functions_called(job: &EvalAd, projects: &[EvalAd]) -> Vec<String> {
    let mut names = Vec::new();
    for ad in std::iter::once(job).chain(projects) {
        for (_, e) in ad.iter() {
            e.calls(&mut names);
        }
    }
    let mut out: Vec<String> = names.into_iter().map(|n| n.to_ascii_lowercase()).collect();
    out.sort();
    out.dedup();
    out
}

/// Values gathered before matching, by lower-case function name and
/// project name.
#[derive(Default)]
pub struct Gathered {
    /// The pool's external functions, lower case.
    pub defined: Vec<String>,
    pub values: HashMap<(String, String), f64>,
}

impl Functions for Gathered {
    /// `f(...)`: the value of `f` for the project of the match, whichever
    /// side calls it; `undefined` when it could not be had.
    fn call(&self, name: &str, args: &[Val], env: &Env<'_>) -> Option<Val> {
        let name = name.to_ascii_lowercase();
        let project_side = (0..2).find(|&s| env.attr(s, "MyType") == Val::Str("Project".into()))?;
        let project = match (name.as_str(), args) {
            // The overlap of the ad it is given (normally TARGET).
            (DATA_OVERLAP, [Val::Ad(side)]) => env.attr(*side, "Name"),
            (DATA_OVERLAP, _) => return Some(Val::Error),
            _ => env.attr(project_side, "Name"),
        };
        let Val::Str(project) = project else {
            return Some(Val::Undefined);
        };
        if name != DATA_OVERLAP && !self.defined.contains(&name) {
            return None;
        }
        Some(self.values.get(&(name, project)).map_or(Val::Undefined, |v| Val::Real(*v)))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index into the project list.
    pub project: usize,
    pub job_rank: f64,
    pub project_rank: f64,
}

/// The projects that match, best first.
pub fn rank_projects(job: &EvalAd, projects: &[EvalAd], functions: &dyn Functions) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = projects
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let env = Env::new(job, p, functions);
            if !requirements_met(&env) {
                return None;
            }
            let (job_rank, project_rank) = ranks(&env);
            Some(Candidate { project: i, job_rank, project_rank })
        })
        .collect();
    out.sort_by(|a, b| b.job_rank.total_cmp(&a.job_rank).then(b.project_rank.total_cmp(&a.project_rank)).then(a.project.cmp(&b.project)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(name: &str, apps: &[&str], up: bool, requirements: &str, rank: &str) -> EvalAd {
        let (req, rank) = (Expr::parse(requirements).unwrap(), Expr::parse(rank).unwrap());
        let side = ProjectSide { name, url: "http://x/", attributes: &[], requirements: &req, rank: &rank };
        let status = ProjectStatus { up: Some(up), apps: apps.iter().map(|a| a.to_string()).collect(), ..Default::default() };
        project_ad(&side, &status)
    }

    fn job(requirements: &str, rank: &str) -> EvalAd {
        let inputs = [InputData { phys_name: "a.txt".into(), size: 10, md5: "a".into() }];
        job_ad(&JobSide {
            batch_name: "b",
            app: "uppercase",
            job_count: 3,
            inputs: &inputs,
            requirements: Expr::parse(requirements).unwrap(),
            rank: Expr::parse(rank).unwrap(),
        })
    }

    fn overlaps(v: &[(&str, f64)]) -> Gathered {
        Gathered { defined: vec![], values: v.iter().map(|(p, x)| ((DATA_OVERLAP.to_string(), p.to_string()), *x)).collect() }
    }

    #[test]
    fn most_data_wins_and_requirements_exclude() {
        let projects = vec![
            project("a", &["uppercase"], true, "true", "0"),
            project("b", &["uppercase"], true, "true", "0"),
            project("c", &["wordcount"], true, "true", "0"),
            project("d", &["uppercase"], false, "true", "0"),
        ];
        let j = job(crate::pool::DEFAULT_REQUIREMENTS, crate::pool::DEFAULT_RANK);
        let got = rank_projects(&j, &projects, &overlaps(&[("a", 0.2), ("b", 0.7), ("c", 1.0), ("d", 1.0)]));
        assert_eq!(got.iter().map(|c| c.project).collect::<Vec<_>>(), vec![1, 0]);
        assert_eq!(got[0].job_rank, 0.7);
    }

    #[test]
    fn ties_go_to_the_project_rank_then_the_pool_order() {
        let projects = vec![
            project("a", &["uppercase"], true, "true", "1"),
            project("b", &["uppercase"], true, "other.JobCount > 2", "other.JobCount"),
            project("c", &["uppercase"], true, "other.JobCount > 5", "100"),
            project("d", &["uppercase"], true, "true", "1"),
        ];
        let got = rank_projects(&job("true", "1"), &projects, &Gathered::default());
        assert_eq!(got.iter().map(|c| c.project).collect::<Vec<_>>(), vec![1, 0, 3]);
    }

    #[test]
    fn an_unknown_overlap_is_undefined_and_ranks_as_zero() {
        let projects = vec![project("a", &["uppercase"], true, "true", "0"), project("b", &["uppercase"], true, "true", "0")];
        let got = rank_projects(&job("true", "boinc_data_overlap(TARGET)"), &projects, &overlaps(&[("b", 0.1)]));
        assert_eq!(got.iter().map(|c| (c.project, c.job_rank)).collect::<Vec<_>>(), vec![(1, 0.1), (0, 0.0)]);
        let j = job("isUndefined(boinc_data_overlap(TARGET))", "0");
        assert_eq!(rank_projects(&j, &projects, &overlaps(&[("b", 0.1)])).len(), 1);
    }

    #[test]
    fn external_functions_are_looked_up_per_project() {
        let projects = vec![project("a", &["uppercase"], true, "true", "0"), project("b", &["uppercase"], true, "true", "site_rank()")];
        let g = Gathered {
            defined: vec!["site_rank".into()],
            values: [(("site_rank".to_string(), "a".to_string()), 5.0), (("site_rank".to_string(), "b".to_string()), 9.0)]
                .into_iter()
                .collect(),
        };
        let got = rank_projects(&job("true", "Site_Rank()"), &projects, &g);
        assert_eq!(got.iter().map(|c| (c.project, c.job_rank, c.project_rank)).collect::<Vec<_>>(), vec![(1, 9.0, 9.0), (0, 5.0, 0.0)]);
        // A function nobody defined is an error, which fails Requirements.
        assert!(rank_projects(&job("no_such() > 0", "0"), &projects, &g).is_empty());
        assert_eq!(functions_called(&job("true", "Site_Rank()"), &projects), vec!["site_rank"]);
    }
}
