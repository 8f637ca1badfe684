/* emit_common.h -- small helpers shared by the reference kernels of the
 * non-pointwise families (emit_reduce.c, emit_norm.c, emit_matmul.c,
 * emit_index.c, emit_random.c): attribute reading, dim normalisation,
 * accumulator dtypes and loop nests over tensor dims. Private to codegen/. */
#ifndef FJ_EMIT_COMMON_H
#define FJ_EMIT_COMMON_H

#include <string.h>

#include "emit.h"

/* ---- attributes ---- */

/* The attribute named `name` in effect (written or default), or NULL when
 * the op declares no such attribute. */
static inline const fj_attr *ec_attr(const fj_cg *cg, const fj_cg_kernel *k, const char *name)
{
	const fj_opinfo *oi = fj_op_info(cg->ctx, k->node->op);
	int i = fj_op_attr_index(oi, name, strlen(name));
	if (i < 0)
		return NULL;
	return k->node->attrs[i].kind != FJ_AK_ABSENT ? &k->node->attrs[i] : &oi->attrs[i].dflt;
}

static inline bool ec_attr_none(const fj_attr *a) { return !a || fj_attr_is_none(a); }

static inline int64_t ec_attr_int(const fj_cg *cg, const fj_cg_kernel *k, const char *name, int64_t dflt)
{
	const fj_attr *a = ec_attr(cg, k, name);
	return ec_attr_none(a) ? dflt : fj_attr_as_int(a);
}

static inline double ec_attr_float(const fj_cg *cg, const fj_cg_kernel *k, const char *name, double dflt)
{
	const fj_attr *a = ec_attr(cg, k, name);
	return ec_attr_none(a) ? dflt : fj_attr_as_float(a);
}

static inline bool ec_attr_bool(const fj_cg *cg, const fj_cg_kernel *k, const char *name, bool dflt)
{
	const fj_attr *a = ec_attr(cg, k, name);
	return ec_attr_none(a) ? dflt : fj_attr_as_int(a) != 0;
}

/* Item i of a list attribute (bools, ints), dflt when absent. */
static inline int64_t ec_attr_item(const fj_cg *cg, const fj_cg_kernel *k, const char *name, uint32_t i,
                                   int64_t dflt)
{
	const fj_attr *a = ec_attr(cg, k, name);
	if (!a || a->kind != FJ_AK_LIST || i >= a->n)
		return dflt;
	return fj_attr_as_int(&a->u.items[i]);
}

/* Normalises dim d for rank `rank` (negative counts from the end; rank 0
 * accepts 0 and -1 and gives 0). */
static inline int ec_dim(int64_t d, int rank)
{
	int r = rank ? rank : 1;
	if (d < 0)
		d += r;
	if (d < 0 || d >= r)
		return 0; /* the verifier rejects these */
	return (int)d;
}

/* Mask of the dims listed in attribute `name` (a list of ints); absent,
 * `none` or an empty list: every dim. */
static inline uint32_t ec_dims_mask(const fj_cg *cg, const fj_cg_kernel *k, const char *name, int rank)
{
	const fj_attr *a = ec_attr(cg, k, name);
	uint32_t all = rank ? (1u << rank) - 1 : 0;
	if (!a || a->kind != FJ_AK_LIST || a->n == 0)
		return all;
	uint32_t m = 0;
	for (uint32_t i = 0; i < a->n; i++)
		m |= rank ? 1u << ec_dim(fj_attr_as_int(&a->u.items[i]), rank) : 0;
	return m;
}

/* ---- dtypes ---- */

/* The dtype reductions accumulate in: f64 for floats, i64 for the rest. */
static inline fj_dtype ec_acc_dtype(fj_dtype dt)
{
	return fj_dtype_is_float(dt) ? FJ_DT_F64 : FJ_DT_I64;
}

static inline LLVMTypeRef ec_type(fj_cg *cg, fj_dtype dt) { return fj_cg_compute_type(cg, dt); }

/* Loads element `off` of t converted to dtype `to`. */
static inline LLVMValueRef ec_load_as(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef off, fj_dtype to)
{
	return fj_cg_convert(cg, fj_cg_load(cg, t, off), t->dtype, to);
}

/* Stores v (a compute value of dtype `from`) at element `off` of t. */
static inline void ec_store_from(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef off, LLVMValueRef v,
                                 fj_dtype from)
{
	fj_cg_store(cg, t, off, fj_cg_convert(cg, v, from, t->dtype));
}

/* ---- integer arithmetic on i64 ---- */

static inline LLVMValueRef ec_add(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(cg->b, a, b, ""); }
static inline LLVMValueRef ec_sub(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSub(cg->b, a, b, ""); }
static inline LLVMValueRef ec_mul(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildMul(cg->b, a, b, ""); }
static inline LLVMValueRef ec_div(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildUDiv(cg->b, a, b, ""); }
static inline LLVMValueRef ec_rem(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildURem(cg->b, a, b, ""); }
static inline LLVMValueRef ec_icmp(fj_cg *cg, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildICmp(cg->b, p, a, b, "");
}
static inline LLVMValueRef ec_min(fj_cg *cg, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(cg->b, ec_icmp(cg, LLVMIntSLT, a, b), a, b, "");
}
static inline LLVMValueRef ec_or(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildOr(cg->b, a, b, ""); }
static inline LLVMValueRef ec_and(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAnd(cg->b, a, b, ""); }

/* Product of t's sizes at the dims in mask (i64; 1 for an empty mask). */
static inline LLVMValueRef ec_extent(fj_cg *cg, const fj_cg_tensor *t, uint32_t mask)
{
	LLVMValueRef p = fj_cg_i64(cg, 1);
	for (int d = 0; d < t->rank; d++)
		if (mask & (1u << d))
			p = ec_mul(cg, p, t->dim[d]);
	return p;
}

/* Product of t's sizes over dims [from, to). */
static inline LLVMValueRef ec_span(fj_cg *cg, const fj_cg_tensor *t, int from, int to)
{
	LLVMValueRef p = fj_cg_i64(cg, 1);
	for (int d = from; d < to && d < t->rank; d++)
		p = ec_mul(cg, p, t->dim[d]);
	return p;
}

/* Offset in t of linear index `lin` over the dims of t NOT in mask (row-major
 * over those dims); the dims in mask get index 0. */
static inline LLVMValueRef ec_base_offset(fj_cg *cg, const fj_cg_tensor *t, uint32_t mask, LLVMValueRef lin)
{
	LLVMValueRef dims[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	int map[FJ_MAX_RANK], n = 0;
	for (int d = 0; d < t->rank; d++)
		if (!(mask & (1u << d))) {
			map[n] = d;
			dims[n++] = t->dim[d];
		}
	if (n == 0)
		return fj_cg_i64(cg, 0);
	fj_cg_unravel(cg, lin, dims, n, idx);
	LLVMValueRef off = fj_cg_i64(cg, 0);
	for (int i = 0; i < n; i++)
		off = ec_add(cg, off, ec_mul(cg, idx[i], t->stride[map[i]]));
	return off;
}

/* Sets the status variable to code. */
static inline void ec_fail(fj_cg *cg, fj_cg_kernel *k, int code)
{
	fj_cg_set(cg, k->status, fj_cg_i32(cg, code));
}

/* ---- loop nests ---- */

/* Nested loops over the dims of t in mask (outermost first); off is the
 * offset of the current element from `base`; iv[d] the index of dim d (NULL
 * for dims not looped). */
typedef struct ec_nest {
	fj_cg_loop l[FJ_MAX_RANK];
	int n;
	LLVMValueRef off;
	LLVMValueRef iv[FJ_MAX_RANK];
} ec_nest;

static inline void ec_nest_begin(fj_cg *cg, ec_nest *ns, const fj_cg_tensor *t, uint32_t mask, LLVMValueRef base)
{
	ns->n = 0;
	LLVMValueRef off = base;
	for (int d = 0; d < t->rank; d++) {
		ns->iv[d] = NULL;
		if (!(mask & (1u << d)))
			continue;
		fj_cg_loop_begin(cg, &ns->l[ns->n], fj_cg_i64(cg, 0), t->dim[d], "r");
		ns->iv[d] = ns->l[ns->n].iv;
		off = ec_add(cg, off, ec_mul(cg, ns->l[ns->n].iv, t->stride[d]));
		ns->n++;
	}
	ns->off = off;
}

static inline void ec_nest_end(fj_cg *cg, ec_nest *ns)
{
	for (int i = ns->n - 1; i >= 0; i--)
		fj_cg_loop_end(cg, &ns->l[i]);
}

/* A counted loop [lo, hi). */
static inline LLVMValueRef ec_for(fj_cg *cg, fj_cg_loop *l, LLVMValueRef lo, LLVMValueRef hi)
{
	fj_cg_loop_begin(cg, l, lo, hi, "i");
	return l->iv;
}

/* ---- float helpers (any float compute type) ---- */

static inline LLVMValueRef ec_fconst(fj_cg *cg, LLVMValueRef like, double f)
{
	return LLVMConstReal(LLVMTypeOf(like), f);
}
static inline LLVMValueRef ec_isnan(fj_cg *cg, LLVMValueRef x)
{
	return LLVMBuildFCmp(cg->b, LLVMRealUNO, x, x, "");
}
static inline LLVMValueRef ec_fadd(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(cg->b, a, b, ""); }
static inline LLVMValueRef ec_fsub(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(cg->b, a, b, ""); }
static inline LLVMValueRef ec_fmul(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(cg->b, a, b, ""); }
static inline LLVMValueRef ec_fdiv(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(cg->b, a, b, ""); }

/* Arithmetic on compute values of dtype dt (floats or integers). */
static inline LLVMValueRef ec_add_dt(fj_cg *cg, fj_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
	return fj_dtype_is_float(dt) ? ec_fadd(cg, a, b) : ec_add(cg, a, b);
}
static inline LLVMValueRef ec_mul_dt(fj_cg *cg, fj_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
	return fj_dtype_is_float(dt) ? ec_fmul(cg, a, b) : ec_mul(cg, a, b);
}

/* sqrt of a f64 value (llvm.sqrt, exact on every target). */
static inline LLVMValueRef ec_sqrt(fj_cg *cg, LLVMValueRef x)
{
	LLVMTypeRef ty = LLVMTypeOf(x);
	unsigned id = LLVMLookupIntrinsicID("llvm.sqrt", 9);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, &ty, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, &ty, 1);
	return LLVMBuildCall2(cg->b, fty, f, &x, 1, "");
}

#endif
