//! Pure codecs for boinc-gahp. Nothing here does IO or knows about actors:
//! bytes in, typed values out, and back.
//!
//! * [`gahp`] — the stdio side: line framing, argument escaping, the typed
//!   requests of the `BOINC_*` dialect and the result lines we write back.
//! * [`boinc`] — the HTTP side: request XML builders and lenient parsers for
//!   the replies of a BOINC project's remote-submission API.
//! * [`secret`] — the authenticator, which never prints itself.

pub mod boinc;
pub mod gahp;
pub mod secret;

pub use secret::Authenticator;
