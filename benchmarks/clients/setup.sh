#!/usr/bin/env bash
# Environments for the opt-in clients of tests/dpsql/test_serve_clients.py (see README.md beside this
# file); prints the variables to export. Progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
env="$here/env"
mkdir -p "$env/node"
if [ ! -d "$env/node/node_modules/pg" ]; then
  (cd "$env/node" && npm init -y >/dev/null && npm install --silent pg@8 >&2)
fi
if [ ! -x "$env/sqlalchemy14/bin/python" ]; then
  python3 -m venv "$env/sqlalchemy14" >&2
  "$env/sqlalchemy14/bin/pip" install --quiet "SQLAlchemy>=1.4,<2" psycopg2-binary >&2
fi
superset="$env/superset"
if [ ! -f "$superset/superset-metadata.db" ]; then
  # Superset's metadata database: migrated once, with an admin its commands run as; the test copies it
  python3 -m venv "$superset" >&2
  "$superset/bin/pip" install --quiet -c "$here/superset-constraints.txt" apache-superset==6.1.0 psycopg2-binary rich cachetools >&2
  home="$(mktemp -d)"
  printf "SECRET_KEY = 'dpsql-client-matrix'\nSQLALCHEMY_DATABASE_URI = 'sqlite:///%s/superset.db'\n" "$home" > "$home/superset_config.py"
  (
    export SUPERSET_CONFIG_PATH="$home/superset_config.py" FLASK_APP=superset
    "$superset/bin/superset" db upgrade
    "$superset/bin/superset" fab create-admin --username admin --firstname dpsql --lastname test \
      --email admin@example.invalid --password "$(head -c 12 /dev/urandom | base64)"
    "$superset/bin/superset" init
  ) >"$env/superset-setup.log" 2>&1 || { echo "superset: setup failed, see $env/superset-setup.log" >&2; exit 1; }
  mv "$home/superset.db" "$superset/superset-metadata.db" && rm -rf "$home"
fi
if [ ! -f /usr/share/java/postgresql.jar ] || ! command -v javac >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq libpostgresql-jdbc-java default-jdk-headless >&2 || echo "pgjdbc: apt-get failed (skipped)" >&2
  else
    echo "pgjdbc: run as root, or apt-get install libpostgresql-jdbc-java default-jdk-headless" >&2
  fi
fi
echo "export DPSQL_NODE_MODULES=$env/node/node_modules DPSQL_SQLALCHEMY14_PYTHON=$env/sqlalchemy14/bin/python DPSQL_SUPERSET_PYTHON=$superset/bin/python"
