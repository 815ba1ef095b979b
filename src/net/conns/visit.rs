//! What a redirect's answer depends on besides the link: how the visit reshapes the
//! `Location` (`http::location`), and the request fields a link's redirect rules look at
//! (`shards::rules`). Borrowed from the request while it is at hand, or from the bytes its
//! connection kept for a forwarded lookup ([`super::answers::Answers::keep`]).

use crate::http::location::Reshape;

/// A visit as its answer needs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Visit<'a> {
    pub reshape: Reshape<'a>,
    pub user_agent: &'a [u8],
    pub accept_language: &'a [u8],
    /// The last `X-Forwarded-For` (empty: none), for `--client-ip x-forwarded-for`.
    pub forwarded_for: &'a [u8],
}

/// Where a core finds a visitor's address and country for redirect rules: the analytics'
/// `--client-ip` source and `--geoip` database.
#[derive(Clone, Default)]
pub struct VisitorSource {
    pub client_ip: crate::analytics::ClientIp,
    pub geoip: Option<crate::analytics::GeoIp>,
}

impl VisitorSource {
    pub fn new(
        client_ip: crate::analytics::ClientIp,
        geoip: Option<crate::analytics::GeoIp>,
    ) -> VisitorSource {
        VisitorSource { client_ip, geoip }
    }

    /// The first of `rules` the visit matches, from `peer` (the connection's address) at
    /// `now_s`. No allocation (the GeoIP lookup decodes a borrowed `&str`).
    #[cold]
    #[inline(never)]
    pub fn first_match<'r>(
        &self,
        rules: shards::rules::RuleSet<'r>,
        v: &Visit<'_>,
        peer: [u8; 16],
        now_s: u64,
    ) -> Option<shards::rules::Match<'r>> {
        let xff = (!v.forwarded_for.is_empty()).then_some(v.forwarded_for);
        let visitor = shards::rules::Visitor {
            user_agent: v.user_agent,
            accept_language: v.accept_language,
            query: v.reshape.query,
            ip: crate::analytics::client_ip(self.client_ip, peer, xff),
            now_s,
        };
        rules.first_match(&visitor, &mut |ip| self.country(ip))
    }

    /// The ISO 3166 code of `ip`'s country, if `--geoip` knows it.
    fn country(&self, ip: &[u8; 16]) -> Option<[u8; 2]> {
        let db = self.geoip.as_ref()?;
        let addr = shards::rules::ip_addr(ip);
        let path = [
            maxminddb::PathElement::Key("country"),
            maxminddb::PathElement::Key("iso_code"),
        ];
        let code: &str = db.lookup(addr).ok()?.decode_path(&path).ok()??;
        <[u8; 2]>::try_from(code.as_bytes()).ok()
    }
}
