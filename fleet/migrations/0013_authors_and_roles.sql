-- Issue 26, fleet half: who created each link, and API keys with roles.
--
-- ricochet_links.author: the id of the API key that created the link ('' when unknown: links
-- written before this migration, or imported). Author-only keys see only their own links;
-- the nodes check it against the row, and a PATCH, DELETE or stats reset by such a key
-- changes a row only WHERE author = that key. A constant default: adding the column rewrites
-- nothing (PostgreSQL 11+ stores the default in the catalog).
--
-- ricochet_api_keys.role: the key's role as the node's `api::roles::Role` JSON ('{}': admin,
-- what every existing key stays); create_limit: its own create rate limit
-- ({"per_second": N, "burst": N}) or NULL for the node's.
--
-- IF NOT EXISTS: an init that finds this version recorded as not applied (tests roll the
-- recorded version back to re-run the newest migration) must be able to run it again.

ALTER TABLE ricochet_links
    ADD COLUMN IF NOT EXISTS author text COLLATE "C" NOT NULL DEFAULT ''
        CHECK (author ~ '^[A-Za-z0-9]{0,8}$');

ALTER TABLE ricochet_api_keys
    ADD COLUMN IF NOT EXISTS role jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN IF NOT EXISTS create_limit jsonb;
