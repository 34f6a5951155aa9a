//! The walls of the house, checked: the server's layers import one way, no module of the
//! workspace imports itself in a circle, and nothing below `http` names an HTTP type.
//!
//! Read from the sources as text (every `crate::…` and `super::…` path), so a new import that
//! breaks a wall fails here with the file and the path that did it.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path inside its crate, e.g. `["partition", "applier"]`.
type ModPath = Vec<String>;

/// Every `.rs` file under `src`, by module path.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            // Test modules may reach anywhere; they are not part of the house.
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("tests.rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: ModPath = rel.iter().map(|p| p.to_string_lossy().into()).collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests { … }` (tests
/// may reach anywhere).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path in `code` that starts with `crate::` or `super::`, resolved against `here`, as
/// module paths (items are cut off by keeping the longest prefix that is a module). Grouped
/// imports (`use crate::a::{b, c::d}`) count each member.
fn imports(code: &str, here: &ModPath, all: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            // `super` of `f/a.rs` (module f::a) and of `f/mod.rs`'s parent alike: one step up.
            let mut base: ModPath = if start == "crate::" {
                Vec::new()
            } else {
                here[..here.len().saturating_sub(1)].to_vec()
            };
            let mut j = from;
            // Further `super::` steps.
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
            for member in path_members(&code[j..]) {
                let mut full = base.clone();
                full.extend(member);
                while !full.is_empty() && !all.contains(&full) {
                    full.pop();
                }
                out.insert(full);
            }
        }
    }
    out
}

/// The paths a `use` tail names: `a::b::C` → [[a, b, C]]; `a::{b, c::D}` → [[a, b], [a, c, D]].
fn path_members(tail: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = tail;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let ident = &rest[..end];
        rest = &rest[end..];
        if !ident.is_empty() {
            prefix.push(ident.to_owned());
        }
        if let Some(r) = rest.strip_prefix("::") {
            rest = r;
            if let Some(r) = rest.strip_prefix('{') {
                let close = matching_brace(r);
                return split_top(&r[..close])
                    .into_iter()
                    .flat_map(|m| {
                        path_members(m.trim())
                            .into_iter()
                            .map(|tail| prefix.iter().cloned().chain(tail).collect())
                            .collect::<Vec<Vec<String>>>()
                    })
                    .collect();
            }
            continue;
        }
        return vec![prefix];
    }
}

fn matching_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The import graph of one crate, file to file. A file's use of its own ancestors' items
/// (`super::Shared` in a child of `partition`) is the parent–child bond Rust modules are
/// made of, not an arrow, and is left out; so are imports of a module by itself.
fn graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = modules(src);
    let all: BTreeSet<ModPath> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(here, path)| {
            let targets = imports(&code(path), here, &all)
                .into_iter()
                .filter(|t| !here.starts_with(t))
                .collect();
            (here.clone(), targets)
        })
        .collect()
}

/// A circle in the graph, if there is one.
fn find_circle(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    fn visit(
        node: &ModPath,
        graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        state: &mut BTreeMap<ModPath, u8>,
        stack: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    return Some(stack[from..].to_vec());
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn crate_sources() -> Vec<PathBuf> {
    [
        "server/src",
        "server/api/src",
        "server/storage/src",
        "server/consensus/src",
        "server/testkit/src",
        "index/src",
        "index/faiss/src",
        "client/src",
        "loadtest/src",
    ]
    .iter()
    .map(|p| workspace().join(p))
    .collect()
}

#[test]
fn no_module_of_the_workspace_imports_itself_in_a_circle() {
    for src in crate_sources() {
        let g = graph(&src);
        assert!(
            !g.is_empty(),
            "{} has no modules: the walk is broken",
            src.display()
        );
        if let Some(circle) = find_circle(&g) {
            panic!("import circle in {}: {circle:?}", src.display());
        }
    }
}

/// The server's top-level modules, each with the modules it may import. Everything not
/// listed for a module is a wall.
const LAYERS: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("error", &[]),
    ("request", &["config", "error"]),
    ("partition", &["request", "config", "error"]),
    ("collection", &["partition", "request", "config", "error"]),
    // Snapshot files of collections: below the catalog, which recovers from them.
    (
        "snapshots",
        &["collection", "partition", "request", "config", "error"],
    ),
    (
        "catalog",
        &["snapshots", "collection", "request", "config", "error"],
    ),
    // A peer node of the Raft-replicated cluster, above `collection`: it hosts partition
    // replicas.
    (
        "node",
        &["collection", "partition", "request", "config", "error"],
    ),
    (
        "http",
        &[
            "catalog",
            "snapshots",
            "node",
            "collection",
            "partition",
            "request",
            "config",
            "error",
        ],
    ),
    (
        "roles",
        &[
            "http",
            "catalog",
            "snapshots",
            "node",
            "collection",
            "partition",
            "request",
            "config",
            "error",
        ],
    ),
];

#[test]
fn server_layers_import_one_way() {
    let g = graph(&workspace().join("server/src"));
    let mut seen = BTreeSet::new();
    for (file, targets) in &g {
        let Some(top) = file.first() else { continue };
        let Some((_, allowed)) = LAYERS.iter().find(|(name, _)| name == top) else {
            panic!("server/src/{top} is in no layer: add it to LAYERS with what it may import");
        };
        seen.insert(top.clone());
        for target in targets {
            let Some(to) = target.first() else { continue };
            assert!(
                to == top || allowed.contains(&to.as_str()),
                "{} imports {} (crate::{}): `{top}` may import only {allowed:?}",
                file.join("/"),
                target.join("::"),
                target.join("::"),
            );
        }
    }
    assert!(seen.len() >= 8, "the walk saw only {seen:?}");
}

#[test]
fn nothing_below_http_names_an_http_type() {
    let src = workspace().join("server/src");
    for (module, path) in modules(&src) {
        let top = module.first().map(String::as_str).unwrap_or("lib");
        if matches!(top, "http" | "roles" | "lib" | "main") {
            continue;
        }
        let code = code(&path);
        for word in ["axum", "reqwest", "hyper", "tower", "http::", "StatusCode"] {
            let named = code.match_indices(word).any(|(i, _)| {
                let before = code[..i].chars().last();
                // `crate::http::` would be a layering fault, caught by the test above.
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            assert!(
                !named,
                "{} names `{word}`: only http/ may speak HTTP",
                path.display()
            );
        }
    }
}

#[test]
fn collection_never_names_the_cluster() {
    let src = workspace().join("server/src");
    for (module, path) in modules(&src) {
        if module.first().map(String::as_str) != Some("collection") {
            continue;
        }
        let code = code(&path);
        assert!(
            !code.contains("crate::node") && !code.contains("ForwardedPartition"),
            "{} names the cluster: a collection reaches remote replicas only through \
             PartitionHandle",
            path.display()
        );
    }
}

/// The public router is made from one list, `http::api_routes`, whose every entry carries its
/// OpenAPI description (`utoipa_axum::routes!`): a route added with axum's own `.route(…)`
/// would be served and missing from `GET /openapi.json`. (The internal API, on its own
/// listener, is not part of the public document.)
#[test]
fn every_public_route_is_registered_with_its_openapi_description() {
    let src = workspace().join("server/src/http");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "peer.rs") {
            continue;
        }
        let code = code(&path);
        assert!(
            !code.contains(".route(") && !code.contains(".nest("),
            "{} adds a route outside `api_routes`: register it there with `routes!` and a \
             `#[utoipa::path]`",
            path.display()
        );
    }
}

#[test]
fn the_walk_reads_grouped_and_nested_imports() {
    let all: BTreeSet<ModPath> = [
        vec![],
        vec!["a".to_owned()],
        vec!["a".to_owned(), "b".to_owned()],
        vec!["c".to_owned()],
    ]
    .into_iter()
    .collect();
    let found = imports(
        "use crate::a::{b::Thing, X};\nuse super::c;",
        &vec!["d".to_owned()],
        &all,
    );
    let names: BTreeSet<String> = found.iter().map(|m| m.join("::")).collect();
    assert_eq!(
        names,
        ["a", "a::b", "c"].iter().map(|s| s.to_string()).collect()
    );
    let mut g = BTreeMap::new();
    g.insert(vec!["x".to_owned()], [vec!["y".to_owned()]].into());
    g.insert(vec!["y".to_owned()], [vec!["x".to_owned()]].into());
    assert!(find_circle(&g).is_some());
}
