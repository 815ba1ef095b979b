//! The sans-IO log writer: encodes records into batches; the caller does the I/O.

use std::io;

use super::codec::{encode_frame, encode_header, payload_len, HEADER_BYTES};
use super::{LogError, LogOp, LogOpRef, MAX_RECORD_BYTES};

/// Bytes to write at `offset`, then `fdatasync`, then hand back via [`LogWriter::complete`].
///
/// The caller must write all of `bytes` (resubmitting after a short write) before syncing. The
/// `Vec` is returned to the writer in `complete` so its allocation is reused.
#[derive(Debug)]
pub struct Batch {
    /// File offset to write at.
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// Sequence number of the first record in the batch.
    pub first_seq: u64,
    /// Sequence number of the last record; durable once `complete` returns `Ok`.
    pub last_seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    offset: u64,
    len: usize,
    last_seq: u64,
}

/// Bytes each of the writer's two batch buffers is given at start: a batch of a few hundred
/// records fits without growing, so the first bursts of writes (or of counted visits, which
/// the redirect path logs) allocate nothing; a larger batch grows a buffer once, which is then
/// kept.
pub const BATCH_BUFFER_RESERVE_BYTES: usize = 64 * 1024;

/// Sans-IO group-commit writer for one log file.
///
/// State: a pending buffer that appends go into, at most one batch in flight, and the highest
/// durable sequence number. A failed write or sync poisons the writer for good: the page cache
/// may have dropped the dirty pages, so retrying the fsync could "succeed" without the data
/// being on disk (the fsyncgate lesson). Only a restart, which re-reads the file through
/// recovery, establishes what is really durable.
#[derive(Debug)]
pub struct LogWriter {
    writer_id: u32,
    /// File offset after every byte handed out in a batch so far; the pending batch goes here.
    end_offset: u64,
    pending: Vec<u8>,
    pending_first_seq: Option<u64>,
    spare: Vec<u8>,
    in_flight: Option<InFlight>,
    next_seq: u64,
    durable_seq: u64,
    /// File length through the last durable batch: what the file must be cut back to when a
    /// batch fails, so that a restart does not revive records that were answered as failed.
    durable_len: u64,
    poison: Option<String>,
}

impl LogWriter {
    /// A writer for writer core `writer_id`'s log, whose valid length is `file_len` (from
    /// recovery; 0 for a new or emptied file, in which case the first batch starts with the file
    /// header) and whose next record gets sequence number `next_seq` (recovery's `max_seq + 1`).
    /// Records below `next_seq` are taken as durable.
    pub fn new(writer_id: u32, file_len: u64, next_seq: u64) -> LogWriter {
        assert!(next_seq >= 1, "sequence numbers start at 1");
        assert!(
            file_len == 0 || file_len >= HEADER_BYTES as u64,
            "file_len inside the header: run recovery first"
        );
        LogWriter {
            writer_id,
            end_offset: file_len,
            pending: Vec::with_capacity(BATCH_BUFFER_RESERVE_BYTES),
            pending_first_seq: None,
            spare: Vec::with_capacity(BATCH_BUFFER_RESERVE_BYTES),
            in_flight: None,
            next_seq,
            durable_seq: next_seq - 1,
            durable_len: file_len,
            poison: None,
        }
    }

    /// Encodes `op` into the pending batch and returns its sequence number. The record is
    /// durable once [`LogWriter::complete`] reports a durable seq at or above it.
    pub fn append(&mut self, shard: u32, op: &LogOp) -> Result<u64, LogError> {
        self.append_ref(shard, op.as_ref())
    }

    /// [`LogWriter::append`] from borrowed fields.
    pub fn append_ref(&mut self, shard: u32, op: LogOpRef<'_>) -> Result<u64, LogError> {
        self.check_poison()?;
        let len = payload_len(&op);
        if len > MAX_RECORD_BYTES {
            return Err(LogError::RecordTooLarge { bytes: len });
        }
        if self.end_offset == 0 && self.pending.is_empty() {
            self.pending
                .extend_from_slice(&encode_header(self.writer_id));
        }
        let seq = self.next_seq;
        encode_frame(&mut self.pending, seq, self.end_offset, shard, &op);
        self.next_seq += 1;
        self.pending_first_seq.get_or_insert(seq);
        Ok(seq)
    }

    /// The next batch to write, if none is in flight and records are pending. Appends made
    /// while a batch is in flight accumulate into the next one (group commit).
    pub fn take_batch(&mut self) -> Result<Option<Batch>, LogError> {
        self.check_poison()?;
        if self.in_flight.is_some() {
            return Ok(None);
        }
        let Some(first_seq) = self.pending_first_seq.take() else {
            return Ok(None);
        };
        let bytes = std::mem::replace(&mut self.pending, std::mem::take(&mut self.spare));
        let batch = Batch {
            offset: self.end_offset,
            first_seq,
            last_seq: self.next_seq - 1,
            bytes,
        };
        self.in_flight = Some(InFlight {
            offset: batch.offset,
            len: batch.bytes.len(),
            last_seq: batch.last_seq,
        });
        self.end_offset += batch.bytes.len() as u64;
        Ok(Some(batch))
    }

    /// Reports the outcome of writing and syncing `batch` (the one from the last `take_batch`;
    /// asserted). On success returns the durable seq. On failure poisons the writer: nothing in
    /// this batch or pending behind it is ever reported durable, and every later call fails.
    pub fn complete(
        &mut self,
        batch: Batch,
        result: Result<(), io::Error>,
    ) -> Result<u64, LogError> {
        let f = self
            .in_flight
            .take()
            .expect("complete without a batch in flight");
        assert!(
            f.offset == batch.offset && f.len == batch.bytes.len() && f.last_seq == batch.last_seq,
            "complete called with a batch that is not the one in flight"
        );
        match result {
            Ok(()) => {
                self.durable_seq = f.last_seq;
                self.durable_len = f.offset + f.len as u64;
                let mut bytes = batch.bytes;
                bytes.clear();
                if bytes.capacity() > self.spare.capacity() {
                    self.spare = bytes;
                }
                Ok(self.durable_seq)
            }
            Err(e) => {
                self.poison = Some(format!(
                    "write+fdatasync of {} bytes at offset {} (seqs {}..={}) failed: {e}",
                    f.len, f.offset, batch.first_seq, batch.last_seq
                ));
                // These bytes can never be written now; free them.
                self.pending = Vec::new();
                self.pending_first_seq = None;
                self.spare = Vec::new();
                self.check_poison().map(|_| unreachable!("just poisoned"))
            }
        }
    }

    /// Highest sequence number known durable.
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    /// File length through the last durable batch (the file's valid length at open, before any
    /// batch completed). After a failed batch, bytes beyond it were never acknowledged.
    pub fn durable_len(&self) -> u64 {
        self.durable_len
    }

    /// Sequence number the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether a batch is being written.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Bytes waiting for the next batch (for back-pressure decisions).
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Whether an earlier write or sync failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_some()
    }

    /// This log's writer id.
    pub fn writer_id(&self) -> u32 {
        self.writer_id
    }

    fn check_poison(&self) -> Result<(), LogError> {
        match &self.poison {
            None => Ok(()),
            Some(reason) => Err(LogError::Poisoned {
                reason: reason.clone(),
                durable_seq: self.durable_seq,
            }),
        }
    }
}
