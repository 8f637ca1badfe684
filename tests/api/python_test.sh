#!/bin/sh
# python_test.sh PYTHON LIB SRC [SANITIZED] -- the pytest suite of python/tests
# with the library just built; exit 77 (skipped) when pytest or NumPy is absent,
# or when the library is built with sanitizers (Python cannot load it). The
# bridge's tests skip themselves where PyTorch is absent.
# PYTHON "torch2" is the pinned PyTorch 2.x environment of scripts/torch2-env.sh.
PY=$1 LIB=$2 SRC=$3 SAN=${4:-OFF}
case "$SAN" in ON|on|1|TRUE|true)
	echo "skip: a sanitizer build of libfusejit cannot be loaded into $PY (run the ordinary build)"
	exit 77;;
esac
if [ "$PY" = torch2 ]; then
	PY=$("$SRC/scripts/torch2-env.sh") || exit $?
fi
if ! "$PY" -c "import pytest, numpy" >/dev/null 2>&1; then
	echo "skip: $PY has no pytest or NumPy (apt-get install python3-pytest python3-numpy)"
	exit 77
fi
# (the bridge's tests skip themselves without PyTorch; the binding's need NumPy alone)
cd "$SRC" && FUSEJIT_LIB="$LIB" FUSEJIT_CACHE_DIR=off exec "$PY" -m pytest -q -p no:cacheprovider python/tests
