-- Fleet mode, part 2 (issue #11): tombstones are kept for a retention period, then removed
-- (fleet::feed::purge_tombstones). A node that had not applied a removed tombstone would
-- serve that link for ever, so the removal raises a horizon: the highest changed_xid of a
-- tombstone ever removed. A node whose feed cursor is not past the horizon may have missed
-- one, and bootstraps again from a snapshot instead of following the feed (docs/fleet.md).

ALTER TABLE ricochet_links ADD COLUMN changed_at timestamptz NOT NULL DEFAULT now();

CREATE OR REPLACE FUNCTION ricochet_links_restamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('ricochet_link_version');
    NEW.changed_xid := pg_current_xact_id();
    NEW.changed_at := now();
    RETURN NEW;
END $$;

CREATE INDEX ricochet_links_tombstones ON ricochet_links (changed_at) WHERE deleted;

INSERT INTO ricochet_meta (key, value) VALUES ('tombstone_horizon', '0')
    ON CONFLICT (key) DO NOTHING;
