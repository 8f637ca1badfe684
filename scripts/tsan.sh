#!/bin/sh
# tsan.sh -- ThreadSanitizer on the API stress test: configures a second
# build with FUSEJIT_TSAN=ON (-fsanitize=thread, -O1) in BUILD (default
# build/tsan), builds fj-api-stress alone (the library's objects and the
# test), and runs it with tests/tsan/suppressions.txt: threads racing to
# compile the same golden graphs through the kernel cache (memory and disk)
# and to run programs shared between threads. Then fj-api-soak: SOAK
# distinct graphs, then SOAK more compiled, run and destroyed by THREADS
# threads at once in one context whose kernel cache is capped at 1 MiB
# (evictions racing with compiles and with the programs that hold
# kernels). Any report fails it.
#
#   scripts/tsan.sh [BUILD] [THREADS] [CASES] [SOAK]   (CTest api.tsan_stress: 4 8;
#                                                      SOAK default 30, 0: none)
#
# CMAKE and CC (the environment) choose cmake and the compiler.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build/tsan}
threads=${2:-4}
cases=${3:-8}
soak=${4:-30}
cmake=${CMAKE:-cmake}
"$cmake" -S "$src" -B "$build" -DFUSEJIT_TSAN=ON -DFUSEJIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
"$cmake" --build "$build" -j2 --target fj-api-stress fj-api-soak >/dev/null
export TSAN_OPTIONS="suppressions=$src/tests/tsan/suppressions.txt halt_on_error=1 exitcode=66 second_deadlock_stack=1 \
print_suppressions=0"
"$build/tests/api/fj-api-stress" -t"$threads" -c"$cases" "$src/tests/golden/cases"
if [ "$soak" -gt 0 ]; then
  "$build/tests/api/fj-api-soak" --distinct="$soak" --repeats=100 --disk=off --kernel-cache-mb=1 \
    --threads="$threads" --no-rss-bounds
fi
