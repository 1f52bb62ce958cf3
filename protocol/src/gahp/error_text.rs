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
