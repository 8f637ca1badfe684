#!/bin/sh
# tests/gpu/cpu.sh -- fusejit's CPU benchmarks on the GPU machine's own CPU.
# That host is another x86 server kind (an Intel Xeon where this was first
# run) for the CPU speed targets, which must hold on every one. Unpacks the
# kit of scripts/build-gpu.sh (fusejit-run and fj-fma-peak), then, on 2 CPUs
# (taskset -c 0,1, FUSEJIT_THREADS=2) as the 2-vCPU machines run them:
#   - bench/matmul/run: the host matmul against the FMA peak of the same run,
#     AVX-512 and AVX2 (its two-thread scaling from separate processes: the
#     static kit has no libfusejit.so for fj-bench-ab);
#   - bench/run on the host executor (aten's rows beside it): every bench
#     graph, forward and training, against the same run's memcpy;
#   - bench/run again with FUSEJIT_HOST_TARGET=avx2 for the graphs with
#     memcpy targets (gelu, silu, layer_norm, rms_norm, softmax, log_softmax);
#   - the pointwise graphs (gelu, silu, chain) with FUSEJIT_HOST_STREAM off
#     and on, alternating round by round (stream-off-N.json, stream-on-N.json):
#     whether streaming their outputs pays on this CPU (auto: on for x86).
# The GPU is left out (FUSEJIT_LIBCUDA names no library): run.sh measures it.
# The tables print as each bench ends, and go with their JSON to --out=DIR.
# Needs python3 (the benches are standard-library Python). About 5 minutes
# at --rounds=2 (the default); exit 1 when a bench fails.
#
#   tests/gpu/cpu.sh [KIT.tar.xz | DIR-with-fusejit-run] [--rounds=N] [--out=DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kit=$root/build-gpu/fusejit-gpu.tar.xz
case ${1:-} in -*|'') ;; *) kit=$1 ;; esac
rounds=2
out=
for a in "$@"; do
	case $a in
	--rounds=*) rounds=${a#--rounds=} ;;
	--out=*) out=${a#--out=} ;;
	esac
done
work=$(mktemp -d /tmp/fj-cpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out=$work/out
mkdir -p "$out" || exit 1
die() { echo "cpu.sh: $*"; exit 1; }
. "$here/kit.sh"
kit_unpack "$kit" "$work"
[ -x "$bin/fj-fma-peak" ] || die "no fj-fma-peak in $bin (a kit from before it shipped one: rebuild it)"
py=$(command -v python3) || die "python3 is not installed: bench/run and bench/matmul/run need it"
pin=
command -v taskset >/dev/null 2>&1 && pin="taskset -c 0,1"
export FUSEJIT_THREADS=2 FUSEJIT_LIBCUDA=/nonexistent/libcuda.so.1 FUSEJIT_CACHE_DIR=$work/cache
echo "cpu.sh: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, ${pin:-not pinned}, $rounds rounds"
fail=0
$pin "$py" "$root/bench/matmul/run" --build "$bin" --rounds "$rounds" --json "$out/matmul.json" || fail=1
$pin "$py" "$root/bench/run" --build "$bin" --aten-reps 1 --rounds "$rounds" --json "$out/native.json" || fail=1
FUSEJIT_HOST_TARGET=avx2 $pin "$py" "$root/bench/run" --build "$bin" --aten-reps 1 --rounds "$rounds" \
	--only gelu,silu,layer_norm,rms_norm,softmax,log_softmax --json "$out/avx2.json" || fail=1
r=1
while [ $r -le "$rounds" ]; do
	for s in off on; do
		FUSEJIT_HOST_STREAM=$s $pin "$py" "$root/bench/run" --build "$bin" --aten-reps 1 --rounds 1 \
			--only gelu,silu,chain --json "$out/stream-$s-$r.json" || fail=1
	done
	r=$((r + 1))
done
[ $fail -eq 0 ]
