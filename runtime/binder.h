/* binder.h -- the one symbol binder and the one buffer plan, shared by every
 * executor (executor.h: aten, host, nvptx).
 *
 * Binding (fj_rt_binding): each symbol is bound from the first input dim
 * that is exactly that symbol; a dim that is a product (N*4096) binds its one
 * unbound symbol by exact division once the others are known; --dim values
 * bind the rest. Derived symbols (ir.h: s0+1, s0//2) are computed from the
 * symbols they name, in table order, into the same symval slots (a negative
 * one is an error naming it); an input dim that is a sum known but for one
 * symbol of coefficient 1 (s0+1, P+L with L known) binds that symbol. Then
 * every value's shape is evaluated, the inputs are
 * checked against them, and each node is checked at run time by re-running
 * its op's inference on a concrete copy of the node (operands with concrete
 * types, symbolic attribute sizes replaced by their values) in a scratch
 * module: the inferred result types must equal the evaluated ones. This
 * catches what symbolic inference had to assume (two symbols broadcast
 * against each other, a reshape whose sizes do not match ...), and the
 * error is the op's own, at its place. fusion.kernel nodes are not checked:
 * their sizes were checked on the graph they were fused from, which is the
 * graph an executor binds (the nvptx executor binds the graph it was given
 * and evaluates its fused copy's sizes with the same symbols, through
 * fj_rt_eval_dim: a copy keeps its original's symbol table, ir/clone.c).
 *
 * Plan (fj_rt_plan): one buffer per intermediate value, reused once the
 * value is dead. Liveness is the last node that reads a value (computed once
 * at init); a node's results take the best-fitting free buffer (or the
 * largest free one, grown, or a new one) before the buffers of the operands
 * that die at the node are released, so a kernel never reads and writes the
 * same buffer. Parameters, literals and values computed straight into an
 * output (out_pos) get no buffer. Cost: O(nodes * buffers) per plan. */
#ifndef FJ_RT_BINDER_H
#define FJ_RT_BINDER_H

#include "runtime/tensor.h"

/* A --dim SYM=INT value. */
typedef struct fj_rt_dimarg {
	const char *name;
	int64_t value;
} fj_rt_dimarg;

typedef struct fj_rt_binding {
	fj_context *ctx;
	const fj_graph *g;  /* the graph bound and checked */
	const fj_module *m; /* g's module */
	uint32_t nvalues;   /* g's, at init */
	uint32_t nsyms;
	int64_t *symval;    /* per symbol of m, derived ones included; -1 unbound (or unused) */
	int64_t *vdims;     /* per value of g, FJ_MAX_RANK entries */
	size_t *vbytes;     /* per value of g */
	bool bound;
} fj_rt_binding;

fj_status fj_rt_binding_init(fj_rt_binding *b, fj_context *ctx, const fj_graph *g);
void fj_rt_binding_free(fj_rt_binding *b);

/* Binds the symbols and checks the shapes. inputs[i] is parameter i's
 * tensor, or NULL when it is not given (its shape then comes from the
 * symbols); origin[i] (may be NULL, or hold NULLs) names where input i came
 * from, for messages. Errors: an input of the wrong dtype or shape, a symbol
 * bound to two sizes (naming the symbol, both sizes and where they came
 * from), a symbol left unbound (naming it and --dim), a --dim for a symbol
 * the module does not have, sizes that overflow, and shapes that are
 * invalid at run time (two symbols broadcast against each other with
 * different sizes ...), at the node's place. */
fj_status fj_rt_binding_bind(fj_rt_binding *b, const fj_rt_tensor *const *inputs, const char *const *origin,
                             const fj_rt_dimarg *dims, size_t ndims);
/* After a successful bind: the concrete shape of value v of g. */
static inline const int64_t *fj_rt_binding_dims(const fj_rt_binding *b, fj_vid v)
{
	return &b->vdims[(size_t)v * FJ_MAX_RANK];
}
/* After a successful bind: symbol s's size, or -1 when g does not use it. */
int64_t fj_rt_binding_symbol(const fj_rt_binding *b, uint32_t s);

/* Evaluates dim d of module m (g's module, or a copy of it: the same
 * symbols) with b's symbols; false when a symbol is unbound or on overflow. */
bool fj_rt_eval_dim(const fj_rt_binding *b, const fj_module *m, fj_dim d, int64_t *out);

/* ---- the buffer plan ---- */

typedef struct fj_rt_plan {
	fj_context *ctx;
	uint32_t nvalues;
	int32_t *last_use;  /* per value: the last node reading it, -1 */
	int32_t *out_pos;   /* per value: the output position it is computed into, -1 */
	int32_t *vbuf;      /* per value: its buffer, -1 */
	uint32_t nbufs;     /* buffers of the last plan */
	uint32_t cap_bufs;
	size_t *bufsize;    /* per buffer, bytes */
	bool *busy;
} fj_rt_plan;

/* Liveness of g's values and its outputs' positions (a value returned is
 * computed into its first output, and gets no buffer). */
fj_status fj_rt_plan_init(fj_rt_plan *pl, fj_context *ctx, const fj_graph *g);
void fj_rt_plan_free(fj_rt_plan *pl);
/* Plans g's intermediate values of vbytes[v] bytes each. */
fj_status fj_rt_plan_make(fj_rt_plan *pl, const fj_graph *g, const size_t *vbytes);

/* Small helpers of the binder and the programs (binder.c, program.c):
 * arrays of at least one element, the out-of-memory error, a value's name. */
static inline size_t fj_rt_nz(size_t n) { return n ? n : 1; }
#define FJ_RT_ARR_ALLOC(ctx, n, T) ((T *)fj_alloc((ctx), fj_rt_nz(n) * sizeof(T)))
#define FJ_RT_ARR_FREE(ctx, p, n) fj_free((ctx), (p), fj_rt_nz(n) * sizeof *(p))
static inline fj_status fj_rt_oom(fj_context *ctx)
{
	return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}
static inline const char *fj_rt_value_name(const fj_graph *g, fj_vid v)
{
	const char *n = g->values[v].name;
	return n ? n : "?";
}

#endif
