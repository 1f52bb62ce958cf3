//! What the grammars of both request families share (`request`: the
//! `BOINC_*` and `BLAH_*` commands; `sequence`: the `BOINC_SEQUENCE_*`
//! ones): the cursor over a command's arguments and its error, the number
//! spellings it accepts, the writer of the inverse, and the field types
//! both use.

use std::path::PathBuf;

use super::escape::{escape_with, Nul};
use super::reqid::ReqId;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InputFile {
    /// Local path (bytes as given; normally absolute).
    pub src: PathBuf,
    /// The file's name on the execution host.
    pub dst_name: String,
}

/// One trailing job parameter: `NULL` (or absent) is `Unset`; a number is
/// `Value`; anything else is kept as `Invalid` so the pipeline can say in the
/// result line which parameter was wrong.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ParamValue<T> {
    #[default]
    Unset,
    Value(T),
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty line")]
    Empty,
    #[error("unknown command {0}")]
    UnknownCommand(String),
    #[error("{command}: {reason}")]
    Malformed { command: &'static str, reason: String },
}

/// The arguments after the command code, taken one at a time. Errors name
/// the field, never quote its value (it may be huge, or a secret).
pub(crate) struct Args {
    command: &'static str,
    tokens: std::vec::IntoIter<Vec<u8>>,
}

impl Args {
    pub(crate) fn new(command: &'static str, tokens: std::vec::IntoIter<Vec<u8>>) -> Self {
        Args { command, tokens }
    }

    pub(crate) fn error(&self, reason: String) -> ParseError {
        ParseError::Malformed { command: self.command, reason }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.tokens.len()
    }

    pub(crate) fn end(&self) -> Result<(), ParseError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(format!("{n} unexpected extra argument(s)"))),
        }
    }

    pub(crate) fn raw(&mut self, what: &str) -> Result<Vec<u8>, ParseError> {
        match self.tokens.next() {
            Some(token) => Ok(token),
            None => Err(self.error(format!("missing {what}"))),
        }
    }

    pub(crate) fn name(&mut self, what: &str) -> Result<String, ParseError> {
        let token = self.raw(what)?;
        String::from_utf8(token).map_err(|_| self.error(format!("{what} is not valid UTF-8")))
    }

    /// Any bytes, invalid UTF-8 replaced by U+FFFD.
    pub(crate) fn text(&mut self, what: &str) -> Result<String, ParseError> {
        let token = self.raw(what)?;
        Ok(String::from_utf8(token).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    pub(crate) fn path(&mut self, what: &str) -> Result<PathBuf, ParseError> {
        use std::os::unix::ffi::OsStringExt;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(self.raw(what)?)))
    }

    pub(crate) fn count(&mut self, what: &str) -> Result<usize, ParseError> {
        let token = self.raw(what)?;
        parse_digits(&token)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.error(format!("{what} is not a non-negative integer")))
    }

    pub(crate) fn reqid(&mut self) -> Result<ReqId, ParseError> {
        let token = self.raw("request id")?;
        match parse_digits(&token).map(u32::try_from) {
            Some(Ok(n)) if n != 0 => Ok(ReqId(n)),
            _ => Err(self.error("request id is not an integer in 1..=4294967295".into())),
        }
    }

    /// A finite non-negative decimal: digits with at most one `.`, no sign,
    /// no exponent (what the gridmanager echoes from our `%f`).
    pub(crate) fn decimal(&mut self, what: &str) -> Result<f64, ParseError> {
        let token = self.raw(what)?;
        parse_decimal(&token).ok_or_else(|| self.error(format!("{what} is not a non-negative decimal number")))
    }

    /// Any finite number in any spelling Rust's `f64` parser accepts.
    pub(crate) fn number(&mut self, what: &str) -> Result<f64, ParseError> {
        let token = self.raw(what)?;
        parse_number(&token).ok_or_else(|| self.error(format!("{what} is not a finite number")))
    }

    pub(crate) fn param_f64(&mut self) -> Result<ParamValue<f64>, ParseError> {
        let token = self.raw("job parameter")?;
        Ok(param(token, parse_number))
    }

    pub(crate) fn param_i64(&mut self) -> Result<ParamValue<i64>, ParseError> {
        let token = self.raw("job parameter")?;
        Ok(param(token, |t| std::str::from_utf8(t).ok()?.parse().ok()))
    }
}

/// `NULL` is unset; a bad value is kept raw for the result line.
fn param<T>(token: Vec<u8>, parse: impl Fn(&[u8]) -> Option<T>) -> ParamValue<T> {
    if token == b"NULL" {
        return ParamValue::Unset;
    }
    match parse(&token) {
        Some(v) => ParamValue::Value(v),
        None => ParamValue::Invalid(String::from_utf8_lossy(&token).into_owned()),
    }
}

/// `[0-9]+` as a u64; `None` for anything else or on overflow.
pub(crate) fn parse_digits(token: &[u8]) -> Option<u64> {
    if token.is_empty() {
        return None;
    }
    token.iter().try_fold(0u64, |n, &b| {
        let digit = char::from(b).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn parse_decimal(token: &[u8]) -> Option<f64> {
    let digits = token.iter().filter(|b| b.is_ascii_digit()).count();
    let dots = token.iter().filter(|&&b| b == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != token.len() {
        return None;
    }
    parse_number(token).filter(|v| *v >= 0.0)
}

fn parse_number(token: &[u8]) -> Option<f64> {
    let v: f64 = std::str::from_utf8(token).ok()?.parse().ok()?;
    v.is_finite().then_some(v)
}

pub(crate) struct LineWriter(pub(crate) Vec<u8>);

impl LineWriter {
    pub(crate) fn code(&mut self, code: &str) {
        self.0.extend_from_slice(code.as_bytes());
    }

    pub(crate) fn arg(&mut self, arg: impl AsRef<[u8]>) {
        self.0.push(b' ');
        escape_with(arg.as_ref(), &mut self.0, Nul::Keep);
    }

    pub(crate) fn param<T: std::fmt::Display>(&mut self, value: &ParamValue<T>) {
        match value {
            ParamValue::Unset => self.arg("NULL"),
            ParamValue::Value(v) => self.arg(v.to_string()),
            ParamValue::Invalid(raw) => self.arg(raw),
        }
    }
}
