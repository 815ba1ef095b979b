//! Pipelined answers leave in request order on 2, 3 and 4 cores, whatever order the owners
//! answer in; requests after an unsafe one see its effect; HEAD answers never carry a body; a
//! half-closed client gets every answer; a client that sends far ahead is slowed, not reset.
//!
//! Every response is read with httparse's strict response parser and framed by its
//! `Content-Length` (bodiless for HEAD, 204 and 304), then checked against the request it must
//! belong to: a misplaced, missing or extra answer fails the check of its neighbour.
//! 3 and 4 cores run on this 2-CPU machine through the hidden `--test-oversubscribe` flag.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, API_KEY, NO_RATE_LIMIT};
use common::{dataset, import, Link, Reader, Response, Server};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::net::Shutdown;
use std::time::Duration;

fn request(method: &str, path: &str, auth: bool, body: Option<&Value>) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
    if auth {
        r.push_str(&format!("Authorization: Bearer {API_KEY}\r\n"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    if !body.is_empty() {
        r.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    r.push_str("\r\n");
    r.push_str(&body);
    r.into_bytes()
}

/// What a request must be answered with.
#[derive(Clone, Debug)]
enum Expect {
    /// A redirect to exactly this URL with this status.
    Redirect(String, u16),
    /// 404 with the plain-text body (or none, for HEAD).
    NotFound,
    /// `GET /healthz`.
    Health,
    /// An API answer with this status and, for 200/201, this link.
    Api(u16, Option<(String, String)>),
    /// 405 (bodiless for HEAD).
    MethodNotAllowed,
}

fn check(resp: &Response, head: bool, e: &Expect, what: &str) {
    let ctx = || format!("{what}: got {} {:?}", resp.status, resp.headers);
    if head {
        assert!(resp.body.is_empty(), "HEAD answer with a body: {}", ctx());
    }
    match e {
        Expect::Redirect(url, status) => {
            assert_eq!(resp.status, *status, "{}", ctx());
            assert_eq!(resp.header("location"), Some(url.as_str()), "{}", ctx());
        }
        Expect::NotFound => {
            assert_eq!(resp.status, 404, "{}", ctx());
            if !head {
                assert_eq!(resp.body, b"Not Found\n", "{}", ctx());
            }
        }
        Expect::Health => {
            assert_eq!(resp.status, 200, "{}", ctx());
            if !head {
                assert_eq!(resp.body, b"ok\n", "{}", ctx());
            }
        }
        Expect::MethodNotAllowed => assert_eq!(resp.status, 405, "{}", ctx()),
        Expect::Api(status, link) => {
            assert_eq!(resp.status, *status, "{}", ctx());
            if let Some((key, url)) = link {
                let v: Value = serde_json::from_slice(&resp.body).unwrap();
                assert_eq!(v["key"], key.as_str(), "{}", ctx());
                assert_eq!(v["long_url"], url.as_str(), "{}", ctx());
            }
        }
    }
}

/// Builds random pipelines for one connection and predicts every answer. Imported links are
/// read only; the connection's own aliases (`m<conn>x<i>`) are created, changed and deleted
/// by it alone, so the model is exact even with other connections running.
struct Model<'a> {
    links: &'a [Link],
    conn: usize,
    /// alias -> current target (None: absent).
    mine: HashMap<String, Option<String>>,
    version: u64,
}

impl Model<'_> {
    fn step(&mut self, rng: &mut impl Rng) -> (Vec<u8>, bool, Expect, String) {
        let alias = format!("m{}x{}", self.conn, rng.gen_range(0..6));
        let state = self.mine.get(&alias).cloned().flatten();
        self.version += 1;
        let new_url = format!("https://m.example/{alias}/{}", self.version);
        let pick = rng.gen_range(0..100);
        let (bytes, head, exp) = if pick < 30 {
            let l = &self.links[rng.gen_range(0..self.links.len())];
            let head = rng.gen_bool(0.2);
            let m = if head { "HEAD" } else { "GET" };
            (
                request(m, &format!("/{}", l.key), false, None),
                head,
                Expect::Redirect(l.url.clone(), l.status),
            )
        } else if pick < 40 {
            // A small hot set, so foreign keys come from the LRU too.
            let l = &self.links[rng.gen_range(0..8)];
            (
                request("GET", &format!("/{}", l.key), false, None),
                false,
                Expect::Redirect(l.url.clone(), l.status),
            )
        } else if pick < 47 {
            let head = rng.gen_bool(0.5);
            let m = if head { "HEAD" } else { "GET" };
            let k = format!("nokey{}", rng.gen_range(0..1000));
            (
                request(m, &format!("/{k}"), false, None),
                head,
                Expect::NotFound,
            )
        } else if pick < 50 {
            let head = rng.gen_bool(0.5);
            let m = if head { "HEAD" } else { "GET" };
            (request(m, "/healthz", false, None), head, Expect::Health)
        } else if pick < 52 {
            (
                request("HEAD", &format!("/api/v1/urls/{alias}"), true, None),
                true,
                Expect::MethodNotAllowed,
            )
        } else if pick < 62 {
            let exp = match &state {
                Some(u) => Expect::Redirect(u.clone(), 302),
                None => Expect::NotFound,
            };
            (
                request("GET", &format!("/{alias}"), false, None),
                false,
                exp,
            )
        } else if pick < 70 {
            let exp = match &state {
                Some(u) => Expect::Api(200, Some((alias.clone(), u.clone()))),
                None => Expect::Api(404, None),
            };
            (
                request("GET", &format!("/api/v1/urls/{alias}"), true, None),
                false,
                exp,
            )
        } else if pick < 80 {
            let body = serde_json::json!({"long_url": new_url, "custom_alias": alias});
            let exp = match &state {
                Some(_) => Expect::Api(409, None),
                None => {
                    self.mine.insert(alias.clone(), Some(new_url.clone()));
                    Expect::Api(201, Some((alias.clone(), new_url)))
                }
            };
            (
                request("POST", "/api/v1/urls", true, Some(&body)),
                false,
                exp,
            )
        } else if pick < 90 {
            let body = serde_json::json!({ "long_url": new_url });
            let exp = match &state {
                Some(_) => {
                    self.mine.insert(alias.clone(), Some(new_url.clone()));
                    Expect::Api(200, Some((alias.clone(), new_url)))
                }
                None => Expect::Api(404, None),
            };
            (
                request("PATCH", &format!("/api/v1/urls/{alias}"), true, Some(&body)),
                false,
                exp,
            )
        } else {
            let exp = match &state {
                Some(_) => {
                    self.mine.insert(alias.clone(), None);
                    Expect::Api(204, None)
                }
                None => Expect::Api(404, None),
            };
            (
                request("DELETE", &format!("/api/v1/urls/{alias}"), true, None),
                false,
                exp,
            )
        };
        let line_end = bytes.iter().position(|&b| b == b'\r').unwrap();
        let what = String::from_utf8_lossy(&bytes[..line_end]).into_owned();
        (bytes, head, exp, what)
    }
}

fn served(cores: usize) -> (tempfile::TempDir, Vec<Link>, Server) {
    let (tmp, dir) = api::data_dir();
    let links = dataset(2000, 77);
    import(&dir, &links);
    let cores_s = cores.to_string();
    let mut args = vec!["--cores", &cores_s];
    if cores > 2 {
        args.push("--test-oversubscribe"); // this machine has 2 CPUs
    }
    args.extend(NO_RATE_LIMIT);
    let server = api::start(&dir, &args);
    (tmp, links, server)
}

/// Random pipelines of every kind of request on `conns` connections at once; each pipeline
/// goes out in one write (or in random pieces) and every answer is checked in order.
fn random_mix(cores: usize) {
    let (_tmp, links, server) = served(cores);
    let seed = api::seed(&format!("random_mix_{cores}_cores"));
    let links = std::sync::Arc::new(links);
    let addr = server.addr;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let links = links.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (t as u64 * 0x9e37));
                let mut model = Model {
                    links: &links,
                    conn: t,
                    mine: HashMap::new(),
                    version: 0,
                };
                let mut c = Reader::connect(addr);
                for _round in 0..40 {
                    let n = rng.gen_range(1..=48);
                    let steps: Vec<_> = (0..n).map(|_| model.step(&mut rng)).collect();
                    let mut bytes: Vec<u8> =
                        steps.iter().flat_map(|s| s.0.iter().copied()).collect();
                    if rng.gen_bool(0.3) {
                        // In random pieces: every split point of a pipeline must work.
                        while !bytes.is_empty() {
                            let k = rng.gen_range(1..=bytes.len());
                            c.stream.write_all(&bytes[..k]).unwrap();
                            bytes.drain(..k);
                        }
                    } else {
                        c.stream.write_all(&bytes).unwrap();
                    }
                    for (i, (_, head, exp, what)) in steps.iter().enumerate() {
                        let r = c.read_response(*head);
                        check(&r, *head, exp, &format!("request {i} of {n} ({what})"));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a pipeline got a wrong answer (see above)");
    }
}

#[test]
fn random_pipelines_answer_in_order_on_2_cores() {
    random_mix(2);
}

#[test]
fn random_pipelines_answer_in_order_on_3_cores() {
    random_mix(3);
}

#[test]
fn random_pipelines_answer_in_order_on_4_cores() {
    random_mix(4);
}

/// The reported desync: a PATCH and a GET for another core's key in one write, 1,000 times.
#[test]
fn patch_then_foreign_get_never_swap() {
    let (_tmp, links, server) = served(2);
    let mut c = Reader::connect(server.addr);
    let create = serde_json::json!({"long_url": "https://orig.example/", "custom_alias": "pp1"});
    c.stream
        .write_all(&request("POST", "/api/v1/urls", true, Some(&create)))
        .unwrap();
    assert_eq!(c.read_response(false).status, 201);
    for i in 0..1000 {
        let url = format!("https://patched.example/{i}");
        let l = &links[i % links.len()];
        let mut bytes = request(
            "PATCH",
            "/api/v1/urls/pp1",
            true,
            Some(&serde_json::json!({ "long_url": url })),
        );
        bytes.extend(request("GET", &format!("/{}", l.key), false, None));
        bytes.extend(request("GET", "/pp1", false, None));
        c.stream.write_all(&bytes).unwrap();
        let what = format!("pair {i}");
        check(
            &c.read_response(false),
            false,
            &Expect::Api(200, Some(("pp1".into(), url.clone()))),
            &what,
        );
        check(
            &c.read_response(false),
            false,
            &Expect::Redirect(l.url.clone(), l.status),
            &what,
        );
        // After the PATCH on this connection, its effect is seen.
        check(
            &c.read_response(false),
            false,
            &Expect::Redirect(url, 302),
            &what,
        );
    }
}

/// A DELETE followed by reads of the same key in one write: the reads see the deletion.
#[test]
fn reads_after_delete_in_one_write_see_it() {
    let (_tmp, _links, server) = served(3);
    let mut c = Reader::connect(server.addr);
    for i in 0..60 {
        let alias = format!("del{i}");
        let create = serde_json::json!({"long_url": "https://d.example/", "custom_alias": alias});
        let mut bytes = request("POST", "/api/v1/urls", true, Some(&create));
        bytes.extend(request("GET", &format!("/{alias}"), false, None));
        bytes.extend(request(
            "DELETE",
            &format!("/api/v1/urls/{alias}"),
            true,
            None,
        ));
        bytes.extend(request("GET", &format!("/{alias}"), false, None));
        bytes.extend(request("GET", &format!("/api/v1/urls/{alias}"), true, None));
        c.stream.write_all(&bytes).unwrap();
        let what = format!("round {i}");
        assert_eq!(c.read_response(false).status, 201, "{what}");
        check(
            &c.read_response(false),
            false,
            &Expect::Redirect("https://d.example/".into(), 302),
            &what,
        );
        assert_eq!(c.read_response(false).status, 204, "{what}");
        check(&c.read_response(false), false, &Expect::NotFound, &what);
        assert_eq!(c.read_response(false).status, 404, "{what}");
    }
}

/// HEAD on every kind of path: never a body. Each HEAD is followed by a GET /healthz, whose
/// answer only parses if the HEAD answer had no body.
#[test]
fn head_never_has_a_body() {
    let (_tmp, links, server) = served(2);
    let paths = [
        format!("/{}", links[0].key),
        format!("/{}", links[1].key),
        "/no-such-key".into(),
        "/not%20a%20key".into(),
        "/healthz".into(),
        "/readyz".into(),
        "/metrics".into(),
        "/api/v1/urls".into(),
        format!("/api/v1/urls/{}", links[0].key),
        "/api/v2/nothing".into(),
    ];
    let mut c = Reader::connect(server.addr);
    for p in &paths {
        for auth in [false, true] {
            let mut bytes = request("HEAD", p, auth, None);
            bytes.extend(request("GET", "/healthz", false, None));
            c.stream.write_all(&bytes).unwrap();
            let r = c.read_response(true);
            assert!(r.status >= 200, "HEAD {p}");
            check(
                &c.read_response(false),
                false,
                &Expect::Health,
                &format!("after HEAD {p}"),
            );
        }
    }
    // An unparsable HEAD request: the error answer has no body either, then the close.
    let mut c = Reader::connect(server.addr);
    let long = format!("HEAD /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    c.stream.write_all(long.as_bytes()).unwrap();
    let r = c.read_response(true);
    assert_eq!(r.status, 414);
    c.expect_eof();
}

/// A client that sends a long pipeline (deeper than one batch, with writes in it) and then
/// shuts its sending side gets every answer, then a clean close.
#[test]
fn half_closed_client_gets_every_answer() {
    let (_tmp, links, server) = served(2);
    for round in 0..5 {
        let mut c = Reader::connect(server.addr);
        let mut bytes = Vec::new();
        let mut exp = Vec::new();
        for i in 0..150 {
            if i % 37 == 5 {
                let alias = format!("hc{round}x{i}");
                let body =
                    serde_json::json!({"long_url": "https://hc.example/", "custom_alias": alias});
                bytes.extend(request("POST", "/api/v1/urls", true, Some(&body)));
                exp.push(Expect::Api(
                    201,
                    Some((alias, "https://hc.example/".into())),
                ));
            }
            let l = &links[(i * 13 + round) % links.len()];
            bytes.extend(request("GET", &format!("/{}", l.key), false, None));
            exp.push(Expect::Redirect(l.url.clone(), l.status));
        }
        c.stream.write_all(&bytes).unwrap();
        c.stream.shutdown(Shutdown::Write).unwrap();
        for (i, e) in exp.iter().enumerate() {
            check(
                &c.read_response(false),
                false,
                e,
                &format!("round {round} request {i}"),
            );
        }
        c.expect_eof();
    }
}

/// A client that writes megabytes of pipelined requests before reading a byte: the server
/// stops reading (TCP flow control holds the client back) instead of resetting, and every
/// answer arrives in order, every acknowledged create among them.
#[test]
fn client_far_ahead_is_slowed_not_reset() {
    let (_tmp, links, server) = served(2);
    let c = Reader::connect(server.addr);
    let mut writer = c.stream.try_clone().unwrap();
    let n = 100_000;
    let mut exp = Vec::with_capacity(n);
    let mut bytes = Vec::new();
    for i in 0..n {
        if i % 12_000 == 17 {
            let alias = format!("far{i}");
            let body =
                serde_json::json!({"long_url": "https://far.example/", "custom_alias": alias});
            bytes.extend(request("POST", "/api/v1/urls", true, Some(&body)));
            exp.push(Expect::Api(
                201,
                Some((alias, "https://far.example/".into())),
            ));
        }
        let l = &links[i % links.len()];
        bytes.extend(request("GET", &format!("/{}", l.key), false, None));
        exp.push(Expect::Redirect(l.url.clone(), l.status));
    }
    let total = bytes.len();
    assert!(total > 2_000_000, "far more than the pause mark: {total}");
    let w = std::thread::spawn(move || {
        writer.write_all(&bytes).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    // Read nothing for a while: the writer fills every buffer on the way.
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = c;
    for (i, e) in exp.iter().enumerate() {
        check(&c.read_response(false), false, e, &format!("request {i}"));
    }
    c.expect_eof();
    w.join().unwrap();
    // The creates are really there.
    let mut a = api::Client::new(&server);
    assert_eq!(a.get_link("far17").status, 200);
}

/// Request forms RFC 9110/9112 asks a server to handle, each followed by a pipelined request
/// whose answer must be intact: unknown methods 501, `OPTIONS *` and `OPTIONS /{key}` 204 with
/// `Allow`, absolute-form targets served by their path; an invalid `Host` is 400 and closes.
#[test]
fn protocol_forms_are_answered_and_the_pipeline_survives() {
    let (_tmp, links, server) = served(2);
    let l = &links[3];
    let mut c = Reader::connect(server.addr);
    let cases: Vec<(String, u16, Option<&str>)> = vec![
        (
            format!("BREW /{} HTTP/1.1\r\nHost: t\r\n\r\n", l.key),
            501,
            None,
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n".into(),
            204,
            Some("GET, HEAD, POST, PATCH, DELETE, OPTIONS"),
        ),
        (
            format!("OPTIONS /{} HTTP/1.1\r\nHost: t\r\n\r\n", l.key),
            204,
            Some("GET, HEAD, OPTIONS"),
        ),
        (
            format!("GET http://sho.rt/{} HTTP/1.1\r\nHost: t\r\n\r\n", l.key),
            l.status,
            None,
        ),
    ];
    for (req, status, allow) in &cases {
        let mut bytes = req.clone().into_bytes();
        bytes.extend(request("GET", "/healthz", false, None));
        c.stream.write_all(&bytes).unwrap();
        let r = c.read_response(false);
        assert_eq!(r.status, *status, "{req:?}");
        if let Some(a) = allow {
            assert_eq!(r.header("allow"), Some(*a), "{req:?}");
        }
        if r.status == l.status {
            assert_eq!(r.header("location"), Some(l.url.as_str()), "{req:?}");
        }
        check(
            &c.read_response(false),
            false,
            &Expect::Health,
            &format!("after {req:?}"),
        );
    }
    let mut c = Reader::connect(server.addr);
    c.stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: bad host\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response(false).status, 400);
    c.expect_eof();
}

/// `Expect: 100-continue` (RFC 9110 section 10.1.1): the client hears `100 Continue` before it
/// sends the body, or the final refusal at once when the head decides it; other expectations
/// get 417.
#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let (_tmp, _links, server) = served(2);
    let body = serde_json::json!({"long_url": "https://ex.example/", "custom_alias": "expect1"})
        .to_string();
    let head = |key: &str| {
        format!(
            "POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
    };
    let mut c = Reader::connect(server.addr);
    c.stream.write_all(head(API_KEY).as_bytes()).unwrap();
    assert_eq!(
        c.read_response(false).status,
        100,
        "no 100 Continue before the body"
    );
    c.stream.write_all(body.as_bytes()).unwrap();
    let r = c.read_response(false);
    assert_eq!(r.status, 201);
    // The connection goes on as usual.
    c.stream
        .write_all(&request("GET", "/expect1", false, None))
        .unwrap();
    check(
        &c.read_response(false),
        false,
        &Expect::Redirect("https://ex.example/".into(), 302),
        "after",
    );

    // A wrong key is refused from the head, without waiting for the body.
    let mut c = Reader::connect(server.addr);
    c.stream
        .write_all(head("wrong-key-0123456789").as_bytes())
        .unwrap();
    assert_eq!(c.read_response(false).status, 401);
    c.expect_eof();

    let mut c = Reader::connect(server.addr);
    c.stream.write_all(
        b"POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
    )
    .unwrap();
    assert_eq!(c.read_response(false).status, 417);
    c.expect_eof();
}

/// Methods the server knows but allows nowhere (`TRACE`, `QUERY`) get 405 with `Allow`, on a
/// key and on the API; an unrecognized method gets 501 (RFC 9110 sections 15.5.6, 15.6.2).
#[test]
fn known_methods_get_405_unknown_get_501() {
    let (_tmp, links, server) = served(2);
    let mut c = Reader::connect(server.addr);
    for (req, status) in [
        (
            format!("TRACE /{} HTTP/1.1\r\nHost: t\r\n\r\n", links[0].key),
            405,
        ),
        (
            "QUERY /api/v1/urls HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".to_string(),
            405,
        ),
        (
            format!("BREW /{} HTTP/1.1\r\nHost: t\r\n\r\n", links[0].key),
            501,
        ),
    ] {
        c.send(req.as_bytes());
        let r = c.read_response(false);
        assert_eq!(r.status, status, "{req:?}");
        if status == 405 {
            assert!(r.header("allow").is_some(), "405 without Allow: {req:?}");
        }
        if status == 501 {
            c = Reader::connect(server.addr);
        }
    }
}
