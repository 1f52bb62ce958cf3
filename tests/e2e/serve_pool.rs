//! Pools through `boinc_gahp serve`: a client selects a pool file in its
//! area whose projects are all its own; the pool's project ads are asked
//! once per project for every client of the serve; a pool naming a
//! project the client has no grant for is refused.

use std::path::{Path, PathBuf};

use crate::common::serve::*;
use crate::common::*;

/// A pool file in the client's area over these sims (no authenticator
/// files: a served client's projects use its token's); the path the
/// client names it by.
fn area_pool(area: &Path, sims: &[(&str, &Sim)]) -> String {
    let mut text = String::from("probe_timeout_secs = 5\nquery_timeout_secs = 5\nrefresh_secs = 3600\n");
    for (name, sim) in sims {
        text.push_str(&format!("[[project]]\nname = \"{name}\"\nurl = \"{}\"\n", sim.url));
    }
    std::fs::create_dir_all(area).unwrap();
    std::fs::write(area.join("pool.toml"), text).unwrap();
    "pool:pool.toml".into()
}

/// `n` inputs in the client's area, named as the client names them.
fn area_inputs(area: &Path, n: usize, tag: &str) -> Vec<PathBuf> {
    std::fs::create_dir_all(area.join("in")).unwrap();
    (0..n)
        .map(|i| {
            std::fs::write(area.join(format!("in/{tag}{i}")), format!("{tag} {i}\n")).unwrap();
            PathBuf::from(format!("in/{tag}{i}"))
        })
        .collect()
}

#[test]
fn two_clients_use_a_pool_whose_ads_are_asked_once_per_project_and_a_pool_beyond_a_grant_is_refused() {
    let (a, b) = (Sim::start(), Sim::start());
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client_sims(dir.path(), &tokens, &[&a, &b], "alice");
    let bob = add_client_sims(dir.path(), &tokens, &[&a, &b], "bob");
    let carol = add_client_sims(dir.path(), &tokens, &[&a], "carol");
    let s = serve(dir.path(), &tokens, &[]);
    let sims = [("a", &a), ("b", &b)];

    let mut clients = Vec::new();
    for (name, token) in [("alice", &alice), ("bob", &bob)] {
        let area = s.files(name);
        let pool = area_pool(&area, &sims);
        let mut g = s.connect(token, dir.path(), &["--remote-paths"]);
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        assert_eq!(g.command_line(format!("BOINC_SELECT_PROJECT {pool} -").as_bytes()).unwrap(), ["S"], "{name}");
        let files = area_inputs(&area, 2, name);
        let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("pooled", &files))), WAIT).unwrap();
        assert_eq!(r, ["NULL"], "{name}");
        clients.push((name, g));
    }
    // Each client's batch is on one project of the pool, under its own name.
    for (name, _) in &clients {
        let on: Vec<&str> =
            sims.iter().filter(|(_, sim)| !sim.batches_named(&format!("{name}~pooled")).is_empty()).map(|(n, _)| *n).collect();
        assert_eq!(on.len(), 1, "{name}~pooled is on {on:?}");
    }
    for (name, g) in &mut clients {
        let jobs = wait_finished(g, "pooled");
        assert_eq!(jobs.len(), 2, "{name}: {jobs:?}");
        assert!(jobs.iter().all(|(j, st)| st == "DONE" && j.starts_with("pooled#")), "{name}: {jobs:?}");
    }
    // Two clients, two pools, one set of ad calls per project: one ping
    // (it names no account) and one count of the account's jobs each.
    for (name, sim) in sims {
        for rpc in ["ping", "query_batches"] {
            assert_eq!(sim.calls(&format!("submit_rpc_handler.php:{rpc}")), 1, "{rpc} on {name}");
        }
    }

    // Carol has a grant for a only: a pool that also names b is refused,
    // one of a alone is hers to use.
    let area = s.files("carol");
    let pool = area_pool(&area, &sims);
    let mut g = s.connect(&carol, dir.path(), &["--remote-paths"]);
    assert_eq!(g.command_line(format!("BOINC_SELECT_PROJECT {pool} -").as_bytes()).unwrap(), ["E"]);
    let log = s.log_text();
    assert!(log.contains(&format!("project b: {} is not one of this client's projects", b.url)), "{log}");
    let pool = area_pool(&area, &[("a", &a)]);
    assert_eq!(g.command_line(format!("BOINC_SELECT_PROJECT {pool} -").as_bytes()).unwrap(), ["S"]);
    // A pool file outside its area is refused as any such path is.
    assert_eq!(g.command_line(b"BOINC_SELECT_PROJECT pool:/etc/pool.toml -").unwrap(), ["E"]);
}

/// Through `connect` a pool file on the first tier goes up as an input
/// does (named by its content on the second tier), and so do the
/// submit's inputs.
#[test]
fn a_pool_file_on_the_first_tier_goes_up_through_connect() {
    let (a, b) = (Sim::start(), Sim::start());
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client_sims(dir.path(), &tokens, &[&a, &b], "alice");
    let s = serve(dir.path(), &tokens, &[]);
    let local = dir.path().join("first tier");
    let pool = area_pool(&local, &[("a", &a), ("b", &b)]);
    std::fs::rename(local.join("pool.toml"), local.join("my pool.toml")).unwrap();
    let pool = pool.replace("pool.toml", "my\\ pool.toml");
    std::fs::write(local.join("x.txt"), "pooled x\n").unwrap();
    let mut g = s.connect(&alice, &local, &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(g.command_line(format!("BOINC_SELECT_PROJECT {pool} -").as_bytes()).unwrap(), ["S"]);
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("viaconnect", &[local.join("x.txt")]))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    let on = [&a, &b].iter().filter(|sim| !sim.batches_named("alice~viaconnect").is_empty()).count();
    assert_eq!(on, 1, "the batch is on one project of the pool");
    let jobs = wait_finished(&mut g, "viaconnect");
    assert!(jobs.iter().all(|(_, st)| st == "DONE"), "{jobs:?}");
    // The pool file is on the second tier by its content, not its name.
    let kept: Vec<String> = std::fs::read_dir(s.files("alice").join(".transfer/in"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept.len(), 2, "the pool file and the input: {kept:?}");
    // A pool file that is not there: refused here.
    assert_eq!(g.command_line(b"BOINC_SELECT_PROJECT pool:missing.toml -").unwrap(), ["E"]);
}

/// A project's files are the project's, whoever asks (seen on the real
/// server): what one client's pool learnt of them spares the pool of
/// another client, on another account, the same `query_files`.
#[test]
fn what_one_clients_pool_learnt_of_a_projects_files_spares_another_clients_pool_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let other = "0123456789abcdef0123456789abcdef";
    let users = format!("[[users]]\nname = \"other\"\nauthenticator = \"{other}\"\nsubmit_all = true\n");
    let sim_in = |sub: &str| {
        let d = dir.path().join(sub);
        std::fs::create_dir_all(&d).unwrap();
        Sim::start_config(&d, &users)
    };
    let (a, b) = (sim_in("sim a"), sim_in("sim b"));
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client_sims(dir.path(), &tokens, &[&a, &b], "alice");
    let bob = add_client_sims(dir.path(), &tokens, &[&a, &b], "bob");
    // Bob's account is another one, on both projects.
    for f in ["bob.auth", "bob-1.auth"] {
        std::fs::write(dir.path().join(f), format!("{other}\n")).unwrap();
    }
    let s = serve(dir.path(), &tokens, &[]);
    let sims = [("a", &a), ("b", &b)];
    for (name, token) in [("alice", &alice), ("bob", &bob)] {
        let area = s.files(name);
        let pool = area_pool(&area, &sims);
        std::fs::create_dir_all(area.join("in")).unwrap();
        std::fs::write(area.join("in/data"), "the data set both use\n").unwrap();
        let mut g = s.connect(token, dir.path(), &["--remote-paths"]);
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        assert_eq!(g.command_line(format!("BOINC_SELECT_PROJECT {pool} -").as_bytes()).unwrap(), ["S"], "{name}");
        let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("same", &[PathBuf::from("in/data")]))), WAIT).unwrap();
        assert_eq!(r, ["NULL"], "{name}");
    }
    let on = |batch: &str| -> Vec<&str> { sims.iter().filter(|(_, sim)| !sim.batches_named(batch).is_empty()).map(|(n, _)| *n).collect() };
    let holder = on("alice~same");
    assert_eq!(holder.len(), 1, "{holder:?}");
    assert_eq!(on("bob~same"), holder, "Bob's batch goes where the data is");
    // The project without the data was asked which files it holds once,
    // for Alice's pool: Bob's pool knew the answer already.
    let (_, elsewhere) = sims.iter().find(|(n, _)| *n != holder[0]).unwrap();
    assert_eq!(elsewhere.calls("job_file.php:query_files"), 1);
}
