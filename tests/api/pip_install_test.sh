#!/bin/sh
# pip_install_test.sh SRC -- `pip install ./python` into a fresh virtual
# environment builds libfusejit.so with CMake into the package, and `import
# fusejit` then works from outside the checkout with no FUSEJIT_LIB. Exit 77
# (skipped, saying why) without a Python that has venv.
SRC=$1
PY=
for c in python3 /usr/bin/python3; do
	if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import venv, ensurepip' >/dev/null 2>&1; then
		PY=$c
		break
	fi
done
if [ -z "$PY" ]; then
	echo "skip: no python3 with venv and ensurepip (apt-get install python3-venv)"
	exit 77
fi
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
set -e
"$PY" -m venv "$dir/venv"
# pip fetches the build backend (setuptools) from PyPI, as for any user
"$dir/venv/bin/python" -m pip install -q --disable-pip-version-check "$SRC/python"
cd "$dir"
unset FUSEJIT_LIB
"$dir/venv/bin/python" - <<'PYEOF'
import fusejit, ctypes
lib = fusejit._lib.load()
assert "site-packages/fusejit/libfusejit.so" in lib._name, lib._name
ctx = fusejit.Context()
p = ctx.compile("graph @main(%x: f32[N]) {\n  %y = aten.neg(%x)\n  return %y\n}\n", executor="host")
import numpy as np
(y,) = p.run(np.arange(4, dtype=np.float32))
assert list(y) == [0, -1, -2, -3], y
print("pip install ./python: import fusejit", fusejit.version(), "from", lib._name)
PYEOF
