//! API key roles (issue 26): every role and the combinations the issue names, against every
//! endpoint of the native and the Shlink API, on 2 cores and on 3 (more cores than this
//! machine has CPUs, so links and list pages land on every owner), asserting the exact status
//! and that no answer shows a link outside the key's reach. Then the authors survive
//! compaction and `kill -9`, and idempotency keys stay scoped to the API key.
//!
//! Fleet mode: `tests/fleet_roles.rs`.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{cli, data_dir, make_key, start, Client, Resp, API_KEY, NO_RATE_LIMIT};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;

const BRAND: &str = "go.brand.com";
const OTHER: &str = "other.example";

/// One key of the matrix: its token and which of the links it reaches.
struct Who {
    name: &'static str,
    token: String,
    read_only: bool,
    /// (domain, key) of every link it reaches; `""` is the default domain.
    sees: BTreeSet<(String, String)>,
}

fn link(domain: &str, key: &str) -> (String, String) {
    (domain.to_owned(), key.to_owned())
}

/// `?domain=` for a link's domain (none for the default one).
fn q(domain: &str) -> String {
    if domain.is_empty() {
        String::new()
    } else {
        format!("?domain={domain}")
    }
}

fn as_key(c: &mut Client, token: &str) {
    c.token = token.to_owned();
}

fn shlink(c: &mut Client, token: &str, method: &str, path: &str, body: &[u8]) -> Resp {
    let headers = [("X-Api-Key", token)];
    c.send(method, path, false, &headers, body).expect("shlink")
}

/// The (domain, key) of every link in a native list answer (one page: the test has few).
fn native_list(c: &mut Client) -> BTreeSet<(String, String)> {
    let r = c
        .send("GET", "/api/v1/urls?limit=500", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["next_cursor"].is_null());
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let d = l["domain"].as_str().unwrap_or("").to_owned();
            (d, l["key"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn shlink_list(c: &mut Client, token: &str) -> BTreeSet<(String, String)> {
    let r = shlink(c, token, "GET", "/rest/v3/short-urls?itemsPerPage=100", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["shortUrls"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let d = l["domain"].as_str().unwrap_or("").to_owned();
            (d, l["shortCode"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The problem type's last segment of an answer with `status`.
fn problem(r: &Resp, status: u16) -> String {
    let v = r.assert_problem(status);
    v["type"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

fn create(c: &mut Client, token: &str, domain: &str, key: &str) -> Resp {
    as_key(c, token);
    let mut body =
        json!({"long_url": format!("https://example.com/{domain}/{key}"), "custom_alias": key});
    if !domain.is_empty() {
        body["domain"] = json!(domain);
    }
    c.create(&body)
}

/// The whole matrix against a running server whose data dir holds the keys in `who` and no
/// links yet.
fn matrix(c: &mut Client, who: &[Who]) {
    let by = |name: &str| who.iter().find(|w| w.name == name).unwrap();
    // Links, each made by the key named.
    let made = [
        ("admin", "", "adm"),
        ("admin", BRAND, "adm"),
        ("admin", OTHER, "oth"),
        ("alice", "", "ali"),
        ("bob", "", "bob"),
        ("brand", BRAND, "brd"),
        ("alice_brand", BRAND, "alb"),
    ];
    for (name, domain, key) in made {
        let r = create(c, &by(name).token, domain, key);
        assert_eq!(r.status, 201, "{name} creates {domain}/{key}: {}", r.text());
    }
    // Creates a role forbids.
    let refused = [
        ("reader", "", 403, "read-only-key"),
        ("brand_reader", BRAND, 403, "read-only-key"),
        ("brand", "", 403, "domain-not-allowed"),
        ("brand", OTHER, 403, "domain-not-allowed"),
        ("alice_brand", "", 403, "domain-not-allowed"),
    ];
    for (name, domain, status, type_) in refused {
        let r = create(c, &by(name).token, domain, "nope");
        assert_eq!(problem(&r, status), type_, "{name} creates on {domain:?}");
    }
    // An unknown domain is 422 naming it, whatever the role.
    let r = create(c, &by("brand").token, "nowhere.example", "nope");
    assert!(problem(&r, 422) == "invalid-field" && r.text().contains("nowhere.example"));

    let all: Vec<(String, String)> = made.iter().map(|(_, d, k)| link(d, k)).collect();
    for w in who {
        // Lists, native and Shlink: exactly the links within reach.
        as_key(c, &w.token);
        assert_eq!(native_list(c), w.sees, "{}'s native list", w.name);
        assert_eq!(shlink_list(c, &w.token), w.sees, "{}'s Shlink list", w.name);
        // The server-wide stats: every link for admin keys; for the others the links they
        // reach (none clicked here), counted, and no 404s.
        let r = c.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
        assert_eq!(r.status, 200, "{}: {}", w.name, r.text());
        let v = r.json();
        assert_eq!(v["summary"]["clicks"], 0, "{}: {v}", w.name);
        if w.name != "admin" {
            assert_eq!(v["links"], w.sees.len(), "{}: {v}", w.name);
            assert_eq!(v["summary"]["not_found"], 0, "{}: {v}", w.name);
        }
        // Shlink's visits overview: server-wide for admin keys; for the others the visits of
        // the links they reach (none clicked here) and no orphan visits.
        let r = shlink(c, &w.token, "GET", "/rest/v3/visits", b"");
        assert_eq!(r.status, 200, "{}: {}", w.name, r.text());
        if w.name != "admin" {
            assert_eq!(r.json()["visits"]["orphanVisits"]["total"], 0, "{}", w.name);
        }
        // Shlink's domains: those the key reaches.
        let r = shlink(c, &w.token, "GET", "/rest/v3/domains", b"");
        assert_eq!(r.status, 200);
        let listed: Vec<String> = r.json()["domains"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["domain"].as_str().unwrap().to_owned())
            .collect();
        let brand_only = matches!(w.name, "brand" | "alice_brand" | "brand_reader");
        assert_eq!(
            listed.contains(&OTHER.to_owned()),
            !brand_only,
            "{}: {listed:?}",
            w.name
        );
        assert!(listed.contains(&BRAND.to_owned()), "{}: {listed:?}", w.name);

        for (domain, key) in &all {
            let visible = w.sees.contains(&link(domain, key));
            let path = format!("/api/v1/urls/{key}{}", q(domain));
            let what = format!("{} on {domain}/{key}", w.name);
            let r = c.send("GET", &path, true, &[], b"").unwrap();
            assert_eq!(r.status, if visible { 200 } else { 404 }, "GET {what}");
            if !visible {
                // Not found, exactly as a key that never existed.
                assert_eq!(problem(&r, 404), "not-found", "{what}");
            }
            let stats = format!("/api/v1/urls/{key}/stats{}", q(domain));
            let r = c.send("GET", &stats, true, &[], b"").unwrap();
            assert_eq!(
                r.status,
                if visible { 200 } else { 404 },
                "GET stats {what}"
            );
            let sh = format!("/rest/v3/short-urls/{key}{}", q(domain));
            let r = shlink(c, &w.token, "GET", &sh, b"");
            assert_eq!(
                r.status,
                if visible { 200 } else { 404 },
                "Shlink GET {what}"
            );
            if visible {
                // With its visit totals from the aggregator (no clicks here: zeros).
                let summary = &r.json()["visitsSummary"];
                assert_eq!(summary["total"], 0, "{what}: {}", r.text());
            }

            // Writes: 403 for a read-only key, else 404 out of reach. Within reach they are
            // made below, once every key has looked.
            let writes: [(&str, String, &[u8]); 3] = [
                ("PATCH", path.clone(), br#"{"redirect_status": 301}"#),
                ("DELETE", stats.clone(), b""),
                ("DELETE", path.clone(), b""),
            ];
            for (method, p, body) in writes {
                if visible && !w.read_only {
                    continue;
                }
                let r = c.send(method, &p, true, &[], body).unwrap();
                match w.read_only {
                    true => assert_eq!(problem(&r, 403), "read-only-key", "{method} {p} {what}"),
                    false => assert_eq!(problem(&r, 404), "not-found", "{method} {p} {what}"),
                }
            }
            for (method, body) in [("PATCH", &br#"{"validUntil": null}"#[..]), ("DELETE", b"")] {
                if visible && !w.read_only {
                    continue;
                }
                let r = shlink(c, &w.token, method, &sh, body);
                assert_eq!(
                    r.status,
                    if w.read_only { 403 } else { 404 },
                    "Shlink {method} {what}: {}",
                    r.text()
                );
            }
        }
    }
    // Nothing was changed by a refused write: the admin still sees every link as made.
    as_key(c, API_KEY);
    let every: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(native_list(c), every);
    for (domain, key) in &all {
        let r = c.get_link(&format!("{key}{}", q(domain)));
        assert_eq!(r.json()["redirect_status"], 302, "{domain}/{key}");
    }
    // Within reach, writes work: alice edits and resets the stats of her link; the domain's
    // key edits the admin's link there; bob deletes his own.
    as_key(c, &by("alice").token);
    let r = c.patch("ali", &json!({"redirect_status": 301}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = c
        .send("DELETE", "/api/v1/urls/ali/stats", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    as_key(c, &by("brand").token);
    let r = c.patch(
        &format!("adm?domain={BRAND}"),
        &json!({"redirect_status": 308}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = shlink(
        c,
        &by("alice_brand").token,
        "PATCH",
        &format!("/rest/v3/short-urls/alb?domain={BRAND}"),
        br#"{"longUrl": "https://example.com/alb2"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    as_key(c, &by("bob").token);
    assert_eq!(c.delete("bob").status, 204);
    as_key(c, API_KEY);
    assert_eq!(c.get_link("ali").json()["redirect_status"], 301);
    assert_eq!(
        c.get_link(&format!("adm?domain={BRAND}")).json()["redirect_status"],
        308
    );
    assert_eq!(
        c.get_link(&format!("alb?domain={BRAND}")).json()["long_url"],
        "https://example.com/alb2"
    );
    assert_eq!(c.get_link("bob").status, 404);
}

/// The keys of the matrix, made in `dir` (the admin is the test's env key).
fn keys(dir: &Path) -> Vec<Who> {
    let set = |links: &[(&str, &str)]| links.iter().map(|(d, k)| link(d, k)).collect();
    let every = set(&[
        ("", "adm"),
        (BRAND, "adm"),
        (OTHER, "oth"),
        ("", "ali"),
        ("", "bob"),
        (BRAND, "brd"),
        (BRAND, "alb"),
    ]);
    let brand = set(&[(BRAND, "adm"), (BRAND, "brd"), (BRAND, "alb")]);
    let mut who = vec![Who {
        name: "admin",
        token: API_KEY.to_owned(),
        read_only: false,
        sees: every,
    }];
    let specs: [(&'static str, &[&str], bool, BTreeSet<_>); 6] = [
        ("alice", &["--author-only"], false, set(&[("", "ali")])),
        ("bob", &["--author-only"], false, set(&[("", "bob")])),
        ("brand", &["--domain", BRAND], false, brand.clone()),
        (
            "alice_brand",
            &["--author-only", "--domain", BRAND],
            false,
            set(&[(BRAND, "alb")]),
        ),
        ("reader", &["--read-only"], true, who[0].sees.clone()),
        (
            "brand_reader",
            &["--read-only", "--domain", BRAND],
            true,
            brand,
        ),
    ];
    for (name, flags, read_only, sees) in specs {
        who.push(Who {
            name,
            token: make_key(dir, name, flags),
            read_only,
            sees,
        });
    }
    who
}

fn run_matrix(cores: &str) {
    let (_t, dir) = data_dir();
    for d in [BRAND, OTHER] {
        let (ok, text) = cli(&dir, "domains", &["add", d]);
        assert!(ok, "{text}");
    }
    let who = keys(&dir);
    let mut flags = vec![
        "--cores",
        cores,
        "--test-oversubscribe",
        "--compact-entries",
        "3",
    ];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    matrix(&mut c, &who);

    // The authors are kept through compaction (every 3 entries) and `kill -9`.
    s.kill9();
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let alice = who.iter().find(|w| w.name == "alice").unwrap();
    as_key(&mut c, &alice.token);
    assert_eq!(native_list(&mut c), [link("", "ali")].into_iter().collect());
    let brand = who.iter().find(|w| w.name == "alice_brand").unwrap();
    as_key(&mut c, &brand.token);
    assert_eq!(
        native_list(&mut c),
        [link(BRAND, "alb")].into_iter().collect()
    );
    as_key(&mut c, &who.iter().find(|w| w.name == "bob").unwrap().token);
    assert_eq!(c.get_link("ali").status, 404);
}

#[test]
fn every_role_against_every_endpoint_on_2_cores() {
    run_matrix("2");
}

#[test]
fn every_role_against_every_endpoint_on_3_cores() {
    run_matrix("3");
}

/// Idempotency keys stay scoped to the API key that sent them, with roles: two author-only
/// keys sending the same Idempotency-Key and body make two links, each its author's, and each
/// key's retry gets its own link back.
#[test]
fn idempotency_keys_stay_scoped_to_the_api_key() {
    let (_t, dir) = data_dir();
    let (ok, text) = cli(&dir, "domains", &["add", BRAND]);
    assert!(ok, "{text}");
    let a = make_key(&dir, "a", &["--author-only", "--domain", BRAND]);
    let b = make_key(&dir, "b", &["--author-only", "--domain", BRAND]);
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let body = json!({"long_url": "https://example.com/same", "domain": BRAND});
    let mut made = Vec::new();
    for token in [&a, &b, &a, &b] {
        as_key(&mut c, token);
        let r = c.try_create_idem(&body, "same-idem-key").unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        made.push(r.json()["key"].as_str().unwrap().to_owned());
    }
    assert_ne!(made[0], made[1], "two keys, two links");
    assert_eq!(
        (&made[0], &made[1]),
        (&made[2], &made[3]),
        "each retry, its own link"
    );
    for (token, mine, theirs) in [(&a, &made[0], &made[1]), (&b, &made[1], &made[0])] {
        as_key(&mut c, token);
        let ask = |c: &mut Client, k: &str| c.get_link(&format!("{k}?domain={BRAND}")).status;
        assert_eq!(ask(&mut c, mine), 200);
        assert_eq!(ask(&mut c, theirs), 404);
    }
}

/// The create limit is one budget per API key for the whole node (issue 26), whichever core
/// a connection lands on: one connection gets the whole burst (not a core's share), and many
/// connections spread over 3 cores get no more than it together. A key's own limits, set at
/// its creation, replace the server's.
#[test]
fn per_key_create_limits_are_one_budget_for_the_whole_node() {
    let (_t, dir) = data_dir();
    let own = make_key(&dir, "own", &["--create-rate", "1", "--create-burst", "6"]);
    let flags = [
        "--cores",
        "3",
        "--test-oversubscribe",
        "--create-rate",
        "1",
        "--create-burst",
        "9",
    ];
    let s = start(&dir, &flags);
    let started = std::time::Instant::now();
    let made = |c: &mut Client, token: &str, n: usize| -> usize {
        as_key(c, token);
        (0..n)
            .filter(|i| {
                let body = json!({"long_url": format!("https://example.com/rl/{i}")});
                let r = c.create(&body);
                assert!(matches!(r.status, 201 | 429), "{}", r.text());
                r.status == 201
            })
            .count()
    };
    // One connection: the whole burst of each key.
    let mut one = Client::new(&s);
    let admin_one = made(&mut one, API_KEY, 30);
    let own_one = made(&mut one, &own, 30);
    // Twelve more connections (spread over the cores by the kernel): the budget is spent.
    let mut many: Vec<Client> = (0..12).map(|_| Client::new(&s)).collect();
    let admin_many: usize = many.iter_mut().map(|c| made(c, API_KEY, 3)).sum();
    let own_many: usize = many.iter_mut().map(|c| made(c, &own, 3)).sum();
    // What refilled meanwhile (1 a second each) is all that may pass beyond the bursts.
    let refill = started.elapsed().as_secs() as usize + 1;
    assert!(
        (9..=9 + refill).contains(&admin_one),
        "admin on one connection: {admin_one}"
    );
    assert!(
        (6..=6 + refill).contains(&own_one),
        "own on one connection: {own_one}"
    );
    assert!(
        admin_one + admin_many <= 9 + refill,
        "admin in all: {admin_one} + {admin_many}, refill {refill}"
    );
    assert!(
        own_one + own_many <= 6 + refill,
        "own in all: {own_one} + {own_many}, refill {refill}"
    );
}

/// Shlink's `/visits` for a key with a role sums its links' visits one by one: past
/// `MAX_OVERVIEW_LINKS` links it is refused, never a partial sum; admin keys get the
/// server-wide figures whatever the count.
#[test]
fn a_roles_server_wide_figures_are_refused_past_their_bound() {
    let (_t, dir) = common::api::data_dir();
    let n = ricochet::api_front::shlink::MAX_OVERVIEW_LINKS as usize + 1;
    let tsv = dir.with_extension("tsv");
    let lines: String = (0..n)
        .map(|i| format!("many-{i}\thttps://example.com/{i}\n"))
        .collect();
    std::fs::write(&tsv, lines).unwrap();
    let (ok, text) = common::api::cli(&dir, "import", &[tsv.to_str().unwrap()]);
    assert!(ok, "{text}");
    let reader = common::api::make_key(&dir, "reader", &["--read-only"]);
    let s = common::api::start(&dir, &["--cores", "3", "--test-oversubscribe"]);
    let mut c = Client::new(&s);
    let r = shlink(&mut c, &reader, "GET", "/rest/v3/visits", b"");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(
        r.text().contains("too-many-links") && r.text().contains("5000"),
        "{}",
        r.text()
    );
    let r = shlink(&mut c, common::api::API_KEY, "GET", "/rest/v3/visits", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    // The native server-wide stats likewise.
    c.token = reader;
    let r = c.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
    assert_eq!(problem(&r, 422), "too-many-links", "{}", r.text());
    assert!(r.text().contains("5000"), "{}", r.text());
    c.token = API_KEY.to_owned();
    let r = c.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}
