//! Pure codecs for boinc-gahp. Nothing here does IO or knows about actors:
//! bytes in, typed values out, and back.
//!
//! * [`gahp`] — the stdio side: line framing, argument escaping, the typed
//!   requests of the `BOINC_*` and `BLAH_*` dialects and the result lines we
//!   write back.
//! * [`classad`] — the ClassAds of the BLAH dialect, and the HTCondor
//!   argument and environment strings inside them; expression parsing and
//!   evaluation for the broker's matchmaking.
//! * [`boinc`] — the HTTP side: request XML builders and lenient parsers for
//!   the replies of a BOINC project's remote-submission API.
//! * [`secret`] — the authenticator, which never prints itself.

#![forbid(unsafe_code)]

pub mod boinc;
pub mod classad;
pub mod gahp;
pub mod secret;

pub use secret::Authenticator;
