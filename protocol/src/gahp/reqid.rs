//! The request id: a leaf, so that both dialects' grammars and their result
//! encoders can name it without importing each other.

/// A request id: a non-zero decimal integer chosen by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u32);

impl std::fmt::Display for ReqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
