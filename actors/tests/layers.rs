//! The layering of `actors/src` as drawn in its `lib.rs`, and of the root
//! crate's `src/` as drawn in its `lib.rs`, both in `docs/design.md`,
//! checked over the source: a module names only modules of its own layer
//! or of a lower one, and no two files of `actors/src`, of `protocol/src`
//! or of `src/` name each other, directly or around a circle.
//!
//! Every `crate::…` and `super::…` path counts, in `use` lines and inline,
//! tests included. A folder's `mod.rs` may name its own files (it declares
//! and re-exports them); its files naming it back is not a circle. The
//! root crate's binaries (`main.rs`, `bin/`) name its library as
//! `boinc_gahp::…`, which is not followed: they are the top layer, and
//! nothing names them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's layers, top to bottom: each a name and its top-level modules.
/// A module belongs to the layer of the first entry that is it or one of
/// its ancestors.
type Layers = &'static [(&'static str, &'static [&'static str])];

const ACTORS: Layers = &[
    ("front ends", &["session", "runtime", "tenancy", "blah"]),
    ("multi-project", &["broker"]),
    ("one project", &["projects", "project", "sequences"]),
    (
        "shared services",
        &["state_db", "file_stager", "result_queue", "config", "clock", "atomic_file", "unpack", "metrics", "metrics_http"],
    ),
];

/// The root crate's `src/`, over the workspace's crates. `""` is `lib.rs`.
const ROOT: Layers = &[
    ("binaries' wiring", &["", "main", "cli", "bin"]),
    ("commands", &["check", "serve", "demo", "remote_layout"]),
    ("settings", &["settings", "log_file", "stdin"]),
];

/// Module path (`blah::project`) -> file, for every `.rs` under `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The longest known module that `path` (segments) starts with.
fn resolve(path: &[String], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| known.contains_key(m))
}

/// Paths named in `text` by the file of `module`: each `crate::a::b` and
/// `super::…` as absolute segments. Comments are skipped.
fn named(module: &str, text: &str) -> Vec<Vec<String>> {
    // `super` is the parent module, for `a/b.rs` and `a/mod.rs` alike.
    let mut parent: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
    parent.pop();
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut i = 0;
        while i < code.len() {
            let prev = code[..i].chars().next_back();
            let starts_word = !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            let rest = &code[i..];
            let (mut base, mut j) = if starts_word && rest.starts_with("crate::") {
                (Vec::new(), i + "crate::".len())
            } else if starts_word && rest.starts_with("super::") {
                let (mut base, mut j) = (parent.clone(), i + "super::".len());
                while code[j..].starts_with("super::") {
                    base.pop();
                    j += "super::".len();
                }
                (base, j)
            } else {
                i += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            };
            if code[j..].starts_with('{') {
                // `use crate::{a::b, c}`: each member of the group.
                let close = code[j..].find('}').map_or(code.len(), |c| j + c);
                for member in code[j + 1..close].split(',') {
                    let segs: Vec<String> = member.split("::").map(|s| s.trim().to_string()).filter(|s| is_ident(s)).collect();
                    if !segs.is_empty() {
                        out.push(base.iter().cloned().chain(segs).collect());
                    }
                }
                i = close.max(i + 1);
                continue;
            }
            loop {
                let end = code[j..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(code.len(), |e| j + e);
                if end == j {
                    break;
                }
                base.push(code[j..end].to_string());
                j = end;
                if !code[j..].starts_with("::") {
                    break;
                }
                j += 2;
            }
            out.push(base);
            i = j.max(i + 1);
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// File-level edges: module -> modules it names (itself, and a mod.rs's
/// own descendants, left out).
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &known {
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let text = std::fs::read_to_string(file).unwrap();
        let targets = out.entry(module.clone()).or_default();
        for path in named(module, &text) {
            let Some(to) = resolve(&path, &known) else { continue };
            let own_child = is_mod_rs && (module.is_empty() || to.starts_with(&format!("{module}::")));
            if to != *module && !own_child {
                targets.insert(to);
            }
        }
    }
    out
}

fn layer(layers: Layers, module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or("");
    layers.iter().position(|(_, mods)| mods.contains(&top))
}

/// The modules of `src` in no layer of `layers` (`lib.rs` aside where
/// the table leaves it out).
fn unlayered(src: &Path, layers: Layers) -> Vec<String> {
    let lib_listed = layers.iter().any(|(_, mods)| mods.contains(&""));
    edges(src).into_keys().filter(|m| (lib_listed || !m.is_empty()) && layer(layers, m).is_none()).collect()
}

/// Each place a module of `src` names one of a higher layer.
fn upward(src: &Path, layers: Layers) -> Vec<String> {
    let mut found = Vec::new();
    for (from, tos) in edges(src) {
        let Some(lf) = layer(layers, &from) else { continue };
        for to in tos {
            if let Some(lt) = layer(layers, &to) {
                if lt < lf {
                    found.push(format!("{from} ({}) -> {to} ({})", layers[lf].0, layers[lt].0));
                }
            }
        }
    }
    found
}

/// The circles of the graph: each set of two or more files that reach
/// each other (strongly connected components, Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) -> usize {
            let n = self.index.len();
            self.index.insert(node, (n, n));
            self.stack.push(node);
            self.on_stack.insert(node);
            let mut low = n;
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                match self.index.get(next) {
                    None => low = low.min(self.visit(next)),
                    Some(&(i, _)) if self.on_stack.contains(next) => low = low.min(i),
                    Some(_) => {}
                }
            }
            self.index.insert(node, (n, low));
            if low == n {
                let mut part = Vec::new();
                while let Some(m) = self.stack.pop() {
                    self.on_stack.remove(m);
                    part.push(m.to_string());
                    if m == node {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
            low
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

/// The root crate's `src/` (the binaries, check, serve, demo).
fn root_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../src")
}

#[test]
fn every_module_of_actors_has_a_layer() {
    let missing = unlayered(&crate_src("actors"), ACTORS);
    assert!(missing.is_empty(), "modules in no layer (add them to ACTORS here, actors/src/lib.rs and docs/design.md): {missing:?}");
}

#[test]
fn actors_depend_downward_only() {
    let up = upward(&crate_src("actors"), ACTORS);
    assert!(up.is_empty(), "a lower layer names a higher one:\n{}", up.join("\n"));
}

#[test]
fn no_circle_among_the_files_of_actors() {
    let c = circles(&edges(&crate_src("actors")));
    assert!(c.is_empty(), "files of actors/src that name each other, around a circle: {c:?}");
}

#[test]
fn no_circle_among_the_files_of_protocol() {
    let c = circles(&edges(&crate_src("protocol")));
    assert!(c.is_empty(), "files of protocol/src that name each other, around a circle: {c:?}");
}

#[test]
fn every_module_of_the_root_crate_has_a_layer() {
    let missing = unlayered(&root_src(), ROOT);
    assert!(missing.is_empty(), "modules in no layer (add them to ROOT here, src/lib.rs and docs/design.md): {missing:?}");
}

#[test]
fn the_root_crate_depends_downward_only() {
    let up = upward(&root_src(), ROOT);
    assert!(up.is_empty(), "a lower layer of src/ names a higher one:\n{}", up.join("\n"));
}

#[test]
fn no_circle_among_the_files_of_the_root_crate() {
    let c = circles(&edges(&root_src()));
    assert!(c.is_empty(), "files of src/ that name each other, around a circle: {c:?}");
}

#[test]
fn the_check_sees_what_it_must() {
    // The scanner itself: each kind of path it must see, and a circle.
    let m = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(named("a::b", "use crate::x::y::Z;"), vec![m(&["x", "y", "Z"])]);
    assert_eq!(named("a::b", "let v = crate::x::f(); // crate::no"), vec![m(&["x", "f"])]);
    assert_eq!(named("a::b", "use super::c::D;"), vec![m(&["a", "c", "D"])]);
    assert_eq!(named("a", "use super::c;"), vec![m(&["c"])]);
    assert_eq!(named("a::b", "use super::super::c;"), vec![m(&["c"])]);
    assert_eq!(named("a::b", "use crate::{x::Y, z};"), vec![m(&["x", "Y"]), m(&["z"])]);
    assert!(named("a::b", "my_crate::x; supersede::y").is_empty());
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
        ("d".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into();
    assert_eq!(circles(&g), vec![m(&["a", "b", "c"])]);
}
