-- Fleet mode (issue #24, hole 11): which transaction created a link's current incarnation,
-- and which one made an idempotency record's link. A retried create replays its link only if
-- the link is still the one its request created; comparing creation seconds cannot tell a
-- link deleted and re-created by someone else within the same second from the original.
--
-- Both columns are NULL for rows written before this migration (no table rewrite: the
-- default applies to new rows only); a replay of such a record falls back to the creation
-- second. A revival (a dead key created again, `revive_dead_key!`) sets it explicitly.

ALTER TABLE ricochet_links ADD COLUMN IF NOT EXISTS created_xid xid8;
ALTER TABLE ricochet_links ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
ALTER TABLE ricochet_idempotency ADD COLUMN IF NOT EXISTS created_xid xid8;
ALTER TABLE ricochet_idempotency ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
