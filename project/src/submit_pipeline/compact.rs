//! A BOINC_SUBMIT's jobs kept compactly while the submit waits and runs.
//!
//! Parsed, a job of a 10,000-job submit is about 248 bytes (its name, its
//! arguments and input paths, each a `String` of its own). The jobs of a
//! batch are mostly named `<batch>_<k>` and share their argument and input
//! lists, so here a job is two indexes into the batch's distinct lists (8
//! bytes) and, when the names are `<batch>_<first + i>`, nothing more;
//! other names are kept in one buffer (the name and 4 bytes).

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use gahp_protocol::boinc::command_line::{self, ArgRefused};
use gahp_protocol::gahp::{InputFile, JobParams, SubmitBatch};

/// The names of a batch's jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNames {
    /// Job `i` is `<batch>_<first + i>`.
    Numbered { batch: String, first: u64, count: usize },
    /// The names one after another; job `i` ends at `ends[i]`.
    Listed { text: String, ends: Vec<u32> },
}

impl JobNames {
    /// The names of `names`, numbered if they are `<batch>_<first + i>`.
    pub fn of<'a>(batch: &str, names: impl Iterator<Item = &'a str> + Clone) -> JobNames {
        let count = names.clone().count();
        let numbered = |first: u64| {
            let mut expected = String::new();
            names.clone().enumerate().all(|(i, name)| {
                expected.clear();
                let Some(k) = first.checked_add(i as u64) else { return false };
                let _ = write!(expected, "{batch}_{k}");
                name == expected
            })
        };
        match names.clone().next().map(|n| number(n, batch)) {
            Some(Some(first)) if numbered(first) => JobNames::Numbered { batch: batch.to_string(), first, count },
            _ => {
                let mut text = String::new();
                let mut ends = Vec::with_capacity(count);
                for name in names {
                    text.push_str(name);
                    // A request line is at most 256 MiB long.
                    ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
                }
                JobNames::Listed { text, ends }
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            JobNames::Numbered { count, .. } => *count,
            JobNames::Listed { ends, .. } => ends.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends job `i`'s name to `out` (nothing for an `i` out of range).
    pub fn write(&self, i: usize, out: &mut String) {
        match self {
            JobNames::Numbered { batch, first, count } if i < *count => {
                let _ = write!(out, "{batch}_{}", first + i as u64);
            }
            JobNames::Numbered { .. } => {}
            JobNames::Listed { text, ends } => {
                let start = if i == 0 { 0 } else { ends.get(i - 1).copied().unwrap_or(0) };
                let end = ends.get(i).copied().unwrap_or(start);
                out.push_str(text.get(start as usize..end as usize).unwrap_or(""));
            }
        }
    }

    /// Job `i`'s name.
    pub fn get(&self, i: usize) -> String {
        let mut out = String::new();
        self.write(i, &mut out);
        out
    }

    /// Every name, in order (a `String` each, made as it is read).
    pub fn iter(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The first name that appears twice.
    pub fn duplicate(&self) -> Option<String> {
        match self {
            JobNames::Numbered { .. } => None,
            JobNames::Listed { .. } => {
                let mut seen = HashSet::new();
                let mut name = String::new();
                (0..self.len()).find_map(|i| {
                    name.clear();
                    self.write(i, &mut name);
                    (!seen.insert(name.clone())).then(|| name.clone())
                })
            }
        }
    }
}

/// `k` of `<batch>_<k>` (the name is kept as its number only if `k`
/// written back is the name: no leading zeros, no sign).
fn number(name: &str, batch: &str) -> Option<u64> {
    let k = name.strip_prefix(batch)?.strip_prefix('_')?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    k.parse().ok()
}

/// A submit's jobs: names, and each job's argument and input lists as
/// indexes into the distinct ones.
#[derive(Debug, Clone)]
pub struct CompactBatch {
    pub batch_name: String,
    pub app_name: String,
    pub params: JobParams,
    names: JobNames,
    /// Distinct argument lists, as BOINC's command line carries them.
    args: Vec<Box<[String]>>,
    /// Distinct input lists.
    inputs: Vec<Box<[InputFile]>>,
    /// Per job: (argument list, input list).
    jobs: Vec<(u32, u32)>,
    /// The first job whose arguments BOINC's wrapper would cut or rewrite,
    /// if the app is a runner (known only with its templates).
    beyond_wrapper: Option<Box<(String, ArgRefused)>>,
}

/// A job's argument that BOINC's command line can't carry.
#[derive(Debug, thiserror::Error)]
#[error("job {job}: {refused}")]
pub struct BadArgs {
    pub job: String,
    pub refused: ArgRefused,
    /// The batch's jobs, all refused with it.
    pub names: JobNames,
}

impl CompactBatch {
    /// The batch's jobs, their arguments as they are.
    pub fn of(batch: SubmitBatch) -> CompactBatch {
        match CompactBatch::build(batch, false, |list| Ok::<_, std::convert::Infallible>(list.to_vec())) {
            Ok(b) => b,
            Err((.., never)) => match never {},
        }
    }

    /// The batch's jobs, their arguments quoted for BOINC's command line
    /// (once per distinct list), and checked against BOINC's wrapper.
    pub fn quoting_args(batch: SubmitBatch) -> Result<CompactBatch, BadArgs> {
        CompactBatch::build(batch, true, command_line::quote_args).map_err(|(names, job, refused)| BadArgs { job, refused, names })
    }

    /// `quote` makes each distinct argument list's words; its error comes
    /// back with the first job that has the list. With `check_wrapper`,
    /// the lists as they are are checked against BOINC's wrapper.
    fn build<E>(
        batch: SubmitBatch,
        check_wrapper: bool,
        quote: impl Fn(&[String]) -> Result<Vec<String>, E>,
    ) -> Result<CompactBatch, (JobNames, String, E)> {
        let SubmitBatch { batch_name, app_name, jobs: specs, params } = batch;
        let names = JobNames::of(&batch_name, specs.iter().map(|j| j.name.as_str()));
        let mut args: Vec<Box<[String]>> = Vec::new();
        let mut inputs: Vec<Box<[InputFile]>> = Vec::new();
        let mut jobs = Vec::with_capacity(specs.len());
        let mut beyond_wrapper = None;
        {
            let mut arg_ids: HashMap<&[String], u32> = HashMap::new();
            let mut input_ids: HashMap<&[InputFile], u32> = HashMap::new();
            let mut quoted: Vec<(usize, &[String])> = Vec::new();
            let mut kept_inputs: Vec<&[InputFile]> = Vec::new();
            for (i, spec) in specs.iter().enumerate() {
                let a = *arg_ids.entry(spec.args.as_slice()).or_insert_with(|| {
                    quoted.push((i, spec.args.as_slice()));
                    (quoted.len() - 1) as u32
                });
                let f = *input_ids.entry(spec.inputs.as_slice()).or_insert_with(|| {
                    kept_inputs.push(spec.inputs.as_slice());
                    (kept_inputs.len() - 1) as u32
                });
                jobs.push((a, f));
            }
            for (first_job, list) in quoted {
                let words = match quote(list) {
                    Ok(words) => words,
                    Err(e) => return Err((names, specs[first_job].name.clone(), e)),
                };
                if check_wrapper && beyond_wrapper.is_none() {
                    if let Err(refused) = command_line::fits_wrapper(list) {
                        beyond_wrapper = Some(Box::new((specs[first_job].name.clone(), refused)));
                    }
                }
                args.push(words.into_boxed_slice());
            }
            inputs.extend(kept_inputs.into_iter().map(|l| l.to_vec().into_boxed_slice()));
        }
        jobs.shrink_to_fit();
        Ok(CompactBatch { batch_name, app_name, params, names, args, inputs, jobs, beyond_wrapper })
    }

    /// The first job whose arguments BOINC's wrapper would cut or rewrite,
    /// and how: a refusal when the app is a runner.
    pub fn beyond_wrapper(&self) -> Option<&(String, ArgRefused)> {
        self.beyond_wrapper.as_deref()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn names(&self) -> &JobNames {
        &self.names
    }

    /// Job `i`'s arguments (quoted) and inputs.
    pub fn job(&self, i: usize) -> (&[String], &[InputFile]) {
        let (a, f) = self.jobs.get(i).copied().unwrap_or((u32::MAX, u32::MAX));
        (self.args.get(a as usize).map_or(&[][..], |l| &l[..]), self.inputs.get(f as usize).map_or(&[][..], |l| &l[..]))
    }

    /// The distinct input lists, each with the first job that has it.
    pub fn input_lists(&self) -> impl Iterator<Item = (usize, &[InputFile])> {
        let mut first = vec![usize::MAX; self.inputs.len()];
        for (i, &(_, f)) in self.jobs.iter().enumerate().rev() {
            if let Some(slot) = first.get_mut(f as usize) {
                *slot = i;
            }
        }
        self.inputs.iter().zip(first).map(|(l, i)| (i, &l[..]))
    }

    /// Job `i`'s input list, as an index into [`CompactBatch::input_lists`].
    pub fn input_list_of(&self, i: usize) -> usize {
        self.jobs.get(i).map_or(usize::MAX, |&(_, f)| f as usize)
    }

    /// The bytes it holds (for the memory benchmark and the log).
    pub fn heap_bytes(&self) -> usize {
        let names = match &self.names {
            JobNames::Numbered { batch, .. } => batch.capacity(),
            JobNames::Listed { text, ends } => text.capacity() + ends.capacity() * 4,
        };
        let args: usize = self.args.iter().map(|l| l.len() * 24 + l.iter().map(String::capacity).sum::<usize>()).sum();
        let inputs: usize = self
            .inputs
            .iter()
            .map(|l| l.len() * 48 + l.iter().map(|f| f.src.as_os_str().len() + f.dst_name.capacity()).sum::<usize>())
            .sum();
        names + args + inputs + self.jobs.capacity() * 8 + self.args.capacity() * 16 + self.inputs.capacity() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_protocol::gahp::JobSpec;

    fn spec(name: &str, args: &[&str], input: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            inputs: vec![InputFile { src: input.into(), dst_name: "in".into() }],
        }
    }

    fn batch(jobs: Vec<JobSpec>) -> SubmitBatch {
        SubmitBatch { batch_name: "b7".into(), app_name: "app".into(), jobs, params: JobParams::default() }
    }

    #[test]
    fn numbered_names_are_kept_as_their_first_number() {
        let b = CompactBatch::quoting_args(batch((3..1003).map(|k| spec(&format!("b7_{k}"), &["-n", "1"], "/x")).collect())).unwrap();
        assert!(matches!(b.names(), JobNames::Numbered { first: 3, count: 1000, .. }));
        assert_eq!(b.names().get(0), "b7_3");
        assert_eq!(b.names().get(999), "b7_1002");
        assert_eq!(b.len(), 1000);
        assert!(b.heap_bytes() < 1000 * 9, "{}", b.heap_bytes());
        assert_eq!(b.names().duplicate(), None);
    }

    #[test]
    fn any_other_names_come_back_as_they_went_in() {
        for names in [
            vec!["b7_1", "b7_3"],
            vec!["b7_01", "b7_2"],
            vec!["b7_0", "b7_01"],
            vec!["b7_x", "b7_1"],
            vec!["b7_1", "b8_2"],
            vec!["b7_+1", "b7_2"],
            vec!["condor#s#w#1#2.0", "", "é"],
            vec!["b7_18446744073709551615", "b7_18446744073709551616"],
        ] {
            let b = CompactBatch::quoting_args(batch(names.iter().map(|n| spec(n, &[], "/x")).collect())).unwrap();
            assert!(matches!(b.names(), JobNames::Listed { .. }), "{names:?}");
            assert!(b.names().iter().eq(names.iter().map(|n| n.to_string())), "{names:?}");
        }
    }

    #[test]
    fn the_first_job_a_runners_wrapper_would_spoil_is_kept_for_the_templates() {
        let b = CompactBatch::quoting_args(batch(vec![
            spec("b7_0", &["a"], "/x"),
            spec("b7_1", &["boinc_resolve(x)"], "/x"),
            spec("b7_2", &["a"], "/x"),
            spec("b7_3", &[&"z".repeat(4095)], "/x"),
        ]))
        .unwrap();
        let (job, refused) = b.beyond_wrapper().unwrap();
        assert_eq!(job, "b7_1");
        assert!(matches!(refused, ArgRefused::WrapperResolve { position: 1, .. }), "{refused:?}");
        let b = CompactBatch::quoting_args(batch(vec![spec("b7_0", &["a"], "/x"), spec("b7_1", &[&"z".repeat(4094)], "/x")])).unwrap();
        assert!(b.beyond_wrapper().is_none());
        // Lists quoted already (BLAH's, a sequence's) are not checked again.
        assert!(CompactBatch::of(batch(vec![spec("b7_0", &["boinc_resolve(x)"], "/x")])).beyond_wrapper().is_none());
    }

    #[test]
    fn a_name_twice_is_found() {
        let b = CompactBatch::quoting_args(batch(["a", "b", "a"].iter().map(|n| spec(n, &[], "/x")).collect())).unwrap();
        assert_eq!(b.names().duplicate().as_deref(), Some("a"));
    }

    #[test]
    fn each_job_keeps_its_own_lists_shared_where_equal() {
        let b = CompactBatch::quoting_args(batch(vec![
            spec("b7_0", &["a b"], "/x"),
            spec("b7_1", &["c"], "/y"),
            spec("b7_2", &["a b"], "/y"),
            spec("b7_3", &[], "/x"),
        ]))
        .unwrap();
        // Quoted for BOINC's command line.
        assert_eq!(b.job(0).0, command_line::quote_args(&["a b".to_string()]).unwrap());
        assert_ne!(b.job(0).0, ["a b".to_string()]);
        assert_eq!(b.job(1).0, ["c".to_string()]);
        assert_eq!(b.job(2).0, b.job(0).0);
        assert!(b.job(3).0.is_empty());
        assert_eq!(b.job(2).1[0].src, std::path::PathBuf::from("/y"));
        assert_eq!(b.job(3).1[0].src, std::path::PathBuf::from("/x"));
        let lists: Vec<(usize, usize)> = b.input_lists().map(|(first, l)| (first, l.len())).collect();
        assert_eq!(lists, [(0, 1), (1, 1)]);
        assert_eq!((0..4).map(|i| b.input_list_of(i)).collect::<Vec<_>>(), [0, 1, 1, 0]);
    }

    #[test]
    fn an_argument_boinc_cannot_carry_names_its_job() {
        let e = CompactBatch::quoting_args(batch(vec![spec("b7_0", &["ok"], "/x"), spec("b7_1", &[""], "/x")])).unwrap_err();
        assert_eq!(e.job, "b7_1");
        // Arguments quoted by the caller are kept as they are.
        let b = CompactBatch::of(batch(vec![spec("b7_0", &["a b"], "/x")]));
        assert_eq!(b.job(0).0, ["a b".to_string()]);
    }
}
