//! The broker's placement benchmark (BENCHMARKS.md, docs/broker-bench.svg).
//! Prints numbers; asserts nothing about time. Run:
//!
//!     cargo bench --bench broker_bench                               # print
//!     cargo bench --bench broker_bench -- --svg docs/broker-bench.svg  # and draw
//!
//! 1. Placement: 1,000 batches over 5 projects, each batch with 5 input
//!    files drawn from 2,000 files of Zipf popularity (s = 1.1, sizes 1-100
//!    MB), placed by round-robin, by random choice, by the broker's default
//!    data-aware rank, and by data-aware rank with a load term. The
//!    placement decisions are made by the broker's own matchmaking code
//!    (ads, ClassAd evaluation, ranking); the projects are a model: a
//!    project holds every file uploaded to it, uploads to one project run
//!    one after the other at 50 MB/s, and it runs one batch at a time
//!    (batch time = jobs x 30 s / 10 hosts). Bytes uploaded and makespan.
//! 2. Matchmaking CPU per batch with warm caches: building the job ad and
//!    the 5 project ads, the overlap fractions from the cached per-file
//!    answers, evaluating both Requirements and Ranks, sorting.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use gahp_broker::matchmaker::{job_ad, project_ad, rank_projects, Gathered, InputData, JobSide, ProjectSide, ProjectStatus, DATA_OVERLAP};
use gahp_broker::pool::{DEFAULT_RANK, DEFAULT_REQUIREMENTS};
use gahp_protocol::classad::expr::Expr;

const PROJECTS: usize = 5;
const BATCHES: usize = 1000;
const FILES: usize = 2000;
const FILES_PER_BATCH: usize = 5;
const ZIPF_S: f64 = 1.1;
const UPLOAD_BYTES_PER_SEC: f64 = 50e6;
const JOB_SECS: f64 = 30.0;
const HOSTS: f64 = 10.0;

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Batch {
    files: Vec<usize>,
    jobs: u64,
}

fn workload() -> (Vec<u64>, Vec<Batch>) {
    let mut rng = Rng(42);
    let sizes: Vec<u64> = (0..FILES).map(|_| 1_000_000 + (rng.unit() * 99e6) as u64).collect();
    let weights: Vec<f64> = (1..=FILES).map(|k| 1.0 / (k as f64).powf(ZIPF_S)).collect();
    let total: f64 = weights.iter().sum();
    let cdf: Vec<f64> = weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w / total;
            Some(*acc)
        })
        .collect();
    let batches = (0..BATCHES)
        .map(|_| {
            let mut files = Vec::new();
            while files.len() < FILES_PER_BATCH {
                let u = rng.unit();
                let f = cdf.partition_point(|&c| c < u).min(FILES - 1);
                if !files.contains(&f) {
                    files.push(f);
                }
            }
            Batch { files, jobs: 10 + rng.next() % 91 }
        })
        .collect();
    (sizes, batches)
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    RoundRobin,
    Random,
    DataAware,
    DataAwareLoad,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round-robin",
            Strategy::Random => "random",
            Strategy::DataAware => "data-aware",
            Strategy::DataAwareLoad => "data-aware + load",
        }
    }
}

struct Outcome {
    bytes: u64,
    makespan: f64,
}

fn input_data(sizes: &[u64], b: &Batch) -> Vec<InputData> {
    b.files.iter().map(|&f| InputData { phys_name: format!("{f:032x}.dat"), size: sizes[f], md5: format!("{f:032x}") }).collect()
}

fn place_all(strategy: Strategy, sizes: &[u64], batches: &[Batch]) -> Outcome {
    let names: Vec<String> = (0..PROJECTS).map(|i| format!("p{i}")).collect();
    let mut held: Vec<HashSet<usize>> = vec![HashSet::new(); PROJECTS];
    let mut queued_jobs = [0i64; PROJECTS];
    let (mut upload_done, mut compute_done) = ([0.0f64; PROJECTS], [0.0f64; PROJECTS]);
    let mut rng = Rng(7);
    let requirements = Expr::parse(DEFAULT_REQUIREMENTS).unwrap();
    let rank = match strategy {
        Strategy::DataAwareLoad => Expr::parse("boinc_data_overlap(TARGET) - TARGET.JobsUnsent / 2000.0").unwrap(),
        _ => Expr::parse(DEFAULT_RANK).unwrap(),
    };
    let (p_req, p_rank) = (Expr::Bool(true), Expr::Int(0));
    let mut bytes = 0u64;
    for (i, b) in batches.iter().enumerate() {
        let inputs = input_data(sizes, b);
        let p = match strategy {
            Strategy::RoundRobin => i % PROJECTS,
            Strategy::Random => (rng.next() % PROJECTS as u64) as usize,
            Strategy::DataAware | Strategy::DataAwareLoad => {
                let ads: Vec<_> = (0..PROJECTS)
                    .map(|p| {
                        let status =
                            ProjectStatus { up: Some(true), apps: vec!["app".into()], jobs_unsent: queued_jobs[p], ..Default::default() };
                        project_ad(
                            &ProjectSide { name: &names[p], url: "http://x/", attributes: &[], requirements: &p_req, rank: &p_rank },
                            &status,
                        )
                    })
                    .collect();
                let job = job_ad(&JobSide {
                    batch_name: "b",
                    app: "app",
                    job_count: b.jobs as usize,
                    inputs: &inputs,
                    requirements: requirements.clone(),
                    rank: rank.clone(),
                });
                let total: u64 = inputs.iter().map(|f| f.size).sum();
                let mut g = Gathered::default();
                for p in 0..PROJECTS {
                    let have: u64 = b.files.iter().filter(|f| held[p].contains(f)).map(|&f| sizes[f]).sum();
                    g.values.insert((DATA_OVERLAP.into(), names[p].clone()), have as f64 / total as f64);
                }
                rank_projects(&job, &ads, &g)[0].project
            }
        };
        let missing: u64 = b.files.iter().filter(|f| !held[p].contains(f)).map(|&f| sizes[f]).sum();
        held[p].extend(b.files.iter().copied());
        bytes += missing;
        queued_jobs[p] += b.jobs as i64;
        upload_done[p] += missing as f64 / UPLOAD_BYTES_PER_SEC;
        compute_done[p] = upload_done[p].max(compute_done[p]) + b.jobs as f64 * JOB_SECS / HOSTS;
    }
    Outcome { bytes, makespan: compute_done.iter().cloned().fold(0.0, f64::max) }
}

/// CPU per matchmaking with warm caches (the overlap from cached per-file
/// answers), in microseconds: (mean, p99).
fn matchmaking_cpu(sizes: &[u64], batches: &[Batch]) -> (f64, f64) {
    let names: Vec<String> = (0..PROJECTS).map(|i| format!("p{i}")).collect();
    // The warm cache: per (project, file name) whether it is there.
    let mut cache: HashMap<(usize, String), bool> = HashMap::new();
    for (i, b) in batches.iter().enumerate() {
        for f in &b.files {
            cache.insert((i % PROJECTS, format!("{f:032x}.dat")), true);
        }
    }
    let requirements = Expr::parse(DEFAULT_REQUIREMENTS).unwrap();
    let rank = Expr::parse(DEFAULT_RANK).unwrap();
    let (p_req, p_rank) = (Expr::parse("other.JobCount < 100000").unwrap(), Expr::parse("other.InputBytes > 0").unwrap());
    let attributes = vec![("Site".to_string(), Expr::Str("x".into())), ("Cores".to_string(), Expr::Int(64))];
    let mut times = Vec::new();
    let mut sink = 0usize;
    for round in 0..3 {
        for b in batches {
            let started = Instant::now();
            let inputs = input_data(sizes, b);
            let statuses: Vec<ProjectStatus> = (0..PROJECTS)
                .map(|_| ProjectStatus { up: Some(true), apps: vec!["app".into(), "other".into()], ..Default::default() })
                .collect();
            let ads: Vec<_> = (0..PROJECTS)
                .map(|p| {
                    let side =
                        ProjectSide { name: &names[p], url: "http://x/", attributes: &attributes, requirements: &p_req, rank: &p_rank };
                    project_ad(&side, &statuses[p])
                })
                .collect();
            let job = job_ad(&JobSide {
                batch_name: "b",
                app: "app",
                job_count: b.jobs as usize,
                inputs: &inputs,
                requirements: requirements.clone(),
                rank: rank.clone(),
            });
            let total: u64 = inputs.iter().map(|f| f.size).sum();
            let mut g = Gathered::default();
            for (p, name) in names.iter().enumerate() {
                let have: u64 =
                    inputs.iter().filter(|f| cache.get(&(p, f.phys_name.clone())).copied().unwrap_or(false)).map(|f| f.size).sum();
                g.values.insert((DATA_OVERLAP.into(), name.clone()), have as f64 / total as f64);
            }
            sink += rank_projects(&job, &ads, &g).len();
            if round > 0 {
                times.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    assert!(sink > 0);
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    (mean, times[times.len() * 99 / 100])
}

/// A panel of the chart: its title, the value it shows, the unit.
type Panel = (&'static str, fn(&Outcome) -> f64, &'static str);

/// A two-panel bar chart of the outcomes.
fn svg(results: &[(Strategy, Outcome)], cpu: (f64, f64)) -> String {
    let (w, h) = (760.0, 360.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">Broker placement: {BATCHES} batches, {PROJECTS} projects, Zipf({ZIPF_S}) input files</text>\n",
        w / 2.0
    );
    let colors = ["#8c8c8c", "#c9a227", "#2b7bb9", "#3a9d5d"];
    let panels: [Panel; 2] = [("Bytes uploaded (GB)", |o| o.bytes as f64 / 1e9, "GB"), ("Makespan (hours)", |o| o.makespan / 3600.0, "h")];
    for (k, (title, value, unit)) in panels.iter().enumerate() {
        let (x0, y0, pw, ph) = (40.0 + k as f64 * 370.0, 60.0, 330.0, 230.0);
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{title}</text>\n",
            x0 + pw / 2.0,
            y0 - 12.0
        ));
        out.push_str(&format!("<line x1=\"{x0}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", y0 + ph, x0 + pw, y0 + ph));
        let max = results.iter().map(|(_, o)| value(o)).fold(0.0, f64::max).max(1e-9);
        let bw = pw / results.len() as f64;
        for (i, (s, o)) in results.iter().enumerate() {
            let v = value(o);
            let bh = v / max * (ph - 20.0);
            let x = x0 + i as f64 * bw + bw * 0.15;
            out.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{v:.1} {unit}</text>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>\n",
                y0 + ph - bh,
                bw * 0.7,
                colors[i % colors.len()],
                x + bw * 0.35,
                y0 + ph - bh - 4.0,
                x + bw * 0.35,
                y0 + ph + 16.0,
                s.name()
            ));
        }
    }
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">Matchmaking CPU per batch, warm caches: mean {:.1} µs, p99 {:.1} µs</text>\n</svg>\n",
        w / 2.0,
        h - 16.0,
        cpu.0,
        cpu.1
    ));
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let svg_path = args.iter().position(|a| a == "--svg").and_then(|i| args.get(i + 1)).cloned();
    let (sizes, batches) = workload();
    let offered: u64 = batches.iter().map(|b| b.files.iter().map(|&f| sizes[f]).sum::<u64>()).sum();
    println!("workload: {BATCHES} batches x {FILES_PER_BATCH} files from {FILES} (Zipf s={ZIPF_S}), {PROJECTS} projects");
    println!("  input bytes named by all batches: {:.1} GB", offered as f64 / 1e9);
    let mut results = Vec::new();
    for s in [Strategy::RoundRobin, Strategy::Random, Strategy::DataAware, Strategy::DataAwareLoad] {
        let o = place_all(s, &sizes, &batches);
        println!("  {:<18} uploaded {:>7.1} GB   makespan {:>6.2} h", s.name(), o.bytes as f64 / 1e9, o.makespan / 3600.0);
        results.push((s, o));
    }
    let cpu = matchmaking_cpu(&sizes, &batches);
    println!("matchmaking CPU per batch (warm caches, 5 projects): mean {:.1} us, p99 {:.1} us", cpu.0, cpu.1);
    if let Some(path) = svg_path {
        std::fs::write(&path, svg(&results, cpu)).expect("write the SVG");
        println!("wrote {path}");
    }
}
