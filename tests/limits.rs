//! Operator mistakes and exhaustion: bad flags are refused at parse time naming the flag, and
//! running out of file descriptors backs accept off (one report a second) while the
//! connections already open keep being served.

mod common;

use common::{dataset, import, Reader, Server};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn bad_flags_are_refused_naming_the_flag() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("data");
    for (flag, value) in [
        ("--lru-capacity", "0"),
        ("--header-timeout-ms", "0"),
        ("--idle-timeout-ms", "5"),
        ("--create-rate", "0"),
        ("--create-burst", "0"),
        ("--compact-entries", "0"),
        ("--public-url", "not a url"),
        ("--public-url", "https://sho.rt/\r\nX-Evil: 1"),
        ("--public-url", "https://sho.rt/?q=1"),
        ("--spin-us", "99999999"),
    ] {
        let started = Instant::now();
        let out = Command::new(common::server_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&dir)
            .args([flag, value])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag),
            "{flag} {value:?}: the error does not name it: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{flag}: refused only after a timeout"
        );
    }
    assert!(!dir.exists(), "a refused start created the data dir");
}

#[test]
fn out_of_descriptors_backs_accept_off_and_keeps_serving() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("data");
    let links = dataset(50, 3);
    import(&dir, &links);
    // A low descriptor limit for the server only (the shell lowers it, then execs).
    let mut wrapper = Command::new("sh");
    wrapper
        .arg("-c")
        .arg("ulimit -n 128 && exec \"$0\" \"$@\"")
        .arg(common::server_bin());
    let server = Server::try_start_command(wrapper, &dir, &[]).expect("server starts");
    let addr = server.addr;
    // One served connection first, then far more connections than descriptors are left.
    let mut first = Reader::new(server.connect());
    let mut flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    let reports: Vec<String> = server
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("accept failed"))
        .collect();
    assert!(!reports.is_empty(), "no accept failure was reported");
    // Two cores, at most one line a second each (plus a second of slack).
    assert!(
        reports.len() <= 8,
        "{} accept reports in 2.5 s: {:?}",
        reports.len(),
        &reports[..3]
    );
    // The open connection is still served.
    for l in links.iter().take(5) {
        first.send(&common::get(&l.key));
        assert_eq!(first.read_response(false).status, l.status);
    }
    // Descriptors come back: new connections are accepted again.
    flood.clear();
    std::thread::sleep(Duration::from_millis(500));
    let mut again = Reader::new(server.connect());
    again.send(&common::get(&links[0].key));
    assert_eq!(again.read_response(false).status, links[0].status);
}
