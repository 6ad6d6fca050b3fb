#!/usr/bin/env bash
# Regenerates the locks from their inputs with pip-tools:
#   requirements.in     -> requirements.txt      (runtime)
#   requirements-dev.in -> requirements-dev.txt  (tests, lint; constrained by the runtime lock)
# Pins already in a lock are kept while they still satisfy the input; pass
# --upgrade (or --upgrade-package NAME) to move them. torch is resolved at the
# version scripts/setup.sh installs but left out of both locks (pip-tools'
# "unsafe" list): setup.sh installs it first and uses it as a constraint.
# Runs pip-compile from its own virtualenv (default /tmp/ragsync-lock; LOCK_VENV
# to change it), never from .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH="$(sed -n 's/^TORCH="\(torch==[^"]*\)"$/\1/p' scripts/setup.sh)"
[ -n "$TORCH" ] || { echo "[lock] no TORCH=\"torch==...\" line in scripts/setup.sh" >&2; exit 2; }
VENV="${LOCK_VENV:-/tmp/ragsync-lock}"
if [ ! -x "$VENV/bin/pip-compile" ]; then
  "${PYTHON:-python3.11}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q pip-tools
fi
pin="$(mktemp)"
trap 'rm -f "$pin"' EXIT
echo "$TORCH" >"$pin"
export CUSTOM_COMPILE_COMMAND="scripts/lock.sh"
compile() {
  "$VENV/bin/pip-compile" -q --strip-extras --no-emit-index-url --no-emit-find-links \
    --no-emit-trusted-host --unsafe-package torch --unsafe-package pip --unsafe-package setuptools \
    --constraint "$pin" "$@"
}
compile "$@" -o requirements.txt requirements.in
compile "$@" -o requirements-dev.txt requirements-dev.in
echo "[lock] wrote requirements.txt and requirements-dev.txt (torch left out: $TORCH is installed by scripts/setup.sh)" >&2
