//! The status codes ricochet emits. A closed enum: every response's status line is a static
//! byte string, so encoding one is a single copy.

use shards::link::RedirectStatus;

macro_rules! statuses {
    ($($variant:ident = $code:literal, $reason:literal;)*) => {
        /// An HTTP status code ricochet emits, with its reason phrase.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Status {
            $(
                #[doc = concat!(stringify!($code), " ", $reason)]
                $variant = $code,
            )*
        }

        impl Status {
            /// Every status, in code order.
            pub const ALL: &'static [Status] = &[$(Status::$variant),*];

            /// The status for `code`, if ricochet emits it.
            pub fn from_code(code: u16) -> Option<Status> {
                match code {
                    $($code => Some(Status::$variant),)*
                    _ => None,
                }
            }

            /// The reason phrase, e.g. `"Not Found"`.
            pub fn reason(self) -> &'static str {
                match self {
                    $(Status::$variant => $reason,)*
                }
            }

            /// The full status line including its CRLF, e.g. `b"HTTP/1.1 404 Not Found\r\n"`.
            pub fn status_line(self) -> &'static [u8] {
                match self {
                    $(Status::$variant => concat!("HTTP/1.1 ", stringify!($code), " ", $reason, "\r\n").as_bytes(),)*
                }
            }
        }
    };
}

statuses! {
    Ok = 200, "OK";
    Created = 201, "Created";
    NoContent = 204, "No Content";
    MovedPermanently = 301, "Moved Permanently";
    Found = 302, "Found";
    TemporaryRedirect = 307, "Temporary Redirect";
    PermanentRedirect = 308, "Permanent Redirect";
    BadRequest = 400, "Bad Request";
    Unauthorized = 401, "Unauthorized";
    Forbidden = 403, "Forbidden";
    NotFound = 404, "Not Found";
    MethodNotAllowed = 405, "Method Not Allowed";
    Conflict = 409, "Conflict";
    Gone = 410, "Gone";
    LengthRequired = 411, "Length Required";
    PayloadTooLarge = 413, "Content Too Large";
    UriTooLong = 414, "URI Too Long";
    ExpectationFailed = 417, "Expectation Failed";
    UnprocessableContent = 422, "Unprocessable Content";
    TooManyRequests = 429, "Too Many Requests";
    UnavailableForLegalReasons = 451, "Unavailable For Legal Reasons";
    RequestHeaderFieldsTooLarge = 431, "Request Header Fields Too Large";
    InternalServerError = 500, "Internal Server Error";
    NotImplemented = 501, "Not Implemented";
    ServiceUnavailable = 503, "Service Unavailable";
    HttpVersionNotSupported = 505, "HTTP Version Not Supported";
    InsufficientStorage = 507, "Insufficient Storage";
}

impl Status {
    /// The numeric code.
    pub fn code(self) -> u16 {
        self as u16
    }
}

impl From<RedirectStatus> for Status {
    fn from(s: RedirectStatus) -> Status {
        match s {
            RedirectStatus::MovedPermanently => Status::MovedPermanently,
            RedirectStatus::Found => Status::Found,
            RedirectStatus::TemporaryRedirect => Status::TemporaryRedirect,
            RedirectStatus::PermanentRedirect => Status::PermanentRedirect,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_every_required_code() {
        let required = [
            200, 201, 204, 301, 302, 307, 308, 400, 401, 403, 404, 405, 409, 410, 411, 413, 414,
            417, 422, 429, 431, 451, 500, 501, 503, 505, 507,
        ];
        for code in required {
            let s = Status::from_code(code).unwrap_or_else(|| panic!("missing {code}"));
            assert_eq!(s.code(), code);
        }
        assert_eq!(Status::ALL.len(), required.len());
        assert_eq!(Status::from_code(418), None);
    }

    #[test]
    fn status_line_matches_code_and_reason() {
        for &s in Status::ALL {
            let expected = format!("HTTP/1.1 {} {}\r\n", s.code(), s.reason());
            assert_eq!(s.status_line(), expected.as_bytes());
        }
        assert_eq!(
            Status::NotFound.status_line(),
            b"HTTP/1.1 404 Not Found\r\n"
        );
    }

    #[test]
    fn redirect_statuses_map_to_same_code() {
        for code in [301, 302, 307, 308] {
            let r = RedirectStatus::from_code(code).unwrap();
            assert_eq!(Status::from(r).code(), code);
        }
    }
}
