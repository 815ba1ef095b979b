//! API key roles (issue 26; Shlink's model, extended): what a key may do, and which links it
//! reaches.
//!
//! A key's [`Role`] is stored with it (`api_keys.json`) and set at its creation
//! (`ricochet keys create NAME --author-only --domain go.brand.com --read-only`). The roles
//! combine:
//!
//! - **admin** (no restriction; every key made before roles): everything, and alone the
//!   server-wide endpoints (`GET /api/v1/stats`, which no filtered view could answer
//!   exactly, see `docs/api.md`).
//! - **author-only**: only the links the key created ([`shards::link::Author`]).
//! - **domain-only**: only the links of the listed domains.
//! - **read-only**: `GET` of links and stats only.
//!
//! Per request the role becomes a [`Reach`] against the domains in force. A link outside the
//! reach is answered exactly as a link that does not exist (404), never 403, so its existence
//! does not leak; the domain half is decided by the requesting core (the domain is in the
//! stored key), the author half by the link's owner core ([`AuthorReach`] travels with the
//! read, the write and the list page), since only the owner holds the link.

use shards::link::{Author, DEFAULT_DOMAIN};
use std::sync::Arc;

/// Most domains one domain-only key may list.
pub const MAX_ROLE_DOMAINS: usize = 64;

/// How a role names the default domain when it has no name of its own (Shlink's keyword).
pub const DEFAULT_DOMAIN_KEYWORD: &str = "DEFAULT";

/// A key's role. The default is admin.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Role {
    /// Author-only: the key reaches only the links it created.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub author_only: bool,
    /// Read-only: the key may only read links and stats.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Domain-only: the names (IDNA ASCII, lowercase, or [`DEFAULT_DOMAIN_KEYWORD`]) of the
    /// domains whose links the key reaches; `None`: every domain. A name that is not (or no
    /// longer) declared reaches nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
}

/// Why a role cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RoleError {
    #[error("--domain {0:?} is not a valid domain name: {1}")]
    BadDomain(String, String),
    #[error("a key may be limited to at most {MAX_ROLE_DOMAINS} domains")]
    TooManyDomains,
}

impl Role {
    /// A role from `ricochet keys create`'s flags; domain names are normalized as the domain
    /// book does (`DEFAULT`, any case, names the default domain).
    pub fn new(author_only: bool, read_only: bool, domains: &[String]) -> Result<Role, RoleError> {
        if domains.len() > MAX_ROLE_DOMAINS {
            return Err(RoleError::TooManyDomains);
        }
        let mut names = Vec::with_capacity(domains.len());
        for d in domains {
            let name = if d.eq_ignore_ascii_case(DEFAULT_DOMAIN_KEYWORD) {
                DEFAULT_DOMAIN_KEYWORD.to_owned()
            } else {
                crate::base::hosts::normalize(d)
                    .map_err(|e| RoleError::BadDomain(d.clone(), e.to_string()))?
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(Role {
            author_only,
            read_only,
            domains: (!names.is_empty()).then_some(names),
        })
    }

    /// Whether the role restricts nothing.
    pub fn is_admin(&self) -> bool {
        *self == Role::default()
    }

    /// The role in words, as `keys list` shows it: `admin`, or its parts, e.g.
    /// `author-only, domain-only (go.brand.com), read-only`.
    pub fn describe(&self) -> String {
        if self.is_admin() {
            return "admin".into();
        }
        let mut parts = Vec::new();
        if self.author_only {
            parts.push("author-only".to_owned());
        }
        if let Some(d) = &self.domains {
            parts.push(format!("domain-only ({})", d.join(" ")));
        }
        if self.read_only {
            parts.push("read-only".to_owned());
        }
        parts.join(", ")
    }

    /// What key `author` with this role reaches under the domains in force.
    pub fn reach(&self, author: Author, domains: &crate::api::domains::Domains) -> Reach {
        let numbers = self.domains.as_ref().map(|names| {
            let mut n: Vec<u32> = names
                .iter()
                .filter_map(|name| match name.as_str() {
                    DEFAULT_DOMAIN_KEYWORD => Some(DEFAULT_DOMAIN),
                    name => domains.by_name(name).map(|d| d.number),
                })
                .collect();
            n.sort_unstable();
            n.dedup();
            Arc::from(n)
        });
        Reach {
            author: match self.author_only {
                true => AuthorReach::only(author),
                false => AuthorReach::ANY,
            },
            domains: numbers,
            read_only: self.read_only,
            admin: self.is_admin(),
            caller: author,
        }
    }
}

/// The role and limit flags of `ricochet keys create` and `ricochet fleet keys create`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct RoleArgs {
    /// The key sees, edits, deletes and reads stats of only the links it created.
    #[arg(long)]
    pub author_only: bool,
    /// The key reaches only the links of this domain (repeat for several; `DEFAULT` names
    /// the default domain).
    #[arg(long = "domain", value_name = "NAME")]
    pub domains: Vec<String>,
    /// The key may only read links and stats.
    #[arg(long)]
    pub read_only: bool,
    /// Creates per second this key may make, whole node (default: the server's
    /// `--create-rate`); needs `--create-burst`.
    #[arg(long, value_name = "N", requires = "create_burst")]
    pub create_rate: Option<u32>,
    /// Creates this key may make at once when rested (default: the server's
    /// `--create-burst`); needs `--create-rate`.
    #[arg(long, value_name = "N", requires = "create_rate")]
    pub create_burst: Option<u32>,
}

impl RoleArgs {
    /// The role and the key's own create limits the flags ask for; an error names the flag.
    pub fn parse(&self) -> anyhow::Result<(Role, Option<crate::api::ratelimit::RateLimitConfig>)> {
        let role = Role::new(self.author_only, self.read_only, &self.domains)?;
        let limits = match (self.create_rate, self.create_burst) {
            (Some(per_second), Some(burst)) => Some(
                crate::api::ratelimit::RateLimitConfig { per_second, burst }
                    .validate()
                    .map_err(|e| anyhow::anyhow!("--create-rate/--create-burst: {e}"))?,
            ),
            _ => None,
        };
        Ok((role, limits))
    }
}

/// The author half of a reach, carried to a link's owner with every read, write and list page
/// (8 bytes, `Copy`, so a mesh message stays within `MAX_MESH_MSG_BYTES`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthorReach(Author);

impl AuthorReach {
    /// Any link, whoever created it.
    pub const ANY: AuthorReach = AuthorReach(Author::NONE);

    /// Only the links `author` created. An author is never [`Author::NONE`] (a key id is 1 to
    /// 8 letters or digits), so this never means "any".
    pub fn only(author: Author) -> AuthorReach {
        debug_assert!(author.is_some());
        AuthorReach(author)
    }

    /// The one author whose links are within reach, as the fleet database's column holds it;
    /// `""`: any.
    pub fn author_only(&self) -> &str {
        self.0.as_str()
    }

    /// Whether a link created by `author` is within reach.
    #[inline]
    pub fn admits(&self, author: Author) -> bool {
        !self.0.is_some() || self.0 == author
    }
}

/// What one API request may reach: its key's role against the domains in force.
#[derive(Clone, Debug)]
pub struct Reach {
    pub author: AuthorReach,
    /// The domain numbers reached, sorted; `None`: every domain.
    pub domains: Option<Arc<[u32]>>,
    pub read_only: bool,
    /// No restriction at all.
    pub admin: bool,
    /// Who asks: the key's author id (what a link it disables records as `disabled.by`).
    pub caller: Author,
}

impl Reach {
    /// An admin's reach.
    pub fn all() -> Reach {
        Reach {
            author: AuthorReach::ANY,
            domains: None,
            read_only: false,
            admin: true,
            caller: Author::NONE,
        }
    }

    /// Whether links of domain `number` are within reach.
    #[inline]
    pub fn domain_ok(&self, number: u32) -> bool {
        self.domains
            .as_ref()
            .is_none_or(|d| d.binary_search(&number).is_ok())
    }

    /// Whether the link of stored key `stored` created by `author` is within reach.
    pub fn admits(&self, stored: &[u8], author: Author) -> bool {
        self.domain_ok(shards::link::split_stored_key(stored).0) && self.author.admits(author)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_combine_and_describe_themselves() {
        assert!(Role::default().is_admin());
        assert_eq!(Role::default().describe(), "admin");
        let r = Role::new(true, true, &["Go.Brand.COM".into(), "default".into()]).unwrap();
        assert_eq!(
            r.domains.as_deref(),
            Some(&["go.brand.com".to_owned(), "DEFAULT".to_owned()][..])
        );
        assert_eq!(
            r.describe(),
            "author-only, domain-only (go.brand.com DEFAULT), read-only"
        );
        assert!(matches!(
            Role::new(false, false, &["bad host!".into()]),
            Err(RoleError::BadDomain(..))
        ));
        let many: Vec<String> = (0..=MAX_ROLE_DOMAINS)
            .map(|i| format!("d{i}.com"))
            .collect();
        assert_eq!(
            Role::new(false, false, &many),
            Err(RoleError::TooManyDomains)
        );
    }

    #[test]
    fn a_reach_admits_by_domain_and_author() {
        let me = Author::from_id("me").unwrap();
        let other = Author::from_id("other").unwrap();
        let none = crate::api::domains::Domains::default();
        let r = Role::new(true, false, &["DEFAULT".into(), "undeclared.com".into()])
            .unwrap()
            .reach(me, &none);
        assert!(r.admits(b"abc", me));
        assert!(!r.admits(b"abc", other));
        assert!(
            !r.admits(b"abc", Author::NONE),
            "an import's link is no author's"
        );
        assert!(
            !r.admits(b"3.abc", me),
            "an undeclared domain reaches nothing"
        );
        let all = Reach::all();
        assert!(all.admits(b"3.abc", Author::NONE) && all.admin);
        assert!(AuthorReach::ANY.admits(other));
    }
}
