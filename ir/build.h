/* build.h -- a small builder over ir.h for passes and embedders.
 *
 * The status is sticky: after the first error every call does nothing and
 * returns FJ_NOVAL (or FJ_NONODE), so a sequence of calls needs one check at
 * the end:
 *
 *   fj_builder b;
 *   fj_builder_init(&b, g, loc);
 *   fj_vid y = fj_b_op1(&b, FJ_OP_PRIMS_ADD, (fj_vid[]){x, x}, 2, NULL, 0);
 *   fj_vid z = fj_b_op1(&b, FJ_OP_ATEN_ADD, (fj_vid[]){y, fj_b_float(&b, 1.0)}, 2,
 *                       (fj_named_attr[]){{"alpha", fj_attr_int(2)}}, 1);
 *   fj_b_return(&b, &z, 1);
 *   if (fj_b_status(&b)) ... the error is recorded on the context ...
 *
 * Each node is checked (fj_check_node) and typed (fj_infer_node) as it is
 * added. A node that fails its check stays in the graph: after an error the
 * graph is to be discarded (or the error reported), not used.
 */
#ifndef FJ_BUILD_H
#define FJ_BUILD_H

#include "ir.h"

typedef struct fj_builder {
	fj_graph *g;
	fj_loc loc;        /* given to every value and node built */
	fj_status status;  /* FJ_OK until the first error */
} fj_builder;

/* An attribute by name, for fj_b_op. */
typedef struct fj_named_attr {
	const char *name;
	fj_attr value;
} fj_named_attr;

void fj_builder_init(fj_builder *b, fj_graph *g, fj_loc loc);
static inline fj_status fj_b_status(const fj_builder *b) { return b->status; }
static inline void fj_b_set_loc(fj_builder *b, fj_loc loc) { b->loc = loc; }
/* Records an error at the builder's place and makes it sticky (returns it). */
fj_status fj_b_fail(fj_builder *b, fj_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends a node of op with nres results (the op's count; any count for an op
 * with variadic results), writing their ids into res (which may be NULL).
 * Returns the node index, or FJ_NONODE. */
uint32_t fj_b_op(fj_builder *b, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                 const fj_named_attr *attrs, uint32_t nattrs, fj_vid *res, uint32_t nres);
/* The same for an op with exactly one result: returns it, or FJ_NOVAL. */
fj_vid fj_b_op1(fj_builder *b, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                const fj_named_attr *attrs, uint32_t nattrs);

/* Literal scalar operands (weak-typed, IR.md §1). */
fj_vid fj_b_float(fj_builder *b, double f);
fj_vid fj_b_int(fj_builder *b, int64_t i);
fj_vid fj_b_bool(fj_builder *b, bool v);
/* A graph parameter (the type is copied). */
fj_vid fj_b_param(fj_builder *b, const char *name, fj_type type);
/* Sets the graph's results. */
fj_status fj_b_return(fj_builder *b, const fj_vid *res, uint32_t n);

#endif
