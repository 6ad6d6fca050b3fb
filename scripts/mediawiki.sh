#!/usr/bin/env bash
# A local MediaWiki to sync, from Debian's packages
# (RAGSYNC_WITH_MEDIAWIKI=1 scripts/setup.sh installs them):
#
#   scripts/mediawiki.sh install DIR        install a wiki (SQLite) into DIR
#   scripts/mediawiki.sh start DIR          install it when DIR has none, serve it in the background
#                                           on 127.0.0.1:$RAGSYNC_WIKI_PORT (default 8931); prints api.php's URL
#   scripts/mediawiki.sh edit DIR TITLE     create or replace page TITLE with the wikitext on stdin
#   scripts/mediawiki.sh delete DIR TITLE   delete page TITLE
#   scripts/mediawiki.sh stop DIR           stop the server
#
# Pages readable without login are readable by ragsync's group `everyone`.
# tests/mediawiki.py installs its wikis with `install`.
set -euo pipefail
MW=/usr/share/mediawiki
PORT="${RAGSYNC_WIKI_PORT:-8931}"
cmd="${1:-}" dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: scripts/mediawiki.sh install|start|edit|delete|stop DIR [TITLE]" >&2
  exit 2
fi
if ! command -v php >/dev/null 2>&1 || [ ! -e "$MW/maintenance/install.php" ]; then
  echo "MediaWiki is not installed: run RAGSYNC_WITH_MEDIAWIKI=1 scripts/setup.sh" >&2
  exit 2
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
conf="$dir/conf/LocalSettings.php"
api="http://127.0.0.1:$PORT/api.php"

maintenance() {  # maintenance SCRIPT ARGS...: one of MediaWiki's maintenance scripts on this wiki
  local script="$1"
  shift
  (cd "$MW" && MW_CONFIG_FILE="$conf" php "maintenance/$script" --conf "$conf" "$@")
}

install() {
  if [ -e "$conf" ]; then
    echo "a wiki is already installed in $dir" >&2
    exit 2
  fi
  mkdir -p "$dir/db" "$dir/conf"
  (cd "$MW" && php maintenance/install.php --dbtype=sqlite "--dbpath=$dir/db" --dbname=wiki \
    "--server=http://127.0.0.1:$PORT" --scriptpath= "--confpath=$dir/conf" \
    --pass=ragsync-test-Admin-9f3c --lang=en "Test Wiki" Admin >"$dir/install.log" 2>&1) || {
    cat "$dir/install.log" >&2
    exit 1
  }
  # Exceptions shown in API errors; jobs run by the maintenance scripts, not on page views.
  printf '\n$wgShowExceptionDetails = true;\n$wgJobRunRate = 0;\n' >>"$conf"
}

case "$cmd" in
  install)
    install
    ;;
  start)
    [ -e "$conf" ] || install
    if [ -e "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
      echo "$api"
      exit 0
    fi
    # In a session of its own (php -S forks workers): `stop` ends the whole group.
    # Its output goes to server.log, none to this script's (a caller's $(...) would wait for it).
    (cd "$MW" && exec env MW_CONFIG_FILE="$conf" PHP_CLI_SERVER_WORKERS=4 setsid bash -c \
      'echo $$ >"$1/server.pid"; exec php -S "127.0.0.1:$2" -t "$3"' _ "$dir" "$PORT" "$MW") \
      >>"$dir/server.log" 2>&1 </dev/null &
    for _ in $(seq 1 300); do
      if curl -sf "$api?action=query&meta=siteinfo&format=json" >/dev/null; then
        echo "$api"
        exit 0
      fi
      sleep 0.2
    done
    echo "MediaWiki did not answer on $api within 60 s (see $dir/server.log)" >&2
    exit 1
    ;;
  edit)
    maintenance edit.php -u Admin -s "edited with scripts/mediawiki.sh" "${3:?a page title}" >/dev/null
    ;;
  delete)
    printf '%s\n' "${3:?a page title}" >"$dir/delete.txt"
    maintenance deleteBatch.php -u Admin "$dir/delete.txt" >/dev/null
    ;;
  stop)
    if [ -e "$dir/server.pid" ]; then
      kill -TERM -- "-$(cat "$dir/server.pid")" 2>/dev/null || true
      rm -f "$dir/server.pid"
    fi
    ;;
  *)
    echo "unknown command $cmd: install, start, edit, delete or stop" >&2
    exit 2
    ;;
esac
