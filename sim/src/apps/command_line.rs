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
