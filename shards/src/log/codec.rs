//! Byte format of the log: file header, frames, record payloads. All integers little-endian.
//! `docs/log.md` documents the same layout byte by byte; changing either is a format change.

use crate::behaviour::{Behaviour, BEHAVIOUR_FLAG};
use crate::labels::LABELS_FLAG;
use crate::link::{Author, RedirectStatus, AUTHOR_BYTES, AUTHOR_FLAG};
use crate::rules::RULES_FLAG;

use super::{LinkFields, LogOp, LogOpRef, LogRecord, MAX_RECORD_BYTES};

/// First 8 bytes of every log file.
pub const LOG_MAGIC: &[u8; 8] = b"RICOWAL\0";
/// Current (and only) format version.
pub const LOG_VERSION: u32 = 1;
/// File header: magic (8), version u32, writer u32, reserved u32 (0), CRC32C of bytes 0..20.
pub const HEADER_BYTES: usize = 24;
/// Frame header: payload length u32, CRC32C of payload u32.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Fixed payload prefix: seq u64, batch_start u64, shard u32, op tag u8.
pub const PAYLOAD_PREFIX_BYTES: usize = 21;

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_IDEM_RECORD: u8 = 3;
const TAG_PUT_WITH_IDEM: u8 = 4;
const TAG_FLEET_PUT: u8 = 5;
const TAG_FLEET_DELETE: u8 = 6;
/// An idempotency record with its link's creation tag (`link::CREATION_TAG_MASK`); records of
/// `TAG_IDEM_RECORD`, written before tags, read as tag 0 (unknown).
const TAG_IDEM_RECORD_TAGGED: u8 = 7;

/// Op tags this version still reads but no longer writes: a record carrying one encodes back
/// under its successor's tag (`TAG_IDEM_RECORD` as `TAG_IDEM_RECORD_TAGGED`, tag 0), so its
/// bytes change while the record does not (the log_decode fuzz target checks both).
pub const READ_ONLY_OP_TAGS: [u8; 1] = [TAG_IDEM_RECORD];

/// The op tag's offset in a payload (the last byte of its fixed prefix).
pub const OP_TAG_AT: usize = PAYLOAD_PREFIX_BYTES - 1;

/// Encodes the file header for `writer`.
pub fn encode_header(writer: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(LOG_MAGIC);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&writer.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a header was rejected.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    Magic,
    Version(u32),
    Crc,
    Reserved,
}

/// Parses a full header, returning the writer id.
pub fn decode_header(h: &[u8; HEADER_BYTES]) -> Result<u32, HeaderError> {
    if &h[..8] != LOG_MAGIC {
        return Err(HeaderError::Magic);
    }
    if crc32c::crc32c(&h[..20]) != u32_at(h, 20) {
        return Err(HeaderError::Crc);
    }
    let version = u32_at(h, 8);
    if version != LOG_VERSION {
        return Err(HeaderError::Version(version));
    }
    if u32_at(h, 16) != 0 {
        return Err(HeaderError::Reserved);
    }
    Ok(u32_at(h, 12))
}

/// Payload size of `op`'s record.
pub fn payload_len(op: &LogOpRef<'_>) -> usize {
    PAYLOAD_PREFIX_BYTES
        + match op {
            LogOpRef::Put(link) => link_len(link),
            LogOpRef::Delete { key } => 2 + key.len(),
            LogOpRef::FleetPut { link, idem, .. } => {
                link_len(link) + 8 + 2 + idem.map_or(0, |(scope, _)| 32 + scope.len())
            }
            LogOpRef::FleetDelete { key, .. } => 8 + 2 + key.len(),
            LogOpRef::PutWithIdem { link, scope, .. } => link_len(link) + 32 + 2 + scope.len(),
            LogOpRef::IdemRecord {
                scope,
                response_key,
                ..
            } => 8 + 4 + 32 + 2 + 2 + scope.len() + response_key.len(),
        }
}

/// Appends one frame to `out`. The caller has checked `payload_len(op) <= MAX_RECORD_BYTES`
/// (asserted), which also bounds every `u16` length field.
pub fn encode_frame(out: &mut Vec<u8>, seq: u64, batch_start: u64, shard: u32, op: &LogOpRef<'_>) {
    let len = payload_len(op);
    assert!(len <= MAX_RECORD_BYTES);
    let frame_start = out.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]); // CRC, filled below
    let payload_start = out.len();
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&batch_start.to_le_bytes());
    out.extend_from_slice(&shard.to_le_bytes());
    encode_op(out, op);
    debug_assert_eq!(out.len() - payload_start, len);
    let crc = crc32c::crc32c(&out[payload_start..]);
    out[frame_start + 4..frame_start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A frame whose length is plausible and whose CRC matches.
#[derive(Debug)]
pub struct RawFrame<'a> {
    pub payload: &'a [u8],
    /// Frame header + payload.
    pub total_len: usize,
}

/// Checks the frame at `data[pos..]`: `None` if it is short, has an implausible length or a
/// CRC mismatch.
pub fn frame_at(data: &[u8], pos: usize) -> Option<RawFrame<'_>> {
    let hdr = data.get(pos..pos.checked_add(FRAME_HEADER_BYTES)?)?;
    let len = u32_at(hdr, 0) as usize;
    if !(PAYLOAD_PREFIX_BYTES..=MAX_RECORD_BYTES).contains(&len) {
        return None;
    }
    let start = pos + FRAME_HEADER_BYTES;
    let payload = data.get(start..start + len)?;
    if crc32c::crc32c(payload) != u32_at(hdr, 4) {
        return None;
    }
    Some(RawFrame {
        payload,
        total_len: FRAME_HEADER_BYTES + len,
    })
}

/// A decoded payload: the record and the offset of the batch it was written in.
#[derive(Debug)]
pub struct Decoded {
    pub record: LogRecord,
    pub batch_start: u64,
}

/// An op's tag and fields, in their on-disk order (docs/log.md draws them).
fn encode_op(out: &mut Vec<u8>, op: &LogOpRef<'_>) {
    match op {
        LogOpRef::Put(link) => {
            out.push(TAG_PUT);
            encode_link(out, link);
        }
        LogOpRef::PutWithIdem {
            link,
            scope,
            request_hash,
        } => {
            out.push(TAG_PUT_WITH_IDEM);
            encode_link(out, link);
            out.extend_from_slice(&request_hash[..]);
            out.extend_from_slice(&(scope.len() as u16).to_le_bytes());
            out.extend_from_slice(scope.as_bytes());
        }
        LogOpRef::FleetPut {
            link,
            version,
            idem,
        } => {
            out.push(TAG_FLEET_PUT);
            encode_link(out, link);
            out.extend_from_slice(&version.to_le_bytes());
            match idem {
                None => out.extend_from_slice(&0u16.to_le_bytes()),
                Some((scope, hash)) => {
                    // A scope is never empty (API-key id + key), so length 0 means "none".
                    debug_assert!(!scope.is_empty());
                    out.extend_from_slice(&(scope.len() as u16).to_le_bytes());
                    out.extend_from_slice(scope.as_bytes());
                    out.extend_from_slice(&hash[..]);
                }
            }
        }
        LogOpRef::FleetDelete { key, version } => {
            out.push(TAG_FLEET_DELETE);
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
        }
        LogOpRef::Delete { key } => {
            out.push(TAG_DELETE);
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
        }
        LogOpRef::IdemRecord {
            scope,
            request_hash,
            response_key,
            created_at_s,
            created_tag,
        } => {
            out.push(TAG_IDEM_RECORD_TAGGED);
            out.extend_from_slice(&created_at_s.to_le_bytes());
            out.extend_from_slice(&created_tag.to_le_bytes());
            out.extend_from_slice(&request_hash[..]);
            out.extend_from_slice(&(scope.len() as u16).to_le_bytes());
            out.extend_from_slice(&(response_key.len() as u16).to_le_bytes());
            out.extend_from_slice(scope.as_bytes());
            out.extend_from_slice(response_key.as_bytes());
        }
    }
}

/// Decodes a CRC-checked payload. Errors name what is wrong (a bug or a future format, since
/// the CRC matched).
pub fn decode_payload(p: &[u8]) -> Result<Decoded, String> {
    let mut r = Reader { p, at: 0 };
    let seq = r.u64()?;
    let batch_start = r.u64()?;
    let shard = r.u32()?;
    let tag = r.u8()?;
    let op = match tag {
        TAG_PUT => LogOp::Put(decode_link(&mut r)?),
        TAG_PUT_WITH_IDEM => {
            let link = decode_link(&mut r)?;
            let request_hash: [u8; 32] = r
                .bytes(32)?
                .try_into()
                .map_err(|_| "short hash".to_string())?;
            let scope_len = r.u16()? as usize;
            let scope = r.string(scope_len, "scope")?;
            LogOp::PutWithIdem {
                link,
                scope,
                request_hash,
            }
        }
        TAG_FLEET_PUT => {
            let link = decode_link(&mut r)?;
            let version = r.u64()?;
            let idem = decode_fleet_idem(&mut r)?;
            LogOp::FleetPut {
                link,
                version,
                idem,
            }
        }
        TAG_FLEET_DELETE => {
            let version = r.u64()?;
            let key_len = r.u16()? as usize;
            LogOp::FleetDelete {
                version,
                key: r.string(key_len, "key")?,
            }
        }
        TAG_DELETE => {
            let key_len = r.u16()? as usize;
            LogOp::Delete {
                key: r.string(key_len, "key")?,
            }
        }
        TAG_IDEM_RECORD | TAG_IDEM_RECORD_TAGGED => decode_idem_record(&mut r, tag)?,
        tag => return Err(format!("unknown op tag {tag}")),
    };
    if r.at != p.len() {
        return Err(format!("{} trailing bytes", p.len() - r.at));
    }
    if seq == 0 {
        return Err("sequence number 0".into());
    }
    Ok(Decoded {
        record: LogRecord { seq, shard, op },
        batch_start,
    })
}

/// A fleet put's optional idempotency claim: scope length 0 means none (a scope is never
/// empty), else the scope and the request hash.
fn decode_fleet_idem(r: &mut Reader<'_>) -> Result<Option<(String, [u8; 32])>, String> {
    let scope_len = r.u16()? as usize;
    if scope_len == 0 {
        return Ok(None);
    }
    let scope = r.string(scope_len, "scope")?;
    let hash: [u8; 32] = r
        .bytes(32)?
        .try_into()
        .map_err(|_| "short hash".to_string())?;
    Ok(Some((scope, hash)))
}

/// An idempotency record: `TAG_IDEM_RECORD_TAGGED`, or `TAG_IDEM_RECORD` (written before
/// creation tags) read as tag 0.
fn decode_idem_record(r: &mut Reader<'_>, tag: u8) -> Result<LogOp, String> {
    let created_at_s = r.u64()?;
    let created_tag = if tag == TAG_IDEM_RECORD_TAGGED {
        r.u32()?
    } else {
        0
    };
    let request_hash: [u8; 32] = r
        .bytes(32)?
        .try_into()
        .map_err(|_| "short hash".to_string())?;
    let scope_len = r.u16()? as usize;
    let resp_len = r.u16()? as usize;
    let scope = r.string(scope_len, "scope")?;
    let response_key = r.string(resp_len, "response key")?;
    Ok(LogOp::IdemRecord {
        scope,
        request_hash,
        response_key,
        created_at_s,
        created_tag,
    })
}

/// Fixed bytes of a link's fields: status (2), flags (4), expiry, creation, ID (8 each), key
/// length (2), target length (4).
const LINK_FIXED_BYTES: usize = 2 + 4 + 8 + 8 + 8 + 2 + 4;

/// Encoded size of a link's fields: the fixed part, key, target, and the author and
/// behaviour block if any.
fn link_len(l: &LinkFields<&str>) -> usize {
    let author = if l.author.is_some() { AUTHOR_BYTES } else { 0 };
    LINK_FIXED_BYTES
        + l.key.len()
        + l.target.len()
        + author
        + l.behaviour.encoded_len()
        + crate::rules::block_len(l.rules.set())
        + l.labels.block_len()
}

/// A link's fields (shared by `Put` and `PutWithIdem`), in their on-disk order; flags carry
/// [`AUTHOR_FLAG`] exactly when the author's bytes follow the target, and [`BEHAVIOUR_FLAG`]
/// when a behaviour block follows them, [`RULES_FLAG`] when a rules block follows that,
/// [`LABELS_FLAG`] when a labels block comes last.
fn encode_link(out: &mut Vec<u8>, l: &LinkFields<&str>) {
    debug_assert_eq!(
        l.flags & (AUTHOR_FLAG | BEHAVIOUR_FLAG | RULES_FLAG | LABELS_FLAG),
        0,
        "the author, behaviour, rules and labels flags are the encoder's"
    );
    out.extend_from_slice(&l.status.code().to_le_bytes());
    let flags = l.flags | l.author.flag() | l.behaviour.flag() | l.rules.flag() | l.labels.flag();
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&l.expires_at_s.to_le_bytes());
    out.extend_from_slice(&l.created_at_s.to_le_bytes());
    out.extend_from_slice(&l.id.to_le_bytes());
    out.extend_from_slice(&(l.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(l.target.len() as u32).to_le_bytes());
    out.extend_from_slice(l.key.as_bytes());
    out.extend_from_slice(l.target.as_bytes());
    if l.author.is_some() {
        out.extend_from_slice(&l.author.bytes());
    }
    l.behaviour.encode(out);
    crate::rules::encode_block(l.rules.set(), out);
    l.labels.encode_block(out);
}

/// Reads what [`encode_link`] wrote.
fn decode_link(r: &mut Reader<'_>) -> Result<LinkFields, String> {
    let code = r.u16()?;
    let status = RedirectStatus::from_code(code).ok_or_else(|| format!("bad status {code}"))?;
    let flags = r.u32()?;
    let expires_at_s = r.u64()?;
    let created_at_s = r.u64()?;
    let id = r.u64()?;
    let key_len = r.u16()? as usize;
    let target_len = r.u32()? as usize;
    let key = r.string(key_len, "key")?;
    let target = r.string(target_len, "target")?;
    let author = if flags & AUTHOR_FLAG != 0 {
        let b: [u8; AUTHOR_BYTES] = r
            .bytes(AUTHOR_BYTES)?
            .try_into()
            .map_err(|_| "short author".to_string())?;
        Author::from_bytes(b)
            .filter(Author::is_some)
            .ok_or_else(|| "bad author".to_string())?
    } else {
        Author::NONE
    };
    let behaviour = if flags & BEHAVIOUR_FLAG != 0 {
        let (b, len) = Behaviour::decode(&r.p[r.at..])?;
        r.bytes(len)?;
        b
    } else {
        Behaviour::NONE
    };
    let rules = if flags & RULES_FLAG != 0 {
        let (set, len) = crate::rules::decode_block(&r.p[r.at..])?;
        let rules = crate::rules::Rules::current(set);
        r.bytes(len)?;
        rules
    } else {
        crate::rules::Rules::NONE
    };
    let labels = if flags & LABELS_FLAG != 0 {
        let (labels, len) = crate::labels::decode_block(&r.p[r.at..])?;
        r.bytes(len)?;
        labels
    } else {
        crate::labels::Labels::NONE
    };
    Ok(LinkFields {
        key,
        target,
        status,
        expires_at_s,
        created_at_s,
        flags: flags & !(AUTHOR_FLAG | BEHAVIOUR_FLAG | RULES_FLAG | LABELS_FLAG),
        id,
        author,
        behaviour,
        rules,
        labels,
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

struct Reader<'a> {
    p: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.p.len());
        let end = end.ok_or_else(|| "record shorter than its fields".to_string())?;
        let s = &self.p[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32_at(self.bytes(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn string(&mut self, n: usize, what: &str) -> Result<String, String> {
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_rejects() {
        let h = encode_header(7);
        assert_eq!(decode_header(&h), Ok(7));
        let mut bad = h;
        bad[0] ^= 1;
        assert_eq!(decode_header(&bad), Err(HeaderError::Magic));
        let mut bad = h;
        bad[13] ^= 1;
        assert_eq!(decode_header(&bad), Err(HeaderError::Crc));
        let mut v2 = h;
        v2[8] = 2;
        let crc = crc32c::crc32c(&v2[..20]);
        v2[20..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&v2), Err(HeaderError::Version(2)));
    }

    /// An idempotency record written before creation tags reads back with tag 0 (unknown).
    #[test]
    fn an_idempotency_record_from_before_tags_reads_as_tag_zero() {
        let mut p = Vec::new();
        p.extend_from_slice(&9u64.to_le_bytes());
        p.extend_from_slice(&9u64.to_le_bytes());
        p.extend_from_slice(&2u32.to_le_bytes());
        p.push(TAG_IDEM_RECORD);
        p.extend_from_slice(&77u64.to_le_bytes());
        p.extend_from_slice(&[5; 32]);
        p.extend_from_slice(&3u16.to_le_bytes());
        p.extend_from_slice(&1u16.to_le_bytes());
        p.extend_from_slice(b"a:bk");
        let d = decode_payload(&p).unwrap();
        assert_eq!(
            d.record.op,
            LogOp::IdemRecord {
                scope: "a:b".into(),
                request_hash: [5; 32],
                response_key: "k".into(),
                created_at_s: 77,
                created_tag: 0,
            }
        );
    }

    #[test]
    fn frame_roundtrip_all_ops() {
        let ops = [
            LogOp::Put(LinkFields {
                key: "aB3xZ9".into(),
                target: "https://example.com/é".into(),
                status: RedirectStatus::PermanentRedirect,
                expires_at_s: 5,
                created_at_s: 6,
                flags: 0xc0ad_beef,
                id: 42,
                author: Author::from_id("Ab3").unwrap(),
                behaviour: crate::behaviour::Behaviour {
                    valid_since_s: 7,
                    forward_query: Some(false),
                    disabled: None,
                    max_visits: 3,
                    visits: 1,
                    crawlable: true,
                },
                rules: crate::rules::Rules::from_rules(&[crate::rules::Rule {
                    target: "https://example.com/android".into(),
                    conditions: vec![crate::rules::Condition::Device(
                        crate::rules::Device::Android,
                    )],
                }])
                .unwrap(),
                labels: crate::labels::Labels::new(Some("A title"), &["b", "a"]).unwrap(),
            }),
            LogOp::Delete { key: "k".into() },
            LogOp::IdemRecord {
                scope: "api1:idem".into(),
                request_hash: [9; 32],
                response_key: "zzzzzzz".into(),
                created_at_s: 77,
                created_tag: 123_456,
            },
        ];
        for (i, op) in ops.iter().enumerate() {
            let mut buf = Vec::new();
            encode_frame(&mut buf, 10 + i as u64, 123, 5, &op.as_ref());
            assert_eq!(buf.len(), FRAME_HEADER_BYTES + payload_len(&op.as_ref()));
            let f = frame_at(&buf, 0).expect("valid frame");
            assert_eq!(f.total_len, buf.len());
            let d = decode_payload(f.payload).unwrap();
            assert_eq!(d.batch_start, 123);
            assert_eq!(d.record.seq, 10 + i as u64);
            assert_eq!(d.record.shard, 5);
            assert_eq!(&d.record.op, op);
            // Any single flipped payload bit is caught by the CRC.
            for at in FRAME_HEADER_BYTES..buf.len() {
                let mut b = buf.clone();
                b[at] ^= 0x10;
                assert!(frame_at(&b, 0).is_none());
            }
            assert!(frame_at(&buf[..buf.len() - 1], 0).is_none());
        }
    }

    /// A record an older build logged with first-form rules replays with them compiled
    /// (the same rules), so the next table written from it holds the compiled form.
    #[test]
    fn first_form_rules_replay_compiled() {
        let rules = [crate::rules::Rule {
            target: "https://example.com/a".into(),
            conditions: vec![crate::rules::Condition::Device(
                crate::rules::Device::Android,
            )],
        }];
        // count 1; target; 1 condition: kind 1 (device), Android (1).
        let mut first_form = vec![1, rules[0].target.len() as u8, 0];
        first_form.extend_from_slice(rules[0].target.as_bytes());
        first_form.extend_from_slice(&[1, 1, 1]);
        let set = crate::rules::RuleSet::parse(&first_form).unwrap();
        let op = LogOp::Put(LinkFields {
            key: "k".into(),
            target: "https://example.com/".into(),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 1,
            flags: 0,
            id: 1,
            author: Author::NONE,
            behaviour: crate::behaviour::Behaviour::NONE,
            rules: crate::rules::Rules::new(set),
            labels: crate::labels::Labels::NONE,
        });
        let mut buf = Vec::new();
        encode_frame(&mut buf, 1, 1, 0, &op.as_ref());
        let f = frame_at(&buf, 0).expect("valid frame");
        let LogOp::Put(l) = decode_payload(f.payload).unwrap().record.op else {
            panic!("a put")
        };
        let want = crate::rules::encode(&rules).unwrap();
        assert_eq!(l.rules.set().bytes(), &want[..]);
        assert_eq!(l.rules.set().decode().unwrap(), rules);
    }

    #[test]
    fn decode_rejects_trailing_and_bad_tag() {
        let mut p = vec![0u8; PAYLOAD_PREFIX_BYTES];
        p[0] = 1;
        p[20] = 9;
        assert!(decode_payload(&p).unwrap_err().contains("tag"));
        let mut buf = Vec::new();
        encode_frame(&mut buf, 1, 0, 0, &LogOpRef::Delete { key: "k" });
        let mut p = buf[FRAME_HEADER_BYTES..].to_vec();
        p.push(0);
        assert!(decode_payload(&p).unwrap_err().contains("trailing"));
    }
}
