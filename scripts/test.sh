#!/usr/bin/env bash
# Installs what is missing, builds fusejit and runs the whole test suite.
#   scripts/test.sh              # build/ , warnings as errors
#   FJ_SANITIZE=1 scripts/test.sh  # build-asan/ with -fsanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
if [ "${FJ_SANITIZE:-0}" = 1 ]; then
  dir=${FJ_BUILD_DIR:-build-asan}
  extra=(-DFUSEJIT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
  # JIT code and LLVM's statics: leaks are checked by the leak tests themselves.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_odr_violation=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Tests that repeat what the normal build checked in full run a subset here.
  export FJ_TEST_QUICK=1
else
  dir=${FJ_BUILD_DIR:-build}
  extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
fi
# The bridge's tests also run under a pinned PyTorch 2.x, in a virtual
# environment cached outside the clone (installed once; a skip says why not).
if [ "${FJ_SANITIZE:-0}" != 1 ]; then
  scripts/torch2-env.sh >/dev/null || [ $? = 77 ]
fi
# Without the CUDA toolkit's libdevice, the tests that compile PTX with math
# ask for the explicit approximate math (the ones that check the math itself
# set what they need).
if [ ! -f "${FUSEJIT_LIBDEVICE:-/usr/local/cuda/nvvm/libdevice/libdevice.10.bc}" ]; then
  export FUSEJIT_NVPTX_MATH=${FUSEJIT_NVPTX_MATH:-approx}
  echo "test.sh: no libdevice (CUDA toolkit): PTX math tested as FUSEJIT_NVPTX_MATH=$FUSEJIT_NVPTX_MATH"
fi
cmake -S . -B "$dir" -DFUSEJIT_WERROR=ON "${extra[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
# CTest's summary names the skipped tests ("Not Run") but does not show their
# output: scripts/ctest-skips.sh prints why each one skipped, from the JUnit log.
junit="$(cd "$dir" && pwd)/ctest-junit.xml"
rm -f "$junit"
rc=0
ctest --test-dir "$dir" --output-on-failure -j "$jobs" --output-junit "$junit" || rc=$?
scripts/ctest-skips.sh "$junit" || true
exit "$rc"
