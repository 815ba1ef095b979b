//! `serve --config FILE`, `RICOCHET_<KEY>` variables and flags: precedence, errors naming the
//! file, line and key, `ricochet config check` and `ricochet config default`, and a real
//! server started from a file.

mod common;

use common::api::{data_dir, Client, API_KEY};
use common::Server;
use serde_json::json;
use std::process::Command;

fn ricochet(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(common::BIN);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &std::path::Path, text: &str) -> String {
    let p = dir.join("ricochet.toml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// The value and source `config check` reports for `key`.
fn setting<'a>(report: &'a str, key: &str) -> (&'a str, &'a str) {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in {report}"));
    let (v, src) = line[key.len() + 3..].split_once("  # ").unwrap();
    (v, src)
}

#[test]
fn the_default_file_is_valid_and_changes_nothing() {
    let (t, _dir) = data_dir();
    let (ok, text, err) = ricochet(&["config", "default"], &[]);
    assert!(ok, "{err}");
    assert!(
        text.contains("# lru_capacity = 65536") && text.contains("# env RICOCHET_LRU_CAPACITY")
    );
    let path = write(t.path(), &text);
    let (ok, report, err) = ricochet(&["config", "check", &path], &[]);
    assert!(ok, "{err}");
    for line in report.lines() {
        assert!(
            line.ends_with("# default") || line.ends_with("# unset"),
            "{line}"
        );
    }
    // Every serve flag but --config and the hidden test flags has a key.
    let (_, help, _) = ricochet(&["serve", "--help"], &[]);
    for flag in help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
    {
        let key = flag.trim_start_matches("--").replace('-', "_");
        if !["config", "help"].contains(&key.as_str()) {
            assert!(report.contains(&format!("{key} = ")), "no key for {flag}");
        }
    }
}

#[test]
fn flags_beat_environment_beats_file_beats_defaults() {
    let (t, _dir) = data_dir();
    let path = write(
        t.path(),
        "cores = 1\nlru_capacity = 1000\npark = \"busy\"\nsalvage = true\n",
    );
    let (ok, r, err) = ricochet(&["config", "check", &path], &[]);
    assert!(ok, "{err}");
    assert_eq!(setting(&r, "cores"), ("1", format!("{path}:1").as_str()));
    assert_eq!(
        setting(&r, "lru_capacity"),
        ("1000", format!("{path}:2").as_str())
    );
    assert_eq!(
        setting(&r, "salvage"),
        ("true", format!("{path}:4").as_str())
    );
    assert_eq!(setting(&r, "spin_us"), ("200", "default"));
    let env = [("RICOCHET_LRU_CAPACITY", "2000"), ("RICOCHET_CORES", "2")];
    let (ok, r, err) = ricochet(&["config", "check", &path, "--", "--cores", "3"], &env);
    assert!(ok, "{err}");
    assert_eq!(
        setting(&r, "lru_capacity"),
        ("2000", "env RICOCHET_LRU_CAPACITY")
    );
    assert_eq!(setting(&r, "cores"), ("3", "flag"));
    assert_eq!(setting(&r, "park"), ("busy", format!("{path}:3").as_str()));
}

#[test]
fn bad_files_are_refused_naming_file_line_and_key() {
    let (t, _dir) = data_dir();
    let cases = [
        ("cores = 1\n\nbogus = 3\n", ":3: unknown key `bogus`"),
        (
            "lru_capacity = 0\n",
            ":1: `lru_capacity`: invalid value '0' for '--lru-capacity",
        ),
        ("\nheader_timeout_ms = 5\n", ":2: `header_timeout_ms`"),
        ("salvage = \"yes\"\n", ":1: `salvage` must be true or false"),
        (
            "cores = [1]\n",
            ":1: `cores` must be a string or an integer",
        ),
        (
            "public_url = \"not a url\"\n",
            ":1: `public_url`: invalid value",
        ),
        ("lru_capacity = \n", "TOML parse error at line 1"),
        ("config = \"x\"\n", "unknown key `config`"),
        // Test-only and fault flags cannot come from a file.
        (
            "test_oversubscribe = true\n",
            ":1: unknown key `test_oversubscribe`",
        ),
        (
            "fault_fail_click_sync = true\n",
            ":1: unknown key `fault_fail_click_sync`",
        ),
    ];
    for (text, want) in cases {
        let path = write(t.path(), text);
        for args in [
            vec!["config", "check", &path],
            vec!["serve", "--config", &path],
        ] {
            let (ok, _, err) = ricochet(&args, &[]);
            assert!(!ok, "{text:?} accepted by {args:?}");
            assert!(err.contains(&path), "{text:?}: no file name in {err}");
            assert!(err.contains(want), "{text:?}: want {want:?} in {err}");
        }
    }
    let (ok, _, err) = ricochet(&["serve", "--config", "/no/such/file.toml"], &[]);
    assert!(!ok && err.contains("/no/such/file.toml"), "{err}");
}

#[test]
fn a_server_runs_from_a_file_with_the_environment_on_top() {
    let (t, dir) = data_dir();
    let path = write(
        t.path(),
        "cores = 1\npublic_url = \"https://file.example\"\ncreate_rate = 5\n",
    );
    let env = [("RICOCHET_API_KEY", API_KEY)];
    let s = Server::start_with_env(&dir, &["--config", &path], &env);
    let mut c = Client::new(&s);
    let v = c
        .create(&json!({"long_url": "https://example.com/cfg"}))
        .json();
    assert!(
        v["short_url"]
            .as_str()
            .unwrap()
            .starts_with("https://file.example/"),
        "{v}"
    );
    drop(c);
    s.terminate();
    let env = [
        ("RICOCHET_API_KEY", API_KEY),
        ("RICOCHET_PUBLIC_URL", "https://env.example"),
    ];
    let s = Server::start_with_env(&dir, &["--config", &path], &env);
    let mut c = Client::new(&s);
    let v = c
        .create(&json!({"long_url": "https://example.com/cfg2"}))
        .json();
    assert!(
        v["short_url"]
            .as_str()
            .unwrap()
            .starts_with("https://env.example/"),
        "{v}"
    );
}

/// Every test-only or fault flag given prints one warning at start naming it; none comes from
/// the environment (a `RICOCHET_*` variable of such a flag sets nothing and says nothing).
#[test]
fn each_test_or_fault_flag_warns_once_at_start_and_none_comes_from_the_environment() {
    let (_t, dir) = data_dir();
    let s = Server::start_with_env(
        &dir,
        &[
            "--test-oversubscribe",
            "--fault-fail-click-sync",
            "--cores",
            "1",
        ],
        &[
            ("RICOCHET_API_KEY", API_KEY),
            ("RICOCHET_FAULT_ABORT_AFTER_CARRY", "true"),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    let lines = s.stderr_lines();
    let warned = |flag: &str| {
        lines
            .iter()
            .filter(|l| l.starts_with(&format!("warning: --{flag} is a test-only flag")))
            .count()
    };
    assert_eq!(warned("test-oversubscribe"), 1, "{lines:?}");
    assert_eq!(warned("fault-fail-click-sync"), 1, "{lines:?}");
    assert_eq!(warned("fault-abort-after-carry"), 0, "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("test-only flag"))
            .count(),
        2,
        "{lines:?}"
    );
    assert_eq!(Client::new(&s).redirect("nothing-here").status, 404);
}
