//! The first form of a program (written by builds before the compiled form,
//! [`super::compiled`]): rules in order, each condition with its kind byte, walked condition by
//! condition. Still read, evaluated in place (an older table's records) and re-encoded (to
//! check a stored program is canonical), never written: a record read out of a table or
//! replayed from a log takes its rules compiled (`Rules::current`), so the next table written
//! holds the compiled form.
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

use super::facts::{accepts_language, decoded_eq, device_classes, in_network, Params};
use super::model::{Condition, Device, Match, Rule, Visitor};
use super::reader::{Cursor, Walk};

/// The bytes of `rules` in this form. Unchecked: `RuleSet::parse` checks the rules against
/// the limits; this only re-encodes what [`decode`] read, to compare.
pub(super) fn encode(rules: &[Rule]) -> Vec<u8> {
    let mut out = vec![rules.len() as u8];
    for r in rules {
        out.extend_from_slice(&(r.target.len() as u16).to_le_bytes());
        out.extend_from_slice(r.target.as_bytes());
        out.push(r.conditions.len() as u8);
        for c in &r.conditions {
            encode_condition(&mut out, c);
        }
    }
    out
}

fn encode_condition(out: &mut Vec<u8>, c: &Condition) {
    let key = |out: &mut Vec<u8>, k: &str| {
        out.push(k.len() as u8);
        out.extend_from_slice(k.as_bytes());
    };
    match c {
        Condition::Device(d) => out.extend_from_slice(&[1, *d as u8]),
        Condition::Language(l) => {
            out.extend_from_slice(&[2, l.len() as u8]);
            out.extend_from_slice(l.as_bytes());
        }
        Condition::QueryEquals { key: k, value } => {
            out.push(3);
            key(out, k);
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        Condition::QueryPresent(k) => {
            out.push(4);
            key(out, k);
        }
        Condition::QueryValueless(k) => {
            out.push(5);
            key(out, k);
        }
        Condition::Ip { addr, prefix } => {
            out.push(6);
            out.extend_from_slice(addr);
            out.push(*prefix);
        }
        Condition::Country(code) => {
            out.push(7);
            out.extend_from_slice(code);
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
}

/// The rules of `program` (in this form, not empty).
pub(super) fn decode(program: &[u8]) -> Result<Vec<Rule>, String> {
    let mut r = Cursor(Walk { b: program, at: 0 });
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
    if r.0.at != program.len() {
        return Err("rules: trailing bytes".into());
    }
    Ok(rules)
}

/// The first rule `v` matches in `program` (in this form, not empty). Walks the program in
/// place: no allocation. `country` is asked (at most once) only if a country condition is
/// reached.
pub(super) fn first_match<'a>(
    program: &'a [u8],
    v: &Visitor<'_>,
    country: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
) -> Option<Match<'a>> {
    let mut facts = Facts {
        v,
        devices: None,
        params: None,
        country: None,
        ask_country: country,
    };
    let mut r = Walk { b: program, at: 0 };
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
