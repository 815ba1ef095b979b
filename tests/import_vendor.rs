//! `ricochet import --format shlink-csv|yourls-csv|bitly-csv` on samples made from those
//! products' documentation (`tests/import/`): keys, targets and creation times land; Bitly's
//! custom back-halves become keys; archived Bitlinks are left out; a value in a column
//! ricochet cannot keep is refused naming the column, or with `--drop-unsupported` counted.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use serde_json::json;

use common::api::{assert_redirects, data_dir, start, Client};
use std::process::Command;

fn import(dir: &std::path::Path, format: &str, file: &str, drop: bool) -> (bool, String) {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/import/").to_string() + file;
    let mut c = Command::new(common::BIN);
    c.args([
        "import",
        "--data-dir",
        dir.to_str().unwrap(),
        "--format",
        format,
        &sample,
    ]);
    if drop {
        c.arg("--drop-unsupported");
    }
    let out = c.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn other_shorteners_exports_import() {
    for (format, file, refused_column, links) in [
        (
            "shlink-csv",
            "shlink.csv",
            "",
            vec![
                ("docs", "https://shlink.io/documentation/", None),
                ("gh", "https://github.com/shlinkio/shlink", None),
            ],
        ),
        (
            "yourls-csv",
            "yourls.csv",
            "ip",
            vec![
                ("ozh", "http://ozh.org/", Some("2009-10-12T20:51:34Z")),
                (
                    "yourls",
                    "https://yourls.org/",
                    Some("2009-10-12T20:52:00Z"),
                ),
            ],
        ),
        (
            "bitly-csv",
            "bitly.csv",
            "",
            vec![
                (
                    "3xYzAbC",
                    "https://bitly.com/pages/about",
                    Some("2021-05-06T07:08:09Z"),
                ),
                (
                    "about-us",
                    "https://bitly.com/pages/about",
                    Some("2021-05-06T07:08:09Z"),
                ),
            ],
        ),
    ] {
        let (_t, dir) = data_dir();
        if !refused_column.is_empty() {
            let (ok, text) = import(&dir, format, file, false);
            assert!(
                !ok,
                "{format}: a value in {refused_column} was accepted silently: {text}"
            );
            assert!(
                text.contains(&format!("{refused_column} is not supported"))
                    && text.contains("--drop-unsupported"),
                "{format}: {text}"
            );
        }
        let (ok, text) = import(&dir, format, file, true);
        assert!(ok, "{format}: {text}");
        if !refused_column.is_empty() {
            assert!(
                text.contains("left out (--drop-unsupported)"),
                "{format}: {text}"
            );
        }
        let s = start(&dir, &["--cores", "2"]);
        let mut c = Client::new(&s);
        for (key, url, created) in &links {
            assert_redirects(&mut c, key, url, Some(302));
            if let Some(t) = created {
                assert_eq!(c.get_link(key).json()["created_at"], *t, "{format}: {key}");
            }
        }
        if format == "bitly-csv" {
            c.get_link("4oldOne").assert_problem(404); // archived
        }
        // Titles and Shlink's `|`-separated tags become the links' labels.
        let labels = |c: &mut Client, key: &str| {
            let v = c.get_link(key).json();
            (v["title"].clone(), v["tags"].clone())
        };
        match format {
            "shlink-csv" => {
                assert_eq!(
                    labels(&mut c, "docs"),
                    (json!(null), json!(["docs", "getting-started"]))
                );
                assert_eq!(labels(&mut c, "gh"), (json!("Shlink on GitHub"), json!([])));
            }
            "yourls-csv" => assert_eq!(labels(&mut c, "yourls"), (json!("YOURLS"), json!([]))),
            _ => {}
        }
    }
}

#[test]
fn a_vendor_csv_with_unknown_columns_is_refused() {
    let (t, dir) = data_dir();
    let path = t.path().join("odd.csv");
    std::fs::write(&path, "Long URL,Short code,Visits\nhttps://e.com/,k,3\n").unwrap();
    let out = Command::new(common::BIN)
        .args([
            "import",
            "--data-dir",
            dir.to_str().unwrap(),
            "--format",
            "shlink-csv",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"Visits\""), "{err}");
}
