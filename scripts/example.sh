#!/usr/bin/env bash
# Installs what is missing, builds fusejit and runs an example graph end to
# end: the passes step by step, then the graph on the default executor,
# checked against the unfused `aten` reference.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir=${FJ_BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)" --target fusejit-opt fusejit-run
"$dir/fusejit-opt" examples/gelu_mlp.fj --pipeline=default --print-after-all -o /dev/null
"$dir/fusejit-run" examples/gelu_mlp.fj --check=aten
