#!/bin/sh
# fj-bench-ab (bench/ab/ab.c): an A/A run of one library on a graph prints
# its one line with the two builds' outputs equal; bad arguments exit 1
# with one `error:` line.
#   sh bench_ab.sh FJ_BENCH_AB LIBFUSEJIT GRAPH
set -u
AB=$1
LIB=$2
GRAPH=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/fj-bench-ab.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0

out=$(FUSEJIT_CACHE_DIR=off "$AB" --seconds 0.2 --threads 1 --flush 1 "$LIB" "$LIB" "$GRAPH" 2>"$T/err")
rc=$?
if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -Eq '^A [0-9.]+ ms .* B/A speed [0-9.]+ \(quartiles [0-9.]+ [0-9.]+\) \| [0-9]+ pairs \| outputs differ by 0$'; then
  echo "FAIL: A/A run (rc $rc): $out $(cat "$T/err")"
  fails=$((fails + 1))
fi

# the same with inputs and outputs off their lines
out=$(FUSEJIT_CACHE_DIR=off "$AB" --seconds 0.2 --threads 1 --offset 20 "$LIB" "$LIB" "$GRAPH" 2>"$T/err")
rc=$?
if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -Eq ' \| outputs differ by 0$'; then
  echo "FAIL: A/A run at --offset 20 (rc $rc): $out $(cat "$T/err")"
  fails=$((fails + 1))
fi

# --json: one object, the same fields; --threads-b: one thread against two
out=$(FUSEJIT_CACHE_DIR=off "$AB" --json --seconds 0.2 --threads 1 --threads-b 2 "$LIB" "$LIB" "$GRAPH" 2>"$T/err")
rc=$?
if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -Eq '^\{"a_ms": [0-9.e+-]+, "a_fastest_ms": [0-9.e+-]+, "b_ms": [0-9.e+-]+, "b_fastest_ms": [0-9.e+-]+, "speed": [0-9.e+-]+, "speed_q1": [0-9.e+-]+, "speed_q3": [0-9.e+-]+, "pairs": [0-9]+, "outputs_differ": 0\}$'; then
  echo "FAIL: --json --threads-b 2 (rc $rc): $out $(cat "$T/err")"
  fails=$((fails + 1))
fi

# bad CASE ARGS...: exit 1, exactly one line on stderr naming an error
bad() {
  name=$1
  shift
  FUSEJIT_CACHE_DIR=off "$AB" "$@" >"$T/out" 2>"$T/err"
  rc=$?
  if [ $rc -ne 1 ] || [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q 'error' "$T/err" || [ -s "$T/out" ]; then
    echo "FAIL: $name: rc $rc, stderr: $(cat "$T/err"), stdout: $(cat "$T/out")"
    fails=$((fails + 1))
  fi
}
printf 'graph @g(%%x: f32[N]) {\n  %%y = aten.exp(%%x)\n  return %%y\n}\n' >"$T/sym.fj"
printf 'graph @g(%%x: f32[4]) {\n  %%y = aten.nope(%%x)\n  return %%y\n}\n' >"$T/bad.fj"
bad usage "$LIB" "$GRAPH"
bad option --seconds 0 "$LIB" "$LIB" "$GRAPH"
bad threads_b --threads-b -1 "$LIB" "$LIB" "$GRAPH"
bad offset --offset 1.5 "$LIB" "$LIB" "$GRAPH"
bad offset_big --offset 4096 "$LIB" "$LIB" "$GRAPH"
bad no_library "$T/none.so" "$LIB" "$GRAPH"
bad not_a_library "$GRAPH" "$LIB" "$GRAPH"
bad no_graph "$LIB" "$LIB" "$T/none.fj"
bad bad_graph "$LIB" "$LIB" "$T/bad.fj"
bad symbolic "$LIB" "$LIB" "$T/sym.fj"

[ $fails -eq 0 ] && echo "bench_ab: ok"
exit $((fails != 0))
