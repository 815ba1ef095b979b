//! What a link does when visited besides redirecting to its target (issue 27): when it
//! opens (`valid_since`), whether the visitor's query is forwarded, whether an admin
//! disabled it (abuse, legal, owner) with who and when, and how many visits it allows
//! (`max_visits`) and has had. Nearly every link has none of it and
//! its records carry nothing; a link with some carries one block after its target (and
//! author), flagged by [`BEHAVIOUR_FLAG`] in `flags`, in tables and logs alike:
//!
//! ```text
//! 0      2     3       4       5         8              16            24           32
//! | len  | fwd | crawl | why   | 0 0 0   | valid_since  | disabled_at | disabled_by |
//!  u16 LE  u8    u8      u8      reserved  u64 LE         u64 LE        8 bytes (Author)
//! 32            40        48
//! | max_visits  | visits  |
//!   u64 LE        u64 LE
//! ```
//!
//! `len` is the block's whole length, 48: a later version can append fields (rules) and tell
//! its blocks apart by it, without a new flag. This version reads only its own blocks, and only
//! in their one canonical form (reserved bytes 0, no disabling time or author without a
//! reason, no count without a limit, not all empty): decoding then encoding gives back the
//! same bytes, which the log's fuzz target checks.
//! `fwd`: 0 the server's `--forward-query`, 1 forward, 2 do not. `crawl`: 1 when the link
//! is `crawlable` (listed as allowed in its domain's `robots.txt`), else 0. `why`: 0 not
//! disabled, else a [`DisabledReason`].

use crate::link::{Author, AUTHOR_BYTES};

/// The `flags` bit (tables and logs) saying a [`Behaviour`] block follows the target (and
/// the author, if any). Set and cleared by the encoders from the link's `behaviour`; never
/// set in memory.
pub const BEHAVIOUR_FLAG: u32 = 1 << 25;

/// Bytes of the block this version writes and reads.
pub const BEHAVIOUR_BYTES: usize = 48;

/// Why an admin disabled a link: what its visits get instead of the redirect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DisabledReason {
    /// Phishing, malware, spam: 410 Gone.
    Abuse = 1,
    /// A legal demand: 451 Unavailable For Legal Reasons (RFC 7725).
    Legal = 2,
    /// Its owner asked: 410 Gone.
    Owner = 3,
}

impl DisabledReason {
    /// The status a visit gets.
    pub fn status(self) -> u16 {
        match self {
            DisabledReason::Legal => 451,
            DisabledReason::Abuse | DisabledReason::Owner => 410,
        }
    }

    /// Its name in the API and exports.
    pub fn as_str(self) -> &'static str {
        match self {
            DisabledReason::Abuse => "abuse",
            DisabledReason::Legal => "legal",
            DisabledReason::Owner => "owner",
        }
    }

    /// From its name.
    pub fn parse(s: &str) -> Option<DisabledReason> {
        match s {
            "abuse" => Some(DisabledReason::Abuse),
            "legal" => Some(DisabledReason::Legal),
            "owner" => Some(DisabledReason::Owner),
            _ => None,
        }
    }

    fn from_byte(b: u8) -> Option<Option<DisabledReason>> {
        match b {
            0 => Some(None),
            1 => Some(Some(DisabledReason::Abuse)),
            2 => Some(Some(DisabledReason::Legal)),
            3 => Some(Some(DisabledReason::Owner)),
            _ => None,
        }
    }
}

/// A link's disabling, kept for the audit: why, when (Unix seconds), by which API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Disabled {
    pub reason: DisabledReason,
    pub at_s: u64,
    pub by: Author,
}

/// What a link does when visited. `Copy`; the default is none of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Behaviour {
    /// Unix seconds before which the link answers as not yet valid (like an expired one);
    /// 0: always valid.
    pub valid_since_s: u64,
    /// Whether the visitor's query is forwarded into the target's: `None` follows the
    /// server's `--forward-query`.
    pub forward_query: Option<bool>,
    /// Disabled by an admin: visits get [`DisabledReason::status`].
    pub disabled: Option<Disabled>,
    /// Redirects allowed in all; past them the link answers as expired. 0: no limit.
    pub max_visits: u64,
    /// Redirects to GETs made so far (counted only while `max_visits` is set).
    pub visits: u64,
    /// Crawlers may follow it: its domain's `robots.txt` allows it (Shlink's `crawlable`).
    pub crawlable: bool,
}

impl Behaviour {
    /// No behaviour: a plain redirect.
    pub const NONE: Behaviour = Behaviour {
        valid_since_s: 0,
        forward_query: None,
        disabled: None,
        max_visits: 0,
        visits: 0,
        crawlable: false,
    };

    /// Whether the link has none (its records then carry no block).
    #[inline]
    pub fn is_none(&self) -> bool {
        *self == Behaviour::NONE
    }

    /// The flags bit a record of this behaviour carries ([`BEHAVIOUR_FLAG`] or 0).
    pub fn flag(&self) -> u32 {
        if self.is_none() {
            0
        } else {
            BEHAVIOUR_FLAG
        }
    }

    /// Bytes its block takes in a record (0 for none).
    pub fn encoded_len(&self) -> usize {
        if self.is_none() {
            0
        } else {
            BEHAVIOUR_BYTES
        }
    }

    /// Appends its block (nothing for none).
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.is_none() {
            return;
        }
        let fwd = match self.forward_query {
            None => 0u8,
            Some(true) => 1,
            Some(false) => 2,
        };
        let (why, at, by) = match self.disabled {
            None => (0u8, 0u64, Author::NONE),
            Some(d) => (d.reason as u8, d.at_s, d.by),
        };
        out.extend_from_slice(&(BEHAVIOUR_BYTES as u16).to_le_bytes());
        out.extend_from_slice(&[fwd, u8::from(self.crawlable), why, 0, 0, 0]);
        out.extend_from_slice(&self.valid_since_s.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&by.bytes());
        out.extend_from_slice(&self.max_visits.to_le_bytes());
        out.extend_from_slice(&self.visits.to_le_bytes());
    }

    /// Reads a block at the start of `b`: the behaviour and the bytes it took. Total: any
    /// bytes give a behaviour or an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<(Behaviour, usize), String> {
        let len = usize::from(u16::from_le_bytes(
            b.get(..2)
                .ok_or("short behaviour block")?
                .try_into()
                .map_err(|_| "short behaviour block")?,
        ));
        if len != BEHAVIOUR_BYTES || len > b.len() {
            return Err(format!("behaviour block of {len} bytes"));
        }
        if b[3] > 1 || b[5..8] != [0, 0, 0] {
            return Err("behaviour: reserved bytes set".into());
        }
        let forward_query = match b[2] {
            0 => None,
            1 => Some(true),
            2 => Some(false),
            x => return Err(format!("behaviour: forward byte {x}")),
        };
        let reason = DisabledReason::from_byte(b[4])
            .ok_or_else(|| format!("behaviour: disabled reason {}", b[4]))?;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let by: [u8; AUTHOR_BYTES] = b[24..32].try_into().expect("8 bytes");
        let by = Author::from_bytes(by).ok_or("behaviour: bad author")?;
        let disabled = reason.map(|reason| Disabled {
            reason,
            at_s: u64_at(16),
            by,
        });
        let (max_visits, visits) = (u64_at(32), u64_at(40));
        if reason.is_none() && (u64_at(16) != 0 || by.is_some()) {
            return Err("behaviour: a disabling time or author without a reason".into());
        }
        if max_visits == 0 && visits != 0 {
            return Err("behaviour: visits without a limit".into());
        }
        let behaviour = Behaviour {
            valid_since_s: u64_at(8),
            forward_query,
            disabled,
            max_visits,
            visits,
            crawlable: b[3] == 1,
        };
        if behaviour.is_none() {
            return Err("behaviour: an empty block".into());
        }
        Ok((behaviour, len))
    }
}

/// A behaviour's fields as NDJSON (export, import) and the API write them: `valid_since`
/// (RFC 3339), `forward_query` (a boolean), `max_visits` and `visits`, `disabled`
/// (`{"reason", "at", "by"}`), `crawlable` (`true`), each only when set.
impl Behaviour {
    pub fn put_json(&self, obj: &mut serde_json::Map<String, serde_json::Value>) {
        use serde_json::Value;
        if self.valid_since_s != 0 {
            obj.insert(
                "valid_since".into(),
                Value::from(crate::timefmt::format_rfc3339_utc(self.valid_since_s)),
            );
        }
        if let Some(f) = self.forward_query {
            obj.insert("forward_query".into(), Value::from(f));
        }
        if self.max_visits != 0 {
            obj.insert("max_visits".into(), Value::from(self.max_visits));
            obj.insert("visits".into(), Value::from(self.visits));
        }
        if self.crawlable {
            obj.insert("crawlable".into(), Value::from(true));
        }
        if let Some(d) = self.disabled {
            obj.insert(
                "disabled".into(),
                serde_json::json!({
                    "reason": d.reason.as_str(),
                    "at": crate::timefmt::format_rfc3339_utc(d.at_s),
                    "by": d.by.as_str(),
                }),
            );
        }
    }
}

/// A link's behaviour, redirect rules and labels as one JSON object of NDJSON members (the
/// fleet's `behaviour` column), or `None` when it has none of them.
pub fn json_object(
    b: &Behaviour,
    rules: &crate::rules::Rules,
    labels: &crate::labels::Labels,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    if b.is_none() && rules.is_empty() && labels.is_none() {
        return None;
    }
    let mut obj = serde_json::Map::new();
    put_link_members(b, rules, labels, &mut obj);
    Some(obj)
}

/// Adds a link's behaviour members, `redirect_rules` (when it has some), `title` (when it has
/// one) and `tags` (when it has some) to `obj`.
pub fn put_link_members(
    b: &Behaviour,
    rules: &crate::rules::Rules,
    labels: &crate::labels::Labels,
    obj: &mut serde_json::Map<String, serde_json::Value>,
) {
    b.put_json(obj);
    if !rules.is_empty() {
        let list = rules.set().decode().unwrap_or_default();
        obj.insert("redirect_rules".into(), crate::rules::to_json(&list));
    }
    if let Some(t) = labels.title() {
        obj.insert("title".into(), t.into());
    }
    if labels.tags().next().is_some() {
        obj.insert(
            "tags".into(),
            labels.tags().map(serde_json::Value::from).collect(),
        );
    }
}

/// The behaviour members of a JSON object (an NDJSON line's, or the fleet's column), checked
/// as an import checks them.
#[derive(serde::Deserialize, Debug, Default)]
pub struct BehaviourJson {
    #[serde(default)]
    pub valid_since: Option<String>,
    #[serde(default)]
    pub forward_query: Option<bool>,
    #[serde(default)]
    pub max_visits: Option<u64>,
    #[serde(default)]
    pub visits: Option<u64>,
    #[serde(default)]
    pub disabled: Option<JsonDisabled>,
    #[serde(default)]
    pub crawlable: Option<bool>,
    #[serde(default)]
    pub redirect_rules: Option<Vec<crate::rules::JsonRule>>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
}

impl BehaviourJson {
    /// The behaviour, rules and labels it describes, or what is wrong (naming the member).
    pub fn parse(&self) -> Result<(Behaviour, crate::rules::Rules, crate::labels::Labels), String> {
        let b = Behaviour {
            valid_since_s: match self.valid_since.as_deref() {
                None => 0,
                Some(t) => {
                    crate::timefmt::parse_rfc3339_s(t).map_err(|e| format!("valid_since: {e}"))?
                }
            },
            forward_query: self.forward_query,
            disabled: self
                .disabled
                .as_ref()
                .map(JsonDisabled::parse)
                .transpose()?,
            max_visits: self.max_visits.unwrap_or(0),
            visits: self.visits.unwrap_or(0),
            crawlable: self.crawlable.unwrap_or(false),
        };
        if b.max_visits == 0 && b.visits != 0 {
            return Err("visits without max_visits".into());
        }
        let rules = match &self.redirect_rules {
            None => crate::rules::Rules::NONE,
            Some(json) => {
                let list = crate::rules::from_json(json).map_err(|e| e.0)?;
                crate::rules::Rules::from_rules(&list).map_err(|e| e.0)?
            }
        };
        let labels =
            crate::labels::Labels::new(self.title.as_deref(), self.tags.as_deref().unwrap_or(&[]))
                .map_err(|e| e.0)?;
        Ok((b, rules, labels))
    }

    /// Reads a whole object of behaviour and label members (no other member).
    pub fn from_text(
        text: &str,
    ) -> Result<(Behaviour, crate::rules::Rules, crate::labels::Labels), String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Only {
            #[serde(flatten)]
            members: BehaviourJson,
        }
        let only: Only = serde_json::from_str(text).map_err(|e| format!("behaviour: {e}"))?;
        only.members.parse()
    }
}

/// The `disabled` member as NDJSON holds it.
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct JsonDisabled {
    pub reason: String,
    pub at: String,
    #[serde(default)]
    pub by: String,
}

impl JsonDisabled {
    /// The disabling it describes, or why not.
    pub fn parse(&self) -> Result<Disabled, String> {
        let reason = DisabledReason::parse(&self.reason).ok_or_else(|| {
            format!(
                "disabled.reason {:?} is not abuse, legal or owner",
                self.reason
            )
        })?;
        let at_s =
            crate::timefmt::parse_rfc3339_s(&self.at).map_err(|e| format!("disabled.at: {e}"))?;
        let by = match self.by.as_str() {
            "" => Author::NONE,
            id => Author::from_id(id)
                .ok_or_else(|| format!("disabled.by {id:?} is not an API key id"))?,
        };
        Ok(Disabled { reason, at_s, by })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_behaviour() -> impl Strategy<Value = Behaviour> {
        (
            proptest::option::of(any::<bool>()),
            prop_oneof![Just(0u64), any::<u64>()],
            proptest::option::of((1u8..=3, any::<u64>(), "[a-z0-9]{0,8}")),
            prop_oneof![Just((0u64, 0u64)), (1u64.., any::<u64>())],
            any::<bool>(),
        )
            .prop_map(
                |(forward_query, valid_since_s, d, (max_visits, visits), crawlable)| Behaviour {
                    valid_since_s,
                    forward_query,
                    max_visits,
                    visits,
                    crawlable,
                    disabled: d.map(|(r, at_s, by)| Disabled {
                        reason: DisabledReason::from_byte(r).unwrap().unwrap(),
                        at_s,
                        by: Author::from_id(&by).unwrap_or(Author::NONE),
                    }),
                },
            )
    }

    proptest! {
        #[test]
        fn blocks_round_trip_and_trailing_bytes_are_left(b in any_behaviour(), extra in 0usize..16) {
            let mut out = Vec::new();
            b.encode(&mut out);
            prop_assert_eq!(out.len(), b.encoded_len());
            if b.is_none() {
                prop_assert!(out.is_empty());
                return Ok(());
            }
            prop_assert_eq!(Behaviour::decode(&out), Ok((b, BEHAVIOUR_BYTES)));
            // Trailing bytes after the block are not its own.
            out.resize(BEHAVIOUR_BYTES + extra, 0xAB);
            prop_assert_eq!(Behaviour::decode(&out), Ok((b, BEHAVIOUR_BYTES)));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            let _ = Behaviour::decode(&bytes);
        }
    }

    proptest! {
        /// Only the canonical form decodes: whatever decodes encodes back to the same bytes.
        #[test]
        fn what_decodes_encodes_back_to_the_same_bytes(bytes in proptest::collection::vec(any::<u8>(), 48..64)) {
            let mut bytes = bytes;
            bytes[..2].copy_from_slice(&(BEHAVIOUR_BYTES as u16).to_le_bytes());
            if let Ok((b, len)) = Behaviour::decode(&bytes) {
                let mut out = Vec::new();
                b.encode(&mut out);
                prop_assert_eq!(&out[..], &bytes[..len]);
            }
        }
    }

    #[test]
    fn other_forms_of_a_block_are_refused() {
        let b = Behaviour {
            valid_since_s: 9,
            ..Behaviour::NONE
        };
        let mut good = Vec::new();
        b.encode(&mut good);
        assert!(Behaviour::decode(&good).is_ok());
        for (at, value) in [(0, 32u8), (3, 2), (6, 1), (16, 1), (24, b'a'), (40, 1)] {
            let mut bad = good.clone();
            bad[at] = value;
            assert!(Behaviour::decode(&bad).is_err(), "byte {at} = {value}");
        }
        let mut empty = good.clone();
        empty[8] = 0;
        assert!(Behaviour::decode(&empty).is_err(), "an empty block");
        // Crawlable alone is a behaviour.
        empty[3] = 1;
        let crawlable = Behaviour {
            crawlable: true,
            ..Behaviour::NONE
        };
        assert_eq!(Behaviour::decode(&empty), Ok((crawlable, BEHAVIOUR_BYTES)));
    }

    #[test]
    fn a_behaviour_object_round_trips_and_refuses_other_members() {
        let b = Behaviour {
            valid_since_s: 1_893_456_000,
            forward_query: Some(false),
            crawlable: true,
            max_visits: 5,
            visits: 2,
            ..Behaviour::NONE
        };
        let labels = crate::labels::Labels::new(Some("T"), &["x"]).unwrap();
        let obj = json_object(&b, &crate::rules::Rules::NONE, &labels).unwrap();
        let text = serde_json::Value::Object(obj).to_string();
        assert_eq!(
            BehaviourJson::from_text(&text),
            Ok((b, crate::rules::Rules::NONE, labels))
        );
        let none = crate::labels::Labels::NONE;
        assert!(json_object(&Behaviour::NONE, &crate::rules::Rules::NONE, &none).is_none());
        for bad in [
            r#"{"bogus": 1}"#,
            r#"{"visits": 1}"#,
            r#"[]"#,
            r#"{"crawlable": 1}"#,
            r#"{"tags": "x"}"#,
            r#"{"title": "a\u0007"}"#,
        ] {
            assert!(BehaviourJson::from_text(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reasons_answer_as_the_issue_says() {
        assert_eq!(DisabledReason::Legal.status(), 451);
        assert_eq!(DisabledReason::Abuse.status(), 410);
        for r in [
            DisabledReason::Abuse,
            DisabledReason::Legal,
            DisabledReason::Owner,
        ] {
            assert_eq!(DisabledReason::parse(r.as_str()), Some(r));
        }
        assert!(Behaviour::NONE.is_none() && Behaviour::NONE.flag() == 0);
    }
}
