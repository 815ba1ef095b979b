//! The form of a program this build writes: a link's conditions gathered into one table of
//! distinct *facts*, grouped from the cheapest to work out to the dearest, and each rule a
//! mask of the facts it needs.
//!
//! ```text
//! program := MARK:u8  nrules:u8  ends:[u8; GROUPS]  starts:[u16 LE; GROUPS]
//!            entry{nrules}  body{nrules}  fact{ends[GROUPS-1]}
//! entry   := mask:u128 LE  body_at:u16 LE       mask: bit i for each fact i the rule names
//! body    := target_len:u16 LE  target  n:u8  fact:u8{n}
//!              the fact indices keep the conditions' order, which the APIs give back
//! group g's facts: bits ends[g-1]..ends[g] (from 0 for g = 0), bytes starts[g] up to
//! starts[g+1] (the program's end for the last); within a group ascending by bytes, none twice
//!   0 date      kind:u8 (8 before, 9 after)  secs:u64 LE        now < secs, now > secs
//!   1 address   addr:16  prefix:u8                             IPv6 or v4-mapped, masked
//!   2 device    device:u8                                      Device's number
//!   3 query     a name's facts together (a fact per test, in order):
//!               klen:u8 key  n:u8  test{n}
//!               test := 3 vlen:u16 LE value | 4 | 5            equals (the value), present,
//!                                                              without a value
//!   4 language  len:u8 lang                                    lowercase `ll` or `ll-rr`
//!   5 country   code:2                                         ISO 3166 alpha-2, uppercase
//! ```
//!
//! A visit learns facts a group at a time, and only when a rule still undecided needs one:
//! the lowest bit a rule needs and does not know names the cheapest group left to work out
//! (the groups' bits are in cost order). A rule fails as soon as one fact it needs is known
//! false, so a rule of a device and a language costs only the `User-Agent` for a visitor on
//! another device, whatever order the conditions were given in. Each group is worked out in
//! one pass: the `User-Agent` classified once, the query split once and each name looked up
//! once for all its tests (a name's facts are kept together), `Accept-Language` read once for
//! every language asked, the country asked once.
//!
//! Why not walk the conditions as written (the first form, [`super::walked`]): reading each
//! condition's kind and length costs about 3 ns a condition, half of a 5-rule, 15-condition
//! evaluation's budget, and the same fact asked by several rules was worked out again each
//! time (`perf/reports/2026-12-08-session25-compiled-rules.md`).

use std::collections::{BTreeMap, BTreeSet};

use super::facts::{
    decoded_eq, device_classes, each_range, in_network, range_quality, split_tag, Params,
};
use super::model::{
    Condition, Device, Match, Rule, Visitor, LANGUAGE_MIN_QUALITY, MAX_CONDITIONS_PER_RULE,
    MAX_RULES_PER_LINK,
};
use super::reader::{Cursor, Walk, SHORT};

/// A compiled program's first byte. A first-form program starts with its rule count (1 to
/// `MAX_RULES_PER_LINK`), never this.
pub(super) const MARK: u8 = 0x82;

/// Fact groups, in the order a visit works them out: dates, addresses, device, query,
/// languages, country.
const GROUPS: usize = 6;
const DATES: usize = 0;
const ADDRESSES: usize = 1;
const DEVICES: usize = 2;
const QUERY: usize = 3;
const LANGUAGES: usize = 4;
const COUNTRY: usize = 5;

/// Bytes before the first rule's entry.
const HEADER_BYTES: usize = 2 + GROUPS + 2 * GROUPS;
/// Bytes of a rule's entry: fixed, so that a visit steps from mask to mask without reading
/// the targets between them.
const ENTRY_BYTES: usize = 16 + 2;

const _: () = assert!(MARK as usize > MAX_RULES_PER_LINK);
// Every fact has a bit of a rule's mask.
const _: () = assert!(MAX_RULES_PER_LINK * MAX_CONDITIONS_PER_RULE <= 128);

/// The compiled program of `rules` (at least one, already checked against the limits).
pub(super) fn encode(rules: &[Rule]) -> Vec<u8> {
    let facts: BTreeSet<(usize, Vec<u8>)> =
        rules.iter().flat_map(|r| &r.conditions).map(fact).collect();
    let index: BTreeMap<&(usize, Vec<u8>), u8> = facts
        .iter()
        .enumerate()
        .map(|(i, f)| (f, i as u8))
        .collect();
    let mut out = vec![MARK, rules.len() as u8];
    for g in 0..GROUPS {
        out.push(facts.iter().filter(|(fg, _)| *fg <= g).count() as u8);
    }
    out.resize(HEADER_BYTES + ENTRY_BYTES * rules.len(), 0);
    for (i, r) in rules.iter().enumerate() {
        let facts: Vec<u8> = r.conditions.iter().map(|c| index[&fact(c)]).collect();
        let mask = facts.iter().fold(0u128, |m, i| m | bit(u32::from(*i)));
        let entry = HEADER_BYTES + ENTRY_BYTES * i;
        out[entry..entry + 16].copy_from_slice(&mask.to_le_bytes());
        let body_at = (out.len() as u16).to_le_bytes();
        out[entry + 16..entry + ENTRY_BYTES].copy_from_slice(&body_at);
        out.extend_from_slice(&(r.target.len() as u16).to_le_bytes());
        out.extend_from_slice(r.target.as_bytes());
        out.push(facts.len() as u8);
        out.extend_from_slice(&facts);
    }
    for g in 0..GROUPS {
        let at = 2 + GROUPS + 2 * g;
        let start = (out.len() as u16).to_le_bytes();
        out[at..at + 2].copy_from_slice(&start);
        let group = facts
            .iter()
            .filter(|(fg, _)| *fg == g)
            .map(|(_, b)| b.as_slice());
        match g {
            QUERY => encode_names(&mut out, group),
            _ => group.for_each(|b| out.extend_from_slice(b)),
        }
    }
    out
}

/// Query facts (`klen key test`, in order) as names, each with its tests.
fn encode_names<'f>(out: &mut Vec<u8>, facts: impl Iterator<Item = &'f [u8]>) {
    let mut name: &[u8] = &[];
    let mut count_at = 0;
    for f in facts {
        let (key, test) = f.split_at(1 + usize::from(f[0]));
        if key != name {
            out.extend_from_slice(key);
            count_at = out.len();
            out.push(0);
            name = key;
        }
        out[count_at] += 1;
        out.extend_from_slice(test);
    }
}

/// A condition as a fact: its group and its bytes.
fn fact(c: &Condition) -> (usize, Vec<u8>) {
    let mut b = Vec::new();
    let group = match c {
        Condition::Before(s) | Condition::After(s) => {
            b.push(if matches!(c, Condition::Before(_)) {
                8
            } else {
                9
            });
            b.extend_from_slice(&s.to_le_bytes());
            DATES
        }
        Condition::Ip { addr, prefix } => {
            b.extend_from_slice(addr);
            b.push(*prefix);
            ADDRESSES
        }
        Condition::Device(d) => {
            b.push(*d as u8);
            DEVICES
        }
        Condition::QueryEquals { key, .. }
        | Condition::QueryPresent(key)
        | Condition::QueryValueless(key) => {
            b.push(key.len() as u8);
            b.extend_from_slice(key.as_bytes());
            match c {
                Condition::QueryEquals { value, .. } => {
                    b.push(3);
                    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
                    b.extend_from_slice(value.as_bytes());
                }
                Condition::QueryPresent(_) => b.push(4),
                _ => b.push(5),
            }
            QUERY
        }
        Condition::Language(l) => {
            b.push(l.len() as u8);
            b.extend_from_slice(l.as_bytes());
            LANGUAGES
        }
        Condition::Country(code) => {
            b.extend_from_slice(code);
            COUNTRY
        }
    };
    (group, b)
}

/// The rules of a compiled `program`. Whatever this returns is checked again by encoding it
/// ([`super::RuleSet::parse`]): this only has to be total.
pub(super) fn decode(program: &[u8]) -> Result<Vec<Rule>, String> {
    let h = Header::read(program).ok_or(SHORT)?;
    let mut facts = Vec::new();
    for g in 0..GROUPS {
        let bytes = h.group_bytes(g).ok_or("rules: a fact group past the end")?;
        let mut r = Cursor(Walk { b: bytes, at: 0 });
        while r.0.at < bytes.len() {
            match g {
                QUERY => decode_name(&mut r, &mut facts)?,
                _ => facts.push(decode_fact(g, &mut r)?),
            }
        }
        if facts.len() != usize::from(h.end(g)) {
            return Err("rules: a fact group's count does not match its bytes".into());
        }
    }
    let mut r = Cursor(Walk {
        b: program,
        at: HEADER_BYTES + ENTRY_BYTES * usize::from(h.rules),
    });
    let mut rules = Vec::with_capacity(usize::from(h.rules));
    for _ in 0..h.rules {
        let tlen = usize::from(r.u16()?);
        let target = std::str::from_utf8(r.take(tlen)?)
            .map_err(|_| "rules: a target is not UTF-8")?
            .to_string();
        let n = usize::from(r.u8()?);
        let conditions = r
            .take(n)?
            .iter()
            .map(|i| facts.get(usize::from(*i)).cloned())
            .collect::<Option<Vec<_>>>()
            .ok_or("rules: a rule names a fact the program lacks")?;
        rules.push(Rule { target, conditions });
    }
    if r.0.at != h.start(0) {
        return Err("rules: bytes between the rules' bodies and the facts".into());
    }
    Ok(rules)
}

fn text(b: &[u8]) -> Result<String, String> {
    std::str::from_utf8(b)
        .map(str::to_string)
        .map_err(|_| "rules: text is not UTF-8".to_string())
}

/// A query name and its tests, a fact each.
fn decode_name(r: &mut Cursor<'_>, facts: &mut Vec<Condition>) -> Result<(), String> {
    let k = usize::from(r.u8()?);
    let key = text(r.take(k)?)?;
    for _ in 0..r.u8()? {
        facts.push(match r.u8()? {
            3 => {
                let n = usize::from(r.u16()?);
                let value = text(r.take(n)?)?;
                Condition::QueryEquals {
                    key: key.clone(),
                    value,
                }
            }
            4 => Condition::QueryPresent(key.clone()),
            5 => Condition::QueryValueless(key.clone()),
            t => return Err(format!("rules: query test {t}")),
        });
    }
    Ok(())
}

fn decode_fact(group: usize, r: &mut Cursor<'_>) -> Result<Condition, String> {
    Ok(match group {
        DATES => match (r.u8()?, r.u64()?) {
            (8, s) => Condition::Before(s),
            (9, s) => Condition::After(s),
            (k, _) => return Err(format!("rules: date kind {k}")),
        },
        ADDRESSES => Condition::Ip {
            addr: r.take(16)?.try_into().map_err(|_| "short address")?,
            prefix: r.u8()?,
        },
        DEVICES => {
            let d = r.u8()?;
            Condition::Device(Device::from_byte(d).ok_or(format!("rules: device {d}"))?)
        }
        LANGUAGES => {
            let n = usize::from(r.u8()?);
            Condition::Language(text(r.take(n)?)?)
        }
        _ => Condition::Country(r.take(2)?.try_into().map_err(|_| "short country")?),
    })
}

/// The first rule of a compiled `program` that `v` matches. Reads the program in place, no
/// allocation; malformed bytes give no match or some rule's bytes, never a panic or a loop.
pub(super) fn first_match<'a>(
    program: &'a [u8],
    v: &Visitor<'_>,
    country: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
) -> Option<Match<'a>> {
    let h = Header::read(program)?;
    let entries = program.get(HEADER_BYTES..HEADER_BYTES + ENTRY_BYTES * usize::from(h.rules))?;
    // Facts worked out so far, and which of those hold.
    let (mut known, mut holds) = (0u128, 0u128);
    for (index, entry) in entries.chunks_exact(ENTRY_BYTES).enumerate() {
        let mask = u128::from_le_bytes(entry[..16].try_into().ok()?);
        while mask & known & !holds == 0 {
            let need = mask & !known;
            if need == 0 {
                let body_at = usize::from(u16::from_le_bytes([entry[16], entry[17]]));
                let mut body = Walk {
                    b: program,
                    at: body_at,
                };
                let target_len = usize::from(body.u16()?);
                return Some(Match {
                    index: index as u8,
                    target: body.take(target_len)?,
                });
            }
            let g = h.group_of(need.trailing_zeros())?;
            holds |= h.work_out(g, v, country)?;
            known |= h.group_mask(g);
        }
    }
    None
}

/// A compiled program whose header is there to read.
struct Header<'p> {
    program: &'p [u8],
    rules: u8,
}

impl<'p> Header<'p> {
    #[inline]
    fn read(program: &'p [u8]) -> Option<Header<'p>> {
        let rules = *program.get(..HEADER_BYTES)?.get(1)?;
        Some(Header { program, rules })
    }

    /// The end of group `g`'s bits (its facts and the groups' before it).
    #[inline(always)]
    fn end(&self, g: usize) -> u8 {
        self.program[2 + g]
    }

    /// Where group `g`'s facts' bytes start.
    #[inline(always)]
    fn start(&self, g: usize) -> usize {
        let at = 2 + GROUPS + 2 * g;
        usize::from(u16::from_le_bytes([self.program[at], self.program[at + 1]]))
    }

    fn group_bytes(&self, g: usize) -> Option<&'p [u8]> {
        let end = match g + 1 < GROUPS {
            true => self.start(g + 1),
            false => self.program.len(),
        };
        self.program.get(self.start(g)..end)
    }

    /// The first bit of group `g`'s facts.
    #[inline]
    fn first_bit(&self, g: usize) -> u32 {
        match g {
            0 => 0,
            g => u32::from(self.end(g - 1)),
        }
    }

    /// The group whose bits hold `b`: the first whose end is past it, so that every group
    /// before it ends at or before `b` and the group's mask holds `b` (progress, even for
    /// malformed ends).
    #[inline]
    fn group_of(&self, b: u32) -> Option<usize> {
        (0..GROUPS).find(|g| b < u32::from(self.end(*g)))
    }

    #[inline]
    fn group_mask(&self, g: usize) -> u128 {
        // Bits below `b` (all of them from 128).
        let below = |b: u32| bit(b).wrapping_sub(1);
        below(u32::from(self.end(g))) & !below(self.first_bit(g))
    }

    /// Which of group `g`'s facts hold for `v`, as bits of the program's masks.
    #[inline(never)]
    fn work_out(
        &self,
        g: usize,
        v: &Visitor<'_>,
        country: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>,
    ) -> Option<u128> {
        let f = Walk {
            b: self.group_bytes(g)?,
            at: 0,
        };
        let first = self.first_bit(g);
        match g {
            DATES => dates(f, first, v.now_s),
            ADDRESSES => each(f, first, |f| Some(in_network(&v.ip, f.take(16)?, f.u8()?))),
            DEVICES => {
                let classes = device_classes(v.user_agent);
                each(f, first, |f| {
                    let d = f.u8()?;
                    Some((1..=8).contains(&d) && classes & (1 << d) != 0)
                })
            }
            QUERY => query(f, first, v.query),
            LANGUAGES => languages(f, first, v.accept_language),
            COUNTRY => {
                let c = country(&v.ip);
                each(f, first, |f| {
                    let code = f.take(2)?;
                    Some(c.is_some_and(|c| c.eq_ignore_ascii_case(code)))
                })
            }
            _ => None,
        }
    }
}

/// Bit `i` of a mask (none past 128).
#[inline(always)]
fn bit(i: u32) -> u128 {
    1u128.checked_shl(i).unwrap_or(0)
}

/// The bits, from `first`, of the facts in `f` for which `holds` (which reads one) says so.
#[inline(always)]
fn each<'p>(
    mut f: Walk<'p>,
    first: u32,
    mut holds: impl FnMut(&mut Walk<'p>) -> Option<bool>,
) -> Option<u128> {
    let (mut bits, mut i) = (0u128, first);
    while f.at < f.b.len() {
        if holds(&mut f)? {
            bits |= bit(i);
        }
        i += 1;
    }
    Some(bits)
}

fn dates(f: Walk<'_>, first: u32, now_s: u64) -> Option<u128> {
    each(f, first, |f| match (f.u8()?, f.u64()?) {
        (8, s) => Some(now_s < s),
        (9, s) => Some(now_s > s),
        _ => None,
    })
}

/// The query facts: the query split once, each name looked up once for all its tests.
fn query(mut f: Walk<'_>, first: u32, raw: &[u8]) -> Option<u128> {
    let params = Params::split(raw);
    let (mut bits, mut i) = (0u128, first);
    while f.at < f.b.len() {
        let got = params.last(f.short_bytes()?);
        for _ in 0..f.u8()? {
            let holds = match f.u8()? {
                3 => {
                    let n = usize::from(f.u16()?);
                    let want = f.take(n)?;
                    matches!(got, Some(Some(got)) if decoded_eq(got, want))
                }
                4 => got.is_some(),
                5 => matches!(got, Some(None) | Some(Some(b""))),
                _ => return None,
            };
            if holds {
                bits |= bit(i);
            }
            i += 1;
        }
    }
    Some(bits)
}

/// The language facts, `Accept-Language` read once for all of them: each range is compared
/// with every language asked, and its quality read only if one matches (as
/// [`super::accepts_language`] does for one language).
fn languages(facts: Walk<'_>, first: u32, header: &[u8]) -> Option<u128> {
    let mut bits = Some(0u128);
    each_range(header, |l, region, params| {
        let named = each(facts, first, |f| {
            let (want_lang, want_region) = split_tag(f.short_bytes()?);
            Some(
                l.eq_ignore_ascii_case(want_lang)
                    && (want_region.is_empty() || region.eq_ignore_ascii_case(want_region)),
            )
        });
        bits = match (bits, named) {
            (Some(b), Some(n)) if n & !b == 0 => Some(b),
            (Some(b), Some(n)) => match range_quality(params) >= Some(LANGUAGE_MIN_QUALITY) {
                true => Some(b | n),
                false => Some(b),
            },
            _ => None,
        };
        bits.is_none()
    });
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_masks_cover_their_bits_and_only_those() {
        let mut p = vec![MARK, 0, 0, 3, 3, 10, 128, 128];
        p.resize(HEADER_BYTES, 0);
        let h = Header::read(&p).unwrap();
        assert_eq!(h.group_mask(DATES), 0);
        assert_eq!(h.group_mask(ADDRESSES), 0b111);
        assert_eq!(h.group_mask(DEVICES), 0);
        assert_eq!(h.group_mask(QUERY), 0b11_1111_1000);
        assert_eq!(h.group_mask(LANGUAGES), u128::MAX << 10);
        assert_eq!(h.group_mask(COUNTRY), 0);
        assert_eq!(h.group_of(0), Some(ADDRESSES));
        assert_eq!(h.group_of(9), Some(QUERY));
        assert_eq!(h.group_of(127), Some(LANGUAGES));
    }
}
