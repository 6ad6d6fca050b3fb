#!/usr/bin/env bash
# Set up, then lint, type-check and run the whole test suite (SQLite and a
# throwaway PostgreSQL, MediaWiki, Redmine and Pub/Sub emulator that the tests start themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
export RAGSYNC_WITH_CHROMIUM=1  # setup.sh installs it; tests/test_report.py then must render
RAGSYNC_WITH_POSTGRES=1 RAGSYNC_WITH_MEDIAWIKI=1 RAGSYNC_WITH_REDMINE=1 RAGSYNC_WITH_PUBSUB=1 scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_THREAD_LIMIT=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy ragsync connectors transforms beam_pipelines control_plane cli
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
exec scripts/test_files.sh
