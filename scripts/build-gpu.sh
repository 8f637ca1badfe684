#!/bin/sh
# build-gpu.sh -- the GPU machine kit: a stripped fusejit-run (and the tiny
# .npy checker fj-npycmp) linked with LLVM's STATIC component libraries
# (X86 + NVPTX + ORC + passes), libstdc++/libzstd/libz static, glibc dynamic
# (a fully static program cannot dlopen("libcuda.so.1")), compressed with xz.
#
#   scripts/build-gpu.sh [OUTDIR]      (default: build-gpu/)
#
# Output: OUTDIR/fusejit-gpu.tar.xz holding fusejit-run, fj-npycmp and
# fj-fma-peak (bench/matmul/run's baseline, for tests/gpu/cpu.sh),
# libdevice.10.bc (the GPU math; $LIBDEVICE, else the CUDA toolkit's) and
# glibc-required (the newest GLIBC_ symbol version the programs need, for
# run.sh's check); run tests/gpu/run.sh (the GPU) and tests/gpu/cpu.sh (its
# host CPU) on the GPU machine (each unpacks the kit itself). Needs
# llvm-19-dev (static libraries), libzstd-dev, zlib1g-dev
# and libdevice. Takes a few minutes on 2 cores; the compressed kit must stay
# under ~40 MiB.
#
# libdevice may ship: the CUDA Toolkit EULA's Attachment A (section 2.6,
# "The following portions of the SDK are distributable under the
# Agreement") lists "NVIDIA Common Device Math Functions Library:
# libdevice.10.bc" (Windows, Mac OSX and Linux), as in the toolkit's own
# copy of the EULA (e.g. nvidia_nvvm-13.0.88.dist-info/licenses/License.txt,
# section 2.6); section 2.3 asks that it ship unmodified, as here.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-gpu}
LLVM_CONFIG=${LLVM_CONFIG:-llvm-config-19}
LIBDEVICE=${LIBDEVICE:-/usr/local/cuda/nvvm/libdevice/libdevice.10.bc}
if [ ! -r "$LIBDEVICE" ]; then
	echo "build-gpu: error: no libdevice at $LIBDEVICE (set LIBDEVICE to libdevice.10.bc)" >&2
	exit 1
fi
CC=${CC:-cc}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$out/obj"
incs="-I$root/include -I$root/ir -I$root $($LLVM_CONFIG --cflags | tr ' ' '\n' | grep '^-I' | tr '\n' ' ')"
cflags="-std=c11 -O2 -g0 -fPIC -fvisibility=hidden -D_GNU_SOURCE -DFJ_BUILDING_LIBRARY -ffunction-sections -fdata-sections"
# the library's sources: every folder of cmake/layers.cmake's fj_layer(...) lines
folders=$(sed -n 's/^fj_layer(\([a-z_]*\).*/\1/p' "$root/cmake/layers.cmake")
srcs=$(for f in $folders; do ls "$root/$f"/*.c; done)
[ -n "$srcs" ] || { echo "build-gpu: error: no sources found through cmake/layers.cmake" >&2; exit 1; }
echo "build-gpu: compiling $(echo "$srcs" | wc -w) files with $jobs jobs"
export CC cflags incs out
echo "$srcs" | xargs -P "$jobs" -I{} sh -c '
	f={}; o="$out/obj/$(echo "$f" | sed "s|/|_|g").o"
	if [ ! -f "$o" ] || [ "$f" -nt "$o" ]; then $CC $cflags $incs -c "$f" -o "$o" || exit 255; fi'
rm -f "$out/libfj.a"
ar rcs "$out/libfj.a" "$out"/obj/*.o
static_if() { # -l$1 statically when its archive exists
	for d in /usr/lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
		if [ -f "$d/lib$1.a" ]; then echo "-Wl,-Bstatic -l$1 -Wl,-Bdynamic"; return; fi
	done
	echo "-l$1"
}
llvm_libs="-L$($LLVM_CONFIG --libdir) $($LLVM_CONFIG --link-static --libs x86 nvptx orcjit passes bitreader linker)"
sys="$(static_if zstd) $(static_if z) -lpthread -ldl -lm -lrt"
ldflags="-Wl,--gc-sections -Wl,--as-needed -static-libgcc -static-libstdc++ -s"
# JIT'd host kernels call compiler builtins (f16 conversions: __truncdfhf2 ...)
# that the process-symbol generator finds with dlsym; static libgcc's copies
# are hidden, so the kit exports its own (tests/gpu/builtins.c).
$CC $cflags -fno-function-sections -c "$root/tests/gpu/builtins.c" -o "$out/builtins.o"
for b in __truncdfhf2 __truncsfhf2 __extendhfsf2 __extendhfdf2; do
	ldflags="$ldflags -Wl,--undefined=$b -Wl,--export-dynamic-symbol=$b"
done
echo "build-gpu: linking fusejit-run (LLVM static)"
run_objs=""
for f in "$root"/tools/fusejit-run*.c "$root/tools/npy.c"; do
	$CC $cflags -I"$root/include" -c "$f" -o "$out/$(basename "$f" .c).o" || exit 255
	run_objs="$run_objs $out/$(basename "$f" .c).o"
done
$CC -o "$out/fusejit-run" $run_objs "$out/builtins.o" "$out/libfj.a" $llvm_libs $sys $ldflags -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic
# bench/matmul/run's FMA peak, for tests/gpu/cpu.sh (the host CPU's benchmarks)
$CC -std=c11 -O2 -g0 -D_GNU_SOURCE -pthread "$root/bench/matmul/fma_peak.c" -o "$out/fj-fma-peak" -s || exit 255
$CC $cflags $incs -c "$root/tests/gpu/npycmp.c" -o "$out/npycmp.o"
$CC -o "$out/fj-npycmp" "$out/npycmp.o" "$out/npy.o" "$out/builtins.o" "$out/libfj.a" $llvm_libs $sys $ldflags -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic
echo "build-gpu: dynamic dependencies of fusejit-run:"
ldd "$out/fusejit-run" | sed 's/^/  /'
cp "$LIBDEVICE" "$out/libdevice.10.bc"
# the newest glibc symbol version the programs need (run.sh compares it with the machine's)
objdump -T "$out/fusejit-run" "$out/fj-npycmp" "$out/fj-fma-peak" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
	sort -t. -k1,1n -k2,2n -k3,3n | tail -1 >"$out/glibc-required"
echo "build-gpu: needs glibc $(cat "$out/glibc-required") or newer"
(cd "$out" && tar cf - fusejit-run fj-npycmp fj-fma-peak libdevice.10.bc glibc-required | xz -9e -T"$jobs" >fusejit-gpu.tar.xz)
raw=$(stat -c %s "$out/fusejit-run")
xzs=$(stat -c %s "$out/fusejit-gpu.tar.xz")
echo "build-gpu: fusejit-run $((raw / 1048576)) MiB stripped; kit $out/fusejit-gpu.tar.xz $((xzs / 1048576)) MiB ($xzs bytes)"
if [ "$xzs" -gt $((40 * 1048576)) ]; then
	echo "build-gpu: error: the kit is over 40 MiB" >&2
	exit 1
fi
