#!/usr/bin/env bash
# A local Redmine to sync, from Debian's packages on SQLite
# (RAGSYNC_WITH_REDMINE=1 scripts/setup.sh installs them: redmine redmine-sqlite):
#
#   scripts/redmine.sh install DIR            install a Redmine (SQLite) into DIR: migrations, default
#                                             data, REST API on; the admin's API key goes to DIR/admin.key
#   scripts/redmine.sh start DIR              install it when DIR has none, serve it in the background on
#                                             127.0.0.1:$RAGSYNC_REDMINE_PORT (default 8932); prints its URL
#   scripts/redmine.sh key DIR                print the admin's API key
#   scripts/redmine.sh project DIR ID [private]      create project ID (public unless `private`)
#   scripts/redmine.sh issue DIR PROJECT SUBJECT     create an issue, description on stdin; prints its id
#   scripts/redmine.sh comment DIR ISSUE             add a comment (stdin) to an issue
#   scripts/redmine.sh delete DIR ISSUE              delete an issue
#   scripts/redmine.sh stop DIR               stop the server
#
# DIR is the whole instance (database, configuration, attachments, logs); Redmine's own code is
# Debian's, in /usr/share/redmine, pointed at DIR through REDMINE_INSTANCE. tests/redmine.py installs
# one Redmine per machine with `install` (a template) and serves copies of it.
set -euo pipefail
RM=/usr/share/redmine
PORT="${RAGSYNC_REDMINE_PORT:-8932}"
cmd="${1:-}" dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: scripts/redmine.sh install|start|key|project|issue|comment|delete|stop DIR [ARGS]" >&2
  exit 2
fi
if ! command -v ruby >/dev/null 2>&1 || [ ! -e "$RM/config/environment.rb" ]; then
  echo "Redmine is not installed: run RAGSYNC_WITH_REDMINE=1 scripts/setup.sh" >&2
  exit 2
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
inst="$dir/instance"
# Debian's Redmine finds an instance under $RM/instances/NAME: a relative name climbing to / reaches DIR.
export REDMINE_INSTANCE="$(printf '../%.0s' $(seq 1 24))${inst#/}" RAILS_ENV=production

install() {
  if [ -e "$inst/config/database.yml" ]; then
    echo "a Redmine is already installed in $dir" >&2
    exit 2
  fi
  mkdir -p "$inst/config" "$inst/db" "$inst/files" "$inst/log" "$inst/tmp/cache" "$inst/tmp/pids"
  printf 'production:\n  adapter: sqlite3\n  database: %s\n  timeout: 10000\n' \
    "$inst/db/redmine.sqlite3" >"$inst/config/database.yml"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$inst/config/secret_key.txt"
  # Three processes: the default data needs the migrated schema, which a migrating process has cached.
  (cd "$RM" && bin/rake db:migrate >"$dir/install.log" 2>&1 &&
    REDMINE_LANG=en bin/rake redmine:load_default_data >>"$dir/install.log" 2>&1 && bin/rails runner '
      abort "the default data (trackers, statuses, roles) was not loaded" if Tracker.count == 0
      Setting.rest_api_enabled = "1"
      admin = User.find_by_login("admin")
      admin.update!(must_change_passwd: false)
      File.write(ARGV[0], admin.api_key)
    ' "$dir/admin.key" >>"$dir/install.log" 2>&1) || {
    cat "$dir/install.log" >&2
    exit 1
  }
}

api() {  # api METHOD PATH [JSON]: one REST call as the admin; prints the answer
  local port
  port="$(cat "$dir/port")"
  curl -sSf -X "$1" -H "X-Redmine-API-Key: $(cat "$dir/admin.key")" -H 'Content-Type: application/json' \
    "http://127.0.0.1:$port/$2" ${3:+-d "$3"}
}

json() {  # json TEXT: TEXT as a JSON string
  python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"
}

case "$cmd" in
  install)
    install
    ;;
  start)
    [ -e "$inst/config/database.yml" ] || install
    url="http://127.0.0.1:$PORT"
    if [ -e "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
      echo "$url"
      exit 0
    fi
    echo "$PORT" >"$dir/port"
    # WEBrick (Ruby's own HTTP server) is loaded before Bundler hides the gems Redmine's Gemfile
    # does not name. In a session of its own: `stop` ends the whole group. Its output goes to
    # server.log, none to this script's (a caller's $(...) would wait for it).
    (cd "$RM" && exec setsid bash -c 'echo $$ >"$1/server.pid"; exec ruby -e "
      require \"webrick\"
      require \"/usr/share/redmine/config/environment\"
      require \"rack/handler/webrick\"
      Rack::Handler::WEBrick.run(Rails.application, Host: \"127.0.0.1\", Port: Integer(ARGV[0]),
                                 AccessLog: [])
    " "$2"' _ "$dir" "$PORT") >>"$dir/server.log" 2>&1 </dev/null &
    for _ in $(seq 1 600); do
      if curl -sf "$url/issues.json?limit=1" >/dev/null; then
        echo "$url"
        exit 0
      fi
      sleep 0.2
    done
    echo "Redmine did not answer on $url within 120 s (see $dir/server.log)" >&2
    exit 1
    ;;
  key)
    cat "$dir/admin.key"
    echo
    ;;
  project)
    public=true
    [ "${4:-}" = private ] && public=false
    api POST projects.json "{\"project\": {\"name\": $(json "${3:?a project identifier}"),
      \"identifier\": $(json "$3"), \"is_public\": $public}}" >/dev/null
    ;;
  issue)
    description="$(cat)"
    api POST issues.json "{\"issue\": {\"project_id\": $(json "${3:?a project}"),
      \"subject\": $(json "${4:?a subject}"), \"description\": $(json "$description")}}" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["issue"]["id"])'
    ;;
  comment)
    api PUT "issues/${3:?an issue id}.json" "{\"issue\": {\"notes\": $(json "$(cat)")}}" >/dev/null
    ;;
  delete)
    api DELETE "issues/${3:?an issue id}.json" >/dev/null
    ;;
  stop)
    if [ -e "$dir/server.pid" ]; then
      kill -TERM -- "-$(cat "$dir/server.pid")" 2>/dev/null || true
      rm -f "$dir/server.pid"
    fi
    ;;
  *)
    echo "unknown command $cmd: install, start, key, project, issue, comment, delete or stop" >&2
    exit 2
    ;;
esac
