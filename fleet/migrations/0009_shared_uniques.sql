-- Fleet mode, part 2 (issue #11): unique visitors merged across nodes. A visitor the load
-- balancer sends to two nodes must count once, so every node hashes visitors under the same
-- daily salt, and flushes its HyperLogLog sketches with its link-day rows; the stats API
-- merges the nodes' sketches (a register-wise max) instead of summing their estimates.
--
-- The salt of a day is made by the first node that needs it (INSERT .. ON CONFLICT DO
-- NOTHING, then read back: every node gets the same 16 bytes) and deleted 48 hours after its
-- day ended, by every node's flusher (fleet::clicks::salt_for, forget_salts_before). Backups
-- taken meanwhile keep it, as they keep everything: treat them as the live database.

CREATE TABLE ricochet_click_salts (
    day         integer PRIMARY KEY CHECK (day >= 0),   -- days since 1970-01-01, UTC
    salt        bytea NOT NULL CHECK (octet_length(salt) = 16),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The node's sketches of the link-day: (register index u16le, rank u8) per set register,
-- sorted by index. NULL in rows flushed before schema 9: their unique_* figures are summed.
ALTER TABLE ricochet_click_days ADD COLUMN humans bytea, ADD COLUMN bots bytea;
