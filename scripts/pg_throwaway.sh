#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL cluster for tests (trust auth, fsync off,
# 127.0.0.1 only, private socket dir). Used by CI to prove the PostgreSQL backend:
#
#   eval "$(scripts/pg_throwaway.sh start /tmp/ragsync-pg)"   # exports RAGSYNC_PG_URL
#   CI=true .venv/bin/python -m pytest tests/test_catalog.py
#   scripts/pg_throwaway.sh stop /tmp/ragsync-pg
#
# Runs the server as the `postgres` OS user when invoked as root. Needs the server
# binaries (Debian: apt-get install -y postgresql); PG_BINDIR overrides the lookup.
# Prints `export RAGSYNC_PG_URL=postgresql+psycopg://postgres@127.0.0.1:PORT/ragsync`.
set -euo pipefail

cmd="${1:-}"
root="${2:-}"
if [[ -z "$cmd" || -z "$root" ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

bindir="${PG_BINDIR:-}"
if [[ -z "$bindir" ]]; then
  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [[ -z "$bindir" || ! -x "$bindir/initdb" || ! -x "$bindir/pg_ctl" ]]; then
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    bindir="$(dirname "$(command -v initdb)")"
  else
    echo "PostgreSQL server binaries not found: apt-get install postgresql" >&2
    exit 1
  fi
fi

as_server() {
  if [[ "$(id -u)" == "0" ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
    mkdir -p "$root/sock"
    if [[ "$(id -u)" == "0" ]]; then chown -R postgres: "$root"; fi
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    as_server "$bindir/initdb" -D "$root/data" -U postgres -A trust -E UTF8 --no-sync >"$root/initdb.log" 2>&1 \
      || { cat "$root/initdb.log" >&2; exit 1; }
    as_server "$bindir/pg_ctl" -D "$root/data" -l "$root/server.log" -w -t 60 \
      -o "-p $port -k $root/sock -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start >&2 \
      || { cat "$root/server.log" >&2; exit 1; }
    as_server "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE ragsync" >&2
    echo "export RAGSYNC_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$port/ragsync"
    ;;
  stop)
    if [[ -d "$root/data" ]]; then
      as_server "$bindir/pg_ctl" -D "$root/data" -m fast -w stop >&2 || true
    fi
    rm -rf "$root"
    ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
