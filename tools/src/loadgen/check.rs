//! Is a response the right answer to its request?

use super::links::Dataset;
use super::request::Expect;

/// Status a create must answer with.
pub const CREATED_STATUS: u16 = 201;

/// Status an unknown key must answer with.
pub const NOT_FOUND_STATUS: u16 = 404;

/// Result of checking one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The expected answer.
    Ok,
    /// Status differs from the expected one.
    WrongStatus,
    /// Redirect status right but `Location` differs from the dataset URL.
    WrongLocation,
    /// Redirect status right but no `Location` header.
    MissingLocation,
}

/// Checks `status` and `location` against what `expect` requires.
pub fn check(expect: Expect, data: &Dataset, status: u16, location: Option<&[u8]>) -> Verdict {
    match expect {
        Expect::Link(i) => {
            let i = i as usize;
            if status != data.status(i) {
                Verdict::WrongStatus
            } else {
                match location {
                    None => Verdict::MissingLocation,
                    Some(l) if l == data.url(i) => Verdict::Ok,
                    Some(_) => Verdict::WrongLocation,
                }
            }
        }
        Expect::Unknown(_) if status == NOT_FOUND_STATUS => Verdict::Ok,
        Expect::Create(_) if status == CREATED_STATUS => Verdict::Ok,
        Expect::Unknown(_) | Expect::Create(_) => Verdict::WrongStatus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let d =
            Dataset::parse(b"abc\thttps://a.com/x\nk2\thttps://b.com/\t301\n".to_vec()).unwrap();
        let a = Some(&b"https://a.com/x"[..]);
        assert_eq!(check(Expect::Link(0), &d, 302, a), Verdict::Ok);
        assert_eq!(check(Expect::Link(0), &d, 301, a), Verdict::WrongStatus);
        assert_eq!(check(Expect::Link(0), &d, 404, None), Verdict::WrongStatus);
        assert_eq!(
            check(Expect::Link(0), &d, 302, None),
            Verdict::MissingLocation
        );
        assert_eq!(
            check(Expect::Link(0), &d, 302, Some(b"https://a.com/y")),
            Verdict::WrongLocation
        );
        assert_eq!(
            check(Expect::Link(0), &d, 302, Some(b"https://a.com/x/")),
            Verdict::WrongLocation
        );
        assert_eq!(
            check(Expect::Link(1), &d, 301, Some(b"https://b.com/")),
            Verdict::Ok
        );
        assert_eq!(
            check(Expect::Link(1), &d, 302, Some(b"https://b.com/")),
            Verdict::WrongStatus
        );
        assert_eq!(check(Expect::Unknown(1), &d, 404, None), Verdict::Ok);
        assert_eq!(check(Expect::Unknown(1), &d, 302, a), Verdict::WrongStatus);
        assert_eq!(check(Expect::Create(1), &d, 201, None), Verdict::Ok);
        assert_eq!(
            check(Expect::Create(1), &d, 401, None),
            Verdict::WrongStatus
        );
    }
}
