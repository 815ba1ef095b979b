//! The abuse blocklist: hosts (each blocking its subdomains too), host + path prefixes and
//! exact URLs that no link may redirect to (issue 27). Read from the file `--blocklist`
//! names, in the formats threat feeds ship (see [`Blocklist::build`]), and in fleet mode also
//! from the fleet's table (`fleet_mode::blocklist`), the two as one list; checked at create,
//! PATCH and import (422 `blocked-target`) and on the redirect path (451), where a link whose
//! target became blocked stops redirecting at once and starts again once unblocked.
//!
//! Matching is on the target's parsed host: IDNA to ASCII, lowercase, without a trailing dot,
//! percent-decoded, as the `url` crate (the WHATWG parser browsers run) reads it, never on the
//! raw string, so `https://EVIL.example./x` and `https://%65vil.example/x` are `evil.example`.
//! On the redirect path a host of plain ASCII letters, digits, `-` and `.` (nearly every
//! target) is lowercased as it is hashed, on the stack; any other host (Unicode, `%`, an IP
//! literal) is parsed by the `url` crate, which allocates: such a link's verdict is kept in
//! a fixed per-core memo ([`VerdictMemo`]) so that it is parsed once per blocklist, not per
//! redirect.
//!
//! Layout: one map from a host to what is blocked under it (the whole host and its subdomains,
//! or a list of path prefixes and exact paths), with two Bloom filters in front: one of every
//! entry's last two labels, so a target whose last two labels name no entry's (nearly all)
//! costs one hash and one cache line; then one of every entry's host, asked for the target's
//! host and each parent domain before the map is.

use std::path::{Path, PathBuf};

/// Entries one blocklist holds at most (a larger file is refused whole, with the line it
/// reached: a truncated blocklist would unblock silently).
pub const MAX_BLOCKLIST_ENTRIES: usize = 10_000_000;

/// Bad lines reported one by one in the log and `/readyz?verbose`; past this, only counted.
pub const MAX_REPORTED_BAD_LINES: usize = 20;

/// Labels of a target host checked against host entries (the host itself and each parent
/// domain): a deeper host's top labels are checked, the rest are not (253 bytes hold at most
/// 127 labels; no blocklist entry is that deep).
pub const MAX_CHECKED_LABELS: usize = 16;

/// Bits of the Bloom filter per entry: about 1% false positives with 7 probes in one line.
pub const BLOOM_BITS_PER_ENTRY: usize = 12;

/// What an entry blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A host and every subdomain of it.
    Host(String),
    /// Targets on exactly this host whose path (and query) starts with this prefix.
    Prefix { host: String, path: String },
    /// Exactly this URL (scheme and fragment aside): host and path with query.
    Url { host: String, path: String },
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Host(h) => write!(f, "{h}"),
            Entry::Prefix { host, path } => write!(f, "{host}{path}*"),
            Entry::Url { host, path } => write!(f, "{host}{path}"),
        }
    }
}

impl Entry {
    /// The host it is under (lowercase).
    pub fn host(&self) -> &str {
        match self {
            Entry::Host(host) | Entry::Prefix { host, .. } | Entry::Url { host, .. } => host,
        }
    }

    /// The entry as one line [`Blocklist::parse`] reads back as this entry: its canonical
    /// form, which the fleet's table stores (`ricochet fleet blocklist`), so two spellings
    /// of one entry are one row.
    pub fn line(&self) -> String {
        match self {
            Entry::Url { host, path } => format!("http://{host}{path}"),
            other => other.to_string(),
        }
    }
}

/// A line the parser could not read: reported, never fatal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// The name of the source it is in ([`Source::name`]).
    pub source: String,
    pub line: usize,
    pub reason: String,
}

/// A text a blocklist is built from, with the name its bad lines are reported under (a
/// file's path, or the fleet's table).
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

/// The name the fleet's table (`ricochet_blocklist`) goes by as a [`Source`].
pub const FLEET_TABLE_SOURCE: &str = "the fleet's table ricochet_blocklist";

/// The entries of one line of a blocklist: none for a blank or comment line (`#` starts a
/// comment anywhere, `!` at the start is Adblock's), else those it names or why it is bad.
/// The one parser of lines: files, the fleet's table and `ricochet fleet blocklist`'s
/// arguments.
pub fn entries_of_line(raw: &str) -> Result<Vec<Entry>, String> {
    let mut found = Vec::new();
    push_entries_of_line(raw, &mut found)?;
    Ok(found)
}

/// [`entries_of_line`] appended to `out` (a load's batch: no vector per line); on an error
/// `out` is as it was.
fn push_entries_of_line(raw: &str, out: &mut Vec<Entry>) -> Result<(), String> {
    // `#` is ASCII: its index is a char boundary.
    let line = memchr::memchr(b'#', raw.as_bytes()).map_or(raw, |i| &raw[..i]);
    let line = line.trim();
    if line.is_empty() || line.starts_with('!') {
        return Ok(());
    }
    let before = out.len();
    parse_line(line, out).inspect_err(|_| out.truncate(before))
}

/// The hosts entries name and what each blocks, in a few flat vectors: no allocation per
/// entry, so a million-entry list loads fast and, above all, is dropped in a few frees (the
/// last core to take a new list drops the old one, between requests).
#[derive(Debug, Default)]
struct HostIndex {
    /// Every host name, then every path, back to back.
    bytes: Vec<u8>,
    recs: Vec<HostRec>,
    /// Open addressing, at most half full: 0 for empty, else a [`Slot`]'s word.
    slots: Vec<u32>,
    /// Path rules grouped by host (each record's `rules` range), once built.
    rules: Vec<PathRule>,
    /// Path rules as added, by record, until [`HostIndex::finish`].
    pending: Vec<(u32, PathRule)>,
}

/// A slot's word: the record's index plus one in the low [`SLOT_INDEX_BITS`], the top byte
/// of the host's hash above, so that a probe past another host's slot compares a byte, not
/// the name behind it (a cache miss into `recs` and another into `bytes`: most of a
/// million-entry load's inserts, and of a listed target's lookups).
struct Slot;

/// Bits of a slot's record index (plus one).
const SLOT_INDEX_BITS: u32 = 24;
const SLOT_INDEX_MASK: u32 = (1 << SLOT_INDEX_BITS) - 1;
// Every record's index fits (records are distinct hosts of entries).
const _: () = assert!(MAX_BLOCKLIST_ENTRIES < SLOT_INDEX_MASK as usize);

impl Slot {
    fn word(rec: usize, h: u64) -> u32 {
        debug_assert!(rec < MAX_BLOCKLIST_ENTRIES);
        (Slot::tag(h) << SLOT_INDEX_BITS) | (rec as u32 + 1)
    }

    fn tag(h: u64) -> u32 {
        (h >> 56) as u32
    }

    /// The record of a full slot's word, if its tag is `h`'s.
    #[inline]
    fn rec_if_tagged(word: u32, h: u64) -> Option<usize> {
        (word >> SLOT_INDEX_BITS == Slot::tag(h)).then(|| (word & SLOT_INDEX_MASK) as usize - 1)
    }
}

/// A host of the index.
#[derive(Clone, Copy, Debug)]
struct HostRec {
    at: u32,
    len: u32,
    /// The entry `Host(host)`: the host and its subdomains are blocked.
    whole: bool,
    /// Its path rules: `rules[from..from + n]`.
    rules_from: u32,
    rules_n: u32,
}

/// A path prefix or an exact path (with query) under one host.
#[derive(Clone, Copy, Debug)]
struct PathRule {
    at: u32,
    len: u32,
    prefix: bool,
}

impl HostIndex {
    fn name(&self, r: &HostRec) -> &[u8] {
        &self.bytes[r.at as usize..(r.at + r.len) as usize]
    }

    /// The record of `host` (lowercase), if any.
    fn get(&self, host: &[u8], h: u64) -> Option<&HostRec> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if let Some(r) = Slot::rec_if_tagged(s, h).map(|r| &self.recs[r]) {
                if self.name(r) == host {
                    return Some(r);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `host` (lowercase) with a path rule, or as a whole host (`rule: None`).
    fn insert(&mut self, host: &[u8], h: u64, rule: Option<(bool, &[u8])>) {
        if (self.recs.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        let rec = loop {
            match self.slots[i] {
                0 => {
                    let at = self.bytes.len() as u32;
                    self.bytes.extend_from_slice(host);
                    self.recs.push(HostRec {
                        at,
                        len: host.len() as u32,
                        whole: false,
                        rules_from: 0,
                        rules_n: 0,
                    });
                    self.slots[i] = Slot::word(self.recs.len() - 1, h);
                    break self.recs.len() - 1;
                }
                s => match Slot::rec_if_tagged(s, h) {
                    Some(r) if self.name(&self.recs[r]) == host => break r,
                    _ => i = (i + 1) & mask,
                },
            }
        };
        match rule {
            None => self.recs[rec].whole = true,
            Some((prefix, path)) => {
                let at = self.bytes.len() as u32;
                self.bytes.extend_from_slice(path);
                let r = PathRule {
                    at,
                    len: path.len() as u32,
                    prefix,
                };
                self.pending.push((rec as u32, r));
            }
        }
    }

    /// Room for `n` hosts without growing.
    fn reserve(&mut self, n: usize) {
        let slots = HostIndex::slots_for(n);
        if slots > self.slots.len() {
            self.rehash(slots);
        }
        self.recs.reserve(n);
    }

    /// Slots for `n` hosts: a power of two, at most half full.
    fn slots_for(n: usize) -> usize {
        (n.max(8) * 2).next_power_of_two()
    }

    /// Hints the cache with the slot a host of hash `h` is looked for at first.
    #[inline]
    fn prefetch(&self, h: u64) {
        if let Some(s) = self
            .slots
            .get((h as usize) & self.slots.len().wrapping_sub(1))
        {
            shards::table::prefetch(s);
        }
    }

    fn grow(&mut self) {
        self.rehash((self.slots.len() * 2).max(16));
    }

    /// The slots rebuilt `n` long (a power of two, more than twice the records).
    fn rehash(&mut self, n: usize) {
        self.slots = vec![0; n];
        for (i, r) in self.recs.iter().enumerate() {
            let h = host_hash(self.name(r));
            let mut at = (h as usize) & (n - 1);
            while self.slots[at] != 0 {
                at = (at + 1) & (n - 1);
            }
            self.slots[at] = Slot::word(i, h);
        }
    }

    /// Groups the path rules by host once every entry is in.
    fn finish(&mut self) {
        self.pending.sort_by_key(|(rec, _)| *rec);
        self.rules = Vec::with_capacity(self.pending.len());
        for (rec, rule) in std::mem::take(&mut self.pending) {
            let r = &mut self.recs[rec as usize];
            if r.rules_n == 0 {
                r.rules_from = self.rules.len() as u32;
            }
            r.rules_n += 1;
            self.rules.push(rule);
        }
        self.bytes.shrink_to_fit();
        self.recs.shrink_to_fit();
        // Reserved by lines, some of which were comments or bad: down to the hosts' size.
        let slots = HostIndex::slots_for(self.recs.len());
        if slots < self.slots.len() {
            self.rehash(slots);
        }
    }

    /// `r`'s path rules: (prefix or exact, path).
    fn rules_of<'a>(&'a self, r: &HostRec) -> impl Iterator<Item = (bool, &'a [u8])> + Clone + 'a {
        let from = r.rules_from as usize;
        self.rules[from..from + r.rules_n as usize].iter().map(|p| {
            (
                p.prefix,
                &self.bytes[p.at as usize..(p.at + p.len) as usize],
            )
        })
    }

    /// Bytes it takes.
    fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.recs.capacity() * std::mem::size_of::<HostRec>()
            + self.slots.capacity() * 4
            + self.rules.capacity() * std::mem::size_of::<PathRule>()
    }
}

/// A loaded blocklist, shared read-only by every core (`Arc`).
#[derive(Debug, Default)]
pub struct Blocklist {
    /// The names of what it was built from (a file, the fleet's table); empty: no
    /// blocklist configured.
    pub sources: Vec<String>,
    index: HostIndex,
    /// Every entry's host.
    bloom: Bloom,
    /// Every entry's host cut to its last two labels (`a.evil.example` → `evil.example`): a
    /// target whose own last two labels miss here is blocked by no entry, after one probe.
    coarse: Bloom,
    /// An entry of one label (a whole top-level domain) exists: the coarse probe cannot
    /// answer alone.
    single_label: bool,
    entries: usize,
    /// Lines that did not parse (the first [`MAX_REPORTED_BAD_LINES`]) and how many in all.
    pub bad: Vec<BadLine>,
    pub bad_count: usize,
    /// Changes each load, so per-core verdict memos ([`VerdictMemo`]) forget the last one's.
    pub generation: u64,
}

/// Why a blocklist file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum BlocklistError {
    #[error("cannot read blocklist {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "blocklist {source_name}: more than {MAX_BLOCKLIST_ENTRIES} entries in all (line {line})"
    )]
    TooMany { source_name: String, line: usize },
}

impl Blocklist {
    /// No blocklist: nothing is blocked and the redirect path checks nothing.
    pub fn none() -> std::sync::Arc<Blocklist> {
        std::sync::Arc::new(Blocklist::default())
    }

    /// Reads `path` ([`Blocklist::parse`]).
    pub fn load(path: &Path, generation: u64) -> Result<Blocklist, BlocklistError> {
        let text = read_text(path)?;
        let name = path.display().to_string();
        Blocklist::build(
            &[Source {
                name: &name,
                text: &text,
            }],
            generation,
        )
    }

    /// Parses `text` as one unnamed source ([`Blocklist::build`]). `Err(line)`: more than
    /// [`MAX_BLOCKLIST_ENTRIES`] entries.
    pub fn parse(text: &str) -> Result<Blocklist, usize> {
        Blocklist::build(&[Source { name: "", text }], 0).map_err(|e| match e {
            BlocklistError::TooMany { line, .. } => line,
            BlocklistError::Io { .. } => unreachable!("parsing reads no file"),
        })
    }

    /// One list of every entry of `sources`, one entry per line ([`entries_of_line`]): a bare
    /// host (`evil.example`, IDNA or ASCII); a hosts-file line (`0.0.0.0 evil.example`, an IP
    /// address then one or more hosts); an Adblock host rule (`||evil.example^`); a host and
    /// path prefix (`evil.example/phish`, with `*` at the end or not); an exact URL
    /// (`https://evil.example/login?x=1`, any scheme). A line that is none of these is a
    /// [`BadLine`] and everything else still loads. More than [`MAX_BLOCKLIST_ENTRIES`] in
    /// all is an error.
    pub fn build(sources: &[Source<'_>], generation: u64) -> Result<Blocklist, BlocklistError> {
        let mut b = Blocklist::default();
        // Filters sized by the lines (an entry each, but for hosts-file lines naming several).
        let lines: usize = sources
            .iter()
            .map(|s| memchr::memchr_iter(b'\n', s.text.as_bytes()).count() + 1)
            .sum();
        b.bloom = Bloom::with_entries(lines);
        b.coarse = Bloom::with_entries(lines);
        // Sized once (no rehash of a growing table), as the filters are.
        b.index.reserve(lines.min(MAX_BLOCKLIST_ENTRIES + 1));
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        for src in sources {
            b.add_source(src, &mut batch)?;
        }
        b.sources = sources.iter().map(|s| s.name.to_owned()).collect();
        b.generation = generation;
        b.index.finish();
        Ok(b)
    }

    /// Adds `src`'s entries, [`LOAD_BATCH`] at a time (`batch`: empty, and left so).
    fn add_source(
        &mut self,
        src: &Source<'_>,
        batch: &mut Vec<Entry>,
    ) -> Result<(), BlocklistError> {
        for (i, raw) in src.text.lines().enumerate() {
            match push_entries_of_line(raw, batch) {
                Ok(()) => {}
                Err(reason) => {
                    self.bad_count += 1;
                    if self.bad.len() < MAX_REPORTED_BAD_LINES {
                        self.bad.push(BadLine {
                            source: src.name.to_owned(),
                            line: i + 1,
                            reason,
                        });
                    }
                }
            }
            // Checked before the batch is added: the index never holds more.
            if self.entries + batch.len() > MAX_BLOCKLIST_ENTRIES {
                return Err(BlocklistError::TooMany {
                    source_name: src.name.to_owned(),
                    line: i + 1,
                });
            }
            if batch.len() >= LOAD_BATCH {
                self.add_batch(batch);
            }
        }
        self.add_batch(batch);
        Ok(())
    }

    /// Adds `batch`'s entries and empties it. Each entry writes a random line of each filter
    /// and of the index, which a million-entry list does not hold in cache: the lines of the
    /// whole batch are asked for first, so their misses overlap (the filters' inserts one
    /// after another took about 40% of a load).
    fn add_batch(&mut self, batch: &mut Vec<Entry>) {
        for chunk in batch.chunks(LOAD_BATCH) {
            let mut hashes = [(0u64, None::<u64>); LOAD_BATCH];
            for (e, hs) in chunk.iter().zip(&mut hashes) {
                let host = e.host().as_bytes();
                let h = host_hash(host);
                let coarse = last_two_labels(host).map(coarse_hash);
                self.bloom.prefetch(h);
                if let Some(c) = coarse {
                    self.coarse.prefetch(c);
                }
                self.index.prefetch(h);
                *hs = (h, coarse);
            }
            for (e, (h, coarse)) in chunk.iter().zip(hashes) {
                self.add(e, h, coarse);
            }
        }
        batch.clear();
    }

    /// Adds `e`, of host hash `h` and coarse key hash `coarse` (`None`: a single label).
    fn add(&mut self, e: &Entry, h: u64, coarse: Option<u64>) {
        let rule = match e {
            Entry::Host(_) => None,
            Entry::Prefix { path, .. } => Some((true, path.as_bytes())),
            Entry::Url { path, .. } => Some((false, path.as_bytes())),
        };
        self.bloom.insert(h);
        match coarse {
            Some(c) => self.coarse.insert(c),
            None => self.single_label = true,
        }
        self.index.insert(e.host().as_bytes(), h, rule);
        self.entries += 1;
    }

    /// Bytes of memory it takes (its index and filters).
    pub fn heap_bytes(&self) -> usize {
        self.index.heap_bytes() + (self.bloom.blocks.len() + self.coarse.blocks.len()) * 64
    }

    /// Entries loaded.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether nothing is blocked (the redirect path then checks nothing).
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The rule that blocks a target of (canonical, lowercase) `host` and `path` (path and
    /// query, from its `/`), if any. No allocation.
    fn find<'a>(&'a self, host: &'a [u8], path: &[u8]) -> Option<Hit<'a>> {
        let mut hit = None;
        for_each_suffix(host, |suffix, whole_host| {
            let h = host_hash(suffix);
            if hit.is_some() || !self.bloom.may_hold(h) {
                return;
            }
            let Some(rec) = self.index.get(suffix, h) else {
                return;
            };
            let kind = if rec.whole {
                Some(HitKind::Host)
            } else if !whole_host {
                None
            } else {
                // A prefix first, as the list's entries say more about a path than a URL.
                let mut rules = self.index.rules_of(rec);
                let prefix = rules
                    .clone()
                    .find(|&(prefix, p)| prefix && path.starts_with(p));
                prefix.map(|(_, p)| HitKind::Prefix(p)).or_else(|| {
                    rules
                        .find(|&(prefix, p)| !prefix && p == path)
                        .map(|(_, p)| HitKind::Url(p))
                })
            };
            hit = kind.map(|kind| Hit { host: suffix, kind });
        });
        hit
    }

    /// Whether `target` (a stored link target, as given) is blocked: the redirect path's
    /// check, with no allocation for a plain ASCII host and path; `memo` keeps the verdicts
    /// of the others, which are parsed by the `url` crate once per blocklist.
    #[inline]
    pub fn blocks(&self, target: &[u8], memo: &mut VerdictMemo) -> bool {
        let begun = self.begin(target);
        self.finish(begun, target, memo)
    }

    /// The first half of [`Blocklist::blocks`]: reads the target and prefetches the line of
    /// the filter it will ask, so that the caller can encode its answer meanwhile (under load
    /// that line is usually not cached: a million entries' filter is megabytes).
    #[inline]
    pub fn begin<'t>(&self, target: &'t [u8]) -> Begun<'t> {
        if self.is_empty() {
            return Begun::Clear;
        }
        let Some(Authority { host, after, top }) = plain_authority(target) else {
            return Begun::Slow;
        };
        // The coarse filter's key: the host's last two labels, hashed as if lowercase in
        // place ([`coarse_hash`]).
        let coarse = top
            .filter(|t| t.len() <= COARSE_KEY_BYTES && !self.single_label)
            .map(|t| {
                let h = coarse_hash(t);
                self.coarse.prefetch(h);
                h
            });
        Begun::Plain {
            host,
            after,
            coarse,
        }
    }

    /// The second half of [`Blocklist::blocks`] (`target` as given to `begin`).
    #[inline]
    pub fn finish(&self, begun: Begun<'_>, target: &[u8], memo: &mut VerdictMemo) -> bool {
        match begun {
            Begun::Clear => false,
            Begun::Slow => memo.verdict(self, target),
            Begun::Plain {
                coarse: Some(h), ..
            } if !self.coarse.may_hold(h) => false,
            Begun::Plain { host, after, .. } => {
                // Past the coarse filter (rarely): the path, then the full check.
                let Some(path) = plain_path(after) else {
                    return memo.verdict(self, target);
                };
                let mut buf = [0u8; crate::base::hosts::MAX_DOMAIN_BYTES];
                let lower = &mut buf[..host.len()];
                for (d, s) in lower.iter_mut().zip(host) {
                    *d = s.to_ascii_lowercase();
                }
                self.find(lower, path).is_some()
            }
        }
    }

    /// The entry blocking `url` (an API's or an import's target), parsed as browsers do.
    pub fn blocking_url(&self, url: &str) -> Option<Entry> {
        if self.is_empty() {
            return None;
        }
        let (host, path) = canonical(url)?;
        self.find(host.as_bytes(), path.as_bytes())
            .map(|hit| hit.entry())
    }
}

/// A check begun by [`Blocklist::begin`], for [`Blocklist::finish`].
#[derive(Clone, Copy, Debug)]
pub enum Begun<'t> {
    /// Nothing to check: the list is empty.
    Clear,
    /// A target with a plain host: the host as written, what follows it, and the coarse
    /// filter's key (`None`: the coarse filter cannot answer for it).
    Plain {
        host: &'t [u8],
        after: &'t [u8],
        coarse: Option<u64>,
    },
    /// Any other target: the verdict memo's.
    Slow,
}

/// Longest last-two-labels key the coarse filter is asked for; a longer one goes straight to
/// the full check.
const COARSE_KEY_BYTES: usize = 64;

/// Entries a load parses before adding them together ([`Blocklist::add_batch`]): enough
/// cache misses in flight to overlap, few enough that their lines stay cached until used.
const LOAD_BATCH: usize = 32;

/// Says on stderr what a load found: the entries, and each bad line by source and number.
pub fn report_loaded(b: &Blocklist) {
    eprintln!(
        "blocklist from {}: {} entries ({} KiB)",
        b.sources.join(" and "),
        b.len(),
        b.heap_bytes() / 1024
    );
    for l in &b.bad {
        eprintln!("blocklist {}:{}: skipped: {}", l.source, l.line, l.reason);
    }
    if b.bad_count > b.bad.len() {
        eprintln!(
            "blocklist: {} more bad lines skipped",
            b.bad_count - b.bad.len()
        );
    }
}

/// Reads a blocklist file's text (bytes that are not UTF-8 become U+FFFD, so that line alone
/// is bad).
fn read_text(path: &Path) -> Result<String, BlocklistError> {
    let bytes = std::fs::read(path).map_err(|source| BlocklistError::Io {
        path: path.to_owned(),
        source,
    })?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The blocklist file as the key watcher (`node::keywatch`) last read it, text and all: read
/// again when its modification time or size changes. A file that cannot be read keeps the
/// text last read.
pub struct BlocklistFile {
    path: PathBuf,
    name: String,
    stamp: Option<(std::time::SystemTime, u64)>,
    text: String,
}

impl BlocklistFile {
    /// Reads `path` (at start: a file that cannot be read stops the server).
    pub fn open(path: PathBuf) -> Result<BlocklistFile, BlocklistError> {
        let stamp = stamp(&path);
        let text = read_text(&path)?;
        Ok(BlocklistFile {
            name: path.display().to_string(),
            path,
            stamp,
            text,
        })
    }

    /// Reads the file again if it changed; whether its text did.
    pub fn poll(&mut self) -> bool {
        let now = stamp(&self.path);
        if now == self.stamp {
            return false;
        }
        self.stamp = now;
        match read_text(&self.path) {
            Ok(text) => {
                let changed = text != self.text;
                self.text = text;
                changed
            }
            Err(e) => {
                eprintln!("{e}; keeping the blocklist in force");
                false
            }
        }
    }

    /// The file's text as last read, named by its path.
    pub fn source(&self) -> Source<'_> {
        Source {
            name: &self.name,
            text: &self.text,
        }
    }
}

fn stamp(p: &Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A rule that matched: the host (or parent domain) it is under and what it blocks there.
struct Hit<'a> {
    host: &'a [u8],
    kind: HitKind<'a>,
}

enum HitKind<'a> {
    Host,
    Prefix(&'a [u8]),
    Url(&'a [u8]),
}

impl Hit<'_> {
    fn entry(&self) -> Entry {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let host = text(self.host);
        match self.kind {
            HitKind::Host => Entry::Host(host),
            HitKind::Prefix(p) => Entry::Prefix {
                host,
                path: text(p),
            },
            HitKind::Url(p) => Entry::Url {
                host,
                path: text(p),
            },
        }
    }
}

/// A target's canonical host and path with query, by the `url` crate.
fn canonical(url: &str) -> Option<(String, String)> {
    let u = url::Url::parse(url).ok()?;
    let host = match u.host()? {
        url::Host::Domain(d) => d.strip_suffix('.').unwrap_or(d).to_owned(),
        url::Host::Ipv4(a) => a.to_string(),
        url::Host::Ipv6(a) => format!("[{a}]"),
    };
    let mut path = u.path().to_owned();
    if let Some(q) = u.query() {
        path.push('?');
        path.push_str(q);
    }
    Some((host, path))
}

/// Calls `f` with `host` and each parent domain of it (at most [`MAX_CHECKED_LABELS`]),
/// `true` only for the whole host.
fn for_each_suffix<'h>(host: &'h [u8], mut f: impl FnMut(&'h [u8], bool)) {
    f(host, true);
    // From the top: a host of many labels cannot push its registered domain out of reach.
    // A byte loop: hosts are short, and a call per dot costs more than it finds.
    let mut checked = 1;
    for at in (0..host.len()).rev() {
        if host[at] == b'.' && checked < MAX_CHECKED_LABELS {
            f(&host[at + 1..], false);
            checked += 1;
        }
    }
}

/// `host`'s last two labels (itself if it has two), `None` for a single label.
fn last_two_labels(host: &[u8]) -> Option<&[u8]> {
    let mut dots = (0..host.len()).rev().filter(|&at| host[at] == b'.');
    dots.next()?;
    Some(dots.next().map_or(host, |at| &host[at + 1..]))
}

/// A stored target's host (as written, without a trailing dot) and what follows its
/// authority, when the `url` crate would read the host as its lowercase self: `http://` or
/// `https://` (any case), a host of ASCII letters, digits, `-` and `.` with a letter (all
/// digits is an IPv4 address, which it may rewrite), an optional port, no userinfo. `None`
/// for any other (the slow path). No allocation.
fn plain_host(t: &[u8]) -> Option<(&[u8], &[u8])> {
    let start = match t.get(..8) {
        Some(s) if s.eq_ignore_ascii_case(b"https://") => 8,
        _ if t.get(..7)?.eq_ignore_ascii_case(b"http://") => 7,
        _ => return None,
    };
    let rest = &t[start..];
    let end = memchr::memchr3(b'/', b'?', b'#', rest).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    // A short scan inline: a call costs more than it finds on a host's few bytes.
    let host = match authority.iter().position(|&b| b == b':') {
        Some(c) => {
            let port = &authority[c + 1..];
            if !port.iter().all(u8::is_ascii_digit) {
                return None;
            }
            &authority[..c]
        }
        None => authority,
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    // Branch-free over the bytes: letters, digits, `-` and `.` only, with a letter.
    let plain = shards::link::every_target_byte(host, |b| {
        b.is_ascii_alphanumeric() || b == b'-' || b == b'.'
    }) && host.iter().any(|&b| b > b'9');
    (plain && (1..=crate::base::hosts::MAX_DOMAIN_BYTES).contains(&host.len()))
        .then_some((host, after))
}

/// What [`plain_authority`] reads of a target: its plain host as written (no trailing dot),
/// what follows its authority, and the host's last two labels (`None` for a single label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Authority<'t> {
    host: &'t [u8],
    after: &'t [u8],
    top: Option<&'t [u8]>,
}

/// Bytes of authority [`plain_authority`] reads in one pass (four 16-byte blocks); a longer
/// one is read by [`plain_host`].
const FAST_AUTHORITY_BYTES: usize = 64;

/// [`plain_host`] and [`last_two_labels`] in one pass: the scheme compared as one word, then
/// the authority's bytes classified 16 at a time (SSE2, in the x86_64 baseline) into bit
/// masks (ends, colon, dots, allowed bytes, letters, digits) that give the host, its port's
/// check and its last two labels with a few bit operations. Two scans with `memchr` and byte
/// loops cost about 45 ns of a check's 75 (`perf record` of the blocklist bench).
#[inline]
fn plain_authority(t: &[u8]) -> Option<Authority<'_>> {
    let start = scheme_len(t)?;
    let rest = &t[start..];
    let Some(m) = AuthorityMasks::of(rest) else {
        // Past the blocks (rare): the byte-wise reader.
        let (host, after) = plain_host(t)?;
        return Some(Authority {
            host,
            after,
            top: last_two_labels(host),
        });
    };
    let below = |n: u32| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    let end = m.end.trailing_zeros();
    let authority = below(end);
    let colon = m.colon & authority;
    let mut host_end = match colon {
        0 => end,
        c => {
            let c = c.trailing_zeros();
            // The port: digits only (or none).
            let port = authority & !below(c + 1);
            if port & !m.digit != 0 {
                return None;
            }
            c
        }
    };
    if host_end > 0 && m.dot >> (host_end - 1) & 1 == 1 {
        host_end -= 1;
    }
    let host_bits = below(host_end);
    if host_end == 0 || host_bits & !m.ok != 0 || host_bits & m.letter == 0 {
        return None;
    }
    let host = &rest[..host_end as usize];
    let dots = m.dot & host_bits;
    let top = (dots != 0).then(|| {
        let others = dots & !(1u64 << (63 - dots.leading_zeros()));
        match others {
            0 => host,
            d => &host[(64 - d.leading_zeros()) as usize..],
        }
    });
    Some(Authority {
        host,
        after: &rest[end as usize..],
        top,
    })
}

/// `http://` or `https://` (any case): its length.
#[inline(always)]
fn scheme_len(t: &[u8]) -> Option<usize> {
    let word = u64::from_le_bytes(*t.first_chunk::<8>()?);
    // Bit 5 set on the letters' bytes only: `:` and `/` compared exactly.
    const HTTPS_LETTERS: u64 = 0x0000_0020_2020_2020;
    const HTTP_LETTERS: u64 = 0x0000_0000_2020_2020;
    if word | HTTPS_LETTERS == u64::from_le_bytes(*b"https://") {
        return Some(8);
    }
    let seven = word & 0x00ff_ffff_ffff_ffff;
    (seven | HTTP_LETTERS == u64::from_le_bytes(*b"http://\0")).then_some(7)
}

/// Bit masks over the first [`FAST_AUTHORITY_BYTES`] bytes after a scheme, a bit per byte
/// (for one block, [`classify16`]'s, the low 16 bits).
#[derive(Default)]
struct AuthorityMasks {
    /// `/`, `?`, `#`, or the end of the bytes.
    end: u64,
    colon: u64,
    dot: u64,
    /// Letters, digits, `-` and `.`.
    ok: u64,
    letter: u64,
    digit: u64,
}

impl AuthorityMasks {
    /// The masks, up to the first block holding an end; `None` if none of the first
    /// [`FAST_AUTHORITY_BYTES`] bytes ends the authority.
    #[inline(always)]
    fn of(rest: &[u8]) -> Option<AuthorityMasks> {
        let mut m = AuthorityMasks::default();
        for from in (0..FAST_AUTHORITY_BYTES).step_by(16) {
            let have = rest.len().saturating_sub(from).min(16);
            // A whole block is read in place; only the last, short one is copied (a copy
            // read back as one word stalls on store forwarding).
            let mut block = match rest.get(from..from + 16) {
                Some(whole) => classify16(whole.try_into().expect("16 bytes")),
                None => {
                    let mut short = [0u8; 16];
                    short[..have].copy_from_slice(&rest[from..from + have]);
                    let mut c = classify16(&short);
                    c.end |= 1 << have;
                    c
                }
            };
            let ended = block.end != 0;
            block.shift(from as u32);
            m.add(&block);
            if ended {
                return Some(m);
            }
        }
        None
    }

    #[inline(always)]
    fn shift(&mut self, by: u32) {
        for x in [
            &mut self.end,
            &mut self.colon,
            &mut self.dot,
            &mut self.ok,
            &mut self.letter,
            &mut self.digit,
        ] {
            *x <<= by;
        }
    }

    #[inline(always)]
    fn add(&mut self, o: &AuthorityMasks) {
        self.end |= o.end;
        self.colon |= o.colon;
        self.dot |= o.dot;
        self.ok |= o.ok;
        self.letter |= o.letter;
        self.digit |= o.digit;
    }
}

/// One block's masks, in the low 16 bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn classify16(block: &[u8; 16]) -> AuthorityMasks {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is enabled on every x86_64 target; `block` is 16 readable bytes and
    // `_mm_loadu_si128` needs no alignment.
    unsafe {
        let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
        let eq = |c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
        // Signed compares: bytes of 0x80 and up are negative, so never in a range here.
        let within = |x: __m128i, lo: u8, hi: u8| {
            _mm_and_si128(
                _mm_cmpgt_epi8(x, _mm_set1_epi8((lo - 1) as i8)),
                _mm_cmpgt_epi8(_mm_set1_epi8((hi + 1) as i8), x),
            )
        };
        let lower = _mm_or_si128(v, _mm_set1_epi8(0x20));
        let letter = within(lower, b'a', b'z');
        let digit = within(v, b'0', b'9');
        let dot = eq(b'.');
        let ok = _mm_or_si128(_mm_or_si128(letter, digit), _mm_or_si128(dot, eq(b'-')));
        let end = _mm_or_si128(_mm_or_si128(eq(b'/'), eq(b'?')), eq(b'#'));
        let mask = |x: __m128i| u64::from(_mm_movemask_epi8(x) as u32);
        AuthorityMasks {
            end: mask(end),
            colon: mask(eq(b':')),
            dot: mask(dot),
            ok: mask(ok),
            letter: mask(letter),
            digit: mask(digit),
        }
    }
}

/// One block's masks, in the low 16 bits.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn classify16(block: &[u8; 16]) -> AuthorityMasks {
    let mut c = AuthorityMasks::default();
    for (i, &b) in block.iter().enumerate() {
        let bit = 1u64 << i;
        let letter = b.is_ascii_alphabetic();
        let digit = b.is_ascii_digit();
        c.end |= u64::from(matches!(b, b'/' | b'?' | b'#')) * bit;
        c.colon |= u64::from(b == b':') * bit;
        c.dot |= u64::from(b == b'.') * bit;
        c.ok |= u64::from(letter || digit || b == b'-' || b == b'.') * bit;
        c.letter |= u64::from(letter) * bit;
        c.digit |= u64::from(digit) * bit;
    }
    c
}

/// The path with query (fragment cut) of what follows a target's authority, when the `url`
/// crate would leave it as it is: printable ASCII without `'` (which it encodes in a query)
/// and without dot segments (which it removes). Entries hold paths as it writes them, so such
/// a path is compared byte for byte; `None` for any other.
fn plain_path(after: &[u8]) -> Option<&[u8]> {
    // One scan for the fragment and for dot segments (`/.`).
    let mut end = after.len();
    let mut dot_segment = false;
    for at in memchr::memchr2_iter(b'#', b'.', after) {
        if after[at] == b'#' {
            end = at;
            break;
        }
        dot_segment |= at > 0 && after[at - 1] == b'/';
    }
    let path = &after[..end];
    let plain = !dot_segment
        && shards::link::every_target_byte(path, |b| b.is_ascii_graphic() && b != b'\'');
    plain.then_some(path)
}

/// The Bloom filters' and the map's hash of a (lowercase) host. (xxh3 over a lowercase
/// copy measured faster than `base::hosts`' case-folding hash on the raw bytes: 63 against
/// 72 ns a check, `cargo bench --bench blocklist`.)
fn host_hash(h: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(h)
}

/// The coarse filter's hash of a last-two-labels key: `base::hosts`' hash, which folds ASCII
/// case as it reads words of the bytes, so the redirect path hashes the target's bytes in
/// place (a lowercase copy and an `xxh3` call took 10-15 ns of a 50-70 ns check).
#[inline]
fn coarse_hash(key: &[u8]) -> u64 {
    crate::base::hosts::hash_lowercase(key)
}

/// Parses one non-comment line, appending its entries to `out` (some may be left there on
/// an error: the caller truncates).
fn parse_line(line: &str, out: &mut Vec<Entry>) -> Result<(), String> {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or("");
    if may_be_address(first) && first.parse::<std::net::IpAddr>().is_ok() {
        // A hosts-file line: the address, then the hosts it sinks.
        let before = out.len();
        for h in words {
            out.push(host_entry(h)?);
        }
        if out.len() == before {
            return Err("an address with no host after it".into());
        }
        return Ok(());
    }
    if words.next().is_some() {
        return Err(format!("more than one word: {line:?}"));
    }
    let entry = if let Some(h) = first.strip_prefix("||") {
        host_entry(h.strip_suffix('^').unwrap_or(h))?
    } else if first.contains("://") {
        let (host, path) = canonical(first).ok_or_else(|| format!("not a URL: {first:?}"))?;
        Entry::Url { host, path }
    } else {
        match first.split_once('/') {
            None => host_entry(first)?,
            Some((host, rest)) => {
                let url = format!("http://{host}/{}", rest.strip_suffix('*').unwrap_or(rest));
                let (host, path) =
                    canonical(&url).ok_or_else(|| format!("not a host and path: {first:?}"))?;
                Entry::Prefix { host, path }
            }
        }
    };
    out.push(entry);
    Ok(())
}

/// Whether `w` could parse as an IP address: IPv4's digits and dots, or IPv6's `:`. Most
/// lines' first word is a host name, which so skips the address parser.
fn may_be_address(w: &str) -> bool {
    w.contains(':') || w.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

fn host_entry(h: &str) -> Result<Entry, String> {
    // Most lines of a feed: an ASCII name the URL parser would only lowercase (not an IPv4
    // address, no punycode to check, labels of at most 63 bytes that neither start nor end
    // with `-`), taken as it is; anything else goes through the parser.
    let name = h.strip_suffix('.').unwrap_or(h).as_bytes();
    let plain = !name.is_empty()
        && name.len() <= crate::base::hosts::MAX_DOMAIN_BYTES
        && name.iter().any(u8::is_ascii_alphabetic)
        && name.split(|&b| b == b'.').all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with(b"-")
                && !l.ends_with(b"-")
                && !l.starts_with(b"xn--")
                && l.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if plain {
        // `name` is `h` without a trailing dot, so a prefix of a `str`.
        return Ok(Entry::Host(h[..name.len()].to_ascii_lowercase()));
    }
    let url = format!("http://{h}/");
    match canonical(&url) {
        Some((host, _)) if !h.contains(['/', '@', ':', '?', '#']) => Ok(Entry::Host(host)),
        _ => Err(format!("not a host name: {h:?}")),
    }
}

/// Verdicts for targets the redirect path cannot check in place (a host or path that is not
/// plain ASCII), per core: a fixed four-way set-associative array by the target's hash,
/// filled on a miss (the only allocation, by the `url` crate, once per target and blocklist
/// while the targets in use fit), forgotten when the blocklist changes.
pub struct VerdictMemo {
    sets: Box<[[Verdict; VERDICT_MEMO_WAYS]]>,
}

/// Targets a core's [`VerdictMemo`] holds: past that many targets that need the slow path in
/// use at once, some are parsed again (and allocate) when they come back.
pub const VERDICT_MEMO_ENTRIES: usize = 8192;

/// Ways of a [`VerdictMemo`] set.
const VERDICT_MEMO_WAYS: usize = 4;

#[derive(Clone, Copy, Default)]
struct Verdict {
    /// The target's hash (odd: 0 is empty), and the blocklist generation it was judged by.
    hash: u64,
    generation: u64,
    blocked: bool,
}

impl Default for VerdictMemo {
    fn default() -> VerdictMemo {
        let sets = VERDICT_MEMO_ENTRIES / VERDICT_MEMO_WAYS;
        VerdictMemo {
            sets: vec![[Verdict::default(); VERDICT_MEMO_WAYS]; sets].into_boxed_slice(),
        }
    }
}

impl VerdictMemo {
    fn verdict(&mut self, list: &Blocklist, target: &[u8]) -> bool {
        let hash = xxhash_rust::xxh3::xxh3_64(target) | 1;
        let set = &mut self.sets[(hash >> 1) as usize % (VERDICT_MEMO_ENTRIES / VERDICT_MEMO_WAYS)];
        if let Some(v) = set
            .iter()
            .find(|v| v.hash == hash && v.generation == list.generation)
        {
            return v.blocked;
        }
        let blocked = std::str::from_utf8(target)
            .ok()
            .and_then(|t| list.blocking_url(t))
            .is_some();
        // The new verdict goes first; the oldest (or one of another generation) goes.
        set.rotate_right(1);
        set[0] = Verdict {
            hash,
            generation: list.generation,
            blocked,
        };
        blocked
    }
}

/// The Bloom filter: 512-bit blocks, each key's probes in one block (one cache line).
#[derive(Debug, Default)]
struct Bloom {
    blocks: Vec<[u64; 8]>,
}

impl Bloom {
    fn with_entries(n: usize) -> Bloom {
        let blocks = (n * BLOOM_BITS_PER_ENTRY).div_ceil(512).max(1);
        Bloom {
            blocks: vec![[0; 8]; blocks],
        }
    }

    /// The block and the seven bits of `h`.
    fn probes(&self, h: u64) -> (usize, [u32; 7]) {
        let block = ((u128::from(h) * self.blocks.len() as u128) >> 64) as usize;
        let mut bits = [0u32; 7];
        let mut x = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for b in &mut bits {
            *b = (x >> 55) as u32; // 9 bits: 0..512
            x = x.rotate_left(9);
        }
        (block, bits)
    }

    fn insert(&mut self, h: u64) {
        let (block, bits) = self.probes(h);
        for b in bits {
            self.blocks[block][(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    /// Hints the cache with the line `h` asks.
    #[inline]
    fn prefetch(&self, h: u64) {
        if self.blocks.is_empty() {
            return;
        }
        let (block, _) = self.probes(h);
        shards::table::prefetch(&self.blocks[block]);
    }

    #[inline]
    fn may_hold(&self, h: u64) -> bool {
        if self.blocks.is_empty() {
            return false;
        }
        let (block, bits) = self.probes(h);
        let line = &self.blocks[block];
        bits.iter().fold(true, |all, &b| {
            all & (line[(b / 64) as usize] >> (b % 64) & 1 == 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = "\
# a comment line
evil.example
0.0.0.0 sink.example other-sink.example   # hosts file
127.0.0.1 localhost.example
||adblock.example^
! an Adblock comment
Bücher.example
phish.example/login*
phish.example/x
https://exact.example/a?b=1#frag
not a line
http://
0.0.0.0
";

    fn blocked(b: &Blocklist, t: &str) -> bool {
        let mut memo = VerdictMemo::default();
        let fast = b.blocks(t.as_bytes(), &mut memo);
        let slow = b.blocking_url(t).is_some();
        assert_eq!(fast, slow, "redirect and API checks disagree on {t}");
        fast
    }

    #[test]
    fn a_hosts_line_with_a_bad_host_loads_none_of_its_hosts() {
        // Batched load: the good hosts before the bad one are not left behind in the batch.
        let mut text = String::new();
        for i in 0..LOAD_BATCH + 3 {
            text.push_str(&format!("h{i}.example\n"));
        }
        text.push_str("0.0.0.0 kept-out.example also-out.example bad/host\nlast.example\n");
        let b = Blocklist::parse(&text).unwrap();
        assert_eq!(b.len(), LOAD_BATCH + 4);
        assert_eq!(
            b.bad.iter().map(|l| l.line).collect::<Vec<_>>(),
            [LOAD_BATCH + 4]
        );
        assert!(!blocked(&b, "https://kept-out.example/"));
        assert!(!blocked(&b, "https://also-out.example/"));
        assert!(blocked(&b, "https://h0.example/"));
        assert!(blocked(&b, "https://last.example/"));
        assert_eq!(
            entries_of_line("0.0.0.0 a.example b/c").map_err(|_| ()),
            Err(())
        );
    }

    #[test]
    fn an_index_reserved_by_lines_ends_sized_by_its_hosts() {
        let mut text = "# a comment\n".repeat(100_000);
        text.push_str("evil.example\nphish.example/login\n");
        let b = Blocklist::parse(&text).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b.index.slots.len(), 16);
        assert!(blocked(&b, "https://a.evil.example/"));
        assert!(blocked(&b, "https://phish.example/login?x"));
        assert!(!blocked(&b, "https://phish.example/"));
    }

    #[test]
    fn every_format_loads_and_bad_lines_are_reported_with_their_numbers() {
        let b = Blocklist::parse(LIST).unwrap();
        assert_eq!(b.len(), 9);
        let lines: Vec<usize> = b.bad.iter().map(|l| l.line).collect();
        assert_eq!(lines, [11, 12, 13], "{:?}", b.bad);
        assert_eq!(b.bad_count, 3);
    }

    #[test]
    fn hosts_block_their_subdomains_on_the_parsed_host() {
        let b = Blocklist::parse(LIST).unwrap();
        for t in [
            "https://evil.example/",
            "http://EVIL.Example./x?y",
            "https://a.b.evil.example:8443/p",
            "https://user:pw@evil.example/",
            "https://%65vil.example/",
            "https://sink.example",
            "https://other-sink.example/#x",
            "https://adblock.example/",
            "https://bücher.example/",
            "https://xn--bcher-kva.example/",
            "https://WWW.BÜCHER.example/",
            &format!("https://{}evil.example/", "a.".repeat(40)),
        ] {
            assert!(blocked(&b, t), "{t}");
        }
        for t in [
            "https://notevil.example/",
            "https://evil.example.com/",
            "https://example/",
            "https://good.example/evil.example",
            "https://good.example/?u=https://evil.example/",
        ] {
            assert!(!blocked(&b, t), "{t}");
        }
    }

    #[test]
    fn prefixes_and_exact_urls_hold_on_their_host_only() {
        let b = Blocklist::parse(LIST).unwrap();
        for t in [
            "https://phish.example/login",
            "http://phish.example/login/step2?x=1",
            "https://PHISH.example/login-now",
            "https://phish.example/x",
            "https://phish.example/a/../login",
            "https://exact.example/a?b=1",
            "http://exact.example/a?b=1#other",
        ] {
            assert!(blocked(&b, t), "{t}");
        }
        for t in [
            "https://phish.example/",
            "https://phish.example/y/x",
            "https://sub.phish.example/login",
            "https://exact.example/a?b=2",
            "https://exact.example/a",
        ] {
            assert!(!blocked(&b, t), "{t}");
        }
        assert_eq!(
            b.blocking_url("https://a.evil.example/")
                .map(|e| e.to_string()),
            Some("evil.example".into())
        );
        assert_eq!(
            b.blocking_url("https://phish.example/login2")
                .map(|e| e.to_string()),
            Some("phish.example/login*".into())
        );
    }

    #[test]
    fn each_entrys_line_reads_back_as_that_entry() {
        let b = Blocklist::parse(LIST).unwrap();
        let mut n = 0;
        for raw in LIST.lines() {
            for e in entries_of_line(raw).unwrap_or_default() {
                assert_eq!(entries_of_line(&e.line()), Ok(vec![e.clone()]), "{raw}");
                n += 1;
            }
        }
        assert_eq!(n, b.len());
        let two = Blocklist::build(
            &[
                Source {
                    name: "one",
                    text: "a.example\nbad line here",
                },
                Source {
                    name: "two",
                    text: "\nhttp://",
                },
            ],
            7,
        )
        .unwrap();
        assert_eq!((two.len(), two.generation, two.bad_count), (1, 7, 2));
        let bad: Vec<(&str, usize)> = two
            .bad
            .iter()
            .map(|l| (l.source.as_str(), l.line))
            .collect();
        assert_eq!(bad, [("one", 2), ("two", 2)]);
    }

    #[test]
    fn an_empty_list_blocks_nothing() {
        let b = Blocklist::parse("# nothing\n\n").unwrap();
        assert!(b.is_empty());
        assert!(!blocked(&b, "https://evil.example/"));
    }

    proptest::proptest! {
        /// Against a plain check of every suffix of the parsed host: the Bloom filter never
        /// hides an entry, and the redirect path's check answers as the API's.
        #[test]
        fn the_filter_never_hides_an_entry(
            hosts in proptest::collection::vec("[a-z]{1,8}(\\.[a-z]{1,8}){0,2}", 1..300),
            probes in proptest::collection::vec("[a-z]{1,8}(\\.[a-z]{1,8}){0,3}", 1..100),
        ) {
            let b = Blocklist::parse(&hosts.join("\n")).unwrap();
            let set: std::collections::HashSet<&str> = hosts.iter().map(String::as_str).collect();
            for p in probes.iter().chain(&hosts) {
                let labels: Vec<&str> = p.split('.').collect();
                let want = (0..labels.len()).any(|i| set.contains(labels[i..].join(".").as_str()));
                proptest::prop_assert_eq!(blocked(&b, &format!("https://{p}/x")), want, "{}", p);
                // Any case: the coarse filter's hash folds it as the index does.
                let upper = p.to_ascii_uppercase();
                proptest::prop_assert_eq!(blocked(&b, &format!("HTTPS://{upper}:443/x")), want, "{}", upper);
            }
        }

        /// The one-pass reader of a target's authority answers as the byte-wise reader and
        /// `last_two_labels` it replaced on the redirect path (kept for long authorities).
        #[test]
        fn the_block_reader_agrees_with_the_byte_reader(
            scheme in "(http|https|HTTP|hTTpS|https:|ftp)://?",
            rest in "([a-zA-Z0-9]{1,6}|[.:/?#@%\\[\\]-]|\u{e9}){0,40}",
        ) {
            let t = format!("{scheme}{rest}");
            let old = plain_host(t.as_bytes()).map(|(host, after)| Authority {
                host,
                after,
                top: last_two_labels(host),
            });
            proptest::prop_assert_eq!(plain_authority(t.as_bytes()), old, "{}", t);
        }
    }

    #[test]
    fn the_block_reader_reads_hosts_at_and_past_its_blocks() {
        for len in [1, 15, 16, 17, 31, 32, 33, 62, 63, 64, 65, 90, 253] {
            let host = format!("{}.Ex", "a".repeat(len.max(4) - 3));
            for tail in ["", "/", ":8080", ":8080/x?y", ".", "./p", ":x"] {
                let t = format!("https://{host}{tail}");
                let old = plain_host(t.as_bytes()).map(|(host, after)| Authority {
                    host,
                    after,
                    top: last_two_labels(host),
                });
                assert_eq!(plain_authority(t.as_bytes()), old, "{t}");
            }
        }
        let a = plain_authority(b"https://www.Example.COM.:443/p?q").expect("plain");
        assert_eq!(
            (a.host, a.after, a.top),
            (
                &b"www.Example.COM"[..],
                &b"/p?q"[..],
                Some(&b"Example.COM"[..])
            )
        );
        assert_eq!(
            plain_authority(b"https://localhost/").map(|a| a.top),
            Some(None)
        );
        assert_eq!(
            plain_authority(b"https://1.2.3.4/"),
            None,
            "an IPv4 address"
        );
        assert_eq!(
            plain_authority(b"https://u@evil.example/"),
            None,
            "userinfo"
        );
    }
}
