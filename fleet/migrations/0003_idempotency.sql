-- Fleet mode, part 2 (issue #11): Idempotency-Key records live in the database, so a create
-- retried on another node replays the first one's link instead of making a second.
--
-- A create under a key claims its scope (API key id + Idempotency-Key) in the same statement
-- that inserts the link (`fleet/src/links.rs`); if the link cannot be inserted (the alias is
-- taken), `ricochet_abort` fails the statement, so no claim survives without its link.
-- Records older than the retention (24 h, `IDEMPOTENCY_RETENTION_S`) may be claimed again.

CREATE TABLE ricochet_idempotency (
    scope         text COLLATE "C" PRIMARY KEY,
    request_hash  bytea NOT NULL CHECK (length(request_hash) = 32),
    key           text COLLATE "C" NOT NULL,
    created_at    bigint NOT NULL
);

-- Fails the current statement with SQLSTATE P0001 and `msg`: used to undo a claim whose link
-- was not inserted, inside one autocommit statement.
CREATE FUNCTION ricochet_abort(msg text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = msg;
END $$;
