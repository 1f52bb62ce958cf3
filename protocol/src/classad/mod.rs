//! The new-ClassAd records of the BLAH dialect (`docs/spec/blah-dialect.md` §4-§5),
//! and the HTCondor argument and environment strings found inside them.
//!
//! The gridmanager writes a flat record, `[ Name = value; Name2 = value2 ]`,
//! with evaluated literals as values (and `CERequirements` as an
//! expression). We parse exactly that: literals become typed [`Value`]s,
//! anything else is kept as its raw text ([`Value::Expr`]) and never
//! evaluated. [`ClassAd`]'s `Display` writes what HTCondor's unparser
//! writes, so our status ads look like the transcripts.
//!
//! Lexical rules follow HTCondor's `classad::Lexer`:
//!
//! * strings: `"..."` with the escapes `\" \' \? \\ \a \b \f \n \r \t \v`,
//!   octal `\o`, `\oo`, `\[0-3]oo` (a NUL is an error), any other `\x` is
//!   `x`; adjacent literals (`"a" "b"`) are concatenated. Octal escapes
//!   give bytes; bytes that are not UTF-8 become U+FFFD.
//! * integers: `-?` decimal, `0x` hex or `0`-prefixed octal; reals:
//!   `-?` digits with a `.digits` fraction and/or an `e[+-]digits` exponent.
//!   A number with a scale suffix (`64M`) or one out of range stays an `Expr`.
//! * `true`, `false`, `undefined`, `error`: any case.
//! * attribute names: `[A-Za-z_][A-Za-z0-9_]*` (not a reserved word), or
//!   quoted as `'...'` with the string escapes; compared ignoring ASCII case.
//!
//! Not supported (the gridmanager never writes them): comments, and the
//! old-ClassAd syntax (`Name = value` lines without brackets).
//!
//! [`expr`] parses full expressions on the same lexical rules, and
//! [`eval`] evaluates them for two-sided matchmaking (the broker's
//! Requirements and Rank).

pub mod eval;
pub mod expr;

pub use eval::{Env, EvalAd, Functions, NoFunctions, Val};
pub use expr::Expr;

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;

/// Deepest nesting of brackets, braces and parentheses inside a value.
/// Scanning is iterative; the bound only keeps the stack small.
pub const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    /// Always finite when parsed.
    Real(f64),
    Bool(bool),
    Undefined,
    Error,
    /// Anything that is not a single literal, as written (trimmed). Written
    /// back verbatim, so it must itself be valid ClassAd syntax.
    Expr(String),
}

/// A flat ClassAd: attributes in order, names unique ignoring ASCII case.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClassAd {
    attrs: Vec<(String, Value)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassAdError {
    /// The input never quotes itself here: it may be long.
    #[error("ClassAd syntax error at byte {pos}: {what}")]
    Syntax { pos: usize, what: &'static str },
    #[error("ClassAd nested deeper than {MAX_DEPTH} at byte {pos}")]
    TooDeep { pos: usize },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("unbalanced single quote at byte {0}")]
    UnbalancedQuote(usize),
    /// 0-based index of the entry.
    #[error("environment entry {0} is not NAME=value")]
    NotNameValue(usize),
}

impl ClassAd {
    pub fn new() -> Self {
        ClassAd::default()
    }

    /// Parses one whole ClassAd (surrounding whitespace allowed). A name
    /// given twice keeps its first position and its last value, as
    /// HTCondor's `Insert` does.
    pub fn parse(text: &str) -> Result<ClassAd, ClassAdError> {
        Parser { text, s: text.as_bytes(), pos: 0 }.ad()
    }

    /// The value of `name`, ignoring ASCII case.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.position(name).map(|i| &self.attrs[i].1)
    }

    /// The string value of `name`; `None` if absent or not a string.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer value of `name`; `None` if absent or not an integer.
    pub fn get_int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The boolean value of `name`; `None` if absent or not a boolean.
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Sets `name` (replacing, in place, an attribute whose name differs
    /// only in case); otherwise appends it.
    pub fn insert(&mut self, name: impl Into<String>, value: Value) {
        let name = name.into();
        match self.position(&name) {
            Some(i) => self.attrs[i] = (name, value),
            None => self.attrs.push((name, value)),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.position(name).map(|i| self.attrs.remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.attrs.iter().map(|(n, v)| (n.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.attrs.iter().position(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

impl std::str::FromStr for ClassAd {
    type Err = ClassAdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ClassAd::parse(s)
    }
}

/// `[ A = "x"; B = 3 ]`, and `[  ]` when empty, as HTCondor's unparser.
impl fmt::Display for ClassAd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[ ")?;
        for (i, (name, value)) in self.attrs.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write_name(f, name)?;
            write!(f, " = {value}")?;
        }
        f.write_str(" ]")
    }
}

/// The value in ClassAd syntax.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write_quoted(f, s, '"'),
            Value::Int(i) => write!(f, "{i}"),
            // Debug is the shortest text that parses back to the same f64 and
            // always has a `.` or an exponent, so it stays a real.
            Value::Real(r) if r.is_finite() => write!(f, "{r:?}"),
            Value::Real(r) if r.is_nan() => f.write_str("real(\"NaN\")"),
            Value::Real(r) if *r > 0.0 => f.write_str("real(\"INF\")"),
            Value::Real(_) => f.write_str("real(\"-INF\")"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Undefined => f.write_str("undefined"),
            Value::Error => f.write_str("error"),
            Value::Expr(e) => f.write_str(e),
        }
    }
}

const RESERVED: [&str; 6] = ["true", "false", "undefined", "error", "is", "isnt"];

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}

fn write_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if is_identifier(name) {
        f.write_str(name)
    } else {
        write_quoted(f, name, '\'')
    }
}

/// A quoted literal with HTCondor's unparser escapes. A NUL, which no
/// ClassAd string can hold, is written as `?`.
fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str, delim: char) -> fmt::Result {
    use fmt::Write;
    f.write_char(delim)?;
    for c in s.chars() {
        match c {
            _ if c == delim => {
                f.write_char('\\')?;
                f.write_char(c)?;
            }
            '\\' => f.write_str("\\\\")?,
            '\x07' => f.write_str("\\a")?,
            '\x08' => f.write_str("\\b")?,
            '\x0c' => f.write_str("\\f")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\x0b' => f.write_str("\\v")?,
            '\0' => f.write_char('?')?,
            c if c.is_ascii_control() => write!(f, "\\{:03o}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char(delim)
}

/// C's `isspace` in the C locale.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

struct Parser<'a> {
    text: &'a str,
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> ClassAdError {
        ClassAdError::Syntax { pos: self.pos, what }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &'static str) -> Result<(), ClassAdError> {
        if self.peek() != Some(b) {
            return Err(self.err(what));
        }
        self.pos += 1;
        Ok(())
    }

    fn ad(mut self) -> Result<ClassAd, ClassAdError> {
        // HTCondor reads C strings: a NUL ends the input there.
        if let Some(at) = self.s.iter().position(|&b| b == 0) {
            self.pos = at;
            return Err(self.err("NUL byte"));
        }
        let mut ad = ClassAd::new();
        // Lower-cased name -> index, so a huge ad does not parse in O(n²).
        let mut index: HashMap<String, usize> = HashMap::new();
        self.skip_ws();
        self.expect(b'[', "expected '['")?;
        self.skip_ws();
        if self.peek() != Some(b']') {
            loop {
                let name = self.name()?;
                self.skip_ws();
                self.expect(b'=', "expected '=' after the attribute name")?;
                let value = self.value()?;
                match index.entry(name.to_ascii_lowercase()) {
                    Entry::Occupied(i) => ad.attrs[*i.get()] = (name, value),
                    Entry::Vacant(slot) => {
                        slot.insert(ad.attrs.len());
                        ad.attrs.push((name, value));
                    }
                }
                // value() stopped at ';' or ']'.
                if self.peek() == Some(b']') {
                    break;
                }
                self.pos += 1;
                self.skip_ws();
                // One trailing ';' before ']' is allowed.
                if self.peek() == Some(b']') {
                    break;
                }
            }
        }
        self.pos += 1;
        self.skip_ws();
        if self.pos < self.s.len() {
            return Err(self.err("text after the closing ']'"));
        }
        Ok(ad)
    }

    fn name(&mut self) -> Result<String, ClassAdError> {
        let start = self.pos;
        if self.peek() == Some(b'\'') {
            let name = self.quoted(b'\'')?;
            if name.is_empty() {
                self.pos = start;
                return Err(self.err("empty attribute name"));
            }
            return Ok(name);
        }
        while self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
            self.pos += 1;
        }
        let name = &self.text[start..self.pos];
        if !is_identifier(name) {
            self.pos = start;
            return Err(self.err("expected an attribute name"));
        }
        Ok(name.to_string())
    }

    /// One or more adjacent literals quoted with `delim`, unescaped.
    fn quoted(&mut self, delim: u8) -> Result<String, ClassAdError> {
        let mut bytes = Vec::new();
        loop {
            self.expect(delim, "expected a quote")?;
            loop {
                match self.peek() {
                    None => return Err(self.err("unterminated string")),
                    Some(b) if b == delim => break,
                    Some(b'\\') => {
                        self.pos += 1;
                        let b = self.escape()?;
                        bytes.push(b);
                        continue;
                    }
                    Some(b) => bytes.push(b),
                }
                self.pos += 1;
            }
            self.pos += 1;
            let after = self.pos;
            self.skip_ws();
            if self.peek() != Some(delim) {
                self.pos = after;
                break;
            }
        }
        Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// After a backslash: the escaped byte, leaving `pos` after it.
    fn escape(&mut self) -> Result<u8, ClassAdError> {
        let Some(c) = self.peek() else {
            return Err(self.err("unterminated string"));
        };
        self.pos += 1;
        let b = match c {
            b'a' => 0x07,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'0'..=b'7' => {
                // Up to three digits, the third only while the value is
                // below 0x20 (so it fits a byte), as HTCondor does.
                let mut n = u32::from(c - b'0');
                for _ in 0..2 {
                    match self.peek() {
                        Some(d @ b'0'..=b'7') if n < 0x20 => {
                            n = n * 8 + u32::from(d - b'0');
                            self.pos += 1;
                        }
                        _ => break,
                    }
                }
                if n == 0 {
                    return Err(self.err("NUL escape in a string"));
                }
                n as u8
            }
            // `\"`, `\'`, `\?`, `\\` and any other byte: that byte.
            other => other,
        };
        Ok(b)
    }

    /// Scans a value up to `;` or `]` at depth 0 (strings and brackets
    /// respected) and classifies its trimmed text.
    fn value(&mut self) -> Result<Value, ClassAdError> {
        let start = self.pos;
        let mut closers: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.err("missing ']'"));
            };
            match b {
                b'"' | b'\'' => self.skip_quoted(b)?,
                b'[' | b'{' | b'(' => {
                    if closers.len() >= MAX_DEPTH {
                        return Err(ClassAdError::TooDeep { pos: self.pos });
                    }
                    closers.push(match b {
                        b'[' => b']',
                        b'{' => b'}',
                        _ => b')',
                    });
                }
                b']' | b'}' | b')' => match closers.pop() {
                    Some(c) if c == b => {}
                    None if b == b']' => break,
                    _ => return Err(self.err("unbalanced bracket")),
                },
                b';' if closers.is_empty() => break,
                _ => {}
            }
            self.pos += 1;
        }
        let end = self.pos;
        let raw = self.text[start..end].trim_end_matches(|c: char| c.is_ascii() && is_ws(c as u8));
        let lead = raw.len() - raw.trim_start_matches(|c: char| c.is_ascii() && is_ws(c as u8)).len();
        if raw.len() == lead {
            return Err(self.err("missing value"));
        }
        let value = self.literal(start + lead, start + raw.len())?;
        self.pos = end;
        Ok(value)
    }

    /// The literal `text[from..to]` stands for, or an `Expr` of that text.
    fn literal(&mut self, from: usize, to: usize) -> Result<Value, ClassAdError> {
        let raw = &self.text[from..to];
        if raw.starts_with('"') {
            self.pos = from;
            let s = self.quoted(b'"')?;
            if self.pos == to {
                return Ok(Value::Str(s));
            }
            return Ok(Value::Expr(raw.to_string()));
        }
        for (word, value) in
            [("true", Value::Bool(true)), ("false", Value::Bool(false)), ("undefined", Value::Undefined), ("error", Value::Error)]
        {
            if raw.eq_ignore_ascii_case(word) {
                return Ok(value);
            }
        }
        if let Some(i) = integer(raw) {
            return Ok(Value::Int(i));
        }
        if let Some(r) = real(raw) {
            return Ok(Value::Real(r));
        }
        Ok(Value::Expr(raw.to_string()))
    }

    /// Moves past a quoted section, leaving `pos` on its closing quote.
    fn skip_quoted(&mut self, delim: u8) -> Result<(), ClassAdError> {
        let open = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None => {
                    self.pos = open;
                    return Err(self.err("unterminated string"));
                }
                Some(b'\\') => self.pos += 2,
                Some(b) if b == delim => return Ok(()),
                Some(_) => self.pos += 1,
            }
        }
    }
}

/// `-?` then `0x` hex, `0` octal or decimal digits; `None` if not that
/// shape or out of range.
fn integer(raw: &str) -> Option<i64> {
    let (sign, digits) = match raw.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", raw),
    };
    let (radix, body) = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        (16, hex)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.bytes().all(|b| char::from(b).is_digit(radix)) {
        return None;
    }
    i64::from_str_radix(&format!("{sign}{body}"), radix).ok()
}

/// `-?` (`d+` [`.d+`] | `.d+`) [`e` [`+-`] `d+`], with a fraction or an
/// exponent; `None` otherwise or if not finite.
fn real(raw: &str) -> Option<f64> {
    let s = raw.strip_prefix('-').unwrap_or(raw).as_bytes();
    let digits = |from: usize| s.iter().skip(from).take_while(|b| b.is_ascii_digit()).count();
    let mut i = digits(0);
    let int_digits = i;
    let mut fraction = false;
    if s.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        if n == 0 {
            return None;
        }
        i += 1 + n;
        fraction = true;
    } else if int_digits == 0 {
        return None;
    }
    let mut exponent = false;
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(i);
        if n == 0 {
            return None;
        }
        i += n;
        exponent = true;
    }
    if i != s.len() || !(fraction || exponent) {
        return None;
    }
    raw.parse::<f64>().ok().filter(|r| r.is_finite())
}

// ---- arguments and environment -------------------------------------------

/// The separators of HTCondor's `split_args`.
fn is_arg_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Splits a V2 `Arguments` string as HTCondor's `split_args` does:
/// whitespace (space, tab, CR, LF) separates; `'...'` quotes any part of an
/// argument, `''` inside quotes is one `'`; `''` alone is an empty argument.
/// Backslashes and double quotes are ordinary.
pub fn parse_args_v2(s: &str) -> Result<Vec<String>, ArgsError> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_arg = false;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        None => return Err(ArgsError::UnbalancedQuote(i)),
                        Some((_, '\'')) => {
                            if chars.next_if(|&(_, c)| c == '\'').is_none() {
                                break;
                            }
                            current.push('\'');
                        }
                        Some((_, c)) => current.push(c),
                    }
                }
            }
            c if is_arg_ws(c) => {
                if in_arg {
                    args.push(std::mem::take(&mut current));
                    in_arg = false;
                }
            }
            c => {
                in_arg = true;
                current.push(c);
            }
        }
    }
    if in_arg {
        args.push(current);
    }
    Ok(args)
}

/// Splits a V1 `Args` string on whitespace (space, tab, CR, LF); there is
/// no quoting in V1.
pub fn parse_args_v1(s: &str) -> Vec<String> {
    s.split(is_arg_ws).filter(|a| !a.is_empty()).map(str::to_string).collect()
}

/// Joins arguments as HTCondor's `join_args` does (quoting only the
/// special characters: `two' 'words`), the inverse of [`parse_args_v2`].
pub fn format_args_v2<S: AsRef<str>>(args: &[S]) -> String {
    let mut out = String::new();
    for arg in args {
        let arg = arg.as_ref();
        if !out.is_empty() {
            out.push(' ');
        }
        if arg.is_empty() {
            out.push_str("''");
        }
        for c in arg.chars() {
            if is_arg_ws(c) || c == '\'' {
                // Extend the quoted section just closed rather than
                // writing `''`, which would read as a literal quote.
                if out.ends_with('\'') {
                    out.pop();
                } else {
                    out.push('\'');
                }
                if c == '\'' {
                    out.push('\'');
                }
                out.push(c);
                out.push('\'');
            } else {
                out.push(c);
            }
        }
    }
    out
}

/// Parses a V2 `Environment` string: entries split as [`parse_args_v2`],
/// each `NAME=value` (split at the first `=`, the name non-empty). A name
/// given again replaces the earlier value in its position, as HTCondor's
/// `Env` does.
pub fn parse_env_v2(s: &str) -> Result<Vec<(String, String)>, ArgsError> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (i, entry) in parse_args_v2(s)?.into_iter().enumerate() {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(ArgsError::NotNameValue(i));
        };
        if name.is_empty() {
            return Err(ArgsError::NotNameValue(i));
        }
        match env.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.to_string(),
            None => env.push((name.to_string(), value.to_string())),
        }
    }
    Ok(env)
}

/// Writes `NAME=value` entries in V2 syntax, the inverse of
/// [`parse_env_v2`] for non-empty names without `=`.
pub fn format_env_v2<K: AsRef<str>, V: AsRef<str>>(env: &[(K, V)]) -> String {
    let entries: Vec<String> = env.iter().map(|(k, v)| format!("{}={}", k.as_ref(), v.as_ref())).collect();
    format_args_v2(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn value(text: &str) -> Value {
        ad(&format!("[ A = {text} ]")).get("a").unwrap().clone()
    }

    #[test]
    fn literals() {
        assert_eq!(value("\"x\""), Value::Str("x".into()));
        assert_eq!(value("\"a\\\"b\\\\c\\n\\t\\r\\'\\?\\q\""), Value::Str("a\"b\\c\n\t\r'?q".into()));
        assert_eq!(value("\"\\101\\7\\0101\\377\""), Value::Str("A\x07\x081\u{FFFD}".into()));
        assert_eq!(value("\"\\303\\251\""), Value::Str("é".into()));
        assert_eq!(value("\"a\" \"b\"  \"c\""), Value::Str("abc".into()));
        assert_eq!(value("\"\""), Value::Str("".into()));
        assert_eq!(value("64"), Value::Int(64));
        assert_eq!(value("-7"), Value::Int(-7));
        assert_eq!(value("0"), Value::Int(0));
        assert_eq!(value("0x1F"), Value::Int(31));
        assert_eq!(value("017"), Value::Int(15));
        assert_eq!(value("-9223372036854775808"), Value::Int(i64::MIN));
        assert_eq!(value("1.5"), Value::Real(1.5));
        assert_eq!(value("-.5"), Value::Real(-0.5));
        assert_eq!(value("2e3"), Value::Real(2000.0));
        assert_eq!(value("1.5E-2"), Value::Real(0.015));
        assert_eq!(value("TRUE"), Value::Bool(true));
        assert_eq!(value("false"), Value::Bool(false));
        assert_eq!(value("Undefined"), Value::Undefined);
        assert_eq!(value("ERROR"), Value::Error);
    }

    #[test]
    fn everything_else_is_an_expression() {
        for e in [
            "BoincPlatform == \"x86_64-pc-linux-gnu\"",
            "64M",
            "09",
            "5.",
            "1e",
            "- 5",
            "+5",
            "9223372036854775808",
            "1e999",
            "\"a\" + \"b\"",
            "{ 1, \"x;]\" }",
            "[ a = 1; b = [ c = \"]\" ] ]",
            "f(1, 'quoted;name')",
            "x\\",
        ] {
            assert_eq!(value(e), Value::Expr(e.into()), "{e}");
        }
    }

    #[test]
    fn structure() {
        assert!(ad("[]").is_empty());
        assert!(ad(" [ ] ").is_empty());
        let a = ad("[a=1;b=\"x\";]");
        assert_eq!(a.len(), 2);
        assert_eq!(a.get_int("A"), Some(1));
        assert_eq!(a.get_str("B"), Some("x"));
        assert_eq!(a.get_str("a"), None);
        let a = ad("[ 'odd name' = 1; 'true' = 2; '\\'' = 3 ]");
        assert_eq!(a.get_int("odd name"), Some(1));
        assert_eq!(a.get_int("TRUE"), Some(2));
        assert_eq!(a.get_int("'"), Some(3));
        // Duplicates: first position, last value and spelling.
        let a = ad("[ A = 1; B = 2; a = 3 ]");
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![("a", &Value::Int(3)), ("B", &Value::Int(2))]);
    }

    #[test]
    fn many_attributes_parse_in_linear_time() {
        let n = 200_000;
        let text: String = format!("[ {} ]", (0..n).map(|i| format!("A{i} = {i}")).collect::<Vec<_>>().join("; "));
        let start = std::time::Instant::now();
        let a = ad(&text);
        assert_eq!(a.len(), n);
        assert_eq!(a.get_int("a199999"), Some(199_999));
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn syntax_errors() {
        for bad in [
            "",
            "[",
            "]",
            "A = 1",
            "[ A = 1",
            "[ A = 1 ] x",
            "[ A = ]",
            "[ = 1 ]",
            "[ A 1 ]",
            "[ true = 1 ]",
            "[ '' = 1 ]",
            "[ 1A = 1 ]",
            "[ A = 1;; ]",
            "[ A = \"x ]",
            "[ A = (1] ]",
            "[ A = 1) ]",
            "[ A = \"\\0\" ]",
            "[ A = \"\\000\" ]",
            "[ A = \"a\0\" ]",
            "[ A = 1; ; ]",
        ] {
            assert!(ClassAd::parse(bad).is_err(), "{bad:?}");
        }
        let deep = format!("[ A = {}{} ]", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        assert!(matches!(ClassAd::parse(&deep), Err(ClassAdError::TooDeep { .. })));
        let ok = format!("[ A = {}{} ]", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert!(ClassAd::parse(&ok).is_ok());
    }

    #[test]
    fn display_like_htcondor() {
        let mut a = ClassAd::new();
        assert_eq!(a.to_string(), "[  ]");
        a.insert("BatchjobId", Value::Str("53899527028".into()));
        a.insert("JobStatus", Value::Int(4));
        a.insert("ExitBySignal", Value::Bool(false));
        a.insert("Wall", Value::Real(30.0));
        a.insert("Q", Value::Str("say \"hi\" it's a\\b\n\u{1}\u{7f}\0é".into()));
        a.insert("odd name", Value::Undefined);
        a.insert("error", Value::Error);
        a.insert("Req", Value::Expr("A == \"x\"".into()));
        assert_eq!(
            a.to_string(),
            "[ BatchjobId = \"53899527028\"; JobStatus = 4; ExitBySignal = false; Wall = 30.0; \
             Q = \"say \\\"hi\\\" it's a\\\\b\\n\\001\\177?é\"; 'odd name' = undefined; 'error' = error; Req = A == \"x\" ]"
        );
        assert_eq!(Value::Real(1e300).to_string(), "1e300");
        assert_eq!(Value::Real(f64::NAN).to_string(), "real(\"NaN\")");
        assert_eq!(Value::Real(f64::NEG_INFINITY).to_string(), "real(\"-INF\")");
    }

    #[test]
    fn insert_and_remove_ignore_case() {
        let mut a = ClassAd::new();
        a.insert("x", Value::Int(1));
        a.insert("Y", Value::Int(2));
        a.insert("X", Value::Int(3));
        assert_eq!(a.to_string(), "[ X = 3; Y = 2 ]");
        assert_eq!(a.remove("y"), Some(Value::Int(2)));
        assert_eq!(a.remove("y"), None);
        assert_eq!(a.get_bool("x"), None);
    }

    #[test]
    fn args_v2() {
        let v = |s: &str| parse_args_v2(s).unwrap();
        assert_eq!(v("one two'  'words three"), vec!["one", "two  words", "three"]);
        assert_eq!(v("  a\tb\r\nc  "), vec!["a", "b", "c"]);
        assert_eq!(v("'' x ''"), vec!["", "x", ""]);
        assert_eq!(v("'it''s' \"q\" a\\b"), vec!["it's", "\"q\"", "a\\b"]);
        assert_eq!(v(""), Vec::<String>::new());
        assert_eq!(parse_args_v2("a 'b"), Err(ArgsError::UnbalancedQuote(2)));
        assert_eq!(parse_args_v2("'''"), Err(ArgsError::UnbalancedQuote(0)));
        assert_eq!(format_args_v2(&["one", "two words", "three"]), "one two' 'words three");
        assert_eq!(format_args_v2(&["", "a b c", "it's", "'"]), "'' a' 'b' 'c it''''s ''''");
        assert_eq!(format_args_v2::<&str>(&[]), "");
    }

    #[test]
    fn args_v1() {
        assert_eq!(parse_args_v1(" a  'b c'\td "), vec!["a", "'b", "c'", "d"]);
        assert!(parse_args_v1("  ").is_empty());
    }

    #[test]
    fn env_v2() {
        let env = parse_env_v2("BAR=bar' 'with' 'space FOO=foo1 E= X=a=b BAR=again").unwrap();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, vec![("BAR", "again"), ("FOO", "foo1"), ("E", ""), ("X", "a=b")]);
        assert_eq!(parse_env_v2("A=1 B"), Err(ArgsError::NotNameValue(1)));
        assert_eq!(parse_env_v2("=x"), Err(ArgsError::NotNameValue(0)));
        assert_eq!(parse_env_v2("''"), Err(ArgsError::NotNameValue(0)));
        assert_eq!(format_env_v2(&[("BAR", "bar with space"), ("FOO", "")]), "BAR=bar' 'with' 'space FOO=");
    }
}
