#!/bin/sh
# budgets.sh FUSEJIT_OPT SRC_ROOT -- the ptxas budgets at sm_90
# (tests/nvptx/budgets.py, which says what it checks; the table of
# budgets: tests/nvptx/budgets.tsv). Skips (exit 77) without ptxas at
# $PTXAS (default /usr/local/cuda/bin/ptxas) or without /usr/bin/python3.
PTXAS=${PTXAS:-/usr/local/cuda/bin/ptxas}
if [ ! -x "$PTXAS" ]; then
	echo "SKIP: $PTXAS not found (install the CUDA toolkit to check the ptxas budgets)"
	exit 77
fi
if [ ! -x /usr/bin/python3 ]; then
	echo "SKIP: /usr/bin/python3 not found (the budget check is a Python script)"
	exit 77
fi
export PTXAS
exec /usr/bin/python3 "$(dirname "$0")/budgets.py" "$1" "$2"
