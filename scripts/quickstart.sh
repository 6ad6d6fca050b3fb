#!/usr/bin/env bash
# Set up, generate the sample corpus, backfill it, and show a query. The
# corpus (./sample-corpus) and the home (./ragsync-data, or $RAGSYNC_HOME)
# are made in the current directory; .venv is the checkout's.
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
"$ROOT/scripts/setup.sh"
export HF_HUB_OFFLINE=1
RAGSYNC="$ROOT/.venv/bin/ragsync"
HOME_DIR="${RAGSYNC_HOME:-./ragsync-data}"
"$RAGSYNC" sample-corpus ./sample-corpus
"$RAGSYNC" backfill ./sample-corpus --home "$HOME_DIR" --acl-groups everyone
echo
echo "Example query:"
"$RAGSYNC" query "how much can I spend on a hotel night" --groups everyone --home "$HOME_DIR" -k 3
