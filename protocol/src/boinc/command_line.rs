//! Job arguments as a BOINC command line, and what BOINC cannot carry.
//!
//! On a real server the command line travels twice through BOINC's
//! `parse_command_line()` (a word starting with `'` or `"` runs to the next
//! identical quote, no escapes): `submit_rpc_handler.php` writes
//! ` --command_line "<command line>"` per job to `create_work --stdin`, which
//! splits that line; later the client splits the stored command line into
//! the app's argv. The server also drops backslashes. So the only quoting
//! that survives both is single quotes inside the PHP's double quotes, and:
//! * a `"` anywhere ends the wrapper early (the rest become input file names);
//! * a backslash is lost;
//! * whitespace and `'` together cannot be quoted;
//! * a word starting with `'` loses it to the client's split;
//! * a line break ends the job's line to `create_work --stdin`.

use std::fmt;

/// Why an argument cannot reach the app intact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncarriable {
    DoubleQuote,
    Backslash,
    LineBreak,
    SpaceAndQuote,
    LeadingQuote,
}

impl fmt::Display for Uncarriable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Uncarriable::DoubleQuote => "it holds a double quote (\"), which ends the server's quoting of the command line",
            Uncarriable::Backslash => "it holds a backslash, which the BOINC server drops",
            Uncarriable::LineBreak => "it holds a line break, which ends the job's line to create_work",
            Uncarriable::SpaceAndQuote => "it holds whitespace and a single quote ('), which BOINC cannot quote together",
            Uncarriable::LeadingQuote => "it starts with a single quote ('), which BOINC takes as quoting",
        })
    }
}

/// An argument of a job that BOINC cannot carry: which one and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument {position} ({arg:?}) can't be passed to a BOINC app: {why}")]
pub struct ArgRefused {
    /// 1-based position among the job's arguments.
    pub position: usize,
    pub arg: String,
    pub why: Uncarriable,
}

/// C's `isspace` in the "C" locale: what `parse_command_line` splits on.
pub fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// One argument as a word of a BOINC command line: as it is when that is
/// safe, in single quotes when it is empty or holds whitespace.
pub fn quote_arg(arg: &str) -> Result<String, Uncarriable> {
    if arg.contains('"') {
        return Err(Uncarriable::DoubleQuote);
    }
    if arg.contains('\\') {
        return Err(Uncarriable::Backslash);
    }
    if arg.contains(['\n', '\r']) {
        return Err(Uncarriable::LineBreak);
    }
    let spaced = arg.is_empty() || arg.chars().any(is_c_space);
    if spaced && arg.contains('\'') {
        return Err(Uncarriable::SpaceAndQuote);
    }
    if arg.starts_with('\'') {
        return Err(Uncarriable::LeadingQuote);
    }
    Ok(if spaced { format!("'{arg}'") } else { arg.to_string() })
}

/// Every argument quoted by [`quote_arg`]; the first that cannot be carried
/// refuses the whole job.
pub fn quote_args(args: &[String]) -> Result<Vec<String>, ArgRefused> {
    args.iter().enumerate().map(|(i, a)| quote_arg(a).map_err(|why| ArgRefused { position: i + 1, arg: a.clone(), why })).collect()
}

/// Splits a command line into words the way BOINC's `parse_command_line()`
/// does (the client making the app's argv; `create_work` reading a job
/// line): whitespace separates words; a word that *starts* with `"` or `'`
/// runs to the next identical quote (`''` is an empty word); a quote
/// elsewhere is an ordinary character; the character after a closing quote
/// starts a new word; an unclosed quote runs to the end. No escapes.
/// The test oracle here; the simulated project has its own for its hosts.
#[cfg(test)]
fn split(s: &str) -> Vec<String> {
    enum State {
        Between,
        Quoted(char),
        Unquoted,
    }
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut state = State::Between;
    for c in s.chars() {
        match state {
            State::Between => {
                if is_c_space(c) {
                } else if c == '\'' || c == '"' {
                    state = State::Quoted(c);
                } else {
                    cur.push(c);
                    state = State::Unquoted;
                }
            }
            State::Quoted(q) => {
                if c == q {
                    words.push(std::mem::take(&mut cur));
                    state = State::Between;
                } else {
                    cur.push(c);
                }
            }
            State::Unquoted => {
                if is_c_space(c) {
                    words.push(std::mem::take(&mut cur));
                    state = State::Between;
                } else {
                    cur.push(c);
                }
            }
        }
    }
    if !matches!(state, State::Between) {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the app's argv would be on a real server: the PHP wrapper split
    /// by create_work, backslashes dropped, then the client's split.
    fn through_boinc(words: &[String]) -> Vec<String> {
        let line = format!(" --command_line \"{}\"", words.join(" "));
        let job = split(&line);
        assert_eq!(job.len(), 2, "the wrapper must stay one word: {job:?}");
        split(&job[1].replace('\\', ""))
    }

    #[test]
    fn carried_arguments_arrive_exactly() {
        let cases: &[&[&str]] = &[
            &["alpha", "two words", "gamma"],
            &["tab\there", "", "it's", "na\u{ef}ve caf\u{e9} \u{65e5}\u{672c}"],
            &["-n", "5", "a&b<c>", "trailing "],
        ];
        for args in cases {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            assert_eq!(through_boinc(&quote_args(&args).unwrap()), args);
        }
    }

    #[test]
    fn plain_words_are_the_c_daemons_join() {
        let args = vec!["-n".to_string(), "5".into(), "x=1".into()];
        assert_eq!(quote_args(&args).unwrap().join(" "), "-n 5 x=1");
        assert_eq!(quote_arg("two words").unwrap(), "'two words'");
    }

    #[test]
    fn refuses_what_boinc_cannot_carry() {
        assert_eq!(quote_arg("say \"hi\""), Err(Uncarriable::DoubleQuote));
        assert_eq!(quote_arg("\"x"), Err(Uncarriable::DoubleQuote));
        assert_eq!(quote_arg("back\\slash"), Err(Uncarriable::Backslash));
        assert_eq!(quote_arg("it's here"), Err(Uncarriable::SpaceAndQuote));
        assert_eq!(quote_arg("'x"), Err(Uncarriable::LeadingQuote));
        assert_eq!(quote_arg("a\nb"), Err(Uncarriable::LineBreak));
        let args = vec!["ok".to_string(), "it's here".into()];
        let e = quote_args(&args).unwrap_err();
        assert_eq!(e.position, 2);
        assert!(e.to_string().contains("argument 2 (\"it's here\")"), "{e}");
    }

    #[test]
    fn split_is_boincs() {
        assert_eq!(split("a 'b c' \"d e\" f\"g h"), ["a", "b c", "d e", "f\"g", "h"]);
        assert_eq!(split("'' x'y 'un closed"), ["", "x'y", "un closed"]);
        assert_eq!(split(" --command_line \"alpha \"two words\" gamma\""), ["--command_line", "alpha ", "two", "words\"", "gamma\""]);
    }
}
