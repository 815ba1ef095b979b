//! Source-level invariants ARCHITECTURE.md states as absences: the redirect path's modules
//! take no locks and make no blocking calls, no role imports the loop, only the `fleet`
//! crate talks to PostgreSQL, unit tests follow one convention (an inline `tests` module
//! at the end of the file they test), and every function clippy finds too long carries an
//! `#[expect(clippy::too_many_lines, reason = "...")]` that says why. The code is read with `syn` (`common/source.rs`): folders are
//! walked to the bottom, `#[cfg(test)]` items (wherever they sit in a file) and test-only
//! files are left out, comments are skipped, and imports are checked by the file and item a
//! path resolves to, not by its text. Each check is a function of the tree it reads, and a
//! test plants a violation of each in a scratch tree to prove it is seen.

#[path = "common/source.rs"]
mod source;

use source::{code, references, rust_files, CRATES};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Modules a redirect runs through (parse, route, local or cached answer, forward, send).
const REDIRECT_PATH: &[&str] = &[
    "src/node/core_loop.rs",
    "src/net/conns",
    "src/mesh/mod.rs",
    "src/base/cache.rs",
    "src/base/target.rs",
    "src/base/key.rs",
    "src/base/clock.rs",
    "src/mesh/router.rs",
    "src/route.rs",
    "src/owner/mod.rs",
    "src/owner/store.rs",
    "src/http",
    "src/analytics/combiner.rs",
    "shards/src/table/reader.rs",
    "shards/src/placement.rs",
];

/// Role modules: none may name the loop.
const ROLES: &[&str] = &[
    "src/net/conns",
    "src/owner",
    "src/api_front",
    "src/flights.rs",
    "src/mesh/mod.rs",
    "src/base/target.rs",
    "src/mesh/service.rs",
];

/// Names a lock has.
const LOCKS: &[&str] = &["Mutex", "RwLock", ".lock()", "Condvar", "Barrier"];

/// Calls that block a thread.
const BLOCKING: &[&str] = &[
    "std::fs",
    "File::",
    "thread::sleep",
    "std::net",
    ".recv()",
    "recv_timeout",
    "libc::read(",
    "libc::fsync",
    "libc::fdatasync",
];

/// Crates that speak a database's wire protocol or link its client library: any crate with
/// one of these in its dependency closure is a database client, however it is named.
const DATABASE_PROTOCOL_CRATES: &[&str] = &[
    "postgres-protocol",
    "sqlx-core",
    "pq-sys",
    "mysql_common",
    "libsqlite3-sys",
];

/// What in the `fleet` crate opens or uses a database session: no core-thread module names
/// one (they read `fleet::FleetStats`'s atomics and take the service threads' answers).
const FLEET_DATABASE_ITEMS: &[&str] = &[
    "Db",
    "PgAuthority",
    "init",
    "load_secret",
    "spawn_writer",
    "spawn_reader",
    "poll",
    "poll_with_horizon",
    "snapshot",
    "list_keys",
];

/// Fleet mode's node-side files that hold a database session or start one; a core reaches
/// fleet mode through `fleet_mode/messages.rs` only.
const FLEET_MODE_SESSION_FILES: &[&str] = &[
    "src/fleet_mode/node.rs",
    "src/fleet_mode/bootstrap.rs",
    "src/fleet_mode/follower.rs",
    "src/fleet_mode/regen.rs",
    "src/fleet_mode/cli.rs",
    "src/fleet_mode/lost.rs",
];

/// Every line of the code of `places` (files or folders under `repo`) that names one of
/// `words`, as `file:line: word: line`.
fn offenders(repo: &Path, places: &[&str], words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for place in places {
        for f in rust_files(repo, place) {
            let Some(code) = code(&f) else { continue };
            for (i, line) in code.lines().enumerate() {
                for word in words {
                    if contains_name(line, word) {
                        let rel = f.strip_prefix(repo).unwrap_or(&f).display();
                        found.push(format!("{rel}:{}: `{word}`: {}", i + 1, line.trim()));
                    }
                }
            }
        }
    }
    found
}

/// Whether `line` names `word`: a word ending in a letter or digit must not continue as a
/// longer name (`Mutex` is not `MutexGuardless`).
fn contains_name(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let open_ended = word.chars().last().is_some_and(ident);
    line.match_indices(word)
        .any(|(at, _)| !open_ended || !line[at + word.len()..].chars().next().is_some_and(ident))
}

/// The files under `places` (relative to the repository).
fn files_of(repo: &Path, places: &[&str]) -> Vec<String> {
    places
        .iter()
        .flat_map(|p| rust_files(repo, p))
        .map(|f| f.strip_prefix(repo).unwrap().to_str().unwrap().to_owned())
        .collect()
}

/// Every reference from a file under `from` that resolves to a file in `to`, or, when
/// `names` is given, to one of those names in it.
fn references_into(
    repo: &Path,
    crates: &[(&str, &str, &str)],
    from: &[&str],
    to: &[&str],
    names: Option<&[&str]>,
) -> Vec<String> {
    let from = files_of(repo, from);
    let refs = references(repo, crates);
    let mut found = Vec::new();
    for file in &from {
        for r in refs.get(file).into_iter().flatten() {
            let into = to
                .iter()
                .any(|t| r.target == *t || r.target.starts_with(&format!("{t}/")));
            let named = names.is_none_or(|n| n.contains(&r.name.as_str()));
            if into && named && r.target != *file {
                found.push(format!("{file} -> {}: {}", r.target, r.name));
            }
        }
    }
    found
}

fn locks_on_the_redirect_path(repo: &Path) -> Vec<String> {
    offenders(repo, REDIRECT_PATH, LOCKS)
}

fn blocking_calls_on_the_redirect_path(repo: &Path) -> Vec<String> {
    // Table files are opened and validated before serving; their lookups are what runs here.
    let places: Vec<&str> = REDIRECT_PATH
        .iter()
        .copied()
        .filter(|d| !d.ends_with("table/reader.rs"))
        .collect();
    let mut found = offenders(repo, &places, BLOCKING);
    // Stdout writes block; `eprintln!` is for error paths only (documented in ARCHITECTURE.md).
    found.extend(
        offenders(repo, &places, &["println!"])
            .into_iter()
            .filter(|l| !l.contains("eprintln!")),
    );
    found
}

fn roles_importing_the_loop(repo: &Path, crates: &[(&str, &str, &str)]) -> Vec<String> {
    references_into(repo, crates, ROLES, &["src/node/core_loop.rs"], None)
}

/// Core-thread modules (the redirect path and the roles) that name a database-session item
/// of the `fleet` crate or a session-holding file of fleet mode.
fn core_threads_reaching_the_database(repo: &Path, crates: &[(&str, &str, &str)]) -> Vec<String> {
    let mut core_thread: Vec<&str> = REDIRECT_PATH.to_vec();
    core_thread.extend(ROLES);
    let mut found = references_into(
        repo,
        crates,
        &core_thread,
        &["fleet/src"],
        Some(FLEET_DATABASE_ITEMS),
    );
    found.extend(references_into(
        repo,
        crates,
        &core_thread,
        FLEET_MODE_SESSION_FILES,
        None,
    ));
    found
}

/// The workspace members of `Cargo.lock` under `repo` other than `allowed` whose dependency
/// closure (every kind, every platform) holds a database protocol crate.
fn database_clients_outside(repo: &Path, allowed: &str) -> Vec<String> {
    let lock = std::fs::read_to_string(repo.join("Cargo.lock")).unwrap();
    let lock: toml::Table = lock.parse().unwrap();
    let mut deps: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut members = Vec::new();
    for p in lock["package"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_owned();
        let d = p.get("dependencies").and_then(|d| d.as_array());
        let names = d
            .into_iter()
            .flatten()
            .map(|d| d.as_str().unwrap().split(' ').next().unwrap().to_owned())
            .collect();
        if p.get("source").is_none() {
            members.push(name.clone());
        }
        deps.insert(name, names);
    }
    let mut found = Vec::new();
    for m in members.iter().filter(|m| *m != allowed) {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![m.clone()];
        while let Some(p) = stack.pop() {
            if !seen.insert(p.clone()) {
                continue;
            }
            if DATABASE_PROTOCOL_CRATES.contains(&p.as_str()) {
                found.push(format!("{m} depends on {p}"));
            }
            // A dependency on another member is that member's business (checked itself).
            if p == *m || !members.contains(&p) {
                stack.extend(deps.get(&p).into_iter().flatten().cloned());
            }
        }
    }
    found
}

/// Crates whose unit tests are checked for the convention.
const UNIT_TEST_CRATES: &[&str] = &["src", "shards/src", "fleet/src", "tools/src"];

/// Unit tests kept apart from the file they test (`#[cfg(test)] mod x;`, a file of its own)
/// and test modules followed by more code: the house convention is one inline `tests`
/// module at the end of the file.
fn unit_tests_off_convention(repo: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for f in UNIT_TEST_CRATES.iter().flat_map(|c| rust_files(repo, c)) {
        let text = std::fs::read_to_string(&f).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let rel = f.strip_prefix(repo).unwrap().display().to_string();
        let n = ast.items.len();
        for (i, item) in ast.items.iter().enumerate() {
            let syn::Item::Mod(m) = item else { continue };
            let test = m.attrs.iter().any(|a| {
                a.path().is_ident("cfg")
                    && a.meta
                        .require_list()
                        .is_ok_and(|l| l.tokens.to_string() == "test")
            });
            if !test {
                continue;
            }
            if m.content.is_none() {
                found.push(format!(
                    "{rel}: `mod {};` keeps tests in a file of their own",
                    m.ident
                ));
            } else if i + 1 != n {
                found.push(format!(
                    "{rel}: `mod {}` is not at the end of the file",
                    m.ident
                ));
            }
        }
    }
    found
}

/// Where long functions may be excused: every crate, its tests included.
const EXCUSE_PLACES: &[&str] = &[
    "src",
    "shards/src",
    "fleet/src",
    "tools/src",
    "tests",
    "tools/tests",
];

/// `clippy::too_many_lines` allowed rather than expected (an `allow` outlives the long
/// function it excused), or expected without a `reason` saying why.
fn long_functions_without_a_reason(repo: &Path) -> Vec<String> {
    struct Attrs<'a>(&'a str, Vec<String>);
    impl<'ast> syn::visit::Visit<'ast> for Attrs<'_> {
        fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
            let Ok(list) = a.meta.require_list() else {
                return;
            };
            let text = list.tokens.to_string();
            if text.contains("too_many_lines") {
                let kind = a
                    .path()
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                if kind != "expect" {
                    self.1.push(format!(
                        "{}: #[{kind}(clippy::too_many_lines)]: use expect",
                        self.0
                    ));
                } else if !text.contains("reason") {
                    self.1.push(format!(
                        "{}: too_many_lines expected without a reason",
                        self.0
                    ));
                }
            }
        }
    }
    let mut found = Vec::new();
    let places = EXCUSE_PLACES.iter().filter(|p| repo.join(p).is_dir());
    for f in places.flat_map(|c| rust_files(repo, c)) {
        let text = std::fs::read_to_string(&f).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let rel = f.strip_prefix(repo).unwrap().display().to_string();
        let mut v = Attrs(&rel, Vec::new());
        syn::visit::visit_file(&mut v, &ast);
        found.append(&mut v.1);
    }
    found
}

#[test]
fn long_functions_carry_a_reason() {
    let found = long_functions_without_a_reason(Path::new(ROOT));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn unit_tests_are_one_inline_module_at_the_end() {
    let found = unit_tests_off_convention(Path::new(ROOT));
    assert!(
        found.is_empty(),
        "unit tests off the convention:\n{}",
        found.join("\n")
    );
}

#[test]
fn redirect_path_modules_take_no_locks() {
    let found = locks_on_the_redirect_path(Path::new(ROOT));
    assert!(
        found.is_empty(),
        "locks on the redirect path:\n{}",
        found.join("\n")
    );
}

#[test]
fn redirect_path_modules_make_no_blocking_calls() {
    let found = blocking_calls_on_the_redirect_path(Path::new(ROOT));
    assert!(
        found.is_empty(),
        "blocking calls on the redirect path:\n{}",
        found.join("\n")
    );
}

#[test]
fn roles_do_not_import_the_loop() {
    let found = roles_importing_the_loop(Path::new(ROOT), CRATES);
    assert!(
        found.is_empty(),
        "a role imports the loop:\n{}",
        found.join("\n")
    );
}

/// Only `fleet/` has a PostgreSQL client, and no core-thread module reaches the parts of
/// `fleet` or of fleet mode that talk to the database.
#[test]
fn only_the_fleet_crate_talks_to_postgres() {
    let repo = Path::new(ROOT);
    let found = database_clients_outside(repo, "ricochet-fleet");
    assert!(
        found.is_empty(),
        "a database client outside fleet/:\n{}",
        found.join("\n")
    );
    assert!(
        !database_clients_outside(repo, "none").is_empty(),
        "the fleet crate's own client is seen"
    );
    let found = core_threads_reaching_the_database(repo, CRATES);
    assert!(
        found.is_empty(),
        "a core-thread module reaches the database:\n{}",
        found.join("\n")
    );
}

/// A scratch tree laid out like this repository's (`src/`, `shards/src/`, `fleet/src/`),
/// with `files` written into it, and `Cargo.lock` copied in.
fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect();
    for root in [
        "src/lib.rs",
        "shards/src/lib.rs",
        "fleet/src/lib.rs",
        "tools/src/lib.rs",
    ] {
        if !all.iter().any(|(p, _)| p == root) {
            all.push((root.to_owned(), String::new()));
        }
    }
    for place in REDIRECT_PATH.iter().chain(ROLES) {
        if !place.ends_with(".rs") {
            std::fs::create_dir_all(dir.path().join(place)).unwrap();
        } else if !all.iter().any(|(p, _)| p == place) {
            all.push(((*place).to_owned(), String::new()));
        }
    }
    for (p, t) in all {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    std::fs::copy(
        Path::new(ROOT).join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .unwrap();
    dir
}

/// Each check sees a violation planted where the old text checks did not look: below a
/// `#[cfg(test)]` item in the middle of a file, in a subfolder, in a grouped import, and
/// behind a renamed path.
#[test]
fn each_check_finds_a_planted_violation() {
    let lib = "pub mod net;\npub mod node;\npub mod owner;\npub mod fleet_mode;\n";
    let tree = planted(&[
        ("src/lib.rs", lib),
        ("src/net/mod.rs", "pub mod conns;\n"),
        ("src/node/mod.rs", "pub mod core_loop;\n"),
        ("src/node/core_loop.rs", "pub struct Core;\n"),
        ("src/net/conns/mod.rs", "pub mod deep;\n"),
        // A lock in a subfolder of a redirect-path folder.
        ("src/net/conns/deep/mod.rs", "pub mod lock;\n"),
        (
            "src/net/conns/deep/lock.rs",
            "static M: std::sync::Mutex<u8> = std::sync::Mutex::new(0);\n",
        ),
        // A blocking call after a test module in the middle of the file; a grouped import of
        // the loop; a database item reached through fleet mode's follower.
        (
            "src/owner/mod.rs",
            "#[cfg(test)]\nmod tests {}\n\
             use crate::{node::core_loop::Core, fleet_mode::follower::Follower};\n\
             pub fn f() { std::thread::sleep(std::time::Duration::ZERO); }\n\
             pub fn g() -> fleet::Db { todo!() }\n",
        ),
        ("src/fleet_mode/mod.rs", "pub mod follower;\n"),
        ("src/fleet_mode/follower.rs", "pub struct Follower;\n"),
        ("fleet/src/lib.rs", "mod db;\npub use db::Db;\n"),
        ("fleet/src/db.rs", "pub struct Db;\n"),
    ]);
    let repo = tree.path();
    let crates: &[(&str, &str, &str)] = &[
        ("ricochet", "src", "lib.rs"),
        ("shards", "shards/src", "lib.rs"),
        ("fleet", "fleet/src", "lib.rs"),
    ];
    let locks = locks_on_the_redirect_path(repo);
    assert!(
        locks
            .iter()
            .any(|l| l.starts_with("src/net/conns/deep/lock.rs:1:")),
        "{locks:?}"
    );
    let blocking = blocking_calls_on_the_redirect_path(repo);
    assert!(
        blocking
            .iter()
            .any(|l| l.starts_with("src/owner/mod.rs:4:")),
        "{blocking:?}"
    );
    assert_eq!(
        roles_importing_the_loop(repo, crates),
        vec!["src/owner/mod.rs -> src/node/core_loop.rs: Core".to_owned()]
    );
    let db = core_threads_reaching_the_database(repo, crates);
    assert!(
        db.contains(&"src/owner/mod.rs -> fleet/src/db.rs: Db".to_owned())
            && db.contains(&"src/owner/mod.rs -> src/fleet_mode/follower.rs: Follower".to_owned()),
        "{db:?}"
    );
    let apart = planted(&[
        ("src/a.rs", "#[cfg(test)]\nmod tests;\n"),
        (
            "src/b.rs",
            "#[cfg(test)]\nmod tests {}\npub fn after() {}\n",
        ),
    ]);
    let tests = unit_tests_off_convention(apart.path());
    assert_eq!(tests.len(), 2, "{tests:?}");
    // A test module's imports and code are not code on the path.
    let clean = planted(&[(
        "src/net/conns/mod.rs",
        "pub fn ok() {}\n#[cfg(test)]\nmod tests {\n    use std::sync::Mutex;\n    fn t() { std::thread::sleep(std::time::Duration::ZERO); }\n}\n",
    )]);
    assert!(locks_on_the_redirect_path(clean.path()).is_empty());
    assert!(blocking_calls_on_the_redirect_path(clean.path()).is_empty());
}

/// An `allow` and an `expect` without a reason are both found; an `expect` with one is not.
#[test]
fn a_long_function_without_a_reason_is_found() {
    let excuses = planted(&[
        ("src/a.rs", "#[allow(clippy::too_many_lines)]\nfn a() {}\n"),
        ("tests/b.rs", "#![expect(clippy::too_many_lines)]\n"),
        (
            "tools/src/c.rs",
            "#[expect(clippy::too_many_lines, reason = \"a table\")]\nfn c() {}\n",
        ),
    ]);
    let excuses = long_functions_without_a_reason(excuses.path());
    assert_eq!(excuses.len(), 2, "{excuses:?}");
}
