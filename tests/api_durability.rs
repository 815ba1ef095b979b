//! Durability of API writes against real processes: kill -9 crash loop, torn tails, mid-log
//! corruption, and failing fsync.
//!
//! The crash loop alternates `--cores 2` and `--cores 1` between starts, so every other start
//! folds the logs for a core-count change. It runs 3 cycles by default; `RICOCHET_CRASH_CYCLES=300 cargo test --test
//! api_durability crash_loop -- --nocapture` runs a long one (about 1-3 s per cycle in a debug
//! build). Randomized tests print their seed; `RICOCHET_TEST_SEED=<seed>` replays one.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{
    assert_redirects, data_dir, id_of, keygen, seed, start, try_start, Client, NO_RATE_LIMIT,
};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An acknowledged link: key, target, status.
type Acked = (String, String, u16);

/// Checks every acknowledged link redirects to its target, over one connection.
fn check_all(s: &common::Server, acked: &[Acked]) {
    let mut c = Client::new(s);
    for (key, url, status) in acked {
        assert_redirects(&mut c, key, url, Some(*status));
    }
}

/// What a link must look like after a crash: `now` (target and status, or `None` once
/// deleted), or `alt` when the last write to it got no answer before the kill (either state
/// is then correct; the restart decides which, and from then on that one is durable).
#[derive(Clone, Debug)]
struct Expect {
    now: Option<(String, u16)>,
    alt: Option<Option<(String, u16)>>,
}

/// Checks `book` against the server and settles ambiguous entries to what it serves.
fn check_book(s: &common::Server, book: &mut [(String, Expect)]) {
    let mut c = Client::new(s);
    for (key, e) in book.iter_mut() {
        let r = c.redirect(key);
        let seen = match r.status {
            404 => None,
            301 | 302 | 307 | 308 => Some((r.location().unwrap_or("").to_string(), r.status)),
            other => panic!("GET /{key} answered {other}: {}", r.text()),
        };
        assert!(
            seen == e.now || e.alt.as_ref() == Some(&seen),
            "after kill -9, /{key} serves {seen:?}; acknowledged state {:?}, unanswered write {:?}",
            e.now,
            e.alt
        );
        e.now = seen;
        e.alt = None;
    }
}

/// One client of the crash loop: creates (generated keys and aliases), patches and deletes
/// its own links until the server dies. Returns its book and the keys it created.
fn crash_client(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    cycle: usize,
    t: usize,
    seed: u64,
    mut book: Vec<(String, Expect)>,
) -> (Vec<(String, Expect)>, Vec<String>) {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mut created = Vec::new();
    let Ok(mut c) = Client::connect(addr) else {
        return (book, created);
    };
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let url = format!("https://example.com/c{cycle}/t{t}/{i}?{}", r.gen::<u32>());
        let status = [301u16, 302, 307, 308][r.gen_range(0..4)];
        let op = r.gen_range(0..100);
        let live: Vec<usize> = if op < 30 {
            (0..book.len())
                .filter(|&j| book[j].1.now.is_some())
                .collect()
        } else {
            Vec::new()
        };
        if !live.is_empty() {
            let j = live[r.gen_range(0..live.len())];
            let key = book[j].0.clone();
            if op < 18 {
                let body = json!({"long_url": url, "redirect_status": status});
                let res = c.send(
                    "PATCH",
                    &format!("/api/v1/urls/{key}"),
                    true,
                    &[],
                    body.to_string().as_bytes(),
                );
                match res {
                    Ok(resp) => {
                        assert_eq!(resp.status, 200, "PATCH {key}: {}", resp.text());
                        book[j].1.now = Some((url, status));
                    }
                    Err(_) => {
                        book[j].1.alt = Some(Some((url, status)));
                        return (book, created);
                    }
                }
            } else {
                match c.send("DELETE", &format!("/api/v1/urls/{key}"), true, &[], b"") {
                    Ok(resp) => {
                        assert_eq!(resp.status, 204, "DELETE {key}: {}", resp.text());
                        book[j].1.now = None;
                    }
                    Err(_) => {
                        book[j].1.alt = Some(None);
                        return (book, created);
                    }
                }
            }
            continue;
        }
        let alias = r
            .gen_bool(0.3)
            .then(|| format!("c{cycle}-t{t}-{i}-{}", r.gen::<u16>()));
        let mut body = json!({"long_url": url, "redirect_status": status});
        if let Some(a) = &alias {
            body["custom_alias"] = json!(a);
        }
        match c.try_create(&body) {
            Ok(resp) if resp.status == 201 => {
                let key = resp.key();
                if let Some(a) = &alias {
                    assert_eq!(&key, a);
                }
                created.push(key.clone());
                book.push((
                    key,
                    Expect {
                        now: Some((url, status)),
                        alt: None,
                    },
                ));
            }
            Ok(resp) => panic!("create answered {}: {}", resp.status, resp.text()),
            // The server died under us. An unanswered create of an alias may or may not
            // have happened: track it as ambiguous.
            Err(_) => {
                if let Some(a) = alias {
                    book.push((
                        a,
                        Expect {
                            now: None,
                            alt: Some(Some((url, status))),
                        },
                    ));
                }
                return (book, created);
            }
        }
    }
    (book, created)
}

#[test]
fn crash_loop_every_acknowledged_write_survives_kill9() {
    let cycles: usize = std::env::var("RICOCHET_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = seed("crash_loop");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (_t, dir) = data_dir();
    // Every link ever touched, with what it must look like. Links written in the last cycle
    // are checked after every crash; older ones all of them in a short run, a sample in a
    // long one (plus all of them at the end), to keep a long run linear.
    let mut book: Vec<(String, Expect)> = Vec::new();
    let mut ids: HashSet<u64> = HashSet::new();
    let mut kg = None;
    let clients = 8;
    let (mut creates, mut writes_checked) = (0usize, 0usize);
    for cycle in 0..cycles {
        // Every other start runs on one core: the start-up fold of a core-count change must
        // keep every acknowledged write too.
        let mut args = NO_RATE_LIMIT.to_vec();
        args.extend(["--cores", if cycle % 2 == 1 { "1" } else { "2" }]);
        let s = start(&dir, &args);
        if cycles <= 10 {
            check_book(&s, &mut book);
        } else {
            let n = book.len();
            let recent_from = n.saturating_sub(4000);
            check_book(&s, &mut book[recent_from..]);
            if recent_from > 0 {
                for _ in 0..200 {
                    let j = rng.gen_range(0..recent_from);
                    check_book(&s, &mut book[j..j + 1]);
                }
            }
        }
        let kg = kg.get_or_insert_with(|| keygen(&dir));
        // Hand each client a disjoint share of the most recent live links to change.
        let mut shares: Vec<Vec<(String, Expect)>> = vec![Vec::new(); clients];
        let keep = book.len().saturating_sub(400);
        for (j, entry) in book.drain(keep..).enumerate() {
            shares[j % clients].push(entry);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(t, share)| {
                let (addr, stop, tseed) = (s.addr, stop.clone(), rng.gen::<u64>());
                std::thread::spawn(move || crash_client(addr, stop, cycle, t, tseed, share))
            })
            .collect();
        let run_ms = rng.gen_range(50..600);
        std::thread::sleep(Duration::from_millis(run_ms));
        s.kill9();
        stop.store(true, Ordering::Relaxed);
        let mut made = 0;
        for h in handles {
            let (share, created) = h.join().expect("client thread");
            for key in &created {
                if key.len() == 7 && !key.contains('-') {
                    let id = id_of(kg, key);
                    assert!(ids.insert(id), "ID {id} (key {key}) handed out twice");
                }
            }
            made += created.len();
            writes_checked += share.len();
            book.extend(share);
        }
        creates += made;
        eprintln!(
            "crash_loop cycle {cycle}: killed after {run_ms} ms, {made} creates acknowledged"
        );
    }
    let s = start(&dir, &[]);
    check_book(&s, &mut book);
    let deleted = book.iter().filter(|(_, e)| e.now.is_none()).count();
    eprintln!(
        "crash_loop: {cycles} kill -9 cycles, {creates} acknowledged creates, {} links checked \
         ({deleted} deleted), {} generated IDs none reused",
        book.len(),
        ids.len()
    );
    assert!(creates > 0, "no create was ever acknowledged");
    assert!(writes_checked > 0);
}

fn wal(dir: &Path, core: u32) -> PathBuf {
    shards::log::wal_path(dir, core)
}

/// Offsets of the valid frames of a log file.
fn frames(path: &Path) -> Vec<(usize, usize)> {
    let data = std::fs::read(path).unwrap();
    let mut pos = shards::log::codec::HEADER_BYTES;
    let mut out = Vec::new();
    while let Some(f) = shards::log::codec::frame_at(&data, pos) {
        out.push((pos, f.total_len));
        pos += f.total_len;
    }
    assert_eq!(
        pos,
        data.len(),
        "{} has bytes after its frames",
        path.display()
    );
    out
}

#[test]
fn torn_tail_is_truncated_and_acknowledged_links_survive() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &NO_RATE_LIMIT);
    let mut c = Client::new(&s);
    let mut acked = Vec::new();
    for i in 0..40 {
        let url = format!("https://example.com/torn/{i}");
        let alias = (i % 3 == 0).then(|| format!("torn-{i}"));
        let key = c.create_ok(&url, alias.as_deref());
        acked.push((key, url, 302));
    }
    drop(c);
    s.kill9();

    // Core 0: random garbage after the last record. Core 1: the first half of a copy of its
    // own last frame (a write torn mid-frame).
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed("torn_tail"));
    let mut lens = Vec::new();
    for core in 0..2u32 {
        let p = wal(&dir, core);
        let fr = frames(&p);
        assert!(
            !fr.is_empty(),
            "core {core} logged nothing: test needs records on both"
        );
        let data = std::fs::read(&p).unwrap();
        let tail: Vec<u8> = if core == 0 {
            (0..rng.gen_range(1..200)).map(|_| rng.gen()).collect()
        } else {
            let (at, len) = *fr.last().unwrap();
            data[at..at + len / 2].to_vec()
        };
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(&tail)
            .unwrap();
        lens.push(data.len());
    }
    let s = start(&dir, &[]);
    for (core, len) in lens.iter().enumerate() {
        let needle = format!("wal-{core}.log");
        let line = s
            .wait_stderr(&needle, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("no truncation report for {needle}"));
        assert!(
            line.contains(&format!("offset {len}")),
            "truncation offset {len} not reported: {line}"
        );
        assert_eq!(
            std::fs::metadata(wal(&dir, core as u32)).unwrap().len(),
            *len as u64,
            "the torn tail was not truncated"
        );
    }
    check_all(&s, &acked);
    // And the logs keep working after the truncation.
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/after-torn", Some("after-torn"));
    drop(c);
    s.kill9();
    let s = start(&dir, &[]);
    check_all(&s, &acked);
    assert_redirects(
        &mut Client::new(&s),
        &k,
        "https://example.com/after-torn",
        None,
    );
}

#[test]
fn mid_log_corruption_refuses_to_start_unless_salvaged() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &NO_RATE_LIMIT);
    let mut c = Client::new(&s);
    // One create at a time: each record is its own batch, so damage before later records is
    // mid-log, not a torn last batch.
    let mut acked = Vec::new();
    for i in 0..30 {
        let url = format!("https://example.com/mid/{i}");
        let key = format!("mid-{i}");
        c.create_ok(&url, Some(&key));
        acked.push((key, url, 302));
    }
    drop(c);
    let _ = s.terminate();
    let (core, fr) = (0..2u32)
        .map(|core| (core, frames(&wal(&dir, core))))
        .max_by_key(|(_, f)| f.len())
        .unwrap();
    assert!(
        fr.len() >= 5,
        "need several records in one log, have {}",
        fr.len()
    );
    let path = wal(&dir, core);
    let (at, len) = fr[fr.len() / 2];
    let mut data = std::fs::read(&path).unwrap();
    data[at + len / 2] ^= 0x5a;
    std::fs::write(&path, &data).unwrap();

    let err = match try_start(&dir, &[]) {
        Ok(_) => panic!(
            "started with a corrupt record in the middle of {}",
            path.display()
        ),
        Err(e) => e,
    };
    assert!(
        err.contains(&format!("wal-{core}.log")) && err.contains("corrupt"),
        "refusal does not name the file and the problem: {err}"
    );
    assert!(
        err.contains("salvage"),
        "refusal does not mention --salvage: {err}"
    );
    // Refusing changed nothing.
    assert_eq!(std::fs::read(&path).unwrap(), data);

    let s = start(&dir, &["--salvage"]);
    assert!(
        s.wait_stderr("salvage", Duration::from_secs(5)).is_some(),
        "--salvage did not report what it skipped"
    );
    // Every link but the damaged one redirects; the damaged one is lost, not garbled.
    let mut c = Client::new(&s);
    let mut lost = 0;
    for (key, url, status) in &acked {
        let r = c.redirect(key);
        if r.status == 404 {
            lost += 1;
        } else {
            assert_eq!((r.status, r.location()), (*status, Some(url.as_str())));
        }
    }
    assert_eq!(lost, 1, "salvage should lose exactly the damaged record");
}

#[test]
fn failing_fsync_fails_writes_but_not_redirects() {
    let (_t, dir) = data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend(["--fault-fail-fsync-after", "2"]);
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let mut ok: Vec<(String, String)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for i in 0..60 {
        let url = format!("https://example.com/fsync/{i}");
        let alias = format!("fs-{i}");
        let r = c.create(&json!({"long_url": url, "custom_alias": alias}));
        match r.status {
            201 => ok.push((alias, url)),
            507 | 503 => {
                let v = r.assert_problem(r.status);
                assert!(
                    v["detail"].as_str().unwrap().contains("durable"),
                    "storage failure detail should say the write was not durable: {v}"
                );
                failed.push(alias);
            }
            other => panic!(
                "create during fsync failures answered {other}: {}",
                r.text()
            ),
        }
        if failed.len() >= 10 {
            break;
        }
    }
    assert!(!failed.is_empty(), "creates never failed");
    assert!(!ok.is_empty(), "the first fsyncs succeed");
    // Redirects of acknowledged links keep working while the log is poisoned.
    for (k, u) in &ok {
        assert_redirects(&mut c, k, u, Some(302));
    }
    for k in &failed {
        assert_eq!(c.redirect(k).status, 404, "{k} failed but redirects");
    }
    // A PATCH on a poisoned owner fails the same way and changes nothing (one that succeeds,
    // on a core not yet poisoned, changes the expectation).
    for (k, u) in ok.iter_mut() {
        let new_url = format!("{u}/changed");
        let r = c.patch(k, &json!({"long_url": new_url}));
        match r.status {
            200 => *u = new_url,
            507 | 503 => {
                r.assert_problem(r.status);
            }
            other => panic!("patch during fsync failures answered {other}: {}", r.text()),
        }
        assert_redirects(&mut c, k, u, Some(302));
    }
    drop(c);
    s.kill9();

    // After a restart without the fault: the acknowledged links are there, none of the failed
    // ones is, and writes work again.
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    for (k, u) in &ok {
        assert_redirects(&mut c, k, u, Some(302));
    }
    for k in &failed {
        let r = c.redirect(k);
        assert_eq!(
            r.status,
            404,
            "{k} got a storage-failure answer but redirects after restart to {:?}",
            r.location()
        );
    }
    c.create_ok("https://example.com/after-fsync", Some("after-fsync"));
}
