#!/usr/bin/env bash
# Installs everything ragsync needs on Debian/Ubuntu with Python 3.11:
# system packages (Tesseract, Poppler, libmagic, PostgreSQL for the tests)
# and a virtualenv at .venv with the project and its extras.
# Idempotent: a second run only checks (the Python packages are installed
# again only when the locks, setup.py or pyproject.toml changed, or with --force).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_apt=""
for bin in tesseract pdftotext; do command -v "$bin" >/dev/null 2>&1 || need_apt=1; done
# German traineddata: a second OCR language (ocr_languages), read by the tests.
ls /usr/share/tesseract-ocr/*/tessdata/deu.traineddata >/dev/null 2>&1 || need_apt=1
[ -e /usr/lib/x86_64-linux-gnu/libmagic.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libmagic.so.1 ] || need_apt=1
if [ "${RAGSYNC_WITH_POSTGRES:-0}" = "1" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then need_apt=1; fi
if [ -n "$need_apt" ]; then
  echo "[setup] installing system packages (tesseract-ocr, tesseract-ocr-deu, poppler-utils, libmagic1, postgresql)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    tesseract-ocr tesseract-ocr-deu poppler-utils libmagic1 postgresql >/dev/null
fi
# MediaWiki (Debian's package, PHP with SQLite) for the wiki connector's tests.
if [ "${RAGSYNC_WITH_MEDIAWIKI:-0}" = "1" ] && { ! command -v php >/dev/null 2>&1 || [ ! -e /usr/share/mediawiki/maintenance/install.php ]; }; then
  echo "[setup] installing MediaWiki and PHP (mediawiki php-cli php-sqlite3 php-intl php-mbstring php-xml)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    mediawiki php-cli php-sqlite3 php-intl php-mbstring php-xml >/dev/null
fi
# Redmine (Debian's package on SQLite, Ruby on Rails) for the Redmine connector's tests.
if [ "${RAGSYNC_WITH_REDMINE:-0}" = "1" ] && { ! command -v ruby >/dev/null 2>&1 || [ ! -e /usr/share/redmine/config/environment.rb ]; }; then
  echo "[setup] installing Redmine (redmine redmine-sqlite)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    redmine redmine-sqlite >/dev/null
fi
# Google's Pub/Sub emulator (google-cloud-cli's pubsub-emulator component, a Java program) for the
# stream's Pub/Sub tests (tests/pubsub_emulator.py). Java is Debian's; the component comes from Google's
# apt repository (https://cloud.google.com/sdk/docs/install#deb), which a clean Debian does not list.
if [ "${RAGSYNC_WITH_PUBSUB:-0}" = "1" ]; then
  if ! command -v java >/dev/null 2>&1; then
    echo "[setup] installing Java for the Pub/Sub emulator (openjdk-17-jre-headless)" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  fi
  sdk="$(dirname "$(dirname "$(readlink -f "$(command -v gcloud || echo /usr/lib/google-cloud-sdk/bin/gcloud)")")")"
  if ! ls "$sdk"/platform/pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar >/dev/null 2>&1; then
    if apt-cache policy google-cloud-cli-pubsub-emulator 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      echo "[setup] installing the Pub/Sub emulator (google-cloud-cli-pubsub-emulator)" >&2
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq google-cloud-cli-pubsub-emulator >/dev/null
    else
      echo "[setup] no Pub/Sub emulator: add Google's apt repository and install google-cloud-cli-pubsub-emulator" \
        "(its tests fail under CI=1 without it)" >&2
    fi
  fi
fi
# Chromium (Debian's package) renders `ragsync report` pages in the report's test.
if [ "${RAGSYNC_WITH_CHROMIUM:-0}" = "1" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Chromium (headless rendering of ragsync report in the tests)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# Run a step quietly; on failure show what it printed and stop.
quiet() {
  local log
  log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "[setup] failed: $*" >&2
    exit 1
  fi
  rm -f "$log"
}

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $PY" >&2
  "$PY" -m venv .venv
fi
TORCH="torch==2.13.0"
stamp="$(cat requirements.txt requirements-dev.txt setup.py pyproject.toml | sha256sum | cut -d' ' -f1) $TORCH"
if [ "${1:-}" != "--force" ] && [ -x .venv/bin/ragsync ] && [ "$(cat .venv/.ragsync-setup 2>/dev/null)" = "$stamp" ]; then
  echo "[setup] .venv is up to date (scripts/setup.sh --force reinstalls)" >&2
  exit 0
fi
echo "[setup] installing Python packages into .venv (first run: several minutes)" >&2
quiet .venv/bin/python -m pip install -q --upgrade pip
# torch is pinned to the CPU build and kept out of the locks: install it first
# so nothing pulls a CUDA build, then the locks (requirements.txt: runtime,
# requirements-dev.txt: tests and lint; scripts/lock.sh makes them) with the
# pin as a constraint, so they cannot replace it.
quiet .venv/bin/python -m pip install -q "$TORCH"
torch_pin="$(mktemp)"
echo "$TORCH" >"$torch_pin"
quiet .venv/bin/python -m pip install -q -r requirements.txt -r requirements-dev.txt -c "$torch_pin"
rm -f "$torch_pin"
quiet .venv/bin/python -m pip install -q --no-deps -e .
echo "$stamp" >.venv/.ragsync-setup
echo "[setup] ready: .venv/bin/ragsync" >&2
