//! A small blocking HTTP/1.1 client for the link API over raw TCP, plus helpers shared by the
//! API test files. Every I/O failure is an `Err` (crash tests expect the server to vanish).

use super::Server;
use serde_json::{json, Value};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// The API key every test server gets through `RICOCHET_API_KEY`.
pub const API_KEY: &str = "test-api-key-0123456789abcdef";

/// Read timeout of a client connection: a request that takes longer counts as a hang.
pub const CLIENT_TIMEOUT_S: u64 = 10;

/// Flags that lift the create rate limit so load tests measure the write path, not 429s.
pub const NO_RATE_LIMIT: [&str; 4] = [
    "--create-rate",
    "1000000000",
    "--create-burst",
    "1000000000",
];

/// Starts a server with [`API_KEY`] and `extra` flags.
pub fn start(dir: &Path, extra: &[&str]) -> Server {
    Server::start_with_env(dir, extra, &[("RICOCHET_API_KEY", API_KEY)])
}

/// Tries to start a server with [`API_KEY`]; `Err(stderr)` if it exits.
pub fn try_start(dir: &Path, extra: &[&str]) -> Result<Server, String> {
    Server::try_start_with_env(dir, extra, &[("RICOCHET_API_KEY", API_KEY)])
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {} body is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `key` of a 201/200 link body.
    pub fn key(&self) -> String {
        self.json()["key"]
            .as_str()
            .unwrap_or_else(|| panic!("no key in {:?}", String::from_utf8_lossy(&self.body)))
            .to_string()
    }

    pub fn location(&self) -> Option<&str> {
        self.header("location")
    }

    /// Asserts this is an RFC 9457 problem with `status` and the required members.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "expected {status}, got {} with body {:?}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "a {status} must be application/problem+json"
        );
        let v = self.json();
        assert!(v["type"].is_string(), "problem without type: {v}");
        assert!(v["title"].is_string(), "problem without title: {v}");
        assert_eq!(v["status"], json!(status), "problem status member: {v}");
        assert!(
            v["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "problem without detail: {v}"
        );
        v
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive connection to the server.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    pub token: String,
    /// The `Host` every request names (the domain it is for).
    pub host: String,
    /// Status and `Connection` header of the previous answer, and requests made, to explain
    /// a connection the server closed.
    last: Option<(u16, Option<String>)>,
    requests: u64,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(CLIENT_TIMEOUT_S)))?;
        stream.set_write_timeout(Some(Duration::from_secs(CLIENT_TIMEOUT_S)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::new(),
            token: API_KEY.to_string(),
            host: "t".to_string(),
            last: None,
            requests: 0,
        })
    }

    /// Connects or panics.
    pub fn new(server: &Server) -> Client {
        Client::connect(server.addr).expect("connect")
    }

    /// Sends one request with the bearer token (unless `auth` is false) and reads the answer.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        auth: bool,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Resp> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if auth {
            req.push_str(&format!("Authorization: Bearer {}\r\n", self.token));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" || method == "PATCH" {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.requests += 1;
        let result = self
            .stream
            .write_all(&bytes)
            .and_then(|()| self.read_response(method == "HEAD"));
        match result {
            Ok(r) => {
                self.last = Some((r.status, r.header("connection").map(str::to_string)));
                Ok(r)
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!(
                    "{e} ({method} {path}, request {} on this connection; previous answer \
                     (status, Connection): {:?})",
                    self.requests, self.last
                ),
            )),
        }
    }

    fn read_response(&mut self, head: bool) -> io::Result<Resp> {
        loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            let parsed = r
                .parse(&self.buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if let httparse::Status::Complete(n) = parsed {
                let status = r.code.unwrap_or(0);
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let len = if head {
                    0
                } else {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                while self.buf.len() < n + len {
                    self.fill()?;
                }
                let body = self.buf[n..n + len].to_vec();
                self.buf.drain(..n + len);
                return Ok(Resp {
                    status,
                    headers,
                    body,
                });
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut tmp = [0u8; 16384];
        // A signal landing on this thread (EINTR) is not the server's answer: read again.
        let n = loop {
            match self.stream.read(&mut tmp) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }

    /// `POST /api/v1/urls` with `body`.
    pub fn try_create(&mut self, body: &Value) -> io::Result<Resp> {
        self.send(
            "POST",
            "/api/v1/urls",
            true,
            &[],
            body.to_string().as_bytes(),
        )
    }

    pub fn create(&mut self, body: &Value) -> Resp {
        self.try_create(body).expect("create")
    }

    /// `POST /api/v1/urls` with an `Idempotency-Key`.
    pub fn try_create_idem(&mut self, body: &Value, idem: &str) -> io::Result<Resp> {
        self.send(
            "POST",
            "/api/v1/urls",
            true,
            &[("Idempotency-Key", idem)],
            body.to_string().as_bytes(),
        )
    }

    /// Creates a link to `url` (with `alias` if given) and asserts 201; returns the key.
    pub fn create_ok(&mut self, url: &str, alias: Option<&str>) -> String {
        let body = match alias {
            Some(a) => json!({"long_url": url, "custom_alias": a}),
            None => json!({"long_url": url}),
        };
        let r = self.create(&body);
        assert_eq!(r.status, 201, "create {body}: {}", r.text());
        r.key()
    }

    pub fn get_link(&mut self, key: &str) -> Resp {
        self.send("GET", &format!("/api/v1/urls/{key}"), true, &[], b"")
            .expect("get link")
    }

    pub fn patch(&mut self, key: &str, body: &Value) -> Resp {
        self.send(
            "PATCH",
            &format!("/api/v1/urls/{key}"),
            true,
            &[],
            body.to_string().as_bytes(),
        )
        .expect("patch")
    }

    pub fn delete(&mut self, key: &str) -> Resp {
        self.send("DELETE", &format!("/api/v1/urls/{key}"), true, &[], b"")
            .expect("delete")
    }

    /// `GET /{key}` without credentials (the redirect path).
    pub fn try_redirect(&mut self, key: &str) -> io::Result<Resp> {
        self.send("GET", &format!("/{key}"), false, &[], b"")
    }

    pub fn redirect(&mut self, key: &str) -> Resp {
        self.try_redirect(key).expect("redirect")
    }
}

/// Asserts `key` redirects to `url` with `status` (any 30x if `None`) on `c`.
pub fn assert_redirects(c: &mut Client, key: &str, url: &str, status: Option<u16>) {
    let r = c.redirect(key);
    match status {
        Some(s) => assert_eq!(r.status, s, "GET /{key}: {}", r.text()),
        None => assert!(
            [301, 302, 307, 308].contains(&r.status),
            "GET /{key} answered {}: {}",
            r.status,
            r.text()
        ),
    }
    assert_eq!(r.location(), Some(url), "GET /{key} location");
}

/// The ID behind a generated key, decoded with the data dir's secret.
pub fn id_of(keygen: &shards::keygen::KeyGen, key: &str) -> u64 {
    keygen
        .id_for(key.as_bytes())
        .unwrap_or_else(|| panic!("{key} is not a 7-char base62 generated key"))
}

/// The key generator of `data_dir` (after a server created its secret).
pub fn keygen(data_dir: &Path) -> shards::keygen::KeyGen {
    assert!(
        data_dir.join(shards::keygen::SECRET_FILE_NAME).exists(),
        "the server creates the secret"
    );
    let secret = shards::keygen::load_or_create_secret(data_dir).expect("secret");
    shards::keygen::KeyGen::new(&secret)
}

/// A fresh temp dir and a data dir path inside it (the server creates the data dir).
pub fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    (t, d)
}

/// Seed for randomized tests: `RICOCHET_TEST_SEED` or the clock; printed so a failure can be
/// replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("RICOCHET_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {s} (replay with RICOCHET_TEST_SEED={s})");
    s
}

/// Runs `f` on `n` threads, each with its own connection, released together by a barrier.
/// An I/O error (the server closed a connection without answering, or a request hung past
/// [`CLIENT_TIMEOUT_S`]) fails the test with the server's stderr, which says whether it crashed.
pub fn concurrently<T: Send + 'static>(
    s: &Server,
    n: usize,
    f: impl Fn(usize, &mut Client) -> io::Result<T> + Send + Sync + 'static,
) -> Vec<T> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let mut c = Client::new(s);
            let barrier = barrier.clone();
            let f = f.clone();
            std::thread::spawn(move || {
                barrier.wait();
                f(i, &mut c)
            })
        })
        .collect();
    let results: Vec<io::Result<T>> = handles
        .into_iter()
        .map(|h| h.join().expect("client thread panicked"))
        .collect();
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    if !errors.is_empty() {
        let alive = Client::connect(s.addr)
            .and_then(|mut c| c.try_redirect("healthz-probe"))
            .is_ok();
        std::thread::sleep(Duration::from_millis(200));
        panic!(
            "{} of {n} concurrent requests got no answer: {errors:?}; server alive: {alive}; \
             server stderr: {:?}",
            errors.len(),
            s.stderr_lines()
        );
    }
    results.into_iter().map(|r| r.expect("checked")).collect()
}

/// `field` of a stats answer's `days` (or a page's bars) summed over the last two days, which
/// must hold all of it: the clicks a test just made land on today, or on yesterday and today
/// when UTC midnight passed meanwhile. A test reading only the last day breaks at midnight.
pub fn last_two_days(days: &[Value], field: impl Fn(&Value) -> u64) -> u64 {
    let (older, recent) = days.split_at(days.len().saturating_sub(2));
    assert!(
        older.iter().all(|d| field(d) == 0),
        "clicks before yesterday: {days:?}"
    );
    recent.iter().map(field).sum()
}

/// Runs `ricochet <cmd> --data-dir <dir> <args>`: (success, stdout + stderr).
pub fn cli(dir: &Path, cmd: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(super::server_bin())
        .arg(cmd)
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run ricochet");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Creates an API key named `name` with `flags` (a role, limits) in `dir`; its plaintext.
pub fn make_key(dir: &Path, name: &str, flags: &[&str]) -> String {
    let mut args = vec!["create", name];
    args.extend(flags);
    let (ok, text) = cli(dir, "keys", &args);
    assert!(ok, "{text}");
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("rk_"))
        .unwrap_or_else(|| panic!("no key in {text}"))
        .to_owned()
}
