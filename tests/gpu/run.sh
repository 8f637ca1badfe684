#!/bin/sh
# tests/gpu/run.sh -- the GPU machine check (no LLVM, no check, no Python, no
# network there): unpacks the kit built by scripts/build-gpu.sh, runs every
# golden case on --executor=nvptx against its .npy goldens (and against the
# aten reference in the same process, --check=aten), then the GPU benchmarks
# with --bench (inference, and a few forward graphs with --train: forward and
# backward timed together), and prints a short table last, then the time of
# each phase (unpack, probe, goldens, benchmarks). Budget: under 4 minutes.
#
# Checked first, each failure one line: xz (to unpack), the glibc the kit
# was linked against (its glibc-required) against the machine's, and, for
# nvptx, a loadable libcuda.so.1 with a GPU (a tiny run). The GPU math comes
# from the kit's libdevice.10.bc (FUSEJIT_LIBDEVICE; an unpacked kit without
# one falls back to the machine's CUDA toolkit, and fails clearly without).
#
#   tests/gpu/run.sh [KIT.tar.xz | DIR-with-fusejit-run] [--executor=nvptx] [--quick] [--keep=DIR]
#
# --executor=host runs the same logic on a CPU (to test this script);
# --quick runs the benchmarks at 1/64 of their sizes; --keep=DIR copies what
# each failure left (stderr, JSON, and for a failed run a second stderr with
# FUSEJIT_NVPTX_SYNC=1, which names the faulting kernel) into DIR/<case>, since
# the work folder goes at exit. Exit 1 on any failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kit=$root/build-gpu/fusejit-gpu.tar.xz
case ${1:-} in -*|'') ;; *) kit=$1 ;; esac
ex=nvptx
quick=0
keep=
for a in "$@"; do
	case $a in
	--executor=*) ex=${a#--executor=} ;;
	--quick) quick=1 ;;
	--keep=*) keep=${a#--keep=}; mkdir -p "$keep" || exit 1 ;;
	esac
done
work=$(mktemp -d /tmp/fj-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
phases=""
phase_end() { # NAME: the time since the last phase ended
	now=$(date +%s)
	phases="$phases $1 $((now - t0)) s,"
	t0=$now
}
die() { echo "run.sh: $*"; exit 1; }
. "$here/kit.sh"
kit_unpack "$kit" "$work"
phase_end unpack
run=$bin/fusejit-run
cmp=$bin/fj-npycmp
if [ -f "$bin/libdevice.10.bc" ]; then
	FUSEJIT_LIBDEVICE=$bin/libdevice.10.bc
elif [ -r /usr/local/cuda/nvvm/libdevice/libdevice.10.bc ]; then
	FUSEJIT_LIBDEVICE=/usr/local/cuda/nvvm/libdevice/libdevice.10.bc
elif [ "$ex" = nvptx ]; then
	die "no libdevice.10.bc in the kit nor in /usr/local/cuda/nvvm/libdevice: the f32/f64 GPU math needs it"
fi
export FUSEJIT_LIBDEVICE
start=$(date +%s)
if [ "$ex" = nvptx ] && ! "$run" "$here/bench/softmax_f32.fj" --executor=nvptx --dim N=8 >/dev/null 2>"$work/probe"; then
	die "nvptx is not usable here: $(cat "$work/probe")"
fi
phase_end probe

# ---- goldens (4 at a time) ----
mkdir -p "$work/res"
cat >"$work/case.sh" <<'CASE'
# case.sh DIR: one golden case; writes $work/res/<case> = "pass" | "skip" | "FAIL ..."
dir=${1%/}
case=$(basename "$dir")
res=$work/res/$case
if [ -f "$dir/skip" ] || [ -f "$dir/skip_$ex" ]; then echo skip >"$res"; exit 0; fi
set --
for f in "$dir"/in_*.npy; do
	[ -f "$f" ] || continue
	p=$(basename "$f" .npy); p=${p#in_}
	set -- "$@" --input "$p=$f"
done
out=$work/out/$case
mkdir -p "$out"
if ! timeout 120 "$run" "$dir/graph.fj" --executor="$ex" "$@" --check=aten --json --output-dir="$out" \
	>"$out/json" 2>"$out/err"; then
	echo "FAIL $case: $(head -c 300 "$out/err" | tr '\n' ' ') $(grep -o '"rel_err": [^,}]*' "$out/json" | tr '\n' ' ')" >"$res"
	if [ -n "$keep" ]; then
		FUSEJIT_NVPTX_SYNC=1 timeout 120 "$run" "$dir/graph.fj" --executor="$ex" "$@" --check=aten \
			>/dev/null 2>"$out/err_sync"
		mkdir -p "$keep/$case" && cp "$out/err" "$out/err_sync" "$out/json" "$keep/$case/"
	fi
	exit 0
fi
# outputs by position: the "file" keys of the JSON, in order, against out_<i>.npy
i=0
for f in $(grep -o '"file": "[^"]*"' "$out/json" | sed 's/"file": "//; s/"$//'); do
	if [ -f "$dir/out_$i.npy" ] && [ -x "$cmp" ] && ! "$cmp" "$f" "$dir/out_$i.npy" >"$out/cmp$i" 2>&1; then
		echo "FAIL $case: output $i vs golden: $(cat "$out/cmp$i")" >"$res"
		[ -n "$keep" ] && mkdir -p "$keep/$case" && cp "$out/json" "$out/cmp$i" "$keep/$case/"
		exit 0
	fi
	i=$((i + 1))
done
echo pass >"$res"
CASE
export work run cmp ex keep
ls -d "$root"/tests/golden/cases/*/ | xargs -P 4 -n 1 sh "$work/case.sh"
pass=$(grep -l '^pass' "$work"/res/* 2>/dev/null | wc -l)
skip=$(grep -l '^skip' "$work"/res/* 2>/dev/null | wc -l)
fail=$(grep -l '^FAIL' "$work"/res/* 2>/dev/null | wc -l)
total=$(ls -d "$root"/tests/golden/cases/*/ | wc -l)
missing=$((total - pass - skip - fail))
[ "$missing" -gt 0 ] && echo "$missing cases gave no result (a crash of case.sh?)" && fail=$((fail + missing))
gold_s=$(( $(date +%s) - start ))
cat "$work"/res/* | grep '^FAIL' || true
echo "goldens on $ex: $pass passed, $fail failed, $skip skipped (${gold_s} s)"
phase_end goldens

# ---- benchmarks ----
scale=1
[ $quick = 1 ] && scale=64
: >"$work/table"
bench() { # name file --dim args...
	name=$1; file=$2; shift 2
	if timeout 90 "$run" "$here/bench/$file" --executor="$ex" --bench --json "$@" >"$work/b.json" 2>"$work/b.err"; then
		ms=$(grep -o '"median_ms": [^,}]*' "$work/b.json" | sed 's/.*: //')
		gbps=$(grep -o '"gbps": [^,}]*' "$work/b.json" | sed 's/.*: //')
		cgbps=$(grep -o '"memcpy_gbps": [^,}]*' "$work/b.json" | sed 's/.*: //')
		ratio=$(grep -o '"memcpy_ratio": [^,}]*' "$work/b.json" | sed 's/.*: //')
		cold=$(grep -o '"cold": [^,}]*' "$work/b.json" | sed 's/.*: //')
		cold=${cold:-nan} # --train reports no compile time
		printf '%-22s %10.4f %9.1f %9.1f %7.3f %9.1f\n' "$name" "$ms" "$gbps" "$cgbps" "$ratio" "$cold" >>"$work/table"
	else
		printf '%-22s FAILED: %s\n' "$name" "$(head -c 200 "$work/b.err")" >>"$work/table"
		[ -n "$keep" ] && cp "$work/b.err" "$keep/bench_$name.err"
		fail=$((fail + 1))
	fi
}
big=$((268435456 / scale))
rows=$((8192 / scale))
bench chain_2^28_f32 chain.fj --dim N=$big
for dt in f32 f16; do
	for g in layer_norm layer_norm_bwd rms_norm rms_norm_bwd softmax softmax_bwd; do
		bench "${g}_$dt" "${g}_$dt.fj" --dim N=$rows
	done
done
# training: @f.fw + @f.bw on the device; f32 also checked against aten (on
# one core, about 5 s a graph: f16 goes unchecked to keep the budget)
for dt in f32 f16; do
	check=--check=aten
	[ $dt = f16 ] && check=
	for g in layer_norm softmax; do
		bench "${g}_${dt}_train" "${g}_$dt.fj" --dim N=$rows --train $check
	done
done
echo
echo "GPU benchmarks ($ex; [$rows,4096] rows, chain $big elements; total $(( $(date +%s) - start )) s)"
printf '%-22s %10s %9s %9s %7s %9s\n' bench median_ms GB/s copyGB/s ratio cold_ms
cat "$work/table"
phase_end benchmarks
echo "phases:${phases%,}"
[ $fail -eq 0 ]
