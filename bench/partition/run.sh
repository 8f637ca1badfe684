#!/bin/sh
# bench/partition/run.sh [BUILD_DIR]: the values and bytes `partition` saves
# for backward, mincut vs default, on the bench/partition graphs (written in
# aten, run through verify,decompose,canonicalize,autodiff,canonicalize,
# recompute,partition{mode=...}), next to what functorch's min-cut
# partitioner saves on the same functions (functorch.py, Debian's PyTorch
# 1.13; skipped when it cannot run). Then times partition on a joint graph of
# about 10,000 nodes (gen_big.py).
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
opt=$build/fusejit-opt
pre='verify,decompose,canonicalize,autodiff,canonicalize,recompute'
tmp=${TMPDIR:-/tmp}/fj-bench-partition.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/functorch.py" > "$tmp/functorch.txt" 2>/dev/null || : > "$tmp/functorch.txt"
printf '%-14s %28s %28s %28s\n' function 'mincut (values, bytes)' 'default (values, bytes)' 'functorch mincut'
for name in gelu silu layer_norm softmax rmsnorm ln_residual mlp attention cross_entropy chain; do
  row=$name
  for mode in mincut default; do
    line=$("$opt" "$here/$name.fj" --passes="$pre,partition{mode=$mode}" --stats 2>&1 >/dev/null | grep 'partition @')
    n=$(echo "$line" | sed 's/.*saved: \([0-9]*\) values.*/\1/')
    b=$(echo "$line" | sed 's/.*values, \(.*\) bytes/\1/')
    row="$row|$n|$b"
  done
  ft=$(grep "^$name " "$tmp/functorch.txt" | sed 's/.*mincut: \([0-9]*\) values, \([0-9]*\) bytes .*/\1|\2/')
  echo "$row|${ft:-?|?}" | awk -F'|' '{printf "%-14s %6s %21s %6s %21s %6s %21s\n", $1, $2, $3, $4, $5, $6, $7}'
done
/usr/bin/python3 "$here/gen_big.py" 6000 > "$tmp/big.fj"
"$opt" "$tmp/big.fj" --passes=autodiff,recompute --stats -o "$tmp/joint.fj" 2> "$tmp/joint.err"
grep 'pass autodiff' "$tmp/joint.err" | sed 's/^/joint graph: /'
"$opt" "$tmp/joint.fj" --passes=partition --time-passes --stats 2>&1 >/dev/null | grep -E 'partition @| partition$|partition *$' || true
