-- ricochet fleet schema, version 1: ID allocation authority, audit, key-space secret.
-- Applied by `ricochet fleet init` in one transaction, under an advisory lock; recorded in
-- ricochet_meta. Every text key is COLLATE "C": byte order, so 'aB' and 'Ab' stay distinct.

-- Namespaces (regions): each owns the IDs [lo, hi) and hands them out from next_id upwards.
-- The exclusion constraint makes the database refuse two namespaces whose ranges overlap.
CREATE TABLE ricochet_namespace (
    name       text COLLATE "C" PRIMARY KEY,
    lo         bigint NOT NULL,
    hi         bigint NOT NULL,
    next_id    bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT namespace_range_valid CHECK (lo >= 1 AND lo < hi AND hi <= 3521614606208),
    CONSTRAINT namespace_next_id_inside CHECK (next_id >= lo AND next_id <= hi),
    CONSTRAINT namespace_name_valid CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    CONSTRAINT namespace_ranges_disjoint EXCLUDE USING gist (int8range(lo, hi) WITH &&)
);

-- Every confirmed interval [start_id, end_id), with the request id that made it (unique) and
-- the allocator instance. The exclusion constraint makes overlapping intervals impossible
-- even if the allocation transaction had a bug; the trigger keeps each inside its namespace.
CREATE TABLE ricochet_alloc_audit (
    request_id   text COLLATE "C" PRIMARY KEY,
    namespace    text COLLATE "C" NOT NULL REFERENCES ricochet_namespace (name),
    start_id     bigint NOT NULL,
    end_id       bigint NOT NULL,
    node_id      text COLLATE "C" NOT NULL,
    instance     text COLLATE "C" NOT NULL,
    confirmed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT audit_interval_valid CHECK (start_id >= 1 AND start_id < end_id),
    CONSTRAINT audit_intervals_disjoint EXCLUDE USING gist (int8range(start_id, end_id) WITH &&)
);

CREATE FUNCTION ricochet_audit_inside_namespace() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM ricochet_namespace n
        WHERE n.name = NEW.namespace AND NEW.start_id >= n.lo AND NEW.end_id <= n.hi
          AND NEW.end_id <= n.next_id
    ) THEN
        RAISE EXCEPTION 'audit interval [%, %) is outside namespace % or above its next_id',
            NEW.start_id, NEW.end_id, NEW.namespace;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER audit_inside_namespace BEFORE INSERT OR UPDATE ON ricochet_alloc_audit
    FOR EACH ROW EXECUTE FUNCTION ricochet_audit_inside_namespace();

-- next_id only moves up (the runbook's raise command and the allocator both obey it).
CREATE FUNCTION ricochet_next_id_never_lowers() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.next_id < OLD.next_id THEN
        RAISE EXCEPTION 'next_id of namespace % may not go down (% -> %)',
            OLD.name, OLD.next_id, NEW.next_id;
    END IF;
    IF NEW.lo <> OLD.lo OR NEW.hi <> OLD.hi THEN
        RAISE EXCEPTION 'the range of namespace % may not change', OLD.name;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER next_id_never_lowers BEFORE UPDATE ON ricochet_namespace
    FOR EACH ROW EXECUTE FUNCTION ricochet_next_id_never_lowers();

-- The fleet's one key-permutation secret: generated keys are a keyed bijection of the ID, so
-- every node must share it. Exactly one row.
CREATE TABLE ricochet_keyspace (
    id         int PRIMARY KEY CHECK (id = 1),
    secret     bytea NOT NULL CHECK (length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
