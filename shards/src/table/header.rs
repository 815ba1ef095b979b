//! The fixed 64-byte table header. All integers little-endian.
//!
//! ```text
//! off  size  field
//!   0     8  magic            b"RICOTBL\0"
//!   8     4  format_version   TABLE_FORMAT_VERSION
//!  12     4  shard            this table's virtual shard
//!  16     4  shard_count      the data dir's shard count (placement depends on it)
//!  20     4  header_bytes     HEADER_BYTES (64)
//!  24     8  entry_count      links in the table
//!  32     8  max_log_seq      highest append-log sequence folded in; 0 for imports
//!  40     8  payload_bytes    length of the rkyv payload that follows the header
//!  48     4  payload_crc      CRC32C of the payload
//!  52     8  reserved         zero
//!  60     4  header_crc       CRC32C of bytes 0..60
//! ```

/// Bytes every table file starts with.
pub const TABLE_MAGIC: [u8; 8] = *b"RICOTBL\0";

/// Table format this build writes. Bump on any incompatible change.
/// - 1: the first format.
/// - 2: a record may carry its link's author (`link::AUTHOR_FLAG`). A format-1 table is a
///   format-2 table none of whose records has one, so this build reads both unchanged; a
///   build that reads only format 1 refuses a format-2 table (it would misplace records).
/// - 3: a record may carry its link's behaviour (`behaviour::BEHAVIOUR_FLAG`); formats 1 and
///   2 are format 3 without any, read unchanged.
/// - 4: a record may carry its link's redirect rules (`rules::RULES_FLAG`); older formats are
///   format 4 without any.
/// - 5: a record may carry its link's title and tags (`labels::LABELS_FLAG`); older formats
///   are format 5 without any.
/// - 6: a record's rules may be a compiled program (`rules/compiled.rs`), which a format-5
///   build would evaluate as the first form without parsing it; format-5 programs (the first
///   form, `rules/walked.rs`) are still read and evaluated.
pub const TABLE_FORMAT_VERSION: u32 = 6;

/// The oldest table format this build reads.
pub const OLDEST_TABLE_FORMAT_VERSION: u32 = 1;

/// Size of the header. 64 keeps the payload that follows aligned for rkyv (which needs 8) and
/// fits the header in one cache line.
pub const HEADER_BYTES: usize = 64;

const HEADER_CRC_AT: usize = 60;

/// Decoded table header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub shard: u32,
    pub shard_count: u32,
    pub entry_count: u64,
    pub max_log_seq: u64,
    pub payload_bytes: u64,
    pub payload_crc: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&TABLE_MAGIC);
        b[8..12].copy_from_slice(&TABLE_FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.shard.to_le_bytes());
        b[16..20].copy_from_slice(&self.shard_count.to_le_bytes());
        b[20..24].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        b[24..32].copy_from_slice(&self.entry_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.max_log_seq.to_le_bytes());
        b[40..48].copy_from_slice(&self.payload_bytes.to_le_bytes());
        b[48..52].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks magic, header CRC and version. The error is a reason string; the
    /// caller adds the file name.
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, String> {
        if b[0..8] != TABLE_MAGIC {
            return Err("bad magic: not a ricochet table file".into());
        }
        let stored = u32_at(b, HEADER_CRC_AT);
        let actual = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        if stored != actual {
            return Err(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"
            ));
        }
        let version = u32_at(b, 8);
        if !(OLDEST_TABLE_FORMAT_VERSION..=TABLE_FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "unsupported table format version {version} (this build reads {OLDEST_TABLE_FORMAT_VERSION} to {TABLE_FORMAT_VERSION})"
            ));
        }
        let header_bytes = u32_at(b, 20);
        if header_bytes as usize != HEADER_BYTES {
            return Err(format!(
                "header size {header_bytes}, expected {HEADER_BYTES}"
            ));
        }
        Ok(Header {
            shard: u32_at(b, 12),
            shard_count: u32_at(b, 16),
            entry_count: u64_at(b, 24),
            max_log_seq: u64_at(b, 32),
            payload_bytes: u64_at(b, 40),
            payload_crc: u32_at(b, 48),
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
