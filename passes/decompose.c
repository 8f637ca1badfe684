/* decompose.c -- the `decompose` pass: aten.* -> prims.* (IR.md §3, §4).
 *
 * Purpose: the passes after this one (autodiff, partition, fuse, codegen) see
 * only the small, strict prims layer. Semantics follow PyTorch's own
 * decompositions (torch._refs and torch._decomp), op for op:
 *   - type promotion becomes explicit prims.convert_element_type; the result
 *     dtype is the aten node's inferred one;
 *   - broadcasting becomes prims.broadcast_in_dim (NumPy, right-aligned);
 *   - weak scalars (literal operands) become prims.full constants of the
 *     computation dtype with the full shape;
 *   - f16/bf16 math is computed in f32 and rounded once at the end (inputs
 *     converted up, result converted down), as PrimTorch and nvFuser do.
 *
 * Algorithm: the graph is rebuilt into a new one (passes/rebuild.h). Nodes
 * are visited in order; an aten node that the target lowers is expanded by its
 * rule (one table entry per op in passes/decompose_*.c), anything else is
 * copied. Every value a rule builds carries the node's location; a value
 * that stands for an aten result takes that result's name, intermediates are
 * named after it (`%g` -> `%g_0`, `%g_1` ...), never clashing with a name of
 * the old graph. Graphs without anything to lower are left untouched.
 *
 * Capability table (decompose{target=...}, after PyTorch's
 * TorchRefsNvfuserCapabilityMode): `all` and `host` lower every aten op;
 * `nvptx` keeps the scatter family (scatter_add, index_add,
 * embedding_dense_backward) and cumsum as aten ops, run by the runtime's
 * reference kernels.
 *
 * Invariants: the result graph verifies; each aten result is replaced by a
 * value of exactly its type (checked here, an internal error otherwise).
 * Complexity: linear in the size of the graph and its decomposition. */
#include <stdio.h>
#include <string.h>

#include "passes/decompose.h"
#include "passes/pass.h"

/* ---- rule lookup and capabilities ---- */

fj_dec_rule fj_dec_rule_for(fj_op op)
{
	if ((unsigned)op >= FJ_OP_COUNT)
		return NULL;
	if (fj_dec_rules_pointwise[op])
		return fj_dec_rules_pointwise[op];
	if (fj_dec_rules_reduce[op])
		return fj_dec_rules_reduce[op];
	return fj_dec_rules_shape[op];
}

/* Ops a backend keeps as aten (bit per target). */
enum { KEEP_NVPTX = 1 };
static const uint8_t keep_aten[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_SCATTER_ADD] = KEEP_NVPTX,
	[FJ_OP_ATEN_INDEX_ADD] = KEEP_NVPTX,
	[FJ_OP_ATEN_EMBEDDING_DENSE_BACKWARD] = KEEP_NVPTX,
	[FJ_OP_ATEN_CUMSUM] = KEEP_NVPTX,
};

bool fj_dec_lowers(fj_op op, const char *target)
{
	if (target && strcmp(target, "nvptx") == 0)
		return !(keep_aten[op] & KEEP_NVPTX);
	return true;
}

/* ---- reading the node ---- */

fj_vid fj_dec_in(fj_dec *d, uint32_t i)
{
	if (i >= d->n->nopnds)
		return FJ_NOVAL;
	return fj_pass_rebuild_value(d->rb, d->n->opnds[i]);
}

const fj_type *fj_dec_ty(fj_dec *d, fj_vid v) { return &d->g->values[v].type; }
const fj_type *fj_dec_rty(fj_dec *d, uint32_t i) { return &d->rb->old->values[d->n->res[i]].type; }
const fj_attr *fj_dec_attr(fj_dec *d, const char *name) { return fj_node_attr(d->ctx, d->n, name); }
const fj_attr *fj_dec_attr_opt(fj_dec *d, const char *name)
{
	if (fj_op_attr_index(fj_op_info(d->ctx, d->n->op), name, strlen(name)) < 0)
		return NULL;
	return fj_dec_attr(d, name);
}
int64_t fj_dec_int(fj_dec *d, const char *name) { return fj_attr_as_int(fj_dec_attr(d, name)); }
double fj_dec_float(fj_dec *d, const char *name) { return fj_attr_as_float(fj_dec_attr(d, name)); }
bool fj_dec_bool(fj_dec *d, const char *name)
{
	const fj_attr *a = fj_dec_attr(d, name);
	return a->kind == FJ_AK_BOOL ? a->u.b : fj_attr_as_int(a) != 0;
}
bool fj_dec_is_none(fj_dec *d, const char *name) { return fj_attr_is_none(fj_dec_attr(d, name)); }
bool fj_dec_is_lit(fj_dec *d, fj_vid v) { return v != FJ_NOVAL && d->g->values[v].kind == FJ_VK_LITERAL; }

double fj_dec_lit_value(fj_dec *d, fj_vid v)
{
	return fj_literal_value(&d->g->values[v].lit);
}

int fj_dec_dim(int64_t dim, int rank)
{
	int64_t r = rank ? rank : 1;
	return (int)(dim < 0 ? dim + r : dim);
}

uint32_t fj_dec_dims_mask(fj_dec *d, const char *name, int rank)
{
	const fj_attr *a = fj_dec_attr(d, name);
	uint32_t all = rank ? (1u << rank) - 1 : 0;
	if (a->kind != FJ_AK_LIST || a->n == 0)
		return all;
	uint32_t mask = 0;
	for (uint32_t i = 0; i < a->n; i++)
		mask |= 1u << fj_dec_dim(fj_attr_as_int(&a->u.items[i]), rank);
	return mask & all;
}

fj_dtype fj_dec_comp(fj_dtype dt) { return dt == FJ_DT_F16 || dt == FJ_DT_BF16 ? FJ_DT_F32 : dt; }

fj_status fj_dec_fail(fj_dec *d, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return fj_b_fail(&d->b, FJ_ERR_INVALID, "decompose: %s: %s", fj_op_name(d->n->op), msg);
}

/* ---- building prims ---- */

fj_vid fj_dec_op(fj_dec *d, fj_op op, const fj_vid *in, uint32_t nin, const fj_named_attr *attrs, uint32_t nattrs)
{
	for (uint32_t i = 0; i < nin; i++)
		if (in[i] == FJ_NOVAL && !d->b.status)
			fj_dec_fail(d, "internal error: a missing operand for %s", fj_op_name(op));
	return fj_b_op1(&d->b, op, in, nin, attrs, nattrs);
}

fj_vid fj_dec_un(fj_dec *d, fj_op op, fj_vid a) { return fj_dec_op(d, op, &a, 1, NULL, 0); }
fj_vid fj_dec_bin(fj_dec *d, fj_op op, fj_vid a, fj_vid b) { return fj_dec_op(d, op, (fj_vid[]){a, b}, 2, NULL, 0); }
fj_vid fj_dec_where(fj_dec *d, fj_vid p, fj_vid a, fj_vid b)
{
	return fj_dec_op(d, FJ_OP_PRIMS_WHERE, (fj_vid[]){p, a, b}, 3, NULL, 0);
}


/* The fill value v (any numeric attribute) in the kind of dtype dt. */
static fj_attr value_in(const fj_attr *v, fj_dtype dt)
{
	if (fj_dtype_is_float(dt))
		return fj_attr_float(fj_attr_as_float(v));
	if (fj_dtype_is_bool(dt))
		return fj_attr_bool(v->kind == FJ_AK_FLOAT ? v->u.f != 0 : fj_attr_as_int(v) != 0);
	return fj_attr_int(fj_attr_as_int(v));
}

static fj_vid full_attr(fj_dec *d, const fj_dim *dims, int rank, const fj_attr *value, fj_dtype dt)
{
	fj_named_attr at[3] = {
		{"shape", fj_attr_shape(d->g, dims, rank)},
		{"value", value_in(value, dt)},
		{"dtype", fj_attr_dtype(dt)},
	};
	return fj_dec_op(d, FJ_OP_PRIMS_FULL, NULL, 0, at, 3);
}

fj_vid fj_dec_full(fj_dec *d, const fj_dim *dims, int rank, double value, fj_dtype dt)
{
	fj_attr v = fj_attr_float(value);
	if (!fj_dtype_is_float(dt) && value == (double)(int64_t)value)
		v = fj_attr_int((int64_t)value);
	return full_attr(d, dims, rank, &v, dt);
}

fj_vid fj_dec_full_num(fj_dec *d, const fj_dim *dims, int rank, const fj_attr *value, fj_dtype dt)
{
	return full_attr(d, dims, rank, value, dt);
}

fj_vid fj_dec_const(fj_dec *d, double value, fj_vid like)
{
	if (like == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	const fj_type *t = fj_dec_ty(d, like);
	return fj_dec_full(d, t->dims, t->rank, value, t->dtype);
}

fj_vid fj_dec_cvt(fj_dec *d, fj_vid v, fj_dtype dt)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	if (fj_dec_is_lit(d, v)) {
		fj_dec_fail(d, "internal error: converting a literal");
		return FJ_NOVAL;
	}
	if (fj_dec_ty(d, v)->dtype == dt)
		return v;
	fj_named_attr at = {"dtype", fj_attr_dtype(dt)};
	return fj_dec_op(d, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &v, 1, &at, 1);
}

static bool same_dims(const fj_type *t, const fj_dim *dims, int rank)
{
	if (t->rank != rank)
		return false;
	for (int i = 0; i < rank; i++)
		if (t->dims[i] != dims[i])
			return false;
	return true;
}

fj_vid fj_dec_bcast_in(fj_dec *d, fj_vid v, const fj_dim *dims, int rank, const int64_t *bdims)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	const fj_type *t = fj_dec_ty(d, v);
	if (same_dims(t, dims, rank))
		return v;
	fj_named_attr at[2] = {
		{"shape", fj_attr_shape(d->g, dims, rank)},
		{"broadcast_dims", fj_attr_ints(d->g, bdims, t->rank)},
	};
	return fj_dec_op(d, FJ_OP_PRIMS_BROADCAST_IN_DIM, &v, 1, at, 2);
}

fj_vid fj_dec_bcast(fj_dec *d, fj_vid v, const fj_dim *dims, int rank)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	const fj_type *t = fj_dec_ty(d, v);
	if (t->rank > rank) {
		fj_dec_fail(d, "internal error: broadcasting rank %d to rank %d", t->rank, rank);
		return FJ_NOVAL;
	}
	int64_t bd[FJ_MAX_RANK];
	for (int k = 0; k < t->rank; k++)
		bd[k] = rank - t->rank + k;
	return fj_dec_bcast_in(d, v, dims, rank, bd);
}

fj_vid fj_dec_to(fj_dec *d, fj_vid v, fj_dtype dt, const fj_dim *dims, int rank)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	if (fj_dec_is_lit(d, v)) {
		const fj_literal *l = &d->g->values[v].lit;
		fj_attr a = l->kind == FJ_LIT_FLOAT ? fj_attr_float(l->f)
		            : l->kind == FJ_LIT_INT ? fj_attr_int(l->i) : fj_attr_bool(l->b);
		return full_attr(d, dims, rank, &a, dt);
	}
	return fj_dec_bcast(d, fj_dec_cvt(d, v, dt), dims, rank);
}

fj_vid fj_dec_reshape(fj_dec *d, fj_vid v, const fj_dim *dims, int rank)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	if (same_dims(fj_dec_ty(d, v), dims, rank))
		return v;
	fj_named_attr at = {"shape", fj_attr_shape(d->g, dims, rank)};
	return fj_dec_op(d, FJ_OP_PRIMS_RESHAPE, &v, 1, &at, 1);
}

static fj_attr mask_attr(fj_dec *d, uint32_t mask)
{
	int64_t dims[32];
	uint32_t n = 0;
	for (int k = 0; k < 32; k++)
		if (mask & (1u << k))
			dims[n++] = k;
	return fj_attr_ints(d->g, dims, n);
}

fj_vid fj_dec_reduce(fj_dec *d, fj_op op, fj_vid v, uint32_t mask)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	if (!mask)
		return v;
	fj_named_attr at = {"dims", mask_attr(d, mask)};
	return fj_dec_op(d, op, &v, 1, &at, 1);
}

fj_vid fj_dec_unreduce(fj_dec *d, fj_vid r, const fj_type *x, uint32_t mask)
{
	int64_t bd[FJ_MAX_RANK];
	int n = 0;
	for (int k = 0; k < x->rank; k++)
		if (!(mask & (1u << k)))
			bd[n++] = k;
	return fj_dec_bcast_in(d, r, x->dims, x->rank, bd);
}

fj_vid fj_dec_keepdim(fj_dec *d, fj_vid r, const fj_type *x, uint32_t mask)
{
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < x->rank; k++)
		dims[k] = mask & (1u << k) ? 1 : x->dims[k];
	return fj_dec_reshape(d, r, dims, x->rank);
}

int64_t fj_dec_count(const fj_type *x, uint32_t mask)
{
	int64_t n = 1;
	for (int k = 0; k < x->rank; k++) {
		if (!(mask & (1u << k)))
			continue;
		if (!fj_dim_is_static(x->dims[k]))
			return -1;
		n *= x->dims[k];
	}
	return n;
}

fj_vid fj_dec_mean(fj_dec *d, fj_vid v, uint32_t mask)
{
	if (v == FJ_NOVAL || d->b.status)
		return FJ_NOVAL;
	if (!mask)
		return v;
	const fj_type *t = fj_dec_ty(d, v);
	int64_t n = fj_dec_count(t, mask);
	if (n >= 0) {
		fj_vid s = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, v, mask);
		return fj_dec_div(d, s, fj_dec_const(d, (double)n, s));
	}
	fj_named_attr at[2] = {{"dims", mask_attr(d, mask)}, {"correction", fj_attr_int(0)}};
	fj_vid res[2] = {FJ_NOVAL, FJ_NOVAL};
	fj_b_op(&d->b, FJ_OP_PRIMS_VAR_MEAN, &v, 1, at, 2, res, 2);
	return res[1];
}

fj_vid fj_dec_addc(fj_dec *d, fj_vid a, double c) { return fj_dec_add(d, a, fj_dec_const(d, c, a)); }
fj_vid fj_dec_mulc(fj_dec *d, fj_vid a, double c) { return fj_dec_mul(d, a, fj_dec_const(d, c, a)); }
fj_vid fj_dec_csub(fj_dec *d, double c, fj_vid a) { return fj_dec_sub(d, fj_dec_const(d, c, a), a); }
fj_vid fj_dec_cmpc(fj_dec *d, fj_op op, fj_vid a, double c) { return fj_dec_bin(d, op, a, fj_dec_const(d, c, a)); }

/* ---- the driver ---- */

/* Whether new value v is a result of a node built by the current rule. */
static bool built(const fj_dec *d, fj_vid v, uint32_t n0)
{
	return v != FJ_NOVAL && v < d->g->nvalues && d->g->values[v].kind == FJ_VK_RESULT && d->g->values[v].def >= n0;
}

/* Puts the nodes a rule built (from n0 on) in a canonical order: operands
 * first, depth-first from the rule's results in order, each node's operands
 * in order (nodes nothing reaches keep their order, at the end). The text
 * then does not depend on the order in which C evaluates a rule's nested
 * calls. Iterative: no recursion. */
static fj_status canonical_order(fj_dec *d, uint32_t n0)
{
	fj_graph *g = d->g;
	uint32_t n = g->nnodes - n0;
	if (n < 2)
		return FJ_OK;
	size_t bytes = n * (2 * sizeof(uint32_t) + 1 + sizeof(fj_node)) + n * sizeof(uint32_t);
	uint8_t *mem = fj_alloc(d->ctx, bytes);
	if (!mem)
		return FJ_ERR_NOMEM;
	fj_node *tmp = (fj_node *)mem;
	uint32_t *order = (uint32_t *)(tmp + n), *snode = order + n, *sopnd = snode + n;
	uint8_t *state = (uint8_t *)(sopnd + n);
	memset(state, 0, n);
	uint32_t cnt = 0, sp = 0;
	for (uint32_t i = 0; i <= d->n->nres; i++) {
		fj_vid root = i < d->n->nres ? d->out[i] : FJ_NOVAL;
		if (!built(d, root, n0) || state[g->values[root].def - n0])
			continue;
		snode[sp] = g->values[root].def;
		sopnd[sp++] = 0;
		state[g->values[root].def - n0] = 1;
		while (sp) {
			uint32_t k = snode[sp - 1];
			if (sopnd[sp - 1] < g->nodes[k].nopnds) {
				fj_vid v = g->nodes[k].opnds[sopnd[sp - 1]++];
				if (built(d, v, n0) && !state[g->values[v].def - n0]) {
					state[g->values[v].def - n0] = 1;
					snode[sp] = g->values[v].def;
					sopnd[sp++] = 0;
				}
				continue;
			}
			order[cnt++] = k;
			sp--;
		}
	}
	for (uint32_t k = n0; k < g->nnodes; k++)
		if (!state[k - n0])
			order[cnt++] = k;
	memcpy(tmp, &g->nodes[n0], n * sizeof *tmp);
	for (uint32_t j = 0; j < n; j++) {
		g->nodes[n0 + j] = tmp[order[j] - n0];
		for (uint32_t r = 0; r < g->nodes[n0 + j].nres; r++)
			g->values[g->nodes[n0 + j].res[r]].def = n0 + j;
	}
	fj_free(d->ctx, mem, bytes);
	return FJ_OK;
}

/* Names the values built for node n (nodes from n0 on): the results take
 * the old names, the others `<name>_<k>` in node order. */
static fj_status name_values(fj_dec *d, uint32_t n0, const char *hint)
{
	fj_graph *g = d->g;
	if (fj_pass_rebuild_name_from(d->rb, n0, hint, "_") != FJ_OK)
		return FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < d->n->nres; i++) {
		fj_vid v = d->out[i];
		if (!built(d, v, n0))
			continue;
		const char *name = d->rb->old->values[d->n->res[i]].name;
		bool taken = false;
		for (uint32_t j = 0; j < i; j++)
			taken |= d->out[j] == v;
		if (!taken && fj_graph_rename_value(g, v, name))
			return FJ_ERR_NOMEM;
	}
	return FJ_OK;
}

static bool graph_needs(const fj_graph *g, const char *target)
{
	for (uint32_t i = 0; i < g->nnodes; i++) {
		fj_op op = g->nodes[i].op;
		if ((fj_op_info(fj_graph_ctx(g), op)->flags & FJ_OPF_ATEN) && fj_dec_lowers(op, target))
			return true;
	}
	return false;
}

static fj_status decompose_graph(fj_pass_run *r, fj_graph *og, const char *target, uint32_t *nlowered)
{
	fj_module *m = og->module;
	fj_context *ctx = m->ctx;
	fj_rebuild rb;
	fj_status st = fj_pass_rebuild_begin(&rb, og);
	if (st)
		return fj_pass_rebuild_finish(&rb, m, st);
	fj_dec d = {.rb = &rb, .g = rb.g, .m = m, .ctx = ctx};
	fj_builder_init(&d.b, rb.g, og->loc);
	for (uint32_t ni = 0; ni < og->nnodes && st == FJ_OK; ni++) {
		const fj_node *n = &og->nodes[ni];
		d.n = n;
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		if (!(oi->flags & FJ_OPF_ATEN) || !fj_dec_lowers(n->op, target)) {
			fj_vid stack[16], *ops = n->nopnds <= 16 ? stack : fj_alloc(ctx, n->nopnds * sizeof *ops);
			if (!ops) {
				st = FJ_ERR_NOMEM;
				break;
			}
			for (uint32_t i = 0; i < n->nopnds; i++)
				ops[i] = fj_dec_in(&d, i);
			if (fj_pass_rebuild_copy(&rb, n, ops) == FJ_NONODE)
				st = FJ_ERR_NOMEM;
			if (ops != stack)
				fj_free(ctx, ops, n->nopnds * sizeof *ops);
			continue;
		}
		fj_dec_rule rule = fj_dec_rule_for(n->op);
		if (!rule) {
			st = fj_error(ctx, n->loc, "decompose: no decomposition rule for %s", oi->name);
			break;
		}
		fj_b_set_loc(&d.b, n->loc);
		uint32_t n0 = rb.g->nnodes;
		for (uint32_t i = 0; i < FJ_MAX_SPEC; i++)
			d.out[i] = FJ_NOVAL;
		st = rule(&d);
		if (st == FJ_OK)
			st = fj_b_status(&d.b);
		if (st) {
			if (fj_context_error_count(ctx) == 0)
				fj_error(ctx, n->loc, "decompose: %s failed", oi->name);
			break;
		}
		for (uint32_t i = 0; i < n->nres && st == FJ_OK; i++) {
			const fj_type *want = fj_dec_rty(&d, i);
			if (d.out[i] == FJ_NOVAL || d.out[i] >= rb.g->nvalues) {
				st = fj_error(ctx, n->loc, "decompose: internal error: %s left result %u unset", oi->name, i);
			} else if (!fj_type_equal(fj_dec_ty(&d, d.out[i]), want) || fj_dec_is_lit(&d, d.out[i])) {
				st = fj_error(ctx, n->loc, "decompose: internal error: %s built result %u with the wrong type",
				              oi->name, i);
			}
		}
		/* A stop-gradient aten node: its floating results come out of
		 * nodes marked {nograd} (a result the rule did not build, an
		 * operand passed through, gets an identity conversion to carry it). */
		for (uint32_t i = 0; i < n->nres && st == FJ_OK && n->nograd; i++) {
			if (!built(&d, d.out[i], n0) && fj_dtype_is_float(fj_dec_ty(&d, d.out[i])->dtype)) {
				fj_named_attr at = {"dtype", fj_attr_dtype(fj_dec_ty(&d, d.out[i])->dtype)};
				d.out[i] = fj_dec_op(&d, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &d.out[i], 1, &at, 1);
				st = fj_b_status(&d.b);
			}
		}
		if (st == FJ_OK)
			st = canonical_order(&d, n0);
		for (uint32_t i = 0; i < n->nres && st == FJ_OK && n->nograd; i++)
			if (built(&d, d.out[i], n0))
				rb.g->nodes[rb.g->values[d.out[i]].def].nograd = true;
		if (st == FJ_OK)
			st = name_values(&d, n0, og->values[n->res[0]].name);
		for (uint32_t i = 0; i < n->nres && st == FJ_OK; i++)
			rb.map[n->res[i]] = d.out[i];
		(*nlowered)++;
	}
	(void)r;
	return fj_pass_rebuild_finish(&rb, m, st);
}

fj_status fj_pass_decompose(fj_pass_run *r)
{
	const char *target = fj_pass_opt_str(r, "target");
	uint32_t nlowered = 0;
	/* Graphs are replaced in place: walk by index. */
	for (uint32_t i = 0; i < r->m->ngraphs; i++) {
		fj_graph *g = r->m->graphs[i];
		if (!graph_needs(g, target))
			continue;
		fj_status st = decompose_graph(r, g, target, &nlowered);
		if (st)
			return st;
	}
	fj_pass_stat(r, "decompose: %u aten ops lowered", nlowered);
	return FJ_OK;
}
