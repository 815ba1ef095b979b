-- Issue 27: a domain's own visit settings (Shlink's per-domain extra-path mode and query
-- forwarding), as the node's `api::domains::DomainVisits`. NULL follows each node's
-- `--extra-path` / `--forward-query`, which is what every existing domain keeps: adding
-- nullable columns rewrites nothing.
--
-- IF NOT EXISTS: an init that finds this version recorded as not applied (tests roll the
-- recorded version back to re-run the newest migration) must be able to run it again.

ALTER TABLE ricochet_domains
    ADD COLUMN IF NOT EXISTS extra_path text
        CHECK (extra_path IN ('not-found', 'append', 'ignore')),
    ADD COLUMN IF NOT EXISTS forward_query boolean;
