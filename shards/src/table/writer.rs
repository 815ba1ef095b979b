//! Building a table file from links: validate, sort, index, stream the rkyv payload to disk
//! behind a placeholder header, then fill the header in (the caller fsyncs).

use super::header::{Header, HEADER_BYTES};
use super::layout::{
    home_slot, index_hash, push_record, record_len, slot_count_for, slot_word, Payload,
    RecordFields, RECORD_ALIGN, SLOT_POS_MASK,
};
use crate::durable;
use crate::error::Error;
use crate::link::{check_storable_url, validate_stored_key, RedirectStatus};
use crate::placement::{shard_of, MAX_SHARD_COUNT};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// Buffer size for streaming a table to disk: large enough that write syscalls are not the cost.
pub const TABLE_WRITE_BUFFER_BYTES: usize = 1 << 20;

/// One link, owned: the input to [`write_table`] and the output of merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedLink {
    /// The short key, `[A-Za-z0-9_-]{1,64}`.
    pub key: String,
    /// The long URL the key redirects to.
    pub target: String,
    /// The redirect status.
    pub status: RedirectStatus,
    /// When the link stops answering, seconds since the Unix epoch; 0 = never.
    pub expires_at_s: u64,
    /// When the link was created, seconds since the Unix epoch.
    pub created_at_s: u64,
    /// Per-link flags: the creation tag (`link::CREATION_TAG_MASK`); other bits reserved (0).
    pub flags: u32,
    /// Who created the link (`Author::NONE`: unknown).
    pub author: crate::link::Author,
    /// What it does when visited.
    pub behaviour: crate::behaviour::Behaviour,
    /// Its redirect rules.
    pub rules: crate::rules::Rules,
    /// Its title and tags.
    pub labels: crate::labels::Labels,
}

impl From<&crate::log::LinkFields> for OwnedLink {
    /// A logged link as a table stores it (tables do not keep the generated ID).
    fn from(l: &crate::log::LinkFields) -> OwnedLink {
        OwnedLink {
            key: l.key.clone(),
            target: l.target.clone(),
            status: l.status,
            expires_at_s: l.expires_at_s,
            created_at_s: l.created_at_s,
            flags: l.flags,
            author: l.author,
            behaviour: l.behaviour,
            rules: l.rules.clone(),
            labels: l.labels.clone(),
        }
    }
}

/// What [`write_table`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableStats {
    /// Links in the table.
    pub entries: u64,
    /// Size of the file, in bytes.
    pub file_bytes: u64,
}

/// Writes shard `shard`'s table to `path` crash-safely (temp file, fsync, rename, fsync dir).
/// Every entry must be a valid link whose key belongs to `shard`; keys must be unique. Entries
/// may come in any order (they are sorted by key, which is the order [`super::Table::iter`]
/// returns them in).
pub fn write_table(
    path: &Path,
    shard: u32,
    shard_count: u32,
    max_log_seq: u64,
    entries: impl IntoIterator<Item = OwnedLink>,
) -> Result<TableStats, Error> {
    let tmp = durable::temp_path_for(path);
    let result = write_table_file(&tmp, shard, shard_count, max_log_seq, entries).and_then(
        |(stats, file)| {
            file.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
            durable::rename_durable(&tmp, path).map(|()| stats)
        },
    );
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The payload of a table of `links` (sorted by key, no duplicates): each link checked (key,
/// URL, shard) and its record placed, the index built by linear probing from its home slot.
fn index_links(
    path: &Path,
    shard: u32,
    shard_count: u32,
    links: Vec<OwnedLink>,
) -> Result<Payload, Error> {
    let bad = |reason: String| Error::BadEntry {
        path: path.to_path_buf(),
        reason,
    };
    let records_len: usize = links
        .iter()
        .map(|l| {
            record_len(
                l.key.len(),
                l.target.len(),
                l.author.is_some(),
                l.behaviour.encoded_len() + crate::rules::block_len(l.rules.set()),
            )
        })
        .sum();
    if (records_len / RECORD_ALIGN) as u64 >= SLOT_POS_MASK {
        return Err(bad(format!(
            "{records_len} bytes of records exceed one table's limit"
        )));
    }
    let mut records = Vec::with_capacity(records_len);
    let n_slots = slot_count_for(links.len());
    let mut slots = vec![0u64; n_slots];
    for l in &links {
        validate_stored_key(l.key.as_bytes()).map_err(|e| bad(format!("key {:?}: {e}", l.key)))?;
        check_storable_url(&l.target).map_err(|e| bad(format!("key {:?}: {e}", l.key)))?;
        let home = shard_of(l.key.as_bytes(), shard_count);
        if home != shard {
            return Err(bad(format!(
                "key {:?} belongs to shard {home}, not {shard}",
                l.key
            )));
        }
        let off = records.len();
        let fields = RecordFields {
            key: &l.key,
            target: &l.target,
            status: l.status,
            expires_at_s: l.expires_at_s,
            created_at_s: l.created_at_s,
            flags: l.flags,
            author: l.author,
            behaviour: l.behaviour,
            rules: l.rules.set(),
            labels: &l.labels,
        };
        push_record(&mut records, &fields);
        let h = index_hash(l.key.as_bytes());
        let mut i = home_slot(h, n_slots);
        while slots[i] != 0 {
            i = if i + 1 == n_slots { 0 } else { i + 1 };
        }
        slots[i] = slot_word(h, off);
    }
    Ok(Payload { slots, records })
}

/// Writes a complete table at `path` (no fsync, no rename) and returns the open file. The
/// caller must make it durable (fsync) before renaming it anywhere readers look: callers that
/// publish many tables together fsync them all at once, in parallel, instead of one by one.
pub(crate) fn write_table_file(
    path: &Path,
    shard: u32,
    shard_count: u32,
    max_log_seq: u64,
    entries: impl IntoIterator<Item = OwnedLink>,
) -> Result<(TableStats, File), Error> {
    let bad = |reason: String| Error::BadEntry {
        path: path.to_path_buf(),
        reason,
    };
    if shard_count == 0 || shard_count > MAX_SHARD_COUNT || shard >= shard_count {
        return Err(Error::ShardOutOfRange { shard, shard_count });
    }
    let mut links: Vec<OwnedLink> = entries.into_iter().collect();
    links.sort_unstable_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
    for w in links.windows(2) {
        if w[0].key == w[1].key {
            return Err(bad(format!("duplicate key {:?}", w[0].key)));
        }
    }

    let entry_count = links.len() as u64;
    let payload = index_links(path, shard, shard_count, links)?;

    let file = File::create(path).map_err(|e| Error::io(path, "create", e))?;
    let mut out = BufWriter::with_capacity(TABLE_WRITE_BUFFER_BYTES, file);
    let io = |op| move |e| Error::io(path, op, e);
    out.write_all(&[0u8; HEADER_BYTES]).map_err(io("write"))?;
    let counted = CrcWriter {
        inner: out,
        crc: 0,
        bytes: 0,
    };
    let counted = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(
        &payload,
        rkyv::ser::writer::IoWriter::new(counted),
    )
    .map_err(|e| Error::io(path, "write", std::io::Error::other(e.to_string())))?
    .into_inner();
    let header = Header {
        shard,
        shard_count,
        entry_count,
        max_log_seq,
        payload_bytes: counted.bytes,
        payload_crc: counted.crc,
    };
    let mut out = counted.inner;
    out.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
    out.write_all(&header.encode()).map_err(io("write"))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::io(path, "write", e.into_error()))?;
    let stats = TableStats {
        entries: entry_count,
        file_bytes: HEADER_BYTES as u64 + header.payload_bytes,
    };
    Ok((stats, file))
}

/// Passes writes through while computing their CRC32C and length.
struct CrcWriter<W> {
    inner: W,
    crc: u32,
    bytes: u64,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
