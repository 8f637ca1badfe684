# tests/gpu/kit.sh -- sourced by run.sh and cpu.sh: kit_unpack KIT WORK
# unpacks the kit of scripts/build-gpu.sh (or takes a folder holding its
# programs) into WORK/bin and sets $bin; checks xz, fusejit-run and the glibc
# the kit was linked against (its glibc-required) against this machine's.
# The caller defines die MESSAGE (print, exit 1).
kit_unpack() {
	if [ -d "$1" ]; then
		bin=$1
	else
		[ -f "$1" ] || die "no kit at $1 (build it with scripts/build-gpu.sh)"
		command -v xz >/dev/null 2>&1 || die "xz is not installed: it is needed to unpack $1"
		bin=$2/bin
		mkdir -p "$bin"
		xz -dc "$1" | tar xf - -C "$bin" || die "cannot unpack $1"
	fi
	[ -x "$bin/fusejit-run" ] || die "no fusejit-run in $bin"
	if [ -f "$bin/glibc-required" ]; then
		need=$(cat "$bin/glibc-required")
		have=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')
		[ -n "$have" ] || have=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9][0-9]*\.[0-9][0-9]*$')
		[ -n "$have" ] || die "cannot tell this machine's glibc version (getconf GNU_LIBC_VERSION, ldd --version); the kit needs glibc $need"
		oldest=$(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | head -1)
		[ "$oldest" = "$need" ] || die "the kit needs glibc $need or newer; this machine has glibc $have"
	fi
}
