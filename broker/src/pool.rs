//! The pool file (TOML): the projects of a pool, the default job
//! Requirements and Rank, how often project ads are refreshed, how long
//! rank results are cached, and the external rank functions. See
//! `deploy/pool.toml` for a commented example.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gahp_protocol::classad::expr::Expr;
use gahp_protocol::Authenticator;
use serde::Deserialize;

use gahp_project::ProjectKey;

/// What the job side asks for when the pool file says nothing: a project
/// that is up and has the app, preferring the one with most of the data.
pub const DEFAULT_REQUIREMENTS: &str = "TARGET.Up && member(MY.App, TARGET.Apps)";
pub const DEFAULT_RANK: &str = "boinc_data_overlap(TARGET)";

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("can't read the pool file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("pool file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    #[serde(default = "default_refresh")]
    refresh_secs: f64,
    #[serde(default = "default_ttl")]
    rank_cache_ttl_secs: f64,
    #[serde(default = "default_probe")]
    probe_timeout_secs: f64,
    #[serde(default = "default_query")]
    query_timeout_secs: f64,
    requirements: Option<String>,
    rank: Option<String>,
    #[serde(default)]
    project: Vec<ProjectEntry>,
    #[serde(default)]
    rank_function: Vec<RankFunctionEntry>,
}

fn default_refresh() -> f64 {
    60.0
}
fn default_ttl() -> f64 {
    600.0
}
fn default_probe() -> f64 {
    20.0
}
fn default_query() -> f64 {
    60.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectEntry {
    name: String,
    url: String,
    /// Required, except for a served client (its projects' keys are the
    /// ones its token grants).
    authenticator_file: Option<PathBuf>,
    /// Static app list; without it the apps are learnt with get_templates.
    apps: Option<Vec<String>>,
    requirements: Option<String>,
    rank: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RankFunctionEntry {
    name: String,
    command: Vec<String>,
    #[serde(default = "default_function_timeout")]
    timeout_secs: f64,
}

fn default_function_timeout() -> f64 {
    10.0
}

/// A loaded pool.
#[derive(Debug, Clone)]
pub struct Pool {
    /// The file it came from, as given (the key of its routes).
    pub path: PathBuf,
    pub refresh: Duration,
    pub rank_cache_ttl: Duration,
    pub probe_timeout: Duration,
    /// A project that does not answer a BOINC_QUERY_BATCHES within this is
    /// left out of that answer (its batches have no news), so it does not
    /// hold up the others.
    pub query_timeout: Duration,
    pub requirements: Expr,
    pub rank: Expr,
    pub projects: Vec<PoolProject>,
    pub functions: Vec<RankFunction>,
}

#[derive(Debug, Clone)]
pub struct PoolProject {
    pub name: String,
    pub key: ProjectKey,
    /// As given, resolved against the pool file's directory.
    pub authenticator_file: PathBuf,
    pub apps: Option<Vec<String>>,
    pub requirements: Expr,
    pub rank: Expr,
    /// Static attributes, as ClassAd expressions.
    pub attributes: Vec<(String, Expr)>,
}

#[derive(Debug, Clone)]
pub struct RankFunction {
    pub name: String,
    /// argv; run without a shell.
    pub command: Vec<String>,
    pub timeout: Duration,
}

impl Pool {
    /// Reads and checks the pool file and the projects' authenticator files
    /// (relative paths are taken from the pool file's directory).
    pub fn load(path: &Path) -> Result<Pool, PoolError> {
        let text = std::fs::read_to_string(path).map_err(|source| PoolError::Read { path: path.to_path_buf(), source })?;
        Pool::parse(path, &text, |_, file| {
            let file = file.ok_or("no authenticator_file")?;
            Ok((file.to_path_buf(), read_key(file)?))
        })
    }

    /// A served client's pool (`boinc_gahp serve`): every project must be
    /// one of `grants` (URL, authenticator file: the client's token), and
    /// is used with the granted authenticator, whatever the file names.
    /// Rank functions are refused: they would run commands of the client's
    /// choosing on the serving host.
    pub fn load_granted(path: &Path, grants: &[(String, PathBuf)]) -> Result<Pool, PoolError> {
        let text = std::fs::read_to_string(path).map_err(|source| PoolError::Read { path: path.to_path_buf(), source })?;
        let pool = Pool::parse(path, &text, |url, _| {
            let want = url.trim_end_matches('/');
            let (_, file) = grants
                .iter()
                .find(|(u, _)| u.trim_end_matches('/') == want)
                .ok_or_else(|| format!("{url} is not one of this client's projects"))?;
            // The client learns nothing of the serving host's files.
            let key = read_key(file).map_err(|e| {
                tracing::warn!(url, "a client's pool project has no usable authenticator: {e}");
                format!("the authenticator of {url} can't be read on the serving host; ask its admin")
            })?;
            Ok((file.clone(), key))
        })?;
        if !pool.functions.is_empty() {
            return Err(PoolError::Invalid {
                path: path.to_path_buf(),
                message: "rank functions are not offered by this server (they run commands on it)".into(),
            });
        }
        Ok(pool)
    }

    /// Parses the text; `key_of` turns a project's URL and authenticator
    /// file (resolved against the pool file's directory, if given) into the
    /// file used and its key.
    pub fn parse(
        path: &Path,
        text: &str,
        key_of: impl Fn(&str, Option<&Path>) -> Result<(PathBuf, String), String>,
    ) -> Result<Pool, PoolError> {
        let base = path.parent().unwrap_or(Path::new("."));
        let invalid = |message: String| PoolError::Invalid { path: path.to_path_buf(), message };
        let file: PoolFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let expr = |what: &str, text: Option<&str>, default: &str| {
            Expr::parse(text.unwrap_or(default)).map_err(|e| invalid(format!("{what}: {e}")))
        };
        let secs = |what: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v < 1e9 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(invalid(format!("{what} must be a positive number of seconds")))
            }
        };
        if file.project.is_empty() {
            return Err(invalid("no [[project]]".into()));
        }
        let mut projects: Vec<PoolProject> = Vec::new();
        for p in &file.project {
            if p.name.is_empty() || projects.iter().any(|q| q.name == p.name) {
                return Err(invalid(format!("project names must be unique and non-empty ({:?})", p.name)));
            }
            if !(p.url.starts_with("http://") || p.url.starts_with("https://")) {
                return Err(invalid(format!("project {}: the url must be http:// or https://", p.name)));
            }
            let given = p.authenticator_file.as_ref().map(|f| base.join(f));
            let (authenticator_file, key) = key_of(&p.url, given.as_deref()).map_err(|e| invalid(format!("project {}: {e}", p.name)))?;
            let mut attributes = Vec::new();
            for (name, value) in &p.attributes {
                let e = toml_expr(value).ok_or_else(|| invalid(format!("project {}: attribute {name}: unsupported value", p.name)))?;
                attributes.push((name.clone(), e));
            }
            projects.push(PoolProject {
                name: p.name.clone(),
                key: ProjectKey::new(&p.url, Authenticator::new(key)),
                authenticator_file,
                apps: p.apps.clone(),
                requirements: expr(&format!("project {} requirements", p.name), p.requirements.as_deref(), "true")?,
                rank: expr(&format!("project {} rank", p.name), p.rank.as_deref(), "0")?,
                attributes,
            });
        }
        let mut functions: Vec<RankFunction> = Vec::new();
        for f in &file.rank_function {
            let ok_name = f.name.bytes().enumerate().all(|(i, b)| b.is_ascii_alphabetic() || b == b'_' || (i > 0 && b.is_ascii_digit()));
            if f.name.is_empty() || !ok_name || functions.iter().any(|g| g.name.eq_ignore_ascii_case(&f.name)) {
                return Err(invalid(format!("rank function names must be unique identifiers ({:?})", f.name)));
            }
            if f.command.is_empty() {
                return Err(invalid(format!("rank function {}: empty command", f.name)));
            }
            functions.push(RankFunction {
                name: f.name.clone(),
                command: f.command.clone(),
                timeout: secs(&format!("rank function {} timeout_secs", f.name), f.timeout_secs)?,
            });
        }
        Ok(Pool {
            path: path.to_path_buf(),
            refresh: secs("refresh_secs", file.refresh_secs)?,
            rank_cache_ttl: secs("rank_cache_ttl_secs", file.rank_cache_ttl_secs)?,
            probe_timeout: secs("probe_timeout_secs", file.probe_timeout_secs)?,
            query_timeout: secs("query_timeout_secs", file.query_timeout_secs)?,
            requirements: expr("requirements", file.requirements.as_deref(), DEFAULT_REQUIREMENTS)?,
            rank: expr("rank", file.rank.as_deref(), DEFAULT_RANK)?,
            projects,
            functions,
        })
    }

    pub fn project(&self, name: &str) -> Option<&PoolProject> {
        self.projects.iter().find(|p| p.name == name)
    }
}

/// The key in an authenticator file, its details in the error (for the
/// log: a served client is told less).
fn read_key(file: &Path) -> Result<String, String> {
    gahp_services::config::read_authenticator_file(file).map(|a| a.expose().to_string()).map_err(|e| e.to_string())
}

/// A TOML value as a ClassAd literal (arrays become lists).
fn toml_expr(v: &toml::Value) -> Option<Expr> {
    Some(match v {
        toml::Value::String(s) => Expr::Str(s.clone()),
        toml::Value::Integer(i) => Expr::Int(*i),
        toml::Value::Float(f) if f.is_finite() => Expr::Real(*f),
        toml::Value::Boolean(b) => Expr::Bool(*b),
        toml::Value::Array(items) => Expr::List(items.iter().map(toml_expr).collect::<Option<_>>()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Pool, PoolError> {
        Pool::parse(Path::new("pool.toml"), text, |_, f| {
            let f = f.ok_or("no authenticator_file")?;
            Ok((f.to_path_buf(), format!("key-of-{}", f.display())))
        })
    }

    #[test]
    fn a_full_pool_file() {
        let pool = parse(
            r#"
            refresh_secs = 30
            rank_cache_ttl_secs = 120
            requirements = 'member(MY.App, TARGET.Apps)'
            [[project]]
            name = "a"
            url = "http://127.0.0.1:1/a"
            authenticator_file = "a.key"
            apps = ["uppercase"]
            rank = 'other.JobCount'
            attributes = { Site = "x", Cores = 4, Fast = true, Tags = ["gpu", "ssd"] }
            [[project]]
            name = "b"
            url = "https://b.example/b/"
            authenticator_file = "b.key"
            [[rank_function]]
            name = "site_rank"
            command = ["/usr/bin/site-rank", "--fast"]
            timeout_secs = 2
            "#,
        )
        .unwrap();
        assert_eq!(pool.refresh, Duration::from_secs(30));
        assert_eq!(pool.projects.len(), 2);
        assert_eq!(pool.projects[0].key.url, "http://127.0.0.1:1/a/");
        assert_eq!(pool.projects[0].key.authenticator.expose(), "key-of-a.key");
        assert_eq!(pool.projects[0].attributes.len(), 4);
        assert_eq!(pool.rank.to_string(), "boinc_data_overlap(TARGET)");
        assert_eq!(pool.functions[0].timeout, Duration::from_secs(2));
        assert!(pool.project("b").is_some());
    }

    #[test]
    fn the_example_in_deploy_is_valid() {
        let pool = parse(include_str!("../../deploy/pool.toml")).unwrap();
        assert_eq!(pool.projects.len(), 2);
        assert_eq!(pool.functions[0].name, "site_rank");
        assert_eq!(pool.requirements.to_string(), Expr::parse(DEFAULT_REQUIREMENTS).unwrap().to_string());
    }

    #[test]
    fn bad_pool_files_are_refused_with_a_reason() {
        for (text, why) in [
            ("", "no [[project]]"),
            ("[[project]]\nname='a'\nurl='ftp://x'\nauthenticator_file='k'", "http"),
            ("rank = '1 +'\n[[project]]\nname='a'\nurl='http://x'\nauthenticator_file='k'", "rank"),
            ("refresh_secs = -1\n[[project]]\nname='a'\nurl='http://x'\nauthenticator_file='k'", "refresh_secs"),
            ("[[project]]\nname='a'\nurl='http://x'\nauthenticator_file='k'\n[[project]]\nname='a'\nurl='http://y'\nauthenticator_file='k'", "unique"),
            ("[[project]]\nname='a'\nurl='http://x'\nauthenticator_file='k'\n[[rank_function]]\nname='f g'\ncommand=['x']", "identifiers"),
            ("[[project]]\nname='a'\nurl='http://x'\nauthenticator_file='k'\nbogus=1", "bogus"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn a_served_pool_uses_the_granted_keys_and_names_only_granted_projects() {
        let dir = tempfile::tempdir().unwrap();
        let granted = dir.path().join("granted.auth");
        std::fs::write(&granted, "the-granted-key\n").unwrap();
        std::fs::write(dir.path().join("own.auth"), "a-key-of-the-clients-choosing\n").unwrap();
        let grants = vec![("http://127.0.0.1:1/a/".to_string(), granted.clone())];
        let path = dir.path().join("pool.toml");
        let write = |text: &str| std::fs::write(&path, text).unwrap();

        // No authenticator_file needed; one named is not used.
        write("[[project]]\nname='a'\nurl='http://127.0.0.1:1/a'\n[[project]]\nname='b'\nurl='http://127.0.0.1:1/a/'\nauthenticator_file='own.auth'");
        let pool = Pool::load_granted(&path, &grants).unwrap();
        for p in &pool.projects {
            assert_eq!((p.key.authenticator.expose(), p.authenticator_file.as_path()), ("the-granted-key", granted.as_path()));
        }
        write("[[project]]\nname='a'\nurl='http://127.0.0.1:1/a'\n[[project]]\nname='c'\nurl='http://127.0.0.1:1/c'");
        let err = Pool::load_granted(&path, &grants).unwrap_err().to_string();
        assert!(err.contains("project c: http://127.0.0.1:1/c is not one of this client's projects"), "{err}");
        write("[[project]]\nname='a'\nurl='http://127.0.0.1:1/a'\n[[rank_function]]\nname='f'\ncommand=['/bin/true']");
        let err = Pool::load_granted(&path, &grants).unwrap_err().to_string();
        assert!(err.contains("rank functions are not offered"), "{err}");
        // The stdio daemon's pool needs its keys.
        write("[[project]]\nname='a'\nurl='http://127.0.0.1:1/a'");
        assert!(Pool::load(&path).unwrap_err().to_string().contains("project a: no authenticator_file"));
    }
}
