//! End-to-end tests over raw TCP against a real `ricochet serve --cores 2`.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::*;
use std::io::Write;
use std::time::{Duration, Instant};

fn served(n: usize, seed: u64) -> (tempfile::TempDir, Vec<Link>, Server) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let links = dataset(n, seed);
    import(&dir, &links);
    let server = Server::start(&dir, &[]);
    (tmp, links, server)
}

fn check_redirect(r: &Response, l: &Link) {
    assert_eq!(r.status, l.status, "status for {}", l.key);
    assert_eq!(
        r.header("location"),
        Some(l.url.as_str()),
        "location for {}",
        l.key
    );
    assert_eq!(r.header("content-length"), Some("0"));
    let cc = r.header("cache-control").unwrap();
    if l.status == 301 || l.status == 308 {
        assert!(cc.contains("max-age="), "{cc}");
    } else {
        assert!(cc.contains("no-store"), "{cc}");
    }
}

#[test]
fn sample_of_keys_redirects_from_any_connection() {
    let (_tmp, links, server) = served(2000, 1);
    // Many connections: SO_REUSEPORT spreads them over both cores, so keys owned by either core
    // are asked on connections accepted by either core (local hits, forwards and LRU hits).
    for c in 0..24 {
        let mut r = Reader::new(server.connect());
        for l in links.iter().skip(c).step_by(37).take(40) {
            r.send(&get(&l.key));
            check_redirect(&r.read_response(false), l);
        }
        // Second round: foreign keys now come from the LRU.
        for l in links.iter().skip(c).step_by(37).take(10) {
            r.send(&get(&l.key));
            check_redirect(&r.read_response(false), l);
        }
    }
}

#[test]
fn pipelined_answers_come_back_in_order() {
    let (_tmp, links, server) = served(500, 2);
    let mut r = Reader::new(server.connect());
    for round in 0..5 {
        let mut batch = Vec::new();
        let mut expect = Vec::new();
        for (i, l) in links.iter().skip(round * 31).take(40).enumerate() {
            if i % 7 == 3 {
                batch.extend_from_slice(&get("no-such-key-xyz"));
                expect.push(None);
            }
            batch.extend_from_slice(&get(&l.key));
            expect.push(Some(l.clone()));
        }
        r.send(&batch);
        for e in &expect {
            let resp = r.read_response(false);
            match e {
                Some(l) => check_redirect(&resp, l),
                None => assert_eq!(resp.status, 404),
            }
        }
    }
}

#[test]
fn errors_and_methods() {
    let (_tmp, links, server) = served(50, 3);
    let l = &links[0];

    let mut r = Reader::new(server.connect());
    r.send(b"GET /definitely-not-a-key HTTP/1.1\r\nHost: t\r\n\r\n");
    let resp = r.read_response(false);
    assert_eq!(resp.status, 404);
    assert!(!resp.body.is_empty() && resp.body.len() < 64);

    r.send(
        format!(
            "POST /{} HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
            l.key
        )
        .as_bytes(),
    );
    let resp = r.read_response(false);
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("GET, HEAD"));
    // The connection survives a 405 and the body was skipped.
    r.send(&get(&l.key));
    check_redirect(&r.read_response(false), l);

    // HEAD: same head, no body.
    r.send(format!("HEAD /{} HTTP/1.1\r\nHost: t\r\n\r\n", l.key).as_bytes());
    check_redirect(&r.read_response(true), l);

    // Query strings don't prevent the match; keys are case-sensitive.
    r.send(format!("GET /{}?utm_source=x HTTP/1.1\r\nHost: t\r\n\r\n", l.key).as_bytes());
    check_redirect(&r.read_response(false), l);
    let flipped: String = l
        .key
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    if flipped != l.key {
        r.send(&get(&flipped));
        assert_eq!(r.read_response(false).status, 404);
    }

    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(20_000)).into_bytes(), 414),
        (
            format!("GET /x HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(40_000)).into_bytes(),
            431,
        ),
        (
            {
                let mut s = String::from("GET /x HTTP/1.1\r\nHost: t\r\n");
                for i in 0..200 {
                    s.push_str(&format!("X-H{i}: v\r\n"));
                }
                s.push_str("\r\n");
                s.into_bytes()
            },
            431,
        ),
        (
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc".to_vec(),
            400,
        ),
        (
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            400,
        ),
        (b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n".to_vec(), 400),
        (b"GET /x HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n  folded\r\n\r\n".to_vec(), 400),
        (b"GET /x HTTP/1.1\r\nHost: t\r\nX-A : 1\r\n\r\n".to_vec(), 400),
    ];
    for (req, status) in cases {
        let mut r = Reader::new(server.connect());
        r.send(&req);
        let resp = r.read_response(false);
        assert_eq!(
            resp.status,
            status,
            "for {:?}",
            String::from_utf8_lossy(&req[..req.len().min(60)])
        );
        if status == 400 {
            assert!(r.closed(), "400 closes the connection");
        }
    }
}

#[test]
fn http10_closes_unless_keep_alive() {
    let (_tmp, links, server) = served(20, 4);
    let l = &links[1];
    let mut r = Reader::new(server.connect());
    r.send(format!("GET /{} HTTP/1.0\r\n\r\n", l.key).as_bytes());
    check_redirect(&r.read_response(false), l);
    assert!(r.closed());

    let mut r = Reader::new(server.connect());
    r.send(format!("GET /{} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", l.key).as_bytes());
    check_redirect(&r.read_response(false), l);
    r.send(format!("GET /{} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", l.key).as_bytes());
    check_redirect(&r.read_response(false), l);

    let mut r = Reader::new(server.connect());
    r.send(
        format!(
            "GET /{} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            l.key
        )
        .as_bytes(),
    );
    check_redirect(&r.read_response(false), l);
    assert!(r.closed());
}

#[test]
fn half_open_connections_do_not_block_others_and_time_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let links = dataset(100, 5);
    import(&dir, &links);
    let server = Server::start(&dir, &["--header-timeout-ms", "500"]);
    let mut idle = Vec::new();
    for i in 0..200 {
        let mut s = server.connect();
        if i % 2 == 0 {
            s.write_all(b"GET /abc HTTP/1.1\r\nHost: ").unwrap(); // never finished
        }
        idle.push(s);
    }
    let t = Instant::now();
    let mut r = Reader::new(server.connect());
    for l in links.iter().take(20) {
        r.send(&get(&l.key));
        check_redirect(&r.read_response(false), l);
    }
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "answers must not wait for half-open peers"
    );
    // All the half-open ones are closed at the header timeout.
    std::thread::sleep(Duration::from_millis(900));
    for s in idle {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut rd = Reader::new(s);
        assert!(
            rd.closed(),
            "half-open connection still open after the header timeout"
        );
    }
}

#[test]
fn health_and_graceful_shutdown() {
    let (_tmp, links, server) = served(10, 6);
    let mut r = Reader::new(server.connect());
    r.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.read_response(false).status, 200);
    r.send(b"GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.read_response(false).status, 200);
    r.send(&get(&links[0].key));
    check_redirect(&r.read_response(false), &links[0]);
    drop(r);
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
}

#[test]
fn corrupt_table_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    import(&dir, &dataset(300, 7));
    let tables: Vec<_> = std::fs::read_dir(dir.join("tables"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tbl"))
        .collect();
    let victim = &tables[tables.len() / 2];
    let mut bytes = std::fs::read(victim).unwrap();
    let mid = bytes.len() - 5;
    bytes[mid] ^= 0xff;
    std::fs::write(victim, &bytes).unwrap();
    let err = Server::try_start(&dir, &[])
        .err()
        .expect("a corrupt table must refuse to start");
    let name = victim.file_name().unwrap().to_string_lossy();
    assert!(err.contains(&*name), "error should name {name}: {err}");

    // Truncated: also refused, never a SIGBUS.
    std::fs::write(victim, &bytes[..bytes.len() / 2]).unwrap();
    let err = Server::try_start(&dir, &[])
        .err()
        .expect("a truncated table must refuse to start");
    assert!(err.contains(&*name), "error should name {name}: {err}");
}

#[test]
fn second_server_on_a_taken_port_refuses() {
    let (tmp, _links, server) = served(10, 8);
    let other = tmp.path().join("other");
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--cores",
            "1",
            "--listen",
            &server.addr.to_string(),
            "--data-dir",
        ])
        .arg(&other)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already in use"), "{err}");
    // A stranger holding the port is refused the same way.
    let stranger = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--cores",
            "1",
            "--listen",
            &stranger.local_addr().unwrap().to_string(),
            "--data-dir",
        ])
        .arg(&other)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A supervisor restarts a killed server at once on the same address: the killed process's
/// listening socket outlives it for a moment (its io_uring is torn down after the process is
/// reaped), and a socket no live process holds is not another server. 50 `kill -9`s, each
/// followed at once by a start that must come up and serve.
#[test]
fn a_killed_server_restarts_at_once_on_its_address() {
    let (_tmp, links, first) = served(50, 9);
    let listen = first.addr.to_string();
    let dir = first.data_dir.clone();
    let mut server = first;
    for round in 0..50 {
        let pid = server.child.id() as i32;
        server.kill9();
        // The process is reaped: the address may still be held by its dying socket.
        assert!(std::fs::metadata(format!("/proc/{pid}")).is_err());
        let cmd = std::process::Command::new(common::server_bin());
        server = Server::try_start_at(cmd, &listen, &dir, &[])
            .unwrap_or_else(|e| panic!("restart {round} did not come up: {e}"));
        let l = &links[round % links.len()];
        let mut r = Reader::connect(server.addr);
        r.send(&common::get(&l.key));
        let resp = r.read_response(false);
        assert_eq!(resp.status, l.status, "restart {round}, key {}", l.key);
    }
}

/// Two servers started at the same moment on one port: exactly one serves (SO_REUSEPORT would
/// split traffic between two data dirs; the loser is refused, and a race never leaves none).
#[test]
fn two_servers_racing_for_a_port_never_both_listen() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let spawn = |n: usize| {
            std::process::Command::new(common::server_bin())
                .args(["serve", "--cores", "1", "--listen", &addr, "--data-dir"])
                .arg(tmp.path().join(format!("d{i}-{n}")))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut pair = [spawn(0), spawn(1)];
        let listening: Vec<bool> = pair
            .iter_mut()
            .map(|c| {
                use std::io::BufRead;
                let out = std::io::BufReader::new(c.stdout.take().unwrap());
                out.lines()
                    .map_while(Result::ok)
                    .any(|l| l.starts_with("ricochet listening on"))
            })
            .collect::<Vec<_>>();
        for c in &mut pair {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(
            listening[0] != listening[1],
            "try {i}: {} servers listened on {addr}",
            listening.iter().filter(|&&l| l).count()
        );
    }
}

#[test]
fn too_many_cores_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--cores",
            "100000",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(tmp.path().join("d"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("more than"));
}
