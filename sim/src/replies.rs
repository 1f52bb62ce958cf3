//! The exact bytes the PHP scripts print: the XML declaration, the outer
//! tag, `<error>` blocks placed as `xml_error()` places them, PHP fatal
//! error pages, and the fixed pieces of each reply.

use actix_web::http::StatusCode;

use crate::project_db::{Batch, ProjectDbError};

pub const XML_DECL: &str = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n";
/// What Apache + PHP send for `header('Content-type: text/xml')`.
pub const XML_CONTENT_TYPE: &str = "text/xml;charset=UTF-8";
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=UTF-8";

/// A finished reply, before fault injection.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply { status: StatusCode::OK, content_type, body: body.into(), headers: Vec::new() }
    }
}

/// Why a script stopped early.
#[derive(Debug)]
pub enum Fail {
    /// `xml_error(-1, msg)`.
    Xml(String),
    /// `xml_error(num, msg)` with another error number (-183 project down).
    XmlNum(i32, String),
    /// `xml_error(-1, msg, __FILE__, __LINE__)` (job_file.php).
    XmlAt(String, String, u32),
    /// A PHP fatal error: this text follows whatever was printed.
    Fatal(String),
    /// The sim's own trouble, shown as a PHP fatal error.
    Store(ProjectDbError),
}

impl From<ProjectDbError> for Fail {
    fn from(e: ProjectDbError) -> Self {
        Fail::Store(e)
    }
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Store(e.into())
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        Fail::Store(e.into())
    }
}

pub fn xml_fail(msg: impl Into<String>) -> Fail {
    Fail::Xml(msg.into())
}

/// What a script says when the project's web stop flag is set (its first
/// database access fails).
pub fn project_down() -> Fail {
    Fail::XmlNum(-183, "project down for maintenance".into())
}

/// What a PHP script has printed so far, and its open outer tag.
pub struct XmlOut {
    pub buf: String,
    outer: Option<&'static str>,
}

impl Default for XmlOut {
    fn default() -> Self {
        Self::new()
    }
}

impl XmlOut {
    /// `xml_header()`.
    pub fn new() -> Self {
        XmlOut { buf: String::from(XML_DECL), outer: None }
    }

    /// `xml_start_tag(tag)`.
    pub fn start(&mut self, tag: &'static str) {
        self.buf.push('<');
        self.buf.push_str(tag);
        self.buf.push_str(">\n");
        self.outer = Some(tag);
    }

    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
    }

    /// The body for the script's result: as printed, or with the error /
    /// fatal error it ended on.
    pub fn finish(mut self, res: Result<(), Fail>, php_root: &str) -> Vec<u8> {
        match res {
            Ok(()) => {}
            Err(Fail::Xml(msg)) => self.error(-1, &msg, None),
            Err(Fail::XmlNum(num, msg)) => self.error(num, &msg, None),
            Err(Fail::XmlAt(msg, file, line)) => self.error(-1, &msg, Some((&file, line))),
            Err(Fail::Fatal(text)) => self.buf.push_str(&text),
            Err(Fail::Store(e)) => {
                tracing::error!(error = %e, "request failed on the sim's store");
                self.buf.push_str(&php_fatal(
                    php_root,
                    &format!("Uncaught mysqli_sql_exception: {e}"),
                    &[("inc/db_conn.inc", 67, "mysqli-&gt;query()")],
                ));
            }
        }
        self.buf.into_bytes()
    }

    fn error(&mut self, num: i32, msg: &str, at: Option<(&str, u32)>) {
        self.buf.push_str(&format!("<error>\n    <error_num>{num}</error_num>\n    <error_msg>"));
        self.buf.push_str(msg);
        self.buf.push_str("</error_msg>\n");
        if let Some((file, line)) = at {
            self.buf.push_str(&format!("    <file>{file}</file>\n    <line>{line}</line>\n"));
        }
        self.buf.push_str("</error>\n");
        if let Some(tag) = self.outer {
            self.buf.push_str(&format!("</{tag}>\n"));
        }
    }
}

/// A PHP warning or deprecation notice as PHP 8 prints it (html_errors on);
/// `file` relative to the project's `html/`.
pub fn php_notice(php_root: &str, kind: &str, message: &str, file: &str, line: u32) -> String {
    format!("<br />\n<b>{kind}</b>:  {message} in <b>{php_root}/html/{file}</b> on line <b>{line}</b><br />\n")
}

/// A PHP "Fatal error" block as PHP 8 prints it (html_errors on): the
/// message, the stack trace (frames: file relative to `html/`, line, call),
/// and where it was thrown (the first frame).
pub fn php_fatal(php_root: &str, message: &str, frames: &[(&str, u32, &str)]) -> String {
    let (tfile, tline) = frames.first().map(|f| (f.0, f.1)).unwrap_or(("inc/db_conn.inc", 67));
    let mut s = format!("<br />\n<b>Fatal error</b>:  {message} in {php_root}/html/{tfile}:{tline}\nStack trace:\n");
    for (i, (file, line, call)) in frames.iter().enumerate() {
        s.push_str(&format!("#{i} {php_root}/html/{file}({line}): {call}\n"));
    }
    s.push_str(&format!("#{} {{main}}\n", frames.len()));
    s.push_str(&format!("  thrown in <b>{php_root}/html/{tfile}</b> on line <b>{tline}</b><br />\n"));
    s
}

/// A duplicate-key insert through `DbConn::insert()`, called from
/// `caller` (file, line, call) inside `entry` (file, line, call).
pub fn php_duplicate_entry(
    php_root: &str,
    value: &str,
    key: &str,
    insert_line: u32,
    caller: (&str, u32, &str),
    entry: (&str, u32, &str),
) -> String {
    php_fatal(
        php_root,
        &format!("Uncaught mysqli_sql_exception: Duplicate entry '{value}' for key '{key}'"),
        &[
            ("inc/db_conn.inc", 67, "mysqli-&gt;query()"),
            ("inc/db_conn.inc", 157, "DbConn-&gt;do_query()"),
            ("inc/submit_db.inc", insert_line, "DbConn-&gt;insert()"),
            caller,
            entry,
        ],
    )
}

/// The batch fields of `query_batches` / `query_batch` (`batch_xml()`).
pub fn batch_xml(b: &Batch, app_name: &str, cpu_time: Option<f64>) -> String {
    use crate::php::float;
    let mut s = format!(
        "\n        <id>{}</id>\n        <create_time>{}</create_time>\n        <expire_time>{}</expire_time>\n        <est_completion_time>{}</est_completion_time>\n        <njobs>{}</njobs>\n        <fraction_done>{}</fraction_done>\n        <nerror_jobs>{}</nerror_jobs>\n        <state>{}</state>\n        <completion_time>{}</completion_time>\n        <credit_estimate>{}</credit_estimate>\n        <credit_canonical>{}</credit_canonical>\n        <name>{}</name>\n        <app_name>{}</app_name>\n",
        b.id,
        b.create_time,
        float(b.expire_time),
        float(b.est_completion_time),
        b.njobs,
        float(b.fraction_done),
        b.nerror_jobs,
        b.state,
        float(b.completion_time),
        float(b.credit_estimate),
        float(b.credit_canonical),
        b.name,
        app_name,
    );
    if let Some(t) = cpu_time {
        s.push_str(&format!("        <total_cpu_time>{}</total_cpu_time>\n", float(t)));
    }
    s
}

/// BOINC's `error_page()`: an HTML page, HTTP 200.
pub fn html_error_page(msg: &str) -> Reply {
    Reply::ok(
        HTML_CONTENT_TYPE,
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<title>Unable to handle request</title>\n</head>\n<body>\n<h2>Unable to handle request</h2>\n{msg}\n</body>\n</html>\n"
        ),
    )
}

/// `die("ERROR: ...")` in get_output.php: plain text, HTTP 200, no newline.
pub fn output_error(msg: &str) -> Reply {
    Reply::ok(HTML_CONTENT_TYPE, format!("ERROR: {msg}"))
}

/// `do_download()`: the file with its download headers.
pub fn download(name: &str, data: Vec<u8>) -> Reply {
    Reply {
        status: StatusCode::OK,
        content_type: "application/octet-stream",
        headers: vec![
            ("Content-Description", "File Transfer".into()),
            ("Content-Disposition", format!("attachment; filename={name}")),
            ("Content-Transfer-Encoding", "binary".into()),
            ("Expires", "0".into()),
            ("Cache-Control", "must-revalidate, post-check=0, pre-check=0".into()),
            ("Pragma", "public".into()),
        ],
        body: data,
    }
}
