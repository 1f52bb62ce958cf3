//! `boinc_gahp token`: the admin's commands for the clients of `serve`,
//! run as the real binary.

use std::path::Path;
use std::process::{Command, Output};

fn token(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_boinc_gahp")).arg("token").args(args).output().expect("boinc_gahp runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn add_prints_a_token_once_list_shows_no_secret_and_revoke_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let tokens = tokens.to_str().unwrap();
    let auth = dir.path().join("alice.auth");
    std::fs::write(&auth, "0123456789abcdef0123456789abcdef\n").unwrap();
    let project = format!("http://127.0.0.1:9/test/={}", auth.display());

    let out = token(&["add", "alice", "--tokens", tokens, "--project", &project]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "the token alone on stdout: {stdout:?}");
    let tok = lines[0];
    assert!(tok.starts_with("bgt_") && tok.len() == 68, "{tok}");
    assert!(!text(&out.stderr).contains(tok));

    let file = std::fs::read_to_string(tokens).unwrap();
    assert!(!file.contains(&tok[4..]), "the tokens file keeps the hash only");
    assert!(!file.contains("0123456789abcdef"), "and no authenticator");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(tokens).unwrap().permissions().mode() & 0o777, 0o600);
    }

    // A second add of the name is refused, the file unchanged.
    let again = token(&["add", "alice", "--tokens", tokens, "--project", &project]);
    assert!(!again.status.success() && again.stdout.is_empty());
    assert!(text(&again.stderr).contains("exists"), "{}", text(&again.stderr));
    assert_eq!(std::fs::read_to_string(tokens).unwrap(), file);

    let bob = token(&["add", "bob", "--tokens", tokens, "--project", &project]);
    assert!(bob.status.success());
    assert_ne!(text(&bob.stdout).trim(), tok, "each client its own token");

    let list = token(&["list", "--tokens", tokens]);
    let listed = text(&list.stdout);
    assert!(list.status.success());
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.starts_with("alice\tcreated ") && listed.contains("bob\t") && listed.contains("http://127.0.0.1:9/test/"));
    assert!(!listed.contains(&tok[4..]) && !listed.contains("0123456789abcdef") && !listed.contains("sha256"));

    let revoked = token(&["revoke", "alice", "--tokens", tokens]);
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let listed = text(&token(&["list", "--tokens", tokens]).stdout);
    assert!(!listed.contains("alice") && listed.contains("bob"), "{listed}");
    let twice = token(&["revoke", "alice", "--tokens", tokens]);
    assert!(!twice.status.success() && text(&twice.stderr).contains("no client named alice"));
}

#[test]
fn a_bad_project_or_an_unreadable_authenticator_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let t = tokens.to_str().unwrap();
    let missing = format!("http://127.0.0.1:9/test/={}", dir.path().join("none").display());
    for (args, says) in [
        (vec!["add", "a", "--tokens", t, "--project", &missing], "authenticator file"),
        (vec!["add", "a", "--tokens", t, "--project", "not-a-url"], "URL=AUTHFILE"),
        (vec!["add", "../a", "--tokens", t, "--project", &missing], "client name"),
    ] {
        let out = token(&args);
        assert!(!out.status.success() && out.stdout.is_empty(), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    assert!(!Path::new(t).exists());
    let out = token(&["add", "a", "--tokens", t]);
    assert!(!out.status.success(), "a client needs a project");
}
