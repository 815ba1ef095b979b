//! `/livez`, `/healthz` and `/readyz` as the seed defines them, against a real server: a
//! stalled core (test-only `--test-stall-core`) fails liveness within the bound and recovers;
//! readiness reports each check (`?verbose`), gates creates separately (`?creates`), and falls
//! at once when draining.

mod common;

use common::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One request on a fresh connection; `None` if no answer came within `timeout` (the
/// connection landed on a stalled core).
fn probe(addr: SocketAddr, target: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut c = TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(timeout)).unwrap();
    c.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.get(9..12)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// Fresh connections a round of [`wait_for`] opens at once. The kernel's SO_REUSEPORT hash
/// puts each on either core, so one at a time a run of them can all land on the stalled core
/// (CI once saw every probe of a 2 s window time out there); with 4 per round the chance
/// that a round has none on the live core is 1 in 16.
const PROBES_PER_ROUND: usize = 4;

/// Asks until an answer with `status` comes (some connections may land on a stalled core).
fn wait_for(s: &Server, target: &str, status: u16, within: Duration) -> (String, Duration) {
    let t = Instant::now();
    let addr = s.addr;
    loop {
        let answers: Vec<Option<(u16, String)>> = std::thread::scope(|scope| {
            let round: Vec<_> = (0..PROBES_PER_ROUND)
                .map(|_| scope.spawn(|| probe(addr, target, Duration::from_millis(300))))
                .collect();
            round.into_iter().map(|h| h.join().unwrap()).collect()
        });
        if let Some((_, body)) = answers.into_iter().flatten().find(|(st, _)| *st == status) {
            return (body, t.elapsed());
        }
        assert!(
            t.elapsed() < within,
            "{target} never answered {status} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_stalled_core_fails_liveness_within_the_bound_then_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Server::start(
        &dir,
        &[
            "--cores",
            "2",
            "--test-stall-core",
            "1",
            "--test-stall-after-ms",
            "1500",
        ],
    );
    let (body, _) = wait_for(&s, "/livez", 200, Duration::from_secs(1));
    assert_eq!(body, "ok\n");
    assert!(s
        .wait_stderr("test stall", Duration::from_secs(5))
        .is_some());
    let stalled_at = Instant::now();
    // The bound plus one sweep, plus the probes that land on the stalled core and time out.
    let bound = Duration::from_millis(ricochet::node::probes::LIVENESS_STALL_MS + 2000);
    let (body, took) = wait_for(&s, "/livez?verbose", 503, bound);
    assert!(body.contains("core 1: no progress"), "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ok"], false);
    eprintln!(
        "/livez failed {:?} after the stall began",
        stalled_at.elapsed().min(took)
    );
    let (body, _) = wait_for(&s, "/healthz", 503, Duration::from_secs(3));
    assert!(body.contains("core 1"), "{body}");
    // The stall ends by itself (TEST_STALL_MS): liveness comes back.
    let back = Duration::from_millis(ricochet::base::test_faults::TEST_STALL_MS + 2000);
    wait_for(&s, "/livez", 200, back);
}

#[test]
fn readiness_reports_each_check_and_gates_creates_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Server::start(&dir, &["--cores", "2"]);
    let (body, _) = wait_for(&s, "/readyz?verbose", 200, Duration::from_secs(2));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cores", "draining"], "{body}");
    // Creates need an ID range on every core: loaded right after start.
    let (body, _) = wait_for(&s, "/readyz?creates&verbose", 200, Duration::from_secs(3));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ids")
        .unwrap();
    assert_eq!(ids["ok"], true, "{body}");
    let (body, _) = wait_for(&s, "/readyz", 200, Duration::from_secs(1));
    assert_eq!(body, "ok\n");
    // HEAD: the same status, no body.
    let mut c = common::Reader::new(s.connect());
    c.send(b"HEAD /livez HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true);
    assert_eq!((r.status, r.body.len()), (200, 0));
    c.send(b"POST /readyz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.read_response(false).status, 405);
    // Draining (SIGTERM): not ready at once. A draining server accepts no new connection and
    // closes idle ones; a probe whose request is being received when the signal comes is
    // answered `503 draining` with `Connection: close`; it is never told 200.
    drop(c);
    let mut mid = common::Reader::new(s.connect());
    mid.send(b"GET /readyz?verbose HTTP/1.1\r\nHost: t\r\n");
    std::thread::sleep(Duration::from_millis(100)); // The server has read the first part.
                                                    // SAFETY: a signal to our own child process.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(100));
    mid.send(b"\r\n");
    let r = mid.read_response(false);
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 503, "{body}");
    assert!(body.contains("draining (SIGTERM)"), "{body}");
    assert_eq!(r.header("connection"), Some("close"));
    for _ in 0..5 {
        // A new connection is refused (no answer), never told 200.
        match probe(s.addr, "/readyz", Duration::from_millis(500)) {
            None => {}
            Some((st, body)) => assert!(st == 503 && body.contains("draining"), "{st} {body}"),
        }
    }
}
