//! Shlink's REST API (`/rest/v3`) through Shlink's official JS SDK (`@shlinkio/shlink-js-sdk`,
//! with both its fetch and its Node `http` client, which sends bodies chunked,
//! installed by `.ci/run` with `npm ci --prefix tests/shlink`): `tests/shlink/sdk.mjs`
//! creates, reads, edits, lists and deletes links and checks the SDK's answers and errors; this
//! test then checks the same links through the native API and the redirect. Without Node or
//! the SDK it prints SKIPPED, unless `RICOCHET_REQUIRE_SHLINK_SDK` is set (CI sets it).

mod common;

use common::api::{data_dir, make_key, start, Client, API_KEY};
use std::path::Path;
use std::process::Command;

/// `tests/shlink` with the SDK installed, or `None` (the test is SKIPPED) when node or the
/// SDK is missing and `RICOCHET_REQUIRE_SHLINK_SDK` is not set (CI sets it).
fn sdk_dir() -> Option<std::path::PathBuf> {
    let dir_sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shlink");
    let installed = dir_sdk
        .join("node_modules/@shlinkio/shlink-js-sdk")
        .exists()
        && Command::new("node").arg("--version").output().is_ok();
    if !installed {
        assert!(
            std::env::var_os("RICOCHET_REQUIRE_SHLINK_SDK").is_none(),
            "RICOCHET_REQUIRE_SHLINK_SDK is set but node or tests/shlink/node_modules is missing"
        );
        eprintln!("SKIPPED: npm ci --prefix tests/shlink (CI does)");
        return None;
    }
    Some(dir_sdk)
}

#[test]
fn shlinks_sdk_works_against_ricochet() {
    let Some(dir_sdk) = sdk_dir() else {
        return;
    };
    let (_t, dir) = data_dir();
    let out = Command::new(common::server_bin())
        .args(["domains", "--data-dir"])
        .arg(&dir)
        .args([
            "add",
            "go.brand.com",
            "--invalid-short-url",
            "https://brand.example/",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let s = start(&dir, &["--cores", "2", "--public-url", "https://sho.rt"]);
    let base = format!("http://{}", s.addr);
    let out = Command::new("node")
        .current_dir(&dir_sdk)
        .args(["sdk.mjs", &base, API_KEY])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true);
    // The same links, seen natively.
    let mut c = Client::new(&s);
    let slug = v["node"]["slug"].as_str().unwrap();
    let link = c.get_link(slug).json();
    assert_eq!(link["long_url"], "https://example.com/sdk/edited");
    assert_eq!(link["expires_at"], "2030-01-02T03:04:05Z");
    common::api::assert_redirects(&mut c, slug, "https://example.com/sdk/edited", Some(302));
    for client in ["fetch", "node"] {
        c.get_link(v[client]["deleted"].as_str().unwrap())
            .assert_problem(404);
    }
}

/// Keys with roles through the SDK (`tests/shlink/roles.mjs`): author-only, read-only and
/// domain-only keys, each against the endpoints the SDK calls.
#[test]
fn shlinks_sdk_sees_each_role_through_ricochet() {
    let Some(dir_sdk) = sdk_dir() else {
        return;
    };
    let (_t, dir) = data_dir();
    let out = Command::new(common::server_bin())
        .args(["domains", "--data-dir"])
        .arg(&dir)
        .args(["add", "go.brand.com"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let keys = [
        make_key(&dir, "author", &["--author-only"]),
        make_key(&dir, "other", &["--author-only"]),
        make_key(&dir, "reader", &["--read-only"]),
        make_key(&dir, "brand", &["--domain", "go.brand.com"]),
    ];
    let s = start(&dir, &["--cores", "3", "--test-oversubscribe"]);
    let base = format!("http://{}", s.addr);
    let out = Command::new("node")
        .current_dir(&dir_sdk)
        .arg("roles.mjs")
        .arg(&base)
        .args(&keys)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true);
    // What the SDK did, seen natively by the admin key.
    let mut c = Client::new(&s);
    assert_eq!(
        c.get_link("roles-mine").json()["long_url"],
        "https://example.com/roles/mine2"
    );
    c.get_link("roles-theirs").assert_problem(404);
}

/// Paths Shlink has and the SDK cannot reach by a mistake: a short code's unknown sub-path is
/// Shlink's generic `not-found` (not a short code with a slash in it), the health answer names
/// ricochet's own version beside Shlink's, and the visit lists want a key first.
#[test]
fn shlinks_side_paths_answer_as_shlink_does() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &["--cores", "2"]);
    let mut c = Client::new(&s);
    let key = [("X-Api-Key", API_KEY)];
    let code = c.create_ok("https://example.com/side", Some("side"));
    for path in [
        format!("/rest/v3/short-urls/{code}/nope"),
        format!("/rest/v3/short-urls/{code}/redirect-rules/x"),
        "/rest/v3/tags/x/nope".to_string(),
    ] {
        let r = c.send("GET", &path, false, &key, b"").unwrap();
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.json()["type"],
            "https://shlink.io/api/error/not-found",
            "{path}"
        );
    }
    let r = c
        .send(
            "GET",
            &format!("/rest/v3/short-urls/{code}/visits"),
            false,
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 401, "no key, no answer about visits");
    let r = c
        .send(
            "GET",
            &format!("/rest/v3/short-urls/{code}/visits"),
            false,
            &key,
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 501);
    assert_eq!(
        r.json()["type"],
        "https://ricochet.dev/problems/visit-log-off"
    );
    let r = c.send("GET", "/rest/health", false, &[], b"").unwrap();
    let v = r.json();
    assert_eq!(v["version"], "4.5.0");
    assert_eq!(v["ricochet"]["version"], env!("CARGO_PKG_VERSION"));
    let r = c
        .send("GET", "/rest/v3/mercure-info", false, &key, b"")
        .unwrap();
    assert_eq!(r.status, 501);
    // The short URL itself is still there.
    let r = c
        .send(
            "GET",
            &format!("/rest/v3/short-urls/{code}"),
            false,
            &key,
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200);
}
