//! The bytes of a click record, as the click log and snapshots store them.
//!
//! ```text
//! frame   := len:u32le crc:u32le payload[len]        crc = CRC-32C of payload
//! payload := 1 state | 2 purge | 3 not_found | 4 purged_up_to
//! state   := klen:u8 key[klen] day:u32 clicks:u64 bot_clicks:u64
//!            nh:u16 (idx:u16 rank:u8)*nh  nb:u16 (idx:u16 rank:u8)*nb
//!            nf:u16 (kind:u8 bot:u8 count:u64 vlen:u8 value[vlen])*nf
//! purge   := klen:u8 key[klen]
//! not_found := day:u32 count:u64
//! purged_up_to := klen:u8 key[klen] seq:u64
//! ```
//! All integers little-endian. A decoder reads exactly the payload's bytes or refuses it.

use super::{Delta, FacetCount, FacetKind, LinkDay, Record, MAX_FACET_VALUE_BYTES};
use crate::link::MAX_STORED_KEY_BYTES;

/// Largest payload a frame may declare (a delta with two dense sketches and every facet
/// fits many times over); past it the frame is corrupt, not merely large.
pub const MAX_CLICK_RECORD_BYTES: usize = 1 << 20;
/// Frame header bytes.
pub const FRAME_HEADER_BYTES: usize = 8;

/// Why bytes are not a record.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the frame's checksum does not match its bytes")]
    Checksum,
    #[error("the frame declares {0} bytes, more than {MAX_CLICK_RECORD_BYTES}")]
    TooLong(usize),
    #[error("malformed record: {0}")]
    Malformed(&'static str),
}

/// Appends the state record of one held link-day, without building a [`Record`] first.
pub fn encode_state(key: &[u8], day: super::Day, l: &LinkDay, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    out.push(1);
    put_key(out, key);
    out.extend_from_slice(&day.to_le_bytes());
    out.extend_from_slice(&l.clicks.to_le_bytes());
    out.extend_from_slice(&l.bot_clicks.to_le_bytes());
    for h in [&l.humans, &l.bots] {
        out.extend_from_slice(&(h.set_registers() as u16).to_le_bytes());
        h.for_each_update(|i, r| {
            out.extend_from_slice(&i.to_le_bytes());
            out.push(r);
        });
    }
    put_facets(out, &l.facets);
    seal(out, start);
}

fn put_facets(out: &mut Vec<u8>, facets: &[FacetCount]) {
    out.extend_from_slice(&(facets.len() as u16).to_le_bytes());
    for f in facets {
        out.push(f.kind as u8);
        out.push(f.bot as u8);
        out.extend_from_slice(&f.count.to_le_bytes());
        let v = truncate_value(&f.value);
        out.push(v.len() as u8);
        out.extend_from_slice(v.as_bytes());
    }
}

/// Fills in the header of the frame that starts at `start`.
pub(super) fn seal(out: &mut [u8], start: usize) {
    let len = out.len() - start - FRAME_HEADER_BYTES;
    assert!(
        len <= MAX_CLICK_RECORD_BYTES,
        "a click record of {len} bytes"
    );
    let crc = crc32c::crc32c(&out[start + FRAME_HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends `r` as one frame.
pub fn encode(r: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    match r {
        Record::State(d) => {
            out.push(1);
            put_key(out, &d.key);
            out.extend_from_slice(&d.day.to_le_bytes());
            out.extend_from_slice(&d.clicks.to_le_bytes());
            out.extend_from_slice(&d.bot_clicks.to_le_bytes());
            for regs in [&d.humans, &d.bots] {
                out.extend_from_slice(&(regs.len() as u16).to_le_bytes());
                for &(i, r) in regs.iter() {
                    out.extend_from_slice(&i.to_le_bytes());
                    out.push(r);
                }
            }
            put_facets(out, &d.facets);
        }
        Record::Purge { key } => {
            out.push(2);
            put_key(out, key);
        }
        Record::NotFound { day, count } => {
            out.push(3);
            out.extend_from_slice(&day.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        Record::PurgedUpTo { key, seq } => {
            out.push(4);
            put_key(out, key);
            out.extend_from_slice(&seq.to_le_bytes());
        }
    }
    let len = out.len() - start - FRAME_HEADER_BYTES;
    assert!(
        len <= MAX_CLICK_RECORD_BYTES,
        "a click record of {len} bytes"
    );
    let crc = crc32c::crc32c(&out[start + FRAME_HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    assert!(key.len() <= MAX_STORED_KEY_BYTES);
    out.push(key.len() as u8);
    out.extend_from_slice(key);
}

/// The value cut to [`MAX_FACET_VALUE_BYTES`] at a character boundary.
fn truncate_value(v: &str) -> &str {
    let mut end = v.len().min(MAX_FACET_VALUE_BYTES);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    &v[..end]
}

/// Decodes the frame at the start of `buf`: `Ok(None)` if `buf` ends before it does (a torn
/// tail, or more bytes to come), else the record and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Record, usize)>, DecodeError> {
    let Some((payload, len)) = frame(buf)? else {
        return Ok(None);
    };
    let mut r = Reader { b: payload };
    let rec = match r.u8()? {
        1 => {
            let key = r.key()?;
            let day = r.u32()?;
            let clicks = r.u64()?;
            let bot_clicks = r.u64()?;
            let humans = r.regs()?;
            let bots = r.regs()?;
            let n = r.u16()? as usize;
            let mut facets = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let kind =
                    FacetKind::from_u8(r.u8()?).ok_or(DecodeError::Malformed("facet kind"))?;
                let bot = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Malformed("bot flag")),
                };
                let count = r.u64()?;
                let vlen = r.u8()? as usize;
                let v = std::str::from_utf8(r.take(vlen)?)
                    .map_err(|_| DecodeError::Malformed("facet value is not UTF-8"))?;
                facets.push(FacetCount {
                    kind,
                    bot,
                    value: std::sync::Arc::from(v),
                    count,
                });
            }
            Record::State(Delta {
                key,
                day,
                clicks,
                bot_clicks,
                humans,
                bots,
                facets,
            })
        }
        2 => Record::Purge { key: r.key()? },
        3 => Record::NotFound {
            day: r.u32()?,
            count: r.u64()?,
        },
        4 => Record::PurgedUpTo {
            key: r.key()?,
            seq: r.u64()?,
        },
        _ => return Err(DecodeError::Malformed("record type")),
    };
    if !r.b.is_empty() {
        return Err(DecodeError::Malformed("bytes after the record"));
    }
    Ok(Some((rec, len)))
}

/// The payload of the frame `buf` starts with and the frame's length; `None` if `buf` holds
/// only part of it. The checksum is checked; the payload's bytes are the caller's to read.
pub(super) fn frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, DecodeError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_CLICK_RECORD_BYTES {
        return Err(DecodeError::TooLong(len));
    }
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let Some(payload) = buf.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
        return Ok(None);
    };
    if crc32c::crc32c(payload) != crc {
        return Err(DecodeError::Checksum);
    }
    Ok(Some((payload, FRAME_HEADER_BYTES + len)))
}

pub(super) struct Reader<'a> {
    pub(super) b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError::Malformed("record ends early"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A visit's key: a link's, or an orphan visit's, which may be empty (a domain's base
    /// URL on the default domain).
    pub(super) fn visit_key(&mut self) -> Result<super::ShortKey, DecodeError> {
        let n = self.u8()? as usize;
        if n > MAX_STORED_KEY_BYTES {
            return Err(DecodeError::Malformed("key length"));
        }
        Ok(super::ShortKey::new(self.take(n)?))
    }
    pub(super) fn key(&mut self) -> Result<super::ShortKey, DecodeError> {
        let n = self.u8()? as usize;
        if n == 0 || n > MAX_STORED_KEY_BYTES {
            return Err(DecodeError::Malformed("key length"));
        }
        Ok(super::ShortKey::new(self.take(n)?))
    }
    fn regs(&mut self) -> Result<Vec<RegUpdateAlias>, DecodeError> {
        let n = self.u16()? as usize;
        if n > super::hll::HLL_M {
            return Err(DecodeError::Malformed("more registers than a sketch has"));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let i = self.u16()?;
            let r = self.u8()?;
            if i as usize >= super::hll::HLL_M || r == 0 || r > 64 {
                return Err(DecodeError::Malformed("register"));
            }
            v.push((i, r));
        }
        Ok(v)
    }
}

type RegUpdateAlias = super::RegUpdate;
