-- Fleet mode, part 2 (issue #11): clicks counted by every node, in one place, so the stats API
-- answers for the whole fleet. Each node's click aggregators keep their own per-link-day
-- states (docs/analytics.md) and flush them here (fleet::clicks): a row is one node's totals
-- of one link-day, replaced by that node's next flush, so a repeated flush cannot count
-- anything twice; the fleet's figure is the sum over nodes.
--
-- `node` is the data dir's click identity (a random id kept in the data dir), not
-- `--node-id`: a wiped data dir starts counting under a new identity, and its old rows stay.

CREATE TABLE ricochet_click_nodes (
    node            text COLLATE "C" PRIMARY KEY CHECK (node ~ '^[0-9a-f]{32}$'),
    node_id         text COLLATE "C" NOT NULL,
    -- The last flush applied: a flush carries the next number and is applied only if it is
    -- higher, so a retry of a flush whose COMMIT reply was lost is recognised and skipped.
    last_flush      bigint NOT NULL CHECK (last_flush >= 1),
    -- Unix ms: every click this node answered before it is in its rows.
    complete_until  bigint NOT NULL,
    -- Clicks this node dropped since it started (a full combiner; not attributed to links).
    dropped         bigint NOT NULL,
    flushed_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ricochet_click_days (
    key             text COLLATE "C" NOT NULL CHECK (key ~ '^[A-Za-z0-9_-]{1,64}$'),
    day             integer NOT NULL CHECK (day >= 0),   -- days since 1970-01-01, UTC
    node            text COLLATE "C" NOT NULL REFERENCES ricochet_click_nodes (node),
    clicks          bigint NOT NULL CHECK (clicks >= 0),
    bot_clicks      bigint NOT NULL CHECK (bot_clicks >= 0 AND bot_clicks <= clicks),
    unique_humans   bigint NOT NULL CHECK (unique_humans >= 0),
    unique_bots     bigint NOT NULL CHECK (unique_bots >= 0),
    unique_all      bigint NOT NULL CHECK (unique_all >= 0),
    -- [[kind, bot, value, clicks], ...]: kind 1 referrer, 2 country, 3 browser, 4 OS, 5 device.
    facets          jsonb NOT NULL CHECK (jsonb_typeof(facets) = 'array'),
    flush           bigint NOT NULL,
    PRIMARY KEY (key, day, node)
-- Every flush rewrites the rows of the link-days clicked since the last: room on each page
-- lets PostgreSQL update them in place (HOT), without new index entries.
) WITH (fillfactor = 70);

CREATE INDEX ricochet_click_days_day ON ricochet_click_days (day);

-- GETs answered 404, per node and day (no key).
CREATE TABLE ricochet_click_not_found (
    day             integer NOT NULL CHECK (day >= 0),
    node            text COLLATE "C" NOT NULL REFERENCES ricochet_click_nodes (node),
    count           bigint NOT NULL CHECK (count >= 0),
    PRIMARY KEY (day, node)
);
