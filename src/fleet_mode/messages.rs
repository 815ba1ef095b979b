//! What fleet mode's service threads (the link writer and reader, the follower) hand a core,
//! and what a core answers: through the fleet outlet, a bounded queue and a doorbell.

use crate::base::key::InlineKey;
use shards::link::RedirectStatus;
use std::sync::Arc;

/// Items the fleet outlet queues per core: one feed batch part and the writer's answers; a
/// full queue makes the sender wait (service threads only).
pub const FLEET_OUTLET_CAPACITY: usize = 4096;

/// What the fleet services hand a core.
#[derive(Debug)]
pub enum FleetToCore {
    /// The link writer's answer to one of this core's writes.
    Written(fleet::links::WriteAnswer),
    /// This core's rows of feed batch `batch`.
    Feed { batch: u64, rows: Vec<FeedLink> },
    /// The reader's answer to one of this core's read-through lookups.
    Read(fleet::links::ReadAnswer),
    /// The namespaces' ceilings as just read, for shedding never-issued generated keys.
    Ceilings(Arc<fleet::ceiling::Ceilings>),
    /// Stats resets of keys this core owns (`ricochet_click_resets`): purge each, then ack
    /// `batch` like a feed batch.
    Resets { batch: u64, keys: Vec<InlineKey> },
    /// A step of a live regeneration (`fleet_regen`, `owner/regen.rs`), acked like a batch.
    Regen { batch: u64, step: RegenStep },
}

/// One feed row, checked and in the node's own types.
#[derive(Clone, Debug)]
pub struct FeedLink {
    pub key: InlineKey,
    pub target: Arc<str>,
    pub status: RedirectStatus,
    pub created_at_s: u64,
    pub expires_at_s: u64,
    pub deleted: bool,
    pub version: u64,
    /// The API key that created the link (`Author::NONE`: unknown).
    pub author: shards::link::Author,
    pub behaviour: shards::behaviour::Behaviour,
    pub rules: shards::rules::Rules,
    pub labels: shards::labels::Labels,
}

/// A core applied its rows of a batch (`ok`), or could not (its log is poisoned).
#[derive(Debug)]
pub struct FeedAck {
    pub batch: u64,
    pub core: u16,
    pub ok: bool,
}

/// A feed row in the node's types, if it is a valid link.
/// A feed row as a link, if it is one this node can hold. A tombstone needs only a valid key
/// and version (its other fields are not served): a delete is never skipped for a field it
/// does not use.
pub(crate) fn feed_link(r: &fleet::feed::FeedRow) -> Option<FeedLink> {
    let full = feed_link_fields(r);
    if full.is_some() || !r.deleted {
        return full;
    }
    Some(FeedLink {
        key: InlineKey::new(r.key.as_bytes())?,
        target: Arc::from(""),
        status: RedirectStatus::default(),
        created_at_s: 0,
        expires_at_s: 0,
        deleted: true,
        version: u64::try_from(r.version).ok()?,
        author: shards::link::Author::NONE,
        behaviour: shards::behaviour::Behaviour::NONE,
        rules: shards::rules::Rules::NONE,
        labels: shards::labels::Labels::NONE,
    })
}

fn feed_link_fields(r: &fleet::feed::FeedRow) -> Option<FeedLink> {
    let (behaviour, rules, labels) = behaviour_of(r.behaviour.as_deref()).ok()?;
    Some(FeedLink {
        key: InlineKey::new(r.key.as_bytes())?,
        target: Arc::from(r.target.as_str()),
        status: RedirectStatus::from_code(u16::try_from(r.status).ok()?)?,
        created_at_s: u64::try_from(r.created_at).ok()?,
        expires_at_s: u64::try_from(r.expires_at).ok()?,
        deleted: r.deleted,
        version: u64::try_from(r.version).ok()?,
        author: author_of(&r.author)?,
        behaviour,
        rules,
        labels,
    })
}

/// A database behaviour column (`ricochet_links.behaviour`, a JSON object of the NDJSON
/// members) as a link's behaviour, rules and labels; an error says what in it this node
/// refuses.
pub(crate) fn behaviour_of(
    text: Option<&str>,
) -> Result<
    (
        shards::behaviour::Behaviour,
        shards::rules::Rules,
        shards::labels::Labels,
    ),
    String,
> {
    match text {
        None => Ok((
            shards::behaviour::Behaviour::NONE,
            shards::rules::Rules::NONE,
            shards::labels::Labels::NONE,
        )),
        Some(t) => shards::behaviour::BehaviourJson::from_text(t),
    }
}

/// A link's behaviour, rules and labels as the database's column holds them (`None`: none).
pub(crate) fn behaviour_column(
    b: &shards::behaviour::Behaviour,
    rules: &shards::rules::Rules,
    labels: &shards::labels::Labels,
) -> Option<String> {
    shards::behaviour::json_object(b, rules, labels)
        .map(|o| serde_json::Value::Object(o).to_string())
}

/// A database author column as a link's author: `""` is none; anything but a key id is not a
/// row this node can hold (the column's CHECK keeps them out).
pub(crate) fn author_of(text: &str) -> Option<shards::link::Author> {
    match text {
        "" => Some(shards::link::Author::NONE),
        id => shards::link::Author::from_id(id),
    }
}

/// What the follower asks of one core in a regeneration.
#[derive(Debug)]
pub enum RegenStep {
    /// Rotate the log and snapshot the memtable, then acknowledge.
    Rotate,
    /// The new generation of this core's shard tables, already renamed into `tables/`.
    Swap(Vec<(u32, shards::table::Table)>),
}
