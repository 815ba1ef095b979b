//! A link key as the click store holds it: inline up to [`INLINE_KEY_BYTES`] (every generated
//! key and most aliases), on the heap past that. Inline keys cost no allocation and compare
//! without a pointer chase, which is most of a merge's time at millions of links.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Longest key held inline.
pub const INLINE_KEY_BYTES: usize = 22;

/// A link key (1 to `MAX_KEY_BYTES` bytes).
#[derive(Clone)]
pub enum ShortKey {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(Box<[u8]>),
}

impl ShortKey {
    pub fn new(key: &[u8]) -> ShortKey {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            ShortKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            ShortKey::Heap(key.into())
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ShortKey::Inline { len, bytes } => &bytes[..*len as usize],
            ShortKey::Heap(b) => b,
        }
    }
}

impl Default for ShortKey {
    /// The empty key (no link has it; a placeholder).
    fn default() -> ShortKey {
        ShortKey::Inline {
            len: 0,
            bytes: [0; INLINE_KEY_BYTES],
        }
    }
}

impl From<&[u8]> for ShortKey {
    fn from(k: &[u8]) -> ShortKey {
        ShortKey::new(k)
    }
}

impl From<&str> for ShortKey {
    fn from(k: &str) -> ShortKey {
        ShortKey::new(k.as_bytes())
    }
}

impl std::ops::Deref for ShortKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for ShortKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for ShortKey {
    fn eq(&self, o: &ShortKey) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl Eq for ShortKey {}

impl PartialOrd for ShortKey {
    fn partial_cmp(&self, o: &ShortKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for ShortKey {
    fn cmp(&self, o: &ShortKey) -> std::cmp::Ordering {
        self.as_bytes().cmp(o.as_bytes())
    }
}

impl Hash for ShortKey {
    // The same as `[u8]`'s, so a map keyed by `ShortKey` is searched with a `&[u8]`.
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_bytes().hash(h)
    }
}

impl std::fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn short_and_long_keys_are_found_by_their_bytes() {
        let long = [b'x'; 64];
        let mut m: HashMap<ShortKey, u32> = HashMap::new();
        m.insert(ShortKey::new(b"abc1234"), 1);
        m.insert(ShortKey::new(&long), 2);
        assert!(matches!(ShortKey::new(b"abc1234"), ShortKey::Inline { .. }));
        assert!(matches!(ShortKey::new(&long), ShortKey::Heap(_)));
        assert_eq!(m.get(&b"abc1234"[..]), Some(&1));
        assert_eq!(m.get(&long[..]), Some(&2));
        assert_eq!(std::mem::size_of::<ShortKey>(), 24);
    }
}
