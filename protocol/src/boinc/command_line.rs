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
//!
//! Nor may the command line be longer than the hands on the volunteer's
//! host keep: they cut it silently and the app runs with what is left.
//! Read in BOINC's source (client 7.20.5 and master c5c6cb7 alike) and
//! seen on a real server (`docs/arguments.md`):
//! - the client (`ACTIVE_TASK::start`, client/app_start.cpp, Unix) splits
//!   the line into `char* argv[100]` after the program's path, a NULL after
//!   the last word, two more slots taken under account sandboxing, and the
//!   splitter counts nothing: [`CLIENT_MAX_WORDS`] for every app;
//! - BOINC's wrapper, which a runner app is (`TASK::run`,
//!   samples/wrapper/wrapper.cpp), rewrites `boinc_resolve(NAME)` into a
//!   file's path, keeps [`WRAPPER_MAX_BYTES`] of its task's command line
//!   (`char arglist[4096]`) and splits that into `char* argv[256]`.
//!
//! The limits count what those hands see: the arguments themselves (after
//! the client's unescape and split), not the encoded text.

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

/// Arguments of a job that BOINC cannot carry, or would cut on the way to
/// the app. One line, however long or strange the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgRefused {
    #[error("argument {position} ({}) can't be passed to a BOINC app: {why}", shown(arg))]
    Uncarriable {
        /// 1-based position among the job's arguments.
        position: usize,
        arg: String,
        why: Uncarriable,
    },
    #[error(
        "the job has {} arguments, and a BOINC client passes an app at most {CLIENT_MAX_WORDS} \
         (its argv array, client/app_start.cpp); it would lose the rest",
        thousands(*words)
    )]
    ClientWords { words: usize },
    #[error(
        "the arguments are {} bytes on the command line of BOINC's wrapper (the app is a runner), \
         which keeps {} (samples/wrapper/wrapper.cpp) and cuts the rest",
        thousands(*bytes),
        thousands(WRAPPER_MAX_BYTES)
    )]
    WrapperBytes { bytes: usize },
    #[error(
        "the job has {} arguments, and BOINC's wrapper (the app is a runner) passes its task at most {WRAPPER_MAX_WORDS} \
         (samples/wrapper/wrapper.cpp); it would lose the rest",
        thousands(*words)
    )]
    WrapperWords { words: usize },
    #[error(
        "argument {position} ({}) holds \"{WRAPPER_RESOLVE}\", which BOINC's wrapper (the app is a runner) \
         replaces with the path of a file",
        shown(arg)
    )]
    WrapperResolve { position: usize, arg: String },
}

/// The most words a BOINC client passes an app: its `argv[100]` holds the
/// program's path, the words and a NULL (98), and under account sandboxing
/// (BOINC's Mac installer sets it up) the switcher's two words besides.
/// Words past the array are written over the client's stack: seen on the
/// real server, `docs/arguments.md`. An app version's own words (a plan
/// class's `--nthreads`, `--device`) take from the same array.
pub const CLIENT_MAX_WORDS: usize = 96;

/// The bytes of its task's command line BOINC's wrapper keeps: `strlcpy`
/// into `char arglist[4096]`.
pub const WRAPPER_MAX_BYTES: usize = 4095;

/// The most words BOINC's wrapper passes its task: its `argv[256]` holds the
/// task's program, the words and a NULL.
pub const WRAPPER_MAX_WORDS: usize = 254;

/// What BOINC's wrapper replaces, with what follows up to the next `)`, by
/// the path of the file of that name (and exits if no `)` follows).
pub const WRAPPER_RESOLVE: &str = "boinc_resolve(";

/// `n` with a comma every three digits, as the hold reasons write sizes.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
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

/// Whether a word must be grouped in quotes to stay one word through
/// BOINC's splitter (and the runner's `runner_main.sh`, which groups the
/// same words for the wrapper).
fn must_group(arg: &str) -> bool {
    arg.chars().any(is_c_space) || arg.starts_with(['\'', '"'])
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
    let grouped = must_group(arg);
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
/// refuses the whole job, and so do more words than a client passes.
pub fn quote_args(args: &[String]) -> Result<Vec<String>, ArgRefused> {
    let words = args
        .iter()
        .enumerate()
        .map(|(i, a)| quote_arg(a).map_err(|why| ArgRefused::Uncarriable { position: i + 1, arg: a.clone(), why }))
        .collect::<Result<Vec<_>, _>>()?;
    if args.len() > CLIENT_MAX_WORDS {
        return Err(ArgRefused::ClientWords { words: args.len() });
    }
    Ok(words)
}

/// The length in bytes of the command line BOINC's wrapper builds for its
/// task from a runner's arguments: `runner_main.sh` groups a word as
/// [`quote_arg`] does (two quotes), and the wrapper puts a space before
/// each word (`append_cmdline_args`).
pub fn wrapper_line_len(args: &[String]) -> usize {
    args.iter().map(|a| 1 + a.len() + if must_group(a) { 2 } else { 0 }).sum()
}

/// Whether a runner app's task (BOINC's wrapper running it) gets these
/// arguments as they are: none rewritten by `boinc_resolve(`, the line
/// within [`WRAPPER_MAX_BYTES`], the words within [`WRAPPER_MAX_WORDS`].
pub fn fits_wrapper(args: &[String]) -> Result<(), ArgRefused> {
    if let Some(i) = args.iter().position(|a| a.contains(WRAPPER_RESOLVE)) {
        return Err(ArgRefused::WrapperResolve { position: i + 1, arg: args[i].clone() });
    }
    let bytes = wrapper_line_len(args);
    if bytes > WRAPPER_MAX_BYTES {
        return Err(ArgRefused::WrapperBytes { bytes });
    }
    if args.len() > WRAPPER_MAX_WORDS {
        return Err(ArgRefused::WrapperWords { words: args.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    // The oracle is what the simulated project's hosts do, as a real
    // BOINC client does: unescape the stored text, then split it.
    use boinc_sim::apps::{client_words, split_command_line as split, wrapper_words, xml_unescape, CLIENT_ARGV_WORDS};

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
        assert!(matches!(e, ArgRefused::Uncarriable { position: 2, .. }), "{e:?}");
        assert!(e.to_string().starts_with("argument 2 (\"it's \\\"here\\\"\") can't be passed to a BOINC app: "), "{e}");
    }

    #[test]
    fn a_refusal_is_one_short_line() {
        let long = format!("{} 'and\" quotes\n", "x".repeat(5000));
        let e = quote_args(&[long]).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() < 300, "{e}");
        assert!(e.contains("...) can't be passed"), "{e}");
    }

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    /// The words the app gets on a real client (the sim's client is the
    /// oracle), from what the daemon stores.
    fn at_the_app(args: &[String]) -> Result<Vec<String>, String> {
        client_words(&quote_args(args).unwrap().join(" "))
    }

    #[test]
    fn as_many_words_as_any_client_passes_and_no_more() {
        let words = |n: usize| (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>();
        let kept = words(CLIENT_MAX_WORDS);
        assert_eq!(at_the_app(&kept).unwrap(), kept);
        // A client without sandboxing holds two more; no job counts on them.
        assert!(quote_args(&words(CLIENT_ARGV_WORDS)).is_err());
        let e = quote_args(&words(CLIENT_MAX_WORDS + 1)).unwrap_err();
        assert_eq!(e, ArgRefused::ClientWords { words: 97 });
        assert_eq!(
            e.to_string(),
            "the job has 97 arguments, and a BOINC client passes an app at most 96 (its argv array, client/app_start.cpp); \
             it would lose the rest"
        );
        // The real client's array ends after 98: the sim's client stops there.
        assert!(client_words(&words(CLIENT_ARGV_WORDS).join(" ")).is_ok());
        assert!(client_words(&words(CLIENT_ARGV_WORDS + 1).join(" ")).is_err());
        // A word the client splits is counted as the app sees it: one.
        let grouped = vec!["two words".to_string(); CLIENT_MAX_WORDS];
        assert_eq!(at_the_app(&grouped).unwrap(), grouped);
    }

    /// Arguments whose wrapper line is `bytes` long: grouped words (two
    /// quotes each), a two-byte character, and plain words.
    fn wrapper_line_of(bytes: usize) -> Vec<String> {
        let mut args = strings(&["two words", "caf\u{e9}", "'quoted", "it's here"]);
        let used = wrapper_line_len(&args);
        // One more word of 99 bytes (100 with its space) while they fit.
        let mut left = bytes - used;
        while left > 100 + 1 {
            args.push("x".repeat(99));
            left -= 100;
        }
        args.push("y".repeat(left - 1));
        assert_eq!(wrapper_line_len(&args), bytes);
        args
    }

    #[test]
    fn the_wrapper_line_counts_what_the_wrapper_keeps() {
        let kept = wrapper_line_of(WRAPPER_MAX_BYTES);
        assert_eq!(fits_wrapper(&kept), Ok(()));
        // The sim's wrapper, as the real one, gives the task every word.
        let task = wrapper_words(&at_the_app(&kept).unwrap()).unwrap();
        assert_eq!(task, kept);

        let cut = wrapper_line_of(WRAPPER_MAX_BYTES + 1);
        let e = fits_wrapper(&cut).unwrap_err();
        assert_eq!(e, ArgRefused::WrapperBytes { bytes: 4096 });
        assert_eq!(
            e.to_string(),
            "the arguments are 4,096 bytes on the command line of BOINC's wrapper (the app is a runner), \
             which keeps 4,095 (samples/wrapper/wrapper.cpp) and cuts the rest"
        );
        // There the last byte is lost.
        let task = wrapper_words(&at_the_app(&cut).unwrap()).unwrap();
        assert_ne!(task, cut);
        assert_eq!(task.last().map(String::len), cut.last().map(|w| w.len() - 1));
    }

    #[test]
    fn as_many_words_as_the_wrapper_passes_and_no_more() {
        let words = |n: usize| vec!["a".to_string(); n];
        let kept = words(WRAPPER_MAX_WORDS);
        assert_eq!(fits_wrapper(&kept), Ok(()));
        assert_eq!(wrapper_words(&kept).unwrap(), kept);
        let cut = words(WRAPPER_MAX_WORDS + 1);
        assert_eq!(fits_wrapper(&cut), Err(ArgRefused::WrapperWords { words: 255 }));
        assert_eq!(wrapper_words(&cut).unwrap().len(), WRAPPER_MAX_WORDS);
    }

    #[test]
    fn boinc_resolve_in_an_argument_is_refused_for_a_runner() {
        let args = strings(&["alpha", "pre-boinc_resolve(foo)-post", "two words"]);
        // As seen on the real server: the wrapper puts the file's path in.
        assert_eq!(wrapper_words(&at_the_app(&args).unwrap()).unwrap(), ["alpha", "pre-foo-post", "two words"]);
        let e = fits_wrapper(&args).unwrap_err();
        assert_eq!(e, ArgRefused::WrapperResolve { position: 2, arg: args[1].clone() });
        assert_eq!(
            e.to_string(),
            "argument 2 (\"pre-boinc_resolve(foo)-post\") holds \"boinc_resolve(\", which BOINC's wrapper \
             (the app is a runner) replaces with the path of a file"
        );
        // Without a `)` the wrapper gives up.
        assert!(wrapper_words(&strings(&["boinc_resolve(x"])).is_err());
        assert!(fits_wrapper(&strings(&["boinc_resolve(x"])).is_err());
        // Near misses pass, and any app but a runner takes the word.
        assert_eq!(fits_wrapper(&strings(&["boinc_resolve", "resolve(x)", "BOINC_RESOLVE(x)"])), Ok(()));
        assert!(quote_args(&args).is_ok());
    }

    #[test]
    fn sizes_are_written_with_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(4095), "4,095");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
