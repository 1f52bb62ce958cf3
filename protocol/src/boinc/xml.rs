//! XML text helpers and the lenient scanner the reply parsers share.
//!
//! The scanner reads a reply the way BOINC's C client does (`lib/parse.*`,
//! `docs/spec/boinc-rpc.md` §10): a flat stream of tags and texts, attributes
//! dropped, nesting unchecked. That is what makes `<aborted NAME>`, PHP
//! warnings as HTML and bodies cut short readable at all. It never fails:
//! whatever it cannot read ends the stream or becomes text.

use std::borrow::Cow;

/// Escapes `&`, `<`, `>`, `"` and `'` for use in element text.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    escape_into(&mut out, text);
    out
}

/// [`escape`], appending to `out` (no allocation when `out` has room).
pub fn escape_into(out: &mut String, text: &str) {
    let mut plain = 0;
    for (i, b) in text.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&apos;",
            _ => continue,
        };
        // `i` is at an ASCII byte, so both slice ends are char boundaries.
        out.push_str(&text[plain..i]);
        out.push_str(entity);
        plain = i + 1;
    }
    out.push_str(&text[plain..]);
}

/// Decodes `&amp; &lt; &gt; &quot; &apos;`, `&#NN;` and `&#xNN;`; anything
/// else that looks like an entity is left as it is.
pub fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        match decode_one(rest) {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The character of the entity at the start of `s` (which starts with `&`)
/// and the entity's length.
fn decode_one(s: &str) -> Option<(char, usize)> {
    // Long enough for `&#x10FFFF;` and a few leading zeros, short enough
    // that a stray `&` costs nothing.
    let semi = s.bytes().take(16).position(|b| b == b';')?;
    let name = &s[1..semi];
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        _ => {
            let num = name.strip_prefix('#')?;
            let (digits, radix) = match num.strip_prefix(['x', 'X']) {
                Some(hex) => (hex, 16),
                None => (num, 10),
            };
            // from_str_radix accepts a sign; an entity does not.
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            char::from_u32(u32::from_str_radix(digits, radix).ok()?)?
        }
    };
    Some((c, semi + 1))
}

/// `text` without leading and trailing ASCII whitespace (C's `isspace`).
pub fn trim_ascii(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b')
}

/// An integer as C's `strtol(s, &end, 0)` reads it, but only when it
/// consumes all of the trimmed text (BOINC's C client ignores an element
/// with trailing garbage): optional sign, then `0x` hex, `0` octal or
/// decimal. `<a></a>` reads as 0. Out of range reads as not a number.
pub fn parse_int(text: &str) -> Option<i64> {
    let t = trim_ascii(text);
    if t.is_empty() {
        return Some(0);
    }
    let (negative, t) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (digits, radix) = if let Some(hex) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (hex, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    // Parsed as i128 so that i64::MIN, whose magnitude is not an i64, works.
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// A finite floating-point number as C's `strtod` reads it, but only when
/// it is all of the trimmed text. `<a></a>` reads as 0.
pub fn parse_double(text: &str) -> Option<f64> {
    let t = trim_ascii(text);
    if t.is_empty() {
        return Some(0.0);
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// First position of `needle` in `hay` at or after `from`.
pub fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > hay.len() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// Lossy UTF-8, entities decoded, ASCII whitespace trimmed: how every text
/// of a reply is read.
pub fn text_value(raw: &[u8]) -> String {
    let decoded = decode_entities(&String::from_utf8_lossy(raw));
    trim_ascii(&decoded).to_string()
}

/// Whether the `<` at the start of `s` opens markup. A `<` followed by
/// anything else (a space, a digit, the end) is text: error messages carry
/// raw `<`.
pub(crate) fn opens_markup(s: &[u8]) -> bool {
    let name_start = |b: u8| b.is_ascii_alphabetic() || b == b'_' || b == b':';
    if s.first() != Some(&b'<') {
        return false;
    }
    match s.get(1) {
        Some(&b) if name_start(b) || b == b'!' || b == b'?' => true,
        Some(b'/') => s.get(2).is_some_and(|&b| name_start(b)),
        _ => false,
    }
}

/// Removes markup (tags, comments) from HTML or XML text, keeping the
/// texts. For PHP error pages.
pub fn strip_tags(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    for token in Tokens::new(raw) {
        if let Token::Text(t) | Token::CData(t) = token {
            out.extend_from_slice(t);
        }
    }
    out
}

/// Collapses every run of whitespace into one space and trims.
pub fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` bytes, at a char boundary.
pub fn truncate_at(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// One piece of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// `<name>` or `<name attrs>`: the attributes (and the bogus one of
    /// `<aborted NAME>`) are dropped.
    Start(&'a [u8]),
    /// `</name>`
    End(&'a [u8]),
    /// `<name/>`
    Empty(&'a [u8]),
    /// Raw text between tags (not decoded, not trimmed).
    Text(&'a [u8]),
    /// Raw content of `<![CDATA[...]]>`, up to the end of the input if the
    /// section is not closed.
    CData(&'a [u8]),
}

/// The tokens of a reply, in document order. Comments, `<?...?>` and
/// `<!...>` declarations are skipped; a tag cut off by the end of the input
/// ends the stream.
#[derive(Debug, Clone)]
pub struct Tokens<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Tokens<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Tokens { buf, pos: 0 }
    }

    /// The text after the tag just read, up to the next tag: texts and CDATA
    /// contents concatenated, then read by [`text_value`]. This is how the C
    /// client reads `<name>value</name>`, including `stderr_out`'s CDATA.
    pub fn text(&mut self) -> String {
        let mut raw = Vec::new();
        loop {
            let before = self.pos;
            match self.next() {
                Some(Token::Text(t) | Token::CData(t)) => raw.extend_from_slice(t),
                _ => {
                    self.pos = before;
                    break;
                }
            }
        }
        text_value(&raw)
    }

    /// The value of element `name` whose start tag was just read: its
    /// [`text`](Self::text), if the end tag `</name>` follows right after it.
    /// Like the C client, an element without its end tag has no value, so a
    /// body torn inside `<batch_id>10</batch_id>` never reads as batch 1.
    pub fn value(&mut self, name: &[u8]) -> Option<String> {
        let text = self.text();
        let before = self.pos;
        if self.next() == Some(Token::End(name)) {
            Some(text)
        } else {
            self.pos = before;
            None
        }
    }

    /// [`value`](Self::value) without a copy where the text is plain
    /// (one run of UTF-8 text, no entity, nothing to trim), as job names
    /// and statuses are: a million of them are read per status.
    pub fn value_ref(&mut self, name: &[u8]) -> Option<Cow<'a, str>> {
        let before = self.pos;
        if let (Some(Token::Text(raw)), Some(Token::End(end))) = (self.next(), self.next()) {
            if end == name && !raw.contains(&b'&') {
                if let Ok(text) = std::str::from_utf8(raw) {
                    if trim_ascii(text).len() == text.len() {
                        return Some(Cow::Borrowed(text));
                    }
                }
            }
        }
        self.pos = before;
        self.value(name).map(Cow::Owned)
    }

    /// Skips past the next `</name>` (or to the end).
    pub fn skip_past_end(&mut self, name: &[u8]) {
        for token in self.by_ref() {
            if token == Token::End(name) {
                return;
            }
        }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        loop {
            let rest = self.buf.get(self.pos..)?;
            if rest.is_empty() {
                return None;
            }
            if !opens_markup(rest) {
                // Text runs to the next `<` that opens markup.
                let mut end = 1;
                while end < rest.len() && !opens_markup(&rest[end..]) {
                    end += 1;
                }
                self.pos += end;
                return Some(Token::Text(&rest[..end]));
            }
            if let Some(body) = rest.strip_prefix(b"<![CDATA[") {
                let (content, used) = match find(body, b"]]>", 0) {
                    Some(end) => (&body[..end], 9 + end + 3),
                    None => (body, rest.len()),
                };
                self.pos += used;
                return Some(Token::CData(content));
            }
            if rest.starts_with(b"<!--") {
                self.pos += find(rest, b"-->", 4).map_or(rest.len(), |end| end + 3);
                continue;
            }
            let close = rest.iter().position(|&b| b == b'>');
            if matches!(rest[1], b'!' | b'?') {
                self.pos += close.map_or(rest.len(), |end| end + 1);
                continue;
            }
            let Some(close) = close else {
                // A tag cut off by the end of the body.
                self.pos = self.buf.len();
                return None;
            };
            self.pos += close + 1;
            let inner = &rest[1..close];
            let name_of = |s: &'a [u8]| {
                let len = s.iter().position(|&b| b.is_ascii_whitespace() || b == b'/').unwrap_or(s.len());
                &s[..len]
            };
            return Some(match inner.strip_prefix(b"/") {
                Some(end) => Token::End(name_of(end)),
                None if inner.ends_with(b"/") => Token::Empty(name_of(inner)),
                None => Token::Start(name_of(inner)),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_all_five() {
        assert_eq!(escape(r#"a&b<c>d"e'f"#), "a&amp;b&lt;c&gt;d&quot;e&apos;f");
        assert_eq!(escape("plain é"), "plain é");
    }

    #[test]
    fn decodes_named_and_numeric_entities() {
        assert_eq!(decode_entities("&lt;a&gt; &amp; &quot;&apos; &#039; &#65;&#x42;&#X43;"), "<a> & \"' ' ABC");
    }

    #[test]
    fn leaves_unknown_entities_alone() {
        for s in ["&nbsp;", "& x", "&#;", "&#x;", "&#-1;", "&#xD800;", "&#99999999999;", "a&", "&amp"] {
            assert_eq!(decode_entities(s), s);
        }
        assert_eq!(decode_entities("&&amp;"), "&&");
    }

    #[test]
    fn integers_like_strtol() {
        assert_eq!(parse_int(" 42 "), Some(42));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("+7"), Some(7));
        assert_eq!(parse_int("0x10"), Some(16));
        assert_eq!(parse_int("010"), Some(8));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int(""), Some(0));
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
        for bad in ["12abc", "abc", "1.5", "-", "0x", "9223372036854775808", "08", "+-1"] {
            assert_eq!(parse_int(bad), None, "{bad}");
        }
    }

    #[test]
    fn doubles_like_strtod() {
        assert_eq!(parse_double("1795252357.6514"), Some(1795252357.6514));
        assert_eq!(parse_double(" 1e10\n"), Some(1e10));
        assert_eq!(parse_double(""), Some(0.0));
        assert_eq!(parse_double("nan"), None);
        assert_eq!(parse_double("1.5x"), None);
    }

    #[test]
    fn tokens_of_a_sloppy_reply() {
        let body = b"<?xml version=\"1.0\" ?>\n<abort_jobs>\n<aborted a#1.0>\n<!-- c -->\
            <success/>x < y<![CDATA[<raw>]]><b>W</b></abort_jobs><cut";
        let tokens: Vec<_> = Tokens::new(body).collect();
        assert_eq!(
            tokens,
            [
                Token::Text(b"\n"),
                Token::Start(b"abort_jobs"),
                Token::Text(b"\n"),
                Token::Start(b"aborted"),
                Token::Text(b"\n"),
                Token::Empty(b"success"),
                Token::Text(b"x < y"),
                Token::CData(b"<raw>"),
                Token::Start(b"b"),
                Token::Text(b"W"),
                Token::End(b"b"),
                Token::End(b"abort_jobs"),
            ]
        );
    }

    #[test]
    fn text_joins_text_and_cdata() {
        let mut t = Tokens::new(b"<s><![CDATA[\n&lt;x&gt;  ]]></s>");
        assert_eq!(t.next(), Some(Token::Start(b"s")));
        assert_eq!(t.text(), "<x>");
        assert_eq!(t.next(), Some(Token::End(b"s")));
    }

    #[test]
    fn a_value_needs_its_end_tag() {
        let mut t = Tokens::new(b"<a> 1 </a><b>2<c>3</c><d>4");
        assert_eq!(t.next(), Some(Token::Start(b"a")));
        assert_eq!(t.value(b"a").as_deref(), Some("1"));
        assert_eq!(t.next(), Some(Token::Start(b"b")));
        assert_eq!(t.value(b"b"), None);
        assert_eq!(t.next(), Some(Token::Start(b"c")));
        assert_eq!(t.value(b"c").as_deref(), Some("3"));
        assert_eq!(t.next(), Some(Token::Start(b"d")));
        assert_eq!(t.value(b"d"), None);
    }

    #[test]
    fn unclosed_cdata_runs_to_the_end() {
        let t: Vec<_> = Tokens::new(b"<![CDATA[abc").collect();
        assert_eq!(t, [Token::CData(b"abc")]);
    }

    #[test]
    fn strips_html() {
        let s = strip_tags(b"<br />\n<b>Fatal error</b>:  x-&gt;y() in <b>f</b>");
        assert_eq!(collapse_whitespace(&text_value(&s)), "Fatal error: x->y() in f");
    }

    #[test]
    fn truncates_at_char_boundary() {
        let mut s = "aé".to_string();
        truncate_at(&mut s, 2);
        assert_eq!(s, "a");
    }
}
