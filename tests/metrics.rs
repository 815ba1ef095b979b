//! `/metrics` parsed by a real OpenMetrics parser (Python's `prometheus_client`,
//! `tests/metrics/parse.py`): the families and types the operator interface promises, labels
//! only from bounded vocabularies, never a key or URL, and counts that match what was done.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

fn parse(text: &str) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics/parse.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("No module named 'prometheus_client'"),
        "pip install prometheus_client (.ci/run does)"
    );
    assert!(out.status.success(), "the parser refused /metrics: {err}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn scrape(s: &common::Server) -> String {
    let mut r = common::Reader::new(s.connect());
    r.send(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let resp = r.read_response(false);
    assert_eq!(resp.status, 200);
    assert!(resp
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    String::from_utf8(resp.body).unwrap()
}

/// Sum of a family's samples named `sample` (over every label set).
fn total(fams: &[Value], sample: &str) -> f64 {
    fams.iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .filter(|s| s["name"] == sample)
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

#[test]
fn metrics_parse_with_bounded_labels_and_true_counts() {
    let (_t, dir) = data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend(["--cores", "2", "--compact-entries", "5"]);
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let mut keys = Vec::new();
    for i in 0..12 {
        let url = format!("https://example.com/secret-path-{i}?token=abc{i}");
        keys.push((c.create_ok(&url, None), url));
    }
    for (k, _) in &keys {
        assert_eq!(c.redirect(k).status, 302);
    }
    for _ in 0..3 {
        assert_eq!(c.redirect("NoSuchKey1").status, 404);
    }
    assert!(s
        .wait_stderr("compacted", std::time::Duration::from_secs(10))
        .is_some());
    std::thread::sleep(std::time::Duration::from_millis(300)); // one sweep publishes
    let text = scrape(&s);
    for (k, url) in &keys {
        assert!(
            !text.contains(k.as_str()) && !text.contains(url.as_str()),
            "a key or URL in /metrics"
        );
    }
    assert!(
        !text.contains(common::api::API_KEY),
        "the API key in /metrics"
    );
    let fams = parse(&text);
    let types: BTreeMap<&str, &str> = fams
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["type"].as_str().unwrap()))
        .collect();
    for (name, kind) in [
        ("ricochet_requests", "counter"),
        ("ricochet_responses", "counter"),
        ("ricochet_redirects", "counter"),
        ("ricochet_request_duration_seconds", "histogram"),
        ("ricochet_log_records", "counter"),
        ("ricochet_log_batches", "counter"),
        ("ricochet_log_batch_records", "histogram"),
        ("ricochet_log_fdatasync_seconds", "histogram"),
        ("ricochet_compactions", "counter"),
        ("ricochet_compaction_milliseconds", "counter"),
        ("ricochet_compacted_entries", "counter"),
        ("ricochet_memtable_entries", "gauge"),
        ("ricochet_table_links", "gauge"),
        ("ricochet_table_bytes", "gauge"),
        ("ricochet_links", "gauge"),
        ("ricochet_connections", "gauge"),
        ("ricochet_accept_errors", "counter"),
        ("ricochet_ids_remaining", "gauge"),
        ("ricochet_core_heap_allocations", "counter"),
        ("ricochet_build", "info"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(types.get(name), Some(&kind), "{name}");
    }
    // Labels: bounded vocabularies only.
    let allowed: BTreeMap<&str, BTreeSet<String>> = BTreeMap::from([
        ("core", ["0", "1"].map(String::from).into()),
        (
            "outcome",
            [
                "redirect",
                "not_found",
                "blocked",
                "disabled",
                "api",
                "other",
            ]
            .map(String::from)
            .into(),
        ),
        (
            "class",
            ["descriptors", "memory", "aborted", "other"]
                .map(String::from)
                .into(),
        ),
        ("version", [env!("CARGO_PKG_VERSION").to_string()].into()),
    ]);
    for f in &fams {
        for smp in f["samples"].as_array().unwrap() {
            for (k, v) in smp["labels"].as_object().unwrap() {
                if k == "le" {
                    assert!(v.as_str().unwrap().parse::<f64>().is_ok() || v == "+Inf");
                    continue;
                }
                let ok = allowed
                    .get(k.as_str())
                    .is_some_and(|vs| vs.contains(v.as_str().unwrap()));
                assert!(ok, "{}: label {k}={v} outside its vocabulary", f["name"]);
            }
        }
    }
    // The counts are the truth.
    assert_eq!(total(&fams, "ricochet_redirects_total"), 12.0);
    assert_eq!(total(&fams, "ricochet_not_found_total"), 3.0);
    assert!(total(&fams, "ricochet_log_records_total") >= 12.0);
    assert!(total(&fams, "ricochet_compactions_total") >= 1.0);
    assert!(total(&fams, "ricochet_request_duration_seconds_count") >= 27.0);
    assert!(total(&fams, "ricochet_log_fdatasync_seconds_count") >= 1.0);
    assert!(total(&fams, "process_resident_memory_bytes") > 1e6);
    assert!(total(&fams, "process_open_fds") > 3.0);
    let responses = total(&fams, "ricochet_responses_total");
    assert_eq!(responses, total(&fams, "ricochet_requests_total"));
}
