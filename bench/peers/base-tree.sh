#!/usr/bin/env bash
# Lay out another commit's `tether` package (as the editable install maps it) for
# `python -m bench.durable_step --base-tree DIR`: its -base variants run their worker on it.
#   bench/peers/base-tree.sh main /tmp/tether-main
set -euo pipefail
commit="$1"; dir="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$dir" && mkdir -p "$dir"
git -C "$root" archive "$commit" shared producer worker | tar -x -C "$dir"
mv "$dir/shared" "$dir/tether" && mv "$dir/producer" "$dir/tether/producer" && mv "$dir/worker" "$dir/tether/worker"
echo "$commit's tether package laid out in $dir"
