/* fuzz_parser.c -- libFuzzer target for the .fj parser.
 *
 * Parses the input (any bytes); on success prints the module, parses the
 * printed text again and checks that it prints the same (print -> parse is
 * the identity, STYLE.md), then destroys everything. Crashes, leaks, hangs,
 * sanitizer reports and round-trip mismatches are findings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static fj_context *ctx;
	if (!ctx && !(ctx = fj_context_new(NULL, NULL)))
		abort();
	fj_module *m = NULL;
	if (fj_parse_module(ctx, (const char *)data, size, "fuzz.fj", &m) == FJ_OK) {
		fj_buf b1, b2;
		fj_buf_init(&b1, ctx);
		fj_buf_init(&b2, ctx);
		if (fj_print_module(&b1, m) == FJ_OK && b1.data) {
			fj_module *m2 = NULL;
			if (fj_parse_module(ctx, b1.data, b1.len, "printed.fj", &m2) != FJ_OK) {
				fprintf(stderr, "printed module does not parse: %s\n--- printed:\n%s\n",
				        fj_context_error(ctx), b1.data);
				abort();
			}
			if (fj_print_module(&b2, m2) == FJ_OK && (b2.len != b1.len || memcmp(b1.data, b2.data, b1.len) != 0)) {
				fprintf(stderr, "print -> parse -> print differs\n--- first:\n%s\n--- second:\n%s\n", b1.data,
				        b2.data ? b2.data : "");
				abort();
			}
			fj_module_destroy(m2);
		}
		fj_buf_free(&b1);
		fj_buf_free(&b2);
		fj_module_destroy(m);
	}
	fj_context_clear_diagnostics(ctx);
	return 0;
}
