//! `submit_rpc_handler.php`: the 14 remote-submission RPCs, with the real
//! script's check order, messages and reply bytes.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use rusqlite::{params, Connection};

use super::{authenticate, batch_named, get_batch, job_status, Access};
use crate::config::CompletedJobMode;
use crate::ctx::{App, Ctx};
use crate::files;
use crate::lifecycle;
use crate::php::{self, float};
use crate::project_db::{self, secs};
use crate::replies::{self, batch_xml, project_down, xml_fail, Fail, Reply, XmlOut, XML_CONTENT_TYPE};
use crate::xmlreq::Element;

/// Runs the script on a parsed request (or the text of an unparsable one).
pub fn handle(ctx: &Ctx, c: &Connection, req: Result<Element, String>) -> Reply {
    let mut out = XmlOut::new();
    let res = match &req {
        Err(raw) => Err(xml_fail(format!("can't parse request message: {raw}"))),
        Ok(r) if ctx.web_stopped() && RPCS.contains(&r.name.as_str()) => {
            let tag = RPCS.iter().find(|n| **n == r.name).copied().unwrap_or("error");
            out.start(tag);
            Err(project_down())
        }
        Ok(r) => {
            let now = ctx.clock.now();
            match r.name.as_str() {
                "abort_batch" => abort_batch(ctx, c, r, &mut out, now),
                "abort_jobs" => abort_jobs(ctx, c, r, &mut out, now),
                "create_batch" => create_batch(ctx, c, r, &mut out, now),
                "estimate_batch" => estimate_batch(ctx, c, r, &mut out),
                "get_templates" => get_templates(ctx, c, r, &mut out),
                "ping" => ping(&mut out),
                "query_batch" => query_batch(ctx, c, r, &mut out, now),
                "query_batch2" => query_batch2(ctx, c, r, &mut out, now),
                "query_batches" => query_batches(ctx, c, r, &mut out, now),
                "query_completed_job" => query_completed_job(ctx, c, r, &mut out),
                "query_job" => query_job(ctx, c, r, &mut out),
                "retire_batch" => retire_batch(ctx, c, r, &mut out, now),
                "set_expire_time" => set_expire_time(ctx, c, r, &mut out),
                "submit_batch" => submit_batch(ctx, c, r, &mut out, now),
                _ => Err(xml_fail("bad command")),
            }
        }
    };
    Reply::ok(XML_CONTENT_TYPE, out.finish(res, &ctx.php_root()))
}

type Step = Result<(), Fail>;

/// The commands the script knows.
const RPCS: [&str; 14] = [
    "abort_batch",
    "abort_jobs",
    "create_batch",
    "estimate_batch",
    "get_templates",
    "ping",
    "query_batch",
    "query_batch2",
    "query_batches",
    "query_completed_job",
    "query_job",
    "retire_batch",
    "set_expire_time",
    "submit_batch",
];

fn app_named<'a>(ctx: &'a Ctx, name: &str) -> Result<&'a App, Fail> {
    ctx.app_by_name(name).ok_or_else(|| xml_fail(format!("app not found: {}", ctx.html(name))))
}

fn ping(out: &mut XmlOut) -> Step {
    out.start("ping");
    out.push("<success>1</success>\n        </ping>\n    ");
    Ok(())
}

fn get_templates(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut) -> Step {
    out.start("get_templates");
    let app_name = r.str("app_name");
    let app = if php::truthy(app_name) {
        app_named(ctx, app_name)?
    } else {
        let job_name = r.str("job_name");
        let wu = project_db::wu_by_name(c, job_name)?.ok_or_else(|| xml_fail(format!("job not found: {}", ctx.html(job_name))))?;
        ctx.app_by_id(wu.appid).ok_or_else(|| xml_fail("template file missing"))?
    };
    authenticate(c, r, Access::App(app.id))?;
    out.push("<templates>\n");
    out.push(&app.spec.input_template());
    out.push("\n");
    out.push(&app.spec.output_template());
    out.push("\n</templates>\n        </get_templates>\n    ");
    Ok(())
}

fn create_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("create_batch");
    let app = app_named(ctx, r.str("app_name"))?;
    let user = authenticate(c, r, Access::App(app.id))?;
    let mut name = r.str("batch_name").to_string();
    if name.is_empty() {
        name = format!("{}:{}:{}", user.name, app.spec.name, php::rfc2822(secs(now)));
    }
    let id = project_db::insert_batch(c, user.id, app.id, &name, now, r.float("expire_time"), 0)?;
    out.push(&format!("<batch_id>{id}</batch_id>\n        </create_batch>\n    "));
    Ok(())
}

/// A job of a `submit_batch` request, with its inputs staged.
struct NewJob {
    name: String,
    command_line: String,
    inputs: Vec<String>,
    /// `<target_team>`, `<target_user>`, `<target_host>` as the PHP reads
    /// them (`(int)`); the first non-zero in that order is passed on.
    targets: [i64; 3],
    /// What `create_work` made of the job's line: the assignment (BOINC's
    /// `ASSIGN_HOST` or `ASSIGN_USER` and the id), or why it stopped.
    assign: Result<Option<(i64, i64)>, String>,
}

/// Stages one `<input_file>` as `stage_files()` does; returns the
/// physical name.
fn stage_file(ctx: &Ctx, f: &Element) -> Result<String, Fail> {
    let mode = f.str("mode");
    let source = f.str("source");
    let content_name = |data: &[u8]| format!("jf_{}", files::md5_hex(data));
    let store_if_absent = |name: &str, data: &[u8]| -> Result<(), Fail> {
        let path = ctx.dirs.download.join(name);
        if !path.exists() {
            crate::files::write_atomic(&path, data).map_err(|_| xml_fail(format!("can't write to file {}", path.display())))?;
        }
        Ok(())
    };
    match mode {
        "local_staged" => Ok(source.to_string()),
        // `sandbox` falls through into the inline branch on a real server.
        "inline" | "sandbox" => {
            let name = content_name(source.as_bytes());
            store_if_absent(&name, source.as_bytes())?;
            Ok(name)
        }
        "local" | "semilocal" => {
            let data = std::fs::read(source).map_err(|_| xml_fail(format!("Can't get MD5 of file {source}")))?;
            let name = content_name(&data);
            store_if_absent(&name, &data)?;
            Ok(name)
        }
        other => Err(xml_fail(format!("unsupported file mode: {other}"))),
    }
}

/// The jobs of a `<batch>`; checks input counts against the app's template
/// unless another template file was named (which the sim does not have).
fn read_jobs(ctx: &Ctx, app: &App, b: &Element) -> Result<Vec<NewJob>, Fail> {
    let jobs: Vec<&Element> = b.all("job").collect();
    let template = b.str("workunit_template_file");
    if template.is_empty() || template == format!("{}_in", app.spec.name) {
        let need = app.spec.inputs.len();
        for (i, j) in jobs.iter().enumerate() {
            let got = j.all("input_file").count();
            if got != need {
                return Err(xml_fail(format!("wrong # of input files for job {i}: need {need}, got {got}")));
            }
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let mut inputs = Vec::new();
        for f in j.all("input_file") {
            inputs.push(stage_file(ctx, f)?);
        }
        out.push(NewJob {
            name: j.str("name").to_string(),
            command_line: j.str("command_line").to_string(),
            inputs,
            targets: [j.int("target_team"), j.int("target_user"), j.int("target_host")],
            assign: Ok(None),
        });
    }
    Ok(out)
}

fn submit_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("submit_batch");
    let empty = Element::default();
    let b = r.child("batch").unwrap_or(&empty);
    let app = app_named(ctx, b.str("app_name"))?;
    let user = authenticate(c, r, Access::App(app.id))?;
    let mut jobs = read_jobs(ctx, app, b)?;

    let batch_id = b.int("batch_id");
    if batch_id != 0 {
        let batch = project_db::batch_by_id(c, batch_id)?.ok_or_else(|| xml_fail(format!("no batch {batch_id}")))?;
        if batch.user_id != user.id {
            return Err(xml_fail("not owner of batch"));
        }
        if batch.state != project_db::BATCH_INIT {
            return Err(xml_fail("batch not in init state"));
        }
    }
    let njobs = jobs.len() as i64;
    let batch_id = if batch_id != 0 {
        c.prepare_cached("UPDATE batch SET njobs = ?1 WHERE id = ?2")?.execute(params![njobs, batch_id])?;
        batch_id
    } else {
        let mut name = b.str("batch_name").to_string();
        if name.is_empty() {
            name = format!("{}:{}:{}", user.name, app.spec.name, php::rfc2822(secs(now)));
        }
        project_db::insert_batch(c, user.id, app.id, &name, now, 0.0, njobs)?
    };

    if let Err(stderr) = create_work(ctx, c, app, b, batch_id, &mut jobs, now)? {
        return Err(xml_fail(format!("create_work failed: {stderr}")));
    }
    c.prepare_cached("UPDATE batch SET state = ?1 WHERE id = ?2")?.execute(params![project_db::BATCH_IN_PROGRESS, batch_id])?;
    out.push(&format!("<batch_id>{batch_id}</batch_id>\n        </submit_batch>\n    "));
    Ok(())
}

/// BOINC's `create_work --stdin`, line by line as the tool goes: a line
/// that stops the tool (a `local_staged` file missing from the download
/// store, an option it does not take per job such as `--target_team`)
/// fails it there; a targeted job is inserted on its own as soon as its
/// line is read (with its assignment), the others together at the end, so
/// a failure keeps the targeted jobs of earlier lines and none of the
/// others, and a name already taken fails the final insert (no untargeted
/// job created). `Ok(Err(stderr))` when the tool fails.
fn create_work(
    ctx: &Ctx,
    c: &Connection,
    app: &App,
    b: &Element,
    batch_id: i64,
    jobs: &mut [NewJob],
    now: f64,
) -> Result<Result<(), String>, Fail> {
    // The PHP writes one line per job to `create_work --stdin`, which splits
    // it like the client does: a `"` in a command line ends its quoting and
    // the words after it are read as input file names.
    for j in jobs.iter_mut() {
        reparse_job_line(j);
    }
    // Parameters: the template's values win over the request's (spec §4.4).
    let jp = b.child("job_params");
    let param = |name: &str, default: f64| {
        let v = jp.map(|p| p.float(name)).unwrap_or(0.0);
        if v != 0.0 {
            v
        } else {
            default
        }
    };
    let spec = &app.spec;
    let or = |tpl: f64, v: f64| if tpl > 0.0 { tpl } else { v };
    // An app whose template leaves the bounds out takes the job's.
    let (tpl_fpops, tpl_memory, tpl_disk) = spec.template_bounds().unwrap_or((0.0, 0.0, 0.0));
    let fpops_bound = or(tpl_fpops, param("rsc_fpops_bound", 8.64e13));
    let memory_bound = or(tpl_memory, param("rsc_memory_bound", 5e8));
    let disk_bound = or(tpl_disk, param("rsc_disk_bound", 1e9));
    let delay_bound = or(spec.delay_bound, param("delay_bound", 604800.0)).trunc();
    let batch_fpops = param("rsc_fpops_est", 3.6e12);
    let app_version_num = b.int("app_version_num");
    let priority = b.int("priority");
    let job_fpops: Vec<f64> = b.all("job").map(|j| j.float("rsc_fpops_est")).collect();

    let pid = std::process::id();
    for (i, j) in jobs.iter_mut().enumerate() {
        if j.name.is_empty() {
            j.name = format!("{}_{}_{:.6}_{}", spec.name, pid, now, i);
        }
    }

    let mut ins = c.prepare_cached(
        "INSERT INTO workunit (name, appid, batch, create_time, mod_time, transition_time, \
         rsc_fpops_est, rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, delay_bound, \
         app_version_num, priority, command_line, input_files, min_quorum, target_nresults, \
         max_error_results, max_total_results, max_success_results) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    )?;
    // Ok(false): the name is taken.
    let mut insert = |i: usize, j: &NewJob| -> Result<bool, Fail> {
        let per_job = job_fpops.get(i).copied().unwrap_or(0.0);
        let fpops_est = or(spec.fpops_est, if per_job != 0.0 { per_job } else { batch_fpops });
        let res = ins.execute(params![
            j.name,
            app.id,
            batch_id,
            now,
            secs(now),
            now,
            fpops_est,
            fpops_bound,
            memory_bound,
            disk_bound,
            delay_bound,
            app_version_num,
            priority,
            j.command_line,
            j.inputs.join("\n"),
            spec.min_quorum,
            spec.target_nresults,
            spec.max_error_results,
            spec.max_total_results,
            spec.max_success_results,
        ]);
        match res {
            Ok(_) => Ok(true),
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    let dup_msg = |name: &str| format!("wu.insert_batch() failed: -1\nMySQL error: Duplicate entry '{name}' for key 'name'\n");

    // Inputs must be in the download store (create_work takes their MD5).
    let mut present: HashMap<&str, bool> = HashMap::new();
    let mut untargeted: Vec<usize> = Vec::new();
    let mut failure: Option<String> = None;
    for (i, j) in jobs.iter().enumerate() {
        let assign = match &j.assign {
            Ok(a) => *a,
            Err(msg) => {
                failure = Some(msg.clone());
                break;
            }
        };
        let missing = j
            .inputs
            .iter()
            .find(|f| !*present.entry(f.as_str()).or_insert_with(|| super::valid_filename(f) && ctx.dirs.download.join(f).is_file()));
        if let Some(f) = missing {
            let path = ctx.dirs.download.join(f);
            failure = Some(format!(
                "md5_file: can't open {}\nprocess_input_template: md5_file fopen() failed\ncreate_work() failed: -108\n",
                path.display()
            ));
            break;
        }
        let Some((target_type, target_id)) = assign else {
            untargeted.push(i);
            continue;
        };
        if j.command_line.contains('\'') {
            failure = Some(sql_quote_error(ctx, app, j, batch_id, now));
            break;
        }
        if !insert(i, j)? {
            failure = Some(dup_msg(&j.name));
            break;
        }
        let wu_id = c.last_insert_rowid();
        c.prepare_cached("INSERT INTO assignment (create_time, target_type, target_id, workunitid) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![now, target_type, target_id, wu_id])?;
    }
    if let Some(msg) = failure {
        return Ok(Err(msg));
    }
    // create_work does not SQL-escape `xml_doc`: a raw `'` in a command line
    // breaks the multi-row insert, and no untargeted job is made.
    if let Some(j) = untargeted.iter().map(|&i| &jobs[i]).find(|j| j.command_line.contains('\'')) {
        return Ok(Err(sql_quote_error(ctx, app, j, batch_id, now)));
    }
    // The untargeted jobs: one multi-row insert, all or nothing.
    let tx = c.unchecked_transaction()?;
    let mut seen: HashSet<&str> = HashSet::with_capacity(untargeted.len());
    for &i in &untargeted {
        let j = &jobs[i];
        if !seen.insert(j.name.as_str()) || !insert(i, j)? {
            tx.rollback()?;
            return Ok(Err(dup_msg(&j.name)));
        }
    }
    tx.commit()?;
    Ok(Ok(()))
}

/// What `create_work` prints when a raw `'` in a job's command line ends
/// the SQL string of its `workunit.xml_doc` (as captured from a real
/// server, `captures/real-boinc/submit_batch_raw_single_quote.txt`):
/// MariaDB's syntax error quotes the query from the token after that `'`,
/// cut to 80 characters. The `query=` line holds the sim's own `xml_doc`.
fn sql_quote_error(ctx: &Ctx, app: &App, j: &NewJob, batch_id: i64, now: f64) -> String {
    let mut file_refs = String::new();
    for (phys, open) in j.inputs.iter().zip(&app.spec.inputs) {
        file_refs.push_str(&format!(
            "<file_ref>\n    <file_name>{phys}</file_name>\n    <open_name>{open}</open_name>\n    <copy_file/>\n</file_ref>\n"
        ));
    }
    let mut file_infos = String::new();
    for phys in &j.inputs {
        let nbytes = std::fs::metadata(ctx.dirs.download.join(phys)).map(|m| m.len()).unwrap_or(0);
        file_infos.push_str(&format!(
            "<file_info>\n<no_delete/>\n    <name>{phys}</name>\n    <url>{}download/{phys}</url>\n    <nbytes>{nbytes}</nbytes>\n</file_info>\n",
            ctx.project_url
        ));
    }
    let xml_doc = format!("{file_infos}<workunit>\n<command_line>\n{}\n</command_line>\n{file_refs}</workunit>", j.command_line);
    let t = secs(now);
    let query = format!("insert into workunit values (0, {t}, {}, '{}', '{xml_doc}', {batch_id}, ...)", app.id, j.name);
    let after_quote = &query[query.find("<command_line>").unwrap_or(0)..];
    let after_quote = &after_quote[after_quote.find('\'').map_or(0, |i| i + 1)..];
    let near: String = if after_quote.chars().count() > 80 {
        after_quote.chars().take(77).chain("...".chars()).collect()
    } else {
        after_quote.to_string()
    };
    let syntax = format!(
        "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version \
         for the right syntax to use near '{near}' at line 1"
    );
    format!("Database error: {syntax}\nquery={query}\nwu.insert_batch() failed: 1\nMySQL error: {syntax}\n")
}

/// One job as `create_work --stdin` reads it: the PHP's line
/// ` --wu_name N --command_line "CL" in1 in2...` split into words; a word
/// that is not an option's value is an input file name. The stored command
/// line loses its backslashes, as on a real server.
fn reparse_job_line(j: &mut NewJob) {
    let mut line = String::new();
    if !j.name.is_empty() {
        line.push_str(&format!(" --wu_name {}", j.name));
    }
    if !j.command_line.is_empty() {
        line.push_str(&format!(" --command_line \"{}\"", j.command_line));
    }
    match j.targets {
        [team, _, _] if team != 0 => line.push_str(&format!(" --target_team {team}")),
        [_, user, _] if user != 0 => line.push_str(&format!(" --target_user {user}")),
        [_, _, host] if host != 0 => line.push_str(&format!(" --target_host {host}")),
        _ => {}
    }
    for f in &j.inputs {
        line.push(' ');
        line.push_str(f);
    }
    let mut words = crate::apps::split_command_line(&line).into_iter();
    let (mut name, mut command_line, mut inputs) = (String::new(), String::new(), Vec::new());
    let mut assign = Ok(None);
    while let Some(w) = words.next() {
        match w.as_str() {
            "--wu_name" => name = words.next().unwrap_or_default(),
            "--command_line" => command_line = words.next().unwrap_or_default(),
            // create_work takes a per-job host or user target (C atoi; 0 is
            // refused), but not a team: that stops it.
            "--target_host" | "--target_user" => {
                let id = php::to_int(&words.next().unwrap_or_default());
                let kind = if w == "--target_host" { ASSIGN_HOST } else { ASSIGN_USER };
                if id == 0 {
                    assign = Err("you must specify a nonzero database ID for assigning jobs to users, teams, or hosts.\n".to_string());
                    break;
                }
                assign = Ok(Some((kind, id)));
            }
            "--target_team" => {
                assign = Err("create_work: bad stdin argument '--target_team'\n".to_string());
                break;
            }
            _ => inputs.push(w),
        }
    }
    j.name = name;
    j.command_line = command_line.replace('\\', "");
    j.inputs = inputs;
    j.assign = assign;
}

/// BOINC's `assignment.target_type` values.
pub const ASSIGN_HOST: i64 = 1;
pub const ASSIGN_USER: i64 = 2;

fn estimate_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut) -> Step {
    out.start("estimate_batch");
    let empty = Element::default();
    let b = r.child("batch").unwrap_or(&empty);
    let app = app_named(ctx, b.str("app_name"))?;
    authenticate(c, r, Access::App(app.id))?;
    let mut total = 0.0;
    for j in b.all("job") {
        let f = j.float("rsc_fpops_est");
        let f = if f != 0.0 { f } else { app.spec.fpops_est };
        if f == 0.0 {
            return Err(xml_fail("no rsc_fpops_est given for job"));
        }
        total += f;
    }
    let seconds = total / ctx.cfg.total_flops();
    out.push(&format!("<seconds>{}</seconds>\n        </estimate_batch>\n    ", float(seconds)));
    Ok(())
}

fn query_batch2(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("query_batch2");
    let user = authenticate(c, r, Access::Files)?;
    let mut batches = Vec::new();
    for el in r.all("batch_name") {
        // Messages show the name after one round of SQL escaping.
        let shown = php::sql_escape(&el.text);
        let batch = batch_named(ctx, c, &el.text)?.ok_or_else(|| xml_fail(format!("no batch named {shown}")))?;
        if batch.user_id != user.id {
            return Err(xml_fail(format!("not owner of {shown}")));
        }
        batches.push(batch.id);
    }
    let min_mod_time = r.float("min_mod_time");
    out.push(&format!("<server_time>{}</server_time>\n", float(now)));
    let mut all = c.prepare_cached(
        "SELECT name, canonical_resultid, error_mask, ever_sent FROM workunit \
         WHERE batch = ?1 ORDER BY id",
    )?;
    let mut partial = c.prepare_cached(
        "SELECT name, canonical_resultid, error_mask, ever_sent FROM workunit \
         WHERE batch = ?1 AND mod_time > ?2 ORDER BY id",
    )?;
    for id in batches {
        let map = |row: &rusqlite::Row<'_>| -> rusqlite::Result<(String, &'static str)> {
            Ok((row.get(0)?, job_status(row.get(1)?, row.get(2)?, row.get::<_, i64>(3)? != 0)))
        };
        let jobs: Vec<(String, &str)> = if min_mod_time != 0.0 {
            partial.query_map(params![id, min_mod_time], map)?.collect::<rusqlite::Result<_>>()?
        } else {
            all.query_map([id], map)?.collect::<rusqlite::Result<_>>()?
        };
        let mut s = String::with_capacity(jobs.len() * 96 + 32);
        let _ = writeln!(s, "   <batch_size>{}</batch_size>", jobs.len());
        for (name, status) in &jobs {
            let _ = write!(s, "    <job>\n        <job_name>{name}</job_name>\n        <status>{status}</status>\n    </job>\n");
        }
        out.push(&s);
    }
    out.push("</query_batch2>\n");
    Ok(())
}

fn query_batches(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("query_batches");
    let user = authenticate(c, r, Access::Files)?;
    let get_cpu_time = r.int("get_cpu_time") != 0;
    for mut b in project_db::batches_of_user(c, user.id)? {
        if b.state < project_db::BATCH_COMPLETE {
            b = project_db::recompute_batch(c, b, now)?;
        }
        if b.state == project_db::BATCH_RETIRED {
            continue;
        }
        let cpu = if get_cpu_time { Some(project_db::batch_cpu_time(c, b.id)?) } else { None };
        out.push("    <batch>\n");
        out.push(&batch_xml(&b, ctx.app_name(b.app_id), cpu));
        out.push("   </batch>\n");
    }
    out.push("</query_batches>\n");
    Ok(())
}

const ERROR_BITS: [(i64, &str); 6] = [
    (1, "couldnt_send_result"),
    (2, "too_many_error_results"),
    (4, "too_many_success_results"),
    (8, "too_many_total_results"),
    (16, "cancelled"),
    (32, "no_canonical_result"),
];

fn query_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("query_batch");
    let user = authenticate(c, r, Access::Files)?;
    let b = get_batch(ctx, c, r)?;
    if b.user_id != user.id {
        return Err(xml_fail("not owner of batch"));
    }
    let b = project_db::recompute_batch(c, b, now)?;
    let get_cpu_time = r.int("get_cpu_time") != 0;
    let details = r.int("get_job_details") != 0;
    let cpu = if get_cpu_time { Some(project_db::batch_cpu_time(c, b.id)?) } else { None };
    out.push(&batch_xml(&b, ctx.app_name(b.app_id), cpu));
    for wu in project_db::wus_of_batch(c, b.id)? {
        let mut s = format!(
            "        <job>\n        <id>{}</id>\n        <name>{}</name>\n        <canonical_instance_id>{}</canonical_instance_id>\n",
            wu.id, wu.name, wu.canonical_resultid
        );
        if details {
            let results = project_db::results_of_wu(c, wu.id)?;
            let status = if wu.canonical_resultid != 0 {
                if let Some(cr) = results.iter().find(|x| x.id == wu.canonical_resultid) {
                    let _ = writeln!(s, "            <cpu_time>{}</cpu_time>", float(cr.cpu_time));
                }
                "done"
            } else if wu.error_mask != 0 {
                for (bit, text) in ERROR_BITS {
                    if wu.error_mask & bit != 0 {
                        let _ = writeln!(s, "   <error>{text}</error>");
                    }
                }
                for x in results.iter().filter(|x| x.outcome == project_db::OUTCOME_CLIENT_ERROR) {
                    let _ = writeln!(s, "            <exit_status>{}</exit_status>", x.exit_status);
                }
                "error"
            } else if results.iter().any(|x| x.sent_time > 0.0) {
                "in_progress"
            } else {
                "queued"
            };
            let _ = writeln!(s, "            <status>{status}</status>");
        }
        s.push_str("        </job>\n");
        out.push(&s);
    }
    out.push("</query_batch>\n");
    Ok(())
}

/// The phrase BOINC's web pages use for an instance's state.
pub fn instance_state_text(x: &project_db::Instance) -> &'static str {
    match x.server_state {
        1 => "Inactive",
        project_db::RS_UNSENT => "Unsent",
        project_db::RS_IN_PROGRESS => "In progress",
        project_db::RS_OVER => match x.outcome {
            project_db::OUTCOME_SUCCESS => match x.validate_state {
                project_db::VALIDATE_INIT => "Completed, waiting for validation",
                project_db::VALIDATE_VALID => "Completed and validated",
                project_db::VALIDATE_INVALID => "Completed, marked as invalid",
                3 => "Completed, can't validate",
                project_db::VALIDATE_INCONCLUSIVE => "Completed, validation inconclusive",
                5 => "Completed, too late to validate",
                _ => "Completed",
            },
            2 => "Couldn't send",
            project_db::OUTCOME_CLIENT_ERROR => "Error while computing",
            project_db::OUTCOME_NO_REPLY => "Timed out - no response",
            project_db::OUTCOME_DIDNT_NEED => "Didn't need",
            project_db::OUTCOME_VALIDATE_ERROR => "Validate error",
            7 => "Abandoned",
            _ => "Unknown",
        },
        _ => "Unknown",
    }
}

fn query_job(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut) -> Step {
    out.start("query_job");
    let user = authenticate(c, r, Access::Files)?;
    let wu = project_db::wu_by_id(c, r.int("job_id"))?.ok_or_else(|| xml_fail("no such job"))?;
    let owner = project_db::batch_by_id(c, wu.batch)?.map(|b| b.user_id);
    if owner != Some(user.id) {
        return Err(xml_fail("not owner"));
    }
    for x in project_db::results_of_wu(c, wu.id)? {
        let mut s = format!(
            "    <instance>\n        <name>{}</name>\n        <id>{}</id>\n        <state>{}</state>\n",
            x.name,
            x.id,
            instance_state_text(&x)
        );
        if x.server_state == project_db::RS_OVER {
            for f in x.output_files.iter().filter(|f| !f.is_empty()) {
                if let Ok(m) = std::fs::metadata(ctx.dirs.upload.join(f)) {
                    if m.is_file() {
                        let _ = write!(s, "        <outfile>\n            <size>{}</size>\n        </outfile>\n", m.len());
                    }
                }
            }
        }
        s.push_str("</instance>\n");
        out.push(&s);
    }
    out.push("</query_job>\n");
    Ok(())
}

fn query_completed_job(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut) -> Step {
    out.start("query_completed_job");
    let user = authenticate(c, r, Access::Files)?;
    let wu = project_db::wu_by_name(c, r.str("job_name"))?.ok_or_else(|| xml_fail("no such job"))?;
    let owner = project_db::batch_by_id(c, wu.batch)?.map(|b| b.user_id);
    if owner != Some(user.id) {
        return Err(xml_fail("not owner"));
    }
    out.push("<completed_job>\n");
    out.push(&format!("   <error_mask>{}</error_mask>\n", wu.error_mask));
    let instance = if wu.canonical_resultid != 0 {
        out.push(&format!("   <canonical_resultid>{}</canonical_resultid>\n", wu.canonical_resultid));
        project_db::result_by_id(c, wu.canonical_resultid)?
    } else {
        match ctx.cfg.quirks.query_completed_job {
            CompletedJobMode::PhpGe81 => {
                // The instance query is invalid SQL; PHP >= 8.1 dies on it.
                let root = ctx.php_root();
                let mut s = format!(
                    "<br />\n<b>Warning</b>:  Undefined variable $job_id in <b>{root}/html/user/submit_rpc_handler.php</b> on line <b>893</b><br />\n"
                );
                s.push_str(&replies::php_fatal(
                    &root,
                    "Uncaught mysqli_sql_exception: You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near '' at line 1",
                    &[
                        ("inc/db_conn.inc", 67, "mysqli-&gt;query()"),
                        ("inc/db_conn.inc", 119, "DbConn-&gt;do_query()"),
                        ("inc/db_conn.inc", 137, "DbConn-&gt;enum_general()"),
                        ("inc/db_conn.inc", 141, "DbConn-&gt;enum_fields()"),
                        ("inc/boinc_db.inc", 379, "DbConn-&gt;enum()"),
                        ("user/submit_rpc_handler.php", 893, "BoincResult::enum()"),
                        ("user/submit_rpc_handler.php", 1123, "query_completed_job()"),
                    ],
                ));
                return Err(Fail::Fatal(s));
            }
            CompletedJobMode::PhpLt81 => None,
            CompletedJobMode::Intended => {
                let last = project_db::results_of_wu(c, wu.id)?.into_iter().rev().find(|x| {
                    matches!(x.outcome, project_db::OUTCOME_SUCCESS | project_db::OUTCOME_CLIENT_ERROR | project_db::OUTCOME_VALIDATE_ERROR)
                });
                if let Some(x) = &last {
                    out.push(&format!("   <error_resultid>{}</error_resultid>\n", x.id));
                }
                last
            }
        }
    };
    if let Some(x) = instance {
        out.push(&format!(
            "   <exit_status>{}</exit_status>\n   <elapsed_time>{}</elapsed_time>\n   <cpu_time>{}</cpu_time>\n   <stderr_out><![CDATA[\n{}   ]]></stderr_out>\n",
            x.exit_status,
            float(x.elapsed_time),
            float(x.cpu_time),
            ctx.html(&x.stderr_out)
        ));
    }
    out.push("</completed_job>\n        </query_completed_job>\n    ");
    Ok(())
}

fn abort_jobs(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    let _ = ctx;
    out.start("abort_jobs");
    let user = authenticate(c, r, Access::Files)?;
    for el in r.all("job_name") {
        let shown = php::sql_escape(&el.text);
        let wu = project_db::wu_by_name(c, &el.text)?.ok_or_else(|| xml_fail(format!("no job {shown}")))?;
        if wu.batch == 0 {
            return Err(xml_fail(format!("job {shown} is not part of a batch")));
        }
        let owner = project_db::batch_by_id(c, wu.batch)?.map(|b| b.user_id);
        if owner != Some(user.id) {
            return Err(xml_fail("not owner of batch"));
        }
        out.push(&format!("<aborted {shown}>\n"));
        project_db::abort_wu(c, &wu, now)?;
    }
    out.push("<success>1</success>\n        </abort_jobs>\n    ");
    Ok(())
}

fn abort_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("abort_batch");
    let user = authenticate(c, r, Access::Files)?;
    let b = get_batch(ctx, c, r)?;
    if b.user_id != user.id {
        return Err(xml_fail("not owner"));
    }
    lifecycle::abort_batch(c, &b, now)?;
    out.push("<success>1</success>\n        </abort_batch>\n    ");
    Ok(())
}

fn retire_batch(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("retire_batch");
    let user = authenticate(c, r, Access::Files)?;
    let b = get_batch(ctx, c, r)?;
    if b.user_id != user.id {
        return Err(xml_fail("not owner of batch"));
    }
    lifecycle::retire_batch(c, b, now)?;
    out.push("<success>1</success>\n        </retire_batch>\n    ");
    Ok(())
}

fn set_expire_time(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut) -> Step {
    out.start("set_expire_time");
    let user = authenticate(c, r, Access::Files)?;
    let b = get_batch(ctx, c, r)?;
    if b.user_id != user.id {
        return Err(xml_fail("not owner of batch"));
    }
    c.prepare_cached("UPDATE batch SET expire_time = ?1 WHERE id = ?2")?.execute(params![r.float("expire_time"), b.id])?;
    out.push("<success>1</success></set_expire_time>\n");
    Ok(())
}
