//! A link key stored inline, the vocabulary every role shares: the LRU's keys, the mesh's
//! messages, the memtable's keys.

use shards::link::MAX_STORED_KEY_BYTES;

/// A link key stored inline (no heap), up to [`MAX_STORED_KEY_BYTES`].
#[derive(Clone, Copy)]
pub struct InlineKey {
    len: u8,
    bytes: [u8; MAX_STORED_KEY_BYTES],
}

impl InlineKey {
    /// The empty key (no link has it; fills unused slots).
    pub const EMPTY: InlineKey = InlineKey {
        len: 0,
        bytes: [0; MAX_STORED_KEY_BYTES],
    };

    /// Copies `key`; `None` if it is longer than [`MAX_STORED_KEY_BYTES`].
    pub fn new(key: &[u8]) -> Option<InlineKey> {
        if key.len() > MAX_STORED_KEY_BYTES {
            return None;
        }
        let mut bytes = [0; MAX_STORED_KEY_BYTES];
        bytes[..key.len()].copy_from_slice(key);
        Some(InlineKey {
            len: key.len() as u8,
            bytes,
        })
    }

    /// The key bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The key as text. Keys are validated (`[A-Za-z0-9_-]`, so ASCII) before they become
    /// `InlineKey`s; anything else shows as the empty string.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl PartialEq for InlineKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for InlineKey {}

impl std::hash::Hash for InlineKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for InlineKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InlineKey({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}
