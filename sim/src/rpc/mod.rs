//! The three PHP scripts, as synchronous functions of (database, request)
//! → reply bytes. The HTTP glue (`crate::http`) reads the request, injects
//! faults and runs these on a blocking thread.

pub mod get_output;
pub mod job_file;
pub mod submit_rpc;

use rusqlite::Connection;

use crate::ctx::Ctx;
use crate::php;
use crate::project_db::{self, Batch, Res, User};
use crate::replies::{xml_fail, Fail};
use crate::xmlreq::{self, Element};

/// What a request needs the user to be allowed to do.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    /// Submit to this app (`get_templates`, `create_batch`, `submit_batch`,
    /// `estimate_batch`).
    App(i64),
    /// Anything else: a `user_submit` record is enough.
    Files,
}

/// `check_remote_submit_permissions()`: authenticator, user, rights.
pub fn authenticate(c: &Connection, r: &Element, access: Access) -> Result<User, Fail> {
    let auth = r.str("authenticator");
    if !php::truthy(auth) {
        return Err(xml_fail("no authenticator"));
    }
    let user = project_db::user_by_auth(c, auth)?.ok_or_else(|| xml_fail("bad authenticator"))?;
    let submit_all = project_db::user_submit_all(c, user.id)?;
    match (access, submit_all) {
        (Access::App(_), None) => Err(xml_fail("no submit access")),
        (Access::Files, None) => Err(xml_fail("no file access")),
        (Access::App(app_id), Some(false)) => {
            if project_db::user_submit_app(c, user.id, app_id)? {
                Ok(user)
            } else {
                Err(xml_fail("no submit access"))
            }
        }
        (_, Some(_)) => Ok(user),
    }
}

/// `is_valid_filename()`: 1–255 of `A-Za-z0-9_.-` and space. `.` and `..`
/// are refused too (a real server would hit the directory itself).
pub fn valid_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b' '))
}

/// `BoincBatch::lookup_name()` after the scripts' double escaping: the
/// oldest batch of that name; never found if escaping changes the name
/// (quirk `double_escaped_names`).
pub fn batch_named(ctx: &Ctx, c: &Connection, name: &str) -> Res<Option<Batch>> {
    if ctx.cfg.quirks.double_escaped_names && php::needs_sql_escape(name) {
        return Ok(None);
    }
    project_db::batch_by_name(c, name)
}

/// `get_batch()`: by `batch_id` if given, else by `batch_name`.
pub fn get_batch(ctx: &Ctx, c: &Connection, r: &Element) -> Result<Batch, Fail> {
    // PHP's empty() on an element: no content, or just the text "0".
    let given = |e: &&Element| !e.children.is_empty() || php::truthy(&e.text);
    let by_id = r.child("batch_id").filter(given);
    let by_name = r.child("batch_name").filter(given);
    let batch = if by_id.is_some() {
        project_db::batch_by_id(c, r.int("batch_id"))?
    } else if by_name.is_some() {
        batch_named(ctx, c, r.str("batch_name"))?
    } else {
        return Err(xml_fail("batch not specified"));
    };
    batch.ok_or_else(|| xml_fail("no such batch"))
}

/// A job's status as `query_batch2` derives it (spec §6).
pub fn job_status(canonical: i64, error_mask: i64, ever_sent: bool) -> &'static str {
    if canonical != 0 {
        "DONE"
    } else if error_mask != 0 {
        "ERROR"
    } else if ever_sent {
        "IN_PROGRESS"
    } else {
        "UNSENT"
    }
}

/// The request as `simplexml_load_string($_POST['request'])` sees it:
/// `Err` carries the text for "can't parse request message: …".
pub fn parse_request(ctx: &Ctx, raw: Option<&[u8]>) -> Result<Element, String> {
    let raw = raw.unwrap_or(b"");
    let unparsable = || ctx.html(&String::from_utf8_lossy(raw));
    match xmlreq::parse(raw) {
        Ok(el) if ctx.cfg.quirks.reject_empty_root && !el.non_empty => Err(unparsable()),
        Ok(el) => Ok(el),
        Err(_) => Err(unparsable()),
    }
}

/// The name an RPC is counted and fault-injected under:
/// `"<script>:<root element>"`, `"<script>:unparsable"` for a request
/// that does not parse.
pub fn endpoint(script: &str, parsed: &Result<Element, String>) -> String {
    match parsed {
        Ok(el) => {
            let rpc: String = el.name.chars().map(|c| if c == ':' || c.is_whitespace() { '_' } else { c }).collect();
            format!("{script}:{rpc}")
        }
        Err(_) => format!("{script}:unparsable"),
    }
}
