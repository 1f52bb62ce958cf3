//! The clients of `boinc_gahp serve` and their tokens: the tokens file
//! (TOML) holds, per client, a name, the SHA-256 of its token (never the
//! token), when it was made, and the projects it may use with the path of
//! each project's authenticator file on this host. The authenticators
//! themselves stay in those files: the tokens file holds nothing that works
//! against a project, and an admin who rotates a key edits one file.
//!
//! A token is 256 random bits, written as `bgt_` and 64 hex digits; it is
//! shown once, by `token add`. The file is written whole (temporary file,
//! rename), mode 0600, under a lock so that two admins' edits don't lose one.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use gahp_services::atomic_file;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What every token starts with, so that secret scanners and people know one.
pub const TOKEN_PREFIX: &str = "bgt_";

/// Client names become directory names: short, and no path in them.
const MAX_NAME: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("can't read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is not a tokens file: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("can't write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("a client name is 1 to {MAX_NAME} of A-Z a-z 0-9 . _ - and does not start with a dot: {0:?}")]
    BadName(String),
    #[error("a client named {0} exists; revoke it first")]
    Exists(String),
    #[error("no client named {0}")]
    NoSuchClient(String),
    #[error("--project takes URL=AUTHFILE, not {0:?}")]
    BadProject(String),
    #[error("a client needs at least one --project URL=AUTHFILE")]
    NoProjects,
    #[error("project {url}: {source}")]
    Authenticator { url: String, source: gahp_services::config::AuthenticatorFileError },
}

/// A token as a client presents it. Its Debug and Display redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A new token: 256 bits from the operating system's generator.
    pub fn generate() -> Token {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Token(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
    }

    pub fn new(raw: impl Into<String>) -> Token {
        Token(raw.into())
    }

    /// The raw token, for `token add` to print once and a client to send.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One project a client may use, and where its authenticator is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientProject {
    pub url: String,
    pub authenticator_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    pub name: String,
    /// SHA-256 of the token, hex.
    pub token_sha256: String,
    /// Seconds since the epoch.
    pub created: u64,
    #[serde(default, rename = "project")]
    pub projects: Vec<ClientProject>,
}

impl Client {
    /// The authenticator file of `url` (compared as the daemon compares
    /// project URLs: trailing slashes aside), if the client may use it.
    pub fn authenticator_file(&self, url: &str) -> Option<&Path> {
        let want = url.trim_end_matches('/');
        self.projects.iter().find(|p| p.url.trim_end_matches('/') == want).map(|p| p.authenticator_file.as_path())
    }
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensFile {
    #[serde(default, rename = "client")]
    pub clients: Vec<Client>,
}

const HEADER: &str = "# boinc_gahp serve's clients (written by `boinc_gahp token`): SHA-256 hashes of their\n\
                      # tokens, never the tokens; each project's authenticator stays in its own file.\n\n";

impl TokensFile {
    /// Reads the file; a missing one is empty only if `missing_ok`.
    pub fn load(path: &Path, missing_ok: bool) -> Result<TokensFile, TokenError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if missing_ok && e.kind() == io::ErrorKind::NotFound => return Ok(TokensFile::default()),
            Err(source) => return Err(TokenError::Read { path: path.into(), source }),
        };
        let file: TokensFile = toml::from_str(&text).map_err(|e| TokenError::Parse { path: path.into(), detail: e.message().into() })?;
        for c in &file.clients {
            valid_name(&c.name)?;
            if unhex(&c.token_sha256).is_none() {
                return Err(TokenError::Parse {
                    path: path.into(),
                    detail: format!("client {}: token_sha256 is not 64 hex digits", c.name),
                });
            }
        }
        Ok(file)
    }

    /// Writes the file whole, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), TokenError> {
        let text = toml::to_string(self).map_err(|e| TokenError::Parse { path: path.into(), detail: e.to_string() })?;
        let werr = |source| TokenError::Write { path: path.into(), source };
        atomic_file::write_whole(path, |f| {
            set_owner_only(f)?;
            f.write_all(HEADER.as_bytes())?;
            f.write_all(text.as_bytes())
        })
        .map_err(werr)
    }

    /// The client whose token this is. Every client's hash is compared, in
    /// constant time, whatever matches: the time taken says nothing of which.
    pub fn authenticate(&self, token: &Token) -> Option<&Client> {
        let digest = token.digest();
        let mut found = None;
        for c in &self.clients {
            let Some(stored) = unhex(&c.token_sha256) else { continue };
            if constant_time_eq(&stored, &digest) && found.is_none() {
                found = Some(c);
            }
        }
        found
    }

    pub fn client(&self, name: &str) -> Option<&Client> {
        self.clients.iter().find(|c| c.name == name)
    }
}

#[cfg(unix)]
fn set_owner_only(f: &File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn set_owner_only(_: &File) -> io::Result<()> {
    Ok(())
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

pub fn valid_name(name: &str) -> Result<(), TokenError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(TokenError::BadName(name.into()))
    }
}

/// `URL=AUTHFILE` of `--project`: the URL is everything before the last
/// `=` that is followed by a path (URLs may hold `=` in a query).
pub fn parse_project(arg: &str) -> Result<ClientProject, TokenError> {
    let bad = || TokenError::BadProject(arg.into());
    let (url, file) = arg.rsplit_once('=').ok_or_else(bad)?;
    if url.is_empty() || file.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad());
    }
    Ok(ClientProject { url: url.into(), authenticator_file: file.into() })
}

/// Checks that an authenticator file holds an account key now.
fn check_authenticator(url: &str, path: &Path) -> Result<(), TokenError> {
    gahp_services::config::read_authenticator_file(path).map(drop).map_err(|source| TokenError::Authenticator { url: url.into(), source })
}

/// Holds `<tokens>.lock` locked while it lives: one `token` edit at a time.
struct EditLock(#[allow(dead_code)] File);

fn lock(path: &Path) -> Result<EditLock, TokenError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let werr = |source| TokenError::Write { path: PathBuf::from(&name), source };
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&name).map_err(werr)?;
    f.lock().map_err(werr)?;
    Ok(EditLock(f))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Adds a client and returns its new token. Each authenticator file must
/// be readable now (a typo is found by the admin, not by the client), and
/// its absolute path is recorded.
pub fn add(path: &Path, name: &str, projects: Vec<ClientProject>) -> Result<Token, TokenError> {
    valid_name(name)?;
    if projects.is_empty() {
        return Err(TokenError::NoProjects);
    }
    let mut recorded = Vec::with_capacity(projects.len());
    for p in projects {
        check_authenticator(&p.url, &p.authenticator_file)?;
        let file = std::path::absolute(&p.authenticator_file).unwrap_or(p.authenticator_file);
        recorded.push(ClientProject { url: p.url, authenticator_file: file });
    }
    let _lock = lock(path)?;
    let mut file = TokensFile::load(path, true)?;
    if file.client(name).is_some() {
        return Err(TokenError::Exists(name.into()));
    }
    let token = Token::generate();
    file.clients.push(Client { name: name.into(), token_sha256: hex(&token.digest()), created: now(), projects: recorded });
    file.save(path)?;
    Ok(token)
}

/// Removes a client: its token stops working at its next connection, and
/// a running `serve` ends its open ones.
pub fn revoke(path: &Path, name: &str) -> Result<(), TokenError> {
    let _lock = lock(path)?;
    let mut file = TokensFile::load(path, false)?;
    let before = file.clients.len();
    file.clients.retain(|c| c.name != name);
    if file.clients.len() == before {
        return Err(TokenError::NoSuchClient(name.into()));
    }
    file.save(path)
}

/// `token list`: names, projects and creation dates; no token, no hash,
/// no authenticator.
pub fn list(path: &Path) -> Result<String, TokenError> {
    let file = TokensFile::load(path, true)?;
    let mut by_name: BTreeMap<&str, &Client> = BTreeMap::new();
    for c in &file.clients {
        by_name.insert(&c.name, c);
    }
    let mut out = String::new();
    for (name, c) in by_name {
        let projects: Vec<&str> = c.projects.iter().map(|p| p.url.as_str()).collect();
        out.push_str(&format!("{name}\tcreated {}\t{}\n", utc_date(c.created), projects.join(" ")));
    }
    Ok(out)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since the epoch (civil-from-days).
fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authfile(dir: &Path, name: &str, key: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("{key}\n")).unwrap();
        p
    }

    #[test]
    fn a_token_is_256_random_bits_and_never_printed_by_debug() {
        let (a, b) = (Token::generate(), Token::generate());
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), TOKEN_PREFIX.len() + 64);
        assert!(!format!("{a:?} {a}").contains(&a.expose()[4..]));
    }

    #[test]
    fn the_file_keeps_hashes_only_and_authenticates_the_token_it_printed() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        let auth = authfile(dir.path(), "a.auth", "secretkey123");
        let p = parse_project(&format!("http://127.0.0.1:1/test/={}", auth.display())).unwrap();
        let t = add(&tokens, "alice", vec![p]).unwrap();
        let text = std::fs::read_to_string(&tokens).unwrap();
        assert!(!text.contains(t.expose()) && !text.contains(&t.expose()[4..]), "{text}");
        assert!(!text.contains("secretkey123"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let file = TokensFile::load(&tokens, false).unwrap();
        assert_eq!(file.authenticate(&t).map(|c| c.name.as_str()), Some("alice"));
        assert!(file.authenticate(&Token::new("bgt_nope")).is_none());
        let mut wrong = t.expose().to_string();
        wrong.pop();
        wrong.push('x');
        assert!(file.authenticate(&Token::new(wrong)).is_none());
        assert_eq!(file.client("alice").unwrap().authenticator_file("http://127.0.0.1:1/test"), Some(auth.as_path()));
    }

    #[test]
    fn revoke_removes_the_client_and_its_token_stops_working() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        let auth = authfile(dir.path(), "a.auth", "k");
        let p = || ClientProject { url: "http://127.0.0.1:1/test/".into(), authenticator_file: auth.clone() };
        let ta = add(&tokens, "alice", vec![p()]).unwrap();
        let tb = add(&tokens, "bob", vec![p()]).unwrap();
        assert!(matches!(add(&tokens, "bob", vec![p()]), Err(TokenError::Exists(_))));
        revoke(&tokens, "alice").unwrap();
        assert!(matches!(revoke(&tokens, "alice"), Err(TokenError::NoSuchClient(_))));
        let file = TokensFile::load(&tokens, false).unwrap();
        assert!(file.authenticate(&ta).is_none());
        assert_eq!(file.authenticate(&tb).map(|c| c.name.as_str()), Some("bob"));
        let listed = list(&tokens).unwrap();
        assert!(listed.starts_with("bob\tcreated 20") && listed.contains("http://127.0.0.1:1/test/"), "{listed}");
        assert!(!listed.contains("alice") && !listed.contains(&file.clients[0].token_sha256));
    }

    #[test]
    fn bad_input_is_refused_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        for name in ["", "../x", ".hidden", "a/b", &"x".repeat(65)] {
            assert!(matches!(valid_name(name), Err(TokenError::BadName(_))), "{name:?}");
        }
        assert!(parse_project("no-equals").is_err());
        assert!(parse_project("ftp://x=/f").is_err());
        let p = parse_project("https://h/p?x=1=/etc/auth").unwrap();
        assert_eq!((p.url.as_str(), p.authenticator_file.as_path()), ("https://h/p?x=1", Path::new("/etc/auth")));
        let missing = ClientProject { url: "http://h/".into(), authenticator_file: dir.path().join("none") };
        assert!(matches!(add(&tokens, "a", vec![missing]), Err(TokenError::Authenticator { .. })));
        let empty = authfile(dir.path(), "empty", "");
        let empty = ClientProject { url: "http://h/".into(), authenticator_file: empty };
        assert!(matches!(add(&tokens, "a", vec![empty]), Err(TokenError::Authenticator { .. })));
        assert!(matches!(add(&tokens, "a", vec![]), Err(TokenError::NoProjects)));
        assert!(!tokens.exists(), "nothing written for refused adds");
        std::fs::write(&tokens, "[[client]]\nname = \"a\"\ntoken_sha256 = \"zz\"\ncreated = 0\n").unwrap();
        assert!(matches!(TokensFile::load(&tokens, false), Err(TokenError::Parse { .. })));
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_date(1_795_564_800), "2026-11-25T00:00:00Z");
        assert_eq!(utc_date(951_782_400 + 3661), "2000-02-29T01:01:01Z");
    }
}
