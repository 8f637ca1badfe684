#!/bin/sh
# soak.sh -- the full soak (issue 17): fj-api-soak with 10,000 distinct small
# graphs compiled and run in one context, then one graph run 100,000 times
# (recompiled every 100 runs), with the disk kernel cache off and then on (a
# fresh temporary folder); resident memory must stay flat after the warm-up
# and no file descriptor may leak (tests/api/soak.c says how it judges).
# CTest api.soak runs a short version of the same program.
#
#   scripts/soak.sh [BUILD] [ARGS...]      (BUILD: default build; ARGS go to
#                                          fj-api-soak, after the defaults)
#
# The log goes to BUILD/soak.log; the figures (RSS at start, after the
# warm-up, at the end and its peak; fds; graphs, runs, time) are the lines
# starting "soak:". About 25 minutes per disk mode on 2 cores: run it
# with nice.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
[ $# -gt 0 ] && shift
bin=$build/tests/api/fj-api-soak
if [ ! -x "$bin" ]; then
	echo "soak.sh: $bin not found: build it first (cmake --build $build --target fj-api-soak)" >&2
	exit 2
fi
log=$build/soak.log
start=$(date +%s)
status=0
"$bin" --distinct=10000 --repeats=100000 --recompile-every=100 --kernel-cache-mb=8 -v "$@" 2>&1 | tee "$log" ||
	status=1
# tee hides the exit status: the program's verdict is its last line
tail -n 1 "$log" | grep -q "soak: passed" || status=1
echo "soak.sh: $(( $(date +%s) - start )) s, log in $log: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
