//! `/robots.txt` per domain: crawlers may follow the domain's links marked `crawlable`
//! (Shlink's flag) and nothing else. A crawler that follows a short link counts as a visit,
//! leaks the target to a search index and costs a redirect, so every other path stays
//! disallowed.
//!
//! The list is a walk over every shard (`owner::listing`, filtered to the domain's crawlable
//! links on the owner), so it is not built per request: each core keeps the text of each
//! domain for [`ROBOTS_TTL_S`] and serves the older text while a new walk is in flight. A
//! link marked or unmarked shows within that time. Cost: at most one walk of the links per
//! core, per domain, per [`ROBOTS_TTL_S`], and only when crawlers ask.
//!
//! Each allowed key is anchored with `$` (RFC 9309 section 2.2.3), so `Allow: /abc$` does not
//! also allow `/abcd`, which a bare prefix would.

use super::listing::ListWalk;
use crate::http::encode::{self, Framing, Response};
use crate::http::status::Status;
use crate::mesh::{LinkInfo, ListFilter};
use std::collections::HashMap;
use std::sync::Arc;

/// Seconds a core serves a domain's `robots.txt` before walking its links again.
pub const ROBOTS_TTL_S: u64 = 60;

/// Most crawlable links one `robots.txt` lists (about 200 KB; Google reads the first
/// 500 KiB). Past it, the text names the first ones in walk order and the rest stay
/// disallowed: the safe side.
pub const MAX_ROBOTS_ALLOWS: u32 = 10_000;

/// What every domain serves when none of its links is crawlable (and any host with no
/// keyspace, under `--unknown-host not-found`).
pub const ROBOTS_TXT: &[u8] = b"User-agent: *\nDisallow: /\n";

const HEAD: &str = "# For more information about the robots.txt standard, see:\n\
                    # https://www.robotstxt.org/orig.html\n\nUser-agent: *\n";

/// One core's texts by domain number.
#[derive(Debug, Default)]
pub struct RobotsCache {
    texts: HashMap<u32, Text>,
}

#[derive(Debug)]
struct Text {
    body: Arc<[u8]>,
    built_s: u64,
    /// When this core started a walk for this domain that has not ended. A walk whose
    /// connection went away never ends: after [`ROBOTS_TTL_S`] another starts.
    walking_since_s: Option<u64>,
}

/// What to do with a request for domain `d`'s text.
#[derive(Debug)]
pub enum Lookup {
    /// Serve this.
    Serve(Arc<[u8]>),
    /// Walk the domain's links, then serve what [`RobotsCache::walked`] builds.
    Walk(ListWalk),
}

impl RobotsCache {
    /// The text of domain `d` at second `now_s`: fresh, or stale while a walk runs, or a walk
    /// to start (marked in flight, so other requests meanwhile get the stale text).
    pub fn lookup(&mut self, d: u32, now_s: u64) -> Lookup {
        let fresh = |since_s: u64| now_s < since_s.saturating_add(ROBOTS_TTL_S);
        match self.texts.get_mut(&d) {
            Some(t) if fresh(t.built_s) || t.walking_since_s.is_some_and(fresh) => {
                Lookup::Serve(t.body.clone())
            }
            Some(t) => {
                t.walking_since_s = Some(now_s);
                Lookup::Walk(walk_of(d))
            }
            None => Lookup::Walk(walk_of(d)),
        }
    }

    /// A walk of domain `d` ended with `items`: its text, kept for the next requests.
    pub fn walked(&mut self, d: u32, items: &[LinkInfo], now_s: u64) -> Arc<[u8]> {
        let body: Arc<[u8]> = render(items).into();
        self.texts.insert(
            d,
            Text {
                body: body.clone(),
                built_s: now_s,
                walking_since_s: None,
            },
        );
        body
    }
}

/// A text as the answer.
pub fn answer(out: &mut Vec<u8>, body: &[u8], f: Framing<'_>) {
    let r = Response {
        status: Status::Ok,
        headers: &[],
        content_type: Some("text/plain; charset=utf-8"),
        body,
    };
    encode::encode_response(out, &r, f);
}

/// The walk over domain `d`'s crawlable links.
fn walk_of(d: u32) -> ListWalk {
    ListWalk {
        shard: 0,
        after: None,
        limit: MAX_ROBOTS_ALLOWS,
        items: Vec::new(),
        filter: Arc::new(ListFilter {
            domains: Some(vec![d]),
            crawlable_only: true,
            ..Default::default()
        }),
        scan: None,
    }
}

/// The text: an `Allow` line per crawlable link, then `Disallow: /`.
pub fn render(items: &[LinkInfo]) -> Vec<u8> {
    if items.is_empty() {
        return ROBOTS_TXT.to_vec();
    }
    let mut out = String::with_capacity(HEAD.len() + items.len() * 24 + 16);
    out.push_str(HEAD);
    for i in items {
        let key = shards::link::split_stored_key(i.key.as_bytes()).1;
        out.push_str("Allow: /");
        out.push_str(std::str::from_utf8(key).expect("keys are ASCII"));
        out.push_str("$\n");
    }
    out.push_str("Disallow: /\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::key::InlineKey;

    fn link(stored: &str) -> LinkInfo {
        LinkInfo {
            key: InlineKey::new(stored.as_bytes()).unwrap(),
            target: Arc::from("https://example.com/"),
            status: Default::default(),
            created_at_s: 0,
            created_tag: 0,
            expires_at_s: 0,
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        }
    }

    #[test]
    fn texts_allow_each_key_exactly_and_disallow_the_rest() {
        assert_eq!(render(&[]), ROBOTS_TXT);
        let text = String::from_utf8(render(&[link("abc"), link("3.x_Y-z")])).unwrap();
        assert!(text.starts_with("# For more"), "{text}");
        assert!(
            text.ends_with("User-agent: *\nAllow: /abc$\nAllow: /x_Y-z$\nDisallow: /\n"),
            "{text}"
        );
    }

    #[test]
    fn a_text_is_kept_for_its_ttl_and_served_stale_while_walked_again() {
        let mut cache = RobotsCache::default();
        let Lookup::Walk(w) = cache.lookup(2, 100) else {
            panic!("nothing kept yet")
        };
        assert_eq!(w.filter.domains, Some(vec![2]));
        assert!(w.filter.crawlable_only);
        assert_eq!(w.limit, MAX_ROBOTS_ALLOWS);
        let body = cache.walked(2, &[link("2.k")], 100);
        let served = |c: &mut RobotsCache, at| match c.lookup(2, at) {
            Lookup::Serve(b) => Some(b),
            Lookup::Walk(_) => None,
        };
        assert_eq!(
            served(&mut cache, 100 + ROBOTS_TTL_S - 1),
            Some(body.clone())
        );
        // Expired: one walk starts; while it runs, the old text is served.
        assert!(served(&mut cache, 100 + ROBOTS_TTL_S).is_none());
        assert_eq!(served(&mut cache, 100 + ROBOTS_TTL_S), Some(body));
        let fresh = cache.walked(2, &[], 100 + ROBOTS_TTL_S);
        assert_eq!(&fresh[..], ROBOTS_TXT);
        assert_eq!(served(&mut cache, 101 + ROBOTS_TTL_S), Some(fresh.clone()));
        // A walk that never ends (its connection went away) is walked again after the TTL.
        let later = 100 + 2 * ROBOTS_TTL_S;
        assert!(served(&mut cache, later).is_none());
        assert_eq!(served(&mut cache, later + ROBOTS_TTL_S - 1), Some(fresh));
        assert!(served(&mut cache, later + ROBOTS_TTL_S).is_none());
        // Another domain has its own text.
        assert!(served(&mut cache, 101 + ROBOTS_TTL_S).is_some());
        assert!(matches!(cache.lookup(0, 101), Lookup::Walk(_)));
    }
}
