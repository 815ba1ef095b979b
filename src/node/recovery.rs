//! Start-up recovery of the write path: replay each core's append log over the tables (into
//! that core's memtable), open the logs for appending, and bring up the ID allocator.
//!
//! Logs are per writer core (`logs/wal-<core>.log`) and record sequence numbers only order
//! records within one log. Within a run a key has one owner, so its records are all in one log.
//! If the data dir was last served with a different core count, ownership moved, so the logs
//! are first folded into the tables (`shards::compact::fold_records`) and removed; `logs/CORES`
//! records the core count the current logs were written with.

use crate::api::idempotency::{IdemRecord, IdemScope, RequestHash};
use crate::base::key::InlineKey;
use crate::mesh::router::Router;
use crate::mesh::LinkInfo;
use crate::owner::writes::MemEntry;
use anyhow::Context;
use shards::datadir::DataDir;
use shards::log::{recover, wal_path, LogOp, LogRecord, LogWriter, LOG_DIR_NAME};
use shards::table::Table;
use std::collections::HashMap;
use std::os::fd::{IntoRawFd, RawFd};
use std::path::Path;

/// File in `logs/` naming the core count the logs were written with.
pub const CORES_FILE: &str = "CORES";

/// One core's recovered write state.
pub struct CoreLog {
    pub memtable: HashMap<InlineKey, MemEntry, ahash::RandomState>,
    pub idem: Vec<(IdemScope, IdemRecord)>,
    pub writer: LogWriter,
    pub fd: RawFd,
    /// A `wal-<core>.folding` log from an interrupted compaction was replayed: compact again.
    pub folding: bool,
}

/// A log file found in `logs/`: its writer core, 0 for a folding log (older) or 1 for the live
/// one, and its path. Sorted, they are in replay order.
type LogFile = (u32, u8, std::path::PathBuf);

/// Each log file's recovery, by (writer core, 0 = folding / 1 = live).
type PerFile = HashMap<(u32, u8), shards::log::Recovery>;

/// Recovers every core's log; returns them and the highest generated ID the logs mention.
pub fn recover_logs(
    dir: &DataDir,
    router: &Router,
    salvage: bool,
    accept_data_loss: bool,
    now_s: u64,
    faults: crate::owner::writes::Faults,
) -> anyhow::Result<(Vec<CoreLog>, u64)> {
    let cores = router.cores();
    let logs_dir = dir.path().join(LOG_DIR_NAME);
    shards::durable::create_dir_durable(&logs_dir)
        .with_context(|| format!("creating {}", logs_dir.display()))?;
    let previous_cores = read_cores(&logs_dir)?;
    let existing = list_logs(&logs_dir)?;
    check_logs_present(&logs_dir, previous_cores, &existing, accept_data_loss)?;
    let (mut per_file, max_id) = read_logs(&existing, salvage)?;
    let any_records = per_file.values().any(|r| !r.records.is_empty());
    // Without `CORES` the core count the logs were written with is unknown: fold, which is
    // idempotent, rather than guess (a wrong guess puts keys on cores that do not own them).
    let moved = previous_cores.is_none_or(|p| p != cores)
        || existing.iter().any(|(n, _, _)| *n as usize >= cores);
    if any_records && moved {
        let before = previous_cores.map_or("?".to_string(), |p| p.to_string());
        per_file = fold_moved_logs(dir, router, &existing, per_file, now_s, faults, &before)?;
    }
    let mut out = Vec::with_capacity(cores);
    for core in 0..cores {
        out.push(open_core_log(dir, router, core, &mut per_file)?);
    }
    // One directory fsync makes every log file created above durable.
    shards::durable::sync_dir(&logs_dir)
        .with_context(|| format!("syncing {}", logs_dir.display()))?;
    // Only now, with every core's log on disk: `CORES` promises those logs exist.
    if previous_cores != Some(cores) {
        shards::durable::write_atomic(
            &logs_dir,
            CORES_FILE,
            format!("{cores}\n").as_bytes(),
            0o644,
        )
        .with_context(|| format!("writing {}/{CORES_FILE}", logs_dir.display()))?;
    }
    // Idempotency records belong to their scope's owner, wherever they were logged.
    let mut all_idem = Vec::new();
    for log in &mut out {
        all_idem.append(&mut log.idem);
    }
    for (scope, rec) in all_idem {
        let owner = router
            .owner(crate::api::idempotency::scope_string(&scope).as_bytes())
            .core;
        out[owner].idem.push((scope, rec));
    }
    Ok((out, max_id))
}

/// The log files in `logs/`, in replay order; removes a fold's unfinished carry file.
fn list_logs(logs_dir: &Path) -> anyhow::Result<Vec<LogFile>> {
    let mut existing: Vec<LogFile> = Vec::new();
    for e in
        std::fs::read_dir(logs_dir).with_context(|| format!("listing {}", logs_dir.display()))?
    {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(rest) = name.strip_prefix("wal-") else {
            continue;
        };
        if rest.ends_with(&format!(".{CARRY_SUFFIX}")) {
            // Left by a crash inside a fold before its rename: never read, always re-derived
            // from the logs (see `carry_idempotency`).
            std::fs::remove_file(&p)
                .with_context(|| format!("removing unfinished {}", p.display()))?;
            continue;
        }
        let (n, order) = if let Some(n) = rest.strip_suffix(".log") {
            (n, 1)
        } else if let Some(n) =
            rest.strip_suffix(&format!(".{}", crate::owner::fold::FOLDING_SUFFIX))
        {
            (n, 0)
        } else {
            continue;
        };
        if let Ok(n) = n.parse::<u32>() {
            existing.push((n, order, p));
        }
    }
    existing.sort();
    Ok(existing)
}

/// Recovers each log file (a torn tail cut, `--salvage` skipping corrupt bytes); also the
/// highest generated ID their links carry.
fn read_logs(existing: &[LogFile], salvage: bool) -> anyhow::Result<(PerFile, u64)> {
    let mut per_file = PerFile::new();
    let mut max_id = 0;
    for (n, order, path) in existing {
        let r =
            recover(path, salvage).with_context(|| format!("recovering log {}", path.display()))?;
        if let Some(off) = r.truncated_from {
            eprintln!(
                "log {}: torn or corrupt tail truncated at offset {off} (valid length {})",
                path.display(),
                r.valid_len
            );
        }
        for (a, b) in &r.salvaged {
            eprintln!(
                "log {}: --salvage skipped corrupt bytes [{a}, {b})",
                path.display()
            );
        }
        if let Some(w) = r.writer {
            anyhow::ensure!(
                w == *n,
                "log {} says it was written by core {w}",
                path.display()
            );
        }
        for rec in &r.records {
            if let Some(l) = rec.op.link() {
                max_id = max_id.max(l.id);
            }
        }
        per_file.insert((*n, *order), r);
    }
    Ok((per_file, max_id))
}

/// Ownership moved (another core count): folds every log into the tables (writer order is
/// irrelevant: within one run each key was in exactly one log), carries the idempotency
/// records to their scopes' new owners, removes the old logs; returns the new logs' recovery.
fn fold_moved_logs(
    dir: &DataDir,
    router: &Router,
    existing: &[LogFile],
    per_file: PerFile,
    now_s: u64,
    faults: crate::owner::writes::Faults,
    before: &str,
) -> anyhow::Result<PerFile> {
    let cores = router.cores();
    let logs_dir = dir.path().join(LOG_DIR_NAME);
    let all: Vec<LogRecord> = existing
        .iter()
        .flat_map(|(n, o, _)| per_file[&(*n, *o)].records.iter().cloned())
        .collect();
    let stats = shards::compact::fold_records(dir, &all, now_s)
        .context("folding logs into tables after a core-count change")?;
    // Idempotency records exist only in these logs: carry the ones still within retention
    // to their scope's new owner before the logs go.
    let (carried, replaced) = carry_idempotency(dir, router, &all, now_s)?;
    if faults.abort_after_carry {
        eprintln!("fault injection: aborting after carrying {carried} idempotency records");
        std::process::abort();
    }
    eprintln!(
        "core count changed ({before} -> {cores}): folded {} logged records into {} shard \
         tables, carried {carried} idempotency records",
        all.len(),
        stats.shards_written
    );
    // Logs the carried records were renamed over are new; every other old log goes.
    for (_, _, p) in existing {
        if !replaced.contains(p) {
            std::fs::remove_file(p)
                .with_context(|| format!("removing folded log {}", p.display()))?;
        }
    }
    shards::durable::sync_dir(&logs_dir)?;
    // The new logs hold only the carried records; read them like any log.
    let mut fresh = PerFile::new();
    for core in 0..cores as u32 {
        let path = wal_path(dir.path(), core);
        if path.exists() {
            let r = recover(&path, false)
                .with_context(|| format!("recovering log {}", path.display()))?;
            fresh.insert((core, 1), r);
        }
    }
    Ok(fresh)
}

/// Replays `core`'s folding log (if any) and live log into its memtable, and opens its live
/// log for appending.
fn open_core_log(
    dir: &DataDir,
    router: &Router,
    core: usize,
    per_file: &mut PerFile,
) -> anyhow::Result<CoreLog> {
    let folding = per_file.remove(&(core as u32, 0));
    let rec = per_file.remove(&(core as u32, 1)).unwrap_or_default();
    let mut memtable: HashMap<InlineKey, MemEntry, ahash::RandomState> = HashMap::default();
    let mut idem = Vec::new();
    let mut max_seq = rec.max_seq;
    if let Some(f) = &folding {
        max_seq = max_seq.max(f.max_seq);
        for r in &f.records {
            apply(router, core, r, &mut memtable, &mut idem);
        }
    }
    for r in &rec.records {
        apply(router, core, r, &mut memtable, &mut idem);
    }
    let path = wal_path(dir.path(), core as u32);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening log {}", path.display()))?;
    let writer = LogWriter::new(core as u32, rec.valid_len, max_seq + 1);
    Ok(CoreLog {
        memtable,
        idem,
        writer,
        fd: file.into_raw_fd(),
        folding: folding.is_some(),
    })
}

fn apply(
    router: &Router,
    core: usize,
    r: &LogRecord,
    memtable: &mut HashMap<InlineKey, MemEntry, ahash::RandomState>,
    idem: &mut Vec<(IdemScope, IdemRecord)>,
) {
    // Fleet records: the newest version of a key wins, in whatever order they were logged.
    let version = r.op.version();
    let stale = |key: &str, memtable: &HashMap<InlineKey, MemEntry, ahash::RandomState>| {
        version != 0
            && InlineKey::new(key.as_bytes())
                .and_then(|k| memtable.get(&k))
                .is_some_and(|e| e.version() >= version)
    };
    match &r.op {
        LogOp::Put(l) | LogOp::PutWithIdem { link: l, .. } | LogOp::FleetPut { link: l, .. } => {
            let Some(k) = InlineKey::new(l.key.as_bytes()) else {
                return;
            };
            match &r.op {
                LogOp::PutWithIdem {
                    scope,
                    request_hash,
                    ..
                }
                | LogOp::FleetPut {
                    idem: Some((scope, request_hash)),
                    ..
                } => push_idem(idem, scope, request_hash, &l.key, creation_of(l)),
                _ => {}
            }
            if stale(&l.key, memtable) {
                return;
            }
            debug_assert_eq!(router.owner(l.key.as_bytes()).core, core);
            let info = LinkInfo::from_log(k, l);
            memtable.insert(
                k,
                MemEntry::Live {
                    info,
                    id: l.id,
                    version,
                },
            );
        }
        LogOp::Delete { key } | LogOp::FleetDelete { key, .. } => {
            if stale(key, memtable) {
                return;
            }
            if let Some(k) = InlineKey::new(key.as_bytes()) {
                memtable.insert(k, MemEntry::Deleted { version });
            }
        }
        LogOp::IdemRecord {
            scope,
            request_hash,
            response_key,
            created_at_s,
            created_tag,
        } => push_idem(
            idem,
            scope,
            request_hash,
            response_key,
            (*created_at_s, *created_tag),
        ),
    }
}

/// Every core `CORES` names wrote a log (`wal-<n>.log`, or `wal-<n>.folding` mid-compaction):
/// one that is gone took acknowledged writes with it. Refused, naming the file, unless the
/// operator accepts the loss.
fn check_logs_present(
    logs_dir: &std::path::Path,
    previous_cores: Option<usize>,
    existing: &[(u32, u8, std::path::PathBuf)],
    accept_data_loss: bool,
) -> anyhow::Result<()> {
    let Some(n) = previous_cores else {
        return Ok(());
    };
    let missing: Vec<String> = (0..n as u32)
        .filter(|c| !existing.iter().any(|(w, _, _)| w == c))
        .map(|c| format!("{}/wal-{c}.log", LOG_DIR_NAME))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if accept_data_loss {
        eprintln!(
            "--accept-data-loss: {} missing; the writes logged there are lost",
            missing.join(", ")
        );
        return Ok(());
    }
    anyhow::bail!(
        "{}: {} missing ({}/{CORES_FILE} says {n} cores wrote logs); refusing to start without the writes logged there. Restore from a backup, or start with --accept-data-loss",
        logs_dir.parent().unwrap_or(logs_dir).display(),
        missing.join(", "),
        LOG_DIR_NAME
    )
}

/// Collects an idempotency record; `recover_logs` hands it to the scope's owner core, which
/// may differ from the core whose log held it (a `PutWithIdem` lives in the key owner's log).
fn push_idem(
    idem: &mut Vec<(IdemScope, IdemRecord)>,
    scope: &str,
    request_hash: &[u8; 32],
    key: &str,
    (created_at_s, created_tag): (u64, u32),
) {
    if let Some(s) = crate::api::idempotency::parse_scope(scope) {
        idem.push((
            s,
            IdemRecord {
                request_hash: RequestHash(*request_hash),
                key: key.to_string(),
                created_at_s,
                created_tag,
            },
        ));
    }
}

/// A logged link's creation: its second and tag (`shards::link::CREATION_TAG_MASK`).
fn creation_of(l: &shards::log::LinkFields) -> (u64, u32) {
    (l.created_at_s, shards::link::creation_tag(l.flags))
}

/// An idempotency record being carried: request hash, the key it created, its creation.
type Carried<'a> = (&'a [u8; 32], &'a str, (u64, u32));

/// Suffix of a log being written with carried idempotency records (see `carry_idempotency`).
const CARRY_SUFFIX: &str = "carry";

/// Writes the idempotency records of `records` that are still within retention, the latest
/// per scope, as `IdemRecord`s into a fresh log per owner core (under the current core count),
/// made durable, then renamed over `wal-<core>.log` (whose links are already folded into the
/// tables). A crash part way leaves old logs beside new ones and the old core count on disk,
/// so the next start folds and carries again: the new logs' records are part of its input.
/// Returns how many records were carried and the live log paths they now occupy.
fn carry_idempotency(
    dir: &DataDir,
    router: &Router,
    records: &[LogRecord],
    now_s: u64,
) -> anyhow::Result<(usize, Vec<std::path::PathBuf>)> {
    use crate::api::idempotency::IDEMPOTENCY_RETENTION_S;
    let mut latest: HashMap<&str, Carried<'_>> = HashMap::new();
    for r in records {
        let (scope, hash, key, at) = match &r.op {
            LogOp::PutWithIdem {
                link,
                scope,
                request_hash,
            } => (scope, request_hash, &link.key, creation_of(link)),
            LogOp::IdemRecord {
                scope,
                request_hash,
                response_key,
                created_at_s,
                created_tag,
            } => (
                scope,
                request_hash,
                response_key,
                (*created_at_s, *created_tag),
            ),
            _ => continue,
        };
        if at.0.saturating_add(IDEMPOTENCY_RETENTION_S) <= now_s {
            continue;
        }
        let e = latest.entry(scope.as_str()).or_insert((hash, key, at));
        if at.0 >= e.2 .0 {
            *e = (hash, key, at);
        }
    }
    let mut per_core: Vec<Vec<(&str, Carried<'_>)>> = vec![Vec::new(); router.cores()];
    for (&scope, &rec) in &latest {
        per_core[router.owner(scope.as_bytes()).core].push((scope, rec));
    }
    let logs_dir = dir.path().join(LOG_DIR_NAME);
    let mut written = Vec::new();
    for (core, recs) in per_core.iter().enumerate() {
        if recs.is_empty() {
            continue;
        }
        let live = wal_path(dir.path(), core as u32);
        let tmp = live.with_extension(CARRY_SUFFIX);
        let (mut log, _) = shards::log::blocking::BlockingLog::open(&tmp, core as u32, false)
            .with_context(|| format!("creating {}", tmp.display()))?;
        for &(scope, (hash, key, at)) in recs {
            let op = LogOp::IdemRecord {
                scope: scope.to_string(),
                request_hash: *hash,
                response_key: key.to_string(),
                created_at_s: at.0,
                created_tag: at.1,
            };
            log.append(router.owner(scope.as_bytes()).shard, &op)
                .with_context(|| format!("writing {}", tmp.display()))?;
        }
        log.commit()
            .with_context(|| format!("writing {}", tmp.display()))?;
        written.push((tmp, live));
    }
    shards::durable::sync_dir(&logs_dir)?;
    for (tmp, live) in &written {
        std::fs::rename(tmp, live)
            .with_context(|| format!("renaming {} to {}", tmp.display(), live.display()))?;
    }
    shards::durable::sync_dir(&logs_dir)?;
    Ok((
        latest.len(),
        written.into_iter().map(|(_, live)| live).collect(),
    ))
}

fn read_cores(logs_dir: &Path) -> anyhow::Result<Option<usize>> {
    let p = logs_dir.join(CORES_FILE);
    match std::fs::read_to_string(&p) {
        Ok(s) => {
            Ok(Some(s.trim().parse().with_context(|| {
                format!("{} is not a number", p.display())
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// Opens and validates every shard table, one thread per core's share.
pub fn open_tables(dir: &DataDir, router: &Router) -> anyhow::Result<Vec<Option<Table>>> {
    let shard_count = router.shard_count();
    let cores = router.cores();
    type Opened = anyhow::Result<Vec<(u32, Option<Table>)>>;
    let results: Vec<Opened> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cores)
            .map(|c| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for shard in router.shards_of_core(c) {
                        let t = dir.open_table(shard)?;
                        out.push((shard, t));
                    }
                    Ok(out)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("table opener panicked"))
            .collect()
    });
    let mut tables: Vec<Option<Table>> = (0..shard_count).map(|_| None).collect();
    for r in results {
        for (shard, t) in r? {
            tables[shard as usize] = t;
        }
    }
    Ok(tables)
}
