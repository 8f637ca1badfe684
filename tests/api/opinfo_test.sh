#!/bin/sh
# opinfo_test.sh LIB SRC [SANITIZED] -- one sample of every op of PyTorch's
# OpInfo database with f32 CPU support through torch.compile(backend=
# "fusejit_host") against eager (python/tests/opinfo_sweep.py): fails on any
# mismatch or backend error, when fewer than 600 ops ran, or when an op goes
# to PyTorch for a reason python/tests/opinfo_left.tsv does not list (the
# floor: what maps onto fusejit's op set runs in fusejit). Runs under the
# pinned PyTorch 2.x (scripts/torch2-env.sh); exit 77 where it is absent.
LIB=$1 SRC=$2 SAN=${3:-OFF}
case "$SAN" in ON|on|1|TRUE|true)
	echo "skip: a sanitizer build of libfusejit cannot be loaded into Python (run the ordinary build)"
	exit 77;;
esac
PY=$("$SRC/scripts/torch2-env.sh") || exit $?
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT
cd "$SRC" || exit 1
FUSEJIT_LIB="$LIB" FUSEJIT_CACHE_DIR=off PYTHONPATH="$SRC/python" \
	"$PY" python/tests/opinfo_sweep.py --samples 1 --jobs 2 --timeout 120 --gate 600 \
	--left python/tests/opinfo_left.tsv \
	--out "$out/opinfo.json" --csv "$out/opinfo.csv" >"$out/log" 2>&1
rc=$?
grep -v "^W[0-9]* " "$out/log" # PyTorch's warnings left out
exit $rc
