//! Readers of a program's bytes: [`Walk`] for the redirect path (a short read is `None`,
//! never a panic) and [`Cursor`] for decoding (a short read is an error).

/// A program's reader on the redirect path: `None` where the bytes end too soon.
#[derive(Clone, Copy)]
pub(super) struct Walk<'p> {
    pub(super) b: &'p [u8],
    pub(super) at: usize,
}

impl<'p> Walk<'p> {
    #[inline(always)]
    pub(super) fn take(&mut self, n: usize) -> Option<&'p [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    #[inline(always)]
    pub(super) fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    #[inline(always)]
    pub(super) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    #[inline(always)]
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// `len:u8` then that many bytes.
    #[inline(always)]
    pub(super) fn short_bytes(&mut self) -> Option<&'p [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
}

/// The decoder's reader: a [`Walk`] whose short reads are errors.
pub(super) struct Cursor<'p>(pub(super) Walk<'p>);

pub(super) const SHORT: &str = "rules: short program";

impl<'p> Cursor<'p> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'p [u8], String> {
        self.0.take(n).ok_or_else(|| SHORT.to_string())
    }
    pub(super) fn u8(&mut self) -> Result<u8, String> {
        self.0.u8().ok_or_else(|| SHORT.to_string())
    }
    pub(super) fn u16(&mut self) -> Result<u16, String> {
        self.0.u16().ok_or_else(|| SHORT.to_string())
    }
    pub(super) fn u64(&mut self) -> Result<u64, String> {
        self.0.u64().ok_or_else(|| SHORT.to_string())
    }
}
