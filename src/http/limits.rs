//! Size and time limits of the HTTP layer. Each bounds memory or time a single client can hold.

/// Longest request line (method, target and version, excluding the CRLF), in bytes. Default
/// 8192: the common limit of HTTP stacks (nginx, browsers), and it fits any stored link target
/// (`shards::link::MAX_URL_BYTES`) in case a client follows one back to us. Longer → 414.
pub const MAX_REQUEST_LINE_BYTES: usize = 8192;

/// Largest request head (request line, header lines and the final empty line), in bytes.
/// Default 16 KiB: twice the request-line limit leaves room for ordinary headers (cookies,
/// authorization) while bounding the per-connection read buffer. Longer → 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Most header fields in one request. Default 64: real clients send fewer than 20, and the
/// parser's header array lives on the stack, so this also bounds its size. More → 431.
pub const MAX_HEADERS: usize = 64;

/// Most pipelined requests answered from one read batch before the connection yields to others.
/// Default 64: keeps one deep pipeline from starving other connections on the core, while a
/// 16-deep wrk pipeline is still answered in one pass.
pub const MAX_PIPELINED_REQUESTS: usize = 64;

/// Largest request body accepted (API bodies: JSON link creation), in bytes. Default 64 KiB:
/// a link is at most a 64-byte key plus an 8 KiB URL plus a little JSON, so this leaves ample
/// room while bounding buffering per connection. Larger → 413 and close.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Most open connections per core. Default 32768: 65536 connections on a two-core machine,
/// which keeps per-connection state (buffers, slab slots) within a predictable memory budget.
pub const MAX_CONNECTIONS_PER_CORE: usize = 32 * 1024;

/// How long a client may take to send a complete request head once it has started one, in
/// milliseconds. Default 10 s: generous for slow links, short enough to defeat slowloris.
pub const HEADER_TIMEOUT_MS: u64 = 10_000;

/// How long an idle keep-alive connection is kept open between requests, in milliseconds.
/// Default 60 s: longer than typical client pools' idle timeouts (so the client closes first
/// and never races a request into a closing socket), short enough to reclaim abandoned sockets.
pub const IDLE_KEEPALIVE_TIMEOUT_MS: u64 = 60_000;

/// `Cache-Control: max-age` for permanent redirects (301, 308), in seconds. Default 86400
/// (one day): browsers cache permanent redirects hard, so a day bounds how long a mistaken
/// permanent link keeps redirecting clients after it is changed.
pub const PERMANENT_REDIRECT_MAX_AGE_S: u32 = 86_400;
