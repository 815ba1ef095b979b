//! The click store's files, one set per owner core, in `<data>/clicks/`:
//!
//! ```text
//! clicks/MANIFEST                    {"version":1,"generation":G,"cores":N}
//! clicks/g<G>/core-<c>.snap          "RCSNAP02" log_seq:u64le n:u32le (day:u32le seq:u64le)*n frame*
//! clicks/g<G>/core-<c>.<seq>.log     frame*                             (appended, fdatasync'd)
//! clicks/g<G>/core-<c>.day-<D>.<seq>.frz   a closed day, frozen (frozen.rs)
//! ```
//!
//! A core's store is the frozen days its snapshot lists, the snapshot's frames, and every log
//! numbered `>= log_seq`, replayed in order. (`RCSNAP01`, without the list, is still read.)
//! A snapshot freezes the closed days it is given first, then lists them; frozen files no
//! snapshot lists are deleted after the snapshot is durable, and at start.
//! Rotation (`ClickLog::snapshot`) opens log `seq + 1` first, then writes a snapshot naming
//! `seq + 1` atomically, then deletes older logs: a crash at any step leaves either the old
//! snapshot and every log after it, or the new one and the new log, so no record is applied
//! twice or lost. A core-count change folds every core's store into the new cores' snapshots
//! in generation `G + 1`, then switches the manifest: the same one-rename argument.
//!
//! Recovery refuses damage loudly: a bad frame anywhere but the torn tail of the newest log
//! stops the server with the file and offset. A torn tail (a frame that runs past the end, or
//! a bad frame with no valid frame after it) is what a crash mid-write leaves: it is cut off.

use super::codec::{self, DecodeError};
use super::{ClickStore, Record};
use crate::durable::{create_dir_durable, sync_dir, write_atomic};
use crate::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// The format version `MANIFEST` carries.
pub const CLICKS_FORMAT_VERSION: u32 = 1;

/// The most one `write` call of a click log or snapshot copies (a pause point between two):
/// about 30-60 µs of kernel copying here, so a core sharing the aggregator's CPU waits no
/// longer than that for it.
pub const CLICK_WRITE_CHUNK_BYTES: usize = 128 << 10;
const SNAP_MAGIC_V1: &[u8; 8] = b"RCSNAP01";
const SNAP_MAGIC: &[u8; 8] = b"RCSNAP02";

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    version: u32,
    generation: u64,
    cores: usize,
}

/// The click directory of a data dir, recovered.
pub struct ClickDir {
    gen_dir: PathBuf,
}

/// What recovery found, per core: the store and the number of the log to append to next.
pub struct Recovered {
    pub stores: Vec<ClickStore>,
    pub next_log: Vec<u64>,
    /// Torn tails cut off (bytes), for the start-up log line.
    pub torn_bytes: u64,
}

impl ClickDir {
    /// Opens (or creates) `<data>/clicks` for `cores` cores; `owner` says which core owns a
    /// key (used only when the core count changed and the stores are folded).
    pub fn open(
        data_dir: &Path,
        cores: usize,
        owner: impl Fn(&[u8]) -> usize,
    ) -> Result<(ClickDir, Recovered), Error> {
        assert!(cores > 0);
        let dir = data_dir.join("clicks");
        create_dir_durable(&dir).map_err(|e| Error::io(&dir, "create", e))?;
        let manifest = read_or_create_manifest(&dir, cores)?;
        let gen_dir = dir.join(format!("g{}", manifest.generation));
        create_dir_durable(&gen_dir).map_err(|e| Error::io(&gen_dir, "create", e))?;
        remove_other_generations(&dir, manifest.generation)?;
        let mut torn_bytes = 0;
        let mut stores = Vec::with_capacity(manifest.cores);
        let mut next_log = Vec::with_capacity(manifest.cores);
        for c in 0..manifest.cores {
            let (s, next, torn) = recover_core(&gen_dir, c)?;
            stores.push(s);
            next_log.push(next);
            torn_bytes += torn;
        }
        if manifest.cores == cores {
            let cd = ClickDir { gen_dir };
            return Ok((
                cd,
                Recovered {
                    stores,
                    next_log,
                    torn_bytes,
                },
            ));
        }
        let generation = manifest.generation + 1;
        let folded = fold_for_cores(&dir, generation, stores, cores, owner)?;
        let cd = ClickDir {
            gen_dir: dir.join(format!("g{generation}")),
        };
        let next_log = vec![0; cores];
        Ok((
            cd,
            Recovered {
                stores: folded,
                next_log,
                torn_bytes,
            },
        ))
    }

    /// Opens core `core`'s log number `seq` for appending (created empty).
    pub fn open_log(&self, core: usize, seq: u64) -> io::Result<ClickLog> {
        let path = log_path(&self.gen_dir, core, seq);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        sync_dir(&self.gen_dir)?;
        let len = file.metadata()?.len();
        Ok(ClickLog {
            dir: self.gen_dir.clone(),
            core,
            seq,
            file,
            len,
            durable_len: len,
        })
    }
}

/// A core's open click log: appended to, synced, and rotated by a snapshot.
pub struct ClickLog {
    dir: PathBuf,
    core: usize,
    seq: u64,
    file: File,
    len: u64,
    durable_len: u64,
}

impl ClickLog {
    /// Writes `bytes` (whole frames) and fdatasyncs them. On failure the file is cut back to
    /// its last durable length, so a retry writes the same records once.
    pub fn write_and_sync(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_and_sync_paced(bytes, &mut || {})
    }

    /// [`ClickLog::write_and_sync`] in [`CLICK_WRITE_CHUNK_BYTES`] writes with `pause` (the
    /// aggregator's yield point) between them: one `write` of a whole second's states copies
    /// megabytes into the page cache in the kernel, where the core that shares the CPU cannot
    /// take it back until the call returns.
    pub fn write_and_sync_paced(
        &mut self,
        bytes: &[u8],
        pause: &mut dyn FnMut(),
    ) -> io::Result<()> {
        let r =
            crate::durable::write_all_paced(&mut self.file, bytes, CLICK_WRITE_CHUNK_BYTES, pause)
                .and_then(|_| self.file.sync_data());
        match r {
            Ok(()) => {
                self.len += bytes.len() as u64;
                self.durable_len = self.len;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.durable_len);
                self.len = self.durable_len;
                Err(e)
            }
        }
    }

    /// Bytes in the current log.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Begins an incremental snapshot: the next log is created and written from now on; if
    /// closed days up to `freeze_through` are held, a whole snapshot freezes them into files
    /// first (see below). The snapshot's body is
    /// encoded while the store keeps changing (`ClickStore::snapshot_links_some`, then
    /// `snapshot_tail`) and handed to [`ClickLog::end_snapshot`] with the number returned.
    /// Until then a recovery reads the previous snapshot and every log, the new one included.
    pub fn begin_snapshot(
        &mut self,
        store: &mut ClickStore,
        freeze_through: Option<super::Day>,
    ) -> io::Result<u64> {
        // Freezing drops the frozen link-days from memory, and the next log holds only what
        // they gain later: until a snapshot lists the frozen file, a crash would recover the
        // older logs' states replaced by those later parts, not added to them (a click lost:
        // `frozen_days_match_a_map_oracle_through_restarts`). So a snapshot that freezes is a
        // whole one, which lists the file in the same step; that is once a day.
        if let Some(through) = freeze_through.filter(|&t| store.holds_clean_through(t)) {
            self.snapshot(store, Some(through))?;
        }
        let next = self.seq + 1;
        let path = log_path(&self.dir, self.core, next);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        sync_dir(&self.dir)?;
        self.file = file;
        self.seq = next;
        self.len = 0;
        self.durable_len = 0;
        Ok(next)
    }

    /// Ends the incremental snapshot begun as `next` with its encoded `body`: written (its
    /// header lists the frozen days as they are now), then the logs before `next` and the
    /// frozen files it does not list are removed. Every state in those logs is in `body` or
    /// newer in log `next` on: states replace, purges and removals since the beginning are in
    /// the new log.
    pub fn end_snapshot(&mut self, store: &ClickStore, next: u64, body: &[u8]) -> io::Result<u64> {
        if next != self.seq {
            return Err(io::Error::other(format!(
                "snapshot {next} ended after log {} began",
                self.seq
            )));
        }
        let mut bytes = snapshot_header(next, store);
        bytes.extend_from_slice(body);
        let n = write_snapshot_bytes(&self.dir, self.core, store, &bytes)?;
        for seq in log_seqs(&self.dir, self.core)? {
            if seq < next {
                fs::remove_file(log_path(&self.dir, self.core, seq))?;
            }
        }
        remove_unlisted_frozen(&self.dir, self.core, &store.frozen().listed())?;
        sync_dir(&self.dir)?;
        Ok(n)
    }

    /// Replaces every log so far with a snapshot of `store` (which holds at least what they
    /// hold: records are states, so what it holds beyond them is simply newer), first freezing
    /// its closed days up to `freeze_through` into files (`ClickStore::freeze`). Returns the
    /// snapshot's size.
    pub fn snapshot(
        &mut self,
        store: &mut ClickStore,
        freeze_through: Option<super::Day>,
    ) -> io::Result<u64> {
        let next = self.seq + 1;
        let path = log_path(&self.dir, self.core, next);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        sync_dir(&self.dir)?;
        if let Some(through) = freeze_through {
            store
                .freeze(&self.dir, self.core, through, next)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        let bytes = write_snapshot(&self.dir, self.core, next, store)?;
        for seq in log_seqs(&self.dir, self.core)? {
            if seq < next {
                fs::remove_file(log_path(&self.dir, self.core, seq))?;
            }
        }
        remove_unlisted_frozen(&self.dir, self.core, &store.frozen().listed())?;
        sync_dir(&self.dir)?;
        self.file = file;
        self.seq = next;
        self.len = 0;
        self.durable_len = 0;
        Ok(bytes)
    }
}

fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), Error> {
    let bytes = serde_json::to_vec(m).expect("a manifest serializes");
    write_atomic(dir, "MANIFEST", &bytes, 0o644)
        .map_err(|e| Error::io(dir.join("MANIFEST"), "write", e))
}

fn remove_other_generations(dir: &Path, keep: u64) -> Result<(), Error> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(g) = name.strip_prefix('g').and_then(|g| g.parse::<u64>().ok()) {
            if g != keep {
                fs::remove_dir_all(e.path()).map_err(|err| Error::io(e.path(), "remove", err))?;
            }
        }
    }
    Ok(())
}

fn log_path(dir: &Path, core: usize, seq: u64) -> PathBuf {
    dir.join(format!("core-{core}.{seq}.log"))
}

fn snap_name(core: usize) -> String {
    format!("core-{core}.snap")
}

fn log_seqs(dir: &Path, core: usize) -> io::Result<Vec<u64>> {
    let prefix = format!("core-{core}.");
    let mut v = Vec::new();
    for e in fs::read_dir(dir)?.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(seq) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".log"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            v.push(seq);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// Deletes core `core`'s frozen files that `listed` does not name (replaced, dropped by
/// retention, or written by a snapshot that never became durable).
fn remove_unlisted_frozen(dir: &Path, core: usize, listed: &[(super::Day, u64)]) -> io::Result<()> {
    for e in fs::read_dir(dir)?.flatten() {
        let name = e.file_name();
        if let Some(id) = super::frozen::parse_name(core, &name.to_string_lossy()) {
            if !listed.contains(&id) {
                fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}

fn write_snapshot(dir: &Path, core: usize, log_seq: u64, store: &ClickStore) -> io::Result<u64> {
    let mut bytes = snapshot_header(log_seq, store);
    for r in store.to_records() {
        codec::encode(&r, &mut bytes);
    }
    write_snapshot_bytes(dir, core, store, &bytes)
}

/// A snapshot's header: its magic, the first log after it, the frozen days it lists.
fn snapshot_header(log_seq: u64, store: &ClickStore) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4096);
    bytes.extend_from_slice(SNAP_MAGIC);
    bytes.extend_from_slice(&log_seq.to_le_bytes());
    let listed = store.frozen().listed();
    bytes.extend_from_slice(&(listed.len() as u32).to_le_bytes());
    for (day, seq) in &listed {
        bytes.extend_from_slice(&day.to_le_bytes());
        bytes.extend_from_slice(&seq.to_le_bytes());
    }
    bytes
}

fn write_snapshot_bytes(
    dir: &Path,
    core: usize,
    store: &ClickStore,
    bytes: &[u8],
) -> io::Result<u64> {
    crate::durable::write_atomic_paced(
        dir,
        &snap_name(core),
        bytes,
        0o644,
        CLICK_WRITE_CHUNK_BYTES,
        &mut || store.pause_point(),
    )?;
    Ok(bytes.len() as u64)
}

/// The click manifest of `dir`, or a new one (generation 1, `cores`) if there is none; a
/// manifest of another format is refused.
fn read_or_create_manifest(dir: &Path, cores: usize) -> Result<Manifest, Error> {
    let mpath = dir.join("MANIFEST");
    match fs::read(&mpath) {
        Ok(b) => {
            let m: Manifest = serde_json::from_slice(&b).map_err(|e| Error::Corrupt {
                path: mpath.clone(),
                detail: format!("not a click manifest: {e}"),
            })?;
            if m.version != CLICKS_FORMAT_VERSION {
                return Err(Error::Corrupt {
                    path: mpath,
                    detail: format!(
                        "click format version {} (this build reads {CLICKS_FORMAT_VERSION})",
                        m.version
                    ),
                });
            }
            Ok(m)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let m = Manifest {
                version: CLICKS_FORMAT_VERSION,
                generation: 1,
                cores,
            };
            create_dir_durable(&dir.join("g1")).map_err(|e| Error::io(dir, "create", e))?;
            write_manifest(dir, &m)?;
            Ok(m)
        }
        Err(e) => Err(Error::io(&mpath, "read", e)),
    }
}

/// The core count changed: folds every store into the new cores' snapshots, written as
/// generation `generation`, which the manifest then names (the older ones go).
fn fold_for_cores(
    dir: &Path,
    generation: u64,
    stores: Vec<ClickStore>,
    cores: usize,
    owner: impl Fn(&[u8]) -> usize,
) -> Result<Vec<ClickStore>, Error> {
    let mut all = ClickStore::default();
    let mut not_found = std::collections::BTreeMap::new();
    for mut s in stores {
        s.thaw(); // Frozen days are re-split with the rest, and frozen again later.
        for (d, n) in s.take_not_found() {
            *not_found.entry(d).or_insert(0) += n;
        }
        all.absorb(s);
    }
    let mut folded: Vec<ClickStore> = (0..cores).map(|_| ClickStore::default()).collect();
    for (c, store) in folded.iter_mut().enumerate() {
        *store = all.split_off_by(|k| owner(k) != c);
    }
    for (day, count) in not_found {
        folded[0].apply(&Record::NotFound { day, count });
    }
    let new_dir = dir.join(format!("g{generation}"));
    if new_dir.exists() {
        fs::remove_dir_all(&new_dir).map_err(|e| Error::io(&new_dir, "remove", e))?;
    }
    create_dir_durable(&new_dir).map_err(|e| Error::io(&new_dir, "create", e))?;
    for (c, s) in folded.iter().enumerate() {
        write_snapshot(&new_dir, c, 0, s).map_err(|e| Error::io(&new_dir, "write snapshot", e))?;
    }
    let m = Manifest {
        version: CLICKS_FORMAT_VERSION,
        generation,
        cores,
    };
    write_manifest(dir, &m)?;
    remove_other_generations(dir, generation)?;
    Ok(folded)
}

/// Rebuilds core `core`'s store; returns it, the next log number, and torn bytes cut off.
fn recover_core(dir: &Path, core: usize) -> Result<(ClickStore, u64, u64), Error> {
    let mut store = ClickStore::default();
    let (first_log, listed) = read_snapshot(dir, core, &mut store)?;
    let seqs: Vec<u64> = log_seqs(dir, core)
        .map_err(|e| Error::io(dir, "list", e))?
        .into_iter()
        .filter(|&s| s >= first_log)
        .collect();
    let mut torn = 0;
    for (i, &seq) in seqs.iter().enumerate() {
        let newest = i + 1 == seqs.len();
        torn += replay_log(&log_path(dir, core, seq), newest, &mut store)?;
    }
    remove_unlisted_frozen(dir, core, &listed)
        .map_err(|e| Error::io(dir, "remove unlisted frozen days", e))?;
    let next = seqs.last().map_or(first_log, |s| s + 1);
    Ok((store, next, torn))
}

/// Reads core `core`'s snapshot (if any) into `store`, its frozen days opened; returns the
/// first log it does not cover and the frozen days it lists (day, sequence).
fn read_snapshot(
    dir: &Path,
    core: usize,
    store: &mut ClickStore,
) -> Result<(u64, Vec<(u32, u64)>), Error> {
    let spath = dir.join(snap_name(core));
    let mut listed = Vec::new();
    let b = match fs::read(&spath) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, listed)),
        Err(e) => return Err(Error::io(&spath, "read", e)),
    };
    let v2 = b.len() >= 20 && &b[..8] == SNAP_MAGIC;
    if !v2 && (b.len() < 16 || &b[..8] != SNAP_MAGIC_V1) {
        return Err(Error::Corrupt {
            path: spath,
            detail: "not a click snapshot (bad magic)".into(),
        });
    }
    let first_log = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    let mut pos = 16;
    if v2 {
        let n = u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")) as usize;
        pos = 20 + 12 * n;
        if b.len() < pos {
            return Err(corrupt(&spath, 16, "the frozen-day list runs past the end"));
        }
        let mut days = Vec::with_capacity(n);
        for i in 0..n {
            let at = 20 + 12 * i;
            let day = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
            let seq = u64::from_le_bytes(b[at + 4..at + 12].try_into().expect("8 bytes"));
            listed.push((day, seq));
            let path = dir.join(super::frozen::file_name(core, day, seq));
            if !path.exists() {
                return Err(Error::Corrupt {
                    path,
                    detail: format!("missing: {} lists this frozen click day", spath.display()),
                });
            }
            days.push(super::frozen::FrozenDay::open(&path, day, seq)?);
        }
        store.set_frozen(days);
    }
    while pos < b.len() {
        match codec::decode(&b[pos..]) {
            Ok(Some((r, n))) => {
                store.apply(&r);
                pos += n;
            }
            Ok(None) => return Err(corrupt(&spath, pos, "the snapshot ends mid-record")),
            Err(e) => return Err(corrupt(&spath, pos, &e.to_string())),
        }
    }
    Ok((first_log, listed))
}

/// Replays one click log into `store`; returns the bytes of a torn tail cut off. Only the
/// `newest` log may end torn; damage anywhere else is refused.
fn replay_log(path: &Path, newest: bool, store: &mut ClickStore) -> Result<u64, Error> {
    let b = fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    let mut pos = 0;
    while pos < b.len() {
        match codec::decode(&b[pos..]) {
            Ok(Some((r, n))) => {
                store.apply(&r);
                pos += n;
            }
            Ok(None) if newest => break,
            Err(_) if newest && !valid_frame_after(&b, pos) => break,
            Ok(None) => return Err(corrupt(path, pos, "an older log ends mid-record")),
            Err(e) => return Err(corrupt(path, pos, &describe(&e))),
        }
    }
    if pos == b.len() {
        return Ok(0);
    }
    // The torn tail of the newest log: never acknowledged as durable by a sync that covered
    // it whole. Cut it so the next log starts clean.
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))?;
    f.set_len(pos as u64)
        .map_err(|e| Error::io(path, "truncate", e))?;
    f.sync_all().map_err(|e| Error::io(path, "sync", e))?;
    Ok((b.len() - pos) as u64)
}

fn describe(e: &DecodeError) -> String {
    format!("{e} (damage in the middle of the log, not a torn tail)")
}

/// Whether any offset after `pos` starts a valid frame: then the bad frame at `pos` is damage
/// inside the log, not its torn end.
fn valid_frame_after(b: &[u8], pos: usize) -> bool {
    (pos + 1..b.len()).any(|p| matches!(codec::decode(&b[p..]), Ok(Some(_))))
}

fn corrupt(path: &Path, pos: usize, detail: &str) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        detail: format!("at byte {pos}: {detail}"),
    }
}
