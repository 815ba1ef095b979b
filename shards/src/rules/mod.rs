//! A link's redirect rules (issue 27; Shlink 4's model): an ordered list of rules, each a set
//! of conditions that must all match and a target. A visit goes to the first matching rule's
//! target, else to the link's own. Most links have none.
//!
//! The rules are kept, carried and evaluated in one byte form, the *program*, so that the
//! redirect path reads them where they lie (a table's mapping, or one shared buffer) and
//! evaluates them without allocating. This build writes the compiled form ([`compiled`]: the
//! distinct conditions as a table of facts in cost order, each rule a mask of them); programs
//! of the first form ([`walked`]: conditions in order, walked one by one), written by earlier
//! builds, are still read and evaluated where tables and logs keep them. A program's first byte
//! tells the forms apart.
//!
//! Records carry a program as a block after the behaviour block (`RULES_FLAG`): `len:u16 LE`
//! then the program. Only the canonical form decodes ([`RuleSet::parse`]): whatever parses
//! re-encodes, in its own form, to the same bytes.

mod compiled;
mod facts;
mod model;
mod reader;
mod walked;

pub use facts::{accepts_language, device_classes};
pub use model::{
    Condition, Device, Match, Rule, Visitor, LANGUAGE_MIN_QUALITY, MAX_CONDITIONS_PER_RULE,
    MAX_DATE_S, MAX_LANGUAGE_BYTES, MAX_QUERY_KEY_BYTES, MAX_QUERY_VALUE_BYTES, MAX_RULES_BYTES,
    MAX_RULES_PER_LINK, MAX_RULE_TARGET_BYTES,
};

use facts::masked;

use std::net::IpAddr;
use std::sync::Arc;

/// The `flags` bit (tables and logs) saying a rules block follows the behaviour block (if
/// any). Set and cleared by the encoders; never set in memory.
pub const RULES_FLAG: u32 = 1 << 26;

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

/// The program of `rules` (empty for none), in the form this build writes
/// ([`compiled`]), or the first limit it breaks.
pub fn encode(rules: &[Rule]) -> Result<Vec<u8>, RulesError> {
    check(rules)?;
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    let out = compiled::encode(rules);
    if out.len() > MAX_RULES_BYTES {
        return err(format!(
            "redirect_rules: {} bytes, at most {MAX_RULES_BYTES}",
            out.len()
        ));
    }
    Ok(out)
}

/// Whether `rules` keep the limits and each condition is well-formed; the error names the
/// first member that does not (`redirect_rules[1].conditions[0]`).
fn check(rules: &[Rule]) -> Result<(), RulesError> {
    if rules.len() > MAX_RULES_PER_LINK {
        return err(format!(
            "redirect_rules: {} rules, at most {MAX_RULES_PER_LINK}",
            rules.len()
        ));
    }
    for (i, r) in rules.iter().enumerate() {
        check_rule(i, r)?;
    }
    Ok(())
}

fn check_rule(i: usize, r: &Rule) -> Result<(), RulesError> {
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
    for (j, c) in r.conditions.iter().enumerate() {
        check_condition(c)
            .map_err(|e| RulesError(format!("redirect_rules[{i}].conditions[{j}]: {e}")))?;
    }
    Ok(())
}

fn check_condition(c: &Condition) -> Result<(), String> {
    let key = |k: &str| match k.is_empty() || k.len() > MAX_QUERY_KEY_BYTES {
        true => Err(format!(
            "a query parameter name of 1 to {MAX_QUERY_KEY_BYTES} bytes"
        )),
        false => Ok(()),
    };
    match c {
        Condition::Device(_) => Ok(()),
        Condition::Language(l) if !valid_language(l.as_bytes()) => {
            Err(format!("{l:?} is not a language tag (`es` or `es-ES`)"))
        }
        Condition::Language(_) => Ok(()),
        Condition::QueryEquals { key: k, value } => {
            key(k)?;
            match value.len() > MAX_QUERY_VALUE_BYTES {
                true => Err(format!("a value of at most {MAX_QUERY_VALUE_BYTES} bytes")),
                false => Ok(()),
            }
        }
        Condition::QueryPresent(k) | Condition::QueryValueless(k) => key(k),
        Condition::Ip { addr, prefix } if *prefix > 128 || masked(addr, *prefix) != *addr => {
            Err("a network whose address has no bits past its prefix".into())
        }
        Condition::Country(code) if !code.iter().all(u8::is_ascii_uppercase) => {
            Err("a country code of two uppercase letters".into())
        }
        Condition::Before(s) | Condition::After(s) if *s > MAX_DATE_S => {
            Err("a date after 9999-12-31T23:59:59Z".into())
        }
        Condition::Ip { .. }
        | Condition::Country(_)
        | Condition::Before(_)
        | Condition::After(_) => Ok(()),
    }
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
        if rules.is_empty() {
            return Err("rules: a program without rules".into());
        }
        check(&rules).map_err(|e| e.0)?;
        if b.len() > MAX_RULES_BYTES {
            return Err(format!(
                "rules: {} bytes, at most {MAX_RULES_BYTES}",
                b.len()
            ));
        }
        let again = match b[0] {
            compiled::MARK => compiled::encode(&rules),
            _ => walked::encode(&rules),
        };
        match again == b {
            true => Ok(RuleSet(b)),
            false => Err("rules: not in canonical form".into()),
        }
    }

    /// A program this build wrote, not checked again (the redirect path's reads of
    /// tables and logs already parsed it). Malformed bytes evaluate to no match or some
    /// rule's bytes, never a panic or a loop.
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
        match self.0.first() {
            None => Ok(Vec::new()),
            Some(&compiled::MARK) => compiled::decode(self.0),
            Some(_) => walked::decode(self.0),
        }
    }

    /// The first rule `v` matches, if any. Reads the program in place: no allocation.
    /// `country` is asked (at most once) only if a rule still undecided needs it.
    #[inline]
    pub fn first_match(
        &self,
        v: &Visitor<'_>,
        country: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
    ) -> Option<Match<'a>> {
        match self.0.first() {
            None => None,
            Some(&compiled::MARK) => compiled::first_match(self.0, v, country),
            Some(_) => walked::first_match(self.0, v, country),
        }
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

    /// Rules from a validated program in the form this build writes: a first-form program
    /// (an older build's table or log record) is compiled, so that rewriting its record
    /// (replay, compaction) leaves the compiled form behind. A program that cannot be (its
    /// compiled form past `MAX_RULES_BYTES`) is kept as it is. Allocates: never on the redirect
    /// path.
    pub fn current(set: RuleSet<'_>) -> Rules {
        match set.bytes().first() {
            None | Some(&compiled::MARK) => Rules::new(set),
            Some(_) => match set.decode().ok().and_then(|r| encode(&r).ok()) {
                Some(program) => Rules::new(RuleSet::trusted(&program)),
                None => Rules::new(set),
            },
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
    use facts::tests::{ANDROID, CROS, IPHONE, LINUX, MAC, WINDOWS};
    use proptest::prelude::*;

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
    fn six_rules() -> Vec<Rule> {
        vec![
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
        ]
    }

    /// The program of `rules` in each form: the compiled one this build writes, and the first
    /// one earlier builds wrote (still read).
    fn both_forms(rules: &[Rule]) -> [Vec<u8>; 2] {
        [encode(rules).unwrap(), walked::encode(rules)]
    }

    #[test]
    fn the_first_rule_whose_conditions_all_match_wins() {
        for program in both_forms(&six_rules()) {
            first_match_of_six_rules(&program);
        }
    }

    fn first_match_of_six_rules(program: &[u8]) {
        let set = RuleSet::parse(program).unwrap();
        assert_eq!(set.decode().unwrap(), six_rules());
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

    /// Conditions from a small vocabulary, so that the visitors below meet many of them.
    fn near_condition() -> impl Strategy<Value = Condition> {
        let key = || proptest::sample::select(vec!["a", "b", "utm", "a b"]);
        prop_oneof![
            (1u8..=8).prop_map(|d| Condition::Device(Device::from_byte(d).unwrap())),
            proptest::sample::select(vec!["en", "en-us", "de", "de-at", "fr"])
                .prop_map(|l| Condition::Language(l.into())),
            (key(), proptest::sample::select(vec!["", "x", "x y", "1"])).prop_map(|(k, v)| {
                Condition::QueryEquals {
                    key: k.into(),
                    value: v.into(),
                }
            }),
            key().prop_map(|k| Condition::QueryPresent(k.into())),
            key().prop_map(|k| Condition::QueryValueless(k.into())),
            proptest::sample::select(vec![
                "10.0.0.0/8",
                "10.1.0.0/16",
                "2001:db8::/32",
                "::/0",
                "192.0.2.7"
            ])
            .prop_map(|n| parse_ip_condition(n).unwrap()),
            proptest::sample::select(vec![*b"DE", *b"FR"]).prop_map(Condition::Country),
            (95u64..105).prop_map(Condition::Before),
            (95u64..105).prop_map(Condition::After),
        ]
    }

    fn near_rules() -> impl Strategy<Value = Vec<Rule>> {
        proptest::collection::vec(
            (
                "https://[a-z]{1,3}\\.example/",
                proptest::collection::vec(near_condition(), 1..=3),
            )
                .prop_map(|(target, conditions)| Rule { target, conditions }),
            1..=6,
        )
    }

    /// What the visitors below send: (`User-Agent`, `Accept-Language`, query, address,
    /// second, country).
    type NearVisit = (
        &'static [u8],
        &'static str,
        String,
        &'static str,
        u64,
        Option<[u8; 2]>,
    );

    fn near_visit() -> impl Strategy<Value = NearVisit> {
        (
            proptest::sample::select(vec![
                ANDROID, IPHONE, WINDOWS, MAC, LINUX, CROS, b"curl/8", b"",
            ]),
            proptest::sample::select(vec![
                "",
                "en",
                "en-US,en;q=0.9",
                "de-AT;q=0.95, fr;q=0.5",
                "EN-us;q=0.8,de",
                "*",
                "fr;q=1, de-de",
            ]),
            "((a|b|utm|a\\+b|a%20b|c)(=(x|x\\+y|x%20y|1|))?&?){0,4}",
            proptest::sample::select(vec![
                "10.1.2.3",
                "10.2.0.1",
                "2001:db8::1",
                "192.0.2.7",
                "203.0.113.9",
            ]),
            95u64..105,
            proptest::option::of(proptest::sample::select(vec![*b"DE", *b"FR"])),
        )
    }

    /// The first matching rule's index by each form, and how often each asked the country.
    fn both_matches(rules: &[Rule], visit: &NearVisit) -> [(Option<u8>, u32); 2] {
        let (ua, lang, query, ip, now_s, country) = visit;
        let v = visitor(ua, lang.as_bytes(), query.as_bytes(), ip, *now_s);
        both_forms(rules).map(|program| {
            let mut asked = 0;
            let m = RuleSet::parse(&program).unwrap().first_match(&v, &mut |_| {
                asked += 1;
                *country
            });
            if let Some(m) = m {
                assert_eq!(m.target, rules[usize::from(m.index)].target.as_bytes());
            }
            (m.map(|m| m.index), asked)
        })
    }

    /// The generated cases are not vacuous: the first rule, a later one and none all occur.
    #[test]
    fn near_visits_meet_rules_often_and_not_always() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut first, mut later, mut none) = (0, 0, 0);
        for _ in 0..2000 {
            let rules = near_rules().new_tree(&mut runner).unwrap().current();
            let visit = near_visit().new_tree(&mut runner).unwrap().current();
            match both_matches(&rules, &visit)[0].0 {
                Some(0) => first += 1,
                Some(_) => later += 1,
                None => none += 1,
            }
        }
        assert!(
            first > 200 && later > 200 && none > 200,
            "{first} {later} {none}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The compiled form answers every visit as the first form, which walks the
        /// conditions in their order, does; each asks the country at most once.
        #[test]
        fn compiled_programs_answer_as_walked_ones(rules in near_rules(), visit in near_visit()) {
            let [compiled, walked] = both_matches(&rules, &visit);
            prop_assert_eq!(compiled.0, walked.0);
            prop_assert!(compiled.1 <= 1 && walked.1 <= 1);
        }

        /// A compiled program with one byte changed or cut short either fails to parse or
        /// is canonical again, and evaluates without a panic or a loop either way.
        #[test]
        fn damaged_compiled_programs_parse_or_fail_and_evaluate(rules in near_rules(), visit in near_visit(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
            let mut program = encode(&rules).unwrap();
            let i = at.index(program.len());
            if cut {
                program.truncate(i);
            } else {
                program[i] = byte;
            }
            if let Ok(set) = RuleSet::parse(&program) {
                let again = set.decode().unwrap();
                prop_assert_eq!(RuleSet::parse(&encode(&again).unwrap()).unwrap().decode().unwrap(), again);
            }
            let (ua, lang, query, ip, now_s, country) = &visit;
            let v = visitor(ua, lang.as_bytes(), query.as_bytes(), ip, *now_s);
            let _ = RuleSet::trusted(&program).first_match(&v, &mut |_| *country);
        }

        /// First-form programs (earlier builds' tables and logs) still parse, decode and
        /// re-encode to themselves.
        #[test]
        fn walked_programs_still_parse(rules in any_rules()) {
            prop_assume!(!rules.is_empty());
            let program = walked::encode(&rules);
            prop_assert_eq!(RuleSet::parse(&program).unwrap().decode().unwrap(), rules);
        }
    }
}
