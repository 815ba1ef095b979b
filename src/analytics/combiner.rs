//! The core's side of click counting: a preallocated, fixed-capacity table per batch (the
//! combiner) that a click increments in place, handed whole to the core's aggregator thread
//! at each sweep or when it fills. Nothing here allocates once the batches exist, takes a lock
//! or makes a syscall per click: a hand-off is one `try_send` on a bounded channel, at most
//! once per sweep or per full batch. When no clean batch is free the click is dropped and
//! counted, never waited for.
//!
//! A click is `(link key, ClickCtx)`; identical clicks (same visitor, same UA, same referrer)
//! share one entry. User agent and referrer travel as 64-bit hashes; the bytes of each distinct
//! string go once in the batch that first names it (`strings`), and the core remembers which
//! ones its aggregator already has (`seen`), so a busy link costs one increment per click.

use crate::base::key::InlineKey;
use crossbeam::channel::{Receiver, Sender, TrySendError};
use shards::clicks::Day;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Slots of a batch's table (a power of two); a batch is full at half of them.
pub const BATCH_SLOTS: usize = 4096;
/// Entries a batch holds before it is handed off.
pub const BATCH_MAX_ENTRIES: usize = BATCH_SLOTS / 2;
/// Bytes of distinct user-agent and referrer strings a batch carries.
pub const BATCH_STRING_BYTES: usize = 64 * 1024;
/// Distinct strings a batch carries.
pub const BATCH_MAX_STRINGS: usize = 1024;
/// Batches per core: one filling, the rest with (or returning from) the aggregator.
pub const BATCHES_PER_CORE: usize = 4;
/// Longest user agent kept for classification (longer ones are cut; classifiers look at the
/// start).
pub const MAX_UA_BYTES: usize = 512;
/// Slots of the core's memory of strings its aggregator has (direct-mapped).
pub const SEEN_SLOTS: usize = 8192;

/// The seeds of the string and key hashes: fixed, so every core agrees on a string's hash
/// (the aggregator learns each string once, whichever core sent it).
const HASH_SEEDS: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];

/// What the core knows of a click besides its key: the client address (IPv6 or v4-mapped),
/// the hashes of its user agent and referrer host (0: none), and which redirect rule sent it
/// ([`ClickRule`]). All zero in `counts` mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClickCtx {
    pub ip: [u8; 16],
    pub ua: u64,
    pub referrer: u64,
    pub rule: ClickRule,
}

/// Which redirect rule sent a click: 0 the link has none, 1 to `MAX_RULES_PER_LINK` that
/// rule (its priority), [`ClickRule::DEFAULT`] the link has rules and none matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClickRule(pub u8);

impl ClickRule {
    pub const NONE: ClickRule = ClickRule(0);
    pub const DEFAULT: ClickRule = ClickRule(u8::MAX);
    /// Not a click: a GET of a short code no link has, carried for the visit log only (an
    /// orphan visit; never counted as a click).
    pub const ORPHAN: ClickRule = ClickRule(u8::MAX - 1);
    /// Not a click: a GET of a domain's base URL (`/`), an orphan visit like [`Self::ORPHAN`].
    pub const ORPHAN_BASE_URL: ClickRule = ClickRule(u8::MAX - 2);
    /// Not a click: a GET of any other path that matched nothing, an orphan visit.
    pub const ORPHAN_REGULAR_404: ClickRule = ClickRule(u8::MAX - 3);

    /// The orphan visit's kind this rule marks, if it marks one.
    pub fn orphan(self) -> Option<shards::clicks::visits::Orphan> {
        use shards::clicks::visits::Orphan;
        match self {
            ClickRule::ORPHAN => Some(Orphan::InvalidShortUrl),
            ClickRule::ORPHAN_BASE_URL => Some(Orphan::BaseUrl),
            ClickRule::ORPHAN_REGULAR_404 => Some(Orphan::Regular404),
            _ => None,
        }
    }

    /// The rule marking an orphan visit of `kind`.
    fn of_orphan(kind: shards::clicks::visits::Orphan) -> ClickRule {
        use shards::clicks::visits::Orphan;
        match kind {
            Orphan::InvalidShortUrl => ClickRule::ORPHAN,
            Orphan::BaseUrl => ClickRule::ORPHAN_BASE_URL,
            Orphan::Regular404 => ClickRule::ORPHAN_REGULAR_404,
        }
    }

    /// The rule at 0-based `index` of the link's list.
    pub fn matched(index: u8) -> ClickRule {
        debug_assert!(usize::from(index) < shards::rules::MAX_RULES_PER_LINK);
        ClickRule(index + 1)
    }
}

const _: () = assert!(shards::rules::MAX_RULES_PER_LINK < u8::MAX as usize - 3);

/// A GET's click, taken when its request is read and counted if it is answered with a
/// redirect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Click {
    /// Counted, with this context.
    Take(ClickCtx),
    /// No clean batch was free when the request was read: dropped (and counted as dropped)
    /// if it is answered with a redirect. Its header fields were never looked at, so a core
    /// whose aggregator fell behind spends nothing on clicks it cannot keep.
    Starved,
}

/// The request's parts a click is taken from.
#[derive(Clone, Copy, Debug)]
pub struct ClickFields<'a> {
    /// The TCP peer (IPv6 or v4-mapped).
    pub peer: [u8; 16],
    pub forwarded_for: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
}

/// Which header a carried string came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrKind {
    UserAgent,
    Referrer,
}

#[derive(Clone, Copy)]
struct Entry {
    key: InlineKey,
    ctx: ClickCtx,
    count: u32,
}

/// A distinct string carried by a batch: its hash, kind and place in `strings`.
#[derive(Clone, Copy, Debug)]
pub struct CarriedStr {
    pub hash: u64,
    pub kind: StrKind,
    pub start: u32,
    pub len: u32,
}

/// One batch of combined clicks, all on one UTC day.
///
/// The table is split for the cache: `index` (16 KiB, stays in L1/L2) holds per slot a tag of
/// the hash and the place of the entry in `entries`, which fills in order; a probe reads only
/// `index` until a tag matches, and a new click writes the next entry, sequentially.
pub struct Batch {
    /// The core's message number (see [`CoreMsg`]).
    pub seq: u64,
    pub day: Day,
    /// Unix ms at which the batch was handed off.
    pub sealed_ms: u64,
    /// Per slot: 0 (free), or `tag << ENTRY_BITS | (entry + 1)`.
    index: Box<[u32]>,
    entries: Vec<Entry>,
    pub strings: Vec<u8>,
    pub carried: Vec<CarriedStr>,
    /// GET requests for unknown keys this batch counted (server-wide, no key).
    pub not_found: u64,
}

/// Bits of an index slot that name the entry (the rest is the hash tag).
const ENTRY_BITS: u32 = 12;
const ENTRY_MASK: u32 = (1 << ENTRY_BITS) - 1;
const _: () = assert!(BATCH_MAX_ENTRIES < (1 << ENTRY_BITS));

impl Batch {
    pub fn new() -> Box<Batch> {
        Box::new(Batch {
            seq: 0,
            day: 0,
            sealed_ms: 0,
            index: vec![0; BATCH_SLOTS].into_boxed_slice(),
            entries: Vec::with_capacity(BATCH_MAX_ENTRIES),
            strings: Vec::with_capacity(BATCH_STRING_BYTES),
            carried: Vec::with_capacity(BATCH_MAX_STRINGS),
            not_found: 0,
        })
    }

    /// Empties the batch for reuse (on the aggregator: the core never pays for it).
    pub fn clear(&mut self) {
        self.index.fill(0);
        self.entries.clear();
        self.strings.clear();
        self.carried.clear();
        self.not_found = 0;
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.not_found == 0 && self.carried.is_empty()
    }

    /// Every combined click: key, context, count.
    pub fn entries(&self) -> impl Iterator<Item = (&InlineKey, &ClickCtx, u32)> {
        self.entries_from(0)
    }

    /// The combined clicks from the `first`-th on (a slice of work resumes there).
    pub fn entries_from(&self, first: usize) -> impl Iterator<Item = (&InlineKey, &ClickCtx, u32)> {
        self.entries[first.min(self.entries.len())..]
            .iter()
            .map(|e| (&e.key, &e.ctx, e.count))
    }

    /// How many combined clicks the batch holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bytes of a carried string.
    pub fn string(&self, s: &CarriedStr) -> &[u8] {
        &self.strings[s.start as usize..(s.start + s.len) as usize]
    }

    /// Adds one click; `false` if the table is full (the caller hands the batch off first).
    #[inline]
    fn add(&mut self, key: &[u8], ctx: &ClickCtx, hash: u64) -> bool {
        let mask = BATCH_SLOTS - 1;
        let tag = ((hash >> 44) as u32) << ENTRY_BITS;
        let mut i = hash as usize & mask;
        loop {
            let slot = self.index[i];
            if slot == 0 {
                if self.entries.len() >= BATCH_MAX_ENTRIES {
                    return false;
                }
                self.entries.push(Entry {
                    key: InlineKey::new(key).expect("validated keys fit inline"),
                    ctx: *ctx,
                    count: 1,
                });
                self.index[i] = tag | self.entries.len() as u32;
                return true;
            }
            if slot & !ENTRY_MASK == tag {
                let e = &mut self.entries[(slot & ENTRY_MASK) as usize - 1];
                if e.ctx == *ctx && e.key.as_bytes() == key {
                    e.count = e.count.saturating_add(1);
                    return true;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Copies a string this batch carries; `false` if there is no room.
    fn carry(&mut self, kind: StrKind, hash: u64, bytes: &[u8]) -> bool {
        if self.carried.len() >= BATCH_MAX_STRINGS
            || self.strings.len() + bytes.len() > BATCH_STRING_BYTES
        {
            return false;
        }
        let start = self.strings.len() as u32;
        self.strings.extend_from_slice(bytes);
        self.carried.push(CarriedStr {
            hash,
            kind,
            start,
            len: bytes.len() as u32,
        });
        true
    }
}

/// What a core sends its aggregator, numbered by `seq` (one counter for both kinds).
pub enum CoreMsg {
    /// Clicks to classify and merge.
    Batch(Box<Batch>),
    /// Nothing was clicked since the last message: every click answered before `sealed_ms`
    /// has been handed off.
    Tick { seq: u64, sealed_ms: u64 },
    /// The core stopped; nothing more comes (sent after its last batch on shutdown).
    Closed,
}

/// Counters of the combiner, published per sweep.
#[derive(Clone, Copy, Debug, Default)]
pub struct CombinerTally {
    pub clicks: u64,
    pub dropped: u64,
    pub batches: u64,
}

/// One core's combiner.
pub struct Combiner {
    full: bool,
    current: Option<Box<Batch>>,
    clean: Receiver<Box<Batch>>,
    to_agg: Sender<CoreMsg>,
    /// Number of the last message sent.
    seq: u64,
    seen: Box<[u64]>,
    /// The aggregator's string-table epoch this core's `seen` belongs to (it forgets every
    /// string when its table fills, and bumps the epoch).
    seen_epoch: u64,
    agg_epoch: Arc<AtomicU64>,
    /// The visit log is on: GETs of unknown short codes are carried as orphan visits.
    log_orphans: bool,
    pub tally: CombinerTally,
}

impl Combiner {
    /// A combiner handing batches to `to_agg` and taking them back from `clean` (which holds
    /// the [`BATCHES_PER_CORE`] batches at start). `full`: keep the click context (else only
    /// counts per key).
    pub fn new(
        full: bool,
        clean: Receiver<Box<Batch>>,
        to_agg: Sender<CoreMsg>,
        agg_epoch: Arc<AtomicU64>,
    ) -> Combiner {
        Combiner {
            full,
            current: None,
            clean,
            to_agg,
            seq: 0,
            seen: vec![0; SEEN_SLOTS].into_boxed_slice(),
            seen_epoch: 0,
            agg_epoch,
            log_orphans: false,
            tally: CombinerTally::default(),
        }
    }

    /// With the visit log on, GETs of unknown short codes are carried for it (`not_found`).
    pub fn log_orphans(&mut self, on: bool) {
        self.log_orphans = on && self.full;
    }

    /// Whether a batch handed off waits for the aggregator.
    #[inline]
    pub fn waiting(&self) -> bool {
        !self.to_agg.is_empty()
    }

    /// Whether the click context (UA, referrer, IP) is kept.
    pub fn full(&self) -> bool {
        self.full
    }

    /// The batch clicks on `day` go to: the current one, or a clean one (the current is handed
    /// off first when its day passed). `None`: no clean batch is free.
    fn batch_for(&mut self, day: Day) -> Option<&mut Batch> {
        if self.current.as_ref().is_some_and(|b| b.day != day) {
            self.hand_off();
        }
        if self.current.is_none() {
            let mut b = self.clean.try_recv().ok()?;
            b.day = day;
            self.current = Some(b);
        }
        self.current.as_deref_mut()
    }

    /// The click of a GET with these fields: in `full` mode its context (the client address
    /// as `mode` says, the hashes of its user agent and referrer host); in `counts` mode none,
    /// and no field is looked at. [`Click::Starved`] when no batch is free.
    #[inline]
    pub fn take(&mut self, mode: super::ClientIp, f: &ClickFields<'_>, now_s: u64) -> Click {
        let day = shards::clicks::day_of(now_s);
        if self.batch_for(day).is_none() {
            return Click::Starved;
        }
        if !self.full {
            return Click::Take(ClickCtx::default());
        }
        let ip = client_ip(mode, f.peer, f.forwarded_for);
        let referrer = f.referer.and_then(referrer_host);
        Click::Take(self.context(ip, f.user_agent, referrer, day))
    }

    /// The `full` context of a click on `day` with these request fields (hashes only; a
    /// string the aggregator may not have yet is copied into the current batch).
    #[inline]
    fn context(
        &mut self,
        ip: [u8; 16],
        user_agent: Option<&[u8]>,
        referrer_host: Option<&[u8]>,
        day: Day,
    ) -> ClickCtx {
        debug_assert!(self.full, "counts mode keeps no context");
        let ua = user_agent
            .filter(|u| !u.is_empty())
            .map(|u| &u[..u.len().min(MAX_UA_BYTES)]);
        let rf = referrer_host.filter(|r| !r.is_empty());
        let ctx = ClickCtx {
            ip,
            ua: ua.map_or(0, |u| self.hash_str(u)),
            referrer: rf.map_or(0, |r| self.hash_str(r)),
            rule: ClickRule::NONE,
        };
        if let Some(u) = ua {
            self.carry_once(StrKind::UserAgent, ctx.ua, u, day);
        }
        if let Some(r) = rf {
            self.carry_once(StrKind::Referrer, ctx.referrer, r, day);
        }
        ctx
    }

    /// The key's hash mixed with the context's (already hashes, and the address): one
    /// multiply per word, no hashing of the context's bytes again.
    #[inline]
    fn entry_hash(&self, key: &[u8], ctx: &ClickCtx) -> u64 {
        const M: u64 = 0x9E37_79B9_7F4A_7C15;
        let ip = u128::from_le_bytes(ctx.ip);
        let mut h = xxhash_rust::xxh3::xxh3_64_with_seed(key, HASH_SEEDS[1]);
        let ua = ctx.ua ^ u64::from(ctx.rule.0) << 56;
        for w in [ua, ctx.referrer, ip as u64, (ip >> 64) as u64] {
            h = (h ^ w).wrapping_mul(M).rotate_left(29);
        }
        h ^ (h >> 32)
    }

    #[inline]
    fn hash_str(&self, s: &[u8]) -> u64 {
        // xxh3 (SSE2 on every x86-64): user agents are ~100 bytes, hashed once per click.
        // Never 0: 0 means "absent".
        xxhash_rust::xxh3::xxh3_64_with_seed(s, HASH_SEEDS[0]) | 1
    }

    fn carry_once(&mut self, kind: StrKind, hash: u64, bytes: &[u8], day: Day) {
        let slot = hash as usize & (SEEN_SLOTS - 1);
        if self.seen[slot] == hash {
            return;
        }
        let Some(b) = self.batch_for(day) else {
            return; // Sent with a later click's batch, if any.
        };
        if !b.carry(kind, hash, bytes) {
            self.hand_off();
            let Some(b) = self.batch_for(day) else {
                return;
            };
            if !b.carry(kind, hash, bytes) {
                return;
            }
        }
        self.seen[slot] = hash;
    }

    /// Counts one click on `key` (a GET answered with a redirect), taken by [`Self::take`],
    /// sent by `rule` (kept in `full` mode only).
    #[inline]
    pub fn record(&mut self, key: &[u8], click: &Click, rule: ClickRule, now_s: u64) {
        let Click::Take(ctx) = click else {
            self.tally.dropped += 1;
            return;
        };
        let ctx = &ClickCtx {
            rule: if self.full { rule } else { ClickRule::NONE },
            ..*ctx
        };
        let day = shards::clicks::day_of(now_s);
        let hash = self.entry_hash(key, ctx);
        let Some(b) = self.batch_for(day) else {
            self.tally.dropped += 1;
            return;
        };
        if !b.add(key, ctx, hash) {
            self.hand_off();
            let Some(b) = self.batch_for(day) else {
                self.tally.dropped += 1;
                return;
            };
            let added = b.add(key, ctx, hash);
            debug_assert!(added, "an empty batch takes a click");
        }
        self.tally.clicks += 1;
    }

    /// Counts a GET for an unknown key (server-wide only); with the visit log on, carries it
    /// as an orphan visit of `key` too (its context taken like a click's, [`Self::take`]).
    pub fn not_found(&mut self, key: &[u8], click: Option<&Click>, now_s: u64) {
        self.orphan(
            shards::clicks::visits::Orphan::InvalidShortUrl,
            key,
            click,
            now_s,
        );
    }

    /// Counts a GET that reached no link (server-wide only, with the 404s: Shlink's orphan
    /// visits) and, with the visit log on, carries it as an orphan visit of `kind` and `key`
    /// (the code asked for; the domain's empty key for its base URL; a path's stored key).
    pub fn orphan(
        &mut self,
        kind: shards::clicks::visits::Orphan,
        key: &[u8],
        click: Option<&Click>,
        now_s: u64,
    ) {
        if let Some(b) = self.batch_for(shards::clicks::day_of(now_s)) {
            b.not_found += 1;
        }
        if let (true, Some(Click::Take(ctx))) = (self.log_orphans, click) {
            let ctx = &ClickCtx {
                rule: ClickRule::of_orphan(kind),
                ..*ctx
            };
            let hash = self.entry_hash(key, ctx);
            let day = shards::clicks::day_of(now_s);
            if let Some(b) = self.batch_for(day) {
                // A full batch: the orphan visit is not logged (the 404 is counted above).
                let _ = b.add(key, ctx, hash);
            }
        }
    }

    /// Hands the current batch to the aggregator (if it has anything).
    fn hand_off(&mut self) {
        let Some(mut b) = self.current.take() else {
            return;
        };
        if b.is_empty() {
            self.current = Some(b);
            return;
        }
        self.seq += 1;
        b.seq = self.seq;
        b.sealed_ms = unix_ms();
        self.tally.batches += 1;
        match self.to_agg.try_send(CoreMsg::Batch(b)) {
            Ok(()) => {}
            // Cannot happen: the channel holds every batch there is. Count, never block.
            Err(
                TrySendError::Full(CoreMsg::Batch(b))
                | TrySendError::Disconnected(CoreMsg::Batch(b)),
            ) => {
                self.tally.dropped += b.entries().map(|e| u64::from(e.2)).sum::<u64>();
                let mut b = b;
                b.clear();
                self.current = Some(b);
            }
            Err(_) => unreachable!("a batch was sent"),
        }
    }

    /// Once a sweep: hands off what was counted, or says nothing was; forgets which strings
    /// the aggregator has if it forgot them.
    pub fn sweep(&mut self) {
        let epoch = self.agg_epoch.load(Ordering::Acquire);
        if epoch != self.seen_epoch {
            self.seen.fill(0);
            self.seen_epoch = epoch;
        }
        if self.current.as_ref().is_some_and(|b| !b.is_empty()) {
            return self.hand_off();
        }
        if self.to_agg.is_empty() {
            self.seq += 1;
            let msg = CoreMsg::Tick {
                seq: self.seq,
                sealed_ms: unix_ms(),
            };
            if self.to_agg.try_send(msg).is_err() {
                self.seq -= 1;
            }
        }
    }

    /// A link is being deleted (or its stats reset): hands off what was counted so far and
    /// returns the number of the last message holding clicks from before this moment.
    pub fn cut(&mut self) -> u64 {
        self.hand_off();
        if self.current.as_ref().is_some_and(|b| !b.is_empty()) {
            // Could not be handed off: its clicks are dropped rather than misattributed.
            if let Some(b) = self.current.as_mut() {
                self.tally.dropped += b.entries().map(|e| u64::from(e.2)).sum::<u64>();
                b.clear();
            }
        }
        self.seq
    }

    /// The core stops: hands off the last batch and says so (waits up to a second for room:
    /// this runs once, after the last request).
    pub fn close(&mut self) {
        self.hand_off();
        let _ = self
            .to_agg
            .send_timeout(CoreMsg::Closed, std::time::Duration::from_secs(1));
    }
}

/// Longest `X-Forwarded-For` value looked at (the rightmost address is at its end).
pub const MAX_FORWARDED_FOR_BYTES: usize = 1024;

/// A click's client address: the TCP peer, or with [`ClientIp::XForwardedFor`](super::ClientIp::XForwardedFor) the rightmost
/// address of `X-Forwarded-For` (the one the fleet's load balancer appended; the ones before
/// it are whatever the client claimed), the peer when it has none that parses.
#[inline]
pub fn client_ip(mode: super::ClientIp, peer: [u8; 16], forwarded_for: Option<&[u8]>) -> [u8; 16] {
    let Some(xff) = forwarded_for.filter(|_| mode == super::ClientIp::XForwardedFor) else {
        return peer;
    };
    let xff = &xff[xff.len().saturating_sub(MAX_FORWARDED_FOR_BYTES)..];
    match rightmost_ipv4(xff) {
        Some(v4) => core::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets(),
        None => rightmost_address(peer, xff),
    }
}

/// The common case of [`client_ip`] in one backward pass: the value's last element is a
/// dotted quad. `None` for anything else (IPv6, garbage, an octet past 255 or with a leading
/// zero), which [`rightmost_address`] then decides: the two agree wherever this one answers
/// (proptest `the_fast_path_agrees_with_the_general_one`). A third of the general path's cost
/// (benches/clicks.rs).
#[inline]
fn rightmost_ipv4(xff: &[u8]) -> Option<[u8; 4]> {
    let mut i = xff.len();
    while i > 0 && xff[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    let mut out = [0u8; 4];
    for part in (0..4).rev() {
        let (mut v, mut mul, mut digits) = (0u32, 1u32, 0);
        while i > 0 && xff[i - 1].is_ascii_digit() {
            if digits == 3 {
                return None;
            }
            v += u32::from(xff[i - 1] - b'0') * mul;
            (mul, digits, i) = (mul * 10, digits + 1, i - 1);
        }
        if digits == 0 || (digits > 1 && xff[i] == b'0') {
            return None; // Empty, or a leading zero.
        }
        out[part] = u8::try_from(v).ok()?;
        if part > 0 {
            if i == 0 || xff[i - 1] != b'.' {
                return None;
            }
            i -= 1;
        }
    }
    while i > 0 && xff[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    (i == 0 || xff[i - 1] == b',').then_some(out)
}

/// [`client_ip`]'s general path: the element after the last comma, trimmed, as IPv4 or IPv6;
/// `peer` if it parses as neither.
fn rightmost_address(peer: [u8; 16], xff: &[u8]) -> [u8; 16] {
    let last = match memchr::memrchr(b',', xff) {
        Some(i) => &xff[i + 1..],
        None => xff,
    };
    let last = last.trim_ascii();
    if let Some(v4) = parse_ipv4(last) {
        return core::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets();
    }
    // IPv6 (rare behind most balancers): `core::net` parses text only, allocating nothing.
    let parsed = std::str::from_utf8(last)
        .ok()
        .and_then(|t| t.parse::<core::net::IpAddr>().ok());
    match parsed {
        Some(core::net::IpAddr::V4(a)) => a.to_ipv6_mapped().octets(),
        Some(core::net::IpAddr::V6(a)) => a.octets(),
        None => peer,
    }
}

/// A dotted-quad IPv4 address as `core::net` accepts it (four decimal octets of 1-3 digits,
/// no leading zeros, at most 255), parsed from bytes: the common `X-Forwarded-For` value, at
/// a third of the cost of `str::from_utf8` and `IpAddr::from_str` (perf/clicks.sh profiles).
#[inline]
fn parse_ipv4(s: &[u8]) -> Option<[u8; 4]> {
    let (mut out, mut part, mut v, mut digits) = ([0u8; 4], 0, 0u32, 0);
    for &b in s {
        if b.is_ascii_digit() {
            if digits == 3 || (digits == 1 && v == 0) {
                return None; // Too long, or a leading zero.
            }
            v = v * 10 + u32::from(b - b'0');
            digits += 1;
        } else if b == b'.' && digits > 0 && part < 3 {
            out[part] = u8::try_from(v).ok()?;
            (part, v, digits) = (part + 1, 0, 0);
        } else {
            return None;
        }
    }
    if part != 3 || digits == 0 {
        return None;
    }
    out[3] = u8::try_from(v).ok()?;
    Some(out)
}

/// The host part of a `Referer` field value, found on the core without allocating: what
/// follows `scheme://` up to the path, query or fragment. `None` for a missing or relative
/// referrer (counted as direct).
#[inline]
pub fn referrer_host(value: &[u8]) -> Option<&[u8]> {
    let rest = if let Some(r) = value.strip_prefix(b"https://") {
        r
    } else if let Some(r) = value.strip_prefix(b"http://") {
        r
    } else {
        // Other schemes: a scheme is a few bytes, a plain loop.
        let i = value.iter().position(|&b| b == b':')?;
        value[i + 1..].strip_prefix(b"//")?
    };
    let host = &rest[..host_end(rest).min(shards::clicks::MAX_FACET_VALUE_BYTES + 64)];
    (!host.is_empty()).then_some(host)
}

/// Where a URL's authority ends (its first `/`, `?` or `#`, or its end), eight bytes at a
/// time: a host is a few dozen bytes, shorter than what `memchr`'s vector search pays for its
/// setup, and a byte loop costs twice this (benches/clicks.rs).
#[inline]
fn host_end(rest: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `w` equal to `b`. Exact for the lowest such byte (a borrow
    // can only mark bytes above a true match), which is the only one used.
    let matches = |w: u64, b: u8| {
        let x = w ^ (ONES * u64::from(b));
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    let mut words = rest.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut words {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let m = matches(w, b'/') | matches(w, b'?') | matches(w, b'#');
        if m != 0 {
            return at + (m.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let tail = words.remainder();
    at + tail
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(tail.len())
}

/// Wall-clock milliseconds (a vDSO read).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam::channel::bounded;
    use proptest::prelude::*;
    use std::collections::HashMap;

    use crate::analytics::ClientIp;

    fn fields<'a>(
        peer: [u8; 16],
        user_agent: Option<&'a [u8]>,
        referer: Option<&'a [u8]>,
    ) -> ClickFields<'a> {
        ClickFields {
            peer,
            forwarded_for: None,
            user_agent,
            referer,
        }
    }

    fn combiner(batches: usize) -> (Combiner, Receiver<CoreMsg>, Sender<Box<Batch>>) {
        let (clean_tx, clean_rx) = bounded(batches);
        for _ in 0..batches {
            clean_tx.send(Batch::new()).unwrap();
        }
        let (tx, rx) = bounded(batches * 2);
        let c = Combiner::new(true, clean_rx, tx, Arc::new(AtomicU64::new(0)));
        (c, rx, clean_tx)
    }

    fn drain(
        rx: &Receiver<CoreMsg>,
        clean: &Sender<Box<Batch>>,
        out: &mut HashMap<(Vec<u8>, [u8; 16]), u64>,
    ) {
        while let Ok(m) = rx.try_recv() {
            if let CoreMsg::Batch(mut b) = m {
                for (k, ctx, n) in b.entries() {
                    *out.entry((k.as_bytes().to_vec(), ctx.ip)).or_default() += u64::from(n);
                }
                b.clear();
                clean.send(b).unwrap();
            }
        }
    }

    proptest! {
        /// Every click recorded comes out of the batches exactly once, against a `HashMap`.
        #[test]
        fn batches_sum_to_the_clicks_recorded(clicks in prop::collection::vec((0u8..40, 0u8..3), 0..6000)) {
            let (mut c, rx, clean) = combiner(BATCHES_PER_CORE);
            let mut oracle: HashMap<(Vec<u8>, [u8; 16]), u64> = HashMap::new();
            let mut got = HashMap::new();
            for (i, &(k, ip)) in clicks.iter().enumerate() {
                let key = format!("k{k}");
                let mut addr = [0u8; 16];
                addr[15] = ip;
                let f = fields(addr, Some(b"UA"), None);
                let click = c.take(ClientIp::Peer, &f, 86_400);
                c.record(key.as_bytes(), &click, ClickRule::NONE, 86_400);
                *oracle.entry((key.into_bytes(), addr)).or_default() += 1;
                if i % 1000 == 999 {
                    c.sweep();
                    drain(&rx, &clean, &mut got);
                }
            }
            c.sweep();
            drain(&rx, &clean, &mut got);
            prop_assert_eq!(c.tally.dropped, 0);
            prop_assert_eq!(got, oracle);
        }
    }

    proptest! {
        /// The byte parser accepts exactly what `core::net` accepts as IPv4, with the same
        /// value.
        #[test]
        fn ipv4_parses_like_core_net(s in "[0-9.]{0,16}|(25[0-9]|0?[0-9]{1,3})(\\.[0-9]{1,4}){3}") {
            let want = s.parse::<core::net::Ipv4Addr>().ok().map(|a| a.octets());
            prop_assert_eq!(parse_ipv4(s.as_bytes()), want);
        }
    }

    proptest! {
        /// The one-pass IPv4 path answers exactly what the general path answers, wherever it
        /// answers at all.
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            s in "[0-9., \t,:a-f]{0,24}|([0-9 ]{0,4}[,])?[ ]?(25[0-9]|0?[0-9]{1,3})(\\.[0-9]{1,4}){3}[ ]?"
        ) {
            let peer = [9; 16];
            if let Some(v4) = rightmost_ipv4(s.as_bytes()) {
                let want = core::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets();
                prop_assert_eq!(rightmost_address(peer, s.as_bytes()), want);
            }
            prop_assert_eq!(
                client_ip(ClientIp::XForwardedFor, peer, Some(s.as_bytes())),
                rightmost_address(peer, s.as_bytes())
            );
        }

        /// The fast path answers for every canonical rightmost dotted quad, whatever comes
        /// before it, and answers it right (agreement alone would also hold for a fast path
        /// that never answers).
        #[test]
        fn the_fast_path_answers_the_common_shape(
            before in "([0-9a-f:.]{1,20}, ?){0,3}",
            a in any::<[u8; 4]>(),
        ) {
            let addr = core::net::Ipv4Addr::from(a);
            let s = format!("{before}{addr}");
            prop_assert_eq!(rightmost_ipv4(s.as_bytes()), Some(a), "{}", s);
        }

        /// Near misses of the common shape (a byte changed, dropped or added anywhere near the
        /// end) agree with the general path too.
        #[test]
        fn near_misses_agree_with_the_general_path(
            before in "([0-9]{1,3}[.]){0,3}[0-9]{0,3}(, ?)?",
            a in any::<[u8; 4]>(),
            edit in 0usize..20,
            byte in prop::sample::select(b"0123456789., \t,:x".to_vec()),
            how in 0u8..3,
        ) {
            let mut s = format!("{before}{}", core::net::Ipv4Addr::from(a)).into_bytes();
            let i = s.len().saturating_sub(edit);
            match how {
                0 if i < s.len() => s[i] = byte,
                1 if i < s.len() => { s.remove(i); }
                _ => s.insert(i, byte),
            }
            let peer = [9; 16];
            if let Some(v4) = rightmost_ipv4(&s) {
                let want = core::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets();
                let shown = String::from_utf8_lossy(&s).into_owned();
                prop_assert_eq!(rightmost_address(peer, &s), want, "{:?}", shown);
            }
        }

        /// The word-at-a-time host end is the first `/`, `?` or `#`, as a byte loop finds it.
        #[test]
        fn the_host_ends_where_a_byte_loop_says(s in "[a-z./?#:0-9]{0,40}") {
            let b = s.as_bytes();
            let want = b.iter().position(|&c| matches!(c, b'/' | b'?' | b'#')).unwrap_or(b.len());
            prop_assert_eq!(host_end(b), want);
        }
    }

    #[test]
    fn the_rightmost_forwarded_address_is_the_client() {
        let peer = [7; 16];
        let x = crate::analytics::ClientIp::XForwardedFor;
        let v4 = |a: [u8; 4]| core::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        assert_eq!(
            client_ip(x, peer, Some(b"1.1.1.1, 203.0.113.9")),
            v4([203, 0, 113, 9])
        );
        assert_eq!(
            client_ip(x, peer, Some(b"203.0.113.9")),
            v4([203, 0, 113, 9])
        );
        assert_eq!(
            client_ip(x, peer, Some(b"2001:db8::1")),
            "2001:db8::1"
                .parse::<core::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(client_ip(x, peer, Some(b"garbage")), peer);
        assert_eq!(client_ip(x, peer, Some(b"1.2.3.4, 010.0.0.1")), peer);
        assert_eq!(client_ip(x, peer, Some(b"1.2.3.4,256.0.0.1")), peer);
        assert_eq!(client_ip(x, peer, Some(b"10.0.0.1 ")), v4([10, 0, 0, 1]));
        assert_eq!(client_ip(x, peer, None), peer);
        assert_eq!(
            client_ip(crate::analytics::ClientIp::Peer, peer, Some(b"203.0.113.9")),
            peer,
            "peer mode ignores the header"
        );
    }

    #[test]
    fn a_full_pipeline_drops_and_counts_instead_of_waiting() {
        let (mut c, rx, _clean) = combiner(2);
        let mut n = 0;
        let mut starved = 0;
        for i in 0..(BATCH_MAX_ENTRIES * 3) {
            let key = format!("k{i}");
            let click = c.take(ClientIp::Peer, &fields([0; 16], Some(b"UA"), None), 0);
            starved += usize::from(click == Click::Starved);
            c.record(key.as_bytes(), &click, ClickRule::NONE, 0);
            n += 1;
        }
        assert_eq!(c.tally.clicks + c.tally.dropped, n);
        // The first click past the two batches fills none and is dropped in `record`; the
        // rest find no batch at `take` and never look at their fields.
        assert_eq!(c.tally.dropped as usize, BATCH_MAX_ENTRIES);
        assert_eq!(starved, BATCH_MAX_ENTRIES - 1);
        assert_eq!(rx.len(), 2);
    }

    #[test]
    fn a_new_day_starts_a_new_batch_and_strings_go_once() {
        let (mut c, rx, clean) = combiner(4);
        for s in [86_399u64, 86_399, 86_400] {
            let f = fields(
                [0; 16],
                Some(b"Mozilla/5.0"),
                Some(b"https://example.com/a"),
            );
            let click = c.take(ClientIp::Peer, &f, s);
            c.record(b"k", &click, ClickRule::NONE, s);
        }
        c.sweep();
        let mut days = Vec::new();
        let mut carried = 0;
        while let Ok(CoreMsg::Batch(mut b)) = rx.try_recv() {
            days.push((b.day, b.entries().map(|e| e.2).sum::<u32>()));
            carried += b.carried.len();
            b.clear();
            clean.send(b).unwrap();
        }
        assert_eq!(days, vec![(0, 2), (1, 1)]);
        assert_eq!(carried, 2, "each string is carried once");
    }
}
