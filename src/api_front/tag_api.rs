//! The native API's tags:
//!
//! - `GET /api/v1/tags` (`?search=`): every tag the key's links carry, by name, with the links
//!   carrying it and their clicks over the click window;
//! - `PATCH /api/v1/tags/{tag}` (`{"name": "new-name"}`): the tag renamed on every link that
//!   carries it (404 if none does, 409 `tag-conflict` if a link carries the new name);
//! - `DELETE /api/v1/tags/{tag}`: the tag removed from every link (204 even if none had it).
//!
//! Edits are for admin keys (403 `admin-only`), as Shlink's are. The walks, their bounds
//! (`tags::MAX_TAGGED_LINKS`) and the answers are `tags.rs`'s, shared with Shlink's
//! `/rest/v3/tags` endpoints, which start them through [`ApiFront::start_tag_list`] and
//! [`ApiFront::start_tag_edit`] too.

use super::tags::{TagEdit, TagParams, TagsPath, TagsWalk};
use super::{overview_walk, ApiFront, ApiOp, Defer};
use crate::api::problem::Problem;
use crate::api::request::Retag;
use crate::api::roles::Reach;
use crate::http::parse::{Method, Request};
use crate::mesh::Mesh;
use std::sync::Arc;

impl ApiFront {
    /// A native tag request, admitted (method, key; a read-only key's edit refused).
    pub(super) fn start_tags(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        (req, body): (&Request<'_>, &[u8]),
        (path, admin, reach): (TagsPath<'_>, bool, &Reach),
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let raw = match path {
            TagsPath::List => {
                let params = TagParams::native(req.query)?;
                let walk = overview_walk(reach);
                self.start_tag_list(out, defer, TagsWalk::native(walk, params), mesh);
                return Ok(());
            }
            TagsPath::One(raw) => raw,
        };
        if !admin {
            let mut p = Problem::admin_only();
            p.detail = "tags are renamed and removed by admin keys only".into();
            return Err(p);
        }
        let tag = super::visit_walk::percent_decoded(raw);
        let tag = shards::labels::normalize_tag(&tag)
            .map_err(|e| Problem::invalid_field(Some("tag"), format!("the path's tag: {e}")))?;
        let retag = match req.method {
            Method::Patch => Retag {
                from: vec![tag],
                to: Some(new_name(body)?),
            },
            _ => Retag {
                from: vec![tag],
                to: None,
            },
        };
        let mut edit = TagEdit::new(overview_walk(reach), retag);
        edit.native = true;
        self.start_tag_edit(out, defer, edit, mesh);
        Ok(())
    }

    /// A tag list's walk over the tagged links its `walk` reaches.
    pub(super) fn start_tag_list(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        mut list: TagsWalk,
        mesh: &mut Mesh,
    ) {
        Arc::make_mut(&mut list.walk.filter).tagged = true;
        let first = list.walk.clone_empty();
        let reply = defer(out, ApiOp::Tags(Box::new(list)));
        self.ask_walk(reply, &first, mesh);
    }

    /// A tag edit's walk over the links its walk reaches that carry its tags (old and new:
    /// a rename checks that no link has the new one).
    pub(super) fn start_tag_edit(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        mut edit: TagEdit,
        mesh: &mut Mesh,
    ) {
        let mut wanted: Vec<Box<str>> = edit
            .retag()
            .from
            .iter()
            .map(|t| t.as_str().into())
            .collect();
        wanted.extend(edit.retag().to.as_deref().map(Box::from));
        Arc::make_mut(&mut edit.walk.filter).tags = Some(crate::mesh::TagFilter {
            tags: wanted,
            all: false,
        });
        let first = edit.walk.clone_empty();
        let reply = defer(out, ApiOp::TagEdit(Box::new(edit)));
        self.ask_walk(reply, &first, mesh);
    }
}

/// A rename's body: `{"name": "new-name"}` (normalized as a link's tags are).
fn new_name(body: &[u8]) -> Result<String, Problem> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Problem::bad_json(format!("the body is not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| Problem::bad_json("the body is not a JSON object"))?;
    if let Some(other) = obj.keys().find(|k| *k != "name") {
        return Err(Problem::invalid_field(
            None,
            format!("unknown member {other:?} (name)"),
        ));
    }
    let name = obj
        .get("name")
        .and_then(|n| n.as_str())
        .ok_or_else(|| Problem::invalid_field(Some("name"), "name must be a string"))?;
    shards::labels::normalize_tag(name).map_err(|e| Problem::invalid_field(Some("name"), e.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_body_names_the_new_tag() {
        assert_eq!(new_name(br#"{"name": "Go Live"}"#).unwrap(), "go-live");
        assert_eq!(new_name(b"[]").unwrap_err().status, 400);
        assert_eq!(new_name(br#"{"name": 1}"#).unwrap_err().field, Some("name"));
        assert_eq!(new_name(br#"{"nom": "x"}"#).unwrap_err().status, 422);
        assert_eq!(
            new_name(br#"{"name": ""}"#).unwrap_err().field,
            Some("name")
        );
    }
}
