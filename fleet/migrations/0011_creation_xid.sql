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

-- Which history of the database a node follows (`fleet/src/history.rs`): the current insert
-- timeline (the first 8 hex digits of the current WAL segment's name, which change the moment
-- a standby is promoted) and the WAL insert position. NULLs on a server in recovery; tli -1
-- where the server has no such functions (some managed services): nodes then rely on the
-- identity and transaction-id checks alone. Called by every feed poll.
CREATE OR REPLACE FUNCTION ricochet_wal_position(OUT tli integer, OUT lsn text)
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;
    END IF;
    lsn := pg_current_wal_insert_lsn()::text;
    tli := ('x' || substr(pg_walfile_name(lsn::pg_lsn), 1, 8))::bit(32)::int;
EXCEPTION WHEN OTHERS THEN
    tli := -1;
    lsn := NULL;
END $$;
