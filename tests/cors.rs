//! CORS on the APIs (issue 28): a page on another origin (Shlink's hosted web client, an app
//! embedding its web component) can call the native and Shlink APIs. On 3 cores (more than
//! this machine's CPUs) so that answers deferred to other owner cores are covered too:
//! - the default (`--cors-origins *`): every preflight under `/api/` and `/rest/` is 204 with
//!   the allowed methods, headers and max age, without a key; every API answer, success or
//!   error, immediate or deferred, says `Access-Control-Allow-Origin: *`;
//! - a list: a listed origin is echoed with `Vary: Origin`, any other gets no CORS field;
//! - redirects, probes and `robots.txt` never carry CORS fields;
//! - a bad `--cors-origins` stops the server with a message naming the flag.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{data_dir, start, try_start, Client, Resp, API_KEY, NO_RATE_LIMIT};
use serde_json::json;

const APP: &str = "https://app.example";

fn server(dir: &std::path::Path, extra: &[&str]) -> common::Server {
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    flags.extend(extra);
    start(dir, &flags)
}

fn preflight(c: &mut Client, path: &str, origin: &str) -> Resp {
    let r = c
        .send(
            "OPTIONS",
            path,
            false,
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "PATCH"),
                ("Access-Control-Request-Headers", "x-api-key,content-type"),
            ],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 204, "{path}: {}", r.text());
    assert!(r.body.is_empty());
    assert_eq!(
        r.header("content-length"),
        None,
        "a 204 has no Content-Length"
    );
    r
}

/// The fields of an answer a page at `origin` may read.
fn assert_allowed(r: &Resp, allow: &str, what: &str) {
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(allow),
        "{what}: {} {:?}",
        r.status,
        r.headers
    );
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("Location, Retry-After"),
        "{what}"
    );
    assert_eq!(r.header("access-control-allow-credentials"), None, "{what}");
    let vary = r.header("vary");
    if allow == "*" {
        assert_eq!(vary, None, "{what}");
    } else {
        assert_eq!(vary, Some("Origin"), "{what}");
    }
}

fn assert_no_cors(r: &Resp, what: &str) {
    for (name, _) in &r.headers {
        assert!(
            !name.to_ascii_lowercase().starts_with("access-control-"),
            "{what}: {name} in {:?}",
            r.headers
        );
    }
}

fn assert_preflight_allows(r: &Resp, allow: &str) {
    assert_eq!(r.header("access-control-allow-origin"), Some(allow));
    let methods = r.header("access-control-allow-methods").unwrap();
    assert_eq!(Some(methods), r.header("allow"), "the path's own methods");
    let headers = r.header("access-control-allow-headers").unwrap();
    for h in [
        "X-Api-Key",
        "Authorization",
        "Content-Type",
        "Idempotency-Key",
    ] {
        assert!(headers.contains(h), "{headers}");
    }
    assert_eq!(r.header("access-control-max-age"), Some("3600"));
}

#[test]
fn any_origin_reads_every_api_answer_and_no_redirect() {
    let (_tmp, dir) = data_dir();
    let s = server(&dir, &[]);
    let mut c = Client::new(&s);
    let origin = [("Origin", APP)];
    let shlink_key = [("Origin", APP), ("X-Api-Key", API_KEY)];

    for (path, methods) in [
        ("/rest/v3/short-urls", "GET, HEAD, POST, OPTIONS"),
        (
            "/rest/v3/short-urls/abc",
            "GET, HEAD, PATCH, DELETE, OPTIONS",
        ),
        (
            "/rest/v3/short-urls/abc/redirect-rules",
            "GET, HEAD, POST, OPTIONS",
        ),
        ("/rest/v3/domains/redirects", "PATCH, OPTIONS"),
        ("/rest/health", "GET, HEAD, OPTIONS"),
        ("/api/v1/urls", "GET, HEAD, POST, OPTIONS"),
        ("/api/v1/urls/abc", "GET, HEAD, PATCH, DELETE, OPTIONS"),
        ("/api/v1/urls/abc/stats", "GET, HEAD, DELETE, OPTIONS"),
        ("/api/v1/stats", "GET, HEAD, OPTIONS"),
    ] {
        let r = preflight(&mut c, path, APP);
        assert_preflight_allows(&r, "*");
        assert_eq!(r.header("allow"), Some(methods), "{path}");
    }

    // Links on every core: reads and edits of most are deferred to another owner.
    let mut keys = Vec::new();
    for i in 0..24 {
        let body = json!({"long_url": format!("https://example.com/{i}")}).to_string();
        let r = c
            .send("POST", "/api/v1/urls", true, &origin, body.as_bytes())
            .unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        assert_allowed(&r, "*", "native create");
        keys.push(r.key());
    }
    for key in &keys {
        let r = c
            .send("GET", &format!("/api/v1/urls/{key}"), true, &origin, b"")
            .unwrap();
        assert_eq!(r.status, 200);
        assert_allowed(&r, "*", "native read");
        let r = c
            .send(
                "GET",
                &format!("/rest/v3/short-urls/{key}"),
                false,
                &shlink_key,
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_allowed(&r, "*", "Shlink read");
        let body = json!({"longUrl": format!("https://example.org/{key}")}).to_string();
        let r = c
            .send(
                "PATCH",
                &format!("/rest/v3/short-urls/{key}"),
                false,
                &shlink_key,
                body.as_bytes(),
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_allowed(&r, "*", "Shlink edit");
    }
    let r = c
        .send("GET", "/rest/v3/short-urls", false, &shlink_key, b"")
        .unwrap();
    assert_eq!(r.status, 200);
    assert_allowed(&r, "*", "Shlink list");
    let r = c.send("GET", "/rest/health", false, &origin, b"").unwrap();
    assert_eq!(r.status, 200);
    assert_allowed(&r, "*", "Shlink health");

    // Errors too: the page must read why it was refused.
    let r = c
        .send("GET", "/rest/v3/short-urls", false, &origin, b"")
        .unwrap();
    assert_eq!(r.status, 401);
    assert_allowed(&r, "*", "missing key");
    let r = c
        .send("GET", "/api/v1/urls/nosuchkey", true, &origin, b"")
        .unwrap();
    assert_eq!(r.status, 404);
    assert_allowed(&r, "*", "unknown link");
    let r = c
        .send("POST", "/api/v1/urls", true, &origin, b"{not json")
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_allowed(&r, "*", "bad body");

    // Without an `Origin` (curl, SDKs on a server) the field is there too: `*` varies by
    // nothing.
    let r = c
        .send("GET", &format!("/api/v1/urls/{}", keys[0]), true, &[], b"")
        .unwrap();
    assert_allowed(&r, "*", "no Origin");

    // Not the API: nothing.
    for key in &keys {
        let r = c
            .send("GET", &format!("/{key}"), false, &origin, b"")
            .unwrap();
        assert_eq!(r.status, 302);
        assert_no_cors(&r, "redirect");
    }
    for path in ["/healthz", "/robots.txt", "/nosuchkey"] {
        let r = c.send("GET", path, false, &origin, b"").unwrap();
        assert_no_cors(&r, path);
    }
    let r = c.send("OPTIONS", "*", false, &origin, b"").unwrap();
    assert_eq!(r.status, 204);
    assert_no_cors(&r, "OPTIONS *");
}

#[test]
fn a_list_admits_only_its_origins() {
    let (_tmp, dir) = data_dir();
    let s = server(
        &dir,
        &[
            "--cors-origins",
            "https://App.example:443/, http://localhost:3000",
        ],
    );
    let mut c = Client::new(&s);

    let r = preflight(&mut c, "/rest/v3/short-urls", APP);
    assert_preflight_allows(&r, APP);
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = preflight(&mut c, "/api/v1/urls", "http://localhost:3000");
    assert_preflight_allows(&r, "http://localhost:3000");
    // Another origin: the preflight says which methods the path has, and nothing a browser
    // would take as leave to call.
    let r = preflight(&mut c, "/api/v1/urls", "https://evil.example");
    assert_no_cors(&r, "preflight of an unlisted origin");
    assert!(r.header("allow").is_some());

    let mut keys = Vec::new();
    for i in 0..12 {
        let body = json!({"long_url": format!("https://example.com/{i}")}).to_string();
        let r = c
            .send(
                "POST",
                "/api/v1/urls",
                true,
                &[("Origin", APP)],
                body.as_bytes(),
            )
            .unwrap();
        assert_eq!(r.status, 201);
        assert_allowed(&r, APP, "listed create");
        keys.push(r.key());
    }
    for key in &keys {
        let path = format!("/api/v1/urls/{key}");
        let r = c.send("GET", &path, true, &[("Origin", APP)], b"").unwrap();
        assert_allowed(&r, APP, "listed read");
        let r = c
            .send(
                "GET",
                &path,
                true,
                &[("Origin", "https://evil.example")],
                b"",
            )
            .unwrap();
        assert_eq!(
            r.status, 200,
            "the request is served; only the browser keeps it"
        );
        assert_no_cors(&r, "unlisted read");
        let r = c.send("GET", &path, true, &[], b"").unwrap();
        assert_no_cors(&r, "read without Origin");
    }

    // `none`: no origin.
    drop(c);
    drop(s);
    let s = server(&dir, &["--cors-origins", "none"]);
    let mut c = Client::new(&s);
    let r = preflight(&mut c, "/rest/v3/short-urls", APP);
    assert_no_cors(&r, "none");
}

#[test]
fn a_bad_origin_list_is_refused_naming_the_flag() {
    let (_tmp, dir) = data_dir();
    for bad in [
        "ftp://files.example",
        "https://app.example/path",
        "not an origin",
    ] {
        let err = match try_start(&dir, &["--cors-origins", bad]) {
            Ok(_) => panic!("{bad} accepted"),
            Err(e) => e,
        };
        assert!(err.contains("--cors-origins"), "{bad}: {err}");
    }
}
