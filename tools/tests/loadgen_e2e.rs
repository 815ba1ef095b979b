//! End-to-end: the loadgen library against a tiny in-test HTTP responder on 127.0.0.1.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ricochet_tools::datagen::{format_link, DatagenConfig, LinkGenerator, OutputFormat, StatusMix};
use ricochet_tools::loadgen::cli::summary;
use ricochet_tools::loadgen::links::Dataset;
use ricochet_tools::loadgen::zipf::KeyDist;
use ricochet_tools::loadgen::{run, LoadConfig};

/// Each test spins a pacing thread; running them one at a time keeps timing honest on small CI
/// machines.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Default)]
struct Faults {
    /// Answer every 5th known key with a wrong Location.
    wrong_location: bool,
    /// Answer unknown keys with 302 instead of 404.
    unknown_redirects: bool,
    /// Sleep this long before answering the n-th request the server sees (1-based).
    stall_at: Option<(u64, Duration)>,
    /// Write responses in 7-byte pieces with pauses, so they arrive split across reads.
    split_writes: bool,
    /// Links are keyed by `HOST KEY` (a server with several domains): a GET finds its link
    /// only under the `Host` it names.
    by_host: bool,
}

struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

fn start_responder(links: HashMap<String, (String, u16)>, faults: Faults) -> Responder {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let links = Arc::new(links);
    let seen = Arc::new(AtomicU64::new(0));
    let stop2 = stop.clone();
    let handle = thread::spawn(move || {
        let mut workers = Vec::new();
        while !stop2.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    let links = links.clone();
                    let seen = seen.clone();
                    let stop = stop2.clone();
                    workers.push(thread::spawn(move || {
                        serve(s, &links, faults, &seen, &stop)
                    }));
                }
                Err(_) => thread::sleep(Duration::from_millis(1)),
            }
        }
        for w in workers {
            w.join().unwrap();
        }
    });
    Responder {
        addr,
        stop,
        handle: Some(handle),
    }
}

fn serve(
    mut s: TcpStream,
    links: &HashMap<String, (String, u16)>,
    faults: Faults,
    seen: &AtomicU64,
    stop: &AtomicBool,
) {
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => continue,
        }
        let mut out = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut req = httparse::Request::new(&mut headers);
            let Ok(httparse::Status::Complete(head)) = req.parse(&buf) else {
                break;
            };
            let body_len: usize = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |h| {
                    std::str::from_utf8(h.value).unwrap().parse().unwrap()
                });
            if buf.len() < head + body_len {
                break;
            }
            let method = req.method.unwrap().to_string();
            let path = req.path.unwrap().to_string();
            let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some((at, d)) = faults.stall_at {
                if n == at {
                    thread::sleep(d);
                }
            }
            if method == "POST" && path == "/api/v1/urls" {
                let auth = req
                    .headers
                    .iter()
                    .any(|h| h.name == "Authorization" && h.value == b"Bearer secret");
                let body: serde_json::Value =
                    serde_json::from_slice(&buf[head..head + body_len]).unwrap();
                assert!(body["long_url"].as_str().unwrap().starts_with("http"));
                if auth {
                    out.extend_from_slice(
                        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                    );
                } else {
                    out.extend_from_slice(
                        b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n",
                    );
                }
            } else {
                let key = match faults.by_host {
                    true => {
                        let host = req
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("host"));
                        let host = std::str::from_utf8(host.unwrap().value).unwrap();
                        format!("{host} {}", &path[1..])
                    }
                    false => path[1..].to_string(),
                };
                match links.get(&key) {
                    Some((url, status)) => {
                        let url = if faults.wrong_location && n % 5 == 0 {
                            format!("{url}x")
                        } else {
                            url.clone()
                        };
                        out.extend_from_slice(
                            format!(
                                "HTTP/1.1 {status} Redirect\r\nLocation: {url}\r\nContent-Length: 0\r\n\r\n"
                            )
                            .as_bytes(),
                        );
                    }
                    None if faults.unknown_redirects => out.extend_from_slice(
                        b"HTTP/1.1 302 Found\r\nLocation: https://x.com/\r\nContent-Length: 0\r\n\r\n",
                    ),
                    // Chunked on purpose: the generator must frame it.
                    None => out.extend_from_slice(
                        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nnot found\r\n0\r\n\r\n",
                    ),
                }
            }
            buf.drain(..head + body_len);
        }
        if faults.split_writes {
            for piece in out.chunks(7) {
                if s.write_all(piece).is_err() {
                    return;
                }
                thread::sleep(Duration::from_micros(100));
            }
        } else if !out.is_empty() && s.write_all(&out).is_err() {
            return;
        }
    }
}

/// A small generated dataset, as TSV text and as the responder's map.
fn dataset(n: usize) -> (Dataset, HashMap<String, (String, u16)>) {
    let cfg = DatagenConfig {
        seed: 9,
        unique_ignore_case: false,
        statuses: "302:80,301:10,307:5,308:5".parse::<StatusMix>().unwrap(),
    };
    let mut g = LinkGenerator::new(&cfg, n);
    let mut tsv = Vec::new();
    let mut map = HashMap::new();
    for _ in 0..n {
        let l = g.next_link().unwrap();
        format_link(&mut tsv, OutputFormat::Tsv, &l);
        map.insert(l.key.to_string(), (l.url.to_string(), l.status));
    }
    (Dataset::parse(tsv).unwrap(), map)
}

/// [`dataset`] with a fourth column naming each link's `Host` (one of three), and the
/// responder's map keyed by `HOST KEY`.
fn dataset_with_hosts(n: usize) -> (Dataset, HashMap<String, (String, u16)>) {
    let (plain, map) = dataset(n);
    let mut tsv = String::new();
    let mut by_host = HashMap::new();
    for i in 0..plain.len() {
        let key = std::str::from_utf8(plain.key(i)).unwrap();
        let host = format!("d{}.example", i % 3);
        let (url, status) = &map[key];
        tsv.push_str(&format!("{key}\t{url}\t{status}\t{host}\n"));
        by_host.insert(format!("{host} {key}"), (url.clone(), *status));
    }
    (Dataset::parse(tsv.into_bytes()).unwrap(), by_host)
}

fn config(addr: SocketAddr, rate: u64, duration_ms: u64) -> LoadConfig {
    let mut cfg = LoadConfig::new(addr);
    cfg.rate = rate;
    cfg.duration = Duration::from_millis(duration_ms);
    cfg.warmup = Duration::from_millis(200);
    cfg.connections = 4;
    cfg.pipeline = 2;
    cfg.drain = Duration::from_secs(1);
    cfg
}

#[test]
fn clean_run_has_no_errors_and_hits_the_rate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, map) = dataset(300);
    let server = start_responder(map, Faults::default());
    let mut cfg = config(server.addr, 1000, 1000);
    cfg.dist = KeyDist::Zipf(0.99);
    cfg.unknown_share = 0.1;
    cfg.create_share = 0.05;
    cfg.api_key = Some("secret".into());
    let r = run(&cfg, &data).unwrap();
    eprintln!("{}", summary(&r));
    assert_eq!(r.error_total, 0, "{:?} {:?}", r.errors, r.error_samples);
    assert_eq!(r.warmup_errors, 0);
    assert_eq!(r.scheduled, 1000);
    assert_eq!(r.completed, 1000);
    assert_eq!(r.ok, 1000);
    // Near target: only a late last answer (a loaded CI machine) can pull it below 1000.
    assert!(
        (900.0..=1000.0).contains(&r.achieved_rps),
        "achieved {}",
        r.achieved_rps
    );
    assert!(
        r.by_kind.unknown > 50 && r.by_kind.create > 20,
        "{:?}",
        r.by_kind
    );
    assert_eq!(r.by_kind.link + r.by_kind.unknown + r.by_kind.create, 1000);
    assert!(r.latency_us.p50 > 0.0 && r.latency_us.p50 <= r.latency_us.max);
    assert_eq!(r.percentiles.len(), 103);
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["latency_us"]["p99"].as_f64().unwrap() > 0.0);
}

/// A links file's fourth column is the `Host` each request for that link names: against a
/// server that finds a link only under its own host, every answer is right; the same links
/// without the column all miss.
#[test]
fn each_request_names_its_links_host() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, map) = dataset_with_hosts(300);
    let faults = Faults {
        by_host: true,
        ..Faults::default()
    };
    let server = start_responder(map, faults);
    let cfg = config(server.addr, 1000, 500);
    let r = run(&cfg, &data).unwrap();
    assert_eq!(r.error_total, 0, "{:?} {:?}", r.errors, r.error_samples);
    assert_eq!(r.ok, r.scheduled);
    let (plain, _) = dataset(300);
    let r = run(&cfg, &plain).unwrap();
    assert_eq!(r.ok, 0, "{:?}", r.errors);
    assert_eq!(r.error_total, r.scheduled);
}

#[test]
fn wrong_answers_are_counted_by_kind() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, map) = dataset(100);
    let faults = Faults {
        wrong_location: true,
        unknown_redirects: true,
        ..Faults::default()
    };
    let server = start_responder(map, faults);
    let mut cfg = config(server.addr, 1000, 500);
    cfg.unknown_share = 0.2;
    let r = run(&cfg, &data).unwrap();
    eprintln!("{}", summary(&r));
    assert!(r.errors.link_wrong_location > 20, "{:?}", r.errors);
    assert!(r.errors.unknown_wrong_status > 50, "{:?}", r.errors);
    assert_eq!(r.errors.link_wrong_status, 0);
    assert_eq!(r.errors.protocol + r.errors.connection_closed, 0);
    assert_eq!(r.ok + r.error_total, r.scheduled);
    assert!(!r.error_samples.is_empty());
    assert!(r.error_samples.iter().any(|s| s.contains("expected")));
}

/// One connection, no pipelining: a 150 ms server stall holds up every request scheduled
/// during it. Measured from scheduled send time, ~75 of 500 requests wait up to 150 ms, so
/// p90 must show it. (Measured from actual send, only one request would look slow.)
#[test]
fn server_stall_shows_in_the_tail() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, map) = dataset(50);
    let faults = Faults {
        // Well after warm-up (100 warm-up requests at 500/s over 200 ms).
        stall_at: Some((200, Duration::from_millis(150))),
        ..Faults::default()
    };
    let server = start_responder(map, faults);
    let mut cfg = config(server.addr, 500, 1000);
    cfg.connections = 1;
    cfg.pipeline = 1;
    let r = run(&cfg, &data).unwrap();
    eprintln!("{}", summary(&r));
    assert_eq!(r.error_total, 0, "{:?}", r.errors);
    assert!(r.latency_us.max >= 150_000.0, "max {}", r.latency_us.max);
    assert!(r.latency_us.p90 >= 20_000.0, "p90 {}", r.latency_us.p90);
    assert!(r.latency_us.p50 < 20_000.0, "p50 {}", r.latency_us.p50);
}

#[test]
fn responses_split_across_reads_are_framed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, map) = dataset(50);
    let faults = Faults {
        split_writes: true,
        ..Faults::default()
    };
    let server = start_responder(map, faults);
    let mut cfg = config(server.addr, 200, 500);
    cfg.unknown_share = 0.3;
    let r = run(&cfg, &data).unwrap();
    eprintln!("{}", summary(&r));
    assert_eq!(r.error_total, 0, "{:?} {:?}", r.errors, r.error_samples);
    assert_eq!(r.completed, 100);
    assert!(r.by_kind.unknown > 10);
}

#[test]
fn refused_connection_is_an_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (data, _) = dataset(10);
    // Bind then drop: the port is free and nothing listens on it.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = config(addr, 100, 100);
    let e = run(&cfg, &data).unwrap_err();
    assert!(e.to_string().contains("cannot connect"), "{e}");
}
