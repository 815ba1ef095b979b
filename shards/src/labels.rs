//! A link's labels: its title and its tags (issue 28; Shlink's `title` and `tags`). The
//! redirect path never reads them; the APIs, lists, exports and imports do. Most links have
//! none and their records carry nothing; a link with some carries one block after its rules
//! block (or whatever block comes last), flagged by [`LABELS_FLAG`], in tables and logs alike:
//!
//! ```text
//! 0      2           4        4+t    5+t                 ...
//! | len  | title_len | title  | n    | tag_len | tag | ... (n tags)
//!  u16 LE  u16 LE      UTF-8    u8     u8        UTF-8
//! ```
//!
//! `len` counts the bytes after itself. The block is kept in one canonical form, which
//! [`decode_block`] checks (so decoding then encoding gives back the same bytes): the title
//! trimmed and not empty when present, tags normalized ([`normalize_tag`]), sorted, without
//! duplicates, not both absent. Memory holds the block's body shared ([`Labels`]): cloning
//! a link's labels copies a pointer.

use std::sync::Arc;

/// The `flags` bit (tables and logs) saying a labels block follows the other blocks.
pub const LABELS_FLAG: u32 = 1 << 27;

/// Bytes of a title at most (Shlink's column holds 512 characters).
pub const MAX_TITLE_BYTES: usize = 512;

/// Tags one link carries at most.
pub const MAX_TAGS_PER_LINK: usize = 16;

/// Bytes of one tag at most, after normalization.
pub const MAX_TAG_BYTES: usize = 64;

/// Labels a request or a file gave that cannot be kept: what is wrong, for a 400/422 or an
/// import's line error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelsError(pub String);

impl std::fmt::Display for LabelsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tag as ricochet keeps it: trimmed, lowercase, each run of whitespace one `-` (as Shlink
/// normalizes them), so `Summer Sale` and `summer-sale` are one tag. Refused: empty, longer
/// than [`MAX_TAG_BYTES`], or holding a control character.
pub fn normalize_tag(raw: &str) -> Result<String, LabelsError> {
    let mut tag = String::with_capacity(raw.len());
    for word in raw.split_whitespace() {
        if !tag.is_empty() {
            tag.push('-');
        }
        tag.extend(word.chars().flat_map(char::to_lowercase));
    }
    if tag.is_empty() {
        return Err(LabelsError("a tag is empty".into()));
    }
    if tag.chars().any(char::is_control) {
        return Err(LabelsError(format!(
            "tag {tag:?} holds a control character"
        )));
    }
    if tag.len() > MAX_TAG_BYTES {
        return Err(LabelsError(format!(
            "tag {tag:?} is longer than {MAX_TAG_BYTES} bytes"
        )));
    }
    Ok(tag)
}

/// A title as ricochet keeps it: trimmed; `None` when empty. Refused: longer than
/// [`MAX_TITLE_BYTES`] or holding a control character.
pub fn normalize_title(raw: &str) -> Result<Option<String>, LabelsError> {
    let title = raw.trim();
    if title.chars().any(char::is_control) {
        return Err(LabelsError("the title holds a control character".into()));
    }
    if title.len() > MAX_TITLE_BYTES {
        return Err(LabelsError(format!(
            "the title is longer than {MAX_TITLE_BYTES} bytes"
        )));
    }
    Ok((!title.is_empty()).then(|| title.to_owned()))
}

/// A link's title and tags as memory holds them: the canonical block body, shared (`None`:
/// neither). A thin pointer: a memtable entry grows by 8 bytes, not 16.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels(Option<Arc<Vec<u8>>>);

impl Labels {
    /// No title, no tags.
    pub const NONE: Labels = Labels(None);

    /// Labels from a request or a file: the title and tags normalized ([`normalize_title`],
    /// [`normalize_tag`]), tags sorted and deduplicated, at most [`MAX_TAGS_PER_LINK`].
    pub fn new<S: AsRef<str>>(title: Option<&str>, tags: &[S]) -> Result<Labels, LabelsError> {
        let title = match title {
            Some(t) => normalize_title(t)?,
            None => None,
        };
        let mut kept = tags
            .iter()
            .map(|t| normalize_tag(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        kept.sort_unstable();
        kept.dedup();
        if kept.len() > MAX_TAGS_PER_LINK {
            return Err(LabelsError(format!(
                "{} tags; a link carries at most {MAX_TAGS_PER_LINK}",
                kept.len()
            )));
        }
        Ok(Labels::of_normal(title.as_deref(), &kept))
    }

    /// Labels of an already normalized title and sorted, deduplicated tags.
    fn of_normal(title: Option<&str>, tags: &[String]) -> Labels {
        if title.is_none() && tags.is_empty() {
            return Labels::NONE;
        }
        let title = title.unwrap_or("");
        let mut body =
            Vec::with_capacity(3 + title.len() + tags.iter().map(|t| 1 + t.len()).sum::<usize>());
        body.extend_from_slice(&(title.len() as u16).to_le_bytes());
        body.extend_from_slice(title.as_bytes());
        body.push(tags.len() as u8);
        for t in tags {
            body.push(t.len() as u8);
            body.extend_from_slice(t.as_bytes());
        }
        Labels(Some(Arc::new(body)))
    }

    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// The labels, borrowed.
    pub fn as_ref(&self) -> LabelsRef<'_> {
        LabelsRef(self.0.as_deref().map_or(&[][..], Vec::as_slice))
    }

    /// The title, if any.
    pub fn title(&self) -> Option<&str> {
        self.as_ref().title()
    }

    /// The tags, sorted.
    pub fn tags(&self) -> Tags<'_> {
        self.as_ref().tags()
    }

    /// Whether it carries tag `tag` (normalized).
    pub fn has_tag(&self, tag: &str) -> bool {
        self.as_ref().has_tag(tag)
    }

    /// These labels with the title replaced (`None` clears it).
    pub fn with_title(&self, title: Option<&str>) -> Result<Labels, LabelsError> {
        let tags: Vec<&str> = self.tags().collect();
        Labels::new(title, &tags)
    }

    /// These labels with the tags replaced.
    pub fn with_tags<S: AsRef<str>>(&self, tags: &[S]) -> Result<Labels, LabelsError> {
        Labels::new(self.title(), tags)
    }

    /// These labels with tags `from` taken off and `to` put on in their place (all
    /// normalized), if they carry any of `from`; `None` if they carry none (a tag rename is
    /// one `from` and a `to`, a removal no `to`).
    pub fn retagged<S: AsRef<str>>(&self, from: &[S], to: Option<&str>) -> Option<Labels> {
        let taken = |t: &str| from.iter().any(|f| f.as_ref() == t);
        if !self.tags().any(taken) {
            return None;
        }
        let mut tags: Vec<String> = self
            .tags()
            .filter(|t| !taken(t))
            .chain(to)
            .map(str::to_owned)
            .collect();
        tags.sort_unstable();
        tags.dedup();
        Some(Labels::of_normal(self.title(), &tags))
    }

    /// The flags bit a record with these labels carries ([`LABELS_FLAG`] or 0).
    pub fn flag(&self) -> u32 {
        match self.0 {
            Some(_) => LABELS_FLAG,
            None => 0,
        }
    }

    /// Bytes the block takes in a record (0 for none).
    pub fn block_len(&self) -> usize {
        self.0.as_deref().map_or(0, |b| 2 + b.len())
    }

    /// Appends the block (nothing for none).
    pub fn encode_block(&self, out: &mut Vec<u8>) {
        if let Some(body) = self.0.as_deref() {
            out.extend_from_slice(&(body.len() as u16).to_le_bytes());
            out.extend_from_slice(body);
        }
    }

    /// The labels of a block's body as a table holds it ([`block_in_table`]); `NONE` for a
    /// body not in canonical form (only a forged table holds one: its CRC vouches for the
    /// rest).
    pub fn from_body(body: &[u8]) -> Labels {
        let checked = LabelsRef::from_table(body).0;
        match checked.is_empty() {
            true => Labels::NONE,
            false => Labels(Some(Arc::new(checked.to_vec()))),
        }
    }

    /// `{"title": ..., "tags": [...]}` members as the APIs and NDJSON write them.
    pub fn json_members(&self, into: &mut serde_json::Map<String, serde_json::Value>) {
        into.insert("title".into(), self.title().into());
        into.insert(
            "tags".into(),
            self.tags().map(serde_json::Value::from).collect(),
        );
    }
}

/// A link's labels, borrowed: a checked block body (empty: none), from memory or a table.
#[derive(Clone, Copy, Debug)]
pub struct LabelsRef<'a>(&'a [u8]);

impl<'a> LabelsRef<'a> {
    /// The labels of a table record's block body ([`block_in_table`]); none for a body not
    /// in canonical form (only a forged table holds one: its CRC vouches for the rest).
    pub fn from_table(body: &'a [u8]) -> LabelsRef<'a> {
        match check_body(body) {
            Ok(()) => LabelsRef(body),
            Err(_) => LabelsRef(&[]),
        }
    }

    /// The title, if any.
    pub fn title(self) -> Option<&'a str> {
        let body = self.0;
        if body.is_empty() {
            return None;
        }
        let len = usize::from(u16::from_le_bytes([body[0], body[1]]));
        let title = std::str::from_utf8(&body[2..2 + len]).expect("checked when made");
        (!title.is_empty()).then_some(title)
    }

    /// The tags, sorted.
    pub fn tags(self) -> Tags<'a> {
        let body = self.0;
        if body.is_empty() {
            return Tags { rest: &[], left: 0 };
        }
        let len = usize::from(u16::from_le_bytes([body[0], body[1]]));
        Tags {
            left: body[2 + len],
            rest: &body[3 + len..],
        }
    }

    /// Whether it carries tag `tag` (normalized).
    pub fn has_tag(self, tag: &str) -> bool {
        self.tags().any(|t| t == tag)
    }
}

/// A link's tags, in order.
pub struct Tags<'a> {
    rest: &'a [u8],
    left: u8,
}

impl<'a> Iterator for Tags<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let len = usize::from(self.rest[0]);
        let tag = std::str::from_utf8(&self.rest[1..1 + len]).expect("checked when made");
        self.rest = &self.rest[1 + len..];
        Some(tag)
    }
}

/// A labels block at the start of `b` as a table read takes it: its body, bounds checked,
/// not parsed (the API parses it with [`Labels::from_body`]; the redirect path skips it), and
/// the bytes the block took.
#[inline]
pub fn block_in_table(b: &[u8]) -> Option<(&[u8], usize)> {
    let len = usize::from(u16::from_le_bytes([*b.first()?, *b.get(1)?]));
    let body = b.get(2..2 + len)?;
    Some((body, 2 + len))
}

/// Reads a labels block at the start of `b` (a log record): the labels and the bytes the
/// block took; an error for a block not in canonical form.
pub fn decode_block(b: &[u8]) -> Result<(Labels, usize), String> {
    let (body, len) = block_in_table(b).ok_or("short labels block")?;
    check_body(body).map_err(|e| format!("labels: {e}"))?;
    Ok((Labels(Some(Arc::new(body.to_vec()))), len))
}

/// Whether `body` is a block body in canonical form.
fn check_body(body: &[u8]) -> Result<(), String> {
    let title_len = usize::from(u16::from_le_bytes([
        *body.first().ok_or("empty")?,
        *body.get(1).ok_or("short")?,
    ]));
    let title = body.get(2..2 + title_len).ok_or("short title")?;
    let title = std::str::from_utf8(title).map_err(|_| "title not UTF-8")?;
    if normalize_title(title).map_err(|e| e.0)?.as_deref() != (!title.is_empty()).then_some(title) {
        return Err("title not in canonical form".into());
    }
    let n = usize::from(*body.get(2 + title_len).ok_or("no tag count")?);
    let mut rest = &body[3 + title_len..];
    let mut last: Option<&str> = None;
    for _ in 0..n {
        let len = usize::from(*rest.first().ok_or("short tag")?);
        let tag = rest.get(1..1 + len).ok_or("short tag")?;
        let tag = std::str::from_utf8(tag).map_err(|_| "tag not UTF-8")?;
        if normalize_tag(tag).ok().as_deref() != Some(tag) || last.is_some_and(|l| l >= tag) {
            return Err(format!("tag {tag:?} not in canonical form or order"));
        }
        last = Some(tag);
        rest = &rest[1 + len..];
    }
    if !rest.is_empty() {
        return Err("bytes after the tags".into());
    }
    if title.is_empty() && n == 0 {
        return Err("a block with neither title nor tags".into());
    }
    if n > MAX_TAGS_PER_LINK {
        return Err(format!("{n} tags"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tags_are_normalized_sorted_and_deduplicated() {
        let l = Labels::new(
            Some("  Summer  "),
            &["Summer Sale", "b", "summer-sale", " B "],
        )
        .unwrap();
        assert_eq!(l.title(), Some("Summer"));
        assert_eq!(l.tags().collect::<Vec<_>>(), ["b", "summer-sale"]);
        assert!(l.has_tag("b"));
        assert_eq!(Labels::new::<&str>(Some("  "), &[]).unwrap(), Labels::NONE);
    }

    #[test]
    fn limits_are_refused() {
        let many: Vec<String> = (0..=MAX_TAGS_PER_LINK).map(|i| format!("t{i}")).collect();
        assert!(Labels::new(None, &many).is_err());
        assert!(Labels::new(None, &many[..MAX_TAGS_PER_LINK]).is_ok());
        assert!(Labels::new(None, &["x".repeat(MAX_TAG_BYTES + 1)]).is_err());
        assert!(Labels::new::<&str>(Some(&"x".repeat(MAX_TITLE_BYTES + 1)), &[]).is_err());
        assert!(Labels::new(None, &["  "]).is_err());
        assert!(Labels::new(None, &["a\u{7}b"]).is_err());
        assert!(Labels::new::<&str>(Some("a\nb"), &[]).is_err());
    }

    #[test]
    fn rename_and_removal_keep_the_canonical_form() {
        let l = Labels::new(Some("t"), &["a", "c"]).unwrap();
        let r = l.retagged(&["a"], Some("d")).unwrap();
        assert_eq!(r.tags().collect::<Vec<_>>(), ["c", "d"]);
        assert_eq!(
            l.retagged(&["a"], Some("c"))
                .unwrap()
                .tags()
                .collect::<Vec<_>>(),
            ["c"]
        );
        assert!(l.retagged(&["x"], Some("y")).is_none());
        let only = Labels::new::<&str>(None, &["a"]).unwrap();
        assert_eq!(only.retagged::<&str>(&["a"], None).unwrap(), Labels::NONE);
        // Several taken off at once, one of them not carried.
        assert_eq!(
            l.retagged(&["a", "c", "z"], None).unwrap().title(),
            Some("t")
        );
        for x in [r, l.retagged::<&str>(&["c"], None).unwrap()] {
            let mut b = Vec::new();
            x.encode_block(&mut b);
            assert_eq!(decode_block(&b).unwrap(), (x.clone(), b.len()));
        }
    }

    #[test]
    fn blocks_not_in_canonical_form_are_refused() {
        let mut b = Vec::new();
        Labels::new(None, &["a", "b"]).unwrap().encode_block(&mut b);
        let good = b.clone();
        // Swapped tags: out of order.
        let n = b.len();
        b.swap(n - 1, n - 3);
        assert!(decode_block(&b).is_err());
        // Uppercase tag.
        let mut b = good.clone();
        b[n - 1] = b'B';
        assert!(decode_block(&b).is_err());
        // Neither title nor tags.
        assert!(decode_block(&[3, 0, 0, 0, 0]).is_err());
        assert!(decode_block(&good[..n - 1]).is_err());
        assert_eq!(Labels::from_body(&[0, 0, 0]), Labels::NONE);
    }

    proptest! {
        #[test]
        fn any_labels_round_trip_through_their_block(
            title in proptest::option::of("[ a-zA-Z0-9é]{0,40}"),
            tags in proptest::collection::vec("[ a-zA-Z0-9ß-]{0,20}", 0..20),
        ) {
            let Ok(l) = Labels::new(title.as_deref(), &tags) else { return Ok(()) };
            let mut b = Vec::new();
            l.encode_block(&mut b);
            prop_assert_eq!(b.len(), l.block_len());
            if l.is_none() {
                prop_assert!(b.is_empty());
                return Ok(());
            }
            let (back, len) = decode_block(&b).unwrap();
            prop_assert_eq!(len, b.len());
            prop_assert_eq!(&back, &l);
            // Normalizing again changes nothing.
            let again = Labels::new(back.title(), &back.tags().collect::<Vec<_>>()).unwrap();
            prop_assert_eq!(again, l);
        }
    }
}
