/* context.h -- the layout of fj_context, private to the library. */
#ifndef FJ_CONTEXT_H
#define FJ_CONTEXT_H

#include <pthread.h>

#include "ir.h"

#define FJ_MAX_DIAGS 10000

struct fj_context {
	fj_alloc_fn alloc;
	void *alloc_ud;
	fj_diag_fn diag_fn;
	void *diag_ud;
	fj_diagnostic *diags;
	size_t ndiags, cap_diags;
	size_t nerrors;
	char last_error[1200];
	fj_opinfo *ops; /* FJ_OP_COUNT entries, parsed from ops.def */
	fj_arena op_arena;
	pthread_mutex_t lock; /* guards diagnostics and slots */
	fj_settings settings;
	fj_parallel_runner runner; /* fj_context_set_parallel_runner, or NULL: the pool */
	long runner_pid;            /* the process that set it (a forked child does not use it) */
	struct {
		void *p;
		void (*destroy)(fj_context *ctx, void *p);
	} slots[FJ_SLOT_COUNT];
};

fj_status fj_op_table_init(fj_context *ctx);
void fj_op_table_free(fj_context *ctx);

#endif
