//! `job_file.php`: `query_files` and `upload_files`, with the file/batch
//! associations and the real server's fatal errors on duplicate inserts.

use rusqlite::{params, Connection};

use super::{authenticate, valid_filename, Access};
use crate::ctx::Ctx;
use crate::files;
use crate::form::{FilePart, Form};
use crate::project_db;
use crate::replies::{php_duplicate_entry, php_notice, project_down, xml_fail, Fail, Reply, XmlOut, XML_CONTENT_TYPE};
use crate::xmlreq::Element;

type Step = Result<(), Fail>;

/// Where job_file.php reports an unparsable request (BOINC master).
const PARSE_ERROR_LINE: u32 = 302;

/// Runs the script on a parsed request and the POST form's file parts (a
/// form PHP dropped for `post_max_size` has no request and no files).
pub fn handle(ctx: &Ctx, c: &Connection, req: Result<Element, String>, form: &Form) -> Reply {
    let mut out = XmlOut::new();
    let root = ctx.php_root();
    let files = &form.files;
    let res = match &req {
        Err(raw) => {
            if form.dropped.is_some() {
                // `$_POST['request']` is not there at all: PHP warns on the
                // way to the parse error (as captured).
                out.push(&php_notice(&root, "Warning", "Undefined array key \"request\"", "user/job_file.php", 299));
                for (call, arg, file, line) in [
                    ("simplexml_load_string", "data", "inc/util_basic.inc", 325),
                    ("htmlspecialchars", "string", "user/job_file.php", PARSE_ERROR_LINE),
                ] {
                    let msg = format!("{call}(): Passing null to parameter #1 (${arg}) of type string is deprecated");
                    out.push(&php_notice(&root, "Deprecated", &msg, file, line));
                }
            }
            Err(Fail::XmlAt(format!("can't parse request message: {raw}"), format!("{root}/html/user/job_file.php"), PARSE_ERROR_LINE))
        }
        Ok(r) if ctx.web_stopped() && (r.name == "query_files" || r.name == "upload_files") => {
            out.start(if r.name == "query_files" { "query_files" } else { "upload_files" });
            Err(project_down())
        }
        Ok(r) => {
            let now = ctx.clock.now();
            match r.name.as_str() {
                "query_files" => query_files(ctx, c, r, &mut out, now),
                "upload_files" => upload_files(ctx, c, r, files, &mut out, now),
                _ => Err(xml_fail("no such action")),
            }
        }
    };
    Reply::ok(XML_CONTENT_TYPE, out.finish(res, &ctx.php_root()))
}

fn query_files(ctx: &Ctx, c: &Connection, r: &Element, out: &mut XmlOut, now: f64) -> Step {
    out.start("query_files");
    authenticate(c, r, Access::Files)?;
    let delete_time = r.int("delete_time") as f64;
    let batch_id = r.int("batch_id");
    let mut absent = Vec::new();
    for (i, el) in r.all("phys_name").enumerate() {
        let name = el.text.as_str();
        if !valid_filename(name) {
            return Err(xml_fail("bad filename"));
        }
        let jf = project_db::job_file_by_name(c, name)?;
        if let Some(jf) = &jf {
            if jf.delete_time < delete_time {
                c.prepare_cached("UPDATE job_file SET delete_time = ?1 WHERE id = ?2")?.execute(params![delete_time, jf.id])?;
                if ctx.cfg.quirks.query_files_delete_time_error {
                    // The script tests the update's result the wrong way round.
                    return Err(xml_fail("job_file->update() failed: "));
                }
            }
        }
        if ctx.dirs.download.join(name).is_file() {
            let jf_id = match &jf {
                Some(jf) => jf.id,
                None => project_db::insert_job_file(c, name, now, delete_time)?
                    .ok_or_else(|| xml_fail(format!("query_files(): BoincJobFile::insert({name}) failed: ")))?,
            };
            if batch_id != 0 && !project_db::insert_assoc(c, jf_id, batch_id)? {
                return Err(Fail::Fatal(php_duplicate_entry(
                    &ctx.php_root(),
                    &format!("{jf_id}-{batch_id}"),
                    "job_file_id",
                    145,
                    ("user/job_file.php", 146, "BoincBatchFileAssoc::insert()"),
                    ("user/job_file.php", 307, "query_files()"),
                )));
            }
        } else {
            if let Some(jf) = &jf {
                project_db::delete_job_file(c, jf.id)?;
            }
            absent.push(i);
        }
    }
    out.push("<absent_files>\n");
    for i in absent {
        out.push(&format!("<file>{i}</file>\n"));
    }
    out.push("</absent_files>\n        </query_files>\n    ");
    Ok(())
}

/// The script's clean-up before an error: PHP kept no temp file for a part
/// over upload_max_filesize or an empty one, so unlinking it warns (as
/// captured).
fn delete_uploaded_files(ctx: &Ctx, parts: &[FilePart], out: &mut XmlOut) {
    for _ in parts.iter().filter(|p| p.too_big || p.no_file()) {
        out.push(&php_notice(&ctx.php_root(), "Warning", "unlink(): No such file or directory", "user/job_file.php", 177));
    }
}

fn upload_files(ctx: &Ctx, c: &Connection, r: &Element, parts: &[FilePart], out: &mut XmlOut, now: f64) -> Step {
    out.start("upload_files");
    authenticate(c, r, Access::Files)?;
    let delete_time = r.int("delete_time") as f64;
    let batch_id = r.int("batch_id");
    let names: Vec<&str> = r.all("phys_name").map(|e| e.text.as_str()).collect();
    if parts.len() != names.len() {
        delete_uploaded_files(ctx, parts, out);
        return Err(xml_fail(format!("# of uploaded files ({}) doesn't agree with request ({})", parts.len(), names.len())));
    }
    if names.iter().any(|n| !valid_filename(n)) {
        return Err(xml_fail("bad filename"));
    }
    // Every part is checked, in order, before any is stored.
    if let Some(part) = parts.iter().find(|p| p.too_big || p.no_file()) {
        delete_uploaded_files(ctx, parts, out);
        let reason = if part.too_big { "The uploaded file exceeds upload_max_filesize of php.ini." } else { "No file was uploaded." };
        return Err(xml_fail(format!("{} upload failed because: {reason}", part.filename)));
    }
    for (part, name) in parts.iter().zip(&names) {
        tracing::debug!(file = %name, client_name = %part.filename, bytes = part.data.len(), "upload");
        let path = ctx.dirs.download.join(name);
        if path.is_file() {
            // Same size and MD5: keep it; else the name is taken.
            let same = std::fs::metadata(&path).map(|m| m.len() == part.data.len() as u64).unwrap_or(false)
                && files::md5_file(&path).ok() == Some(files::md5_hex(&part.data));
            if !same {
                return Err(xml_fail(format!("file immutability violation for {name}")));
            }
        } else if files::write_atomic(&path, &part.data).is_err() {
            return Err(xml_fail("file operation failed; check permissions in download/*"));
        }
        let Some(jf_id) = project_db::insert_job_file(c, name, now, delete_time)? else {
            return Err(Fail::Fatal(php_duplicate_entry(
                &ctx.php_root(),
                name,
                "jf_name",
                124,
                ("user/job_file.php", 256, "BoincJobFile::insert()"),
                ("user/job_file.php", 310, "upload_files()"),
            )));
        };
        if batch_id != 0 && !project_db::insert_assoc(c, jf_id, batch_id)? {
            return Err(Fail::Fatal(php_duplicate_entry(
                &ctx.php_root(),
                &format!("{jf_id}-{batch_id}"),
                "job_file_id",
                145,
                ("user/job_file.php", 263, "BoincBatchFileAssoc::insert()"),
                ("user/job_file.php", 310, "upload_files()"),
            )));
        }
    }
    out.push("<success/>\n        </upload_files>\n    ");
    Ok(())
}
