-- Fleet mode, part 2 (issue #11): a ceiling per namespace, so a node can answer 404 for a
-- never-issued generated key without asking the database (docs/fleet.md, "Unknown-key
-- floods"). Every ID a namespace ever handed out is below its `ceiling`, and an ID at or
-- above the ceiling a node read less than `HIGH_WATER_FRESH_MS` ago cannot have been handed
-- out and acknowledged yet:
--
--   ceiling            IDs in [lo, ceiling) may be issued (next_id <= ceiling);
--   ceiling_next       a raise under way: nodes already count it as "may be issued", the
--                      allocator may not issue above `ceiling` until it is promoted;
--   ceiling_next_seen  when an allocation transaction first saw the raise committed; the
--                      raise is promoted (ceiling := ceiling_next) only `RANGE_MATURITY_MS`
--                      after that, on the database's clock.
--
-- A node that read the namespace before the raise committed has since read it again (it
-- re-reads it every `HIGH_WATER_REFRESH_MS` and trusts a read for `HIGH_WATER_FRESH_MS`, half
-- the maturity) before any ID above the old ceiling can be handed out.
--
-- Existing namespaces get a ceiling one step (2^30 IDs, fleet::CEILING_STEP) above next_id
-- at once: no node of this schema version has read them yet, and every node of an older one
-- must be stopped before `fleet init` (docs/fleet.md, "Upgrades").

ALTER TABLE ricochet_namespace
    ADD COLUMN ceiling bigint,
    ADD COLUMN ceiling_next bigint,
    ADD COLUMN ceiling_next_seen timestamptz;

UPDATE ricochet_namespace SET ceiling = least(hi, next_id + 1073741824);

ALTER TABLE ricochet_namespace
    ALTER COLUMN ceiling SET NOT NULL,
    ADD CONSTRAINT namespace_ceiling_valid CHECK (
        next_id <= ceiling AND ceiling <= hi
        AND (ceiling_next IS NULL OR (ceiling_next > ceiling AND ceiling_next <= hi))
        AND (ceiling_next_seen IS NULL OR ceiling_next IS NOT NULL)
    );

-- next_id and the ceiling only move up; a raise under way is only dropped by its promotion
-- (or by a ceiling raised past it at once, which the runbook's raise-next-id does).
CREATE OR REPLACE FUNCTION ricochet_next_id_never_lowers() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.next_id < OLD.next_id THEN
        RAISE EXCEPTION 'next_id of namespace % may not go down (% -> %)',
            OLD.name, OLD.next_id, NEW.next_id;
    END IF;
    IF NEW.lo <> OLD.lo OR NEW.hi <> OLD.hi THEN
        RAISE EXCEPTION 'the range of namespace % may not change', OLD.name;
    END IF;
    IF NEW.ceiling < OLD.ceiling THEN
        RAISE EXCEPTION 'the ceiling of namespace % may not go down (% -> %)',
            OLD.name, OLD.ceiling, NEW.ceiling;
    END IF;
    IF OLD.ceiling_next IS NOT NULL
       AND greatest(NEW.ceiling, coalesce(NEW.ceiling_next, 0)) < OLD.ceiling_next THEN
        RAISE EXCEPTION 'a ceiling raise of namespace % to % may not be withdrawn',
            OLD.name, OLD.ceiling_next;
    END IF;
    RETURN NEW;
END $$;
