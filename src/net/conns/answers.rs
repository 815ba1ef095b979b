//! The answers of one connection's batch of pipelined requests, kept in request order.
//!
//! A request answered at once (a local hit, an LRU hit, a 404, a health check) is encoded
//! straight onto the end of the connection's output buffer. A request whose answer must come
//! from another core (a forwarded lookup, an API request) is *deferred*: [`Answers::defer`]
//! notes where its answer belongs (the output's length at that moment) and later answers are
//! appended after that point. When the owner replies, [`Answers::fill`] splices the bytes in at
//! that point and moves the insertion point of every request that came *after* it, and only
//! those.
//!
//! ```text
//!  requests:  r0 (deferred)  r1 (deferred)  r2 (at once)  r3 (deferred)
//!  out:       |             |              |a2|          |
//!  points:    r0@0          r1@0                         r3@len(a2)
//!  r1 fills:  |a1|a2|       r0@0 (before r1: unchanged)  r3@len(a1)+len(a2)
//!  r0 fills:  |a0|a1|a2|                                 r3@len(a0)+len(a1)+len(a2)
//! ```
//!
//! Two deferred requests parsed back to back share one insertion point; which of them came
//! first is their order in `pending`, not their point. Moving every point `>=` the filled one
//! (the rule this module replaced) put a later request's answer before an earlier one's
//! whenever the later one completed first: a response desync. `tests` checks the order
//! against a model for random completion orders.
//!
//! Sans-IO: no sockets, no core state; `core` drives it.

use crate::api_front::ApiOp;
use crate::http::encode::{Conn as Persist, Framing};
use crate::http::DateCache;
use crate::net::conns::visit::Visit;

/// What kind of answer a deferred request waits for.
#[derive(Debug)]
pub enum PendingKind {
    /// A redirect lookup forwarded to the key's owner, with the click it counts if answered
    /// with a redirect (`None`: not counted, e.g. HEAD or analytics off), and how the visit
    /// reshapes its `Location` and what its rules look at (kept in [`Answers`]' bytes).
    Redirect(Option<crate::analytics::combiner::Click>, KeptVisit),
    /// An API request (read or write) sent to its owner.
    Api(Box<ApiOp>),
}

/// A deferred request waiting for its owner's answer.
#[derive(Debug)]
pub struct Pending {
    /// The request's sequence number on this connection (echoed by the owner).
    pub seq: u32,
    /// Where in the output its answer goes. Private: only [`Answers::fill`] may move it.
    offset: usize,
    /// A HEAD request: its answer has no body.
    pub head: bool,
    pub persist: Persist,
    /// An API answer's `Access-Control-Allow-Origin` (`api::cors`).
    pub cors: Option<&'static str>,
    pub kind: PendingKind,
}

impl Pending {
    /// How its answer goes out: as its request asked, with today's `date`.
    pub fn framing<'d>(&self, date: &'d DateCache) -> Framing<'d> {
        Framing {
            head_only: self.head,
            conn: self.persist,
            date,
            cors: self.cors,
        }
    }
}

/// A deferred redirect's [`Visit`], its bytes kept by [`Answers::keep`] (the request's own
/// bytes are gone by the time the owner answers): where they start, and each part's length.
/// The default keeps nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeptVisit {
    at: u32,
    /// Lengths of the extra path, query, `User-Agent`, `Accept-Language`, `X-Forwarded-For`.
    lens: [u16; 5],
}

// Each part is a slice of one request's head, which `http::limits` bounds below 64 KiB.
const _: () = assert!(
    crate::http::limits::MAX_REQUEST_LINE_BYTES + crate::http::limits::MAX_HEADER_BYTES
        <= u16::MAX as usize
);

/// The deferred requests of a connection's current batch, in request order.
#[derive(Debug, Default)]
pub struct Answers {
    /// Ordered by request arrival; offsets are therefore non-decreasing.
    pending: Vec<Pending>,
    /// Sequence number for the next deferred request.
    next_seq: u32,
    /// The visit bytes of deferred redirects ([`KeptVisit`]): emptied (capacity kept,
    /// so no allocation once warm) when nothing is deferred. At most the batch's requests'
    /// bytes, which `INBUF_PAUSE_BYTES` bounds.
    kept: Vec<u8>,
}

impl Answers {
    pub fn new() -> Answers {
        Answers::default()
    }

    /// No deferred request is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Deferred requests waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Registers the next request of the batch as deferred; its answer goes where `out` ends
    /// now. Returns its sequence number (for the owner to echo).
    pub fn defer(
        &mut self,
        out: &[u8],
        (head, persist, cors): (bool, Persist, Option<&'static str>),
        kind: PendingKind,
    ) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        debug_assert!(self.pending.last().is_none_or(|p| p.offset <= out.len()));
        self.pending.push(Pending {
            seq,
            offset: out.len(),
            head,
            persist,
            cors,
            kind,
        });
        seq
    }

    /// Keeps `v`'s bytes until the batch's deferred requests are answered (a copy of a few
    /// header fields: no allocation once `kept` has grown).
    pub fn keep(&mut self, v: &Visit<'_>) -> KeptVisit {
        let parts = [
            v.reshape.extra,
            v.reshape.query,
            v.user_agent,
            v.accept_language,
            v.forwarded_for,
        ];
        let at = self.kept.len() as u32;
        let mut lens = [0u16; 5];
        for (len, part) in lens.iter_mut().zip(parts) {
            self.kept.extend_from_slice(part);
            *len = part.len() as u16;
        }
        KeptVisit { at, lens }
    }

    /// The visit `k` keeps.
    #[inline]
    pub fn visit_of(&self, k: KeptVisit) -> Visit<'_> {
        let mut at = k.at as usize;
        let mut parts = [&b""[..]; 5];
        for (part, len) in parts.iter_mut().zip(k.lens) {
            let end = at + usize::from(len);
            *part = &self.kept[at..end];
            at = end;
        }
        let [extra, query, user_agent, accept_language, forwarded_for] = parts;
        Visit {
            reshape: crate::http::location::Reshape { extra, query },
            user_agent,
            accept_language,
            forwarded_for,
        }
    }

    /// The waiting request `seq`, if any (a stale or duplicate answer finds none).
    pub fn get_mut(&mut self, seq: u32) -> Option<&mut Pending> {
        self.pending.iter_mut().find(|p| p.seq == seq)
    }

    /// The waiting request `seq`, if any.
    pub fn get(&self, seq: u32) -> Option<&Pending> {
        self.pending.iter().find(|p| p.seq == seq)
    }

    /// Writes `bytes` as the answer of request `seq` at its place in `out` and moves the places
    /// of the requests after it. Returns the request, or `None` if none is waiting as `seq`
    /// (`out` is then untouched).
    pub fn fill(&mut self, out: &mut Vec<u8>, seq: u32, bytes: &[u8]) -> Option<Pending> {
        let i = self.pending.iter().position(|p| p.seq == seq)?;
        let p = self.pending.remove(i);
        debug_assert!(p.offset <= out.len());
        out.splice(p.offset..p.offset, bytes.iter().copied());
        // Only requests that arrived after `p`: they are exactly the entries from `i` on.
        for later in &mut self.pending[i..] {
            later.offset += bytes.len();
        }
        if self.pending.is_empty() {
            self.kept.clear();
        }
        Some(p)
    }

    /// Forgets every waiting request (the connection is gone).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.kept.clear();
        self.next_seq = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One request of a batch: answered at once, or deferred and answered later.
    #[derive(Clone, Debug)]
    enum Req {
        Now,
        Later,
    }

    fn answer_of(i: usize) -> Vec<u8> {
        // Answers of different lengths, so misplaced offsets show.
        format!("<{i}:{}>", "x".repeat(i % 7)).into_bytes()
    }

    /// Runs a batch: requests in order, deferred ones filled in `order` (a permutation), with
    /// fills interleaved with new requests at `interleave` points.
    fn run(reqs: &[Req], order: &[usize], interleave: &[bool]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut a = Answers::new();
        let mut deferred: Vec<(usize, u32)> = Vec::new(); // (request index, seq)
        let mut to_fill = order.iter().copied().peekable();
        let mut done = Vec::new();
        let mut fill_one = |a: &mut Answers, out: &mut Vec<u8>, deferred: &[(usize, u32)]| {
            // Fill the next deferred request in `order` that exists already.
            if let Some(&k) = to_fill.peek() {
                if k < deferred.len() {
                    to_fill.next();
                    let (i, seq) = deferred[k];
                    assert!(a.fill(out, seq, &answer_of(i)).is_some());
                    done.push(k);
                }
            }
        };
        for (i, r) in reqs.iter().enumerate() {
            match r {
                Req::Now => out.extend_from_slice(&answer_of(i)),
                Req::Later => {
                    let seq = a.defer(
                        &out,
                        (false, Persist::KeepAlive, None),
                        PendingKind::Redirect(None, KeptVisit::default()),
                    );
                    deferred.push((i, seq));
                }
            }
            if interleave.get(i).copied().unwrap_or(false) {
                fill_one(&mut a, &mut out, &deferred);
            }
        }
        while !a.is_empty() {
            let before = a.len();
            fill_one(&mut a, &mut out, &deferred);
            assert!(a.len() < before, "every deferred request is filled once");
        }
        out
    }

    fn expected(n: usize) -> Vec<u8> {
        (0..n).flat_map(answer_of).collect()
    }

    fn batch() -> impl Strategy<Value = (Vec<Req>, Vec<usize>, Vec<bool>)> {
        prop::collection::vec(prop_oneof![Just(Req::Now), Just(Req::Later)], 1..40).prop_flat_map(
            |reqs| {
                let n_later = reqs.iter().filter(|r| matches!(r, Req::Later)).count();
                let order = Just((0..n_later).collect::<Vec<_>>()).prop_shuffle();
                let inter = prop::collection::vec(any::<bool>(), reqs.len());
                (Just(reqs), order, inter)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever order owners answer in, answers leave in request order.
        #[test]
        fn answers_leave_in_request_order((reqs, order, inter) in batch()) {
            let n = reqs.len();
            prop_assert_eq!(run(&reqs, &order, &inter), expected(n));
        }
    }

    #[test]
    fn back_to_back_deferred_requests_completed_in_reverse() {
        // The shape of the reported desync: two deferred requests at one point, the second
        // answered first.
        let reqs = [Req::Later, Req::Later, Req::Now, Req::Later];
        assert_eq!(run(&reqs, &[2, 1, 0], &[]), expected(4));
    }

    #[test]
    fn a_stale_answer_changes_nothing() {
        let mut out = b"abc".to_vec();
        let mut a = Answers::new();
        let seq = a.defer(
            &out,
            (false, Persist::KeepAlive, None),
            PendingKind::Redirect(None, KeptVisit::default()),
        );
        assert!(a.fill(&mut out, seq.wrapping_add(5), b"zz").is_none());
        assert_eq!(out, b"abc");
        assert!(a.fill(&mut out, seq, b"zz").is_some());
        assert!(a.fill(&mut out, seq, b"zz").is_none(), "answered once");
        assert_eq!(out, b"abczz");
    }
}
