#!/usr/bin/env bash
# torch2-env.sh -- prints the path of a Python interpreter with the pinned
# PyTorch 2.x (and its torchvision, transformers, NumPy, pytest) that the
# bridge's tests run under beside Debian's PyTorch 1.13.
#
# The virtual environment lives outside the clone (default
# ${XDG_CACHE_HOME:-~/.cache}/fusejit-py/torch-<version>; FJ_TORCH2_VENV moves
# it) and is reused while its stamp names these pins: the install is done
# once and takes a few GB, since PyPI's Linux wheels of torch bring CUDA
# libraries. Exit 77 (skip, saying why) when there is no pip-capable Python
# 3 or too little free disk for a first install, or when FJ_NO_TORCH2=1; any
# other failure exits 1 with pip's message.
set -euo pipefail

TORCH=2.15.0 TORCHVISION=0.29.2 TRANSFORMERS=5.24.0
pins=(torch==$TORCH torchvision==$TORCHVISION transformers==$TRANSFORMERS numpy pytest)
venv=${FJ_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fusejit-py/torch-$TORCH}
stamp="$venv/.fusejit-pins"
need_gb=8

skip() { echo "torch2-env: skip: $*" >&2; exit 77; }

[ "${FJ_NO_TORCH2:-0}" = 1 ] && skip "FJ_NO_TORCH2=1"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
	echo "$venv/bin/python"
	exit 0
fi

# a Python 3.9+ that can make virtual environments: the one on PATH (pyenv's
# on these machines) first, then Debian's
py=
for c in python3 /usr/bin/python3; do
	if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 9)' 2>/dev/null; then
		py=$(command -v "$c")
		break
	fi
done
[ -n "$py" ] || skip "no Python 3.9+ with venv and ensurepip (apt-get install python3-venv)"

mkdir -p "$(dirname "$venv")"
free_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt $((need_gb * 1024 * 1024)) ]; then
	skip "$((free_kb / 1024 / 1024)) GB free under $(dirname "$venv"); the PyTorch $TORCH environment needs about $need_gb GB (PyPI's wheels bring CUDA libraries)"
fi

echo "torch2-env: installing ${pins[*]} into $venv (once; a few GB)" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input "${pins[@]}" >&2; then
	rm -rf "$venv"
	echo "torch2-env: error: pip could not install ${pins[*]} into $venv" >&2
	exit 1
fi
echo "${pins[*]}" >"$stamp"
echo "$venv/bin/python"
