//! Generated keys: a keyed bijective permutation of the ID space, rendered as 7 base62 chars.
//!
//! IDs come from the segment allocator ([`crate::alloc`]) and are sequential, hence enumerable.
//! Before encoding, an ID goes through a balanced Feistel network keyed from a per-data-dir
//! 32-byte secret, with cycle-walking to stay inside `[0, 62^7)`. The result is a bijection, so
//! uniqueness of IDs gives uniqueness of keys with no lookup, while consecutive IDs give
//! unrelated-looking keys.
//!
//! The round function is XXH3-64 seeded with round keys derived from the secret. That hides
//! ordering from casual observation and scraping; it is not a cryptographic PRP, so short keys
//! must not be treated as credentials (the design seed says the same of any 7-char code).
//!
//! The secret must never change for a data dir: a different permutation would map new IDs
//! onto keys already issued under the old one. [`load_or_create_secret`] therefore refuses to
//! replace a secret file it cannot read.

use std::fs;
use std::io;
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::durable;

/// Width of a generated key in characters. 7 base62 chars hold 62^7 ≈ 3.5 × 10^12 keys: room for
/// 5,000 creations/s for 22 years.
pub const KEY_CHARS: usize = 7;

/// Number of distinct generated keys, `62^7`. IDs and permuted values live in `[0, KEY_SPACE)`.
pub const KEY_SPACE: u64 = 62u64.pow(7);

/// Feistel rounds. Luby–Rackoff needs 3 (4 for strong PRP) with ideal round functions; 6 leaves
/// margin for a fast non-cryptographic round function at negligible cost (~20 ns per key).
pub const FEISTEL_ROUNDS: usize = 6;

/// Name of the key-generation secret file inside the data dir.
pub const SECRET_FILE_NAME: &str = "keygen.secret";

/// Base62 alphabet: digits, upper case, lower case (so that keys sort like their values).
pub const BASE62_ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Secret file layout: magic, 32 secret bytes, CRC32C of the preceding bytes (LE).
const SECRET_MAGIC: &[u8; 8] = b"RCKGSEC1";
const SECRET_FILE_BYTES: usize = 8 + 32 + 4;

/// A keyed bijection on `[0, domain)` built from a balanced Feistel network over the smallest
/// even bit width covering the domain, with cycle-walking. Generic in the domain so it can be
/// tested exhaustively on small domains.
#[derive(Clone, Debug)]
pub struct Feistel {
    domain: u64,
    half_bits: u32,
    round_keys: [u64; FEISTEL_ROUNDS],
}

impl Feistel {
    /// A permutation of `[0, domain)` keyed by `secret`. `domain` must be at least 2 and at most
    /// `2^62` (programmer error otherwise).
    pub fn new(secret: &[u8; 32], domain: u64) -> Feistel {
        assert!((2..=1u64 << 62).contains(&domain), "bad Feistel domain");
        let bits = 64 - (domain - 1).leading_zeros();
        let half_bits = bits.div_ceil(2);
        let mut round_keys = [0u64; FEISTEL_ROUNDS];
        for (r, k) in round_keys.iter_mut().enumerate() {
            // Every round key depends on the whole secret; the tag separates this use of the
            // secret from any other.
            *k = xxh3_64_with_seed(secret, 0x5249_434f_4b47_0000 ^ r as u64);
        }
        Feistel {
            domain,
            half_bits,
            round_keys,
        }
    }

    /// The size of the permuted domain.
    pub fn domain(&self) -> u64 {
        self.domain
    }

    #[inline]
    fn mask(&self) -> u64 {
        (1u64 << self.half_bits) - 1
    }

    #[inline]
    fn round(&self, r: usize, half: u64) -> u64 {
        let mut input = [0u8; 9];
        input[..8].copy_from_slice(&half.to_le_bytes());
        input[8] = r as u8;
        xxh3_64_with_seed(&input, self.round_keys[r]) & self.mask()
    }

    #[inline]
    fn encrypt_block(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask());
        for i in 0..FEISTEL_ROUNDS {
            (l, r) = (r, l ^ self.round(i, r));
        }
        (l << self.half_bits) | r
    }

    #[inline]
    fn decrypt_block(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask());
        for i in (0..FEISTEL_ROUNDS).rev() {
            (l, r) = (r ^ self.round(i, l), l);
        }
        (l << self.half_bits) | r
    }

    /// Permutes `x`, which must be `< domain`. Cycle-walking: the block cipher permutes the
    /// whole `2^(2·half_bits)` block space, so re-encrypting until the value falls back into the
    /// domain stays a bijection on the domain. Expected iterations: `2^bits / domain` (1.25
    /// for 62^7 in 42 bits).
    pub fn permute(&self, x: u64) -> u64 {
        assert!(x < self.domain, "Feistel input out of domain");
        let mut y = self.encrypt_block(x);
        while y >= self.domain {
            y = self.encrypt_block(y);
        }
        y
    }

    /// Inverse of [`Feistel::permute`]; `y` must be `< domain`.
    pub fn unpermute(&self, y: u64) -> u64 {
        assert!(y < self.domain, "Feistel input out of domain");
        let mut x = self.decrypt_block(y);
        while x >= self.domain {
            x = self.decrypt_block(x);
        }
        x
    }
}

/// Turns allocated IDs into 7-char keys and back.
#[derive(Clone, Debug)]
pub struct KeyGen {
    feistel: Feistel,
}

impl KeyGen {
    /// A key generator for the data dir whose secret is `secret`.
    pub fn new(secret: &[u8; 32]) -> KeyGen {
        KeyGen {
            feistel: Feistel::new(secret, KEY_SPACE),
        }
    }

    /// The permuted value of `id` (`id < KEY_SPACE`, asserted).
    pub fn permute(&self, id: u64) -> u64 {
        self.feistel.permute(id)
    }

    /// Inverse of [`KeyGen::permute`] (`x < KEY_SPACE`, asserted).
    pub fn unpermute(&self, x: u64) -> u64 {
        self.feistel.unpermute(x)
    }

    /// The key for `id` (`id < KEY_SPACE`, asserted): 7 base62 chars.
    pub fn key_for(&self, id: u64) -> [u8; KEY_CHARS] {
        base62_encode7(self.permute(id))
    }

    /// The ID whose key is `key`, or `None` if `key` is not exactly 7 base62 chars (custom
    /// aliases of other shapes have no ID). Note a 7-char base62 custom alias does decode to
    /// some ID: alias creation must still go through the uniqueness check.
    pub fn id_for(&self, key: &[u8]) -> Option<u64> {
        base62_decode7(key).map(|x| self.unpermute(x))
    }
}

/// Encodes `x < KEY_SPACE` (asserted) as exactly 7 base62 chars, most significant first,
/// zero-padded with `'0'`.
pub fn base62_encode7(mut x: u64) -> [u8; KEY_CHARS] {
    assert!(x < KEY_SPACE, "value out of 7-char base62 range");
    let mut out = [b'0'; KEY_CHARS];
    for slot in out.iter_mut().rev() {
        *slot = BASE62_ALPHABET[(x % 62) as usize];
        x /= 62;
    }
    out
}

/// Decodes exactly 7 base62 chars; `None` for any other length or character.
pub fn base62_decode7(s: &[u8]) -> Option<u64> {
    if s.len() != KEY_CHARS {
        return None;
    }
    let mut x = 0u64;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return None,
        };
        x = x * 62 + u64::from(d);
    }
    Some(x)
}

/// Reads the data dir's key-generation secret, creating it on first use.
///
/// A new secret comes from the OS CSPRNG and is written crash-safely (temp file, fsync, rename,
/// fsync dir) with mode 0600. An existing file that is the wrong size, has the wrong magic or a
/// bad CRC is an error, never silently replaced: replacing it would change the permutation and
/// let new IDs collide with keys already issued.
pub fn load_or_create_secret(dir: &Path) -> io::Result<[u8; 32]> {
    let path = dir.join(SECRET_FILE_NAME);
    match fs::read(&path) {
        Ok(bytes) => parse_secret(&bytes).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "key-generation secret {} is corrupt (expected {SECRET_FILE_BYTES} bytes, \
                     magic and CRC); restore it from backup, do not delete it",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut secret = [0u8; 32];
            getrandom::getrandom(&mut secret).map_err(io::Error::other)?;
            durable::write_atomic(dir, SECRET_FILE_NAME, &encode_secret(&secret), 0o600)?;
            Ok(secret)
        }
        Err(e) => Err(e),
    }
}

/// The data dir's key-generation secret, if it has one (a fleet node adopted the fleet's at
/// an earlier start: it starts from it while the database does not answer). A damaged file
/// is refused as in [`load_or_create_secret`].
pub fn read_secret(dir: &Path) -> io::Result<Option<[u8; 32]>> {
    match fs::metadata(dir.join(SECRET_FILE_NAME)) {
        Ok(_) => load_or_create_secret(dir).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Makes `secret` (the fleet's, from its database) this data dir's key-generation secret:
/// written if the dir has none, accepted if it holds the same one. A dir holding a different
/// secret is refused: its keys were generated under another permutation, so fleet IDs would
/// map onto keys it already issued. A corrupt file is refused as in [`load_or_create_secret`].
pub fn adopt_secret(dir: &Path, secret: &[u8; 32]) -> io::Result<()> {
    let path = dir.join(SECRET_FILE_NAME);
    match fs::read(&path) {
        Ok(bytes) => match parse_secret(&bytes) {
            Some(local) if &local == secret => Ok(()),
            Some(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds a different key-generation secret than the fleet database: this \
                     data dir generated keys under another permutation, and fleet IDs would \
                     map onto keys it already issued. Use a fresh data dir for this node",
                    path.display()
                ),
            )),
            None => load_or_create_secret(dir).map(|_| ()),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            durable::write_atomic(dir, SECRET_FILE_NAME, &encode_secret(secret), 0o600)
        }
        Err(e) => Err(e),
    }
}

fn encode_secret(secret: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(SECRET_FILE_BYTES);
    v.extend_from_slice(SECRET_MAGIC);
    v.extend_from_slice(secret);
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

fn parse_secret(bytes: &[u8]) -> Option<[u8; 32]> {
    if bytes.len() != SECRET_FILE_BYTES || &bytes[..8] != SECRET_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(bytes[40..44].try_into().ok()?);
    if crc32c::crc32c(&bytes[..40]) != crc {
        return None;
    }
    bytes[8..40].try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const SECRET: [u8; 32] = [7u8; 32];

    #[test]
    fn exhaustive_bijection_small_domains() {
        for domain in [2u64, 3, 62, 62 * 62, 62u64.pow(3), 1 << 16] {
            let f = Feistel::new(&SECRET, domain);
            let mut seen = vec![false; domain as usize];
            for x in 0..domain {
                let y = f.permute(x);
                assert!(y < domain);
                assert!(!seen[y as usize], "collision in domain {domain}");
                seen[y as usize] = true;
                assert_eq!(f.unpermute(y), x);
            }
        }
    }

    #[test]
    fn small_domain_is_not_identity() {
        let f = Feistel::new(&SECRET, 62u64.pow(3));
        let fixed = (0..62u64.pow(3)).filter(|&x| f.permute(x) == x).count();
        // A random permutation has ~1 fixed point on average.
        assert!(fixed < 20, "{fixed} fixed points");
    }

    #[test]
    fn real_domain_inverse_on_samples() {
        let kg = KeyGen::new(&SECRET);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..20_000 {
            let id = rng.gen_range(0..KEY_SPACE);
            let x = kg.permute(id);
            assert!(x < KEY_SPACE);
            assert_eq!(kg.unpermute(x), id);
            let key = kg.key_for(id);
            assert_eq!(kg.id_for(&key), Some(id));
        }
        for id in [0, 1, KEY_SPACE - 2, KEY_SPACE - 1] {
            assert_eq!(kg.unpermute(kg.permute(id)), id);
        }
    }

    #[test]
    fn consecutive_ids_are_not_neighbours() {
        let kg = KeyGen::new(&SECRET);
        let mut shared_prefix = 0;
        let mut prev = kg.key_for(1);
        for id in 2..20_000u64 {
            let k = kg.key_for(id);
            if k[..5] == prev[..5] {
                shared_prefix += 1;
            }
            prev = k;
        }
        // Random keys share a 5-char prefix with probability 62^-5; allow a handful.
        assert!(shared_prefix <= 2, "{shared_prefix} neighbours");
    }

    #[test]
    fn different_secrets_differ() {
        let a = KeyGen::new(&[1u8; 32]);
        let b = KeyGen::new(&[2u8; 32]);
        let same = (1..1000u64)
            .filter(|&i| a.key_for(i) == b.key_for(i))
            .count();
        assert_eq!(same, 0);
    }

    #[test]
    fn base62_roundtrip_and_width() {
        assert_eq!(&base62_encode7(0), b"0000000");
        assert_eq!(&base62_encode7(61), b"000000z");
        assert_eq!(&base62_encode7(62), b"0000010");
        assert_eq!(&base62_encode7(KEY_SPACE - 1), b"zzzzzzz");
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for _ in 0..10_000 {
            let x = rng.gen_range(0..KEY_SPACE);
            let s = base62_encode7(x);
            assert_eq!(s.len(), KEY_CHARS);
            assert_eq!(base62_decode7(&s), Some(x));
        }
        assert_eq!(base62_decode7(b"000000"), None);
        assert_eq!(base62_decode7(b"00000000"), None);
        assert_eq!(base62_decode7(b"00000-0"), None);
        assert_eq!(base62_decode7(b"zzzzzzz"), Some(KEY_SPACE - 1));
    }

    #[test]
    #[should_panic(expected = "out of domain")]
    fn permute_rejects_out_of_domain() {
        KeyGen::new(&SECRET).permute(KEY_SPACE);
    }

    #[test]
    fn secret_created_once_and_reloaded() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let s1 = load_or_create_secret(d.path()).unwrap();
        let s2 = load_or_create_secret(d.path()).unwrap();
        assert_eq!(s1, s2);
        assert_ne!(s1, [0u8; 32]);
        let p = d.path().join(SECRET_FILE_NAME);
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A corrupt secret is refused, not replaced.
        let mut bytes = fs::read(&p).unwrap();
        bytes[10] ^= 1;
        fs::write(&p, &bytes).unwrap();
        let err = load_or_create_secret(d.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(fs::read(&p).unwrap(), bytes);
        fs::write(&p, b"short").unwrap();
        assert!(load_or_create_secret(d.path()).is_err());
    }
}
