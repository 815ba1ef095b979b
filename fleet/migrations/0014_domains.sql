-- Issue 26, fleet half: many domains, each its own keyspace.
--
-- ricochet_domains: the fleet's domain book, one row per domain ever declared (a removed
-- domain keeps its row and number, so declaring it again brings its links back). Changed by
-- `ricochet fleet domains add|remove` (under LOCK TABLE, the same rules as a single node's
-- domains.json), read by every node's key watcher about once a second. Number 0 is the
-- default domain (the keyspace of every link written before domains); other numbers are
-- never reused.
--
-- A link's identity is (domain, key). ricochet_links.key (and the click tables' key) holds
-- the link's *stored key*, the node's encoding of that pair (`shards::link::stored_key`): the
-- key itself on the default domain, `<number>.<key>` on any other (`17.x7Kp2`; a key never
-- holds '.'). The primary key on it is therefore unique on (domain, key), and every row
-- written before this migration is the default domain's, unchanged: no rewrite. The checks
-- are replaced (added NOT VALID, then validated: one scan of each table, inside `fleet
-- init`'s transaction, which the upgrade runbook runs with the nodes stopped).
--
-- IF EXISTS / IF NOT EXISTS: an init that finds this version recorded as not applied (tests
-- roll the recorded version back to re-run the newest migration) must be able to run it again.

CREATE TABLE IF NOT EXISTS ricochet_domains (
    number            integer PRIMARY KEY CHECK (number BETWEEN 0 AND 999999),
    -- IDNA ASCII, lowercase, no trailing dot (the node normalizes before writing).
    name              text COLLATE "C" NOT NULL CHECK (name ~ '^[a-z0-9.-]{1,253}$'),
    scheme            text NOT NULL CHECK (scheme IN ('http', 'https')),
    base_url          text,
    regular_404       text,
    invalid_short_url text,
    removed_at        timestamptz,
    CHECK (number <> 0 OR removed_at IS NULL),
    CONSTRAINT ricochet_domains_name_key UNIQUE (name) DEFERRABLE INITIALLY DEFERRED
);

ALTER TABLE ricochet_links DROP CONSTRAINT IF EXISTS ricochet_links_key_check;
ALTER TABLE ricochet_links DROP CONSTRAINT IF EXISTS ricochet_links_stored_key;
ALTER TABLE ricochet_links ADD CONSTRAINT ricochet_links_stored_key
    CHECK (key ~ '^([1-9][0-9]{0,5}\.)?[A-Za-z0-9_-]{1,64}$') NOT VALID;
ALTER TABLE ricochet_links VALIDATE CONSTRAINT ricochet_links_stored_key;

ALTER TABLE ricochet_click_days DROP CONSTRAINT IF EXISTS ricochet_click_days_key_check;
ALTER TABLE ricochet_click_days DROP CONSTRAINT IF EXISTS ricochet_click_days_stored_key;
ALTER TABLE ricochet_click_days ADD CONSTRAINT ricochet_click_days_stored_key
    CHECK (key ~ '^([1-9][0-9]{0,5}\.)?[A-Za-z0-9_-]{1,64}$') NOT VALID;
ALTER TABLE ricochet_click_days VALIDATE CONSTRAINT ricochet_click_days_stored_key;

ALTER TABLE ricochet_click_resets DROP CONSTRAINT IF EXISTS ricochet_click_resets_key_check;
ALTER TABLE ricochet_click_resets DROP CONSTRAINT IF EXISTS ricochet_click_resets_stored_key;
ALTER TABLE ricochet_click_resets ADD CONSTRAINT ricochet_click_resets_stored_key
    CHECK (key ~ '^([1-9][0-9]{0,5}\.)?[A-Za-z0-9_-]{1,64}$') NOT VALID;
ALTER TABLE ricochet_click_resets VALIDATE CONSTRAINT ricochet_click_resets_stored_key;
