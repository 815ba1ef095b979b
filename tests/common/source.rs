//! The project's Rust sources read as code, with `syn`, for the structure tests
//! (`tests/structure.rs`, `tests/import_graph.rs`): every file of a crate with its module path,
//! the code of a file without its `#[cfg(test)]` items, and the file-level import graph.
//! Included by path (`#[path = "common/source.rs"]`) by those two tests only; each uses part.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The crates read: (name other crates use for it, its source folder, its root file).
pub const CRATES: &[(&str, &str, &str)] = &[
    ("ricochet", "src", "lib.rs"),
    ("shards", "shards/src", "lib.rs"),
    ("fleet", "fleet/src", "lib.rs"),
];

/// One crate's module tree: module path -> file (relative to the repository).
struct CrateMods {
    name: String,
    mods: BTreeMap<Vec<String>, String>,
    /// Files their parent declares under `#[cfg(test)]` (`#[cfg(test)] mod tests;`).
    test_only: BTreeSet<String>,
}

/// Every `.rs` file under `dir` with its module path (`a/b.rs` and `a/b/mod.rs` are `[a, b]`).
fn module_files(repo: &Path, dir: &str, root_file: &str) -> CrateMods {
    let mut mods = BTreeMap::new();
    let base = repo.join(dir);
    let mut stack = vec![base.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&base).unwrap();
            let mut segs: Vec<String> = rel
                .iter()
                .map(|s| s.to_str().unwrap().trim_end_matches(".rs").to_owned())
                .collect();
            if segs.last().is_some_and(|s| s == "mod") || rel == Path::new(root_file) {
                segs.pop();
            }
            let file = p.strip_prefix(repo).unwrap().to_str().unwrap().to_owned();
            mods.insert(segs, file);
        }
    }
    let mut test_only = BTreeSet::new();
    for (module, file) in &mods {
        for item in parse(&repo.join(file)).items {
            let syn::Item::Mod(m) = item else { continue };
            if m.content.is_none() && is_cfg_test(&m.attrs) {
                let mut child = module.clone();
                child.push(m.ident.to_string());
                if let Some(f) = mods.get(&child) {
                    test_only.insert(f.clone());
                }
            }
        }
    }
    CrateMods {
        name: String::new(),
        mods,
        test_only,
    }
}

/// Drops every item marked `#[cfg(test)]`, in inline modules too.
fn strip_test_items(items: &mut Vec<syn::Item>) {
    items.retain(|i| !is_cfg_test(item_attrs(i)));
    for i in items.iter_mut() {
        if let syn::Item::Mod(m) = i {
            if let Some((_, inner)) = &mut m.content {
                strip_test_items(inner);
            }
        }
    }
}

fn item_attrs(i: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match i {
        Const(x) => &x.attrs,
        Enum(x) => &x.attrs,
        ExternCrate(x) => &x.attrs,
        Fn(x) => &x.attrs,
        ForeignMod(x) => &x.attrs,
        Impl(x) => &x.attrs,
        Macro(x) => &x.attrs,
        Mod(x) => &x.attrs,
        Static(x) => &x.attrs,
        Struct(x) => &x.attrs,
        Trait(x) => &x.attrs,
        TraitAlias(x) => &x.attrs,
        Type(x) => &x.attrs,
        Union(x) => &x.attrs,
        Use(x) => &x.attrs,
        _ => &[],
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string().split_whitespace().any(|t| t == "test"))
    })
}

/// The paths a file names from a crate root, as segment lists, and the paths its `pub use`
/// items re-export (a module's facade: not arrows of their own, see [`graph`]).
#[derive(Default)]
struct Paths(Vec<Vec<String>>, Vec<Vec<String>>);

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut v = prefix.clone();
                if n.ident != "self" {
                    v.push(n.ident.to_string());
                }
                self.0.push(v);
            }
            syn::UseTree::Rename(r) => {
                let mut v = prefix.clone();
                v.push(r.ident.to_string());
                self.0.push(v);
            }
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'a> Visit<'a> for Paths {
    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        let mut prefix = Vec::new();
        if matches!(u.vis, syn::Visibility::Inherited) {
            self.use_tree(&mut prefix, &u.tree);
        } else {
            let mut facade = Paths::default();
            facade.use_tree(&mut prefix, &u.tree);
            self.1.extend(facade.0);
        }
    }

    fn visit_path(&mut self, p: &'a syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() > 1 {
            self.0.push(segs);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'a syn::Macro) {
        // Paths inside macro calls (`format!("{}", crate::x::Y)`) are tokens, not syntax.
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }

    fn visit_attribute(&mut self, a: &'a syn::Attribute) {
        // And inside attributes (`#[error("{}", crate::x::NAME)]`).
        if let syn::Meta::List(l) = &a.meta {
            self.tokens(l.tokens.clone());
        }
    }
}

impl Paths {
    /// Every `a::b::c` run of identifiers in `ts`, nested groups included.
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |run: &mut Vec<String>, out: &mut Vec<Vec<String>>| {
            if run.len() > 1 {
                out.push(std::mem::take(run));
            }
            run.clear();
        };
        for t in ts {
            match t {
                TokenTree::Ident(i) => {
                    if !run.is_empty() && colons != 2 {
                        flush(&mut run, &mut self.0);
                    }
                    run.push(i.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() => colons += 1,
                TokenTree::Group(g) => {
                    flush(&mut run, &mut self.0);
                    self.tokens(g.stream());
                }
                _ => {
                    flush(&mut run, &mut self.0);
                    colons = 0;
                }
            }
        }
        flush(&mut run, &mut self.0);
    }
}

/// The graph: file -> (file -> names taken), for the crates in `crates` under `repo`.
pub type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// One path a file names, resolved: the file that defines what it names, and that name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    pub target: String,
    pub name: String,
}

/// Every file's resolved references (test-only files and `#[cfg(test)]` items left out). A
/// reference to a name a module re-exports (`pub use`, its facade) goes on to the file that
/// defines it: a module re-exporting its children's items is their index, not a file that
/// depends on them.
pub fn references(repo: &Path, crates: &[(&str, &str, &str)]) -> BTreeMap<String, Vec<Reference>> {
    let all: Vec<CrateMods> = crates
        .iter()
        .map(|(name, dir, root)| {
            let mut c = module_files(repo, dir, root);
            c.name = (*name).to_owned();
            c
        })
        .collect();
    let mut read = Vec::new();
    let mut facades: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (ci, c) in all.iter().enumerate() {
        for (module, file) in &c.mods {
            if c.test_only.contains(file) {
                continue;
            }
            let mut ast = parse(&repo.join(file));
            strip_test_items(&mut ast.items);
            let mut paths = Paths::default();
            paths.visit_file(&ast);
            let facade = facades.entry(file.clone()).or_default();
            for p in &paths.1 {
                if let Some((target, name)) = resolve(&all, ci, module, p) {
                    facade.insert(name, target);
                }
            }
            read.push((ci, module.clone(), file.clone(), paths.0));
        }
    }
    let mut out = BTreeMap::new();
    for (ci, module, file, paths) in read {
        let refs: &mut Vec<Reference> = out.entry(file.clone()).or_default();
        for p in paths {
            let Some((mut target, name)) = resolve(&all, ci, &module, &p) else {
                continue;
            };
            for _ in 0..4 {
                match facades.get(&target).and_then(|f| f.get(&name)) {
                    Some(next) if *next != target => target = next.clone(),
                    _ => break,
                }
            }
            refs.push(Reference { target, name });
        }
        refs.sort();
        refs.dedup();
    }
    out
}

/// The file import graph of [`references`]: an arrow from a file to every other file it
/// names something of.
pub fn graph(repo: &Path, crates: &[(&str, &str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (file, refs) in references(repo, crates) {
        let out = g.entry(file.clone()).or_default();
        for r in refs {
            if r.target != file {
                out.entry(r.target).or_default().insert(r.name);
            }
        }
    }
    g
}

/// `path` parsed, or a panic naming it.
fn parse(path: &Path) -> syn::File {
    let text = std::fs::read_to_string(path).unwrap();
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The code of `path` as text, without comments and with every `#[cfg(test)]` item (nested
/// ones too) blanked out, line numbers kept; `None` for a test-only file (one its parent
/// declares under `#[cfg(test)]`, or named `tests.rs` / `*_tests.rs`).
pub fn code(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with("_tests.rs") || name == "tests.rs" {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let ast = parse(path);
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut blank = Vec::new();
    test_item_lines(&ast.items, &mut blank);
    for (from, to) in blank {
        for l in &mut lines[from - 1..to] {
            l.clear();
        }
    }
    for l in &mut lines {
        // Comments: from `//` on (a `//` inside a string goes too; the checks look for code).
        if let Some(at) = l.find("//") {
            l.truncate(at);
        }
    }
    Some(lines.join("\n"))
}

/// The line ranges (1-based, inclusive) of `#[cfg(test)]` items in `items`, nested ones too.
fn test_item_lines(items: &[syn::Item], out: &mut Vec<(usize, usize)>) {
    use syn::spanned::Spanned;
    for i in items {
        if is_cfg_test(item_attrs(i)) {
            let span = i.span();
            out.push((span.start().line, span.end().line));
        } else if let syn::Item::Mod(m) = i {
            if let Some((_, inner)) = &m.content {
                test_item_lines(inner, out);
            }
        }
    }
}

/// Every `.rs` file under `rel` (a file, or a folder walked to the bottom), sorted.
pub fn rust_files(repo: &Path, rel: &str) -> Vec<PathBuf> {
    let p = repo.join(rel);
    if p.is_file() {
        return vec![p];
    }
    assert!(p.is_dir(), "{} is listed but missing", p.display());
    let mut out = Vec::new();
    let mut stack = vec![p];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The file `path`, named in the file of `module` of crate `ci`, points at, and the name
/// taken (its last segment).
fn resolve(
    all: &[CrateMods],
    ci: usize,
    module: &[String],
    path: &[String],
) -> Option<(String, String)> {
    let first = path.first()?.as_str();
    let mut child = module.to_vec();
    child.push(first.to_owned());
    let (crate_ix, mut abs, mut rest): (usize, Vec<String>, &[String]) = match first {
        "crate" => (ci, Vec::new(), &path[1..]),
        "self" => (ci, module.to_vec(), &path[1..]),
        "super" => {
            let mut m = module.to_vec();
            m.pop()?;
            (ci, m, &path[1..])
        }
        // A child module named without `self::` shadows a crate of the same name.
        _ if all[ci].mods.contains_key(&child) => (ci, module.to_vec(), path),
        other => (
            all.iter().position(|c| c.name == other)?,
            Vec::new(),
            &path[1..],
        ),
    };
    // `super::super::x`
    while rest.first().is_some_and(|s| s == "super") {
        abs.pop()?;
        rest = &rest[1..];
    }
    abs.extend(rest.iter().cloned());
    let mods = &all[crate_ix].mods;
    (0..=abs.len())
        .rev()
        .find_map(|n| mods.get(&abs[..n]))
        .map(|f| (f.clone(), path.last().unwrap().clone()))
}

/// Circles: strongly connected components of more than one file (Tarjan).
pub fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        on: BTreeSet<&'g str>,
        stack: Vec<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            if let Some(ws) = self.g.get(v) {
                for w in ws.keys() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let l = self.low[w].min(self.low[v]);
                        self.low.insert(v, l);
                    } else if self.on.contains(w) {
                        let l = self.index[w].min(self.low[v]);
                        self.low.insert(v, l);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// A circle and the arrows inside it, for the failure message.
pub fn describe(g: &Graph, scc: &[String]) -> String {
    let mut s = format!("circle of {} files:\n", scc.len());
    for a in scc {
        for (b, names) in &g[a] {
            if scc.contains(b) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                s += &format!("  {a} -> {b}: {}\n", names.join(", "));
            }
        }
    }
    s
}
