#!/bin/sh
# ctest-skips.sh JUNIT -- after `ctest --output-junit JUNIT`: one block per
# test that did not run (skipped, exit 77), with its reasons (its lines that
# say "skip", else its last lines), and the lit tests lit reported
# UNSUPPORTED (a missing feature: REQUIRES). CTest's own summary names the
# skipped tests but, with --output-on-failure, never shows why.
junit=$1
[ -f "$junit" ] || { echo "ctest-skips.sh: $junit not found" >&2; exit 1; }
awk '
function unxml(s) {
	gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
	gsub(/&amp;/, "\\&", s)
	return s
}
function flush(   i, k, shown) {
	if (name != "" && notrun) {
		nskip++
		out = out "  " name ":\n"
		shown = 0
		for (i = 0; i < n; i++)
			if (tolower(buf[i]) ~ /skip/ && !(buf[i] in seen)) {
				seen[buf[i]] = 1
				out = out "      " buf[i] "\n"
				shown++
			}
		for (i = (n > 3 ? n - 3 : 0); !shown && i < n; i++)
			out = out "      " buf[i] "\n"
		for (k in seen)
			delete seen[k]
	}
	name = ""; notrun = 0; n = 0; unsup = 0
}
/<testcase / {
	flush()
	name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name)
	notrun = $0 ~ /status="notrun"/
	next
}
/<\/testcase>/ { flush(); next }
name != "" {
	line = $0
	sub(/.*<system-out>/, "", line); sub(/<\/system-out>.*/, "", line)
	if (line ~ /^[ \t]*<skipped/ || line == "")
		{ unsup = 0; next }
	line = unxml(line)
	if (line ~ /^Unsupported Tests \(/) { unsup = 1; next }
	if (unsup) { sub(/^ +/, "", line); lit[nlit++] = name ": " line; next }
	buf[n++] = line
}
END {
	flush()
	if (nskip)
		printf "%d test(s) skipped (CTest \"Not Run\"), and why:\n%s", nskip, out
	for (i = 0; i < nlit; i++)
		printf "unsupported (REQUIRES) in %s\n", lit[i]
	if (!nskip && !nlit)
		print "no test skipped"
}' "$junit"
