//! The declared domains (issue 26): each is its own keyspace, chosen on the redirect path by
//! the request's `Host`. The book is `<data_dir>/domains.json`, changed by
//! `ricochet domains add|list|remove` under an exclusive `flock` and replaced atomically, as
//! the API key store is; a running server picks a change up within about a second
//! (`node::keywatch`).
//!
//! Every domain has a *number*, the prefix of its links' stored keys
//! (`shards::link::stored_key`): the default domain is number 0, so a data dir from before
//! domains is its keyspace unchanged and opens without a rewrite. Naming the default domain
//! (`domains add NAME --default`) renames number 0 and its links follow, as Shlink's links
//! without a domain follow `DEFAULT_DOMAIN`. Other domains get the next number, never reused:
//! a removed domain keeps it (its links are kept and stop redirecting), and adding the name
//! again brings them back.
//!
//! ```text
//! {"version": 1, "next_number": 3, "domains": [
//!   {"number": 0, "name": "sho.rt", "scheme": "https"},
//!   {"number": 1, "name": "go.brand.com", "scheme": "https", "regular_404": "https://brand.com/"},
//!   {"number": 2, "name": "old.example", "scheme": "http", "removed_at": "2026-12-05T22:00:00Z"}]}
//! ```

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::timefmt::{format_rfc3339_utc, now_s, parse_rfc3339_s};
use crate::base::hosts::{normalize, DomainError, DomainId, HostTable, MAX_DOMAINS};
use shards::link::{DEFAULT_DOMAIN, MAX_DOMAIN_NUMBER};

/// File name of the domain book inside the data directory.
pub const DOMAINS_FILE: &str = "domains.json";

/// File name of the lock that serializes changes to the domain book.
pub const DOMAINS_LOCK_FILE: &str = "domains.lock";

/// Longest not-found redirect URL, in bytes (a link target's limit).
pub const MAX_REDIRECT_URL_BYTES: usize = shards::link::MAX_URL_BYTES;

/// Version of the `domains.json` layout.
const FILE_VERSION: u32 = 1;

/// A change of one domain's not-found redirects: for each, `None` keeps it, `Some(None)`
/// clears it, `Some(Some(url))` sets it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedirectsEdit {
    pub domain: String,
    pub base_url: Option<Option<String>>,
    pub regular_404: Option<Option<String>>,
    pub invalid_short_url: Option<Option<String>>,
}

/// The scheme a domain's short URLs are written with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    #[default]
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Where a domain sends a GET or HEAD it has no link for: Shlink's three "special" (not-found)
/// redirects, with Shlink's meanings (shlink.io, "Special redirects"). `None`: 404 as without
/// domains. Answered `302 Found`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotFoundRedirects {
    /// For the domain's root, `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// For any other path that is not a key (`/a/b`, `/favicon.ico`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular_404: Option<String>,
    /// For a key that names no live link of the domain: never created, deleted or expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_short_url: Option<String>,
}

/// Which of a domain's not-found redirects applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// `/`.
    BaseUrl,
    /// A path that cannot be a key.
    Regular404,
    /// A key with no live link.
    InvalidShortUrl,
}

/// A domain's own `--extra-path` and `--forward-query` (Shlink's per-domain
/// `REDIRECT_EXTRA_PATH_MODE` and forwarding): `None` follows the server's flag. A link's own
/// `forward_query` still wins over both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainVisits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_path: Option<crate::route::ExtraPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_query: Option<bool>,
}

impl DomainVisits {
    /// The server's visit rules with this domain's own settings in their place, where it
    /// has them.
    #[inline]
    pub fn over(self, server: crate::route::VisitRules) -> crate::route::VisitRules {
        crate::route::VisitRules {
            extra_path: self.extra_path.unwrap_or(server.extra_path),
            forward_query: self.forward_query.unwrap_or(server.forward_query),
            trailing_slash: server.trailing_slash,
        }
    }
}

/// One declared domain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// The prefix of its links' stored keys; 0 is the default domain.
    pub number: u32,
    /// ASCII (IDNA), lowercase, no trailing dot.
    pub name: String,
    #[serde(default)]
    pub scheme: Scheme,
    #[serde(flatten)]
    pub redirects: NotFoundRedirects,
    /// How visits on it treat extra paths and queries, where it differs from the server.
    #[serde(flatten)]
    pub visits: DomainVisits,
    /// RFC 3339; a removed domain keeps its number and its links, and answers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<String>,
}

impl Domain {
    pub fn is_removed(&self) -> bool {
        self.removed_at.is_some()
    }

    pub fn is_default(&self) -> bool {
        self.number == DEFAULT_DOMAIN
    }
}

/// Why the book refused a change or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DomainBookError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path} is not a valid domain book: {reason}")]
    Corrupt { path: String, reason: String },
    #[error(transparent)]
    Name(#[from] DomainError),
    #[error("{0} is already declared")]
    AlreadyDeclared(String),
    #[error("{0} is not a declared domain")]
    Unknown(String),
    #[error(
        "{0} is the default domain: it cannot be removed (name another with `ricochet domains \
         add NAME --default`)"
    )]
    RemoveDefault(String),
    #[error(
        "{0} is declared as a domain of its own (removed or not), with its own links: it \
         cannot become the default domain's name"
    )]
    DefaultTaken(String),
    #[error("{what} is not an http(s) URL: {reason}")]
    BadRedirect { what: &'static str, reason: String },
    #[error("no more domain numbers (at most {MAX_DOMAIN_NUMBER} domains are ever declared)")]
    NumbersExhausted,
}

/// What `domains add` asks for.
#[derive(Clone, Debug, Default)]
pub struct NewDomain {
    pub name: String,
    pub default: bool,
    pub scheme: Scheme,
    pub redirects: NotFoundRedirects,
    pub visits: DomainVisits,
}

/// The domain book as read from the data directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainBook {
    next_number: u32,
    /// By number, ascending.
    domains: Vec<Domain>,
}

#[derive(Serialize, Deserialize)]
struct FileV1 {
    version: u32,
    next_number: u32,
    domains: Vec<Domain>,
}

impl DomainBook {
    /// Reads `<dir>/domains.json`; a missing file is a book with no declared domain (one
    /// unnamed default domain, as before domains).
    pub fn load(dir: &Path) -> Result<DomainBook, DomainBookError> {
        DomainBook::load_file(dir, DOMAINS_FILE)
    }

    /// Reads `<dir>/<file>` in `domains.json`'s layout (a fleet node's copy of the fleet's
    /// book is another file of the same layout); a missing file is an empty book.
    pub fn load_file(dir: &Path, file: &str) -> Result<DomainBook, DomainBookError> {
        let path = dir.join(file);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DomainBook::default()),
            Err(e) => return Err(io_err(&path, e)),
        };
        let corrupt = |reason: String| DomainBookError::Corrupt {
            path: path.display().to_string(),
            reason,
        };
        let file: FileV1 = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if file.version != FILE_VERSION {
            return Err(corrupt(format!(
                "version {} (this build reads {FILE_VERSION})",
                file.version
            )));
        }
        let book = DomainBook {
            next_number: file.next_number,
            domains: file.domains,
        };
        book.check().map_err(corrupt)?;
        Ok(book)
    }

    /// A book of `domains` (by number) whose next new domain gets `next_number`, checked as a
    /// book read from disk is (the fleet's rows come this way).
    pub fn from_parts(next_number: u32, domains: Vec<Domain>) -> Result<DomainBook, String> {
        let book = DomainBook {
            next_number,
            domains,
        };
        book.check()?;
        Ok(book)
    }

    /// The number the next new domain gets.
    pub fn next_number(&self) -> u32 {
        self.next_number
    }

    /// Writes the book to `<dir>/<file>` atomically (write, fsync, rename, fsync the dir).
    pub fn save_as(&self, dir: &Path, file: &str) -> Result<(), DomainBookError> {
        let file_v1 = FileV1 {
            version: FILE_VERSION,
            next_number: self.next_number,
            domains: self.domains.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file_v1).expect("the book serializes");
        bytes.push(b'\n');
        shards::durable::write_atomic(dir, file, &bytes, 0o644)
            .map_err(|e| io_err(&dir.join(file), e))
    }

    /// The invariants a book read from disk must hold (a hand-edited or damaged file is
    /// refused, never half-used).
    fn check(&self) -> Result<(), String> {
        if !self.domains.windows(2).all(|w| w[0].number < w[1].number) {
            return Err("domain numbers are not unique and ascending".into());
        }
        if self.next_number > MAX_DOMAIN_NUMBER + 1 {
            return Err(format!("next_number {} is too large", self.next_number));
        }
        for d in &self.domains {
            if d.number != DEFAULT_DOMAIN && d.number >= self.next_number {
                return Err(format!("number {} is not below next_number", d.number));
            }
            if normalize(&d.name).ok().as_deref() != Some(d.name.as_str()) {
                return Err(format!("{:?} is not a normalized domain name", d.name));
            }
            if d.is_default() && d.is_removed() {
                return Err("the default domain is marked removed".into());
            }
            if let Some(t) = &d.removed_at {
                parse_rfc3339_s(t).map_err(|_| format!("removed_at {t:?} is not RFC 3339"))?;
            }
            check_redirects(&d.redirects).map_err(|e| e.to_string())?;
        }
        let live: Vec<(DomainId, &str)> = self
            .live()
            .map(|d| (DomainId(d.number), d.name.as_str()))
            .collect();
        HostTable::numbered(&live).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Every domain, removed ones included, by number.
    pub fn all(&self) -> &[Domain] {
        &self.domains
    }

    /// The domains that answer requests.
    pub fn live(&self) -> impl Iterator<Item = &Domain> {
        self.domains.iter().filter(|d| !d.is_removed())
    }

    /// Whether any domain is declared (without one, every request is the default domain's).
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The domain of `name` (normalized first), removed or not.
    pub fn find(&self, name: &str) -> Option<&Domain> {
        let ascii = normalize(name).ok()?;
        self.domains.iter().find(|d| d.name == ascii)
    }

    /// Declares a domain (or names the default one), in memory; see [`DomainBook::add_to`].
    pub fn add(&mut self, new: &NewDomain) -> Result<&Domain, DomainBookError> {
        let ascii = normalize(&new.name)?;
        check_redirects(&new.redirects)?;
        let same = self.domains.iter().position(|d| d.name == ascii);
        let at = if new.default {
            match same {
                // Removed or not, that name is another keyspace's: adding it back must find
                // its links.
                Some(i) if !self.domains[i].is_default() => {
                    return Err(DomainBookError::DefaultTaken(ascii));
                }
                _ => {}
            }
            match self.domains.first() {
                Some(d) if d.is_default() => 0,
                _ => {
                    self.domains.insert(0, Domain::new(DEFAULT_DOMAIN, &ascii));
                    0
                }
            }
        } else {
            match same {
                Some(i) if self.domains[i].is_removed() => i,
                Some(_) => return Err(DomainBookError::AlreadyDeclared(ascii)),
                None => {
                    let number = self.next_number.max(1);
                    if number > MAX_DOMAIN_NUMBER || self.live().count() >= MAX_DOMAINS {
                        return Err(DomainBookError::NumbersExhausted);
                    }
                    self.next_number = number + 1;
                    self.domains.push(Domain::new(number, &ascii));
                    self.domains.len() - 1
                }
            }
        };
        let d = &mut self.domains[at];
        d.name = ascii;
        d.scheme = new.scheme;
        d.redirects = new.redirects.clone();
        d.visits = new.visits;
        d.removed_at = None;
        Ok(&self.domains[at])
    }

    /// Changes a live domain's visit settings (`ricochet domains set`): each `Some` replaces
    /// that setting (`Some(None)`: the server's again).
    pub fn set_visits(
        &mut self,
        name: &str,
        extra_path: Option<Option<crate::route::ExtraPath>>,
        forward_query: Option<Option<bool>>,
    ) -> Result<&Domain, DomainBookError> {
        let ascii = normalize(name)?;
        let d = self
            .domains
            .iter_mut()
            .find(|d| d.name == ascii && !d.is_removed())
            .ok_or(DomainBookError::Unknown(ascii))?;
        if let Some(e) = extra_path {
            d.visits.extra_path = e;
        }
        if let Some(f) = forward_query {
            d.visits.forward_query = f;
        }
        Ok(d)
    }

    /// Changes a live domain's not-found redirects, in memory (Shlink's
    /// `PATCH /rest/v3/domains/redirects`); the redirects it does not name stay.
    pub fn set_redirects(&mut self, edit: &RedirectsEdit) -> Result<&Domain, DomainBookError> {
        let ascii = normalize(&edit.domain)?;
        let Some(d) = self
            .domains
            .iter_mut()
            .find(|d| d.name == ascii && !d.is_removed())
        else {
            return Err(DomainBookError::Unknown(ascii));
        };
        let mut r = d.redirects.clone();
        for (to, from) in [
            (&mut r.base_url, &edit.base_url),
            (&mut r.regular_404, &edit.regular_404),
            (&mut r.invalid_short_url, &edit.invalid_short_url),
        ] {
            if let Some(v) = from {
                v.clone_into(to);
            }
        }
        check_redirects(&r)?;
        d.redirects = r;
        Ok(d)
    }

    /// Marks a domain removed, in memory: it keeps its number and its links.
    pub fn remove(&mut self, name: &str) -> Result<&Domain, DomainBookError> {
        let ascii = normalize(name)?;
        let Some(d) = self
            .domains
            .iter_mut()
            .find(|d| d.name == ascii && !d.is_removed())
        else {
            return Err(DomainBookError::Unknown(ascii));
        };
        if d.is_default() {
            return Err(DomainBookError::RemoveDefault(ascii));
        }
        d.removed_at = Some(format_rfc3339_utc(now_s()));
        Ok(d)
    }

    /// Applies `change` to the book on disk under the lock and writes it back atomically.
    pub fn change<T>(
        dir: &Path,
        change: impl FnOnce(&mut DomainBook) -> Result<T, DomainBookError>,
    ) -> Result<T, DomainBookError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let lock_path = dir.join(DOMAINS_LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, e))?;
        shards::durable::lock_exclusive(&lock).map_err(|e| io_err(&lock_path, e))?;
        let mut book = DomainBook::load(dir)?;
        let out = change(&mut book)?;
        book.save_as(dir, DOMAINS_FILE)?;
        Ok(out)
    }

    /// What the cores consult: the live domains by `Host`, and each by number.
    pub fn view(&self, unknown: UnknownHost) -> Domains {
        let live: Vec<&Domain> = self.live().collect();
        let numbered: Vec<(DomainId, &str)> = live
            .iter()
            .map(|d| (DomainId(d.number), d.name.as_str()))
            .collect();
        Domains {
            hosts: HostTable::numbered(&numbered).expect("a checked book builds its table"),
            live: live.into_iter().cloned().collect(),
            unknown,
        }
    }
}

impl Domain {
    fn new(number: u32, name: &str) -> Domain {
        Domain {
            number,
            name: name.to_owned(),
            scheme: Scheme::default(),
            redirects: NotFoundRedirects::default(),
            visits: DomainVisits::default(),
            removed_at: None,
        }
    }
}

/// What a `Host` that names no declared domain gets (`--unknown-host`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UnknownHost {
    /// The default domain's links (as without domains).
    #[default]
    Default,
    /// 404, whatever the key.
    NotFound,
}

/// The cores' view of the book: immutable, shared as an `Arc`, replaced whole on a change.
#[derive(Debug, Default)]
pub struct Domains {
    hosts: HostTable,
    /// The live domains, by number.
    live: Vec<Domain>,
    unknown: UnknownHost,
}

impl Domains {
    /// No declared domain, unknown hosts to the default one: the server as before domains.
    pub fn none() -> Arc<Domains> {
        Arc::new(Domains::default())
    }

    /// The number of the domain a request is for: its `Host` (or absolute-form authority)
    /// looked up among the live domains. Without one (HTTP/1.0), or with a `Host` that names
    /// none: the default domain, or `None` (answer 404) under `--unknown-host not-found`.
    /// No allocation, no lock.
    #[inline]
    pub fn domain_of(&self, host: Option<&[u8]>) -> Option<u32> {
        if self.hosts.is_empty() {
            return match self.unknown {
                UnknownHost::Default => Some(DEFAULT_DOMAIN),
                UnknownHost::NotFound => host.is_none().then_some(DEFAULT_DOMAIN),
            };
        }
        match host.and_then(|h| self.hosts.lookup(h)) {
            Some(id) => Some(id.0),
            None if self.unknown == UnknownHost::Default => Some(DEFAULT_DOMAIN),
            None => None,
        }
    }

    /// Whether any domain is declared (without, every request is the default domain's or,
    /// under `--unknown-host not-found` with a `Host`, none's).
    #[inline]
    pub fn has_hosts(&self) -> bool {
        !self.hosts.is_empty()
    }

    /// Where a GET or HEAD on domain `number` goes when it finds no link (`None`: 404).
    #[inline]
    pub fn not_found_redirect(&self, number: u32, case: NotFound) -> Option<&str> {
        if self.live.is_empty() {
            return None;
        }
        let r = &self.get(number)?.redirects;
        match case {
            NotFound::BaseUrl => r.base_url.as_deref(),
            NotFound::Regular404 => r.regular_404.as_deref(),
            NotFound::InvalidShortUrl => r.invalid_short_url.as_deref(),
        }
    }

    /// Domain `number`'s own visit settings (none when no domain is declared). No
    /// allocation, no lock.
    #[inline]
    pub fn visits(&self, number: u32) -> DomainVisits {
        if self.live.is_empty() {
            return DomainVisits::default();
        }
        self.get(number).map(|d| d.visits).unwrap_or_default()
    }

    /// The live domain of `number`.
    pub fn get(&self, number: u32) -> Option<&Domain> {
        let i = self.live.binary_search_by_key(&number, |d| d.number).ok()?;
        Some(&self.live[i])
    }

    /// The live domain named `name` (any case, IDNA or Unicode).
    pub fn by_name(&self, name: &str) -> Option<&Domain> {
        self.hosts
            .lookup(name.as_bytes())
            .and_then(|id| self.get(id.0))
            .or_else(|| {
                let ascii = normalize(name).ok()?;
                self.hosts
                    .lookup(ascii.as_bytes())
                    .and_then(|id| self.get(id.0))
            })
    }

    /// The live domains, by number.
    pub fn live(&self) -> &[Domain] {
        &self.live
    }
}

/// Longest `Host` value a [`HostMemo`] remembers (a name and a port; longer ones are looked up
/// every time).
pub const HOST_MEMO_BYTES: usize = 64;

/// A core's memory of the last `Host` it looked up and the domain it named: a connection, and
/// most of a fleet's traffic, sends the same few hosts again and again, and comparing the bytes
/// with the last ones (a few nanoseconds) saves the table's hash and probe (about 18 ns for a
/// random mix of 10,000 domains, perf/reports/2026-12-06-65223e9-issue26-host-mix.md).
/// Cleared whenever the domains change.
#[derive(Clone, Copy, Debug)]
pub struct HostMemo {
    bytes: [u8; HOST_MEMO_BYTES],
    /// 0: empty (an empty `Host` is never remembered).
    len: u8,
    domain: Option<u32>,
}

impl Default for HostMemo {
    fn default() -> HostMemo {
        HostMemo {
            bytes: [0; HOST_MEMO_BYTES],
            len: 0,
            domain: None,
        }
    }
}

impl HostMemo {
    /// [`Domains::domain_of`], answered from memory when `host` is the last one asked.
    #[inline]
    pub fn domain_of(&mut self, domains: &Domains, host: Option<&[u8]>) -> Option<u32> {
        let Some(h) = host.filter(|h| !domains.hosts.is_empty() && !h.is_empty()) else {
            return domains.domain_of(host);
        };
        if h.len() == usize::from(self.len) && self.bytes[..h.len()] == *h {
            return self.domain;
        }
        let domain = domains.domain_of(host);
        if h.len() <= HOST_MEMO_BYTES {
            self.bytes[..h.len()].copy_from_slice(h);
            self.len = h.len() as u8;
            self.domain = domain;
        }
        domain
    }

    /// Forgets: the domains changed.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// A request's keyspace as far as it is known before it is answered: its `Host` not asked
/// yet, or already looked up (a pipelined run's prefetch, `net::conns::run`, asks it once
/// for the hint and the answer both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDomain {
    Unasked,
    /// The domain's number, or `None` for an unknown host under `--unknown-host not-found`.
    Found(Option<u32>),
}

impl HostDomain {
    /// The domain: as found, else looked up for `host` through the core's `memo`.
    #[inline]
    pub fn resolve(
        self,
        memo: &mut HostMemo,
        domains: &Domains,
        host: Option<&[u8]>,
    ) -> Option<u32> {
        match self {
            HostDomain::Found(found) => found,
            HostDomain::Unasked => memo.domain_of(domains, host),
        }
    }
}

fn check_redirects(r: &NotFoundRedirects) -> Result<(), DomainBookError> {
    for (what, url) in [
        ("--base-url", &r.base_url),
        ("--regular-404", &r.regular_404),
        ("--invalid-short-url", &r.invalid_short_url),
    ] {
        if let Some(u) = url {
            if u.len() > MAX_REDIRECT_URL_BYTES {
                return Err(DomainBookError::BadRedirect {
                    what,
                    reason: format!("longer than {MAX_REDIRECT_URL_BYTES} bytes"),
                });
            }
            shards::link::validate_url(u).map_err(|e| DomainBookError::BadRedirect {
                what,
                reason: e.to_string(),
            })?;
        }
    }
    Ok(())
}

fn io_err(path: &Path, source: io::Error) -> DomainBookError {
    DomainBookError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `ricochet domains ...`
#[derive(Debug, clap::Subcommand)]
pub enum DomainsCommand {
    /// Declare a domain (its own keyspace), or with --default name the default domain (whose
    /// links are those of the server before domains). Adding a removed domain again brings
    /// its links back.
    Add {
        /// The domain name (IDNA names are stored in their ASCII form).
        name: String,
        /// Name the default domain (number 0) instead of declaring a new keyspace.
        #[arg(long)]
        default: bool,
        /// The scheme of its short URLs.
        #[arg(long, value_enum, default_value_t = Scheme::Https)]
        scheme: Scheme,
        /// Where `GET /` on it redirects (Shlink's base URL redirect).
        #[arg(long)]
        base_url: Option<String>,
        /// Where a path on it that cannot be a key redirects (Shlink's regular 404 redirect).
        #[arg(long)]
        regular_404: Option<String>,
        /// Where a key with no live link on it (unknown, deleted, expired) redirects (Shlink's
        /// invalid short URL redirect).
        #[arg(long)]
        invalid_short_url: Option<String>,
        /// What a path after a key does on it: not-found, append, ignore, or server (the
        /// server's --extra-path, the default).
        #[arg(long, value_name = "MODE", value_parser = parse_extra_path_setting)]
        extra_path: Option<ExtraPathSetting>,
        /// Whether a visitor's query is forwarded on it: true, false, or server (the
        /// server's --forward-query, the default). A link's own forward_query wins.
        #[arg(long, value_name = "WHETHER", value_parser = parse_forward_setting)]
        forward_query: Option<ForwardSetting>,
    },
    /// Change a declared domain's visit settings (the others stay).
    Set {
        /// The domain name.
        name: String,
        /// not-found, append, ignore, or server.
        #[arg(long, value_name = "MODE", value_parser = parse_extra_path_setting)]
        extra_path: Option<ExtraPathSetting>,
        /// true, false, or server.
        #[arg(long, value_name = "WHETHER", value_parser = parse_forward_setting)]
        forward_query: Option<ForwardSetting>,
    },
    /// List the declared domains, removed ones included.
    List,
    /// Remove a domain: its links stop redirecting but are kept (and exported); adding it
    /// again restores them.
    Remove {
        /// The domain name.
        name: String,
    },
}

/// `--extra-path` of `ricochet domains`: a mode, or `None` (`server`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraPathSetting(pub Option<crate::route::ExtraPath>);

/// `--forward-query` of `ricochet domains`: a choice, or `None` (`server`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardSetting(pub Option<bool>);

fn parse_extra_path_setting(s: &str) -> Result<ExtraPathSetting, String> {
    match s {
        "server" => Ok(ExtraPathSetting(None)),
        _ => crate::route::ExtraPath::parse(s)
            .map(|m| ExtraPathSetting(Some(m)))
            .ok_or_else(|| format!("{s:?}: one of not-found, append, ignore, server")),
    }
}

fn parse_forward_setting(s: &str) -> Result<ForwardSetting, String> {
    match s {
        "server" => Ok(ForwardSetting(None)),
        "true" => Ok(ForwardSetting(Some(true))),
        "false" => Ok(ForwardSetting(Some(false))),
        _ => Err(format!("{s:?}: one of true, false, server")),
    }
}

/// Where a domain book is kept and changed: a data dir's `domains.json` ([`DirBook`]), or in
/// fleet mode the fleet's table (`fleet_mode::domains::FleetBook`). The commands and the
/// rules of a change are the same for both.
pub trait BookStore {
    /// The book as it is now.
    fn load(&mut self) -> anyhow::Result<DomainBook>;
    /// Applies `change` to the book, serialized against other changes, and keeps the result.
    fn change(
        &mut self,
        change: &mut dyn FnMut(&mut DomainBook) -> Result<Domain, DomainBookError>,
    ) -> anyhow::Result<Domain>;
    /// The command that changes this book, for messages (`ricochet domains`).
    fn command(&self) -> &'static str;
}

/// A data dir's `domains.json`.
pub struct DirBook<'a>(pub &'a Path);

impl BookStore for DirBook<'_> {
    fn load(&mut self) -> anyhow::Result<DomainBook> {
        Ok(DomainBook::load(self.0)?)
    }

    fn change(
        &mut self,
        change: &mut dyn FnMut(&mut DomainBook) -> Result<Domain, DomainBookError>,
    ) -> anyhow::Result<Domain> {
        Ok(DomainBook::change(self.0, change)?)
    }

    fn command(&self) -> &'static str {
        "ricochet domains"
    }
}

/// Runs a `ricochet domains` subcommand against the book in `data_dir`, printing to stdout.
pub fn run_domains_command(data_dir: &Path, cmd: DomainsCommand) -> anyhow::Result<()> {
    run_book_command(&mut DirBook(data_dir), cmd)
}

/// Runs a domains subcommand against `store`, printing to stdout.
pub fn run_book_command(store: &mut dyn BookStore, cmd: DomainsCommand) -> anyhow::Result<()> {
    let stdout = io::stdout();
    run_domains_command_to(store, cmd, &mut stdout.lock())
}

fn run_domains_command_to(
    store: &mut dyn BookStore,
    cmd: DomainsCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match cmd {
        DomainsCommand::Add {
            name,
            default,
            scheme,
            base_url,
            regular_404,
            invalid_short_url,
            extra_path,
            forward_query,
        } => {
            let new = NewDomain {
                name,
                default,
                scheme,
                redirects: NotFoundRedirects {
                    base_url,
                    regular_404,
                    invalid_short_url,
                },
                visits: DomainVisits {
                    extra_path: extra_path.and_then(|s| s.0),
                    forward_query: forward_query.and_then(|s| s.0),
                },
            };
            let d = store.change(&mut |b| b.add(&new).cloned())?;
            let what = if d.is_default() {
                "the default domain".to_owned()
            } else {
                format!("domain number {}", d.number)
            };
            writeln!(out, "Declared {} as {what}.", d.name)?;
            writeln!(
                out,
                "A running server picks up the change within about a second."
            )?;
        }
        DomainsCommand::Set {
            name,
            extra_path,
            forward_query,
        } => {
            if extra_path.is_none() && forward_query.is_none() {
                anyhow::bail!("domains set {name}: give --extra-path or --forward-query");
            }
            let (e, f) = (extra_path.map(|s| s.0), forward_query.map(|s| s.0));
            let d = store.change(&mut |b| b.set_visits(&name, e, f).cloned())?;
            writeln!(out, "Changed {}: {}.", d.name, describe_visits(d.visits))?;
            writeln!(
                out,
                "A running server picks up the change within about a second."
            )?;
        }
        DomainsCommand::List => print_list(&store.load()?, out)?,
        DomainsCommand::Remove { name } => {
            let d = store.change(&mut |b| b.remove(&name).cloned())?;
            writeln!(
                out,
                "Removed {}: its links are kept and stop redirecting; `{} add {}` restores \
                 them.",
                d.name,
                store.command(),
                d.name
            )?;
        }
    }
    Ok(())
}

/// A domain's visit settings in words.
fn describe_visits(v: DomainVisits) -> String {
    let extra = v.extra_path.map_or("the server's", |m| m.as_str());
    let fwd = match v.forward_query {
        None => "the server's",
        Some(true) => "true",
        Some(false) => "false",
    };
    format!("extra path {extra}, forward query {fwd}")
}

fn print_list(book: &DomainBook, out: &mut dyn Write) -> anyhow::Result<()> {
    if book.is_empty() {
        writeln!(
            out,
            "No domains declared: every request is the default domain's."
        )?;
        return Ok(());
    }
    let w = book
        .all()
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0)
        .max("NAME".len());
    writeln!(
        out,
        "{:>6}  {:<w$}  {:<6}  STATUS",
        "NUMBER", "NAME", "SCHEME"
    )?;
    for d in book.all() {
        let mut status = match (&d.removed_at, d.is_default()) {
            (Some(t), _) => format!("removed {t}"),
            (None, true) => "default".to_owned(),
            (None, false) => "active".to_owned(),
        };
        if d.visits != DomainVisits::default() {
            status.push_str(&format!(" ({})", describe_visits(d.visits)));
        }
        writeln!(
            out,
            "{:>6}  {:<w$}  {:<6}  {status}",
            d.number,
            d.name,
            d.scheme.as_str()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(b: &mut DomainBook, name: &str) -> Result<u32, DomainBookError> {
        b.add(&NewDomain {
            name: name.into(),
            ..NewDomain::default()
        })
        .map(|d| d.number)
    }

    #[test]
    fn numbers_are_never_reused_and_a_removed_domain_comes_back_with_its_own() {
        let mut b = DomainBook::default();
        assert_eq!(add(&mut b, "go.brand.com").unwrap(), 1);
        assert_eq!(add(&mut b, "Sho.RT").unwrap(), 2);
        assert!(matches!(
            add(&mut b, "sho.rt."),
            Err(DomainBookError::AlreadyDeclared(n)) if n == "sho.rt"
        ));
        b.remove("go.brand.com").unwrap();
        assert!(matches!(
            b.remove("go.brand.com"),
            Err(DomainBookError::Unknown(_))
        ));
        assert_eq!(add(&mut b, "third.example").unwrap(), 3);
        assert_eq!(add(&mut b, "GO.brand.com").unwrap(), 1, "its number again");
        let v = b.view(UnknownHost::Default);
        assert_eq!(v.domain_of(Some(b"go.brand.com:8080")), Some(1));
        assert_eq!(v.domain_of(Some(b"SHO.rt")), Some(2));
        assert_eq!(v.domain_of(Some(b"other.example")), Some(DEFAULT_DOMAIN));
        assert_eq!(v.domain_of(None), Some(DEFAULT_DOMAIN));
        let strict = b.view(UnknownHost::NotFound);
        assert_eq!(strict.domain_of(Some(b"other.example")), None);
        assert_eq!(strict.get(3).unwrap().name, "third.example");
    }

    proptest::proptest! {
        /// The memo answers as the table does, whatever order hosts come in.
        #[test]
        fn the_memo_answers_as_the_lookup(
            asks in proptest::collection::vec((0usize..6, proptest::bool::ANY), 1..40),
            strict in proptest::bool::ANY,
        ) {
            let mut b = DomainBook::default();
            add(&mut b, "go.brand.com").unwrap();
            add(&mut b, "sho.rt").unwrap();
            let unknown = if strict { UnknownHost::NotFound } else { UnknownHost::Default };
            let v = b.view(unknown);
            let long = format!("{}.example", "a".repeat(70));
            let hosts = ["go.brand.com", "GO.brand.com:80", "sho.rt", "other.example", "", long.as_str()];
            let mut memo = HostMemo::default();
            for (i, none) in asks {
                let host = (!none).then_some(hosts[i].as_bytes());
                proptest::prop_assert_eq!(memo.domain_of(&v, host), v.domain_of(host));
            }
        }
    }

    #[test]
    fn the_default_domain_is_number_0_renamed_not_moved() {
        let mut b = DomainBook::default();
        let d = b
            .add(&NewDomain {
                name: "sho.rt".into(),
                default: true,
                ..NewDomain::default()
            })
            .unwrap();
        assert_eq!(d.number, 0);
        assert_eq!(add(&mut b, "go.brand.com").unwrap(), 1);
        let rename = NewDomain {
            name: "s.example".into(),
            default: true,
            ..NewDomain::default()
        };
        assert_eq!(b.add(&rename).unwrap().number, 0);
        assert!(b.find("sho.rt").is_none());
        let taken = NewDomain {
            name: "go.brand.com".into(),
            default: true,
            ..NewDomain::default()
        };
        assert!(matches!(
            b.add(&taken),
            Err(DomainBookError::DefaultTaken(_))
        ));
        assert!(matches!(
            b.remove("s.example"),
            Err(DomainBookError::RemoveDefault(_))
        ));
        let v = b.view(UnknownHost::NotFound);
        assert_eq!(v.domain_of(Some(b"s.example")), Some(0));
        assert_eq!(v.by_name("GO.brand.com").unwrap().number, 1);
    }

    #[test]
    fn bad_names_and_redirects_are_refused_with_the_reason() {
        let mut b = DomainBook::default();
        assert!(matches!(
            add(&mut b, "127.0.0.1"),
            Err(DomainBookError::Name(_))
        ));
        let e = b
            .add(&NewDomain {
                name: "sho.rt".into(),
                redirects: NotFoundRedirects {
                    regular_404: Some("ftp://x".into()),
                    ..Default::default()
                },
                ..NewDomain::default()
            })
            .unwrap_err();
        assert!(e.to_string().contains("--regular-404"), "{e}");
        assert!(b.is_empty(), "a refused change changes nothing");
    }

    #[test]
    fn the_book_survives_its_file_and_a_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DomainBook::load(dir.path()).unwrap(), DomainBook::default());
        DomainBook::change(dir.path(), |b| add(b, "go.brand.com")).unwrap();
        DomainBook::change(dir.path(), |b| add(b, "sho.rt")).unwrap();
        DomainBook::change(dir.path(), |b| b.remove("sho.rt").map(|_| ())).unwrap();
        let b = DomainBook::load(dir.path()).unwrap();
        assert_eq!(b.all().len(), 2);
        assert!(b.find("sho.rt").unwrap().is_removed());
        assert_eq!(b.live().count(), 1);
        let path = dir.path().join(DOMAINS_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"number\": 2", "\"number\": 1")).unwrap();
        let e = DomainBook::load(dir.path()).unwrap_err();
        assert!(e.to_string().contains("domains.json"), "{e}");
        std::fs::write(&path, b"{").unwrap();
        assert!(matches!(
            DomainBook::load(dir.path()),
            Err(DomainBookError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_edit_changes_the_redirects_it_names_only() {
        let mut b = DomainBook::default();
        b.add(&NewDomain {
            name: "go.brand.com".into(),
            redirects: NotFoundRedirects {
                base_url: Some("https://brand.example/".into()),
                regular_404: Some("https://brand.example/404".into()),
                invalid_short_url: None,
            },
            ..NewDomain::default()
        })
        .unwrap();
        let d = b
            .set_redirects(&RedirectsEdit {
                domain: "GO.brand.com".into(),
                base_url: Some(None),
                invalid_short_url: Some(Some("https://brand.example/gone".into())),
                ..RedirectsEdit::default()
            })
            .unwrap();
        assert_eq!(
            d.redirects,
            NotFoundRedirects {
                base_url: None,
                regular_404: Some("https://brand.example/404".into()),
                invalid_short_url: Some("https://brand.example/gone".into()),
            }
        );
        let bad = RedirectsEdit {
            domain: "go.brand.com".into(),
            base_url: Some(Some("ftp://x".into())),
            ..RedirectsEdit::default()
        };
        assert!(matches!(
            b.set_redirects(&bad),
            Err(DomainBookError::BadRedirect { .. })
        ));
        assert_eq!(
            b.all()[0].redirects.regular_404.as_deref(),
            Some("https://brand.example/404")
        );
        let unknown = RedirectsEdit {
            domain: "nope.example".into(),
            ..RedirectsEdit::default()
        };
        assert!(matches!(
            b.set_redirects(&unknown),
            Err(DomainBookError::Unknown(n)) if n == "nope.example"
        ));
        b.remove("go.brand.com").unwrap();
        let again = RedirectsEdit {
            domain: "go.brand.com".into(),
            ..RedirectsEdit::default()
        };
        assert!(matches!(
            b.set_redirects(&again),
            Err(DomainBookError::Unknown(_))
        ));
    }

    #[test]
    fn the_cli_declares_lists_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let run = |cmd| {
            let mut out = Vec::new();
            run_domains_command_to(&mut DirBook(dir.path()), cmd, &mut out)
                .map(|()| String::from_utf8(out).unwrap())
        };
        assert!(run(DomainsCommand::List)
            .unwrap()
            .contains("No domains declared"));
        let o = run(DomainsCommand::Add {
            name: "Bücher.example".into(),
            default: false,
            scheme: Scheme::Http,
            base_url: None,
            regular_404: Some("https://brand.example/".into()),
            invalid_short_url: None,
            extra_path: Some(ExtraPathSetting(Some(crate::route::ExtraPath::Ignore))),
            forward_query: None,
        })
        .unwrap();
        assert!(
            o.contains("xn--bcher-kva.example as domain number 1"),
            "{o}"
        );
        let o = run(DomainsCommand::Set {
            name: "bücher.example".into(),
            extra_path: None,
            forward_query: Some(parse_forward_setting("true").unwrap()),
        })
        .unwrap();
        assert!(o.contains("extra path ignore, forward query true"), "{o}");
        let o = run(DomainsCommand::Set {
            name: "xn--bcher-kva.example".into(),
            extra_path: Some(parse_extra_path_setting("server").unwrap()),
            forward_query: None,
        })
        .unwrap();
        assert!(
            o.contains("extra path the server's, forward query true"),
            "{o}"
        );
        assert!(run(DomainsCommand::List)
            .unwrap()
            .contains("active (extra path the server's, forward query true)"));
        assert!(parse_extra_path_setting("sideways").is_err());
        assert!(parse_forward_setting("yes").is_err());
        let e = run(DomainsCommand::Set {
            name: "xn--bcher-kva.example".into(),
            extra_path: None,
            forward_query: None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("give --extra-path"), "{e}");
        let o = run(DomainsCommand::Remove {
            name: "xn--bcher-kva.example".into(),
        })
        .unwrap();
        assert!(o.contains("restores them"), "{o}");
        let o = run(DomainsCommand::List).unwrap();
        assert!(o.contains("removed 20"), "{o}");
        let e = run(DomainsCommand::Remove {
            name: "nope.example".into(),
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "nope.example is not a declared domain");
    }
}
