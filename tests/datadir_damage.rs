//! A damaged data dir is refused loudly (the file named) or every acknowledged link is served,
//! never silent loss: each case damages the dir between runs, then starts the server.
//! The rules are written down in docs/storage.md ("What a start refuses").

mod common;

use common::api::{self, assert_redirects, Client};
use common::{dataset, Server};
use std::path::Path;
use std::process::Command;

fn links_via_api(s: &Server, n: usize, prefix: &str) -> Vec<(String, String)> {
    let mut c = Client::new(s);
    (0..n)
        .map(|i| {
            let alias = format!("{prefix}{i}");
            let url = format!("https://example.com/{prefix}/{i}");
            c.create_ok(&url, Some(&alias));
            (alias, url)
        })
        .collect()
}

fn all_served(s: &Server, links: &[(String, String)]) {
    let mut c = Client::new(s);
    for (k, u) in links {
        assert_redirects(&mut c, k, u, Some(302));
    }
}

fn refused(dir: &Path, args: &[&str], must_name: &str) {
    let e = match api::try_start(dir, args) {
        Ok(_) => panic!("started on a damaged dir (expected a refusal naming {must_name})"),
        Err(e) => e,
    };
    assert!(
        e.contains(must_name),
        "refusal does not name {must_name}: {e}"
    );
}

/// Case 1: `logs/CORES` gone and a different `--cores`: the logs are folded, not misread.
#[test]
fn cores_file_missing_with_another_core_count_loses_nothing() {
    let (_t, dir) = api::data_dir();
    let s = api::start(&dir, &["--cores", "1"]);
    let links = links_via_api(&s, 40, "c");
    assert!(s.terminate().success());
    std::fs::remove_file(dir.join("logs/CORES")).unwrap();
    let s = api::start(&dir, &["--cores", "2"]);
    all_served(&s, &links);
    let mut c = Client::new(&s);
    let r = c.create(&serde_json::json!({"long_url": "https://x.example/", "custom_alias": "c7"}));
    assert_eq!(r.status, 409, "an acknowledged alias can be taken again");
    assert!(s.terminate().success());
    let s = api::start(&dir, &["--cores", "2"]);
    all_served(&s, &links);
}

/// Case 2: `MANIFEST.json` gone while tables and logs hold data: refused, manifest not rewritten.
#[test]
fn manifest_missing_with_data_is_refused_and_not_rewritten() {
    let (_t, dir) = api::data_dir();
    let imported = dataset(200, 5);
    let tsv = dir.with_extension("tsv");
    common::write_tsv(&tsv, &imported);
    let out = Command::new(common::BIN)
        .args(["import", "--shards", "64", "--data-dir"])
        .arg(&dir)
        .arg(&tsv)
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = api::start(&dir, &[]);
    links_via_api(&s, 5, "m");
    assert!(s.terminate().success());
    std::fs::remove_file(dir.join("MANIFEST.json")).unwrap();
    refused(&dir, &[], "MANIFEST.json is missing");
    assert!(
        !dir.join("MANIFEST.json").exists(),
        "a fresh manifest was written"
    );
    // The import refuses too, rather than create a 256-shard dir over a 64-shard one.
    let out = Command::new(common::BIN)
        .args(["import", "--data-dir"])
        .arg(&dir)
        .arg(&tsv)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("MANIFEST.json is missing"));
}

/// Case 3a: a table file deleted: refused naming it; `--accept-data-loss` serves the rest.
#[test]
fn deleted_table_is_refused_unless_the_loss_is_accepted() {
    let (_t, dir) = api::data_dir();
    let imported = dataset(500, 6);
    common::import(&dir, &imported);
    let victim = std::fs::read_dir(dir.join("tables"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tbl"))
        .unwrap();
    let name = format!("tables/{}", victim.file_name().unwrap().to_string_lossy());
    std::fs::remove_file(&victim).unwrap();
    refused(&dir, &[], &name);
    let s = api::start(&dir, &["--accept-data-loss"]);
    assert!(s
        .wait_stderr(&name, std::time::Duration::from_secs(5))
        .is_some());
    let mut c = Client::new(&s);
    let served = imported
        .iter()
        .filter(|l| c.redirect(&l.key).status == l.status)
        .count();
    assert!(
        served > 0 && served < imported.len(),
        "{served} of {}",
        imported.len()
    );
}

/// Case 3b: a log deleted: refused naming it (its acknowledged writes would be reverted).
#[test]
fn deleted_log_is_refused_unless_the_loss_is_accepted() {
    let (_t, dir) = api::data_dir();
    let s = api::start(&dir, &["--cores", "2"]);
    links_via_api(&s, 30, "l");
    assert!(s.terminate().success());
    std::fs::remove_file(dir.join("logs/wal-0.log")).unwrap();
    refused(&dir, &["--cores", "2"], "logs/wal-0.log");
    let s = api::start(&dir, &["--cores", "2", "--accept-data-loss"]);
    assert!(s
        .wait_stderr("wal-0.log", std::time::Duration::from_secs(5))
        .is_some());
    assert!(s.terminate().success());
    // Accepted once, the dir is whole again (the log was recreated).
    let s = api::start(&dir, &["--cores", "2"]);
    assert!(s.terminate().success());
}

/// Case 4: `keygen.secret` deleted after IDs were handed out: refused, never replaced.
#[test]
fn deleted_key_secret_is_refused_once_ids_were_handed_out() {
    let (_t, dir) = api::data_dir();
    let s = api::start(&dir, &[]);
    let mut c = Client::new(&s);
    let key = c.create_ok("https://example.com/generated", None);
    assert!(s.terminate().success());
    std::fs::remove_file(dir.join("keygen.secret")).unwrap();
    refused(&dir, &[], "keygen.secret is missing");
    assert!(
        !dir.join("keygen.secret").exists(),
        "a new secret was written"
    );
    let _ = key;
}

/// Case 5: `api_keys.json` deleted while running: the keys in use keep working.
#[test]
fn api_key_file_deleted_while_running_keeps_the_keys() {
    let (_t, dir) = api::data_dir();
    let s = api::start(&dir, &[]);
    let mut c = Client::new(&s);
    c.create_ok("https://example.com/k/1", Some("k1"));
    std::fs::remove_file(dir.join("api_keys.json")).unwrap();
    assert!(s
        .wait_stderr(
            "is gone; keeping the current keys",
            std::time::Duration::from_secs(5)
        )
        .is_some());
    std::thread::sleep(std::time::Duration::from_millis(300));
    c.create_ok("https://example.com/k/2", Some("k2"));
}
