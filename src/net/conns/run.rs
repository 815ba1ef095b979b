//! A run of pipelined `GET`/`HEAD` requests parsed ahead of answering them (`Conns::process`):
//! each one's route found once, and for redirects the domain its `Host` names and the table
//! slot then the record its key would use prefetched, so the run's cache misses overlap
//! instead of being paid one lookup at a time. Parsing ahead is pure; the requests are still
//! answered one by one, in order, by the same code as any other.

use crate::api::domains::HostDomain;
use crate::http::parse::{parse_request, Expect, Method, Request};
use crate::route::{route, Route};

/// Most requests parsed ahead at once: wrk's 16-deep pipeline (perf/) in one run, and few
/// enough that the run's prefetched slots and records are still in L1 when answered.
pub const PARSE_AHEAD: usize = 16;

/// A complete request with its handler, as answering takes it (a run's are `GET`s or
/// `HEAD`s without a body, so their bytes are their heads).
#[derive(Clone, Copy, Debug)]
pub struct Parsed<'b> {
    pub req: Request<'b>,
    pub route: Route<'b>,
    /// For a redirect, its `Host`'s domain once asked (a run's prefetch asks it).
    pub domain: HostDomain,
}

impl<'b> Parsed<'b> {
    /// A request whose domain is not asked yet.
    pub fn new(req: Request<'b>) -> Parsed<'b> {
        Parsed {
            req,
            route: route(&req),
            domain: HostDomain::Unasked,
        }
    }
}

/// Why a run ended before [`PARSE_AHEAD`] requests (or its caller's limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// It holds as many requests as asked.
    Full,
    /// The input ends inside a request (or at its end): wait for more bytes.
    Incomplete,
    /// The next request is of another kind (a body, another method, an expectation) or
    /// malformed: the general path parses it again and answers it or its error.
    Other,
}

/// Up to [`PARSE_AHEAD`] requests from the start of an input, in order.
pub struct Run<'b> {
    items: [Option<Parsed<'b>>; PARSE_AHEAD],
    len: usize,
    pub end: RunEnd,
}

impl<'b> Run<'b> {
    /// Parses at most `most` (≤ [`PARSE_AHEAD`]) bodiless `GET`/`HEAD` requests from the start
    /// of `data`. One that closes the connection ends the run: nothing after it is answered.
    pub fn parse(data: &'b [u8], most: usize) -> Run<'b> {
        debug_assert!(most <= PARSE_AHEAD);
        let mut run = Run {
            items: [const { None }; PARSE_AHEAD],
            len: 0,
            end: RunEnd::Full,
        };
        let mut pos = 0;
        while run.len < most {
            let req = match parse_request(&data[pos..]) {
                Ok(None) => {
                    run.end = RunEnd::Incomplete;
                    return run;
                }
                Ok(Some(req)) if is_bodiless_read(&req) => req,
                Ok(Some(_)) | Err(_) => {
                    run.end = RunEnd::Other;
                    return run;
                }
            };
            pos += req.head_len;
            run.items[run.len] = Some(Parsed::new(req));
            run.len += 1;
            if !req.keep_alive {
                run.end = RunEnd::Other;
                return run;
            }
        }
        run
    }

    /// How many requests it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The requests, in order.
    pub fn items(&self) -> impl Iterator<Item = &Parsed<'b>> {
        self.items[..self.len].iter().flatten()
    }

    /// The requests, in order, for the prefetch to note their domains.
    pub fn items_mut(&mut self) -> impl Iterator<Item = &mut Parsed<'b>> {
        self.items[..self.len].iter_mut().flatten()
    }
}

/// A request whose bytes are only its head and that never changes anything.
fn is_bodiless_read(req: &Request<'_>) -> bool {
    matches!(req.method, Method::Get | Method::Head)
        && req.content_length == 0
        && !req.chunked
        && req.expect == Expect::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_stops_before_a_body_a_close_an_error_or_a_partial_head() {
        let get = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
        let post = "POST /api/v1/links HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        let close = "HEAD /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let cases: [(String, usize, RunEnd); 6] = [
            (get.repeat(3), 3, RunEnd::Incomplete),
            (get.repeat(20), PARSE_AHEAD, RunEnd::Full),
            (format!("{get}{get}{post}{get}"), 2, RunEnd::Other),
            (format!("{get}{close}{get}"), 2, RunEnd::Other),
            (
                format!("{get}GET /a HTTP/1.1\r\nHost: x\r\n"),
                1,
                RunEnd::Incomplete,
            ),
            (format!("{get}GET /a\nHTTP/1.1\r\n\r\n"), 1, RunEnd::Other),
        ];
        for (input, len, end) in cases {
            let run = Run::parse(input.as_bytes(), PARSE_AHEAD);
            assert_eq!((run.len(), run.end), (len, end), "{input:?}");
            let used: usize = run.items().map(|a| a.req.head_len).sum();
            assert!(input.as_bytes()[..used].ends_with(b"\r\n\r\n"));
            assert!(run.items().all(|a| a.domain == HostDomain::Unasked));
        }
        let twenty = get.repeat(20);
        let run = Run::parse(twenty.as_bytes(), 5);
        assert_eq!((run.len(), run.end), (5, RunEnd::Full));
        assert!(matches!(
            run.items().next().unwrap().route,
            Route::Redirect(b"a")
        ));
    }
}
