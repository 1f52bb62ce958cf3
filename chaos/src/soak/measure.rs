//! What a soak run prints and how it is judged: the sample lines, and the
//! verdict per measure (the second half's largest value against the
//! first's, and VmRSS's slope against the jobs done).

use super::*;

pub(super) fn print_header() {
    println!(
        "{:>6} {:>6} {:>8} {:>8} {:>4} {:>4} {:>9} {:>9} {:>6} {:>4} {:>9} {:>8} {:>7} {:>6}",
        "secs",
        "simday",
        "rss_kib",
        "hwm_kib",
        "thr",
        "fds",
        "db_bytes",
        "wal_bytes",
        "rows",
        "logs",
        "log_bytes",
        "requests",
        "jobs",
        "blah"
    );
}

pub(super) fn print_sample(s: &Sample) {
    println!(
        "{:>6.0} {:>6.2} {:>8} {:>8} {:>4} {:>4} {:>9} {:>9} {:>6} {:>4} {:>9} {:>8} {:>7} {:>6}",
        s.secs,
        s.sim_days,
        s.rss_kib,
        s.hwm_kib,
        s.threads,
        s.fds,
        s.db_bytes,
        s.wal_bytes,
        s.rows.values().sum::<u64>(),
        s.log_files,
        s.log_bytes,
        s.requests,
        s.jobs_done,
        s.blah_done
    );
    let _ = std::io::stdout().flush();
}

pub struct Verdict {
    pub flat: bool,
    pub lines: Vec<String>,
}

/// Growth of the second half of the run over the first: for each measure
/// the largest value of each half (the first sample, taken before any
/// work, is left out), and how much it rose per 1,000 jobs over the second
/// half. A leak per job or per connection rises with the work done; a
/// bounded measure levels off once its caches and pools are warm.
pub fn verdict(samples: &[Sample]) -> Verdict {
    let mut lines = Vec::new();
    let mut flat = true;
    let s: Vec<&Sample> = samples.iter().skip(1).collect();
    if s.len() < 4 {
        return Verdict { flat: false, lines: vec!["too few samples for a verdict (at least 5 are needed)".into()] };
    }
    let mid = s.len() / 2;
    let (a, b) = s.split_at(mid);
    let jobs = |x: &[&Sample]| x.last().map_or(0, |l| l.jobs_done) as f64;
    let second_jobs = (jobs(b) - jobs(a)).max(1.0);
    let mut measure = |name: &str, get: &dyn Fn(&Sample) -> u64, slack_abs: f64, slack_rel: f64| {
        let max_a = a.iter().map(|x| get(x)).max().unwrap_or(0) as f64;
        let max_b = b.iter().map(|x| get(x)).max().unwrap_or(0) as f64;
        let last_a = a.last().map_or(0, |x| get(x)) as f64;
        let last_b = b.last().map_or(0, |x| get(x)) as f64;
        let per_k = (last_b - last_a) / second_jobs * 1000.0;
        let grew = max_b > max_a * (1.0 + slack_rel) + slack_abs;
        flat &= !grew;
        lines.push(format!(
            "{:<18} first half max {:>10.0}  second half max {:>10.0}  change per 1000 jobs (2nd half) {:>+9.1}  {}",
            name,
            max_a,
            max_b,
            per_k,
            if grew { "GROWS" } else { "flat" }
        ));
        if grew && name == "rows blah_jobs" {
            lines.push("  (a finished BLAH job's record must go one simulated day after it ended: forget_finished_jobs_after_secs)".into());
        }
    };
    measure("rss_kib", &|x| x.rss_kib, 4096.0, 0.05);
    measure("fds", &|x| x.fds, 4.0, 0.0);
    measure("threads", &|x| x.threads, 2.0, 0.0);
    measure("db+wal bytes", &|x| x.db_bytes + x.wal_bytes, 256.0 * 1024.0, 0.10);
    measure("log files", &|x| x.log_files, 0.0, 0.0);
    measure("log bytes", &|x| x.log_bytes, 0.0, 0.5);
    let tables: Vec<String> = samples.last().map(|l| l.rows.keys().cloned().collect()).unwrap_or_default();
    for t in tables {
        measure(&format!("rows {t}"), &|x| x.rows.get(&t).copied().unwrap_or(0), 16.0, 0.10);
    }
    let rss = rss_slope(b);
    lines.push(rss.line());
    flat &= !rss.rises();
    let max_logs = samples.iter().map(|x| x.log_files).max().unwrap_or(0);
    if max_logs as usize > MAX_LOG_FILES {
        flat = false;
        lines.push(format!("log files: {max_logs} at once, more than max_log_files = {MAX_LOG_FILES}"));
    }
    let span = samples.last().map_or(0.0, |l| l.sim_days);
    lines.push(format!("simulated time covered: {span:.2} days"));
    Verdict { flat, lines }
}

/// Resident memory may rise by at most this much per job done in the
/// second half of a run: a leak of a few dozen bytes a job (a name kept
/// per job) is lost in the noise of the maxima, not in a slope.
const RSS_BYTES_PER_JOB_MAX: f64 = 16.0;

/// How resident memory rose with the jobs done over the second half.
#[derive(Debug)]
pub struct RssSlope {
    /// Theil–Sen: the median of the slopes between every two samples,
    /// which a step of the allocator (an arena, a table doubled) moves
    /// little, where it tilts a least-squares line.
    pub theil_sen: f64,
    pub least_squares: f64,
    /// Intervals in which it rose, of those with jobs done.
    pub rose: usize,
    pub intervals: usize,
}

impl RssSlope {
    /// A steady rise: the robust slope over the limit, and memory rising
    /// in more than two intervals of three (pages coming and going, or one
    /// step of the allocator in an otherwise level run, are no leak).
    pub fn rises(&self) -> bool {
        self.theil_sen > RSS_BYTES_PER_JOB_MAX && 3 * self.rose > 2 * self.intervals
    }

    fn line(&self) -> String {
        format!(
            "{:<18} {:>+7.1} bytes per job over the 2nd half (Theil-Sen; least squares {:+.1}), rose in {} of {} intervals  {}",
            "rss_kib slope",
            self.theil_sen,
            self.least_squares,
            self.rose,
            self.intervals,
            if self.rises() { format!("RISES (more than {RSS_BYTES_PER_JOB_MAX} bytes a job)") } else { "flat".into() }
        )
    }
}

/// The slope of resident memory against jobs done, in bytes per job.
pub fn rss_slope(samples: &[&Sample]) -> RssSlope {
    let pts: Vec<(f64, f64)> = samples.iter().map(|x| (x.jobs_done as f64, x.rss_kib as f64 * 1024.0)).collect();
    let mut pairs = Vec::new();
    for (i, a) in pts.iter().enumerate() {
        for b in &pts[i + 1..] {
            if b.0 > a.0 {
                pairs.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    pairs.sort_by(f64::total_cmp);
    let theil_sen = match pairs.len() {
        0 => 0.0,
        n if n % 2 == 1 => pairs[n / 2],
        n => (pairs[n / 2 - 1] + pairs[n / 2]) / 2.0,
    };
    let n = pts.len().max(1) as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let least_squares = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let steps: Vec<f64> = pts.windows(2).filter(|w| w[1].0 > w[0].0).map(|w| w[1].1 - w[0].1).collect();
    RssSlope { theil_sen, least_squares, rose: steps.iter().filter(|d| **d > 0.0).count(), intervals: steps.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(rss: impl Fn(u64) -> u64, rows: impl Fn(u64) -> u64) -> Vec<Sample> {
        (0..12u64)
            .map(|i| Sample {
                secs: i as f64 * 30.0,
                rss_kib: rss(i),
                fds: 20,
                threads: 9,
                db_bytes: 500_000,
                log_files: 4,
                log_bytes: 900_000,
                jobs_done: i * 500,
                rows: [("md5_cache".to_string(), rows(i))].into(),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn a_level_run_is_flat() {
        // Memory going up and down by 100 KiB (a sawtooth that rose in 4
        // of the 5 intervals of a 2nd half would be a rise by the slope).
        let v = verdict(&samples(|i| 25_000 + (i % 2) * 100, |i| 400 + (i % 2) * 300));
        assert!(v.flat, "{:#?}", v.lines);
    }

    #[test]
    fn growth_with_the_work_is_caught() {
        // 100 KiB more per sample: a leak per job.
        let v = verdict(&samples(|i| 25_000 + i * 100 * 1024 / 10, |_| 400));
        assert!(!v.flat);
        assert!(v.lines.iter().any(|l| l.starts_with("rss_kib") && l.ends_with("GROWS")), "{:#?}", v.lines);
        let v = verdict(&samples(|_| 25_000, |i| 400 + i * 500));
        assert!(v.lines.iter().any(|l| l.starts_with("rows md5_cache") && l.ends_with("GROWS")), "{:#?}", v.lines);
    }

    /// (jobs done, VmRSS KiB) of the soak recorded in BENCHMARKS.md before
    /// the swept-directory fix: flat by the maxima, about 70 bytes a job.
    const RECORDED_BEFORE_FIX: [(u64, u64); 43] = [
        (0, 12648),
        (364, 26424),
        (696, 26540),
        (951, 26596),
        (1278, 26632),
        (1682, 26640),
        (2080, 26676),
        (2439, 26688),
        (2729, 28844),
        (3055, 29048),
        (3317, 29084),
        (3689, 29104),
        (4148, 29128),
        (4479, 29136),
        (4848, 29148),
        (5240, 29232),
        (5465, 29232),
        (5898, 29260),
        (6179, 29288),
        (6519, 29296),
        (6796, 29320),
        (7098, 29336),
        (7391, 29352),
        (7684, 29356),
        (7951, 29376),
        (8309, 29408),
        (8563, 29416),
        (8908, 29432),
        (9239, 29448),
        (9500, 29456),
        (9862, 29464),
        (10233, 29616),
        (10583, 29616),
        (10987, 29620),
        (11358, 29632),
        (11682, 29644),
        (12048, 29724),
        (12380, 29728),
        (12779, 29748),
        (13096, 29748),
        (13480, 29784),
        (13907, 29808),
        (14375, 29824),
    ];

    fn recorded(rss: impl Fn(usize, u64) -> u64) -> Vec<Sample> {
        RECORDED_BEFORE_FIX
            .iter()
            .enumerate()
            .map(|(i, &(jobs, kib))| Sample {
                secs: i as f64 * 30.0,
                rss_kib: rss(i, kib),
                fds: 20,
                threads: 12,
                db_bytes: 500_000,
                log_files: 4,
                log_bytes: 700_000,
                jobs_done: jobs,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn the_recorded_rise_of_70_bytes_a_job_fails_the_verdict() {
        let v = verdict(&recorded(|_, kib| kib));
        assert!(!v.flat, "{:#?}", v.lines);
        let line = v.lines.iter().find(|l| l.starts_with("rss_kib slope")).unwrap();
        assert!(line.contains("RISES"), "{line}");
        // The maxima alone said flat.
        assert!(v.lines.iter().any(|l| l.starts_with("rss_kib ") && l.ends_with("flat")), "{:#?}", v.lines);
        let s = recorded(|_, kib| kib);
        let second: Vec<&Sample> = s[1..].iter().skip(21).collect();
        let slope = rss_slope(&second);
        assert!((60.0..90.0).contains(&slope.theil_sen), "{slope:?}");
    }

    #[test]
    fn level_memory_with_noise_and_one_allocator_step_passes() {
        // The same run levelled at its 2nd-half start: pages coming and
        // going (8 KiB) and one step of 2 MiB in the middle of the 2nd
        // half, as an arena makes.
        let v = verdict(&recorded(|i, kib| match i {
            0..=21 => kib,
            32.. => 29_336 + 2048 + (i as u64 % 2) * 8,
            _ => 29_336 + (i as u64 % 2) * 8,
        }));
        let line = v.lines.iter().find(|l| l.starts_with("rss_kib slope")).unwrap();
        assert!(!line.contains("RISES"), "{line}");
        assert!(v.flat, "{:#?}", v.lines);
    }

    #[test]
    fn too_few_samples_give_no_verdict() {
        assert!(!verdict(&samples(|_| 1, |_| 1)[..3]).flat);
    }
}
