-- Fleet mode, part 2 (issue #11): API keys in the database, so one created or revoked with
-- `ricochet fleet keys` takes effect on every node (each polls this table, about once a
-- second). Only the SHA-256 of a key is stored; its plaintext is shown once, at creation.

CREATE TABLE ricochet_api_keys (
    id          text COLLATE "C" PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9]{1,8}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    hash        bytea NOT NULL CHECK (length(hash) = 32),
    created_at  bigint NOT NULL,
    revoked_at  bigint
);
