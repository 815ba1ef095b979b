//! The file-level import graph of the server (`src/`) and its two library crates
//! (`shards/src/`, `fleet/src/`), computed from the code with `syn`: every `use` path and every
//! path in code that starts at a crate root (`crate::`, `super::`, `self::`, `shards::`,
//! `fleet::`, `ricochet::`) is an arrow from its file to the file that defines the module it
//! names. Items under `#[cfg(test)]` are left out (tests may reach anywhere). A circle of files
//! that import each other is a tangle a reader cannot follow top-down, so the graph must have
//! none; `a_planted_circle_is_found` proves the check sees one.
//!
//! `mod` declarations are not arrows: a module file declaring its children is the tree, not an
//! import. A child naming its parent module (`super::Thing`) is one.

#[path = "common/source.rs"]
mod source;

use source::{circles, describe, graph, CRATES};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn the_import_graph_has_no_circle() {
    let g = graph(Path::new(ROOT), CRATES);
    let found = circles(&g);
    eprintln!(
        "{} files, {} arrows, {} circles",
        g.len(),
        g.values().map(|m| m.len()).sum::<usize>(),
        found.len()
    );
    let text: String = found.iter().map(|c| describe(&g, c)).collect();
    assert!(found.is_empty(), "circles found:\n{text}");
}

/// The check sees a circle: a child module naming its parent's item while the parent imports
/// the child, and a circle of three through a `crate::` path inside a function body and a
/// macro.
#[test]
fn a_planted_circle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let w = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    w("lib.rs", "mod a;\nmod x;\nmod y;\nmod z;\n");
    w(
        "a/mod.rs",
        "mod b;\nuse self::b::B;\npub struct A;\n#[cfg(test)]\nmod tests { use crate::x::X; }\n",
    );
    w("a/b.rs", "pub struct B(super::A);\n");
    w("x.rs", "pub fn f() { crate::y::g() }\npub struct X;\n");
    w(
        "y.rs",
        "pub fn g() { let _ = format!(\"{}\", crate::z::N); }\n",
    );
    w("z.rs", "use crate::{a, x::X};\npub const N: u8 = 1;\n");
    let g = graph(dir.path(), &[("planted", "src", "lib.rs")]);
    let found = circles(&g);
    assert_eq!(
        found,
        vec![
            vec!["src/a/b.rs".to_owned(), "src/a/mod.rs".to_owned()],
            vec![
                "src/x.rs".to_owned(),
                "src/y.rs".to_owned(),
                "src/z.rs".to_owned()
            ],
        ],
        "{g:?}"
    );
    // The test module's import is not an arrow.
    assert!(!g["src/a/mod.rs"].contains_key("src/x.rs"));
}

/// The server's layers, lowest first: a file may import from its own layer and the ones
/// below. Within `src/`, bottom-up: vocabulary and pure codecs; the API's pure half and
/// routing (which owns the paths); the cores' messaging machinery and counters; the roles
/// (with `Shared` and the `/metrics` renderer, which read every role's counters); the loop;
/// start-up. The library crates sit below everything in `src/`.
const LAYERS: &[&[&str]] = &[
    &["shards/src/", "fleet/src/"],
    &["src/http/", "src/base/"],
    &["src/api/", "src/route.rs"],
    &["src/mesh/", "src/metrics/mod.rs"],
    &[
        "src/node/shared.rs",
        "src/metrics/encode.rs",
        "src/owner/",
        "src/flights.rs",
        "src/api_front/",
        "src/analytics/",
        "src/fleet_mode/",
        "src/node/probes.rs",
        "src/node/recovery.rs",
        "src/node/keywatch.rs",
        "src/net/",
    ],
    &["src/node/core_loop.rs"],
    &[
        "src/node/mode.rs",
        "src/node/server.rs",
        "src/node/mod.rs",
        "src/cli_config.rs",
        "src/lib.rs",
        "src/main.rs",
    ],
];

/// Imports that run from a lower layer up, at most this many (issue 25: at most 2).
const MAX_UPWARD_IMPORTS: usize = 2;

/// The layer of `file` (index into [`LAYERS`]); a file in none fails the test.
fn layer_of(file: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.iter().any(|p| file.starts_with(p)))
        .unwrap_or_else(|| panic!("{file} is in no layer of LAYERS: place it"))
}

/// Every arrow from a file to a file of a higher layer, as `from -> to: names`.
fn upward(g: &source::Graph) -> Vec<String> {
    let mut up = Vec::new();
    for (from, tos) in g {
        for (to, names) in tos {
            if layer_of(to) > layer_of(from) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                up.push(format!("{from} -> {to}: {}", names.join(", ")));
            }
        }
    }
    up
}

#[test]
fn few_imports_run_from_a_lower_layer_up() {
    let g = graph(Path::new(ROOT), CRATES);
    let up = upward(&g);
    eprintln!("{} upward imports:\n{}", up.len(), up.join("\n"));
    assert!(
        up.len() <= MAX_UPWARD_IMPORTS,
        "{} imports run from a lower layer up (at most {MAX_UPWARD_IMPORTS}):\n{}",
        up.len(),
        up.join("\n")
    );
}

/// The check sees an import from a lower layer up (a codec naming the loop), and not one
/// going down.
#[test]
fn a_planted_upward_import_is_found() {
    let mut g = source::Graph::new();
    let arrow = |g: &mut source::Graph, from: &str, to: &str| {
        let names = g.entry(from.to_owned()).or_default();
        names
            .entry(to.to_owned())
            .or_default()
            .insert("X".to_owned());
    };
    arrow(&mut g, "src/http/parse.rs", "src/node/core_loop.rs");
    arrow(&mut g, "src/node/core_loop.rs", "src/http/parse.rs");
    assert_eq!(
        upward(&g),
        vec!["src/http/parse.rs -> src/node/core_loop.rs: X".to_owned()]
    );
}
