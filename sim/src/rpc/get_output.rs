//! `get_output.php`: output files of finished jobs. Errors are plain text
//! `ERROR: …` with HTTP 200; only a real file carries `Content-Disposition`.

use std::collections::HashMap;
use std::io::Write as _;

use actix_web::http::StatusCode;
use rand::Rng;
use rusqlite::Connection;

use crate::ctx::{Ctx, ZipSpoil};
use crate::files;
use crate::project_db::{self, Instance, Res};
use crate::replies::{self, html_error_page, output_error, Reply};

/// The query string as PHP's `$_GET` (the last of repeated keys wins).
pub fn parse_query(q: &str) -> HashMap<String, String> {
    form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// The `cmd` of a request, for counting and fault injection.
pub fn command(q: &HashMap<String, String>) -> String {
    match q.get("cmd").map(String::as_str) {
        Some(c) if !c.is_empty() && c.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => c.to_string(),
        _ => "other".into(),
    }
}

enum Arg {
    Missing(Reply),
}

/// `get_str()`: missing or empty → an HTML error page.
fn get_str<'a>(q: &'a HashMap<String, String>, name: &str) -> Result<&'a str, Arg> {
    match q.get(name) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Arg::Missing(html_error_page(&format!("missing or bad parameter: {name}")))),
    }
}

/// `get_int()`: missing or not numeric → redirect to `missing_arg_<name>.html`.
fn get_int(q: &HashMap<String, String>, name: &str) -> Result<i64, Arg> {
    match q.get(name) {
        Some(v) if crate::php::is_numeric(v) => Ok(crate::php::to_int(v)),
        _ => Err(Arg::Missing(Reply {
            status: StatusCode::FOUND,
            content_type: replies::HTML_CONTENT_TYPE,
            body: Vec::new(),
            headers: vec![("Location", format!("missing_arg_{name}.html"))],
        })),
    }
}

/// Runs the script.
pub fn handle(ctx: &Ctx, c: &Connection, q: &HashMap<String, String>) -> Reply {
    if ctx.web_stopped() {
        return html_error_page("Project down for maintenance");
    }
    let res = (|| -> Result<Reply, Arg> {
        let cmd = get_str(q, "cmd")?;
        Ok(match cmd {
            "workunit_file" => {
                let wu_name = get_str(q, "wu_name")?;
                let file_num = get_int(q, "file_num")?;
                let auth = get_str(q, "auth_str")?;
                or_fatal(ctx, workunit_file(ctx, c, wu_name, file_num, auth))
            }
            "result_file" => {
                let name = get_str(q, "result_name")?;
                let file_num = get_int(q, "file_num")?;
                let auth = get_str(q, "auth_str")?;
                or_fatal(ctx, result_file(ctx, c, name, file_num, auth))
            }
            "workunit_files" => {
                let wu_id = get_int(q, "wu_id")?;
                let auth = get_str(q, "auth_str")?;
                or_fatal(ctx, workunit_files(ctx, c, wu_id, auth))
            }
            "batch_files" => {
                // A missing or zero batch_id means "look the batch up by
                // batch_name", which the real script reads as an int.
                let by = match q.get("batch_id").filter(|v| crate::php::is_numeric(v)).map(|v| crate::php::to_int(v)) {
                    Some(id) if id != 0 => BatchRef::Id(id),
                    _ => BatchRef::Name(get_int(q, "batch_name")?),
                };
                let auth = get_str(q, "auth_str")?;
                or_fatal(ctx, batch_files(ctx, c, by, auth))
            }
            _ => Reply::ok(replies::HTML_CONTENT_TYPE, "bad command\n"),
        })
    })();
    match res {
        Ok(r) => r,
        Err(Arg::Missing(r)) => r,
    }
}

fn or_fatal(ctx: &Ctx, r: Res<Reply>) -> Reply {
    r.unwrap_or_else(|e| {
        tracing::error!(error = %e, "get_output.php failed on the sim's store");
        Reply::ok(
            replies::HTML_CONTENT_TYPE,
            replies::php_fatal(
                &ctx.php_root(),
                &format!("Uncaught mysqli_sql_exception: {e}"),
                &[("inc/db_conn.inc", 67, "mysqli-&gt;query()")],
            ),
        )
    })
}

/// The owner's authenticator of a job, or the error to answer.
fn owner_auth(c: &Connection, batch_id: i64) -> Res<Result<String, Reply>> {
    let Some(b) = project_db::batch_by_id(c, batch_id)? else {
        return Ok(Err(output_error(&format!("no batch {batch_id}"))));
    };
    let Some(u) = project_db::user_by_id(c, b.user_id)? else {
        return Ok(Err(output_error(&format!("no user {}", b.user_id))));
    };
    Ok(Ok(u.authenticator))
}

/// Serves output `file_num` of an instance.
fn serve_output(ctx: &Ctx, x: &Instance, file_num: i64) -> Reply {
    let name = usize::try_from(file_num).ok().and_then(|i| x.output_files.get(i)).filter(|n| !n.is_empty());
    let path = match name {
        Some(n) => ctx.dirs.upload.join(n),
        None => ctx.dirs.upload.clone(),
    };
    match (name, std::fs::read(&path)) {
        (Some(n), Ok(data)) => replies::download(n, data),
        _ => output_error(&format!("no such file: {}", ctx.html(&path.display().to_string()))),
    }
}

fn workunit_file(ctx: &Ctx, c: &Connection, wu_name: &str, file_num: i64, auth: &str) -> Res<Reply> {
    let Some(wu) = project_db::wu_by_name(c, wu_name)? else {
        return Ok(output_error(&format!("no workunit {}", ctx.html(wu_name))));
    };
    let owner = match owner_auth(c, wu.batch)? {
        Ok(a) => a,
        Err(r) => return Ok(r),
    };
    if owner != auth {
        return Ok(output_error("bad authenticator"));
    }
    let canonical = match wu.canonical_resultid {
        0 => None,
        id => project_db::result_by_id(c, id)?,
    };
    let Some(x) = canonical else {
        return Ok(output_error(&format!("no canonical result for wu {}", ctx.html(&wu.name))));
    };
    Ok(serve_output(ctx, &x, file_num))
}

fn result_file(ctx: &Ctx, c: &Connection, name: &str, file_num: i64, auth: &str) -> Res<Reply> {
    let Some(x) = project_db::result_by_name(c, name)? else {
        return Ok(output_error(&format!("no job instance {}", ctx.html(name))));
    };
    let Some(wu) = project_db::wu_by_id(c, x.workunitid)? else {
        return Ok(output_error(&format!("no job {}", x.workunitid)));
    };
    let owner = match owner_auth(c, wu.batch)? {
        Ok(a) => a,
        Err(r) => return Ok(r),
    };
    if files::md5_hex(format!("{owner}{}", x.name).as_bytes()) != auth {
        return Ok(output_error("bad authenticator"));
    }
    if file_num >= x.output_files.len() as i64 {
        return Ok(output_error(&format!("bad file num: {file_num} > {}", x.output_files.len())));
    }
    Ok(serve_output(ctx, &x, file_num))
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..6).map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char).collect()
}

/// A zip of the canonical outputs of `wus` (flat, physical names), in job
/// order; `None` when there is nothing to put in it (the real script then
/// sends an empty file: `zip` never made the archive).
fn zip_outputs(ctx: &Ctx, c: &Connection, wus: &[project_db::Workunit], spoil: Option<ZipSpoil>) -> Res<Option<Vec<u8>>> {
    use zip::write::SimpleFileOptions;
    let mut files = Vec::new();
    for wu in wus.iter().filter(|w| w.canonical_resultid != 0) {
        let Some(x) = project_db::result_by_id(c, wu.canonical_resultid)? else {
            continue;
        };
        for n in x.output_files.iter().filter(|n| !n.is_empty()) {
            if let Ok(data) = std::fs::read(ctx.dirs.upload.join(n)) {
                files.push((n.clone(), data));
            }
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    match spoil {
        Some(ZipSpoil::Garbage) => return Ok(Some(b"PK\x03\x04 this is not a zip archive".to_vec())),
        Some(ZipSpoil::Escape) => files.push(("../escaped".into(), b"outside\n".to_vec())),
        Some(ZipSpoil::DropFirst) => drop(files.remove(0)),
        Some(ZipSpoil::Corrupt) | None => {}
    }
    // Deflated as `zip` does; stored when spoiled, so that the entry's
    // bytes can be found and changed.
    let mut opts = SimpleFileOptions::default();
    if spoil == Some(ZipSpoil::Corrupt) {
        opts = opts.compression_method(zip::CompressionMethod::Stored);
    }
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in &files {
        w.start_file(name.as_str(), opts).map_err(std::io::Error::other)?;
        w.write_all(data)?;
    }
    let mut bytes = w.finish().map_err(std::io::Error::other)?.into_inner();
    if let (Some(ZipSpoil::Corrupt), Some((name, data))) = (spoil, files.first()) {
        // The first entry's data follows its local header and name.
        let at = bytes.windows(name.len()).position(|w| w == name.as_bytes()).map(|i| i + name.len());
        if let Some(b) = at.filter(|_| !data.is_empty()).and_then(|i| bytes.get_mut(i)) {
            *b ^= 0x20;
        }
    }
    Ok(Some(bytes))
}

fn workunit_files(ctx: &Ctx, c: &Connection, wu_id: i64, auth: &str) -> Res<Reply> {
    let Some(wu) = project_db::wu_by_id(c, wu_id)? else {
        return Ok(output_error(&format!("no workunit {wu_id}")));
    };
    let owner = match owner_auth(c, wu.batch)? {
        Ok(a) => a,
        Err(r) => return Ok(r),
    };
    if files::md5_hex(format!("{owner}{wu_id}").as_bytes()) != auth {
        return Ok(output_error("bad authenticator"));
    }
    if wu.canonical_resultid == 0 {
        return Ok(output_error(&format!("no canonical result for wu {}", ctx.html(&wu.name))));
    }
    let name = format!("boinc_wu_{}_{}.zip", wu.name, random_suffix());
    let data = zip_outputs(ctx, c, std::slice::from_ref(&wu), None)?;
    Ok(replies::download(&name, data.unwrap_or_default()))
}

/// How a batch_files request names its batch.
enum BatchRef {
    Id(i64),
    /// `batch_name`, read as an int by the real script (so only a batch
    /// named by digits is ever found).
    Name(i64),
}

fn batch_files(ctx: &Ctx, c: &Connection, by: BatchRef, auth: &str) -> Res<Reply> {
    let batch = match by {
        BatchRef::Id(id) => project_db::batch_by_id(c, id)?.ok_or_else(|| id.to_string()),
        BatchRef::Name(n) => project_db::batch_by_name(c, &n.to_string())?.ok_or_else(|| n.to_string()),
    };
    let batch = match batch {
        Ok(b) => b,
        Err(named) => return Ok(output_error(&format!("no batch {named}"))),
    };
    let Some(owner) = project_db::user_by_id(c, batch.user_id)? else {
        return Ok(output_error(&format!("no user {}", batch.user_id)));
    };
    // This command's own wording (result_file and workunit_files say
    // "bad authenticator").
    if files::md5_hex(format!("{}{}", owner.authenticator, batch.id).as_bytes()) != auth {
        return Ok(output_error("bad auth str"));
    }
    let wus = project_db::wus_of_batch(c, batch.id)?;
    let name = format!("boinc_batch_{}.zip", random_suffix());
    let spoil = *ctx.batch_zip_spoil.lock().unwrap_or_else(|e| e.into_inner());
    let data = zip_outputs(ctx, c, &wus, spoil)?;
    Ok(replies::download(&name, data.unwrap_or_default()))
}
