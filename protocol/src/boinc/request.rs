//! Request builders: the XML document each RPC sends as the form field
//! `request` (`docs/spec/boinc-rpc.md` §4, §5), and the download URL (§7.1).
//!
//! The forms are byte for byte those of BOINC's C client (element order,
//! indentation, `%f` numbers as `{:.6}`, a final newline), so the server and
//! its request log see what they always saw, with one difference: every
//! interpolated value is XML-escaped (the C client escapes nothing).

use std::fmt::Write;

use super::xml::escape_into;
use super::{SubmitJob, SubmitParams};
use crate::secret::Authenticator;

/// `ping`. The space is needed: old PHP servers took an empty root for an
/// unparsable request, and a current one still rejects `<ping/>` (capture
/// `ping_empty_element_quirk.txt`).
pub fn ping() -> String {
    "<ping> </ping>\n".to_string()
}

/// `get_templates` of an app.
pub fn get_templates_for_app(auth: &Authenticator, app: &str) -> String {
    simple("get_templates", auth, &[("app_name", app)])
}

/// `get_templates` of the app of a job (the app's templates, not the job's).
pub fn get_templates_for_job(auth: &Authenticator, job: &str) -> String {
    simple("get_templates", auth, &[("job_name", job)])
}

/// `create_batch`; `expire_time` in seconds since the epoch, 0 = never.
pub fn create_batch(auth: &Authenticator, batch_name: &str, app: &str, expire_time: f64) -> String {
    let mut out = open("create_batch", 256);
    element(&mut out, "   ", "authenticator", auth.expose());
    element(&mut out, "   ", "batch_name", batch_name);
    element(&mut out, "   ", "app_name", app);
    element(&mut out, "   ", "expire_time", &format!("{expire_time:.6}"));
    close(out, "create_batch")
}

/// `query_batch` by name, without job details.
pub fn query_batch_by_name(auth: &Authenticator, batch_name: &str) -> String {
    simple("query_batch", auth, &[("batch_name", batch_name)])
}

/// `query_batch` by name with job details (status, error bits, exit
/// statuses of failed instances).
pub fn query_batch_details(auth: &Authenticator, batch_name: &str) -> String {
    simple("query_batch", auth, &[("batch_name", batch_name), ("get_job_details", "1")])
}

/// `query_batch` by id, without job details.
pub fn query_batch_by_id(auth: &Authenticator, batch_id: i64) -> String {
    simple("query_batch", auth, &[("batch_id", &batch_id.to_string())])
}

/// `query_batches`: every batch of the user but the retired ones.
pub fn query_batches(auth: &Authenticator) -> String {
    simple("query_batches", auth, &[])
}

/// `submit_batch`: adds `jobs` to the batch `batch_id` (in state init), their
/// input files `local_staged` (already on the server).
///
/// Built for 100,000 jobs: one pre-sized String, nothing allocated per job.
pub fn submit_batch(auth: &Authenticator, batch_id: i64, app: &str, params: &SubmitParams, jobs: &[SubmitJob]) -> String {
    submit_batch_each(auth, batch_id, app, params, jobs.len(), |i, name| {
        let job = &jobs[i];
        name.push_str(job.name);
        (job.args, &job.files)
    })
}

/// [`submit_batch`] of `count` jobs given one at a time: `job(i, name)`
/// appends job `i`'s name to `name` (emptied before each call) and returns
/// its arguments and the physical names of its input files. A caller that
/// keeps its jobs compactly (names as `<batch>_<k>`, argument and file
/// lists shared) needs no per-job structure to build the request.
pub fn submit_batch_each<'a>(
    auth: &Authenticator,
    batch_id: i64,
    app: &str,
    params: &SubmitParams,
    count: usize,
    job: impl Fn(usize, &mut String) -> (&'a [String], &'a [&'a str]),
) -> String {
    const JOB: usize = "<job>\n  <name></name>\n</job>\n".len();
    const COMMAND_LINE: usize = "<command_line></command_line>\n".len();
    const FILE: usize = "<input_file>\n<mode>local_staged</mode>\n<source></source>\n</input_file>\n".len();
    let mut name = String::new();
    // Exact but for escaping, which only grows the String in rare cases.
    let size: usize = (0..count)
        .map(|i| {
            name.clear();
            let (args, files) = job(i, &mut name);
            let files: usize = files.iter().map(|f| FILE + f.len()).sum();
            let args = match args.len() {
                0 => 0,
                n => COMMAND_LINE + n - 1 + args.iter().map(String::len).sum::<usize>(),
            };
            JOB + name.len() + args + files
        })
        .sum();
    let mut out = open("submit_batch", 600 + app.len() + auth.expose().len() + size);
    element(&mut out, "", "authenticator", auth.expose());
    out.push_str("<batch>\n");
    // Writing to a String cannot fail.
    let _ = write!(out, "   <batch_id>{batch_id}</batch_id>\n   <app_name>");
    escape_into(&mut out, app);
    let _ = write!(
        out,
        "</app_name>\n   \
         <app_version_num>{}</app_version_num>\n   \
         <job_params>\n       \
         <rsc_disk_bound>{:.6}</rsc_disk_bound>\n       \
         <rsc_fpops_est>{:.6}</rsc_fpops_est>\n       \
         <rsc_fpops_bound>{:.6}</rsc_fpops_bound>\n       \
         <rsc_memory_bound>{:.6}</rsc_memory_bound>\n       \
         <delay_bound>{:.6}</delay_bound>\n   \
         </job_params>\n",
        params.app_version_num,
        params.rsc_disk_bound,
        params.rsc_fpops_est,
        params.rsc_fpops_bound,
        params.rsc_memory_bound,
        params.delay_bound,
    );
    for i in 0..count {
        name.clear();
        let (args, files) = job(i, &mut name);
        out.push_str("<job>\n");
        element(&mut out, "  ", "name", &name);
        if let Some((first, rest)) = args.split_first() {
            // Single spaces, no trailing one (the C client leaves one).
            out.push_str("<command_line>");
            escape_into(&mut out, first);
            for arg in rest {
                out.push(' ');
                escape_into(&mut out, arg);
            }
            out.push_str("</command_line>\n");
        }
        for file in files {
            out.push_str("<input_file>\n<mode>local_staged</mode>\n<source>");
            escape_into(&mut out, file);
            out.push_str("</source>\n</input_file>\n");
        }
        out.push_str("</job>\n");
    }
    out.push_str("</batch>\n");
    close(out, "submit_batch")
}

/// `query_batch2`: the jobs of the named batches changed after
/// `min_mod_time` (0 = all jobs).
pub fn query_batch2(auth: &Authenticator, min_mod_time: f64, batch_names: &[String]) -> String {
    let size: usize = batch_names.iter().map(|n| n.len() + 26).sum();
    let mut out = open("query_batch2", 160 + size);
    element(&mut out, "", "authenticator", auth.expose());
    element(&mut out, "", "min_mod_time", &format!("{min_mod_time:.6}"));
    for name in batch_names {
        element(&mut out, "", "batch_name", name);
    }
    close(out, "query_batch2")
}

/// `query_completed_job`: exit status, times and stderr of a finished job.
pub fn query_completed_job(auth: &Authenticator, job: &str) -> String {
    simple("query_completed_job", auth, &[("job_name", job)])
}

/// `abort_jobs`.
pub fn abort_jobs(auth: &Authenticator, jobs: &[String]) -> String {
    let size: usize = jobs.iter().map(|n| n.len() + 22).sum();
    let mut out = open("abort_jobs", 100 + size);
    element(&mut out, "", "authenticator", auth.expose());
    for job in jobs {
        element(&mut out, "", "job_name", job);
    }
    close(out, "abort_jobs")
}

/// `retire_batch` by name.
pub fn retire_batch(auth: &Authenticator, batch_name: &str) -> String {
    simple("retire_batch", auth, &[("batch_name", batch_name)])
}

/// `set_expire_time` by batch name; seconds since the epoch.
pub fn set_expire_time(auth: &Authenticator, batch_name: &str, expire_time: f64) -> String {
    simple("set_expire_time", auth, &[("batch_name", batch_name), ("expire_time", &format!("{expire_time:.6}"))])
}

/// `query_files` (job_file.php): which of `phys_names` the server lacks. With
/// a batch id, the files it has are associated with that batch (a second
/// association is a PHP fatal error: see `captures/README.md`).
pub fn query_files(auth: &Authenticator, batch_id: Option<i64>, phys_names: &[String]) -> String {
    let size: usize = phys_names.iter().map(|n| n.len() + 27).sum();
    let mut out = open("query_files", 120 + size);
    element(&mut out, "", "authenticator", auth.expose());
    // As the C client: no batch id is the same as 0.
    if let Some(id) = batch_id.filter(|&id| id != 0) {
        element(&mut out, "", "batch_id", &id.to_string());
    }
    for name in phys_names {
        element(&mut out, "   ", "phys_name", name);
    }
    close(out, "query_files")
}

/// `upload_files` (job_file.php): the XML part of the multipart POST; the
/// file parts must follow in the order of `phys_names`. `batch_id` 0 = none.
pub fn upload_files(auth: &Authenticator, batch_id: i64, phys_names: &[String]) -> String {
    let size: usize = phys_names.iter().map(|n| n.len() + 24).sum();
    let mut out = open("upload_files", 120 + size);
    element(&mut out, "", "authenticator", auth.expose());
    if batch_id != 0 {
        element(&mut out, "", "batch_id", &batch_id.to_string());
    }
    for name in phys_names {
        element(&mut out, "", "phys_name", name);
    }
    close(out, "upload_files")
}

/// The URL of output file `file_num` (0-based, output template order) of a
/// job's canonical instance. It holds the raw authenticator: never log it.
pub fn output_url(project_url: &str, auth: &Authenticator, job_name: &str, file_num: usize) -> String {
    let mut url = String::with_capacity(project_url.len() + 80 + 3 * job_name.len());
    url.push_str(project_url);
    url.push_str("get_output.php?cmd=workunit_file&auth_str=");
    // Raw as the C client sends it; only characters a URL cannot carry as
    // they are are encoded (a real authenticator is hex).
    percent_encode(&mut url, auth.expose(), |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    url.push_str("&wu_name=");
    // The C client's escape_url: everything but letters and digits.
    percent_encode(&mut url, job_name, |b| b.is_ascii_alphanumeric());
    let _ = write!(url, "&file_num={file_num}");
    url
}

/// The URL of the zip of every canonical output of batch `batch_id`.
/// `auth_str` is the MD5 hex of the authenticator followed by the batch id
/// in decimal (this crate does no hashing); it grants the batch's outputs:
/// never log the URL.
pub fn batch_files_url(project_url: &str, batch_id: i64, auth_str: &str) -> String {
    let mut url = String::with_capacity(project_url.len() + 100);
    url.push_str(project_url);
    let _ = write!(url, "get_output.php?cmd=batch_files&batch_id={batch_id}&auth_str=");
    percent_encode(&mut url, auth_str, |b| b.is_ascii_alphanumeric());
    url
}

/// The server's rule for physical file names (`job_file.php`, §5): 1 to 255
/// characters from `A-Z a-z 0-9 _ . -` and space. Anything else fails the
/// whole `query_files`/`upload_files` with `bad filename`.
pub fn phys_name_ok(name: &str) -> bool {
    (1..=255).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.- ".contains(&b))
}

fn percent_encode(out: &mut String, text: &str, keep: impl Fn(u8) -> bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in text.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

/// `<root>\n<authenticator>A</authenticator>\n` + `<name>value</name>\n`
/// per field + `</root>\n`: the shape of most requests.
fn simple(root: &str, auth: &Authenticator, fields: &[(&str, &str)]) -> String {
    let size: usize = fields.iter().map(|(n, v)| 2 * n.len() + v.len() + 6).sum();
    let mut out = open(root, 2 * root.len() + auth.expose().len() + 40 + size);
    element(&mut out, "", "authenticator", auth.expose());
    for (name, value) in fields {
        element(&mut out, "", name, value);
    }
    close(out, root)
}

fn open(root: &str, capacity: usize) -> String {
    let mut out = String::with_capacity(capacity);
    out.push('<');
    out.push_str(root);
    out.push_str(">\n");
    out
}

fn element(out: &mut String, indent: &str, name: &str, value: &str) {
    out.push_str(indent);
    out.push('<');
    out.push_str(name);
    out.push('>');
    escape_into(out, value);
    out.push_str("</");
    out.push_str(name);
    out.push_str(">\n");
}

fn close(mut out: String, root: &str) -> String {
    out.push_str("</");
    out.push_str(root);
    out.push_str(">\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        Authenticator::new("3f2a9c0d5e7b4a1c8d6e0f9a2b4c6d8e")
    }

    #[test]
    fn values_are_escaped() {
        let r = retire_batch(&auth(), "a<b>&'\"");
        assert!(r.contains("<batch_name>a&lt;b&gt;&amp;&apos;&quot;</batch_name>"), "{r}");
    }

    #[test]
    fn submit_batch_command_line() {
        let args = ["-n".to_string(), "5".to_string(), "a&b".to_string()];
        let none: [String; 0] = [];
        let jobs = [SubmitJob { name: "j0", args: &args, files: vec!["f.dat", "g"] }, SubmitJob { name: "j1", args: &none, files: vec![] }];
        let r = submit_batch(&auth(), 118, "worker", &SubmitParams::default(), &jobs);
        assert!(r.contains(
            "<job>\n  <name>j0</name>\n<command_line>-n 5 a&amp;b</command_line>\n\
             <input_file>\n<mode>local_staged</mode>\n<source>f.dat</source>\n</input_file>\n\
             <input_file>\n<mode>local_staged</mode>\n<source>g</source>\n</input_file>\n</job>\n\
             <job>\n  <name>j1</name>\n</job>\n</batch>\n</submit_batch>\n"
        ));
    }

    #[test]
    fn submit_batch_is_presized() {
        let args = vec!["--x".to_string(); 3];
        let jobs: Vec<_> = (0..1000)
            .map(|_| SubmitJob {
                name: "condor#host#worker#1716400000#42.0",
                args: &args,
                files: vec!["b1946ac92492d2347c6235b4d2611184.dat"],
            })
            .collect();
        let r = submit_batch(&auth(), 1, "worker", &SubmitParams::default(), &jobs);
        assert!(r.capacity() < r.len() + 700, "{} for {}", r.capacity(), r.len());
    }

    #[test]
    fn optional_batch_ids() {
        let names = ["a.dat".to_string()];
        assert!(!query_files(&auth(), None, &names).contains("batch_id"));
        assert!(!query_files(&auth(), Some(0), &names).contains("batch_id"));
        assert!(query_files(&auth(), Some(7), &names).contains("<batch_id>7</batch_id>\n"));
        assert!(!upload_files(&auth(), 0, &names).contains("batch_id"));
    }

    #[test]
    fn batch_files_url_is_the_captured_one() {
        // captures/real-boinc/get_output_batch_files_zip.txt
        assert_eq!(
            batch_files_url("http://127.0.0.1/boinctest/", 10, "cb38e0e4e4082767cbf77b211ba7eabc"),
            "http://127.0.0.1/boinctest/get_output.php?cmd=batch_files&batch_id=10&auth_str=cb38e0e4e4082767cbf77b211ba7eabc"
        );
    }

    #[test]
    fn output_url_escapes_like_the_c_client() {
        assert_eq!(
            output_url("https://b.example.org/test/", &auth(), "condor#s.example.org#w_1#42.0", 1),
            "https://b.example.org/test/get_output.php?cmd=workunit_file\
             &auth_str=3f2a9c0d5e7b4a1c8d6e0f9a2b4c6d8e\
             &wu_name=condor%23s%2Eexample%2Eorg%23w%5F1%2342%2E0&file_num=1"
        );
        let odd = Authenticator::new("a b&c");
        assert!(output_url("u/", &odd, "j", 0).contains("auth_str=a%20b%26c&"));
    }

    #[test]
    fn phys_names() {
        assert!(phys_name_ok("b1946ac92492d2347c6235b4d2611184.dat"));
        assert!(phys_name_ok("a b_c-d.e"));
        assert!(phys_name_ok(&"a".repeat(255)));
        for bad in ["", "../etc/passwd", "x~", "é", "a+b"] {
            assert!(!phys_name_ok(bad), "{bad}");
        }
        assert!(!phys_name_ok(&"a".repeat(256)));
    }

    #[test]
    fn ping_has_the_space() {
        assert_eq!(ping(), "<ping> </ping>\n");
    }
}
