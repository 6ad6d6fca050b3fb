#!/usr/bin/env bash
# Set up, generate the sample corpus, backfill it, and show a query.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1
HOME_DIR="${RAGSYNC_HOME:-./ragsync-data}"
.venv/bin/ragsync sample-corpus ./sample-corpus
.venv/bin/ragsync backfill ./sample-corpus --home "$HOME_DIR" --acl-groups everyone
echo
echo "Example query:"
.venv/bin/ragsync query "how much can I spend on a hotel night" --groups everyone --home "$HOME_DIR" -k 3
