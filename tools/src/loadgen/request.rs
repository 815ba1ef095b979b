//! What each scheduled request asks for, and its bytes on the wire.

use shards::link::MAX_KEY_BYTES;
use std::io::Write;

use super::links::Dataset;
use super::zipf::{KeyDist, KeySampler};
use crate::datagen::gen_url;
use crate::rng::Rng;

/// Path of ricochet's create endpoint.
pub const CREATE_PATH: &str = "/api/v1/urls";

/// What one request is and therefore what its response must be. Unknown keys and create bodies
/// are derived from a seed when written, so a queued request holds no heap data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// GET of dataset link `i`: its status and `Location` must match the dataset.
    Link(u32),
    /// GET of a key that is not in the dataset: must be 404.
    Unknown(u64),
    /// POST of a new link: must be 201.
    Create(u64),
}

/// Request kinds, for per-kind counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// [`Expect::Link`].
    Link,
    /// [`Expect::Unknown`].
    Unknown,
    /// [`Expect::Create`].
    Create,
}

impl Expect {
    /// This request's kind.
    pub fn kind(&self) -> RequestKind {
        match self {
            Expect::Link(_) => RequestKind::Link,
            Expect::Unknown(_) => RequestKind::Unknown,
            Expect::Create(_) => RequestKind::Create,
        }
    }
}

/// Errors setting up the request mix.
#[derive(Debug, thiserror::Error)]
pub enum MixError {
    #[error("unknown-share + create-share must be within 0..=1")]
    Shares,
    #[error(
        "the dataset has {MAX_KEY_BYTES}-byte keys, so no longer key can be guaranteed unknown"
    )]
    NoRoomForUnknownKeys,
    #[error("dataset has more than 2^32 links")]
    TooManyLinks,
}

/// Draws the sequence of requests: dataset keys by popularity, plus shares of unknown keys and
/// creates.
#[derive(Clone, Debug)]
pub struct RequestMix {
    sampler: KeySampler,
    unknown_share: f64,
    create_share: f64,
    rng: Rng,
}

impl RequestMix {
    /// A mix over `data`.
    pub fn new(
        data: &Dataset,
        dist: KeyDist,
        unknown_share: f64,
        create_share: f64,
        seed: u64,
    ) -> Result<RequestMix, MixError> {
        let ok = |x: f64| (0.0..=1.0).contains(&x);
        if !(ok(unknown_share) && ok(create_share) && ok(unknown_share + create_share)) {
            return Err(MixError::Shares);
        }
        if unknown_share > 0.0 && data.max_key_len() >= MAX_KEY_BYTES {
            return Err(MixError::NoRoomForUnknownKeys);
        }
        if data.len() > u32::MAX as usize {
            return Err(MixError::TooManyLinks);
        }
        Ok(RequestMix {
            sampler: KeySampler::new(data.len() as u64, dist),
            unknown_share,
            create_share,
            rng: Rng::new(seed),
        })
    }

    /// The next request.
    pub fn next_request(&mut self) -> Expect {
        let x = self.rng.unit_f64();
        if x < self.unknown_share {
            Expect::Unknown(self.rng.next_u64())
        } else if x < self.unknown_share + self.create_share {
            Expect::Create(self.rng.next_u64())
        } else {
            Expect::Link(self.sampler.sample(&mut self.rng) as u32)
        }
    }
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Writes the unknown key for `seed` into `buf` and returns it. It is one byte longer than the
/// longest dataset key (at least 12 bytes), so it cannot equal any dataset key, even ignoring case.
pub fn unknown_key(seed: u64, data: &Dataset, buf: &mut [u8; MAX_KEY_BYTES]) -> usize {
    let len = (data.max_key_len() + 1).clamp(12, MAX_KEY_BYTES);
    debug_assert!(len > data.max_key_len());
    let mut rng = Rng::new(seed);
    for b in &mut buf[..len] {
        *b = BASE62[rng.below(62) as usize];
    }
    len
}

/// Request rendering settings.
#[derive(Clone, Debug)]
pub struct RequestWriter {
    host: Vec<u8>,
    auth: Vec<u8>,
    url: String,
    /// With click headers: requests written so far (picks the user agent, referrer and
    /// client address of the next one).
    clicks: Option<u64>,
}

/// The user agents `--click-headers` rotates through (current browsers and one crawler).
const CLICK_UAS: [&str; 6] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
];
/// Referrer hosts `--click-headers` rotates through.
const CLICK_REFERRERS: [&str; 5] = [
    "https://www.google.com/",
    "https://t.co/AbCdEf",
    "https://news.ycombinator.com/item?id=1",
    "https://www.reddit.com/r/rust/comments/x",
    "https://mail.example.com/inbox?session=secret",
];

impl RequestWriter {
    /// `host` goes into the Host header; `api_key` authorizes creates.
    pub fn new(host: &str, api_key: Option<&str>) -> RequestWriter {
        RequestWriter {
            host: host.as_bytes().to_vec(),
            auth: api_key.map_or_else(Vec::new, |k| k.as_bytes().to_vec()),
            url: String::new(),
            clicks: None,
        }
    }

    /// GETs carry a user agent, a referrer (none for one in six) and an `X-Forwarded-For`
    /// address (one of 65,536), rotating.
    pub fn with_click_headers(mut self, on: bool) -> RequestWriter {
        self.clicks = on.then_some(0);
        self
    }

    /// Appends the request for `expect` to `out`.
    pub fn write(&mut self, out: &mut Vec<u8>, expect: Expect, data: &Dataset) {
        match expect {
            Expect::Link(i) => {
                let i = i as usize;
                self.write_get(out, data.key(i), data.host(i));
            }
            Expect::Unknown(seed) => {
                let mut buf = [0u8; MAX_KEY_BYTES];
                let n = unknown_key(seed, data, &mut buf);
                self.write_get(out, &buf[..n], None);
            }
            Expect::Create(seed) => {
                gen_url(&mut Rng::new(seed), &mut self.url);
                // Generated URLs hold nothing JSON must escape.
                let body_len = b"{\"long_url\":\"\"}".len() + self.url.len();
                out.extend_from_slice(b"POST ");
                out.extend_from_slice(CREATE_PATH.as_bytes());
                out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
                out.extend_from_slice(&self.host);
                if !self.auth.is_empty() {
                    out.extend_from_slice(b"\r\nAuthorization: Bearer ");
                    out.extend_from_slice(&self.auth);
                }
                out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
                out.extend_from_slice(body_len.to_string().as_bytes());
                out.extend_from_slice(b"\r\n\r\n{\"long_url\":\"");
                out.extend_from_slice(self.url.as_bytes());
                out.extend_from_slice(b"\"}");
            }
        }
    }

    /// A GET of `key`, naming `host` (the link's own, from its links file line) or else the
    /// writer's.
    fn write_get(&mut self, out: &mut Vec<u8>, key: &[u8], host: Option<&[u8]>) {
        out.extend_from_slice(b"GET /");
        out.extend_from_slice(key);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host.unwrap_or(&self.host));
        if let Some(n) = self.clicks.as_mut() {
            *n += 1;
            let n = *n;
            // A cheap mix so the three rotate independently.
            let m = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            out.extend_from_slice(b"\r\nUser-Agent: ");
            out.extend_from_slice(CLICK_UAS[(m >> 60) as usize % CLICK_UAS.len()].as_bytes());
            let r = (m >> 40) as usize % (CLICK_REFERRERS.len() + 1);
            if let Some(referrer) = CLICK_REFERRERS.get(r) {
                out.extend_from_slice(b"\r\nReferer: ");
                out.extend_from_slice(referrer.as_bytes());
            }
            let ip = (m >> 16) as u16;
            let _ = write!(out, "\r\nX-Forwarded-For: 10.0.{}.{}", ip >> 8, ip & 255);
        }
        out.extend_from_slice(b"\r\n\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Dataset {
        Dataset::parse(b"abc\thttps://a.com/x\nlonger_key-1\thttps://b.com/\t301\n".to_vec())
            .unwrap()
    }

    #[test]
    fn renders_requests() {
        let d = data();
        let mut w = RequestWriter::new("h:1", Some("K"));
        let mut out = Vec::new();
        w.write(&mut out, Expect::Link(0), &d);
        assert_eq!(out, b"GET /abc HTTP/1.1\r\nHost: h:1\r\n\r\n");

        out.clear();
        w.write(&mut out, Expect::Create(9), &d);
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut headers);
        let n = req.parse(&out).unwrap().unwrap();
        assert_eq!(req.method, Some("POST"));
        assert_eq!(req.path, Some(CREATE_PATH));
        let auth = req
            .headers
            .iter()
            .find(|h| h.name == "Authorization")
            .unwrap();
        assert_eq!(auth.value, b"Bearer K");
        let body: serde_json::Value = serde_json::from_slice(&out[n..]).unwrap();
        let url = body["long_url"].as_str().unwrap();
        shards::link::validate_url(url).unwrap();
    }

    #[test]
    fn unknown_keys_never_collide() {
        let d = data();
        let mut buf = [0u8; MAX_KEY_BYTES];
        for seed in 0..1000 {
            let n = unknown_key(seed, &d, &mut buf);
            assert!(n > d.max_key_len());
            shards::link::validate_key(&buf[..n]).unwrap();
        }
        let long = format!("{}\thttps://a.com\n", "k".repeat(MAX_KEY_BYTES));
        let d = Dataset::parse(long.into_bytes()).unwrap();
        assert!(matches!(
            RequestMix::new(&d, KeyDist::Uniform, 0.1, 0.0, 1),
            Err(MixError::NoRoomForUnknownKeys)
        ));
        assert!(RequestMix::new(&d, KeyDist::Uniform, 0.0, 0.0, 1).is_ok());
    }

    #[test]
    fn mix_shares() {
        let d = data();
        assert!(RequestMix::new(&d, KeyDist::Uniform, 0.7, 0.5, 1).is_err());
        let mut m = RequestMix::new(&d, KeyDist::Uniform, 0.1, 0.2, 1).unwrap();
        let (mut u, mut c, mut l) = (0, 0, 0);
        for _ in 0..10_000 {
            match m.next_request() {
                Expect::Unknown(_) => u += 1,
                Expect::Create(_) => c += 1,
                Expect::Link(i) => {
                    assert!((i as usize) < d.len());
                    l += 1
                }
            }
        }
        assert!((800..1200).contains(&u), "{u}");
        assert!((1700..2300).contains(&c), "{c}");
        assert_eq!(u + c + l, 10_000);
    }
}
