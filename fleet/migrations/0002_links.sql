-- Fleet mode, part 2 (issue #11), first step: the links table as the system of record, with
-- what a commit-safe change feed needs. Not yet written or read by `serve`.
--
-- Every row carries
--   version      one sequence for the whole table: a later change of a key has a larger one,
--                so applying rows is idempotent ("apply only if newer");
--   changed_xid  the transaction that last wrote the row (xid8). A poller reads
--                WHERE (changed_xid, key) > cursor AND changed_xid < pg_snapshot_xmin(...)
--                so a row becomes visible to it only once every transaction that could still
--                commit below it has finished: sequence values (and xids) are handed out in
--                one order and committed in another, and a cursor over `version` alone skips
--                the late committers (reproduced in tests/fleet_feed.rs).
-- Deletes are tombstones (deleted = true), kept for the feed.

CREATE SEQUENCE ricochet_link_version AS bigint;

CREATE TABLE ricochet_links (
    key          text COLLATE "C" PRIMARY KEY CHECK (key ~ '^[A-Za-z0-9_-]{1,64}$'),
    target       text NOT NULL,
    status       smallint NOT NULL CHECK (status IN (301, 302, 307, 308)),
    created_at   bigint NOT NULL,
    expires_at   bigint NOT NULL DEFAULT 0,
    deleted      boolean NOT NULL DEFAULT false,
    version      bigint NOT NULL DEFAULT nextval('ricochet_link_version'),
    changed_xid  xid8 NOT NULL DEFAULT pg_current_xact_id()
);

CREATE INDEX ricochet_links_feed ON ricochet_links (changed_xid, key);

-- Any update restamps the row: a new version and this transaction's xid.
CREATE FUNCTION ricochet_links_restamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('ricochet_link_version');
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END $$;

CREATE TRIGGER ricochet_links_restamp BEFORE UPDATE ON ricochet_links
    FOR EACH ROW EXECUTE FUNCTION ricochet_links_restamp();
