#!/bin/sh
# ptxas_all.sh FUSEJIT_OPT SRC_ROOT -- every golden graph (tests/golden/cases/*/graph.fj)
# and every bench graph (bench/graphs/*.fj, bench/partition/*.fj, the GPU kit's
# tests/gpu/bench/*.fj) through
# `fusejit-opt --emit=ptx --target=sm_80|sm_90` (every kernel variant:
# FUSEJIT_PTX_ALL_VARIANTS=1), the bench graphs also in training
# (--pipeline=train: their backward kernels), then `ptxas -arch=sm_XX` on each
# PTX file.
# Skips (exit 77) where the CUDA toolkit's ptxas is absent. Files run in
# parallel (one job per core); 70-200 s on 2 (shared) cores for ~150 graphs.
# Fails when it finds no golden or no bench graph, and unless every file of
# the list was checked by ptxas for every target (nothing checked: a failure).
opt=$1
root=$2
PTXAS=${PTXAS:-/usr/local/cuda/bin/ptxas}
if [ ! -x "$PTXAS" ]; then
	echo "SKIP: $PTXAS not found (install the CUDA toolkit to check PTX)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ls "$root"/tests/golden/cases/*/graph.fj "$root"/bench/graphs/*.fj "$root"/bench/partition/*.fj \
	"$root"/tests/gpu/bench/*.fj 2>/dev/null >"$tmp/list"
for f in "$root"/bench/graphs/*.fj; do [ -f "$f" ] && echo "$f train"; done >>"$tmp/list"
ngolden=$(grep -c '/tests/golden/cases/' "$tmp/list")
nbench=$(grep -c '/bench/graphs/[^ ]*$' "$tmp/list")
if [ "$ngolden" -eq 0 ] || [ "$nbench" -eq 0 ]; then
	echo "FAIL: $ngolden golden graphs ($root/tests/golden/cases/*/graph.fj) and $nbench bench graphs ($root/bench/graphs/*.fj) found; none may be missing"
	exit 1
fi
# FJ_TEST_QUICK (the sanitizer build of CI, which the normal build already
# covered in full): every fourth graph, sm_80 only.
targets="sm_80 sm_90"
if [ -n "${FJ_TEST_QUICK:-}" ]; then
	awk 'NR % 4 == 1' "$tmp/list" >"$tmp/list.quick" && mv "$tmp/list.quick" "$tmp/list"
	targets=sm_80
fi
n=$(wc -l <"$tmp/list")
jobs=$(nproc 2>/dev/null || echo 2)
export opt PTXAS tmp
start=$(date +%s)
for sm in $targets; do
	export sm
	xargs -P "$jobs" -I{} sh -c '
		set -- {}
		f=$1
		pipe=${2:-default}
		out="$tmp/$(echo "$f" | tr / _).$pipe.$sm.ptx"
		if ! FUSEJIT_PTX_ALL_VARIANTS=1 "$opt" "$f" --pipeline=$pipe --emit=ptx --target=$sm -o "$out" 2>"$out.err"; then
			echo "FAIL (emit, $pipe, $sm): $f: $(head -c 400 "$out.err")"
			echo x >>"$tmp/failed"
		elif ! "$PTXAS" -arch=$sm "$out" -o /dev/null 2>"$out.err"; then
			echo "FAIL (ptxas -arch=$sm, $pipe): $f: $(head -c 400 "$out.err")"
			echo x >>"$tmp/failed"
		else
			echo x >>"$tmp/checked"
		fi' <"$tmp/list"
done
failed=0 checked=0 expected=0
[ -f "$tmp/failed" ] && failed=$(wc -l <"$tmp/failed")
[ -f "$tmp/checked" ] && checked=$(wc -l <"$tmp/checked")
for sm in $targets; do expected=$((expected + n)); done
echo "ptxas: $n graphs and pipelines x ($targets), $checked of $expected checked, $failed failed, $(( $(date +%s) - start )) s"
if [ "$checked" -eq 0 ] || [ "$checked" -ne "$expected" ]; then
	echo "FAIL: ptxas checked $checked PTX files of $expected"
	exit 1
fi
[ "$failed" -eq 0 ]
