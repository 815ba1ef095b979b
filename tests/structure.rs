//! Source-level invariants ARCHITECTURE.md states as absences: the redirect path's modules
//! take no locks and make no blocking calls, and no role imports the loop. Comments and
//! `#[cfg(test)]` sections are not code on the path and are skipped.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Modules a redirect runs through (parse, route, local or cached answer, forward, send).
const REDIRECT_PATH: &[&str] = &[
    "src/core.rs",
    "src/conns",
    "src/mesh.rs",
    "src/cache.rs",
    "src/target.rs",
    "src/key.rs",
    "src/clock.rs",
    "src/router.rs",
    "src/owner/mod.rs",
    "src/owner/store.rs",
    "src/http",
    "src/analytics/combiner.rs",
    "shards/src/table/reader.rs",
    "shards/src/placement.rs",
];

/// Role modules: none may name the loop.
const ROLES: &[&str] = &[
    "src/conns",
    "src/owner",
    "src/client",
    "src/flights.rs",
    "src/mesh.rs",
    "src/target.rs",
    "src/service.rs",
];

fn files(rel: &str) -> Vec<PathBuf> {
    let p = Path::new(ROOT).join(rel);
    if p.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect();
        v.sort();
        v
    } else {
        assert!(p.is_file(), "{} is listed but missing", p.display());
        vec![p]
    }
}

/// The code of `path`: without comments, and without anything from the first `#[cfg(test)]`
/// on (test modules sit at the end of a file) or test-only files.
fn code(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with("_tests.rs") || name == "tests.rs" {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    Some(lines.join("\n"))
}

/// Whether `line` names `word`: a word ending in a letter or digit must not continue as a
/// longer name (`fleet::Db` is not `fleet::DbRefusal`, a plain value type).
fn contains_name(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let open_ended = word.chars().last().is_some_and(ident);
    line.match_indices(word)
        .any(|(at, _)| !open_ended || !line[at + word.len()..].chars().next().is_some_and(ident))
}

fn offenders(dirs: &[&str], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for d in dirs {
        for f in files(d) {
            let Some(code) = code(&f) else { continue };
            for (i, line) in code.lines().enumerate() {
                for word in forbidden {
                    if contains_name(line, word) {
                        found.push(format!(
                            "{}:{}: `{word}`: {}",
                            f.display(),
                            i + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn redirect_path_modules_take_no_locks() {
    let found = offenders(
        REDIRECT_PATH,
        &["Mutex", "RwLock", ".lock()", "Condvar", "Barrier"],
    );
    assert!(
        found.is_empty(),
        "locks on the redirect path:\n{}",
        found.join("\n")
    );
}

#[test]
fn redirect_path_modules_make_no_blocking_calls() {
    let forbidden = [
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
    // Table files are opened and validated before serving; their lookups are what runs here.
    let dirs: Vec<&str> = REDIRECT_PATH
        .iter()
        .copied()
        .filter(|d| !d.ends_with("table/reader.rs"))
        .collect();
    let mut found = offenders(&dirs, &forbidden);
    // Stdout writes block; `eprintln!` is for error paths only (documented in ARCHITECTURE.md).
    found.extend(
        offenders(&dirs, &["println!"])
            .into_iter()
            .filter(|l| !l.contains("eprintln!")),
    );
    assert!(
        found.is_empty(),
        "blocking calls on the redirect path:\n{}",
        found.join("\n")
    );
}

#[test]
fn roles_do_not_import_the_loop() {
    let found = offenders(ROLES, &["crate::core"]);
    assert!(
        found.is_empty(),
        "a role imports the loop:\n{}",
        found.join("\n")
    );
}

/// Only `fleet/` has a PostgreSQL client: no other crate depends on one or names one, and no
/// core-thread module (the redirect path, the roles) reaches the parts of `fleet` that talk
/// to the database; they read its atomics (`FleetStats`) only.
#[test]
fn only_the_fleet_crate_talks_to_postgres() {
    for manifest in [
        "Cargo.toml",
        "shards/Cargo.toml",
        "tools/Cargo.toml",
        "fleet/Cargo.toml",
    ] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(manifest)).unwrap();
        let mut section = String::new();
        let mut has_client = false;
        for line in text.lines() {
            if line.starts_with('[') {
                section = line.trim().to_owned();
            } else if section.ends_with("dependencies]")
                && !section.starts_with("[workspace")
                && ["tokio-postgres", "postgres", "sqlx"].iter().any(|d| {
                    line.trim_start().starts_with(&format!("{d} "))
                        || line.trim_start().starts_with(&format!("{d}."))
                })
            {
                has_client = true;
            }
        }
        assert_eq!(
            has_client,
            manifest == "fleet/Cargo.toml",
            "{manifest}: a PostgreSQL client dependency belongs in fleet/ only"
        );
    }
    let found = offenders(
        &[
            "src",
            "src/fleet_mode",
            "src/conns",
            "src/owner",
            "src/client",
            "src/api",
            "shards/src",
            "tools/src",
        ],
        &["tokio_postgres", "postgres::"],
    );
    assert!(
        found.is_empty(),
        "a PostgreSQL client outside fleet/:\n{}",
        found.join("\n")
    );
    let mut core_thread: Vec<&str> = REDIRECT_PATH.to_vec();
    core_thread.extend(ROLES);
    let found = offenders(
        &core_thread,
        &[
            "fleet::Db",
            "PgAuthority",
            "fleet::init",
            "fleet::load_secret",
            // Fleet mode's node side: only its messages reach a core.
            "fleet_mode::node",
            "fleet_mode::bootstrap",
            "fleet_mode::follower",
            "fleet_mode::regen",
            "fleet_mode::cli",
            "spawn_writer",
            "spawn_reader",
            "feed::poll",
            "feed::snapshot",
            "list_keys",
        ],
    );
    assert!(
        found.is_empty(),
        "a core-thread module reaches the database:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_code() {
    // Guard against the lists going stale: the checked files exist and hold the code they
    // are about (a check over empty text would pass whatever the code did).
    let conns = code(&Path::new(ROOT).join("src/conns/requests.rs")).unwrap();
    assert!(conns.contains("fn lookup"));
    assert!(offenders(&["src/service.rs"], &["bounded("]).len() >= 2);
    assert!(!offenders(&["src/fleet_mode/node.rs"], &["fleet::Db"]).is_empty());
    assert!(!offenders(&["fleet/src/db.rs"], &["tokio_postgres"]).is_empty());
}
