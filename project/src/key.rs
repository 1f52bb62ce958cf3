//! The identity of a selected project: its URL and authenticator. A leaf
//! module, so that everything below a project can name it without
//! importing the registry that owns the trees.

use gahp_protocol::Authenticator;

/// A project as selected by BOINC_SELECT_PROJECT.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProjectKey {
    /// The master URL, always ending with `/` (script names are appended).
    pub url: String,
    pub authenticator: Authenticator,
}

impl ProjectKey {
    pub fn new(url: &str, authenticator: Authenticator) -> Self {
        let mut url = url.to_string();
        if !url.ends_with('/') {
            url.push('/');
        }
        ProjectKey { url, authenticator }
    }

    /// Names the account in the state database without storing its
    /// authenticator: the MD5 of it, in hex.
    pub fn account(&self) -> String {
        use md5::{Digest, Md5};
        Md5::digest(self.authenticator.expose().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for ProjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProjectKey({})", self.url)
    }
}
