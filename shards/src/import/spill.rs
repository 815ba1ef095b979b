//! Per-bucket spill buffers: pass 1 appends validated records, pass 2 reads one bucket at a
//! time. Shard `s` spills to bucket `s % buckets`, so a bucket holds whole shards. A bucket
//! lives in memory until it outgrows [`SPILL_BUFFER_BYTES`]; only then does it get a file (so a
//! small import creates no spill files at all: creating 256 of them cost ~90 ms here).
//!
//! Record: `line u64 | shard u32 | status u16 | key_len u8 | url_len u32 | expires_at_s u64 |
//! created_at_s u64 | author [8] | blocks u8 | key | url | behaviour block (if blocks bit 0)
//! | rules block (if blocks bit 1) | labels block (if blocks bit 2)`, little-endian (`created_at_s` 0: the import's time).

use crate::error::Error;
use crate::link::RedirectStatus;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// Most spill files open at once. Bounds file descriptors (a dir may have 65,536 shards) and
/// buffer memory; with 256 shards each shard gets its own file.
pub const MAX_SPILL_FILES: u32 = 256;

/// Buffer per spill bucket: 256 × 64 KiB = 16 MiB at most. A bucket that never fills its
/// buffer is never written to disk.
pub const SPILL_BUFFER_BYTES: usize = 64 * 1024;

/// A spilled record.
pub(crate) struct Spilled {
    pub line: u64,
    pub shard: u32,
    pub status: RedirectStatus,
    pub key: String,
    pub url: String,
    /// 0 = never.
    pub expires_at_s: u64,
    /// 0 = the import's own time.
    pub created_at_s: u64,
    pub author: crate::link::Author,
    pub behaviour: crate::behaviour::Behaviour,
    pub rules: crate::rules::Rules,
    pub labels: crate::labels::Labels,
}

/// Bytes of a spill record's fixed head.
const HEAD_BYTES: usize = 44;

pub(crate) struct SpillWriter {
    dir: PathBuf,
    buckets: Vec<Bucket>,
}

/// One bucket while pass 1 runs: unflushed bytes, and the file once the bytes outgrew memory.
#[derive(Default)]
struct Bucket {
    buf: Vec<u8>,
    file: Option<File>,
}

/// Where a finished bucket's records are.
pub(crate) enum SpilledBucket {
    /// No record went to this bucket.
    Empty,
    /// All of them, in memory.
    Memory(Vec<u8>),
    /// All of them, in this file.
    File(PathBuf),
}

impl SpillWriter {
    /// Creates an empty spill dir at `dir` (removing a stale one from a crashed import).
    pub fn create(dir: &Path, buckets: u32) -> Result<SpillWriter, Error> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|e| Error::io(dir, "remove stale spill dir", e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))?;
        Ok(SpillWriter {
            dir: dir.to_path_buf(),
            buckets: (0..buckets).map(|_| Bucket::default()).collect(),
        })
    }

    pub fn bucket_count(&self) -> u32 {
        self.buckets.len() as u32
    }

    pub fn bucket_path(dir: &Path, bucket: u32) -> PathBuf {
        dir.join(format!("{bucket:05}.spill"))
    }

    // The spill record's fields, as the record has them.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        line: u64,
        shard: u32,
        status: RedirectStatus,
        key: &str,
        url: &str,
        expires_at_s: u64,
        created_at_s: u64,
        (author, behaviour, rules, labels): (
            crate::link::Author,
            crate::behaviour::Behaviour,
            &crate::rules::Rules,
            &crate::labels::Labels,
        ),
    ) -> Result<(), Error> {
        let bucket = shard % self.bucket_count();
        let b = &mut self.buckets[bucket as usize];
        let mut head = [0u8; HEAD_BYTES];
        head[0..8].copy_from_slice(&line.to_le_bytes());
        head[8..12].copy_from_slice(&shard.to_le_bytes());
        head[12..14].copy_from_slice(&status.code().to_le_bytes());
        head[14] = key.len() as u8;
        head[15..19].copy_from_slice(&(url.len() as u32).to_le_bytes());
        head[19..27].copy_from_slice(&expires_at_s.to_le_bytes());
        head[27..35].copy_from_slice(&created_at_s.to_le_bytes());
        head[35..43].copy_from_slice(&author.bytes());
        head[43] = u8::from(!behaviour.is_none())
            | u8::from(!rules.is_empty()) << 1
            | u8::from(!labels.is_none()) << 2;
        b.buf.extend_from_slice(&head);
        b.buf.extend_from_slice(key.as_bytes());
        b.buf.extend_from_slice(url.as_bytes());
        behaviour.encode(&mut b.buf);
        crate::rules::encode_block(rules.set(), &mut b.buf);
        labels.encode_block(&mut b.buf);
        if b.buf.len() >= SPILL_BUFFER_BYTES {
            flush_bucket(&self.dir, bucket, b)?;
        }
        Ok(())
    }

    /// Ends pass 1: buckets that never outgrew memory stay there, the others are flushed.
    pub fn finish(self) -> Result<Vec<SpilledBucket>, Error> {
        let mut out = Vec::with_capacity(self.buckets.len());
        for (i, mut b) in self.buckets.into_iter().enumerate() {
            out.push(if b.file.is_some() {
                flush_bucket(&self.dir, i as u32, &mut b)?;
                SpilledBucket::File(Self::bucket_path(&self.dir, i as u32))
            } else if b.buf.is_empty() {
                SpilledBucket::Empty
            } else {
                SpilledBucket::Memory(b.buf)
            });
        }
        Ok(out)
    }
}

/// Appends `b`'s buffered bytes to its file, creating the file on first use.
fn flush_bucket(dir: &Path, bucket: u32, b: &mut Bucket) -> Result<(), Error> {
    let path = || SpillWriter::bucket_path(dir, bucket);
    if b.file.is_none() {
        b.file = Some(File::create(path()).map_err(|e| Error::io(path(), "create", e))?);
    }
    let f = b.file.as_mut().expect("created above");
    f.write_all(&b.buf)
        .map_err(|e| Error::io(path(), "write", e))?;
    b.buf.clear();
    Ok(())
}

/// Reads a whole bucket back.
pub(crate) fn read_bucket(bucket: SpilledBucket) -> Result<Vec<Spilled>, Error> {
    match bucket {
        SpilledBucket::Empty => Ok(Vec::new()),
        SpilledBucket::Memory(bytes) => {
            // Where an error would point: the bucket never reached a file.
            decode(&mut bytes.as_slice(), Path::new("<in-memory spill bucket>"))
        }
        SpilledBucket::File(path) => {
            let f = File::open(&path).map_err(|e| Error::io(&path, "open", e))?;
            let records = decode(&mut BufReader::with_capacity(SPILL_BUFFER_BYTES, f), &path)?;
            let _ = std::fs::remove_file(&path);
            Ok(records)
        }
    }
}

/// Decodes spill records from `r` until it ends; `path` names the source in errors.
fn decode(r: &mut impl Read, path: &Path) -> Result<Vec<Spilled>, Error> {
    let mut out = Vec::new();
    let io = |e| Error::io(path, "read", e);
    let mut head = [0u8; HEAD_BYTES];
    loop {
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(out),
            Err(e) => return Err(io(e)),
        }
        let line = u64::from_le_bytes(head[0..8].try_into().expect("8"));
        let shard = u32::from_le_bytes(head[8..12].try_into().expect("4"));
        let code = u16::from_le_bytes(head[12..14].try_into().expect("2"));
        let key_len = head[14] as usize;
        let url_len = u32::from_le_bytes(head[15..19].try_into().expect("4")) as usize;
        let expires_at_s = u64::from_le_bytes(head[19..27].try_into().expect("8"));
        let created_at_s = u64::from_le_bytes(head[27..35].try_into().expect("8"));
        let author = head[35..43].try_into().expect("8");
        let mut bytes = vec![0u8; key_len + url_len];
        r.read_exact(&mut bytes).map_err(io)?;
        let url = bytes.split_off(key_len);
        // The spill was written by this process moments ago from validated `&str`s.
        let corrupt = || Error::io(path, "read", std::io::Error::other("spill file corrupted"));
        let behaviour = match head[43] & 1 {
            0 => crate::behaviour::Behaviour::NONE,
            _ => {
                let mut block = [0u8; crate::behaviour::BEHAVIOUR_BYTES];
                r.read_exact(&mut block).map_err(io)?;
                crate::behaviour::Behaviour::decode(&block)
                    .map_err(|_| corrupt())?
                    .0
            }
        };
        let rules = match head[43] & 2 {
            0 => crate::rules::Rules::NONE,
            _ => {
                let mut len = [0u8; 2];
                r.read_exact(&mut len).map_err(io)?;
                let mut program = vec![0u8; usize::from(u16::from_le_bytes(len))];
                r.read_exact(&mut program).map_err(io)?;
                let set = crate::rules::RuleSet::parse(&program).map_err(|_| corrupt())?;
                crate::rules::Rules::new(set)
            }
        };
        let labels = match head[43] & 4 {
            0 => crate::labels::Labels::NONE,
            _ => {
                let mut len = [0u8; 2];
                r.read_exact(&mut len).map_err(io)?;
                let mut block = len.to_vec();
                block.resize(2 + usize::from(u16::from_le_bytes(len)), 0);
                r.read_exact(&mut block[2..]).map_err(io)?;
                crate::labels::decode_block(&block)
                    .map_err(|_| corrupt())?
                    .0
            }
        };
        out.push(Spilled {
            line,
            shard,
            status: RedirectStatus::from_code(code).ok_or_else(corrupt)?,
            key: String::from_utf8(bytes).map_err(|_| corrupt())?,
            url: String::from_utf8(url).map_err(|_| corrupt())?,
            expires_at_s,
            created_at_s,
            author: crate::link::Author::from_bytes(author).ok_or_else(corrupt)?,
            behaviour,
            rules,
            labels,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No author, behaviour, rules or labels.
    const NO_BLOCKS: (
        crate::link::Author,
        crate::behaviour::Behaviour,
        &crate::rules::Rules,
        &crate::labels::Labels,
    ) = (
        crate::link::Author::NONE,
        crate::behaviour::Behaviour::NONE,
        &crate::rules::Rules::NONE,
        &crate::labels::Labels::NONE,
    );

    /// The file bucket's records: `big` of them, in order, each to `url`.
    fn check_file_bucket(recs: Vec<Spilled>, big: usize, url: &str) {
        assert_eq!(recs.len(), big);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!((r.line, r.shard, r.url.as_str()), (i as u64, 5, url));
            assert_eq!(r.key, format!("k{i}"));
        }
    }

    #[test]
    fn small_buckets_stay_in_memory_large_ones_spill_to_files() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("spill");
        let mut w = SpillWriter::create(&dir, 4).unwrap();
        let url = format!("https://example.com/{}", "p".repeat(1000));
        // Bucket 1 gets enough to outgrow its buffer twice; bucket 2 one small record.
        let big = 2 * SPILL_BUFFER_BYTES / url.len() + 1;
        let labelled = crate::labels::Labels::new(Some("T"), &["a"]).unwrap();
        for i in 0..big as u64 {
            w.push(
                i,
                5,
                RedirectStatus::Found,
                &format!("k{i}"),
                &url,
                0,
                0,
                NO_BLOCKS,
            )
            .unwrap();
        }
        w.push(
            7,
            6,
            RedirectStatus::PermanentRedirect,
            "small",
            "http://h",
            9,
            8,
            (NO_BLOCKS.0, NO_BLOCKS.1, NO_BLOCKS.2, &labelled),
        )
        .unwrap();
        let buckets = w.finish().unwrap();
        assert!(matches!(buckets[0], SpilledBucket::Empty));
        assert!(matches!(&buckets[1], SpilledBucket::File(p) if p.exists()));
        assert!(matches!(buckets[2], SpilledBucket::Memory(_)));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "only bucket 1 hit disk"
        );

        let mut it = buckets.into_iter();
        assert!(read_bucket(it.next().unwrap()).unwrap().is_empty());
        let file_bucket = it.next().unwrap();
        let path = match &file_bucket {
            SpilledBucket::File(p) => p.clone(),
            _ => unreachable!("checked above"),
        };
        check_file_bucket(read_bucket(file_bucket).unwrap(), big, &url);
        assert!(!path.exists(), "read bucket file is removed");
        let small = read_bucket(it.next().unwrap()).unwrap();
        assert_eq!(small.len(), 1);
        let r = &small[0];
        assert_eq!(
            (r.line, r.shard, r.status),
            (7, 6, RedirectStatus::PermanentRedirect)
        );
        assert_eq!((r.key.as_str(), r.url.as_str()), ("small", "http://h"));
        assert_eq!(r.labels.tags().collect::<Vec<_>>(), ["a"]);
    }
}
