//! Two pages a real server shows without a login.
//!
//! `server_status.php?xml=1`: the project status page a real server shows
//! without a login. The sim prints its `<tasks_by_app>` part, the list of
//! the project's apps (a client learns the app names from it: the
//! remote-submission API has no call that lists them); the daemon status
//! and the database counts of a real page are left out.

use crate::ctx::Ctx;
use crate::replies::{Reply, XML_CONTENT_TYPE, XML_DECL};

/// The page for a query string; `None` for the HTML page (not simulated).
pub fn page(ctx: &Ctx, query: &str) -> Option<Reply> {
    let xml = form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "xml" && !v.is_empty() && v != "0");
    if !xml {
        return None;
    }
    let mut out = String::from(XML_DECL);
    out.push_str("<server_status>\n<database_file_states>\n<tasks_by_app>\n");
    for app in &ctx.apps {
        out.push_str(&format!("<app>\n   <id>{}</id>\n   <name>{}</name>\n</app>\n", app.id, ctx.html(&app.spec.name)));
    }
    out.push_str("</tasks_by_app>\n</database_file_states>\n</server_status>\n");
    Some(Reply::ok(XML_CONTENT_TYPE, out))
}

/// `get_project_config.php`: the project's name, its server version (the
/// sim's own) and whether its web site is stopped. A real page also lists
/// platforms and account rules; the sim leaves them out.
pub fn project_config(ctx: &Ctx) -> Reply {
    let out = format!(
        "{XML_DECL}<project_config>\n    <name>{}</name>\n    <master_url>{}</master_url>\n<server_version>boinc-sim {}</server_version>\n    <web_stopped>{}</web_stopped>\n</project_config>\n",
        ctx.html(&ctx.cfg.project_name),
        ctx.html(&ctx.project_url),
        env!("CARGO_PKG_VERSION"),
        u8::from(ctx.web_stopped()),
    );
    Reply::ok(XML_CONTENT_TYPE, out)
}
