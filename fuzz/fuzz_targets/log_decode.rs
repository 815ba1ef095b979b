//! The append log's frame check and payload decoder on arbitrary bytes: errors, never panics
//! or reads out of bounds; a decoded record encodes back to the same payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shards::log::codec::{decode_payload, encode_frame, frame_at, FRAME_HEADER_BYTES};

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
        assert_eq!(
            &again[FRAME_HEADER_BYTES..],
            data,
            "decode then encode changed the bytes"
        );
    }
});
