#!/bin/sh
# roundtrip.sh FUSEJIT_OPT SRC_DIR -- print -> parse -> print is the identity
# (STYLE.md) for every .fj file under SRC_DIR/examples and
# SRC_DIR/tests/lit/roundtrip: `fusejit-opt F` must succeed, and running
# fusejit-opt again on its output must print the very same text.
# Files with `// -----` separators go through --split-input-file.
set -u
opt=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fj-roundtrip.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0
count=0
for f in $(find "$src/examples" "$src/tests/lit/roundtrip" -name '*.fj' 2>/dev/null | LC_ALL=C sort); do
	count=$((count + 1))
	split=
	grep -q '^// -----' "$f" && split=--split-input-file
	if ! "$opt" $split "$f" >"$tmp/once.fj" 2>"$tmp/err"; then
		echo "FAIL: $f: fusejit-opt failed:"; cat "$tmp/err"; fail=1; continue
	fi
	if grep -q '^graph @' "$f" && ! grep -q '^graph @' "$tmp/once.fj"; then
		echo "FAIL: $f: fusejit-opt printed no graph"; fail=1; continue
	fi
	if ! "$opt" $split "$tmp/once.fj" >"$tmp/twice.fj" 2>"$tmp/err"; then
		echo "FAIL: $f: its printed form does not parse:"; cat "$tmp/err"; fail=1; continue
	fi
	if ! cmp -s "$tmp/once.fj" "$tmp/twice.fj"; then
		echo "FAIL: $f: print -> parse -> print changes the text:"
		diff -u "$tmp/once.fj" "$tmp/twice.fj" | head -40
		fail=1
	fi
done
if [ "$count" -eq 0 ]; then
	echo "roundtrip: no .fj files found under $src"; exit 1
fi
[ "$fail" -eq 0 ] && echo "roundtrip: $count files print -> parse -> print stable"
exit "$fail"
