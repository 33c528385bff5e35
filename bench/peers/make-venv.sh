#!/usr/bin/env bash
# The peers of P20 (python -m bench.durable_step) in their own venv, never in Tether's:
#   bench/peers/make-venv.sh        -> .venv-peers at the repository's root
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python3}"
"$python" -m venv "$root/.venv-peers"
"$root/.venv-peers/bin/python" -m pip install --quiet --upgrade pip
"$root/.venv-peers/bin/python" -m pip install --quiet -r "$root/bench/peers/requirements-durable.txt"
echo "peers installed in $root/.venv-peers"
