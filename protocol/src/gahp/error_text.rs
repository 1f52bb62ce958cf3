//! How long an error text in a result line may be, for both dialects.

use std::borrow::Cow;

/// Error messages longer than this (in bytes, before escaping) are cut.
/// Well below the gridmanager's 500 KiB per-argument limit, and long
/// enough that no real message (which must end, untruncated, with
/// `no batch named <name>` for QUERY_BATCHES) is ever touched.
pub const MAX_ERROR_LEN: usize = 16 * 1024;

/// The message, cut beyond [`MAX_ERROR_LEN`] at a char boundary (keeping
/// the start, and saying that it was cut).
pub fn truncate(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_ERROR_LEN {
        return Cow::Borrowed(message);
    }
    let mut end = MAX_ERROR_LEN;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}... (truncated)", &message[..end]))
}

/// A hold reason is at most this many characters: HTCondor shows it on one
/// line of `condor_q -hold`, and a server's page of SQL helps nobody there.
pub const MAX_HOLD_REASON: usize = 300;

/// A server's multi-line error as one readable line of at most `max`
/// characters: its non-blank lines, trimmed, joined by "; ", cut at a
/// character with "..." when longer. The caller logs the whole text.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    match line.char_indices().nth(max) {
        None => line,
        Some(_) => {
            let keep = max.saturating_sub(3);
            let end = line.char_indices().nth(keep).map_or(line.len(), |(i, _)| i);
            format!("{}...", line[..end].trim_end())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_page_becomes_one_short_line() {
        assert_eq!(
            one_line("create_work failed:\n  md5_file: can't open /d/x\n\ncreate_work() failed: -108\n", 300),
            "create_work failed:; md5_file: can't open /d/x; create_work() failed: -108"
        );
        let sql = format!("create_work failed: Database error: You have an error in your SQL syntax near '{}'\n", "x".repeat(2000));
        let l = one_line(&sql, 300);
        assert_eq!(l.chars().count(), 300);
        assert!(l.ends_with("...") && l.starts_with("create_work failed: Database error"), "{l}");
        let wide = "\u{65e5}".repeat(400);
        assert_eq!(one_line(&wide, 10), format!("{}...", "\u{65e5}".repeat(7)));
        assert_eq!(one_line("short", 300), "short");
    }
}
