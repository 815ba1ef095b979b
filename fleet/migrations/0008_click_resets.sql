-- Fleet mode, part 2 (issue #11): resetting one link's click stats on every node. The reset
-- deletes every node's rows of the link (fleet::links, in the statement that records it) and
-- leaves a row here; every node follows this table in commit-safe order, like the links
-- table, and purges the link's stats in its own click store when the row reaches it, so
-- nothing a node counted before the reset comes back with its next flush.

CREATE TABLE ricochet_click_resets (
    key        text COLLATE "C" NOT NULL CHECK (key ~ '^[A-Za-z0-9_-]{1,64}$'),
    reset_xid  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    reset_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reset_xid, key)
);
