//! The allocator fault matrix through the real server: tiny segments under contention on every
//! core, kill -9 with ranges buffered, a rolled-back authority, and exhaustion of the key space.
//! Allocation results are recorded directly (each generated key decoded back to its ID with the
//! data dir's secret) and checked against the audit log, not just against the final table: a
//! unique index could hide a duplicate ID.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{data_dir, id_of, keygen, start, try_start, Client, NO_RATE_LIMIT};
use serde_json::json;
use shards::alloc::{read_audit, AuditEntry, FileAuthority, IdRange};
use shards::keygen::KEY_SPACE;
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Barrier};

/// Audit ranges, checked sorted and pairwise disjoint.
fn audit_ranges(dir: &Path) -> Vec<IdRange> {
    let entries: Vec<AuditEntry> = read_audit(dir).unwrap();
    let ranges: Vec<IdRange> = entries.iter().map(|e| e.range).collect();
    for w in ranges.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "audit ranges overlap or go back: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    for r in &ranges {
        assert!(
            r.start >= 1 && r.end <= KEY_SPACE && r.start < r.end,
            "bad range {r:?}"
        );
    }
    ranges
}

fn assert_ids_confirmed(ids: &[u64], ranges: &[IdRange]) {
    let mut seen = HashSet::new();
    for &id in ids {
        assert!((1..KEY_SPACE).contains(&id), "ID {id} out of range");
        assert!(seen.insert(id), "ID {id} handed out twice");
        assert!(
            ranges.iter().any(|r| r.contains(id)),
            "ID {id} is in no confirmed audit range"
        );
    }
}

/// `threads` clients released together, each making `per_thread` generated creates. Returns
/// the created keys and the number of 503s (bounded failures); anything else fails the test, as
/// does a request that takes longer than the client timeout (a hang).
fn hammer(
    s: &common::Server,
    threads: usize,
    per_thread: usize,
    tag: &str,
) -> (Vec<String>, usize) {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let mut c = Client::new(s);
            let barrier = barrier.clone();
            let tag = tag.to_string();
            std::thread::spawn(move || {
                barrier.wait();
                let mut keys = Vec::new();
                let mut busy = 0;
                for i in 0..per_thread {
                    let r = c
                        .try_create(
                            &json!({"long_url": format!("https://example.com/{tag}/{t}/{i}")}),
                        )
                        .expect("create answered within the client timeout");
                    match r.status {
                        201 => keys.push(r.key()),
                        503 => {
                            r.assert_problem(503);
                            assert!(r.header("retry-after").is_some(), "503 without Retry-After");
                            busy += 1;
                        }
                        other => panic!("create answered {other}: {}", r.text()),
                    }
                }
                (keys, busy)
            })
        })
        .collect();
    let mut keys = Vec::new();
    let mut busy = 0;
    for h in handles {
        let (k, b) = h.join().expect("client thread");
        keys.extend(k);
        busy += b;
    }
    (keys, busy)
}

#[test]
fn tiny_segments_under_contention_on_every_core() {
    for len in ["1", "2", "3"] {
        let (_t, dir) = data_dir();
        let mut args = NO_RATE_LIMIT.to_vec();
        args.extend(["--segment-len", len]);
        let s = start(&dir, &args);
        let (keys, busy) = hammer(&s, 12, 12, &format!("tiny{len}"));
        let kg = keygen(&dir);
        let ids: Vec<u64> = keys.iter().map(|k| id_of(&kg, k)).collect();
        let ranges = audit_ranges(&dir);
        let n: u64 = len.parse().unwrap();
        assert!(
            ranges.iter().all(|r| r.len() <= n),
            "a range is longer than --segment-len {n}"
        );
        assert_ids_confirmed(&ids, &ranges);
        assert!(
            keys.len() >= (12 * 12) / 2,
            "segment len {len}: only {} of 144 creates succeeded ({busy} got 503)",
            keys.len()
        );
        // Every created link redirects to its own target (no two creates share a key).
        let uniq: HashSet<&String> = keys.iter().collect();
        assert_eq!(uniq.len(), keys.len(), "duplicate keys");
        let mut c = Client::new(&s);
        for k in keys.iter().take(40) {
            let r = c.redirect(k);
            assert_eq!(r.status, 302, "{k}");
        }
        eprintln!(
            "segment len {len}: {} creates, {busy} bounded 503s, {} ranges confirmed",
            keys.len(),
            ranges.len()
        );
    }
}

#[test]
fn kill9_with_buffered_ranges_never_reuses_ids() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &NO_RATE_LIMIT);
    let (keys1, busy) = hammer(&s, 8, 10, "before");
    assert_eq!(busy, 0);
    s.kill9();
    let kg = keygen(&dir);
    let ids1: Vec<u64> = keys1.iter().map(|k| id_of(&kg, k)).collect();
    let before = audit_ranges(&dir);
    assert_ids_confirmed(&ids1, &before);
    let audit_hw = before.iter().map(|r| r.end).max().unwrap();
    let hw = FileAuthority::open(&dir, 0).unwrap();
    let high_water = shards::alloc::Authority::high_water(&hw);
    drop(hw);
    assert!(
        high_water >= audit_hw,
        "authority {high_water} behind audit {audit_hw}"
    );
    // Ranges were buffered but mostly unused: the waste is visible in the audit.
    let confirmed: u64 = before.iter().map(|r| r.len()).sum();
    assert!(
        confirmed > ids1.len() as u64,
        "expected unused buffered IDs"
    );

    let s = start(&dir, &NO_RATE_LIMIT);
    let (keys2, busy) = hammer(&s, 8, 10, "after");
    assert_eq!(busy, 0);
    let ids2: Vec<u64> = keys2.iter().map(|k| id_of(&kg, k)).collect();
    for &id in &ids2 {
        assert!(
            id >= high_water,
            "ID {id} after the restart is below the pre-crash high-water {high_water}: reuse"
        );
    }
    let after = audit_ranges(&dir);
    assert_eq!(&after[..before.len()], &before[..], "audit history changed");
    for r in &after[before.len()..] {
        assert!(
            r.start >= high_water,
            "new range {r:?} below high-water {high_water}"
        );
    }
    let all: Vec<u64> = ids1.iter().chain(&ids2).copied().collect();
    assert_ids_confirmed(&all, &after);
}

fn create_some(s: &common::Server, n: usize) -> Vec<String> {
    let mut c = Client::new(s);
    (0..n)
        .map(|i| c.create_ok(&format!("https://example.com/rb/{i}"), None))
        .collect()
}

#[test]
fn rolled_back_authority_is_refused() {
    let alloc = |d: &Path| d.join(shards::alloc::ALLOC_DIR_NAME);
    // (1) Only the high-water file rolled back: the audit log proves it.
    let (t, dir) = data_dir();
    let args = ["--segment-len", "1"];
    let s = start(&dir, &args);
    create_some(&s, 2);
    // The backup is taken with the server stopped: a running allocator may prefetch between
    // the copies of its files, and such a torn backup is not the case under test (a flake).
    let _ = s.terminate();
    let old = std::fs::read(alloc(&dir).join("authority")).unwrap();
    let old_alloc = t.path().join("alloc-backup");
    copy_dir(&alloc(&dir), &old_alloc);
    let s = start(&dir, &args);
    create_some(&s, 10);
    let _ = s.terminate();
    std::fs::write(alloc(&dir).join("authority"), &old).unwrap();
    let err = match try_start(&dir, &args) {
        Ok(_) => panic!("started with a rolled-back authority file"),
        Err(e) => e,
    };
    assert!(
        err.contains("rolled back") && err.contains("authority"),
        "unclear refusal: {err}"
    );

    // (2) The whole alloc dir restored from the backup: the logs prove it.
    std::fs::remove_dir_all(alloc(&dir)).unwrap();
    copy_dir(&old_alloc, &alloc(&dir));
    let err = match try_start(&dir, &args) {
        Ok(_) => panic!("started with a restored (old) alloc dir"),
        Err(e) => e,
    };
    assert!(
        err.contains("rolled back") && err.contains("tables and logs"),
        "unclear refusal: {err}"
    );

    // (3) The authority deleted while the audit log remains.
    std::fs::remove_file(alloc(&dir).join("authority")).unwrap();
    let err = match try_start(&dir, &args) {
        Ok(_) => panic!("started without its authority file"),
        Err(e) => e,
    };
    assert!(err.contains("missing"), "unclear refusal: {err}");
}

/// Copies the files of `from` as a backup would, while the server may still be writing:
/// a temp file renamed away between the listing and the copy is not part of the state.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".tmp") {
            continue;
        }
        match std::fs::copy(e.path(), to.join(e.file_name())) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("copy {}: {err}", e.path().display()),
        }
    }
}

#[test]
fn exhaustion_at_the_last_id_is_explicit() {
    let (_t, dir) = data_dir();
    // A real data dir first: allocator state without a manifest is refused as damage.
    shards::DataDir::create(&dir, shards::placement::DEFAULT_SHARD_COUNT).unwrap();
    let auth = FileAuthority::initialize(&dir, KEY_SPACE - 3).unwrap();
    // IDs "were handed out" before: the secret they were issued under exists too.
    shards::keygen::load_or_create_secret(&dir).unwrap();
    assert_eq!(shards::alloc::Authority::high_water(&auth), KEY_SPACE - 3);
    drop(auth);
    let args = ["--segment-len", "1"];
    let s = start(&dir, &args);
    // Each core buffers its own ranges (an idle core preloads one), so the last IDs may sit
    // on either core: create through connections on both until every one says "exhausted".
    let mut conns: Vec<Client> = (0..16).map(|_| Client::new(&s)).collect();
    let kg = keygen(&dir);
    let mut ids = Vec::new();
    let mut all_exhausted = false;
    for round in 0..10 {
        let mut exhausted = 0;
        for (i, c) in conns.iter_mut().enumerate() {
            let r = c.create(&json!({"long_url": format!("https://example.com/last/{round}/{i}")}));
            match r.status {
                201 => ids.push(id_of(&kg, &r.key())),
                503 => {
                    let v = r.assert_problem(503);
                    assert!(
                        v["detail"].as_str().unwrap().contains("exhausted"),
                        "503 does not say the key space is exhausted: {v}"
                    );
                    exhausted += 1;
                }
                other => panic!("create near exhaustion answered {other}: {}", r.text()),
            }
        }
        if exhausted == conns.len() {
            all_exhausted = true;
            break;
        }
    }
    assert!(
        all_exhausted,
        "creates past the last ID must fail on every core"
    );
    ids.sort();
    assert_eq!(
        ids,
        vec![KEY_SPACE - 3, KEY_SPACE - 2, KEY_SPACE - 1],
        "the last IDs, up to KEY_SPACE - 1, must all be usable; audit: {:?}",
        read_audit(&dir).unwrap()
    );
    // Custom aliases still work on every connection.
    for (i, c) in conns.iter_mut().enumerate() {
        c.create_ok("https://example.com/alias", Some(&format!("still-ok-{i}")));
    }
    let ranges = audit_ranges(&dir);
    assert_ids_confirmed(&ids, &ranges);
    assert_eq!(ranges.last().unwrap().end, KEY_SPACE);
    drop(conns);
    let _ = s.terminate();
    // Still exhausted after a restart: nothing is reissued.
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let r = c.create(&json!({"long_url": "https://example.com/after"}));
    let v = r.assert_problem(503);
    assert!(v["detail"].as_str().unwrap().contains("exhausted"), "{v}");
    assert_eq!(c.redirect("still-ok-0").status, 302);
}

/// The authority fails (its temp file path is blocked by a directory, so every write fails):
/// creates go on from the ranges already buffered, then fail fast with 503; aliases and
/// redirects keep working; after the fault is gone a restart allocates again, above
/// everything confirmed before.
#[test]
fn authority_failure_uses_buffered_ranges_then_fails_fast() {
    let (_t, dir) = data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend(["--segment-len", "20"]);
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let kg = keygen(&dir);
    let first = c.create_ok("https://example.com/auth/0", None);
    let blocker = dir
        .join(shards::alloc::ALLOC_DIR_NAME)
        .join("authority.tmp");
    // The allocator may be writing that temp file right now (a prefetch the first create
    // started): wait for the rename to take it away, then block the path.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::fs::create_dir(&blocker) {
            Ok(()) => break,
            Err(e)
                if e.kind() == std::io::ErrorKind::AlreadyExists
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(2))
            }
            Err(e) => panic!("cannot block {}: {e}", blocker.display()),
        }
    }
    let mut ok = vec![first];
    let mut failed = 0;
    for i in 1..200 {
        let t0 = std::time::Instant::now();
        let r = c.create(&json!({"long_url": format!("https://example.com/auth/{i}")}));
        match r.status {
            201 => {
                assert_eq!(failed, 0, "a create succeeded after the buffer ran dry");
                ok.push(r.key());
            }
            503 => {
                r.assert_problem(503);
                assert!(r.header("retry-after").is_some());
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(3),
                    "503 took {:?}: not failing fast",
                    t0.elapsed()
                );
                failed += 1;
                if failed == 5 {
                    break;
                }
            }
            other => panic!(
                "create with a failing authority answered {other}: {}",
                r.text()
            ),
        }
    }
    assert_eq!(
        failed, 5,
        "creates never failed although the authority cannot allocate"
    );
    // At most the two buffered ranges (current + standby) of this core were used.
    assert!(
        ok.len() <= 40,
        "{} creates succeeded: more than the buffered ranges",
        ok.len()
    );
    let before = audit_ranges(&dir);
    let ids: Vec<u64> = ok.iter().map(|k| id_of(&kg, k)).collect();
    assert_ids_confirmed(&ids, &before);
    // Aliases and redirects are unaffected.
    c.create_ok("https://example.com/auth/alias", Some("auth-alias"));
    for k in &ok {
        assert_eq!(c.redirect(k).status, 302);
    }
    drop(c);
    s.kill9();
    std::fs::remove_dir(&blocker).unwrap();
    let hw = before.last().unwrap().end;
    let s = start(&dir, &args);
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/auth/after", None);
    assert!(
        id_of(&kg, &k) >= hw,
        "ID reused after the authority came back"
    );
}
