/* decompose.h -- internals of the `decompose` pass (aten.* -> prims.*),
 * shared by passes/decompose.c (driver, helpers, capability table) and the
 * rule files passes/decompose_*.c (one rule table per op family).
 *
 * A rule reads the aten node d->n of the old graph (operands through
 * fj_dec_in, attributes through fj_dec_attr, result types through
 * fj_dec_rty) and builds prims on the new graph with the helpers below,
 * which all go through the builder (ir/build.h: checked, typed, sticky
 * status). It stores one new value per result of the node in d->out[] (an
 * existing value is fine: clone -> its operand). The driver checks that every
 * result has exactly the old result's type, names the values and keeps the
 * node's location on everything the rule built. */
#ifndef FJ_PASS_DECOMPOSE_H
#define FJ_PASS_DECOMPOSE_H

#include "ir/build.h"
#include "passes/rebuild.h"

typedef struct fj_dec {
	fj_builder b;             /* on the new graph; its loc is the node's */
	fj_rebuild *rb;           /* old graph, new graph, value map */
	fj_graph *g;              /* the new graph */
	fj_module *m;
	fj_context *ctx;
	const fj_node *n;         /* the aten node being decomposed */
	fj_vid out[FJ_MAX_SPEC];  /* the rule's results */
} fj_dec;

typedef fj_status (*fj_dec_rule)(fj_dec *d);

/* The rule tables, one per family file, indexed by op. */
extern const fj_dec_rule fj_dec_rules_pointwise[FJ_OP_COUNT];
extern const fj_dec_rule fj_dec_rules_reduce[FJ_OP_COUNT];
extern const fj_dec_rule fj_dec_rules_shape[FJ_OP_COUNT];
/* The rule of op, or NULL. */
fj_dec_rule fj_dec_rule_for(fj_op op);
/* Whether decompose{target=...} lowers op ("all", "host", "nvptx"). */
bool fj_dec_lowers(fj_op op, const char *target);

/* ---- reading the node ---- */

/* Operand i mapped to the new graph (literals are copied); FJ_NOVAL when it
 * is `none` or left out. */
fj_vid fj_dec_in(fj_dec *d, uint32_t i);
/* The type of new value v / of the old node's result i. */
const fj_type *fj_dec_ty(fj_dec *d, fj_vid v);
const fj_type *fj_dec_rty(fj_dec *d, uint32_t i);
/* The attribute in effect (the default when not written). */
const fj_attr *fj_dec_attr(fj_dec *d, const char *name);
/* The same, or NULL when the op has no such attribute. */
const fj_attr *fj_dec_attr_opt(fj_dec *d, const char *name);
int64_t fj_dec_int(fj_dec *d, const char *name);
double fj_dec_float(fj_dec *d, const char *name);
bool fj_dec_bool(fj_dec *d, const char *name);
bool fj_dec_is_none(fj_dec *d, const char *name);
bool fj_dec_is_lit(fj_dec *d, fj_vid v);
double fj_dec_lit_value(fj_dec *d, fj_vid v);
/* Normalises a dim (negative from the end; rank 0 takes 0 and -1). */
int fj_dec_dim(int64_t dim, int rank);
/* A bit mask of the dims listed in attribute `name` (empty or absent: all). */
uint32_t fj_dec_dims_mask(fj_dec *d, const char *name, int rank);
/* f16 and bf16 compute in f32; other dtypes as they are. */
fj_dtype fj_dec_comp(fj_dtype dt);
/* Builder failure with a message naming the op. */
fj_status fj_dec_fail(fj_dec *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- building prims ---- */

fj_vid fj_dec_op(fj_dec *d, fj_op op, const fj_vid *in, uint32_t nin, const fj_named_attr *attrs, uint32_t nattrs);
fj_vid fj_dec_un(fj_dec *d, fj_op op, fj_vid a);
fj_vid fj_dec_bin(fj_dec *d, fj_op op, fj_vid a, fj_vid b);
fj_vid fj_dec_where(fj_dec *d, fj_vid p, fj_vid a, fj_vid b);
/* prims.full of the given shape and dtype (the value in the dtype's kind). */
fj_vid fj_dec_full(fj_dec *d, const fj_dim *dims, int rank, double value, fj_dtype dt);
/* prims.full of a numeric attribute (aten.full's value), in dt's kind. */
fj_vid fj_dec_full_num(fj_dec *d, const fj_dim *dims, int rank, const fj_attr *value, fj_dtype dt);
/* prims.full with like's shape and dtype. */
fj_vid fj_dec_const(fj_dec *d, double value, fj_vid like);
/* prims.convert_element_type when the dtype differs. */
fj_vid fj_dec_cvt(fj_dec *d, fj_vid v, fj_dtype dt);
/* NumPy broadcasting of v to the shape (right-aligned), when it differs. */
fj_vid fj_dec_bcast(fj_dec *d, fj_vid v, const fj_dim *dims, int rank);
/* broadcast_in_dim with explicit broadcast_dims. */
fj_vid fj_dec_bcast_in(fj_dec *d, fj_vid v, const fj_dim *dims, int rank, const int64_t *bdims);
/* Brings an operand (tensor or weak literal) to dtype dt and the shape:
 * a literal becomes a prims.full of that shape; a tensor is converted, then
 * broadcast. */
fj_vid fj_dec_to(fj_dec *d, fj_vid v, fj_dtype dt, const fj_dim *dims, int rank);
static inline fj_vid fj_dec_to_type(fj_dec *d, fj_vid v, const fj_type *t, fj_dtype dt)
{
	return fj_dec_to(d, v, dt, t->dims, t->rank);
}
fj_vid fj_dec_reshape(fj_dec *d, fj_vid v, const fj_dim *dims, int rank);
/* prims reductions over the dims in mask (v itself for an empty mask). */
fj_vid fj_dec_reduce(fj_dec *d, fj_op op, fj_vid v, uint32_t mask);
/* The reduced value r of x (over mask) broadcast back to x's shape. */
fj_vid fj_dec_unreduce(fj_dec *d, fj_vid r, const fj_type *x, uint32_t mask);
/* r reshaped to x's shape with the dims of mask kept as size 1. */
fj_vid fj_dec_keepdim(fj_dec *d, fj_vid r, const fj_type *x, uint32_t mask);
/* The number of elements over mask as a static count, or -1 when symbolic. */
int64_t fj_dec_count(const fj_type *x, uint32_t mask);
/* mean over mask: sum / count, or var_mean's mean for symbolic counts. */
fj_vid fj_dec_mean(fj_dec *d, fj_vid v, uint32_t mask);

/* Elementwise arithmetic with constants (like-shaped prims.full). */
fj_vid fj_dec_addc(fj_dec *d, fj_vid a, double c);
fj_vid fj_dec_mulc(fj_dec *d, fj_vid a, double c);
fj_vid fj_dec_csub(fj_dec *d, double c, fj_vid a); /* c - a */
fj_vid fj_dec_cmpc(fj_dec *d, fj_op op, fj_vid a, double c);
static inline fj_vid fj_dec_add(fj_dec *d, fj_vid a, fj_vid b) { return fj_dec_bin(d, FJ_OP_PRIMS_ADD, a, b); }
static inline fj_vid fj_dec_sub(fj_dec *d, fj_vid a, fj_vid b) { return fj_dec_bin(d, FJ_OP_PRIMS_SUB, a, b); }
static inline fj_vid fj_dec_mul(fj_dec *d, fj_vid a, fj_vid b) { return fj_dec_bin(d, FJ_OP_PRIMS_MUL, a, b); }
static inline fj_vid fj_dec_div(fj_dec *d, fj_vid a, fj_vid b) { return fj_dec_bin(d, FJ_OP_PRIMS_DIV, a, b); }

#endif
