//! A job's command line as the BOINC client reads it: XML-unescaped,
//! then split into words by BOINC's own rules.

/// BOINC's `xml_unescape()`, which the client applies to a workunit's
/// `<command_line>` before splitting it: `&lt;` `&gt;` `&quot;` `&apos;`
/// `&amp;`, `&#xA;` and `&#xD;`, and `&#` followed by a decimal number read
/// with C's `atoi` into one `char` (so `&#39;` is `'`; a number past 127 is
/// not a character here and is kept as written). Anything else is kept.
pub fn xml_unescape(s: &str) -> String {
    const NAMED: [(&str, char); 9] = [
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&quot;", '"'),
        ("&apos;", '\''),
        ("&amp;", '&'),
        ("&#xA;", '\n'),
        ("&#xa;", '\n'),
        ("&#xD;", '\r'),
        ("&#xd;", '\r'),
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some((e, c)) = NAMED.iter().find(|(e, _)| rest.starts_with(e)) {
            out.push(*c);
            rest = &rest[e.len()..];
            continue;
        }
        if let Some(num) = rest.strip_prefix("&#") {
            let digits = num.len() - num.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if let Some(c) = num[..digits].parse::<u8>().ok().filter(|n| (1..=127).contains(n)).map(char::from) {
                out.push(c);
                // Past the `;` if there is one, else past the digits.
                rest = match num.find(';') {
                    Some(semi) => &num[semi + 1..],
                    None => &num[digits..],
                };
                continue;
            }
        }
        out.push('&');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// Splits a job's command line into words as BOINC's `parse_command_line`
/// does: runs of whitespace separate words; a word that *starts* with `"`
/// or `'` extends to the next identical quote (which may enclose
/// whitespace); the character right after the opening quote is taken into
/// the word unlooked-at, so `''` does not close (seen on a real server: it
/// swallows the rest of the line); a quote elsewhere is an ordinary
/// character; the character after a closing quote starts a new word; an
/// unclosed quote extends to the end. No escapes.
pub fn split_command_line(s: &str) -> Vec<String> {
    enum State {
        Between,
        /// Just past an opening quote: the next character is the word's.
        Opened(char),
        Quoted(char),
        Unquoted,
    }
    // C's isspace in the "C" locale.
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut state = State::Between;
    for c in s.chars() {
        match state {
            State::Between => {
                if is_space(c) {
                } else if c == '\'' || c == '"' {
                    state = State::Opened(c);
                } else {
                    cur.push(c);
                    state = State::Unquoted;
                }
            }
            State::Opened(q) => {
                cur.push(c);
                state = State::Quoted(q);
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
                if is_space(c) {
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

/// The most words a BOINC client passes an app: `ACTIVE_TASK::start`
/// (client/app_start.cpp, Unix, no account sandboxing, as the real
/// server's client runs) splits the command line into `char* argv[100]`
/// after the program's path, with a NULL after the last word.
pub const CLIENT_ARGV_WORDS: usize = 98;

/// The words an app gets from a job's command line, as a BOINC client
/// passes them: unescaped and split. More than its argv holds is `Err`,
/// the task not started: the real client writes the rest past its array,
/// over its own stack (client 7.20.5 on the real server passed 850 words
/// and failed to start the task with 900), so no job may count on more.
pub fn client_words(command_line: &str) -> Result<Vec<String>, String> {
    let words = split_command_line(&xml_unescape(command_line));
    if words.len() > CLIENT_ARGV_WORDS {
        return Err(format!("the command line has {} words; the client's argv holds {CLIENT_ARGV_WORDS}", words.len()));
    }
    Ok(words)
}

/// The bytes of its task's command line BOINC's wrapper keeps
/// (`char arglist[4096]`, `strlcpy`).
pub const WRAPPER_ARGLIST_BYTES: usize = 4095;

/// The most words BOINC's wrapper passes its task (`char* argv[256]`: the
/// task's program, the words, a NULL).
pub const WRAPPER_ARGV_WORDS: usize = 254;

/// The words a runner's task gets, as BOINC's wrapper (`TASK::run`,
/// samples/wrapper/wrapper.cpp) makes them from the words the runner's
/// main program was given: `runner_main.sh` groups each word that needs
/// it in the quote it does not hold; the wrapper puts a space before each,
/// replaces every `boinc_resolve(NAME)` by the file's path (in a slot of
/// copied files, NAME itself), keeps 4,095 bytes, splits them and keeps
/// 254 words. `Err` where the wrapper gives up (no `)` after
/// `boinc_resolve(`).
pub fn wrapper_words(words: &[String]) -> Result<Vec<String>, String> {
    const RESOLVE: &str = "boinc_resolve(";
    let mut line = String::new();
    for w in words {
        line.push(' ');
        let grouped = w.chars().any(|c| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')) || w.starts_with(['\'', '"']);
        match (grouped, w.contains('\'')) {
            (false, _) => line.push_str(w),
            (true, false) => line.push_str(&format!("'{w}'")),
            (true, true) => line.push_str(&format!("\"{w}\"")),
        }
    }
    // The wrapper searches again from the start, and loops forever on a
    // NAME that is itself `boinc_resolve(`; here the search goes on after
    // the name put in.
    let mut at = 0;
    while let Some(from) = line[at..].find(RESOLVE).map(|i| at + i) {
        let name_at = from + RESOLVE.len();
        let Some(to) = line[name_at..].find(')').map(|i| name_at + i) else {
            return Err("missing ')' after 'boinc_resolve('".into());
        };
        line = format!("{}{}{}", &line[..from], &line[name_at..to], &line[to + 1..]);
        at = from + (to - name_at);
    }
    let mut cut = line.len().min(WRAPPER_ARGLIST_BYTES);
    // The real wrapper cuts bytes; a cut inside a character is kept here
    // as the whole characters before it.
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut words = split_command_line(&line[..cut]);
    words.truncate(WRAPPER_ARGV_WORDS);
    Ok(words)
}
