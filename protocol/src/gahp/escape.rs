//! Argument splitting and escaping (`docs/spec/gahp-protocol.md` §3).
//!
//! Input: a backslash makes the next byte literal and every unescaped space
//! separates two arguments. Output: a backslash goes before space,
//! backslash, CR and LF; nothing else needs escaping.

/// Splits one logical line (terminator already removed) into unescaped
/// arguments.
///
/// * `\x` is the literal byte `x`, for any byte (also LF and CR); a lone
///   backslash at the very end is dropped.
/// * Every unescaped space is a separator: two spaces delimit an empty
///   argument and a trailing space yields a trailing empty argument.
///
/// A line with `k` unescaped spaces always yields `k + 1` arguments, so an
/// empty line yields **one empty argument** (never zero). That keeps the
/// rule uniform and makes `split_args(&join_args(x)) == x` hold for every
/// non-empty `x`; the request parser reports an empty command code as
/// `ParseError::Empty`.
pub fn split_args(line: &[u8]) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    let mut current = Vec::new();
    let mut bytes = line.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => {
                // `None` here is the lone trailing backslash: dropped.
                if let Some(&next) = bytes.next() {
                    current.push(next);
                }
            }
            b' ' => args.push(std::mem::take(&mut current)),
            _ => current.push(b),
        }
    }
    args.push(current);
    args
}

/// Appends `arg` escaped for an output line: a backslash before space,
/// backslash, CR and LF. A NUL byte is written as `?` because the
/// gridmanager keeps arguments as C strings (§2).
pub fn escape_into(arg: &[u8], out: &mut Vec<u8>) {
    escape_with(arg, out, Nul::Replace);
}

/// Escapes every argument with [`escape_into`] and joins them with single
/// spaces.
pub fn join_args<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        escape_into(arg.as_ref(), &mut out);
    }
    out
}

/// What to do with a NUL byte.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nul {
    /// Write `?`: for lines the gridmanager reads.
    Replace,
    /// Write it as is: for request lines we format ourselves, so that
    /// parsing them gives back exactly what was formatted.
    Keep,
}

pub(crate) fn escape_with(arg: &[u8], out: &mut Vec<u8>, nul: Nul) {
    out.reserve(arg.len());
    for &b in arg {
        match b {
            b' ' | b'\\' | b'\r' | b'\n' => out.extend_from_slice(&[b'\\', b]),
            0 if nul == Nul::Replace => out.push(b'?'),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &[u8]) -> Vec<Vec<u8>> {
        split_args(s)
    }

    fn v(args: &[&[u8]]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.to_vec()).collect()
    }

    #[test]
    fn plain_words() {
        assert_eq!(split(b"BOINC_PING 2"), v(&[b"BOINC_PING", b"2"]));
    }

    #[test]
    fn empty_line_is_one_empty_argument() {
        assert_eq!(split(b""), v(&[b""]));
    }

    #[test]
    fn every_space_separates() {
        assert_eq!(split(b"a  b"), v(&[b"a", b"", b"b"]));
        assert_eq!(split(b"a "), v(&[b"a", b""]));
        assert_eq!(split(b" "), v(&[b"", b""]));
    }

    #[test]
    fn backslash_makes_next_byte_literal() {
        assert_eq!(split(b"my\\ run x"), v(&[b"my run", b"x"]));
        assert_eq!(split(b"a\\\\ b"), v(&[b"a\\", b"b"]));
        assert_eq!(split(b"a\\\nb"), v(&[b"a\nb"]));
        assert_eq!(split(b"a\\\rb"), v(&[b"a\rb"]));
        assert_eq!(split(b"\\x\\y"), v(&[b"xy"]));
    }

    #[test]
    fn lone_trailing_backslash_is_dropped() {
        assert_eq!(split(b"ab\\"), v(&[b"ab"]));
        assert_eq!(split(b"ab \\"), v(&[b"ab", b""]));
    }

    #[test]
    fn tabs_are_data() {
        assert_eq!(split(b"a\tb"), v(&[b"a\tb"]));
    }

    #[test]
    fn escapes_the_four_bytes_and_replaces_nul() {
        let mut out = Vec::new();
        escape_into(b"a b\\c\rd\ne\0f\t", &mut out);
        assert_eq!(out, b"a\\ b\\\\c\\\rd\\\ne?f\t");
    }

    #[test]
    fn join_escapes_and_separates() {
        assert_eq!(join_args(&["S", "no such batch"]), b"S no\\ such\\ batch");
        assert_eq!(join_args(&["a", "", "b"]), b"a  b");
        assert_eq!(join_args::<&str>(&[]), b"");
    }

    #[test]
    fn join_then_split_is_identity() {
        let args = v(&[b"", b"x y", b"\\", b"\n", b"", b"z\\"]);
        assert_eq!(split(&join_args(&args)), args);
    }
}
