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
