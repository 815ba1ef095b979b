#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the tests: a temp dir owned by `postgres` (initdb
# refuses root), a free port, 127.0.0.1 only, trust auth for local TCP. Prints the URL the
# tests read from RICOCHET_TEST_PG; `stop DIR` stops it and removes the dir.
#   eval "$(.ci/pg-cluster.sh start)"   # sets RICOCHET_TEST_PG and RICOCHET_PG_DIR
#   .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"
set -euo pipefail
bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "${1:-}" in
start)
    dir=$(mktemp -d /tmp/ricochet-pg.XXXXXX)
    chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
fsync = on
synchronous_commit = on
wal_level = replica
max_wal_senders = 4
CONF
    echo "host replication postgres 127.0.0.1/32 trust" >>"$dir/data/pg_hba.conf"
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    echo "export RICOCHET_TEST_PG='postgres://postgres@127.0.0.1:$port/postgres'"
    echo "export RICOCHET_PG_DIR='$dir'"
    echo "export RICOCHET_PG_BIN='$bindir'"
    ;;
stop)
    dir=${2:?usage: stop DIR}
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start | stop DIR" >&2
    exit 2
    ;;
esac
