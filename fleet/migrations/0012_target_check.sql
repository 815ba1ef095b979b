-- Issue #24, hole 9: the database refuses a link target no node could store, as
-- `shards::link::check_storable_url` states the rule (what every table writer checks again):
-- 1 to 8192 bytes, `http://` or `https://` (any case), a non-empty host (after any userinfo,
-- before any port), no whitespace or control characters (Rust's `char::is_whitespace` and
-- `is_control`, spelled out so the answer does not depend on the database's locale). The
-- API checks more (`validate_url`) before it writes; this stops rows written around it.
--
-- NOT VALID: rows already there are not scanned (no table-long lock on a large table); a
-- bootstrap still leaves out any such row (`snapshot_link_usable`). Tombstones are exempt, so
-- an old bad row can still be deleted through the API.
-- Re-runnable, like every migration (an init interrupted after it, or a test that lowers the
-- recorded version, runs it again): the constraint is dropped and added back.
ALTER TABLE ricochet_links DROP CONSTRAINT IF EXISTS ricochet_links_target_storable;
ALTER TABLE ricochet_links ADD CONSTRAINT ricochet_links_target_storable CHECK (
    deleted
    OR (
        octet_length(target) BETWEEN 1 AND 8192
        AND target ~* '^https?://([^/?#]*@)?(\[|[^/?#:@])[^/?#@]*([/?#]|$)'
        AND target !~ '[\u0001-\u001f\u007f-\u009f\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
    )
) NOT VALID;
