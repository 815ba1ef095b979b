//! The append log's frame check and payload decoder on arbitrary bytes: errors, never panics
//! or reads out of bounds; a decoded record encodes back to a payload that decodes to the same
//! record, byte for byte the same unless its op is one only read (`READ_ONLY_OP_TAGS`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shards::log::codec::{
    decode_payload, encode_frame, frame_at, FRAME_HEADER_BYTES, OP_TAG_AT, READ_ONLY_OP_TAGS,
};

fuzz_target!(|data: &[u8]| {
    if let Some(f) = frame_at(data, 0) {
        assert!(f.total_len <= data.len());
    }
    if data.len() > shards::log::MAX_RECORD_BYTES {
        return; // frame_at refuses such lengths before a payload is ever decoded
    }
    if let Ok(d) = decode_payload(data) {
        let mut again = Vec::new();
        encode_frame(
            &mut again,
            d.record.seq,
            d.batch_start,
            d.record.shard,
            &d.record.op.as_ref(),
        );
        let payload = &again[FRAME_HEADER_BYTES..];
        let twice = decode_payload(payload).expect("an encoded record decodes");
        assert_eq!(twice.record, d.record, "decode, encode, decode changed the record");
        assert_eq!(twice.batch_start, d.batch_start);
        if !READ_ONLY_OP_TAGS.contains(&data[OP_TAG_AT]) {
            assert_eq!(payload, data, "decode then encode changed the bytes");
        }
    }
});
