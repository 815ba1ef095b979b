//! What a visit shows redirect rules, read from its request without allocating: the
//! `User-Agent`'s device classes, whether `Accept-Language` asks for a language, the query's
//! parameters by name, whether the client's address is in a network. Both program forms
//! ([`super::compiled`], [`super::walked`]) evaluate their conditions with these.

use super::model::{Device, LANGUAGE_MIN_QUALITY};

/// `addr` with the bits past `prefix` cleared.
pub(super) fn masked(addr: &[u8; 16], prefix: u8) -> [u8; 16] {
    (u128::from_be_bytes(*addr) & prefix_mask(prefix)).to_be_bytes()
}

/// The mask of a network's first `prefix` bits (at most 128).
#[inline(always)]
fn prefix_mask(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p => u128::MAX << (128 - u32::from(p.min(128))),
    }
}

/// Whether `ip` is in the network `net` (16 bytes, masked) of `prefix` bits, compared as
/// integers and inlined: [`masked`]'s copy was a call and a 16-byte store read back.
#[inline(always)]
pub(super) fn in_network(ip: &[u8; 16], net: &[u8], prefix: u8) -> bool {
    let Ok(net) = <[u8; 16]>::try_from(net) else {
        return false;
    };
    u128::from_be_bytes(*ip) & prefix_mask(prefix) == u128::from_be_bytes(net)
}

/// Query parameters a visit's evaluation splits once; a query with more is searched each
/// time instead (correct, only slower).
const MAX_PARAMS_SPLIT: usize = 16;

/// A query split into its parameters: per parameter, where its name starts, where its `=`
/// is (or its end, without one), and where it ends. Offsets fit `u16`: a query is part of a
/// request line.
pub(super) struct Params<'q> {
    raw: &'q [u8],
    pairs: [(u16, u16, u16); MAX_PARAMS_SPLIT],
    n: usize,
    overflow: bool,
}

impl<'q> Params<'q> {
    /// One pass over the `&`s and `=`s ([`each_of`]): a `memchr` per separator cost more in
    /// calls, and a byte loop in mispredicted branches, than the split's work.
    pub(super) fn split(raw: &'q [u8]) -> Params<'q> {
        let mut p = Params {
            raw,
            pairs: [(0, 0, 0); MAX_PARAMS_SPLIT],
            n: 0,
            overflow: raw.len() > usize::from(u16::MAX),
        };
        if p.overflow {
            return p;
        }
        let (mut start, mut eq) = (0, None);
        each_of(raw, *b"&=", |i| {
            if raw[i] == b'=' {
                eq = eq.or(Some(i));
            } else {
                p.close(start, eq, i);
                (start, eq) = (i + 1, None);
            }
        });
        p.close(start, eq, raw.len());
        p
    }

    /// Records the parameter `raw[start..end]` (none if empty), `=` at `eq` if any.
    #[inline(always)]
    fn close(&mut self, start: usize, eq: Option<usize>, end: usize) {
        if end <= start || self.overflow {
            return;
        }
        if self.n == MAX_PARAMS_SPLIT {
            self.overflow = true;
            return;
        }
        self.pairs[self.n] = (start as u16, eq.unwrap_or(end) as u16, end as u16);
        self.n += 1;
    }

    pub(super) fn last(&self, key: &[u8]) -> Option<Option<&'q [u8]>> {
        if self.overflow {
            return last_param(self.raw, key);
        }
        self.pairs[..self.n].iter().rev().find_map(|&(s, eq, e)| {
            let (s, eq, e) = (usize::from(s), usize::from(eq), usize::from(e));
            decoded_eq(&self.raw[s..eq], key).then(|| (eq < e).then(|| &self.raw[eq + 1..e]))
        })
    }
}

/// The device classes (a bit per [`Device`]) of a `User-Agent`, by the tokens browsers put in
/// it: `Android`, `iPhone`/`iPad`/`iPod`, `Windows`, `Macintosh`, `Linux`, `CrOS`, `Mobile`.
/// Mobile: Android, iOS, or any other `Mobile`/`Windows Phone`; desktop: Windows, macOS, Linux
/// or ChromeOS and not mobile.
pub fn device_classes(ua: &[u8]) -> u16 {
    let tokens = ua_tokens(ua);
    let has = |t: u16| tokens & t != 0;
    let android = has(T_ANDROID);
    let ios = has(T_IOS);
    let phone = has(T_WINDOWS_PHONE);
    let mobile = android || ios || phone || has(T_MOBILE);
    let chromeos = has(T_CROS);
    let windows = !phone && has(T_WINDOWS);
    let macos = !ios && has(T_MAC);
    let linux = !android && !chromeos && has(T_LINUX);
    let desktop = !mobile && (windows || macos || linux || chromeos);
    let mut bits = 0;
    for (on, d) in [
        (android, Device::Android),
        (ios, Device::Ios),
        (mobile, Device::Mobile),
        (windows, Device::Windows),
        (macos, Device::Macos),
        (linux, Device::Linux),
        (chromeos, Device::Chromeos),
        (desktop, Device::Desktop),
    ] {
        if on {
            bits |= d.bit();
        }
    }
    bits
}

const T_ANDROID: u16 = 1;
const T_IOS: u16 = 1 << 1;
const T_WINDOWS_PHONE: u16 = 1 << 2;
const T_WINDOWS: u16 = 1 << 3;
const T_MOBILE: u16 = 1 << 4;
const T_CROS: u16 = 1 << 5;
const T_MAC: u16 = 1 << 6;
const T_LINUX: u16 = 1 << 7;

/// Which tokens (`T_*`) occur in `ua`, compared only where a token's first two letters are
/// (`iPhone`, `iPad`, `iPod` at their `P`). [`each_token_start`] finds those places 16 bytes
/// at a time: a byte-by-byte loop took 55-75 ns on a desktop browser's `User-Agent`, and
/// comparing at every first letter (`A`, `C`, `L`, `M`, `P`, `W`) found six places in a
/// desktop Chrome's, where two (`Wi`ndows, `Wi`n64) start a token's letters.
fn ua_tokens(ua: &[u8]) -> u16 {
    // Nearly every browser's value starts so, and no token starts in it (its `M` is no
    // token's): not scanned, which spares a candidate and a block.
    const USUAL_START: &[u8] = b"Mozilla/5.0 (";
    let from = if ua.starts_with(USUAL_START) {
        USUAL_START.len()
    } else {
        0
    };
    let mut seen = 0;
    each_token_start(&ua[from..], |i| seen |= token_at(ua, from + i));
    seen
}

/// Whether `b` then `next` can start a token [`token_at`] reads: `An`droid, `Ph`one, `Pa`d,
/// `Po`d, `Wi`ndows, `Mo`bile, `Ma`cintosh, `Cr`OS, `Li`nux.
#[inline(always)]
fn starts_token(b: u8, next: u8) -> bool {
    matches!(
        (b, next),
        (b'A', b'n')
            | (b'P', b'h' | b'a' | b'o')
            | (b'W' | b'L', b'i')
            | (b'M', b'o' | b'a')
            | (b'C', b'r')
    )
}

/// Calls `f` with every index of `hay` where [`starts_token`] holds for it and the byte after
/// (none after the last byte: no token is one byte), in order. On x86_64, 32 places at once
/// where the CPU has AVX2 (checked at run time: std caches the answer), then 16 at once (SSE2,
/// part of the x86_64 baseline): each block compared with the first letters and the block one
/// byte on with the second.
#[inline(always)]
fn each_token_start(hay: &[u8], f: impl FnMut(usize)) {
    #[cfg(target_arch = "x86_64")]
    let wide = std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    each_token_start_with(hay, wide, f);
}

/// [`each_token_start`], with 32-byte blocks if `wide` (which only a CPU with AVX2 may ask).
#[inline(always)]
fn each_token_start_with(hay: &[u8], wide: bool, mut f: impl FnMut(usize)) {
    let mut from = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if wide {
            // SAFETY: `wide` is only true where the CPU has AVX2 (`each_token_start` and the
            // tests ask `is_x86_feature_detected!`).
            from = unsafe { token_starts_avx2(hay, &mut f) };
        }
        from = token_starts_sse2(hay, from, &mut f);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = wide;
    for i in from..hay.len().saturating_sub(1) {
        if starts_token(hay[i], hay[i + 1]) {
            f(i);
        }
    }
}

/// The 32-byte blocks of [`each_token_start`] from the start of `hay`; returns where they end.
/// A desktop browser's `User-Agent` past its usual start is three blocks here, six of 16.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn token_starts_avx2(hay: &[u8], f: &mut impl FnMut(usize)) -> usize {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8,
    };
    let mut from = 0;
    // A block needs its 32 bytes and the one after.
    while from + 33 <= hay.len() {
        // SAFETY: the caller's CPU has AVX2; `hay[from..from + 33]` is in bounds, so both
        // 32-byte loads read `hay`'s bytes, and `_mm256_loadu_si256` needs no alignment.
        let mut bits = unsafe {
            let v = _mm256_loadu_si256(hay.as_ptr().add(from).cast::<__m256i>());
            let w = _mm256_loadu_si256(hay.as_ptr().add(from + 1).cast::<__m256i>());
            let is = |x: __m256i, c: u8| _mm256_cmpeq_epi8(x, _mm256_set1_epi8(c as i8));
            let second_oa = _mm256_or_si256(is(w, b'o'), is(w, b'a'));
            let any = _mm256_or_si256(
                _mm256_or_si256(
                    _mm256_and_si256(is(v, b'A'), is(w, b'n')),
                    _mm256_and_si256(is(v, b'P'), _mm256_or_si256(second_oa, is(w, b'h'))),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_or_si256(is(v, b'W'), is(v, b'L')), is(w, b'i')),
                    _mm256_or_si256(
                        _mm256_and_si256(is(v, b'M'), second_oa),
                        _mm256_and_si256(is(v, b'C'), is(w, b'r')),
                    ),
                ),
            );
            _mm256_movemask_epi8(any) as u32
        };
        while bits != 0 {
            f(from + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
        from += 32;
    }
    from
}

/// The 16-byte blocks of [`each_token_start`] from `hay[from..]`; returns where they end.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn token_starts_sse2(hay: &[u8], mut from: usize, f: &mut impl FnMut(usize)) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // A block needs its 16 bytes and the one after.
    while from + 17 <= hay.len() {
        // SAFETY: SSE2 is enabled on every x86_64 target; `hay[from..from + 17]` is in
        // bounds, so both 16-byte loads read `hay`'s bytes, and `_mm_loadu_si128` needs no
        // alignment.
        let mut bits = unsafe {
            let v = _mm_loadu_si128(hay.as_ptr().add(from).cast::<__m128i>());
            let w = _mm_loadu_si128(hay.as_ptr().add(from + 1).cast::<__m128i>());
            let is = |x: __m128i, c: u8| _mm_cmpeq_epi8(x, _mm_set1_epi8(c as i8));
            let second_i = is(w, b'i');
            let second_oa = _mm_or_si128(is(w, b'o'), is(w, b'a'));
            let any = _mm_or_si128(
                _mm_or_si128(
                    _mm_and_si128(is(v, b'A'), is(w, b'n')),
                    _mm_and_si128(is(v, b'P'), _mm_or_si128(second_oa, is(w, b'h'))),
                ),
                _mm_or_si128(
                    _mm_and_si128(_mm_or_si128(is(v, b'W'), is(v, b'L')), second_i),
                    _mm_or_si128(
                        _mm_and_si128(is(v, b'M'), second_oa),
                        _mm_and_si128(is(v, b'C'), is(w, b'r')),
                    ),
                ),
            );
            _mm_movemask_epi8(any) as u32
        };
        while bits != 0 {
            f(from + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
        from += 16;
    }
    from
}

/// The same, a byte at a time at every first letter: [`each_token_start`]'s oracle.
#[cfg(test)]
fn ua_tokens_scalar(ua: &[u8]) -> u16 {
    let mut seen = 0;
    for i in 0..ua.len() {
        if b"APWMCL".contains(&ua[i]) {
            seen |= token_at(ua, i);
        }
    }
    seen
}

/// Calls `f` with the index of every byte of `hay` equal to one of `needles`, in order. On
/// x86_64, 16 bytes are compared at once (SSE2, part of the x86_64 baseline); the rest a byte
/// at a time. The redirect path's scans of a `User-Agent` and a query use it: branching on
/// every byte cost more than the work.
#[inline(always)]
fn each_of<const N: usize>(hay: &[u8], needles: [u8; N], mut f: impl FnMut(usize)) {
    let mut from = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8, _mm_setzero_si128,
        };
        for block in hay.chunks_exact(16) {
            // SAFETY: SSE2 is enabled on every x86_64 target; `block` is 16 readable bytes
            // and `_mm_loadu_si128` needs no alignment.
            let mut bits = unsafe {
                let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
                let mut any = _mm_setzero_si128();
                for n in needles {
                    any = _mm_or_si128(any, _mm_cmpeq_epi8(v, _mm_set1_epi8(n as i8)));
                }
                _mm_movemask_epi8(any) as u32
            };
            while bits != 0 {
                f(from + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
            from += 16;
        }
    }
    for (i, b) in hay.iter().enumerate().skip(from) {
        if needles.contains(b) {
            f(i);
        }
    }
}

/// The token (`T_*`) starting at `ua[i]`, or 0. Compares the next 8 bytes as one word: a
/// desktop browser's `User-Agent` has about 8 candidate places.
#[inline(always)]
fn token_at(ua: &[u8], i: usize) -> u16 {
    let rest = &ua[i..];
    let w = match rest.first_chunk::<8>() {
        Some(word) => u64::from_le_bytes(*word),
        None => {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(word)
        }
    };
    let is = |t: &[u8]| {
        let mut want = [0u8; 8];
        want[..t.len()].copy_from_slice(t);
        let mask = u64::MAX >> (64 - 8 * t.len());
        w & mask == u64::from_le_bytes(want)
    };
    match rest[0] {
        b'A' if is(b"Android") => T_ANDROID,
        b'P' if i > 0 && ua[i - 1] == b'i' && (is(b"Phone") || is(b"Pad") || is(b"Pod")) => T_IOS,
        b'W' if is(b"Windows") => {
            if rest[7..].starts_with(b" Phone") {
                T_WINDOWS_PHONE | T_WINDOWS
            } else {
                T_WINDOWS
            }
        }
        b'M' if is(b"Mobile") => T_MOBILE,
        b'M' if is(b"Macintos") && rest.get(8) == Some(&b'h') => T_MAC,
        b'C' if is(b"CrOS") => T_CROS,
        b'L' if is(b"Linux") => T_LINUX,
        _ => 0,
    }
}

/// Whether `Accept-Language` asks for `lang` (lowercase `ll` or `ll-rr`): a range of the same
/// language, and region if `lang` names one, with quality at least [`LANGUAGE_MIN_QUALITY`].
/// `*` asks for no language in particular.
pub fn accepts_language(header: &[u8], lang: &[u8]) -> bool {
    let (want_lang, want_region) = split_tag(lang);
    let mut found = false;
    each_range(header, |l, region, params| {
        // The quality is read only for a range that names the language.
        found = l.eq_ignore_ascii_case(want_lang)
            && (want_region.is_empty() || region.eq_ignore_ascii_case(want_region))
            && range_quality(params) >= Some(LANGUAGE_MIN_QUALITY);
        found
    });
    found
}

/// Calls `f(language, region, parameters)` for each range of an `Accept-Language` value, in
/// order, until it returns `true`: the range's first two subtags (its tag trimmed of
/// whitespace) and what follows its `;`. By hand, one range at a time: the iterator chain
/// this replaced took about 25 ns for a match in the first range.
#[inline(always)]
pub(super) fn each_range(header: &[u8], mut f: impl FnMut(&[u8], &[u8], &[u8]) -> bool) {
    let mut rest = header;
    while !rest.is_empty() {
        let end = rest.iter().position(|b| *b == b',').unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        let semi = item.iter().position(|b| *b == b';').unwrap_or(item.len());
        let (l, region) = split_tag(item[..semi].trim_ascii());
        if f(l, region, &item[semi..]) {
            return;
        }
    }
}

/// The quality of a language range from its parameters (`;q=0.8`; none: 1), in thousandths;
/// `None` if malformed (no match).
pub(super) fn range_quality(params: &[u8]) -> Option<u16> {
    params
        .split(|b| *b == b';')
        .find_map(|p| p.trim_ascii().strip_prefix(b"q=").map(quality))
        .unwrap_or(Some(1000))
}

pub(super) fn split_tag(t: &[u8]) -> (&[u8], &[u8]) {
    match t.iter().position(|b| *b == b'-') {
        None => (t, &[]),
        Some(i) => {
            let region = &t[i + 1..];
            let end = region
                .iter()
                .position(|b| *b == b'-')
                .unwrap_or(region.len());
            (&t[..i], &region[..end])
        }
    }
}

/// A `qvalue` (RFC 9110 §12.4.2: `0[.ddd]` or `1[.000]`) in thousandths; `None` if
/// malformed.
fn quality(q: &[u8]) -> Option<u16> {
    let (whole, frac) = match q {
        [w] => (*w, &[][..]),
        [w, b'.', frac @ ..] if frac.len() <= 3 => (*w, frac),
        _ => return None,
    };
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v = 0u16;
    for i in 0..3 {
        v = v * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match whole {
        b'0' => Some(v),
        b'1' if v == 0 => Some(1000),
        _ => None,
    }
}

/// The last value of parameter `key` in `query` (names compared percent-decoded): `None`
/// if absent, `Some(None)` for `key` without `=`, else the raw value.
fn last_param<'q>(query: &'q [u8], key: &[u8]) -> Option<Option<&'q [u8]>> {
    let mut found = None;
    for pair in query.split(|b| *b == b'&') {
        let (k, v) = match memchr::memchr(b'=', pair) {
            Some(i) => (&pair[..i], Some(&pair[i + 1..])),
            None => (pair, None),
        };
        if !pair.is_empty() && decoded_eq(k, key) {
            found = Some(v);
        }
    }
    found
}

/// Whether `raw` (form-encoded: `%XX` and `+` for space) decodes to exactly `want`.
#[inline]
pub(super) fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    // Nearly every name and value is sent plain: compared as bytes. Decoding only shortens,
    // so a shorter `raw` cannot match.
    if raw == want {
        return true;
    }
    if raw.len() < want.len() || !raw.iter().any(|b| matches!(b, b'%' | b'+')) {
        return false;
    }
    percent_decoded_eq(raw, want)
}

fn percent_decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    let mut i = 0;
    let mut w = want.iter();
    while i < raw.len() {
        let b = match raw[i] {
            b'+' => b' ',
            b'%' => match (
                raw.get(i + 1).and_then(|b| hex(*b)),
                raw.get(i + 2).and_then(|b| hex(*b)),
            ) {
                (Some(h), Some(l)) => {
                    i += 2;
                    h << 4 | l
                }
                _ => b'%',
            },
            b => b,
        };
        if w.next() != Some(&b) {
            return false;
        }
        i += 1;
    }
    w.next().is_none()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(in crate::rules) const ANDROID: &[u8] = b"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
    pub(in crate::rules) const IPHONE: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    pub(in crate::rules) const WINDOWS: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";
    pub(in crate::rules) const MAC: &[u8] = b"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
    pub(in crate::rules) const LINUX: &[u8] =
        b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
    pub(in crate::rules) const CROS: &[u8] = b"Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";

    fn classes(ua: &[u8]) -> Vec<&'static str> {
        let bits = device_classes(ua);
        Device::ALL
            .into_iter()
            .filter(|d| bits & d.bit() != 0)
            .map(Device::as_str)
            .collect()
    }

    #[test]
    fn user_agents_fall_in_the_classes_shlink_names() {
        assert_eq!(classes(ANDROID), ["android", "mobile"]);
        assert_eq!(classes(IPHONE), ["ios", "mobile"]);
        assert_eq!(classes(WINDOWS), ["windows", "desktop"]);
        assert_eq!(classes(MAC), ["macos", "desktop"]);
        assert_eq!(classes(LINUX), ["linux", "desktop"]);
        assert_eq!(classes(CROS), ["chromeos", "desktop"]);
        assert!(classes(b"curl/8.5.0").is_empty());
        assert!(classes(b"").is_empty());
    }

    #[test]
    fn languages_match_by_language_and_region_with_shlinks_quality_floor() {
        let h = b"es-ES, en-US;q=0.95, de;q=0.8, fr;q=0";
        assert!(accepts_language(h, b"es"));
        assert!(accepts_language(h, b"es-es"));
        assert!(!accepts_language(h, b"es-mx"));
        assert!(accepts_language(h, b"en"), "q=0.95 is at least 0.9");
        assert!(!accepts_language(h, b"de"), "q=0.8 is below the floor");
        assert!(!accepts_language(h, b"fr"), "q=0 refuses");
        assert!(!accepts_language(b"*", b"en"));
        assert!(!accepts_language(b"", b"en"));
        assert!(accepts_language(b"EN", b"en"), "case-insensitive");
        assert!(
            !accepts_language(b"en;q=x", b"en"),
            "a malformed q is no match"
        );
        assert!(accepts_language(b"en;q=1.000", b"en"));
        assert!(!accepts_language(b"en;q=1.5", b"en"));
    }

    #[test]
    fn query_conditions_read_decoded_names_and_values_and_the_last_repeat() {
        let q = b"utm_source=mail&lang=de&lang=fr&flag&empty=&na%6De=x+y";
        assert_eq!(last_param(q, b"lang"), Some(Some(&b"fr"[..])));
        assert_eq!(last_param(q, b"flag"), Some(None));
        assert_eq!(last_param(q, b"empty"), Some(Some(&b""[..])));
        assert_eq!(last_param(q, b"name"), Some(Some(&b"x+y"[..])));
        assert!(decoded_eq(b"x+y", b"x y"));
        assert!(decoded_eq(b"%41%zz", b"A%zz"));
        assert_eq!(last_param(q, b"missing"), None);
    }

    /// The first version of [`accepts_language`], kept as its oracle.
    fn oracle_accepts_language(header: &[u8], lang: &[u8]) -> bool {
        let tag = |t: &[u8]| -> (Vec<u8>, Vec<u8>) {
            let mut parts = t.splitn(3, |b| *b == b'-');
            (
                parts.next().unwrap_or_default().to_vec(),
                parts.next().unwrap_or_default().to_vec(),
            )
        };
        let (want_lang, want_region) = tag(lang);
        header.split(|b| *b == b',').any(|item| {
            let mut parts = item.split(|b| *b == b';');
            let range = parts.next().unwrap_or_default().trim_ascii();
            let q = parts
                .find_map(|p| p.trim_ascii().strip_prefix(b"q=").map(quality))
                .unwrap_or(Some(1000));
            let (l, region) = tag(range);
            q.is_some_and(|q| q >= LANGUAGE_MIN_QUALITY)
                && l.eq_ignore_ascii_case(&want_lang)
                && (want_region.is_empty() || region.eq_ignore_ascii_case(&want_region))
        })
    }

    proptest! {
        /// The block-wise token search finds what a byte scan finds.
        #[test]
        fn user_agent_tokens_agree_with_a_byte_scan(ua in "(Mozilla/5\\.0 \\()?([ -~]|Android|iPhone|iPad|Windows Phone|Windows|Mobile|Macintosh|CrOS|Linux){0,40}") {
            prop_assert_eq!(ua_tokens(ua.as_bytes()), ua_tokens_scalar(ua.as_bytes()));
            // Each block width, whichever this CPU would choose.
            let mut wides = vec![false];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                wides.push(true);
            }
            for wide in wides {
                let mut seen = 0;
                each_token_start_with(ua.as_bytes(), wide, |i| seen |= token_at(ua.as_bytes(), i));
                prop_assert_eq!(seen, ua_tokens_scalar(ua.as_bytes()));
            }
        }

        /// The redirect path's network test answers as masking both addresses does.
        #[test]
        fn in_network_agrees_with_masking(ip in any::<[u8; 16]>(), net in any::<[u8; 16]>(), prefix in 0u8..=128, near in any::<bool>()) {
            // Half the cases: an address inside or beside the network.
            let ip = if near { let mut a = net; a[15] ^= ip[15]; a } else { ip };
            let net = masked(&net, prefix);
            prop_assert_eq!(in_network(&ip, &net, prefix), masked(&ip, prefix) == net);
        }

        /// The hand-written `Accept-Language` reader answers as the iterator chain it replaced.
        #[test]
        fn languages_agree_with_an_iterator_oracle(h in "([a-zA-Z*]{0,3}(-[a-zA-Z]{0,3}){0,2}( ?; ?q=[01](\\.[0-9]{0,4})?)?( ?;x=1)?,? ?){0,5}", want in "[a-z]{2}(-[a-z]{2})?") {
            prop_assert_eq!(accepts_language(h.as_bytes(), want.as_bytes()), oracle_accepts_language(h.as_bytes(), want.as_bytes()));
        }

        /// The same, on values built from ranges that name the languages asked or nearly
        /// (case, every whitespace `trim_ascii` trims, subtags at and past 8 bytes, odd bytes,
        /// qualities at the floor): random letters, as above, rarely name the language asked.
        #[test]
        fn languages_agree_with_the_oracle_on_near_misses(
            ranges in proptest::collection::vec((
                proptest::sample::select(vec![
                    "ab", "AB", "aB", " ab", "ab ", "\tab\r", "ab\x0c", "a b", "ab-a", "ab-A",
                    "AB-a ", "ab-ab", "ab-a-b", "ab--a", "-a", "a", "abbbbbbb", "ABBBBBBB",
                    "abbbbbb", "abbbbbb-a", "abbbbbbbb", "ab-aaaaaaaa", "ab-aaaaaaaaa", "*",
                    "\x00b", "ab\u{ff}", "",
                ]),
                proptest::sample::select(vec![
                    "", ";q=0.9", ";q=0.8", " ; q=1", ";q=0", ";x=1;q=0.95", ";q=1.5", ";q=", ";x",
                ]),
                proptest::sample::select(vec![",", ", ", ",\t", " ,"]),
            ), 0..6),
            want in proptest::sample::select(vec![
                "ab", "ab-a", "ab-ab", "abbbbbb", "abbbbbbb", "abbbbbbbb", "ab-aaaaaaaa", "ba",
            ]),
            trailing_comma in any::<bool>(),
        ) {
            let mut h = String::new();
            for (i, (range, params, comma)) in ranges.iter().enumerate() {
                if i > 0 {
                    h.push_str(comma);
                }
                h.push_str(range);
                h.push_str(params);
            }
            if trailing_comma {
                h.push(',');
            }
            let (h, want) = (h.as_bytes(), want.as_bytes());
            prop_assert_eq!(accepts_language(h, want), oracle_accepts_language(h, want));
        }

        /// The query split once per evaluation finds what a scan of the raw query finds.
        #[test]
        fn split_parameters_agree_with_a_scan(q in "([a-c%+2=&]{0,6}){0,24}", key in "[a-c% +]{0,3}") {
            let p = Params::split(q.as_bytes());
            prop_assert_eq!(p.last(key.as_bytes()), last_param(q.as_bytes(), key.as_bytes()));
        }
    }
}
