//! The documentation holds together: every relative link of the manual (`docs/`, an mdBook),
//! README.md, ARCHITECTURE.md and the other READMEs reaches a file that exists, and an anchor
//! a heading of it; every chapter is in `docs/SUMMARY.md` and every entry there exists; and
//! every module of `src/`, `shards/src/` and `fleet/src/` is on ARCHITECTURE.md's codemap.
//! Markdown is read with `pulldown-cmark` (the parser mdBook uses), so links in code blocks
//! are not links and headings get mdBook's anchors.

#[path = "common/source.rs"]
mod source;

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Markdown files outside `docs/` whose links are checked too.
const OTHER_MARKDOWN: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "perf/README.md",
    "fuzz/README.md",
];

/// A heading's anchor as mdBook (and GitHub) makes it: lower case, spaces to hyphens, every
/// character but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The links of a markdown text and the anchors of its headings.
fn read(text: &str) -> (Vec<String>, BTreeSet<String>) {
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut heading: Option<String> = None;
    for e in Parser::new(text) {
        match e {
            Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.to_string()),
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = &mut heading {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    anchors.insert(anchor(&h));
                }
            }
            _ => {}
        }
    }
    (links, anchors)
}

/// Every markdown file checked: the manual's and [`OTHER_MARKDOWN`].
fn markdown_files(repo: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    v.extend(OTHER_MARKDOWN.iter().map(|f| repo.join(f)));
    v.sort();
    v
}

/// Every relative link in `files` that reaches no file, or no heading of a markdown file.
fn dead_links(files: &[PathBuf]) -> Vec<String> {
    let mut dead = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let (links, own) = read(&text);
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, frag) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                f.clone()
            } else {
                f.parent().unwrap().join(path)
            };
            if !target.exists() {
                dead.push(format!("{}: {link}: no such file", f.display()));
                continue;
            }
            let Some(frag) = frag else { continue };
            let anchors = if path.is_empty() {
                own.clone()
            } else if target.extension().is_some_and(|x| x == "md") {
                read(&std::fs::read_to_string(&target).unwrap()).1
            } else {
                continue;
            };
            if !anchors.contains(frag) {
                dead.push(format!("{}: {link}: no such heading", f.display()));
            }
        }
    }
    dead
}

#[test]
fn every_link_of_the_docs_reaches_something() {
    let dead = dead_links(&markdown_files(Path::new(ROOT)));
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

/// The check sees a missing file, a missing heading in another file and in its own.
#[test]
fn a_planted_dead_link_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(dir.path().join("b.md"), "# B\n\n## Some `code` heading\n").unwrap();
    std::fs::write(
        &a,
        "# A\n\n[ok](b.md#some-code-heading) [ok](#a) [gone](c.md) [gone](b.md#nope) \
         [gone](#nope)\n\n```\n[not a link](nowhere.md)\n```\n",
    )
    .unwrap();
    let dead = dead_links(&[a]);
    assert_eq!(dead.len(), 3, "{dead:?}");
}

/// `docs/SUMMARY.md` lists every chapter of `docs/`, and every chapter it lists exists.
#[test]
fn the_book_lists_every_chapter() {
    let docs = Path::new(ROOT).join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let (links, _) = read(&summary);
    let listed: BTreeSet<String> = links.into_iter().collect();
    for l in &listed {
        assert!(
            docs.join(l).exists(),
            "SUMMARY.md lists {l}, which is missing"
        );
    }
    for e in std::fs::read_dir(&docs).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") && name != "SUMMARY.md" {
            assert!(listed.contains(&name), "docs/{name} is not in SUMMARY.md");
        }
    }
    // The book's chapters start with a title.
    for l in &listed {
        let text = std::fs::read_to_string(docs.join(l)).unwrap();
        let first = Parser::new(&text).next();
        assert!(
            matches!(
                first,
                Some(Event::Start(Tag::Heading {
                    level: HeadingLevel::H1,
                    ..
                }))
            ),
            "docs/{l} does not open with a title"
        );
    }
}

/// Every module file of the three crates (test-only files aside) is on ARCHITECTURE.md's
/// codemap: by its path in its crate (`owner/fleet.rs`), or by its name on the row of its
/// folder (`| \`http/\` | \`parse.rs\`, ...`).
#[test]
fn every_module_is_on_the_codemap() {
    let repo = Path::new(ROOT);
    let map = std::fs::read_to_string(repo.join("ARCHITECTURE.md")).unwrap();
    let rows: Vec<&str> = map.lines().filter(|l| l.starts_with("| ")).collect();
    let mut missing = Vec::new();
    for (_, dir, _) in source::CRATES {
        for f in source::rust_files(repo, dir) {
            if source::code(&f).is_none() {
                continue;
            }
            let rel = f.strip_prefix(repo.join(dir)).unwrap();
            let rel = rel.to_str().unwrap().to_owned();
            if rel == "lib.rs" || rel == "main.rs" {
                continue;
            }
            let name = f.file_name().unwrap().to_str().unwrap();
            // A row naming the folder (`` `http/` ``) or a file in it (`` `http/parse.rs` ``).
            let folder = rel.rsplit_once('/').map(|(d, _)| format!("`{d}/"));
            let on_map = rows.iter().any(|r| {
                r.contains(&format!("`{rel}`"))
                    || folder.as_ref().is_some_and(|d| {
                        r.contains(d.as_str())
                            && (name == "mod.rs" || r.contains(&format!("`{name}`")))
                    })
            });
            if !on_map {
                missing.push(format!("{dir}/{rel}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules missing from ARCHITECTURE.md's codemap:\n{}",
        missing.join("\n")
    );
}
