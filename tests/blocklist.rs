//! The abuse blocklist (issue 27, single node): `--blocklist FILE` refuses creates and PATCHes
//! to what it names (422 `blocked-target` naming the entry), and a link whose target becomes
//! blocked answers 451 on every core within about a second of the file changing, while the
//! link is kept (the API still reads it) and redirects again once unblocked. On 3 cores (more
//! than this machine's CPUs), so the links' keys land on every owner and forwards.

#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{data_dir, start, try_start, Client, NO_RATE_LIMIT};
use serde_json::json;
use std::time::{Duration, Instant};

const LIST: &str = "\
# test list
evil.example
0.0.0.0 sink.example
this is not an entry
phish.example/login
";

/// Waits until every link in `links` answers `status` to a GET (and the same to a HEAD).
fn until_all(c: &mut Client, links: &[(String, String)], status: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for (key, target) in links {
        loop {
            let r = c.redirect(key);
            if r.status == status {
                match status {
                    302 => assert_eq!(r.location(), Some(target.as_str())),
                    _ => {
                        assert_eq!(r.location(), None);
                        assert!(r.text().contains("Link blocked"), "{}", r.text());
                    }
                }
                let head = c.send("HEAD", &format!("/{key}"), false, &[], b"").unwrap();
                assert_eq!((head.status, head.body.len()), (status, 0));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "/{key} ({target}) answered {}, wanted {status} within 10 s",
                r.status
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn blocked_targets_are_refused_and_stop_redirecting_until_unblocked() {
    let (_t, dir) = data_dir();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("blocklist.txt");
    std::fs::write(&list, LIST).unwrap();
    let list_arg = list.to_str().unwrap();
    let mut flags = vec![
        "--cores",
        "3",
        "--test-oversubscribe",
        "--blocklist",
        list_arg,
    ];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let skipped = s.wait_stderr(":4: skipped", Duration::from_secs(5));
    assert!(
        skipped.is_some_and(|l| l.contains("blocklist.txt")),
        "{:?}",
        s.stderr_lines()
    );
    let mut c = Client::new(&s);
    let r = c.send("GET", "/readyz?verbose", false, &[], b"").unwrap();
    let v = r.json();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "blocklist")
        .cloned()
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(check["ok"], true, "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("3 entries from ")
            && detail.contains("blocklist.txt:4: more than one word"),
        "{detail}"
    );

    for (url, entry) in [
        ("https://evil.example/x", "evil.example"),
        ("https://a.b.EVIL.example./x", "evil.example"),
        ("https://%65vil.example/", "evil.example"),
        ("http://sink.example:8080/", "sink.example"),
        ("https://phish.example/login?next=1", "phish.example/login*"),
    ] {
        let r = c.create(&json!({ "long_url": url }));
        let p = r.assert_problem(422);
        assert_eq!(
            p["type"], "https://ricochet.dev/problems/blocked-target",
            "{p}"
        );
        assert_eq!(p["field"], "long_url", "{p}");
        assert!(p["detail"].as_str().unwrap().contains(entry), "{url}: {p}");
    }
    // Shlink's API refuses them the same way (create and edit).
    let shlink = |c: &mut Client, method: &str, path: &str, body: serde_json::Value| {
        let headers = [
            ("X-Api-Key", common::api::API_KEY),
            ("Content-Type", "application/json"),
        ];
        c.send(method, path, false, &headers, body.to_string().as_bytes())
            .unwrap()
    };
    let r = shlink(
        &mut c,
        "POST",
        "/rest/v3/short-urls",
        json!({"longUrl": "https://a.evil.example/x"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("evil.example"), "{}", r.text());
    let r = shlink(
        &mut c,
        "POST",
        "/rest/v3/short-urls",
        json!({"longUrl": "https://good.example/s", "customSlug": "shl1"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = shlink(
        &mut c,
        "PATCH",
        "/rest/v3/short-urls/shl1",
        json!({"longUrl": "https://sink.example/"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());

    // Not blocked: another path on a prefix's host, a host that only ends like a listed one.
    let mut links = Vec::new();
    for url in ["https://phish.example/about", "https://notevil.example/"] {
        let key = c.create_ok(url, None);
        links.push((key, url.to_owned()));
    }
    let mut good = Vec::new();
    for i in 0..24 {
        let url = format!("https://good.example/p/{i}");
        good.push((c.create_ok(&url, None), url));
    }
    // A host that is not plain ASCII: the redirect path parses it the slow way.
    let url = "https://bücher.example/x";
    // (Its `Location` is the URI form of the IRI.)
    good.push((
        c.create_ok(url, None),
        "https://b%C3%BCcher.example/x".to_owned(),
    ));
    let r = c.patch(
        &good[0].0,
        &json!({ "long_url": "https://sub.sink.example/" }),
    );
    assert!(r.assert_problem(422)["detail"]
        .as_str()
        .unwrap()
        .contains("sink.example"));
    until_all(&mut c, &good, 302);
    until_all(&mut c, &links, 302);

    // Listed while the server runs: every core stops redirecting them; the links stay.
    std::fs::write(
        &list,
        format!("{LIST}good.example\nxn--bcher-kva.example\n"),
    )
    .unwrap();
    until_all(&mut c, &good, 451);
    until_all(&mut c, &links, 302);
    let r = c.get_link(&good[3].0);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["long_url"], good[3].1);
    let r = c.create(&json!({ "long_url": "https://www.good.example/" }));
    r.assert_problem(422);

    // A file that cannot be read keeps the list in force.
    std::fs::remove_file(&list).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    until_all(&mut c, &good, 451);

    // Unlisted again: they redirect again.
    std::fs::write(&list, LIST).unwrap();
    until_all(&mut c, &good, 302);
    drop(s);

    // A blocklist that cannot be read at start is refused, naming the file.
    let missing = list_dir.path().join("missing.txt");
    let err = try_start(&dir, &["--blocklist", missing.to_str().unwrap()]).err();
    assert!(
        err.as_deref().is_some_and(|e| e.contains("missing.txt")),
        "{err:?}"
    );
}

/// `ricochet import --blocklist FILE`: a line whose target the list names is a bad line naming
/// the file, the line and the entry (and, as for any bad line, nothing is imported).
#[test]
fn an_import_refuses_blocked_targets_by_line() {
    let (_t, dir) = data_dir();
    let files = tempfile::tempdir().unwrap();
    let list = files.path().join("blocklist.txt");
    std::fs::write(&list, LIST).unwrap();
    let links = files.path().join("links.tsv");
    std::fs::write(
        &links,
        "a1\thttps://good.example/1\nb2\thttps://x.EVIL.example/2\nc3\thttps://phish.example/login\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::server_bin())
        .arg("import")
        .arg("--data-dir")
        .arg(&dir)
        .arg(&links)
        .arg("--blocklist")
        .arg(&list)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("links.tsv:2: the target is on the blocklist (entry evil.example)"),
        "{err}"
    );
    assert!(
        err.contains("links.tsv:3: the target is on the blocklist (entry phish.example/login*)"),
        "{err}"
    );
    assert!(err.contains("blocklist.txt:4: skipped"), "{err}");
    // Without the blocked lines it imports.
    std::fs::write(&links, "a1\thttps://good.example/1\n").unwrap();
    let out = std::process::Command::new(common::server_bin())
        .args(["import", "--data-dir"])
        .arg(&dir)
        .arg(&links)
        .arg("--blocklist")
        .arg(&list)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
