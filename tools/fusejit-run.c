/* fusejit-run -- parses and verifies a graph; the executors arrive with the
 * host backend (runtime/). */
#include <stdio.h>

#include "frontend/frontend.h"
#include "ir.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: fusejit-run FILE\n");
		return 1;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	int rc = 1;
	if (ctx && fj_parse_file(ctx, argv[1], &m) == FJ_OK && fj_verify_module(m) == FJ_OK)
		fprintf(stderr, "fusejit-run: error: no executor is available in this build yet\n");
	else if (ctx)
		fprintf(stderr, "%s\n", fj_context_error(ctx));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	return rc;
}
