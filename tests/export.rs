//! `ricochet export` beside a running server, read back by `ricochet import`: every live link
//! with its status, expiry and creation time survives the round trip, in all three formats;
//! links acknowledged before the export began are in it, links deleted before it are not.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;

fn ricochet(args: &[&str]) -> String {
    let out = Command::new(common::BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ricochet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// key -> (long_url, redirect_status, expires_at, created_at) as the API shows it.
fn api_view(c: &mut Client, keys: &[String]) -> BTreeMap<String, Value> {
    keys.iter()
        .map(|k| {
            let v = c.get_link(k).json();
            let view = json!([
                v["long_url"],
                v["redirect_status"],
                v["expires_at"],
                v["created_at"]
            ]);
            (k.clone(), view)
        })
        .collect()
}

#[test]
fn export_while_serving_round_trips_through_import() {
    let (t, dir) = data_dir();
    // Imported links, one with an expiry, one with a 301.
    let seed = t.path().join("seed.ndjson");
    std::fs::write(
        &seed,
        "{\"key\":\"imp-a\",\"long_url\":\"https://example.com/a\"}\n\
         {\"key\":\"imp-b\",\"long_url\":\"https://example.com/b\",\"status\":301,\"expires_at\":\"2099-01-02T03:04:05Z\"}\n\
         {\"key\":\"imp-c\",\"long_url\":\"https://bücher.example/ü\",\"created_at\":\"2020-05-06T07:08:09Z\"}\n",
    )
    .unwrap();
    ricochet(&[
        "import",
        "--data-dir",
        dir.to_str().unwrap(),
        seed.to_str().unwrap(),
    ]);
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend(["--cores", "2", "--compact-entries", "20"]);
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let mut keys: Vec<String> = ["imp-a", "imp-b", "imp-c"].map(String::from).to_vec();
    for i in 0..60 {
        let body = if i % 3 == 0 {
            json!({"long_url": format!("https://example.com/api/{i}"), "ttl_days": 30})
        } else {
            json!({"long_url": format!("https://example.com/api/{i}"), "redirect_status": 308})
        };
        keys.push(c.create(&body).key());
    }
    assert_eq!(
        c.patch(
            &keys[5],
            &json!({"long_url": "https://example.com/patched"})
        )
        .status,
        200
    );
    let deleted: Vec<String> = keys.drain(10..15).collect();
    for k in &deleted {
        assert_eq!(c.delete(k).status, 204);
    }
    assert!(s
        .wait_stderr("compacted", std::time::Duration::from_secs(10))
        .is_some());
    let before = api_view(&mut c, &keys);
    // Writes go on while the export reads.
    let writer = {
        let addr = s.addr;
        std::thread::spawn(move || {
            let mut c = Client::connect(addr).unwrap();
            c.token = common::api::API_KEY.into();
            for i in 0..100 {
                c.create_ok(&format!("https://example.com/during/{i}"), None);
            }
        })
    };
    let mut exports = BTreeMap::new();
    for fmt in ["ndjson", "tsv", "csv"] {
        let out = t.path().join(format!("export.{fmt}"));
        ricochet(&[
            "export",
            "--data-dir",
            dir.to_str().unwrap(),
            "--format",
            fmt,
            "--output",
            out.to_str().unwrap(),
        ]);
        exports.insert(fmt, out);
    }
    writer.join().unwrap();
    let text = std::fs::read_to_string(&exports["ndjson"]).unwrap();
    let exported: BTreeMap<String, Value> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["key"].as_str().unwrap().to_string(), v)
        })
        .collect();
    for k in &keys {
        assert!(
            exported.contains_key(k),
            "{k} acknowledged before the export is missing"
        );
    }
    for k in &deleted {
        assert!(
            !exported.contains_key(k),
            "{k} deleted before the export is in it"
        );
    }
    // Links record their author (the API key's id; issue 26), imports have none.
    assert_eq!(
        exported[&keys[5]]["author"], "env",
        "{}",
        exported[&keys[5]]
    );
    assert!(exported["imp-a"].get("author").is_none());
    let tsv = std::fs::read_to_string(&exports["tsv"]).unwrap();
    assert!(tsv.starts_with("key\tlong_url\tstatus\texpires_at\tdomain\tauthor\n"));
    for (fmt, path) in &exports {
        let (t2, dir2) = data_dir();
        let _keep = t2;
        ricochet(&[
            "import",
            "--data-dir",
            dir2.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        let s2 = start(&dir2, &["--cores", "2"]);
        let mut c2 = Client::new(&s2);
        let after = api_view(&mut c2, &keys);
        for k in &keys {
            let (b, a) = (&before[k], &after[k]);
            // TSV and CSV carry no creation time: the import's own time is used.
            let n = if *fmt == "ndjson" { 4 } else { 3 };
            assert_eq!(
                b.as_array().unwrap()[..n],
                a.as_array().unwrap()[..n],
                "{fmt}: {k}"
            );
        }
        // Every format carries the author back.
        let authors = t.path().join(format!("authors-{fmt}.ndjson"));
        ricochet(&[
            "export",
            "--data-dir",
            dir2.to_str().unwrap(),
            "--output",
            authors.to_str().unwrap(),
        ]);
        let authors = std::fs::read_to_string(&authors).unwrap();
        let line = authors
            .lines()
            .find(|l| l.contains(&format!("\"{}\"", keys[5])));
        assert!(
            line.unwrap().contains("\"author\":\"env\""),
            "{fmt}: {line:?}"
        );
        if *fmt == "ndjson" {
            // Exporting the restored dir gives the same bytes back.
            let again = t.path().join("again.ndjson");
            ricochet(&[
                "export",
                "--data-dir",
                dir2.to_str().unwrap(),
                "--output",
                again.to_str().unwrap(),
            ]);
            assert_eq!(std::fs::read_to_string(&again).unwrap(), text);
        }
    }
}

#[test]
fn export_refuses_a_damaged_log_naming_it() {
    let (t, dir) = data_dir();
    let s = start(&dir, &["--cores", "1"]);
    let mut c = Client::new(&s);
    for i in 0..5 {
        c.create_ok(&format!("https://example.com/d/{i}"), None);
    }
    drop(c);
    s.terminate();
    let log = dir.join("logs").join("wal-0.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&log, &bytes).unwrap();
    let out = Command::new(common::BIN)
        .args(["export", "--data-dir", dir.to_str().unwrap(), "--output"])
        .arg(t.path().join("x.ndjson"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "a damaged log was exported");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wal-0.log"), "{err}");
    assert!(
        !t.path().join("x.ndjson").exists(),
        "a partial export was left behind"
    );
}
