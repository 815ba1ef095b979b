//! The vocabulary of redirect rules: what a rule is ([`Rule`], [`Condition`], [`Device`]),
//! what a visit shows them ([`Visitor`]), what a match gives back ([`Match`]), and the limits.

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
    pub(super) const ALL: [Device; 8] = [
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

    pub(super) fn from_byte(b: u8) -> Option<Device> {
        Device::ALL.into_iter().find(|d| *d as u8 == b)
    }

    pub(super) fn bit(self) -> u16 {
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
