//! Test harness: real `ricochet` processes over raw TCP.
#![allow(dead_code)]

pub mod api;
pub mod geo;
pub mod pg;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ricochet");

/// The server binary the harness starts: `RICOCHET_TEST_BIN` if set (e.g. a release build, or
/// a build with a patch under test), else the one cargo built for these tests.
pub fn server_bin() -> String {
    std::env::var("RICOCHET_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// A link in a test dataset.
#[derive(Clone, Debug)]
pub struct Link {
    pub key: String,
    pub url: String,
    pub status: u16,
}

/// `n` links with keys unique (also ignoring case) and varied statuses.
pub fn dataset(n: usize, seed: u64) -> Vec<Link> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let alphabet = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-";
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len = rng.gen_range(3..12);
        let key: String = (0..len)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
            .collect();
        if !seen.insert(key.to_ascii_lowercase()) {
            continue;
        }
        let status = [301, 302, 302, 302, 307, 308][rng.gen_range(0..6)];
        let url = format!(
            "https://example-{}.com/path/{}?q={}",
            rng.gen_range(0..1000),
            key,
            rng.gen::<u32>()
        );
        out.push(Link { key, url, status });
    }
    out
}

pub fn write_tsv(path: &Path, links: &[Link]) {
    let mut s = String::new();
    for l in links {
        s.push_str(&format!("{}\t{}\t{}\n", l.key, l.url, l.status));
    }
    std::fs::write(path, s).unwrap();
}

/// Runs `ricochet import` and asserts success.
pub fn import(data_dir: &Path, links: &[Link]) {
    let tsv = data_dir.with_extension("tsv");
    write_tsv(&tsv, links);
    let out = Command::new(BIN)
        .args(["import", "--data-dir"])
        .arg(data_dir)
        .arg(&tsv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `ricochet serve`, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    /// Starts `ricochet serve` on a free port (port 0: the server reports the real one).
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::try_start(data_dir, extra).unwrap_or_else(|e| panic!("server did not start: {e}"))
    }

    pub fn try_start(data_dir: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_with_env(data_dir, extra, &[])
    }

    /// [`Server::start`] with extra environment variables for the child.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::try_start_with_env(data_dir, extra, env)
            .unwrap_or_else(|e| panic!("server did not start: {e}"))
    }

    /// [`Server::try_start`] with extra environment variables for the child.
    pub fn try_start_with_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let mut cmd = Command::new(server_bin());
        cmd.envs(env.iter().copied());
        Self::try_start_command(cmd, data_dir, extra)
    }

    /// Starts `serve` through `cmd` (the server binary, or a wrapper that execs it with the
    /// arguments it is given, e.g. to lower a resource limit) on a free port.
    pub fn try_start_command(
        cmd: Command,
        data_dir: &Path,
        extra: &[&str],
    ) -> Result<Server, String> {
        Self::try_start_at(cmd, "127.0.0.1:0", data_dir, extra)
    }

    /// [`Server::try_start_command`] on a given `--listen` address.
    pub fn try_start_at(
        mut cmd: Command,
        listen: &str,
        data_dir: &Path,
        extra: &[&str],
    ) -> Result<Server, String> {
        let mut child = cmd
            .args(["serve", "--listen", listen, "--cores", "2", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (etx, erx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = etx.send(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("ricochet listening on ") {
                        let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
                        return Ok(Server {
                            child,
                            addr,
                            data_dir: data_dir.to_path_buf(),
                            stderr: erx,
                        });
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            if let Some(status) = child.try_wait().unwrap() {
                // The child has exited, so its stderr is at EOF; wait until the reader thread has
                // passed on every line (it may lag behind the exit) and hung up.
                let mut err = Vec::new();
                while let Ok(line) = erx.recv_timeout(Duration::from_secs(5)) {
                    err.push(line);
                }
                return Err(format!("exited with {status}: {}", err.join("\n")));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("timed out waiting for the listening line".into());
            }
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.sigterm_and_wait()
    }

    /// [`Server::terminate`], keeping the `Server` (its stderr can still be read).
    pub fn sigterm_and_wait(&mut self) -> std::process::ExitStatus {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the server to exit by itself; its status, or `None`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }

    /// Waits up to `timeout` for a stderr line containing `needle` and returns it (lines read
    /// while waiting are consumed).
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads responses from a stream, keeping leftover bytes between calls.
pub struct Reader {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(stream: TcpStream) -> Reader {
        Reader {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// A reader on a new connection to `addr` (20 s read timeout, no Nagle).
    pub fn connect(addr: SocketAddr) -> Reader {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Reader::new(s)
    }

    /// Reads one response, framed strictly: httparse must accept the head, which must carry
    /// exactly one numeric `Content-Length` (none for 1xx and 204); `head_request` says the
    /// body is absent whatever Content-Length says. Anything else panics with the bytes.
    pub fn read_response(&mut self, head_request: bool) -> Response {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            let n = match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => {
                    self.fill();
                    continue;
                }
                Err(e) => panic!(
                    "not a valid response ({e}): {:?}",
                    String::from_utf8_lossy(&self.buf[..self.buf.len().min(300)])
                ),
            };
            let status = resp.code.unwrap();
            let hs: Vec<(String, String)> = resp
                .headers
                .iter()
                .map(|h| {
                    let v = String::from_utf8(h.value.to_vec()).expect("UTF-8 field value");
                    (h.name.to_string(), v)
                })
                .collect();
            let lengths: Vec<&str> = hs
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.as_str())
                .collect();
            let len = if status == 204 || (100..200).contains(&status) {
                assert!(lengths.is_empty(), "{status} with Content-Length: {hs:?}");
                0
            } else {
                assert_eq!(lengths.len(), 1, "exactly one Content-Length: {hs:?}");
                let l: usize = lengths[0].parse().expect("numeric Content-Length");
                if head_request {
                    0
                } else {
                    l
                }
            };
            while self.buf.len() < n + len {
                self.fill();
            }
            let body = self.buf[n..n + len].to_vec();
            self.buf.drain(..n + len);
            return Response {
                status,
                headers: hs,
                body,
            };
        }
    }

    /// After the last response: the server closes cleanly and sends nothing more.
    pub fn expect_eof(&mut self) {
        assert!(self.buf.is_empty(), "bytes after the last response");
        let mut tmp = [0u8; 1024];
        match self.stream.read(&mut tmp) {
            Ok(0) => {}
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&tmp[..n])),
            Err(e) => panic!("expected a clean close, got {e}"),
        }
    }

    fn fill(&mut self) {
        let mut tmp = [0u8; 65536];
        // A signal landing on this thread (EINTR) is not the server's answer: read again.
        let n = loop {
            match self.stream.read(&mut tmp) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        assert!(n > 0, "connection closed before a full response");
        self.buf.extend_from_slice(&tmp[..n]);
    }

    /// True if the peer closed the connection (EOF) within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 1024];
        match self.stream.read(&mut tmp) {
            Ok(0) => true,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                false
            }
            Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset),
        }
    }
}

pub fn get(key: &str) -> Vec<u8> {
    format!("GET /{key} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

/// Whether a browser test can run: Debian's chromium, node, and `tests/{dir}/node_modules`
/// holding each of `packages`. If not, the test skips saying so, unless
/// `RICOCHET_REQUIRE_BROWSER` is set (`.ci/run` sets it): then it fails.
pub fn browser_ready(dir: &str, packages: &[&str]) -> bool {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir)
        .join("node_modules");
    let ok = Path::new("/usr/bin/chromium").exists()
        && packages.iter().all(|p| modules.join(p).exists())
        && std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("RICOCHET_REQUIRE_BROWSER").is_none(),
            "RICOCHET_REQUIRE_BROWSER is set but chromium, node or tests/{dir}/node_modules is missing"
        );
        eprintln!("SKIPPED: needs /usr/bin/chromium, node and `npm ci --prefix tests/{dir}`");
    }
    ok
}
