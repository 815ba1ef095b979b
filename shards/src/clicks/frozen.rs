//! Closed days frozen into immutable files: one per owner core and day, in the click
//! generation's directory, so the snapshot and the memory of a core hold only the days still
//! open (and late clicks of frozen ones), however long the retention.
//!
//! ```text
//! core-<c>.day-<D>.<seq>.frz
//!   0   8  magic          "RCFRZ001"
//!   8   4  day            D (days since 1970-01-01)
//!  12   4  n              link-days in the file
//!  16   4  body_crc       CRC-32C of everything after the header
//!  20   4  reserved       0
//!  24  4n  offsets        where each frame starts, relative to the frames (u32le)
//!  ..      frames         codec.rs state frames of day D, keys strictly increasing
//! ```
//!
//! A file is written once (temp file, fsync, rename, directory fsync) at a snapshot whose log
//! number is `seq`, and listed by that snapshot; a file no snapshot lists (a crash before the
//! snapshot, or replaced since) is deleted at the next start or snapshot. Opening checks the
//! header, the body CRC and every frame, so damage is refused at start, naming the file.
//!
//! Purges cannot rewrite immutable files: a purge of a key hides its entries in every file
//! that existed when it happened (`purged`: key to the highest `seq` then), and a file written
//! later (a re-freeze) leaves them out. A late click of a frozen day goes to memory as an
//! overlay and is added to the file's figures when read; the next snapshot freezes the day
//! again, into a new file that replaces the old.

use super::codec::{self, FRAME_HEADER_BYTES};
use super::{Day, LinkDay, Record, ShortKey};
use crate::error::Error;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whole days after its end a day is frozen: a day `D` is frozen at the first snapshot once
/// `today > D + FREEZE_AFTER_DAYS`. Clicks reach the store within seconds (the flush and sync
/// intervals); this leaves a full day for an aggregator that fell behind, and later ones still
/// count (as an overlay).
pub const FREEZE_AFTER_DAYS: Day = 1;

/// The last day a snapshot taken on `today` freezes (`None` near the epoch: none).
pub fn freeze_through(today: Day) -> Option<Day> {
    today.checked_sub(1 + FREEZE_AFTER_DAYS)
}

const MAGIC: &[u8; 8] = b"RCFRZ001";
const HEADER_BYTES: usize = 24;

/// The file name of core `core`'s frozen day `day` written at snapshot `seq`.
pub fn file_name(core: usize, day: Day, seq: u64) -> String {
    format!("core-{core}.day-{day}.{seq}.frz")
}

/// `(day, seq)` of a frozen file of core `core`, from its name.
pub fn parse_name(core: usize, name: &str) -> Option<(Day, u64)> {
    let rest = name
        .strip_prefix(&format!("core-{core}.day-"))?
        .strip_suffix(".frz")?;
    let (day, seq) = rest.split_once('.')?;
    Some((day.parse().ok()?, seq.parse().ok()?))
}

/// One frozen day of one core, mapped.
pub struct FrozenDay {
    day: Day,
    seq: u64,
    n: usize,
    map: memmap2::Mmap,
}

impl std::fmt::Debug for FrozenDay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FrozenDay(day {}, seq {}, {} link-days)",
            self.day, self.seq, self.n
        )
    }
}

impl FrozenDay {
    /// Writes `entries` (sorted by key, strictly) as day `day` of core `core` at `seq`, durably.
    pub fn write<'a>(
        dir: &Path,
        core: usize,
        day: Day,
        seq: u64,
        entries: impl IntoIterator<Item = (&'a [u8], &'a LinkDay)>,
    ) -> std::io::Result<PathBuf> {
        let (mut offsets, mut frames) = (Vec::new(), Vec::new());
        let mut last: Option<&[u8]> = None;
        for (key, l) in entries {
            assert!(last.is_none_or(|p| p < key), "frozen entries sorted by key");
            last = Some(key);
            offsets.extend_from_slice(&(frames.len() as u32).to_le_bytes());
            codec::encode_state(key, day, l, &mut frames);
        }
        let n = (offsets.len() / 4) as u32;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + offsets.len() + frames.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&day.to_le_bytes());
        bytes.extend_from_slice(&n.to_le_bytes());
        let mut crc = crc32c::crc32c(&offsets);
        crc = crc32c::crc32c_append(crc, &frames);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&offsets);
        bytes.extend_from_slice(&frames);
        let name = file_name(core, day, seq);
        crate::durable::write_atomic(dir, &name, &bytes, 0o644)?;
        Ok(dir.join(name))
    }

    /// Maps and checks the file at `path`, which must hold day `day` written at `seq`.
    pub fn open(path: &Path, day: Day, seq: u64) -> Result<FrozenDay, Error> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
        // SAFETY: the file is immutable once written (renamed into place, never opened for
        // writing again) and this process only maps it read-only.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, "map", e))?;
        let bad = |detail: String| Error::Corrupt {
            path: path.to_path_buf(),
            detail,
        };
        if map.len() < HEADER_BYTES || &map[..8] != MAGIC {
            return Err(bad("not a frozen click day (bad magic)".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(map[i..i + 4].try_into().expect("4 bytes"));
        if u32_at(8) != day {
            return Err(bad(format!("holds day {}, its name says {day}", u32_at(8))));
        }
        let n = u32_at(12) as usize;
        if crc32c::crc32c(&map[HEADER_BYTES..]) != u32_at(16) {
            return Err(bad("the checksum does not match its bytes".into()));
        }
        let frames_at = HEADER_BYTES + 4 * n;
        if map.len() < frames_at {
            return Err(bad(format!(
                "{n} offsets do not fit in {} bytes",
                map.len()
            )));
        }
        let f = FrozenDay { day, seq, n, map };
        let mut at = frames_at;
        let mut last: Option<ShortKey> = None;
        for i in 0..n {
            if f.offset(i) != at {
                return Err(bad(format!("frame {i} is not where its offset says")));
            }
            let (d, len) = match codec::decode(&f.map[at..]) {
                Ok(Some((Record::State(d), len))) => (d, len),
                Ok(_) => return Err(bad(format!("frame {i} at byte {at} is not a state"))),
                Err(e) => return Err(bad(format!("frame {i} at byte {at}: {e}"))),
            };
            if d.day != day || last.as_ref().is_some_and(|k| *k >= d.key) {
                return Err(bad(format!("frame {i} is out of order or of another day")));
            }
            last = Some(d.key);
            at += len;
        }
        if at != f.map.len() {
            return Err(bad(format!(
                "{} bytes after the last frame",
                f.map.len() - at
            )));
        }
        Ok(f)
    }

    pub fn day(&self) -> Day {
        self.day
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Link-days in the file.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn offset(&self, i: usize) -> usize {
        let at = HEADER_BYTES + 4 * i;
        let rel = u32::from_le_bytes(self.map[at..at + 4].try_into().expect("4 bytes"));
        HEADER_BYTES + 4 * self.n + rel as usize
    }

    /// The key of frame `i` (checked at open: a state frame, key after the type byte).
    fn key_at(&self, i: usize) -> &[u8] {
        let at = self.offset(i) + FRAME_HEADER_BYTES + 1;
        let len = self.map[at] as usize;
        &self.map[at + 1..at + 1 + len]
    }

    fn entry_at(&self, i: usize) -> (ShortKey, LinkDay) {
        match codec::decode(&self.map[self.offset(i)..]) {
            Ok(Some((Record::State(d), _))) => {
                let l = LinkDay::from_state(&d);
                (d.key, l)
            }
            _ => unreachable!("every frame was checked at open"),
        }
    }

    /// `key`'s link-day in this file.
    pub fn get(&self, key: &[u8]) -> Option<LinkDay> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key_at(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.entry_at(mid).1),
            }
        }
        None
    }

    /// Every link-day in the file, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (ShortKey, LinkDay)> + '_ {
        (0..self.n).map(|i| self.entry_at(i))
    }
}

/// A core's frozen days and the purges that hide entries in them.
#[derive(Clone, Debug, Default)]
pub struct Frozen {
    pub(super) days: BTreeMap<Day, Arc<FrozenDay>>,
    /// A key purged while files up to this `seq` existed: its entries in them are hidden.
    pub(super) purged: HashMap<ShortKey, u64, ahash::RandomState>,
}

impl Frozen {
    /// The highest `seq` of a file held (files are only ever added with higher ones).
    pub fn max_seq(&self) -> Option<u64> {
        self.days.values().map(|f| f.seq).max()
    }

    /// Whether `key`'s entry in `f` counts (not purged since `f` was written).
    pub fn visible(&self, key: &[u8], f: &FrozenDay) -> bool {
        self.purged.get(key).is_none_or(|&p| f.seq > p)
    }

    /// Hides every entry of `key` in the files held now.
    pub fn purge(&mut self, key: &[u8]) {
        if let Some(max) = self.max_seq() {
            let e = self.purged.entry(key.into()).or_insert(max);
            *e = (*e).max(max);
        }
    }

    /// Forgets purges no file held can show any more.
    pub fn prune_purges(&mut self) {
        let min = self.days.values().map(|f| f.seq).min();
        self.purged.retain(|_, p| min.is_some_and(|m| *p >= m));
    }

    /// `key`'s visible entry of `day`.
    pub fn get(&self, key: &[u8], day: Day) -> Option<LinkDay> {
        let f = self.days.get(&day)?;
        if !self.visible(key, f) {
            return None;
        }
        f.get(key)
    }

    /// The frozen days in `from..=to`.
    pub fn range(&self, from: Day, to: Day) -> impl Iterator<Item = &Arc<FrozenDay>> {
        self.days.range(from..=to).map(|(_, f)| f)
    }

    /// `(day, seq)` of every file held, for a snapshot's list.
    pub fn listed(&self) -> Vec<(Day, u64)> {
        self.days.values().map(|f| (f.day, f.seq)).collect()
    }

    /// Frozen link-days held, for the capacity figures.
    pub fn link_days(&self) -> usize {
        self.days.values().map(|f| f.len()).sum()
    }
}
