-- Fleet mode, part 2 (issue #11): how many tombstone removals there have been (each
-- fleet::feed::purge_tombstones that removed any counts one). The horizon alone (the highest
-- changed_xid ever removed) cannot say whether a removal happened after a node's bootstrap
-- snapshot: a snapshot taken while an older transaction is still open has an xmin below the
-- horizon although it reflects every removal before it. A node records this count, read
-- before its snapshot, with the database's identity; while the count is unchanged nothing was
-- removed since, and its cursor need not be past the horizon (docs/fleet.md, "Tombstones").

INSERT INTO ricochet_meta (key, value) VALUES ('tombstone_removals', '0')
    ON CONFLICT (key) DO NOTHING;
