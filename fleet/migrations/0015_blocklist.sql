-- Issue 27, fleet half of the abuse blocklist: a table every node follows, as it follows the
-- domains and the API keys.
--
-- ricochet_blocklist: one row per entry, in the node's canonical line form (`api::blocklist`,
-- `Entry::line`): a host (`evil.example`, blocking its subdomains too), a host and path
-- prefix ending in `*` (`evil.example/phish*`), or an exact URL (`http://evil.example/x?y`,
-- any scheme matching). Written by `ricochet fleet blocklist add|remove|import`, which parse
-- and canonicalize every entry first, so two spellings of one entry are one row. Who added it
-- and why is kept for the audit.
--
-- ricochet_blocklist_version: one row whose number a statement trigger raises on every change
-- of the table, in the changing transaction. A node's key watcher reads this number about once
-- a second and reads the whole table (one `string_agg`) only when it moved: an idle fleet pays
-- one single-row read per node per second however long the list is.
--
-- IF NOT EXISTS / OR REPLACE: an init that finds this version recorded as not applied (tests
-- roll the recorded version back to re-run the newest migration) must be able to run it again.

CREATE TABLE IF NOT EXISTS ricochet_blocklist (
    entry    text COLLATE "C" PRIMARY KEY
             CHECK (length(entry) BETWEEN 1 AND 8200 AND entry !~ '[[:space:]#]'),
    added_at timestamptz NOT NULL DEFAULT now(),
    added_by text NOT NULL,
    note     text
);

CREATE TABLE IF NOT EXISTS ricochet_blocklist_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL
);
INSERT INTO ricochet_blocklist_version (one, version) VALUES (true, 0) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION ricochet_blocklist_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ricochet_blocklist_version SET version = version + 1;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS ricochet_blocklist_changed ON ricochet_blocklist;
CREATE TRIGGER ricochet_blocklist_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ricochet_blocklist
    FOR EACH STATEMENT EXECUTE FUNCTION ricochet_blocklist_changed();
