#!/usr/bin/env bash
# Real engines for the backend tests: a PostgreSQL server on loopback and Java for Spark.
#
# Installs what is missing (Debian packages), starts a throw-away PostgreSQL cluster in a temporary
# directory on 127.0.0.1, creates a user and a database for the tests, and prints shell lines for
# the caller to eval:
#   export DPSQL_TEST_POSTGRES_DSN=postgresql://dpsql:...@127.0.0.1:PORT/dpsql_test
#   trap '<stop the cluster>' EXIT
# Usage (as in .ci/run):  eval "$(bash .ci/services.sh)"
# Everything but the final lines goes to stderr. The tests load their own data (COPY) into a
# schema of their own.
set -euo pipefail

log() { echo "services: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    log "installing $* (Debian packages)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then
    apt_install postgresql
fi
if ! command -v java >/dev/null 2>&1; then
    apt_install default-jre-headless
fi
BIN="$(pg_bin)"

# initdb refuses to run as root: the cluster belongs to the postgres user then.
if [ "$(id -u)" = 0 ]; then
    OWNER=postgres
    AS_OWNER="runuser -u postgres --"
else
    OWNER="$(id -un)"
    AS_OWNER=""
fi
run_owner() { $AS_OWNER "$@"; }

DIR="$(mktemp -d /tmp/dpsql-pg.XXXXXX)"
chown "$OWNER" "$DIR"
chmod 700 "$DIR"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
PASSWORD="$(python3 -c 'import secrets; print(secrets.token_hex(12))')"

log "initdb in $DIR"
run_owner "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; exit 1; }
log "starting PostgreSQL on 127.0.0.1:$PORT"
run_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >&2 || { cat "$DIR/server.log" >&2; exit 1; }

psql_admin() { run_owner psql -v ON_ERROR_STOP=1 -q -h "$DIR" -p "$PORT" -U postgres -d postgres "$@" >&2; }
psql_admin -c "CREATE ROLE dpsql LOGIN PASSWORD '$PASSWORD'"
psql_admin -c "CREATE DATABASE dpsql_test OWNER dpsql"

echo "export DPSQL_TEST_POSTGRES_DSN='postgresql://dpsql:$PASSWORD@127.0.0.1:$PORT/dpsql_test'"
echo "trap '$AS_OWNER $BIN/pg_ctl -D $DIR/data -m fast stop >/dev/null 2>&1; rm -rf $DIR' EXIT"
log "ready"
