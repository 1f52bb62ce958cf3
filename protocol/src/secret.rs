//! The BOINC authenticator: a bearer secret. Its `Debug` and `Display`
//! print a redaction, so it cannot reach a log line or an error message by
//! accident; the raw value is only handed out by [`Authenticator::expose`],
//! whose callers put it into request bodies and URLs and nowhere else.

use std::fmt;

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Authenticator(String);

impl Authenticator {
    pub fn new(raw: impl Into<String>) -> Self {
        Authenticator(raw.into())
    }

    /// The raw secret, for request bodies and the download URL only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` (e.g. a message
    /// built from a server reply that echoes a request) with a redaction.
    pub fn redact_in(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_string();
        }
        text.replace(&self.0, "<authenticator>")
    }
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Authenticator(<redacted>)")
    }
}

impl fmt::Display for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_itself() {
        let a = Authenticator::new("3f2a9c0d5e7b4a1c8d6e0f9a2b4c6d8e");
        assert!(!format!("{a:?} {a}").contains("3f2a9c"));
        assert_eq!(a.redact_in("bad 3f2a9c0d5e7b4a1c8d6e0f9a2b4c6d8e!"), "bad <authenticator>!");
    }
}
