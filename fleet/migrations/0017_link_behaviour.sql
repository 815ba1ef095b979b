-- Issue 27, fleet half: a link's behaviour (what it does when visited: valid_since,
-- forward_query, disabled, crawlable, its redirect rules) as the node's NDJSON members
-- (`shards::behaviour::BehaviourJson`), NULL for a link with none (nearly every link):
-- {"valid_since": "RFC 3339", "forward_query": bool, "disabled": {"reason", "at", "by"},
--  "crawlable": true, "redirect_rules": [{"target", "conditions": [...]}]}.
-- A PATCH merges into it in SQL (members set, members removed), so two nodes' PATCHes of
-- different members of one link both hold. The nodes validate it as they validate an import
-- line; the CHECK only keeps it an object. A nullable column: adding it rewrites nothing.
--
-- IF NOT EXISTS: an init that finds this version recorded as not applied (tests roll the
-- recorded version back to re-run the newest migration) must be able to run it again.

ALTER TABLE ricochet_links
    ADD COLUMN IF NOT EXISTS behaviour jsonb
        CHECK (behaviour IS NULL OR jsonb_typeof(behaviour) = 'object');
