//! A link's redirect rules (issue 27; Shlink 4's model): an ordered list of rules, each a set
//! of conditions that must all match and a target. A visit goes to the first matching rule's
//! target, else to the link's own. Most links have none.
//!
//! The rules are kept, carried and evaluated in one byte form, the *program*, so that the
//! redirect path reads them where they lie (a table's mapping, or one shared buffer) and
//! evaluates them without allocating:
//!
//! ```text
//! program   := count:u8 rule{count}                      count in 1..=MAX_RULES_PER_LINK
//! rule      := target_len:u16 LE  target  n:u8 cond{n}   n in 1..=MAX_CONDITIONS_PER_RULE
//! cond      := kind:u8 payload
//!   1 device        device:u8                            (Device's number)
//!   2 language      len:u8 lang                          lowercase `ll` or `ll-rr`
//!   3 query equals  klen:u8 key  vlen:u16 LE value       decoded bytes
//!   4 query present klen:u8 key                          with any value, or none
//!   5 query no value klen:u8 key                         `?key` or `?key=`
//!   6 ip            addr:16 prefix:u8                    IPv6 or v4-mapped; prefix on 128 bits
//!   7 country       code:2                               ISO 3166 alpha-2, uppercase
//!   8 before date   secs:u64 LE                          now < secs
//!   9 after date    secs:u64 LE                          now > secs
//! ```
//!
//! Records carry a program as a block after the behaviour block (`RULES_FLAG`): `len:u16 LE`
//! then the program. Only the canonical form decodes ([`RuleSet::parse`]): whatever parses
//! re-encodes ([`encode`]) to the same bytes.

use std::net::IpAddr;
use std::sync::Arc;

/// The `flags` bit (tables and logs) saying a rules block follows the behaviour block (if
/// any). Set and cleared by the encoders; never set in memory.
pub const RULES_FLAG: u32 = 1 << 26;

/// Rules one link may have (Shlink sets none; a bound keeps a visit's evaluation short).
pub const MAX_RULES_PER_LINK: usize = 16;
/// Conditions one rule may have.
pub const MAX_CONDITIONS_PER_RULE: usize = 8;
/// Bytes of a whole program (targets included): one 16 KiB bound on what a visit may walk.
pub const MAX_RULES_BYTES: usize = 16 * 1024;
/// Bytes of a condition's language tag (`ll-rr`; RFC 5646's longest useful form).
pub const MAX_LANGUAGE_BYTES: usize = 35;
/// Bytes of a query parameter's name.
pub const MAX_QUERY_KEY_BYTES: usize = 255;
/// Bytes of a query parameter's value.
pub const MAX_QUERY_VALUE_BYTES: usize = 1024;
/// Bytes of a rule's target (a link target's bound).
pub const MAX_RULE_TARGET_BYTES: usize = crate::link::MAX_URL_BYTES;
/// The least quality (in thousandths) an `Accept-Language` range needs to count, as
/// Shlink's language condition: `en;q=0.8` is a fallback the visitor tolerates, not asks for.
pub const LANGUAGE_MIN_QUALITY: u16 = 900;

/// The latest date a condition may name: 9999-12-31T23:59:59Z, the last RFC 3339 writes.
pub const MAX_DATE_S: u64 = 253_402_300_799;

const _: () = assert!(MAX_RULES_BYTES + 2 <= u16::MAX as usize);

/// A device class, as Shlink names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Device {
    Android = 1,
    Ios = 2,
    Mobile = 3,
    Windows = 4,
    Macos = 5,
    Linux = 6,
    Chromeos = 7,
    Desktop = 8,
}

impl Device {
    const ALL: [Device; 8] = [
        Device::Android,
        Device::Ios,
        Device::Mobile,
        Device::Windows,
        Device::Macos,
        Device::Linux,
        Device::Chromeos,
        Device::Desktop,
    ];

    /// Its name in the APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Android => "android",
            Device::Ios => "ios",
            Device::Mobile => "mobile",
            Device::Windows => "windows",
            Device::Macos => "macos",
            Device::Linux => "linux",
            Device::Chromeos => "chromeos",
            Device::Desktop => "desktop",
        }
    }

    /// From its name (case-insensitive).
    pub fn parse(s: &str) -> Option<Device> {
        Device::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s))
    }

    fn from_byte(b: u8) -> Option<Device> {
        Device::ALL.into_iter().find(|d| *d as u8 == b)
    }

    fn bit(self) -> u16 {
        1 << (self as u8)
    }
}

/// One condition of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The visitor's `User-Agent` is of this class ([`device_classes`]).
    Device(Device),
    /// `Accept-Language` asks for this language (`ll`, any region) or locale (`ll-rr`) with a
    /// quality of at least [`LANGUAGE_MIN_QUALITY`]. Lowercase.
    Language(String),
    /// The query has `key` with exactly `value` (the last one, if repeated; both compared
    /// percent-decoded).
    QueryEquals { key: String, value: String },
    /// The query has `key`, with any value or none.
    QueryPresent(String),
    /// The query has `key` without a value (`?key` or `?key=`).
    QueryValueless(String),
    /// The client's address is in this network (IPv4 as v4-mapped IPv6, prefix on 128 bits).
    Ip { addr: [u8; 16], prefix: u8 },
    /// The client's country (the operator's `--geoip` database), ISO 3166 alpha-2.
    Country([u8; 2]),
    /// The visit happens before this Unix second.
    Before(u64),
    /// The visit happens after this Unix second.
    After(u64),
}

/// One rule: all of `conditions` match, and the visit goes to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub target: String,
    pub conditions: Vec<Condition>,
}

/// Why rules cannot be kept: the field it names and why (the API's 422).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesError(pub String);

impl std::fmt::Display for RulesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, RulesError> {
    Err(RulesError(msg.into()))
}

/// The program of `rules` (empty for none), or the first limit it breaks.
pub fn encode(rules: &[Rule]) -> Result<Vec<u8>, RulesError> {
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    if rules.len() > MAX_RULES_PER_LINK {
        return err(format!(
            "redirect_rules: {} rules, at most {MAX_RULES_PER_LINK}",
            rules.len()
        ));
    }
    let mut out = vec![rules.len() as u8];
    for (i, r) in rules.iter().enumerate() {
        encode_rule(&mut out, i, r)?;
    }
    if out.len() > MAX_RULES_BYTES {
        return err(format!(
            "redirect_rules: {} bytes, at most {MAX_RULES_BYTES}",
            out.len()
        ));
    }
    Ok(out)
}

fn encode_rule(out: &mut Vec<u8>, i: usize, r: &Rule) -> Result<(), RulesError> {
    if r.target.is_empty() || r.target.len() > MAX_RULE_TARGET_BYTES {
        return err(format!(
            "redirect_rules[{i}].target: 1 to {MAX_RULE_TARGET_BYTES} bytes"
        ));
    }
    if let Err(e) = crate::link::check_storable_url(&r.target) {
        return err(format!("redirect_rules[{i}].target: {e}"));
    }
    if r.conditions.is_empty() || r.conditions.len() > MAX_CONDITIONS_PER_RULE {
        return err(format!(
            "redirect_rules[{i}].conditions: 1 to {MAX_CONDITIONS_PER_RULE} conditions"
        ));
    }
    out.extend_from_slice(&(r.target.len() as u16).to_le_bytes());
    out.extend_from_slice(r.target.as_bytes());
    out.push(r.conditions.len() as u8);
    for (j, c) in r.conditions.iter().enumerate() {
        encode_condition(out, c)
            .map_err(|e| RulesError(format!("redirect_rules[{i}].conditions[{j}]: {e}")))?;
    }
    Ok(())
}

fn encode_condition(out: &mut Vec<u8>, c: &Condition) -> Result<(), String> {
    let key = |out: &mut Vec<u8>, k: &str| {
        if k.is_empty() || k.len() > MAX_QUERY_KEY_BYTES {
            return Err(format!(
                "a query parameter name of 1 to {MAX_QUERY_KEY_BYTES} bytes"
            ));
        }
        out.push(k.len() as u8);
        out.extend_from_slice(k.as_bytes());
        Ok(())
    };
    match c {
        Condition::Device(d) => out.extend_from_slice(&[1, *d as u8]),
        Condition::Language(l) => {
            if !valid_language(l.as_bytes()) {
                return Err(format!("{l:?} is not a language tag (`es` or `es-ES`)"));
            }
            out.extend_from_slice(&[2, l.len() as u8]);
            out.extend_from_slice(l.as_bytes());
        }
        Condition::QueryEquals { key: k, value } => {
            out.push(3);
            key(out, k)?;
            if value.len() > MAX_QUERY_VALUE_BYTES {
                return Err(format!("a value of at most {MAX_QUERY_VALUE_BYTES} bytes"));
            }
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        Condition::QueryPresent(k) => {
            out.push(4);
            key(out, k)?;
        }
        Condition::QueryValueless(k) => {
            out.push(5);
            key(out, k)?;
        }
        Condition::Ip { addr, prefix } => {
            if *prefix > 128 || masked(addr, *prefix) != *addr {
                return Err("a network whose address has no bits past its prefix".into());
            }
            out.push(6);
            out.extend_from_slice(addr);
            out.push(*prefix);
        }
        Condition::Country(code) => {
            if !code.iter().all(u8::is_ascii_uppercase) {
                return Err("a country code of two uppercase letters".into());
            }
            out.push(7);
            out.extend_from_slice(code);
        }
        Condition::Before(s) | Condition::After(s) if *s > MAX_DATE_S => {
            return Err("a date after 9999-12-31T23:59:59Z".into());
        }
        Condition::Before(s) => {
            out.push(8);
            out.extend_from_slice(&s.to_le_bytes());
        }
        Condition::After(s) => {
            out.push(9);
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
    Ok(())
}

/// `ll` or `ll-rr`... : lowercase ASCII letters and digits in `-`-separated subtags of 1 to 8,
/// the first of 2 to 8 letters.
fn valid_language(l: &[u8]) -> bool {
    if l.is_empty() || l.len() > MAX_LANGUAGE_BYTES {
        return false;
    }
    l.split(|b| *b == b'-').enumerate().all(|(i, sub)| {
        let ok_len = if i == 0 { 2..=8 } else { 1..=8 };
        ok_len.contains(&sub.len())
            && sub
                .iter()
                .all(|b| b.is_ascii_lowercase() || (i > 0 && b.is_ascii_digit()))
    })
}

/// `addr` with the bits past `prefix` cleared.
fn masked(addr: &[u8; 16], prefix: u8) -> [u8; 16] {
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
fn in_network(ip: &[u8; 16], net: &[u8], prefix: u8) -> bool {
    let Ok(net) = <[u8; 16]>::try_from(net) else {
        return false;
    };
    u128::from_be_bytes(*ip) & prefix_mask(prefix) == u128::from_be_bytes(net)
}

/// An address as rules keep it (16 bytes) as a `std::net` address: IPv4 if v4-mapped.
pub fn ip_addr(ip: &[u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(*ip);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// An address as rules compare it: IPv6, IPv4 as v4-mapped.
pub fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Parses an address condition: an address, a CIDR network (`10.0.0.0/8`, `2001:db8::/32`),
/// or Shlink's trailing wildcards (`192.168.*.*`). The network's address must have no bits
/// past its prefix.
pub fn parse_ip_condition(s: &str) -> Result<Condition, String> {
    let bad = || format!("{s:?} is not an IP address, a CIDR network or a 1.2.*.* pattern");
    if s.contains('*') {
        let parts: Vec<&str> = s.split('.').collect();
        let stars = parts.iter().rev().take_while(|p| **p == "*").count();
        if parts.len() != 4 || stars == 0 || parts[..4 - stars].contains(&"*") {
            return Err(bad());
        }
        let mut octets = [0u8; 4];
        for (o, p) in octets.iter_mut().zip(&parts[..4 - stars]) {
            *o = p.parse().map_err(|_| bad())?;
        }
        let addr = ip16(IpAddr::from(octets));
        return Ok(Condition::Ip {
            addr,
            prefix: 96 + 8 * (4 - stars as u8),
        });
    }
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    let (width, offset) = match ip {
        IpAddr::V4(_) => (32u8, 96u8),
        IpAddr::V6(_) => (128, 0),
    };
    let prefix = match prefix {
        None => width,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= width)
            .ok_or_else(bad)?,
    };
    let addr = ip16(ip);
    let prefix = prefix + offset;
    if masked(&addr, prefix) != addr {
        return Err(format!("{s:?} has address bits past its prefix"));
    }
    Ok(Condition::Ip { addr, prefix })
}

/// An address condition as the APIs write it back.
pub fn format_ip_condition(addr: &[u8; 16], prefix: u8) -> String {
    let v6 = std::net::Ipv6Addr::from(*addr);
    match (v6.to_ipv4_mapped(), prefix >= 96) {
        (Some(v4), true) if prefix == 128 => v4.to_string(),
        (Some(v4), true) => format!("{v4}/{}", prefix - 96),
        _ if prefix == 128 => v6.to_string(),
        _ => format!("{v6}/{prefix}"),
    }
}

/// What rules look at in a visit. Borrowed from the request (or what its core kept of it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Visitor<'a> {
    pub user_agent: &'a [u8],
    pub accept_language: &'a [u8],
    /// The query after `?`, raw.
    pub query: &'a [u8],
    /// The client's address (IPv6 or v4-mapped), from the server's client-IP source.
    pub ip: [u8; 16],
    pub now_s: u64,
}

/// A rule that matched: its place in the list (0-based) and its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match<'a> {
    pub index: u8,
    pub target: &'a [u8],
}

/// A validated program, borrowed where it lies. Empty: no rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuleSet<'a>(&'a [u8]);

impl<'a> RuleSet<'a> {
    /// No rules.
    pub const EMPTY: RuleSet<'static> = RuleSet(&[]);

    /// Checks that `b` is a program in its canonical form (or empty). Total: any bytes give
    /// a set or an error, never a panic.
    pub fn parse(b: &'a [u8]) -> Result<RuleSet<'a>, String> {
        if b.is_empty() {
            return Ok(RuleSet(b));
        }
        let rules = RuleSet(b).decode()?;
        match encode(&rules) {
            Ok(again) if again == b => Ok(RuleSet(b)),
            Ok(_) => Err("rules: not in canonical form".into()),
            Err(e) => Err(e.0),
        }
    }

    /// A program this build wrote, not checked again (the redirect path's reads of
    /// tables and logs already parsed it). Malformed bytes evaluate to no match, never a
    /// panic.
    pub fn trusted(b: &'a [u8]) -> RuleSet<'a> {
        RuleSet(b)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The rules, for the APIs and exports.
    pub fn decode(&self) -> Result<Vec<Rule>, String> {
        let mut r = Cursor(Walk { b: self.0, at: 0 });
        if self.0.is_empty() {
            return Ok(Vec::new());
        }
        let count = r.u8()?;
        let mut rules = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let tlen = usize::from(r.u16()?);
            let target = std::str::from_utf8(r.take(tlen)?)
                .map_err(|_| "rules: a target is not UTF-8")?
                .to_string();
            let n = r.u8()?;
            let mut conditions = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                conditions.push(decode_condition(&mut r)?);
            }
            rules.push(Rule { target, conditions });
        }
        if r.0.at != self.0.len() {
            return Err("rules: trailing bytes".into());
        }
        Ok(rules)
    }

    /// The first rule `v` matches, if any. Walks the program in place: no allocation.
    /// `country` is asked (at most once) only if a country condition is reached.
    #[inline]
    pub fn first_match(
        &self,
        v: &Visitor<'_>,
        country: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
    ) -> Option<Match<'a>> {
        if self.0.is_empty() {
            return None;
        }
        let mut facts = Facts {
            v,
            devices: None,
            params: None,
            country: None,
            ask_country: country,
        };
        let mut r = Walk { b: self.0, at: 0 };
        let count = r.u8()?;
        for index in 0..count {
            let tlen = usize::from(r.u16()?);
            let target = r.take(tlen)?;
            let n = r.u8()?;
            let mut all = true;
            for _ in 0..n {
                // Every condition is read (to reach the next rule); those after a failed
                // one are not evaluated.
                all = facts.next_holds(&mut r, all)?;
            }
            if all {
                return Some(Match { index, target });
            }
        }
        None
    }
}

/// What a visit's evaluation learned so far (device classes, the query's parameters and the
/// country are worked out at most once, and only if a condition asks).
struct Facts<'v, 'c> {
    v: &'v Visitor<'v>,
    devices: Option<u16>,
    params: Option<Params<'v>>,
    country: Option<Option<[u8; 2]>>,
    ask_country: &'c mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
}

impl<'v> Facts<'v, '_> {
    /// Reads the next condition and, if `evaluate`, whether the visit meets it (else
    /// `false`); `None` for malformed bytes. Read and judged in one step: a condition is never
    /// built as a value (a decoded enum written and read back cost a store-forwarding stall
    /// per condition).
    #[inline(always)]
    fn next_holds(&mut self, r: &mut Walk<'_>, evaluate: bool) -> Option<bool> {
        let kind = r.u8()?;
        Some(match kind {
            1 => {
                let d = r.u8()?;
                evaluate && self.device(d)
            }
            2 => {
                let lang = r.short_bytes()?;
                evaluate && accepts_language(self.v.accept_language, lang)
            }
            3 => {
                let key = r.short_bytes()?;
                let n = usize::from(r.u16()?);
                let want = r.take(n)?;
                evaluate && matches!(self.param(key), Some(Some(got)) if decoded_eq(got, want))
            }
            4 => {
                let key = r.short_bytes()?;
                evaluate && self.param(key).is_some()
            }
            5 => {
                let key = r.short_bytes()?;
                evaluate && matches!(self.param(key), Some(None) | Some(Some(b"")))
            }
            6 => {
                let net = r.take(16)?;
                let prefix = r.u8()?;
                evaluate && in_network(&self.v.ip, net, prefix)
            }
            7 => {
                let code = r.take(2)?;
                evaluate && self.country().is_some_and(|c| c.eq_ignore_ascii_case(code))
            }
            8 => {
                let s = r.u64()?;
                evaluate && self.v.now_s < s
            }
            9 => {
                let s = r.u64()?;
                evaluate && self.v.now_s > s
            }
            _ => return None,
        })
    }

    fn device(&mut self, d: u8) -> bool {
        let ua = self.v.user_agent;
        let classes = *self.devices.get_or_insert_with(|| device_classes(ua));
        Device::from_byte(d).is_some_and(|d| classes & d.bit() != 0)
    }

    fn country(&mut self) -> Option<[u8; 2]> {
        let ip = self.v.ip;
        let ask = &mut self.ask_country;
        *self.country.get_or_insert_with(|| ask(&ip))
    }

    /// The last value of parameter `key` in the visit's query (see [`last_param`]).
    fn param(&mut self, key: &[u8]) -> Option<Option<&'v [u8]>> {
        let q = self.v.query;
        self.params
            .get_or_insert_with(|| Params::split(q))
            .last(key)
    }
}

/// Query parameters a visit's evaluation splits once; a query with more is searched each
/// time instead (correct, only slower).
const MAX_PARAMS_SPLIT: usize = 16;

/// A query split into its parameters: per parameter, where its name starts, where its `=`
/// is (or its end, without one), and where it ends. Offsets fit `u16`: a query is part of a
/// request line.
struct Params<'q> {
    raw: &'q [u8],
    pairs: [(u16, u16, u16); MAX_PARAMS_SPLIT],
    n: usize,
    overflow: bool,
}

impl<'q> Params<'q> {
    /// One pass over the `&`s and `=`s ([`each_of`]): a `memchr` per separator cost more in
    /// calls, and a byte loop in mispredicted branches, than the split's work.
    fn split(raw: &'q [u8]) -> Params<'q> {
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

    fn last(&self, key: &[u8]) -> Option<Option<&'q [u8]>> {
        if self.overflow {
            return last_param(self.raw, key);
        }
        self.pairs[..self.n].iter().rev().find_map(|&(s, eq, e)| {
            let (s, eq, e) = (usize::from(s), usize::from(eq), usize::from(e));
            decoded_eq(&self.raw[s..eq], key).then(|| (eq < e).then(|| &self.raw[eq + 1..e]))
        })
    }
}

fn decode_condition(r: &mut Cursor<'_>) -> Result<Condition, String> {
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "rules: text is not UTF-8".to_string())
    };
    let kind = r.u8()?;
    Ok(match kind {
        1 => {
            let d = r.u8()?;
            Condition::Device(Device::from_byte(d).ok_or(format!("rules: device {d}"))?)
        }
        2 => {
            let n = usize::from(r.u8()?);
            Condition::Language(text(r.take(n)?)?)
        }
        3 => {
            let k = usize::from(r.u8()?);
            let key = text(r.take(k)?)?;
            let n = usize::from(r.u16()?);
            let value = text(r.take(n)?)?;
            Condition::QueryEquals { key, value }
        }
        4 => {
            let k = usize::from(r.u8()?);
            Condition::QueryPresent(text(r.take(k)?)?)
        }
        5 => {
            let k = usize::from(r.u8()?);
            Condition::QueryValueless(text(r.take(k)?)?)
        }
        6 => {
            let addr: [u8; 16] = r.take(16)?.try_into().map_err(|_| "short address")?;
            Condition::Ip {
                addr,
                prefix: r.u8()?,
            }
        }
        7 => Condition::Country(r.take(2)?.try_into().map_err(|_| "short country")?),
        8 => Condition::Before(r.u64()?),
        9 => Condition::After(r.u64()?),
        k => return Err(format!("rules: condition kind {k}")),
    })
}

/// A program's reader on the redirect path: `None` where the bytes end too soon.
struct Walk<'p> {
    b: &'p [u8],
    at: usize,
}

impl<'p> Walk<'p> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&'p [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    #[inline(always)]
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    #[inline(always)]
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    #[inline(always)]
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// `len:u8` then that many bytes.
    #[inline(always)]
    fn short_bytes(&mut self) -> Option<&'p [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
}

/// The decoder's reader: a [`Walk`] whose short reads are errors.
struct Cursor<'p>(Walk<'p>);

const SHORT: &str = "rules: short program";

impl<'p> Cursor<'p> {
    fn take(&mut self, n: usize) -> Result<&'p [u8], String> {
        self.0.take(n).ok_or_else(|| SHORT.to_string())
    }
    fn u8(&mut self) -> Result<u8, String> {
        self.0.u8().ok_or_else(|| SHORT.to_string())
    }
    fn u16(&mut self) -> Result<u16, String> {
        self.0.u16().ok_or_else(|| SHORT.to_string())
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.0.u64().ok_or_else(|| SHORT.to_string())
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
    // By hand, one item at a time, the quality read only for a range that names the language:
    // the iterator chain this replaced took about 25 ns for a match in the first item.
    let mut rest = header;
    while !rest.is_empty() {
        let end = rest.iter().position(|b| *b == b',').unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        let semi = item.iter().position(|b| *b == b';').unwrap_or(item.len());
        let (l, region) = split_tag(item[..semi].trim_ascii());
        if !l.eq_ignore_ascii_case(want_lang)
            || !(want_region.is_empty() || region.eq_ignore_ascii_case(want_region))
        {
            continue;
        }
        let q = item[semi..]
            .split(|b| *b == b';')
            .find_map(|p| p.trim_ascii().strip_prefix(b"q=").map(quality))
            .unwrap_or(Some(1000));
        if q.is_some_and(|q| q >= LANGUAGE_MIN_QUALITY) {
            return true;
        }
    }
    false
}

fn split_tag(t: &[u8]) -> (&[u8], &[u8]) {
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
fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
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

/// A link's rules as memory holds them: a shared, validated program (empty: none). Cloning
/// shares it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rules(Option<Arc<Vec<u8>>>);

impl Rules {
    /// No rules.
    pub const NONE: Rules = Rules(None);

    /// Rules from a validated program.
    pub fn new(set: RuleSet<'_>) -> Rules {
        match set.is_empty() {
            true => Rules::NONE,
            false => Rules(Some(Arc::new(set.bytes().to_vec()))),
        }
    }

    /// Rules from a list (validated and encoded).
    pub fn from_rules(rules: &[Rule]) -> Result<Rules, RulesError> {
        let program = encode(rules)?;
        Ok(Rules::new(RuleSet::trusted(&program)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The program, borrowed.
    pub fn set(&self) -> RuleSet<'_> {
        RuleSet(self.0.as_deref().map_or(&[][..], Vec::as_slice))
    }

    /// The shared program, if any (answers carry it to other cores: a thin pointer).
    pub fn shared(&self) -> Option<&Arc<Vec<u8>>> {
        self.0.as_ref()
    }

    /// The flags bit a record with these rules carries ([`RULES_FLAG`] or 0).
    pub fn flag(&self) -> u32 {
        block_flag(self.set())
    }
}

/// The flags bit a record with `set` carries.
pub fn block_flag(set: RuleSet<'_>) -> u32 {
    if set.is_empty() {
        0
    } else {
        RULES_FLAG
    }
}

/// Bytes the rules block of `set` takes in a record (0 for none).
pub fn block_len(set: RuleSet<'_>) -> usize {
    if set.is_empty() {
        0
    } else {
        2 + set.bytes().len()
    }
}

/// Appends the rules block of `set` (nothing for none).
pub fn encode_block(set: RuleSet<'_>, out: &mut Vec<u8>) {
    if set.is_empty() {
        return;
    }
    out.extend_from_slice(&(set.bytes().len() as u16).to_le_bytes());
    out.extend_from_slice(set.bytes());
}

/// A rules block at the start of `b` as a table read on the redirect path takes it: bounds
/// checked, the program not parsed (it was when the table was written, its CRC vouches for
/// it, and evaluating malformed bytes is total: no match, never a panic). No allocation.
#[inline]
pub fn block_in_table(b: &[u8]) -> Option<(RuleSet<'_>, usize)> {
    let len = usize::from(u16::from_le_bytes([*b.first()?, *b.get(1)?]));
    let program = b.get(2..2 + len).filter(|p| !p.is_empty())?;
    Some((RuleSet::trusted(program), 2 + len))
}

/// Reads a rules block at the start of `b`: the program and the bytes the block took.
pub fn decode_block(b: &[u8]) -> Result<(RuleSet<'_>, usize), String> {
    let len = b
        .get(..2)
        .map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
        .ok_or("short rules block")?;
    let program = b.get(2..2 + len).ok_or("short rules block")?;
    if program.is_empty() {
        return Err("rules: an empty block".into());
    }
    Ok((RuleSet::parse(program)?, 2 + len))
}

/// The rules as NDJSON and the native API write them: `[{"target", "conditions": [{"type",
/// "key"?, "value"}]}]`, condition types named as Shlink names them.
pub fn to_json(rules: &[Rule]) -> serde_json::Value {
    use serde_json::{json, Value};
    let cond = |c: &Condition| -> Value {
        let (t, key, value): (&str, Option<&str>, String) = match c {
            Condition::Device(d) => ("device", None, d.as_str().into()),
            Condition::Language(l) => ("language", None, l.clone()),
            Condition::QueryEquals { key, value } => ("query-param", Some(key), value.clone()),
            Condition::QueryPresent(k) => ("any-value-query-param", Some(k), String::new()),
            Condition::QueryValueless(k) => ("valueless-query-param", Some(k), String::new()),
            Condition::Ip { addr, prefix } => {
                ("ip-address", None, format_ip_condition(addr, *prefix))
            }
            Condition::Country(c) => (
                "geolocation-country-code",
                None,
                String::from_utf8_lossy(c).into_owned(),
            ),
            Condition::Before(s) => ("before-date", None, crate::timefmt::format_rfc3339_utc(*s)),
            Condition::After(s) => ("after-date", None, crate::timefmt::format_rfc3339_utc(*s)),
        };
        match key {
            Some(k) => json!({"type": t, "key": k, "value": value}),
            None => json!({"type": t, "value": value}),
        }
    };
    Value::Array(
        rules
            .iter()
            .map(|r| json!({"target": r.target, "conditions": r.conditions.iter().map(cond).collect::<Vec<_>>()}))
            .collect(),
    )
}

/// A rule as NDJSON and the native API give it.
#[derive(serde::Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct JsonRule {
    pub target: String,
    pub conditions: Vec<JsonCondition>,
}

/// A condition as NDJSON and the native API give it: Shlink's type names, the query
/// parameter's name as `key`.
#[derive(serde::Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct JsonCondition {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub value: String,
}

/// The rules `json` describes, targets checked as link targets are
/// (`link::validate_url`); the error names the member (`redirect_rules[1].conditions[0]`).
pub fn from_json(json: &[JsonRule]) -> Result<Vec<Rule>, RulesError> {
    let mut rules = Vec::with_capacity(json.len());
    for (i, r) in json.iter().enumerate() {
        crate::link::validate_url(&r.target)
            .map_err(|e| RulesError(format!("redirect_rules[{i}].target: {e}")))?;
        let mut conditions = Vec::with_capacity(r.conditions.len());
        for (j, c) in r.conditions.iter().enumerate() {
            conditions.push(
                parse_condition(&c.kind, c.key.as_deref(), &c.value)
                    .map_err(|e| RulesError(format!("redirect_rules[{i}].conditions[{j}]: {e}")))?,
            );
        }
        rules.push(Rule {
            target: r.target.clone(),
            conditions,
        });
    }
    encode(&rules)?;
    Ok(rules)
}

/// A condition from its type name (Shlink's), key and value, as the APIs and NDJSON give
/// them; the error names what is wrong.
pub fn parse_condition(t: &str, key: Option<&str>, value: &str) -> Result<Condition, String> {
    let need_key = |what: &str| match key {
        Some(k) if !k.is_empty() => Ok(k.to_string()),
        _ => Err(format!(
            "a {what} condition needs a key (the parameter's name)"
        )),
    };
    let date = |v: &str| {
        crate::timefmt::parse_rfc3339_s(v)
            .map_err(|e| format!("{v:?} is not an RFC 3339 date-time: {e}"))
    };
    match t {
        "device" => Device::parse(value).map(Condition::Device).ok_or_else(|| {
            format!("{value:?} is not a device (android, ios, mobile, windows, macos, linux, chromeos, desktop)")
        }),
        "language" => {
            let l = value.to_ascii_lowercase().replace('_', "-");
            match valid_language(l.as_bytes()) {
                true => Ok(Condition::Language(l)),
                false => Err(format!("{value:?} is not a language tag (`es` or `es-ES`)")),
            }
        }
        "query-param" => Ok(Condition::QueryEquals {
            key: need_key("query-param")?,
            value: value.to_string(),
        }),
        "any-value-query-param" => Ok(Condition::QueryPresent(need_key(t)?)),
        "valueless-query-param" => Ok(Condition::QueryValueless(need_key(t)?)),
        "ip-address" => parse_ip_condition(value),
        "geolocation-country-code" => {
            let c = value.to_ascii_uppercase();
            match <[u8; 2]>::try_from(c.as_bytes()) {
                Ok(code) if code.iter().all(u8::is_ascii_uppercase) => Ok(Condition::Country(code)),
                _ => Err(format!("{value:?} is not an ISO 3166 alpha-2 country code")),
            }
        }
        "before-date" => date(value).map(Condition::Before),
        "after-date" => date(value).map(Condition::After),
        other => Err(format!(
            "{other:?} is not a condition type (device, language, query-param, any-value-query-param, valueless-query-param, ip-address, geolocation-country-code, before-date, after-date)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ANDROID: &[u8] = b"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
    const IPHONE: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    const WINDOWS: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";
    const MAC: &[u8] = b"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
    const LINUX: &[u8] = b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
    const CROS: &[u8] = b"Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";

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

    fn rule(target: &str, conditions: Vec<Condition>) -> Rule {
        Rule {
            target: target.into(),
            conditions,
        }
    }

    fn visitor<'a>(
        ua: &'a [u8],
        lang: &'a [u8],
        query: &'a [u8],
        ip: &str,
        now_s: u64,
    ) -> Visitor<'a> {
        Visitor {
            user_agent: ua,
            accept_language: lang,
            query,
            ip: ip16(ip.parse().unwrap()),
            now_s,
        }
    }

    /// Six rules, the last a country's.
    fn six_rules() -> Vec<u8> {
        let rules = vec![
            rule(
                "https://a.example/android-de",
                vec![
                    Condition::Device(Device::Android),
                    Condition::Language("de".into()),
                ],
            ),
            rule(
                "https://a.example/android",
                vec![Condition::Device(Device::Android)],
            ),
            rule(
                "https://a.example/office",
                vec![parse_ip_condition("10.0.0.0/8").unwrap()],
            ),
            rule(
                "https://a.example/v6",
                vec![parse_ip_condition("2001:db8::/32").unwrap()],
            ),
            rule(
                "https://a.example/promo",
                vec![
                    Condition::QueryEquals {
                        key: "promo".into(),
                        value: "x y".into(),
                    },
                    Condition::After(100),
                    Condition::Before(200),
                ],
            ),
            rule("https://a.example/fr", vec![Condition::Country(*b"FR")]),
        ];
        encode(&rules).unwrap()
    }

    #[test]
    fn the_first_rule_whose_conditions_all_match_wins() {
        let program = six_rules();
        let set = RuleSet::parse(&program).unwrap();
        let mut no_geo = |_: &[u8; 16]| None;
        let at = |v: &Visitor<'_>, geo: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>| {
            set.first_match(v, geo)
                .map(|m| (m.index, String::from_utf8(m.target.to_vec()).unwrap()))
        };
        let v = visitor(ANDROID, b"de-DE,de;q=0.9", b"", "192.0.2.1", 0);
        assert_eq!(
            at(&v, &mut no_geo),
            Some((0, "https://a.example/android-de".into()))
        );
        let v = visitor(ANDROID, b"en", b"", "192.0.2.1", 0);
        assert_eq!(at(&v, &mut no_geo).unwrap().0, 1);
        let v = visitor(WINDOWS, b"en", b"", "10.1.2.3", 0);
        assert_eq!(at(&v, &mut no_geo).unwrap().0, 2);
        let v = visitor(WINDOWS, b"en", b"", "2001:db8::7", 0);
        assert_eq!(at(&v, &mut no_geo).unwrap().0, 3);
        let v = visitor(WINDOWS, b"en", b"a=1&promo=x%20y", "192.0.2.1", 150);
        assert_eq!(at(&v, &mut no_geo).unwrap().0, 4);
        let v = visitor(WINDOWS, b"en", b"promo=x%20y", "192.0.2.1", 200);
        assert_eq!(at(&v, &mut no_geo), None, "before-date is strict");
        let mut asked = 0;
        let mut fr = |_: &[u8; 16]| {
            asked += 1;
            Some(*b"FR")
        };
        let v = visitor(WINDOWS, b"en", b"", "192.0.2.1", 0);
        assert_eq!(at(&v, &mut fr).unwrap().0, 5);
        assert_eq!(asked, 1);
        let mut asked = 0;
        let mut never = |_: &[u8; 16]| {
            asked += 1;
            None
        };
        let v = visitor(ANDROID, b"en", b"", "192.0.2.1", 0);
        at(&v, &mut never);
        assert_eq!(asked, 0, "no country lookup when an earlier rule matched");
    }

    #[test]
    fn ip_conditions_parse_as_shlink_writes_them() {
        assert_eq!(
            parse_ip_condition("192.168.*.*").unwrap(),
            parse_ip_condition("192.168.0.0/16").unwrap()
        );
        assert_eq!(
            parse_ip_condition("1.2.3.4").unwrap(),
            parse_ip_condition("1.2.3.4/32").unwrap()
        );
        for bad in [
            "1.2.*.4",
            "*.*.*.*.*",
            "10.0.0.1/8",
            "1.2.3.4/33",
            "::1/129",
            "x",
            "1.2.3",
        ] {
            assert!(parse_ip_condition(bad).is_err(), "{bad}");
        }
        for s in [
            "10.0.0.0/8",
            "1.2.3.4",
            "2001:db8::/32",
            "::1",
            "0.0.0.0/0",
            "::/0",
        ] {
            let Condition::Ip { addr, prefix } = parse_ip_condition(s).unwrap() else {
                panic!()
            };
            assert_eq!(format_ip_condition(&addr, prefix), s);
        }
    }

    #[test]
    fn limits_are_refused_naming_the_field() {
        let one = rule("https://a.example/", vec![Condition::Device(Device::Ios)]);
        let many = vec![one.clone(); MAX_RULES_PER_LINK + 1];
        assert!(encode(&many).unwrap_err().0.contains("at most 16"));
        let wide = rule(
            "https://a.example/",
            vec![Condition::Device(Device::Ios); 9],
        );
        assert!(encode(&[wide])
            .unwrap_err()
            .0
            .starts_with("redirect_rules[0].conditions"));
        let none = rule("https://a.example/", vec![]);
        assert!(encode(&[none]).is_err());
        let long = format!(
            "https://a.example/{}",
            "x".repeat(MAX_RULE_TARGET_BYTES - 18)
        );
        let big = rule(&long, vec![Condition::Device(Device::Ios)]);
        let e = encode(&vec![big; 9]).unwrap_err().0;
        assert!(e.contains("bytes"), "{e}");
        assert!(parse_condition("language", None, "e").is_err());
        assert!(parse_condition("language", None, "es_ES").is_ok());
        assert!(parse_condition("query-param", None, "x").is_err());
        assert!(parse_condition("geolocation-country-code", None, "fra").is_err());
        assert!(parse_condition("weather", None, "rain").is_err());
        assert!(parse_condition("before-date", None, "tomorrow").is_err());
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

    fn any_condition() -> impl Strategy<Value = Condition> {
        prop_oneof![
            (1u8..=8).prop_map(|d| Condition::Device(Device::from_byte(d).unwrap())),
            "[a-z]{2,3}(-[a-z0-9]{1,8})?".prop_map(Condition::Language),
            ("[a-z_%+]{1,12}", ".{0,20}")
                .prop_map(|(key, value)| Condition::QueryEquals { key, value }),
            "[a-z]{1,12}".prop_map(Condition::QueryPresent),
            "[a-z]{1,12}".prop_map(Condition::QueryValueless),
            (any::<[u8; 16]>(), 0u8..=128).prop_map(|(a, p)| Condition::Ip {
                addr: masked(&a, p),
                prefix: p
            }),
            "[A-Z]{2}".prop_map(|c| Condition::Country(c.as_bytes().try_into().unwrap())),
            (0..=MAX_DATE_S).prop_map(Condition::Before),
            (0..=MAX_DATE_S).prop_map(Condition::After),
        ]
    }

    fn any_rules() -> impl Strategy<Value = Vec<Rule>> {
        proptest::collection::vec(
            (
                "https://[a-z]{1,10}\\.example/[a-z]{0,10}",
                proptest::collection::vec(any_condition(), 1..=MAX_CONDITIONS_PER_RULE),
            )
                .prop_map(|(target, conditions)| Rule { target, conditions }),
            0..=4,
        )
    }

    proptest! {
        #[test]
        fn programs_round_trip_through_bytes_json_and_blocks(rules in any_rules()) {
            let program = encode(&rules).unwrap();
            let set = RuleSet::parse(&program).unwrap();
            prop_assert_eq!(set.decode().unwrap(), rules.clone());
            let mut block = Vec::new();
            encode_block(set, &mut block);
            prop_assert_eq!(block.len(), block_len(set));
            if !rules.is_empty() {
                prop_assert_eq!(decode_block(&block).unwrap(), (set, block.len()));
            }
            // JSON, as exports and the API write it, reads back to the same rules.
            let json = to_json(&rules);
            let back: Vec<Rule> = json.as_array().unwrap().iter().map(|r| Rule {
                target: r["target"].as_str().unwrap().into(),
                conditions: r["conditions"].as_array().unwrap().iter().map(|c| parse_condition(
                    c["type"].as_str().unwrap(), c["key"].as_str(), c["value"].as_str().unwrap()).unwrap()).collect(),
            }).collect();
            prop_assert_eq!(back, rules);
        }

        /// Only canonical programs parse, and whatever parses evaluates without a panic.
        #[test]
        fn any_bytes_parse_or_fail_and_evaluate_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), q in ".{0,40}") {
            if let Ok(set) = RuleSet::parse(&bytes) {
                prop_assert_eq!(encode(&set.decode().unwrap()).unwrap(), bytes.clone());
            }
            let v = Visitor { query: q.as_bytes(), ..Visitor::default() };
            let _ = RuleSet::trusted(&bytes).first_match(&v, &mut |_| Some(*b"DE"));
        }
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
