//! Keeps the modules of the crates with the most of them (master, client,
//! raft-store) free of import circles: a module that reaches another
//! through `crate::` paths must not be reached back, directly or through
//! others, so each can be read (and moved) knowing only what it names.
//!
//! The graph is read from the sources as text: each `crate::a::b` path on a
//! line that is not a comment, outside `#[cfg(test)]` modules, is an edge
//! from the file's module to the deepest module the path names. A module
//! does not count as reaching its own parent or children.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use mooncake_testkit::sources::rust_files;

/// The crates checked, by their folder in the workspace.
const CRATES: &[&str] = &["master", "client", "raft-store"];

/// `a::b` for `src/a/b.rs` and `src/a/b/mod.rs`; `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [one] if one == "lib" || one == "main" => None,
        _ => Some(parts.join("::")),
    }
}

/// The `crate::` paths of the non-comment lines before the first
/// `#[cfg(test)]` (where every file of these crates keeps its tests).
fn crate_paths(source: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for line in source.lines().take_while(|l| l.trim() != "#[cfg(test)]") {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let path: Vec<String> = tail
                .split("::")
                .map(|seg| seg.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
                .take_while(|seg| {
                    !seg.is_empty() && seg.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                })
                .collect();
            paths.push(path);
            rest = tail;
        }
    }
    paths
}

/// Module -> the modules it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeMap<String, PathBuf> =
        files.iter().filter_map(|f| module_of(src, f).map(|m| (m, f.clone()))).collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let source = std::fs::read_to_string(file).expect("read source");
        let mut out = BTreeSet::new();
        for path in crate_paths(&source) {
            let target = (1..=path.len()).rev().map(|k| path[..k].join("::")).find(|m| modules.contains_key(m));
            let Some(target) = target else { continue };
            let related = target == *module
                || module.starts_with(&format!("{target}::"))
                || target.starts_with(&format!("{module}::"));
            if !related {
                out.insert(target);
            }
        }
        edges.insert(module.clone(), out);
    }
    edges
}

/// A circle of the graph, if there is one: the modules along it.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|s| s == m).unwrap_or(0);
                let mut circle = stack[from..].to_vec();
                circle.push(m.to_string());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(m.to_string(), Mark::Open);
        stack.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, marks, stack) {
                return Some(circle);
            }
        }
        stack.pop();
        marks.insert(m.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    edges.keys().find_map(|m| visit(m, edges, &mut marks, &mut Vec::new()))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace dir");
    for krate in CRATES {
        let edges = graph(&workspace.join(krate).join("src"));
        assert!(edges.len() > 5, "{krate}: only {} modules read", edges.len());
        if let Some(circle) = find_circle(&edges) {
            panic!("{krate}: an import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_check_finds_a_circle_and_ignores_comments_and_tests() {
    let edges: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")].iter().fold(BTreeMap::new(), |mut g, (from, to)| {
            g.entry(from.to_string()).or_insert_with(BTreeSet::new).insert(to.to_string());
            g.entry(to.to_string()).or_insert_with(BTreeSet::new);
            g
        });
    let circle = find_circle(&edges).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4, "{circle:?}");
    let source =
        "use crate::a::B;\n// crate::c\nfn f() { crate::b::g(); }\n#[cfg(test)]\nmod tests { use crate::d; }\n";
    let paths: Vec<String> = crate_paths(source).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, vec!["a".to_string(), "b::g".to_string()]);
}

/// The master's folders below its edge: what the leader does (`objects`),
/// its decisions (`leader`), consensus (`raft`), the duties, the shared
/// state and the refusals. `rpc` may import them, never the reverse.
const BELOW_THE_EDGE: &[&str] = &["objects", "leader", "raft", "duties", "shared", "refusal"];

fn below_the_edge(module: &str) -> bool {
    BELOW_THE_EDGE.iter().any(|b| module == *b || module.starts_with(&format!("{b}::")))
}

/// Only the master's edge (`rpc`) knows the wire: no module below it
/// imports one of `rpc` or names protobuf's `Status` or Mooncake's
/// `ErrorCode` (they say why in a `Refusal`, and `rpc/errors.rs` gives it
/// its code), and none but `raft` (whose transport between masters is its
/// own gRPC service) names a protobuf type at all (they take domain asks
/// and answer domain results; `rpc/convert.rs` and `rpc/grants.rs` say
/// them on the wire).
#[test]
fn only_the_masters_edge_knows_the_wire_answers() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace dir");
    let src = workspace.join("master").join("src");
    let edges = graph(&src);
    let mut up = Vec::new();
    for (module, targets) in &edges {
        if below_the_edge(module) {
            up.extend(
                targets.iter().filter(|t| *t == "rpc" || t.starts_with("rpc::")).map(|t| format!("{module} -> {t}")),
            );
        }
    }
    assert!(up.is_empty(), "modules below the edge import rpc: {up:?}");
    assert!(edges.keys().filter(|m| below_the_edge(m)).count() > 20, "too few modules below the edge read");
    let mut wire = Vec::new();
    for file in rust_files(&src) {
        let Some(module) = module_of(&src, &file) else { continue };
        if !below_the_edge(&module) {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("read source");
        for line in source.lines().take_while(|l| l.trim() != "#[cfg(test)]") {
            let code = line.split("//").next().unwrap_or("");
            let answers = code.contains("ErrorCode") || code.contains("mooncake_proto::Status");
            let messages = code.contains("mooncake_proto") && !(module == "raft" || module.starts_with("raft::"));
            if answers || messages {
                wire.push(format!("{module}: {}", line.trim()));
            }
        }
    }
    assert!(wire.is_empty(), "modules below the edge name wire answers: {wire:#?}");
}
