//! How a visit shapes its redirect (issue 27, server-wide settings): `--extra-path`
//! (`not-found`, the default, `append`, `ignore`), `--forward-query` and `--trailing-slash`,
//! on 3 cores (more than this machine's CPUs), so links are answered by their owner, by
//! forwards (their reshaping kept in the batch until the owner answers) and from the LRU, one
//! request at a time and pipelined 40 to a write, read with httparse's strict parser. The
//! blocklist judges where the visitor is really sent: an appended path that reaches a listed
//! prefix is 451.

mod common;

use common::api::{data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::json;

/// Targets of every shape the reshaping must respect: a query, a fragment, a trailing `/`,
/// no path, non-ASCII.
const TARGETS: &[&str] = &[
    "https://dest.example/p/?a=1&b=2#top",
    "https://dest.example/plain",
    "https://dest.example",
    "https://dest.example/dir/",
    "https://bücher.example/straße?q=ü",
    "https://phish.example/",
];

fn server(flags: &[&str], list: Option<&std::path::Path>) -> (tempfile::TempDir, common::Server) {
    let (t, dir) = data_dir();
    let mut all = vec!["--cores", "3", "--test-oversubscribe"];
    all.extend_from_slice(flags);
    if let Some(l) = list {
        all.extend(["--blocklist", l.to_str().unwrap()]);
    }
    all.extend(NO_RATE_LIMIT);
    (t, start(&dir, &all))
}

/// Creates `TARGETS` four times over (keys spread over the 3 owners); (key, target).
fn links(s: &common::Server) -> Vec<(String, String)> {
    let mut c = Client::new(s);
    let mut out = Vec::new();
    for round in 0..4 {
        for t in TARGETS {
            let r = c.create(
                &json!({ "long_url": t, "custom_alias": format!("v{round}{}", out.len()) }),
            );
            assert_eq!(r.status, 201, "{}", r.text());
            out.push((
                r.json()["key"].as_str().unwrap().to_owned(),
                (*t).to_owned(),
            ));
        }
    }
    out
}

/// `GET` (or `HEAD`) of `path` one at a time: (status, Location).
fn visit(s: &common::Server, method: &str, path: &str) -> (u16, Option<String>) {
    let mut c = Client::new(s);
    let r = c.send(method, path, false, &[], b"").unwrap();
    if method == "HEAD" {
        assert!(r.body.is_empty());
    }
    (r.status, r.location().map(str::to_owned))
}

/// The Location for `target` sent to `/{key}/x/y?b=9&c=3` with append and forward.
fn appended_and_forwarded(target: &str) -> String {
    match target {
        "https://dest.example/p/?a=1&b=2#top" => "https://dest.example/p/x/y?a=1&b=9&c=3#top",
        "https://dest.example/plain" => "https://dest.example/plain/x/y?b=9&c=3",
        "https://dest.example" => "https://dest.example/x/y?b=9&c=3",
        "https://dest.example/dir/" => "https://dest.example/dir/x/y?b=9&c=3",
        "https://bücher.example/straße?q=ü" => {
            "https://b%C3%BCcher.example/stra%C3%9Fe/x/y?q=%C3%BC&b=9&c=3"
        }
        "https://phish.example/" => "https://phish.example/x/y?b=9&c=3",
        other => panic!("{other}"),
    }
    .to_owned()
}

/// The target as a `Location` (non-ASCII bytes percent-encoded).
fn as_sent(target: &str) -> String {
    target
        .bytes()
        .map(|b| match b.is_ascii() {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` with `Host: host`: (status, Location).
fn visit_on(s: &common::Server, host: &str, path: &str) -> (u16, Option<String>) {
    let mut c = Client::new(s);
    c.host = host.to_owned();
    let r = c.send("GET", path, false, &[], b"").unwrap();
    (r.status, r.location().map(str::to_owned))
}

/// A domain's own `--extra-path` and `--forward-query` (`ricochet domains add|set`) decide
/// for its links where it has them, the server's flags elsewhere, a link's own
/// `forward_query` over both; a change is in force within about a second (live reload).
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against a real process, read top to bottom"
)]
fn a_domain_overrides_the_servers_extra_path_and_forwarding() {
    let (_t, dir) = data_dir();
    let cli = |args: &[&str]| {
        let (ok, text) = common::api::cli(&dir, "domains", args);
        assert!(ok, "{args:?}: {text}");
    };
    cli(&["add", "sho.rt", "--default"]);
    cli(&[
        "add",
        "go.brand.com",
        "--extra-path",
        "append",
        "--forward-query",
        "true",
    ]);
    let (ok, text) = common::api::cli(&dir, "domains", &["add", "x.example", "--extra-path", "up"]);
    assert!(
        !ok && text.contains("not-found, append, ignore, server"),
        "{text}"
    );
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let mut keys = Vec::new();
    for i in 0..12 {
        let key = format!("d{i}");
        for domain in ["sho.rt", "go.brand.com"] {
            let r = c.create(&json!({"long_url": "https://dest.example/plain",
                                     "custom_alias": key, "domain": domain}));
            assert_eq!(r.status, 201, "{}", r.text());
        }
        keys.push(key);
    }
    // A link's own forward_query wins over its domain's.
    let r = c.create(
        &json!({"long_url": "https://dest.example/own", "custom_alias": "own",
                             "domain": "go.brand.com", "forward_query": false}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let check = |brand_extra: bool, brand_fwd: bool| {
        for k in &keys {
            // The default domain follows the server: 404 for a path, no query.
            assert_eq!(visit_on(&s, "sho.rt", &format!("/{k}/x")).0, 404);
            assert_eq!(
                visit_on(&s, "sho.rt", &format!("/{k}?b=9")),
                (302, Some("https://dest.example/plain".into()))
            );
            let (status, loc) = visit_on(&s, "go.brand.com", &format!("/{k}/x/y?b=9"));
            match brand_extra {
                true => {
                    let want = match brand_fwd {
                        true => "https://dest.example/plain/x/y?b=9",
                        false => "https://dest.example/plain/x/y",
                    };
                    assert_eq!((status, loc.as_deref()), (302, Some(want)), "/{k}/x/y");
                }
                false => assert_eq!(status, 404, "/{k}/x/y"),
            }
            let want = match brand_fwd {
                true => "https://dest.example/plain?b=9",
                false => "https://dest.example/plain",
            };
            assert_eq!(
                visit_on(&s, "go.brand.com", &format!("/{k}?b=9")),
                (302, Some(want.into()))
            );
        }
        assert_eq!(
            visit_on(&s, "go.brand.com", "/own?b=9"),
            (302, Some("https://dest.example/own".into()))
        );
    };
    check(true, true);
    // Shlink's short URL object shows the effective forwardQuery: the domain's.
    let r = c
        .send(
            "GET",
            "/rest/v3/short-urls/d0?domain=go.brand.com",
            false,
            &[("X-Api-Key", common::api::API_KEY)],
            b"",
        )
        .unwrap();
    assert_eq!(r.json()["forwardQuery"], true, "{}", r.text());

    // Changed live: the domain follows the server again for paths, and stops forwarding.
    cli(&[
        "set",
        "go.brand.com",
        "--extra-path",
        "server",
        "--forward-query",
        "false",
    ]);
    // Each core takes the change at its own sweep: wait until 30 fresh connections in a
    // row (spread over the 3 cores) see it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut in_a_row = 0;
    while in_a_row < 30 {
        match visit_on(&s, "go.brand.com", "/d0/x").0 {
            404 => in_a_row += 1,
            _ => in_a_row = 0,
        }
        assert!(std::time::Instant::now() < deadline, "not reloaded in 5 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    check(false, false);
}

#[test]
fn by_default_a_path_after_the_key_is_404_and_the_query_stays_behind() {
    let (_t, s) = server(&[], None);
    let links = links(&s);
    for (k, t) in &links {
        assert_eq!(visit(&s, "GET", &format!("/{k}/x")).0, 404, "/{k}/x");
        assert_eq!(visit(&s, "GET", &format!("/{k}/")).0, 404, "/{k}/");
        let (status, loc) = visit(&s, "GET", &format!("/{k}?utm=1"));
        assert_eq!((status, loc), (302, Some(as_sent(t))), "/{k}?utm=1");
    }
}

#[test]
fn appended_paths_and_forwarded_queries_reach_every_core_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "phish.example/x/y\n").unwrap();
    let (_t, s) = server(
        &[
            "--extra-path",
            "append",
            "--forward-query",
            "--trailing-slash",
        ],
        Some(&list),
    );
    let links = links(&s);
    // One at a time, twice (the second time foreign keys come from the LRU), GET and HEAD.
    for _ in 0..2 {
        for (k, t) in &links {
            let want = appended_and_forwarded(t);
            assert_eq!(
                want,
                model(&as_sent(t), "/x/y", "b=9&c=3"),
                "the model agrees"
            );
            let status = if t.contains("phish") { 451 } else { 302 };
            for method in ["GET", "HEAD"] {
                let (got, loc) = visit(&s, method, &format!("/{k}/x/y?b=9&c=3"));
                assert_eq!(got, status, "{method} /{k}/x/y -> {t}");
                if status == 302 {
                    assert_eq!(loc.as_deref(), Some(want.as_str()), "{method} /{k}/x/y");
                }
            }
            // A trailing slash is the link itself; its query still forwarded.
            let (got, loc) = visit(&s, "GET", &format!("/{k}/?z=1"));
            assert_eq!(got, 302, "/{k}/");
            assert_eq!(loc, Some(model(&as_sent(t), "", "z=1")), "/{k}/?z=1");
        }
    }
    // Pipelined: 40 requests in one write, each answered in order with its own reshaping,
    // on a fresh connection (nothing cached for the batch's forwards on its first pass).
    let addr = s.addr;
    for pass in 0..3 {
        let mut r = common::Reader::connect(addr);
        let mut wire = String::new();
        let mut want = Vec::new();
        for i in 0..40 {
            let (k, t) = &links[(i * 7 + pass) % links.len()];
            let extra = format!("/e{i}");
            wire.push_str(&format!(
                "GET /{k}{extra}?n={i} HTTP/1.1\r\nHost: t\r\n\r\n"
            ));
            want.push((t.clone(), extra, i));
        }
        r.send(wire.as_bytes());
        for (t, extra, i) in want {
            let resp = r.read_response(false);
            // `phish.example/e{i}` is not the listed `phish.example/x/y`.
            assert_eq!(resp.status, 302, "request {i}");
            let loc = model(&as_sent(&t), &extra, &format!("n={i}"));
            assert_eq!(resp.header("location"), Some(loc.as_str()), "request {i}");
        }
    }
}

/// The rules of `http::location` written plainly: the extra path at the end of the path (one
/// trailing `/` dropped unless the target has no path), the visitor's parameters replacing the
/// target's of their names and following the others, the fragment last.
fn model(sent: &str, extra: &str, visitor: &str) -> String {
    let (rest, frag) = match sent.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (sent, None),
    };
    let (base, target_query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = base.to_owned();
    if !extra.is_empty() {
        if base.matches('/').count() > 2 {
            out = base.strip_suffix('/').unwrap_or(base).to_owned();
        }
        out.push_str(extra);
    }
    let name = |p: &str| p.split('=').next().unwrap_or("").to_owned();
    if visitor.is_empty() {
        if let Some(q) = target_query {
            out.push('?');
            out.push_str(q);
        }
    } else {
        let names: Vec<String> = visitor.split('&').map(name).collect();
        let params: Vec<&str> = target_query
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && !names.contains(&name(p)))
            .chain(visitor.split('&').filter(|p| !p.is_empty()))
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    if let Some(f) = frag {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[test]
fn an_ignored_extra_path_goes_where_the_key_does() {
    let (_t, s) = server(&["--extra-path", "ignore"], None);
    let links = links(&s);
    for (k, t) in &links {
        assert_eq!(
            visit(&s, "GET", &format!("/{k}/any/thing?q=1")),
            (302, Some(as_sent(t))),
            "/{k}/any/thing"
        );
    }
    // A key that is no link is still 404, and a path that is no key too.
    assert_eq!(visit(&s, "GET", "/nosuchkey/x").0, 404);
    assert_eq!(visit(&s, "GET", "/no.key/x").0, 404);
}
