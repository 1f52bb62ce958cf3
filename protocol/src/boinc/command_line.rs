//! Job arguments as a BOINC command line, and what BOINC cannot carry.
//!
//! On a real server (seen with an app that prints its argv) the command line
//! goes through three hands:
//! 1. `submit_rpc_handler.php` writes ` --command_line "<text>"` per job to
//!    `create_work --stdin`, which splits that line with BOINC's
//!    `parse_command_line()` (a word starting with `'` or `"` runs to the
//!    next identical quote, no escapes): a raw `"` ends the wrapper early, a
//!    raw backslash is dropped, a line break ends the job's line;
//! 2. `create_work` inserts the text into `workunit.xml_doc` without SQL
//!    escaping: a raw `'` is an SQL syntax error and the whole submit fails;
//! 3. the client XML-unescapes `<command_line>` (`&lt;`, `&amp;`, `&quot;`,
//!    `&#N;`, ...) and splits the result with `parse_command_line()` into the
//!    app's argv.
//!
//! So each argument is written as its word for step 3 (grouped in `'...'`,
//! or in `"..."` when it holds a `'`), and every character the first two
//! steps would spoil is written as an XML character reference, which they
//! pass untouched. What is stored is the text PHP receives; the request
//! document escapes it once more (`&#39;` travels as `&amp;#39;`).
//! Only a word that must be grouped and holds both kinds of quote cannot be
//! carried (a group has no escapes), nor an empty argument (the splitter
//! takes the character after an opening quote into the word unlooked-at,
//! so `''` does not close: seen on a real server, it swallows the rest of
//! the line), nor a NUL (the app's argv is C strings).

use std::fmt::{self, Write};

/// Why an argument cannot reach the app intact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncarriable {
    /// White space or a leading quote, and both `'` and `"`.
    BothQuotes,
    Empty,
    Nul,
}

impl fmt::Display for Uncarriable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Uncarriable::BothQuotes => {
                "it must be quoted (it holds white space or starts with a quote) and holds both ' and \", \
                 which BOINC cannot quote together"
            }
            Uncarriable::Empty => "it is empty, and BOINC's command-line splitter cannot pass an empty argument",
            Uncarriable::Nul => "it holds a NUL character",
        })
    }
}

/// An argument of a job that BOINC cannot carry: which one and why. One
/// line, however long or strange the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument {position} ({}) can't be passed to a BOINC app: {why}", shown(arg))]
pub struct ArgRefused {
    /// 1-based position among the job's arguments.
    pub position: usize,
    pub arg: String,
    pub why: Uncarriable,
}

/// The argument as Rust debug text (escapes keep it on one line), cut to
/// 60 characters.
fn shown(arg: &str) -> String {
    const MAX: usize = 60;
    match arg.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &arg[..cut]),
        None => format!("{arg:?}"),
    }
}

/// C's `isspace` in the "C" locale: what `parse_command_line` splits on.
pub fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// One argument as the text of its word in the stored command line: the
/// word the client must split (grouped when needed), with every character
/// that `create_work` or its SQL would spoil as a character reference.
pub fn quote_arg(arg: &str) -> Result<String, Uncarriable> {
    if arg.is_empty() {
        return Err(Uncarriable::Empty);
    }
    if arg.contains('\0') {
        return Err(Uncarriable::Nul);
    }
    let grouped = arg.chars().any(is_c_space) || arg.starts_with(['\'', '"']);
    let quote = match (grouped, arg.contains('\''), arg.contains('"')) {
        (false, _, _) => None,
        (true, false, _) => Some('\''),
        (true, true, false) => Some('"'),
        (true, true, true) => return Err(Uncarriable::BothQuotes),
    };
    let mut out = String::with_capacity(arg.len() + 12);
    if let Some(q) = quote {
        push_ref(&mut out, q);
    }
    for c in arg.chars() {
        push_ref(&mut out, c);
    }
    if let Some(q) = quote {
        push_ref(&mut out, q);
    }
    Ok(out)
}

/// `c` as the client's `xml_unescape` reads it back, never raw when raw
/// would be spoiled on the way: quotes and backslash (create_work's split,
/// the SQL insert), XML's own specials, and control characters (a line
/// break would end the job's line). Everything else, non-ASCII included,
/// goes as it is.
fn push_ref(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        c if matches!(c, '\'' | '"' | '\\') || c.is_ascii_control() => {
            // Writing to a String cannot fail.
            let _ = write!(out, "&#{};", u32::from(c));
        }
        c => out.push(c),
    }
}

/// Every argument quoted by [`quote_arg`]; the first that cannot be carried
/// refuses the whole job.
pub fn quote_args(args: &[String]) -> Result<Vec<String>, ArgRefused> {
    args.iter().enumerate().map(|(i, a)| quote_arg(a).map_err(|why| ArgRefused { position: i + 1, arg: a.clone(), why })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    // The oracle is what the simulated project's hosts do, as a real
    // BOINC client does: unescape the stored text, then split it.
    use boinc_sim::apps::{split_command_line as split, xml_unescape};

    /// What the app's argv would be on a real server, from the text PHP
    /// receives: create_work's split of the PHP wrapper (it must stay one
    /// word), no raw `'` (the SQL insert), no backslash or line break; then
    /// the client's unescape and split.
    fn through_boinc(words: &[String]) -> Vec<String> {
        let stored = words.join(" ");
        assert!(!stored.contains(['\'', '\\', '\n', '\r']), "would be spoiled on the server: {stored}");
        let line = format!(" --command_line \"{stored}\"");
        let job = split(&line);
        assert_eq!(job, ["--command_line", stored.as_str()], "the wrapper must stay one word");
        split(&xml_unescape(&stored))
    }

    #[test]
    fn every_carriable_argument_arrives_exactly() {
        let cases: &[&[&str]] = &[
            &["alpha", "two words", "gamma"],
            &["tab\there", "it's", "it's here", "na\u{ef}ve caf\u{e9} \u{65e5}\u{672c}"],
            &["-n", "5", "a&b<c>", "trailing ", "amp&amp;", "&#39;"],
            &["say \"hi\"", "\"x", "'x", "q\"uo'te", "back\\slash", "\\", "line\nbreak", "cr\r"],
            &["'", "\"", "''", " ", "x\u{7f}y", "\"\"", "a"],
        ];
        for args in cases {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            assert_eq!(through_boinc(&quote_args(&args).unwrap()), args);
        }
    }

    #[test]
    fn plain_words_are_the_c_daemons_join() {
        let args = vec!["-n".to_string(), "5".into(), "x=1".into(), "caf\u{e9}".into()];
        assert_eq!(quote_args(&args).unwrap().join(" "), "-n 5 x=1 caf\u{e9}");
    }

    #[test]
    fn the_stored_text_is_what_the_real_server_took() {
        // The forms seen reaching the app on a real server.
        assert_eq!(quote_arg("two words").unwrap(), "&#39;two words&#39;");
        assert_eq!(quote_arg("back\\slash").unwrap(), "back&#92;slash");
        assert_eq!(quote_arg("amp&er").unwrap(), "amp&amp;er");
        assert_eq!(quote_arg("lt<").unwrap(), "lt&lt;");
        assert_eq!(quote_arg("it's here").unwrap(), "&#34;it&#39;s here&#34;");
    }

    #[test]
    fn refuses_only_what_cannot_be_grouped() {
        assert_eq!(quote_arg("it's \"here\""), Err(Uncarriable::BothQuotes));
        assert_eq!(quote_arg("'a\"b"), Err(Uncarriable::BothQuotes));
        assert_eq!(quote_arg("a\0b"), Err(Uncarriable::Nul));
        assert_eq!(quote_arg(""), Err(Uncarriable::Empty));
        assert!(quote_arg("a'b\"c").is_ok(), "no grouping needed");
        let args = vec!["ok".to_string(), "it's \"here\"".into()];
        let e = quote_args(&args).unwrap_err();
        assert_eq!(e.position, 2);
        assert!(e.to_string().starts_with("argument 2 (\"it's \\\"here\\\"\") can't be passed to a BOINC app: "), "{e}");
    }

    #[test]
    fn a_refusal_is_one_short_line() {
        let long = format!("{} 'and\" quotes\n", "x".repeat(5000));
        let e = quote_args(&[long]).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() < 300, "{e}");
        assert!(e.contains("...) can't be passed"), "{e}");
    }
}
