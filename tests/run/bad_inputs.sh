#!/bin/sh
# fusejit-run on bad inputs (IR.md §5): each must exit 1 with exactly one
# `... error: ...` line on stderr, and leave nothing in --output-dir.
#   sh bad_inputs.sh FUSEJIT_RUN DIR_OF_THIS_SCRIPT
set -u
RUN=$1
HERE=$2
FJ=$HERE/bad_inputs.fj
T=$(mktemp -d "${TMPDIR:-/tmp}/fj-bad-inputs.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
n=0

# mknpy FILE DESCR SHAPE NBYTES [FORTRAN] [MAJOR]: a .npy (v1 or v2) of NBYTES zero bytes.
mknpy() {
  file=$1 descr=$2 shape=$3 nbytes=$4 fortran=${5:-False} major=${6:-1}
  dict="{'descr': '$descr', 'fortran_order': $fortran, 'shape': $shape, }"
  pre=10
  [ "$major" = 2 ] && pre=12
  len=$(( ${#dict} + 1 ))
  pad=$(( (64 - (pre + len) % 64) % 64 ))
  hlen=$(( len + pad ))
  {
    printf '\223NUMPY'
    printf "\\$(printf %03o "$major")\\000"
    printf "\\$(printf %03o $(( hlen % 256 )))\\$(printf %03o $(( hlen / 256 )))"
    [ "$major" = 2 ] && printf '\000\000'
    printf '%s' "$dict"
    printf "%${pad}s\n" ''
    head -c "$nbytes" /dev/zero
  } > "$file"
}

# expect_fail NAME PATTERN ARGS...: exit 1, one error line matching PATTERN, no output.
expect_fail() {
  name=$1 pat=$2
  shift 2
  n=$((n + 1))
  out=$T/out_$n
  "$RUN" "$@" --output-dir="$out" > "$T/stdout" 2> "$T/stderr"
  rc=$?
  lines=$(wc -l < "$T/stderr")
  if [ $rc -ne 1 ]; then
    echo "FAIL $name: exit status $rc, expected 1"; cat "$T/stderr"; fails=$((fails + 1)); return
  fi
  if [ "$lines" -ne 1 ] || ! grep -q 'error: ' "$T/stderr"; then
    echo "FAIL $name: expected one error line, got:"; cat "$T/stderr"; fails=$((fails + 1)); return
  fi
  if ! grep -q -- "$pat" "$T/stderr"; then
    echo "FAIL $name: message does not match '$pat':"; cat "$T/stderr"; fails=$((fails + 1)); return
  fi
  if [ -e "$out" ]; then
    echo "FAIL $name: $out was written"; fails=$((fails + 1)); return
  fi
}

mknpy "$T/x.npy" '<f4' '(3, 4)' 48
mknpy "$T/x_v2.npy" '<f4' '(3, 4)' 48 False 2
mknpy "$T/y.npy" '<f4' '(3,)' 12
mknpy "$T/y2.npy" '<f4' '(2,)' 8
mknpy "$T/x_shape.npy" '<f4' '(3, 5)' 60
mknpy "$T/x_i64.npy" '<i8' '(3, 4)' 96
mknpy "$T/x_rank.npy" '<f4' '(12,)' 48
mknpy "$T/trunc.npy" '<f4' '(3, 4)' 40
mknpy "$T/trail.npy" '<f4' '(3, 4)' 52
mknpy "$T/fortran.npy" '<f4' '(3, 4)' 48 True
mknpy "$T/pickle.npy" '|O' '(3, 4)' 96
mknpy "$T/bigend.npy" '>f4' '(3, 4)' 48
mknpy "$T/overflow.npy" '<f4' '(4611686018427387904, 4)' 48
printf 'PK\003\004 this is not a .npy file at all, but it is long enough' > "$T/magic.npy"
printf '\223NUMPY\001\000\010\000{garbage' > "$T/garbage.npy"
printf '\223NUMPY\001\000' > "$T/short.npy"
mkdir "$T/dir.npy"
# i64[3] = {1, 100, 2}
mknpy "$T/ids.npy" '<i8' '(3,)' 0
printf '\001\000\000\000\000\000\000\000\144\000\000\000\000\000\000\000\002\000\000\000\000\000\000\000' >> "$T/ids.npy"

# the good inputs work (and write their outputs)
if ! "$RUN" "$FJ" --input x="$T/x.npy" --input y="$T/y.npy" --output-dir="$T/good" > /dev/null ||
   [ ! -f "$T/good/a.npy" ] || [ ! -f "$T/good/b.npy" ]; then
  echo "FAIL good inputs: the run failed or wrote no outputs"; fails=$((fails + 1))
fi
if ! "$RUN" "$FJ" --input x="$T/x_v2.npy" --input y="$T/y.npy" > /dev/null; then
  echo "FAIL a version 2.0 .npy was refused"; fails=$((fails + 1))
fi

expect_fail "wrong shape" "wrong size at dim 1" "$FJ" --input x="$T/x_shape.npy"
expect_fail "wrong rank" "wrong rank" "$FJ" --input x="$T/x_rank.npy"
expect_fail "wrong dtype" "wrong dtype" "$FJ" --input x="$T/x_i64.npy"
expect_fail "unknown input" "no parameter %z" "$FJ" --input z="$T/x.npy"
expect_fail "input given twice" "given twice" "$FJ" --input x="$T/x.npy" --input x="$T/x.npy"
expect_fail "missing file" "cannot open" "$FJ" --input x="$T/none.npy"
expect_fail "unreadable file" "is a directory" "$FJ" --input x="$T/dir.npy"
expect_fail "truncated data" "truncated data" "$FJ" --input x="$T/trunc.npy"
expect_fail "trailing data" "unexpected data" "$FJ" --input x="$T/trail.npy"
expect_fail "short file" "too short" "$FJ" --input x="$T/short.npy"
expect_fail "bad magic" "bad magic" "$FJ" --input x="$T/magic.npy"
expect_fail "header garbage" "malformed header" "$FJ" --input x="$T/garbage.npy"
expect_fail "Fortran order" "Fortran" "$FJ" --input x="$T/fortran.npy"
expect_fail "pickled" "pickled" "$FJ" --input x="$T/pickle.npy"
expect_fail "big-endian" "big-endian" "$FJ" --input x="$T/bigend.npy"
expect_fail "size overflow" "overflow" "$FJ" --input x="$T/overflow.npy"
expect_fail "symbol conflict" "symbol N is bound to two sizes: 3 .* and 2 " "$FJ" --input x="$T/x.npy" --input y="$T/y2.npy"
expect_fail "symbol conflict with --dim" "symbol N is bound to two sizes" "$FJ" --input x="$T/x.npy" --dim N=5
expect_fail "unbound symbol" "--dim N=" "$FJ"
expect_fail "unknown symbol" "no symbolic size named M" "$FJ" --dim N=2 --dim M=3
expect_fail "bad --dim" "not a size" "$FJ" --dim N=-2
expect_fail "unknown executor" "unknown executor 'cuda'" "$FJ" --dim N=2 --executor=cuda
expect_fail "nvptx executor without a GPU" "CUDA driver" "$FJ" --dim N=2 --executor=nvptx
expect_fail "unknown graph" "no graph named @nope" "$FJ" --dim N=2 --graph=@nope
expect_fail "--tangent of no output" "has no floating-point output named q" "$FJ" --dim N=2 --train --tangent q="$T/x.npy"
expect_fail "missing .fj" "cannot open" "$T/none.fj"
expect_fail "index out of range" "index.fj:3:3: error: [a-z.]*: index out of range" "$HERE/index.fj" --input ids="$T/ids.npy"
expect_fail "index out of range (aten)" "aten.embedding: index out of range" "$HERE/index.fj" --input ids="$T/ids.npy" --executor=aten
expect_fail "unknown option" "unknown option" "$FJ" --dim N=2 --frobnicate

if [ $fails -ne 0 ]; then
  echo "$fails of $((n + 2)) bad-input checks failed"
  exit 1
fi
echo "all $((n + 2)) bad-input checks passed"
