/* binder.c -- the one symbol binder and buffer plan (binder.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/binder.h"


/* ---- binding ---- */

/* Where a symbol's size came from. */
typedef struct sym_src {
	int32_t param; /* -1: --dim */
	int32_t dim;
} sym_src;

typedef struct binder {
	fj_rt_binding *p;
	const char *const *origin;
	sym_src *src;
} binder;

static void describe_src(binder *b, sym_src s, char *buf, size_t size)
{
	if (s.param < 0) {
		snprintf(buf, size, "--dim");
		return;
	}
	const fj_graph *g = b->p->g;
	const char *o = b->origin ? b->origin[s.param] : NULL;
	if (o)
		snprintf(buf, size, "input %%%s (dim %d, from %s)", fj_rt_value_name(g, g->params[s.param]), s.dim, o);
	else
		snprintf(buf, size, "input %%%s (dim %d)", fj_rt_value_name(g, g->params[s.param]), s.dim);
}

static fj_status bind_sym(binder *b, uint32_t s, int64_t v, sym_src from)
{
	fj_rt_binding *p = b->p;
	if (p->symval[s] < 0) {
		p->symval[s] = v;
		b->src[s] = from;
		return FJ_OK;
	}
	if (p->symval[s] == v)
		return FJ_OK;
	char d1[300], d2[300];
	describe_src(b, b->src[s], d1, sizeof d1);
	describe_src(b, from, d2, sizeof d2);
	return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0},
	                       "symbol %s is bound to two sizes: %lld by %s and %lld by %s",
	                       fj_symbol_name(p->m, s), (long long)p->symval[s], d1, (long long)v, d2);
}

/* Evaluates dim d; false when a symbol is unbound (*unbound gets it) or on overflow. */
static bool eval_dim(const fj_rt_binding *p, fj_dim d, int64_t *out, int64_t *unbound, bool *overflow)
{
	if (fj_dim_is_static(d)) {
		*out = d;
		return true;
	}
	const fj_symexpr *e = fj_dim_expr(p->m, d);
	int64_t v = e->coef;
	for (uint32_t k = 0; k < e->nsyms; k++) {
		int64_t s = e->syms[k] < p->nsyms ? p->symval[e->syms[k]] : -1;
		if (s < 0) {
			if (unbound)
				*unbound = e->syms[k];
			return false;
		}
		if (s && v > INT64_MAX / s) {
			if (overflow)
				*overflow = true;
			return false;
		}
		v *= s;
	}
	*out = v;
	return true;
}

static void type_str(const fj_rt_binding *p, const fj_type *t, char *buf, size_t size)
{
	size_t k = (size_t)snprintf(buf, size, "%s[", fj_dtype_name(t->dtype));
	for (int i = 0; i < t->rank && k < size; i++) {
		if (i)
			buf[k++] = ',';
		if (k < size)
			k += (size_t)fj_dim_format(p->m, t->dims[i], buf + k, size - k);
	}
	if (k + 2 <= size) {
		buf[k++] = ']';
		buf[k] = 0;
	} else {
		buf[size - 1] = 0;
	}
}

static void input_desc(binder *b, uint32_t i, char *buf, size_t size)
{
	const char *o = b->origin ? b->origin[i] : NULL;
	const char *name = fj_rt_value_name(b->p->g, b->p->g->params[i]);
	if (o)
		snprintf(buf, size, "input %%%s (from %s)", name, o);
	else
		snprintf(buf, size, "input %%%s", name);
}

static fj_status mismatch(binder *b, uint32_t i, const fj_rt_tensor *t, const char *why)
{
	char d[400], want[300], got[300];
	input_desc(b, i, d, sizeof d);
	type_str(b->p, &b->p->g->values[b->p->g->params[i]].type, want, sizeof want);
	fj_rt_tensor_type_str(t, got, sizeof got);
	return fj_error_status(b->p->ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "%s: %s: expected %s, got %s", d, why,
	                       want, got);
}

static void mark_attr_syms(const fj_rt_binding *p, const fj_attr *a, uint8_t *used)
{
	if (a->kind == FJ_AK_DIM && !fj_dim_is_static(a->u.dim)) {
		const fj_symexpr *e = fj_dim_expr(p->m, a->u.dim);
		for (uint32_t k = 0; k < e->nsyms; k++)
			used[e->syms[k]] = 1;
	} else if (a->kind == FJ_AK_LIST) {
		for (uint32_t k = 0; k < a->n; k++)
			mark_attr_syms(p, &a->u.items[k], used);
	}
}

static void mark_type_syms(const fj_rt_binding *p, const fj_type *t, uint8_t *used)
{
	for (int i = 0; i < t->rank; i++)
		if (!fj_dim_is_static(t->dims[i])) {
			const fj_symexpr *e = fj_dim_expr(p->m, t->dims[i]);
			for (uint32_t k = 0; k < e->nsyms; k++)
				used[e->syms[k]] = 1;
		}
}

/* A copy of attribute a with symbolic sizes replaced by their values (lists
 * copied onto sg's arena). */
static bool concretize_attr(const fj_rt_binding *p, fj_graph *sg, const fj_attr *a, fj_attr *out)
{
	*out = *a;
	if (a->kind == FJ_AK_DIM) {
		int64_t v;
		if (!eval_dim(p, a->u.dim, &v, NULL, NULL))
			return false;
		out->kind = FJ_AK_INT;
		out->u.i = v;
	} else if (a->kind == FJ_AK_LIST && a->n) {
		fj_attr *items = fj_arena_alloc(&sg->arena, a->n * sizeof *items);
		if (!items)
			return false;
		for (uint32_t k = 0; k < a->n; k++)
			if (!concretize_attr(p, sg, &a->u.items[k], &items[k]))
				return false;
		out->u.items = items;
	}
	return true;
}

static void sym_values_str(const fj_rt_binding *p, const uint8_t *used, char *buf, size_t size)
{
	size_t k = 0;
	buf[0] = 0;
	for (uint32_t s = 0; s < p->nsyms && k + 1 < size; s++)
		if (used[s] && p->symval[s] >= 0 && !fj_symbol_is_derived(p->m, s))
			k += (size_t)snprintf(buf + k, size - k, "%s%s=%lld", k ? ", " : "", fj_symbol_name(p->m, s),
			                      (long long)p->symval[s]);
}

/* Re-runs inference on a concrete copy of every node. */
static fj_status check_nodes(fj_rt_binding *p, const uint8_t *used)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	if (!g->nnodes)
		return FJ_OK;
	fj_module *sm = fj_module_create(ctx);
	fj_graph *sg = sm ? fj_module_add_graph(sm, "rt_check", (fj_loc){0}) : NULL;
	if (!sg) {
		fj_module_destroy(sm);
		return fj_rt_oom(ctx);
	}
	fj_status st = FJ_OK;
	fj_vid *ops = NULL;
	uint32_t cap_ops = 0;
	fj_type *outt = NULL;
	uint32_t cap_out = 0;
	for (uint32_t i = 0; i < g->nnodes && st == FJ_OK; i++) {
		const fj_node *n = &g->nodes[i];
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		if (n->body)
			continue; /* a fusion.kernel: its sizes were checked on the graph it was fused from */
		if (n->nopnds > cap_ops) {
			FJ_RT_ARR_FREE(ctx, ops, cap_ops);
			cap_ops = n->nopnds * 2;
			ops = FJ_RT_ARR_ALLOC(ctx, cap_ops, fj_vid);
			if (!ops) {
				cap_ops = 0;
				st = fj_rt_oom(ctx);
				break;
			}
		}
		if (n->nres > cap_out) {
			FJ_RT_ARR_FREE(ctx, outt, cap_out);
			cap_out = n->nres * 2;
			outt = FJ_RT_ARR_ALLOC(ctx, cap_out, fj_type);
			if (!outt) {
				cap_out = 0;
				st = fj_rt_oom(ctx);
				break;
			}
		}
		for (uint32_t j = 0; j < n->nopnds; j++) {
			fj_vid v = n->opnds[j];
			if (v == FJ_NOVAL) {
				ops[j] = FJ_NOVAL;
				continue;
			}
			const fj_value *val = &g->values[v];
			if (val->kind == FJ_VK_LITERAL) {
				ops[j] = fj_graph_add_literal(sg, val->lit, n->loc);
			} else {
				fj_type t = val->type;
				t.dims = (fj_dim *)fj_rt_binding_dims(p, v);
				char name[32];
				snprintf(name, sizeof name, "n%u_%u", i, j);
				ops[j] = fj_graph_add_param(sg, name, t, n->loc);
			}
			if (ops[j] == FJ_NOVAL) {
				st = fj_rt_oom(ctx);
				break;
			}
		}
		if (st != FJ_OK)
			break;
		uint32_t idx = fj_graph_add_node(sg, n->op, ops, n->nopnds, n->nres, NULL, NULL, n->loc);
		if (idx == FJ_NONODE) {
			st = fj_rt_oom(ctx);
			break;
		}
		fj_node *sn = &sg->nodes[idx];
		for (int k = 0; k < oi->nattrs; k++)
			if (!concretize_attr(p, sg, &n->attrs[k], &sn->attrs[k])) {
				st = fj_rt_oom(ctx);
				break;
			}
		if (st != FJ_OK)
			break;
		st = fj_check_node(sg, idx);
		if (st == FJ_OK)
			st = fj_infer_node(sg, idx, outt);
		if (st != FJ_OK)
			break;
		for (uint32_t r = 0; r < n->nres && st == FJ_OK; r++) {
			fj_vid v = n->res[r];
			const fj_type *t = &g->values[v].type;
			const int64_t *want = fj_rt_binding_dims(p, v);
			bool same = outt[r].dtype == t->dtype && outt[r].rank == t->rank;
			for (int k = 0; same && k < t->rank; k++)
				same = outt[r].dims[k] == want[k];
			if (!same) {
				char a[300], b[300], ty[300], syms[300];
				fj_type wt = *t;
				wt.dims = (fj_dim *)want;
				type_str(p, &wt, a, sizeof a);
				type_str(p, &outt[r], b, sizeof b);
				type_str(p, t, ty, sizeof ty);
				sym_values_str(p, used, syms, sizeof syms);
				st = fj_error_status(ctx, FJ_ERR_RUNTIME, n->loc,
				                     "%s: at run time (%s) result %%%s of type %s is %s, but its operands give %s",
				                     fj_op_name(n->op), syms, fj_rt_value_name(g, v), ty, a, b);
			}
		}
	}
	FJ_RT_ARR_FREE(ctx, ops, cap_ops);
	FJ_RT_ARR_FREE(ctx, outt, cap_out);
	fj_module_destroy(sm);
	return st;
}

/* 1. dtypes, ranks, static sizes, and single-symbol dims of the inputs */
static fj_status bind_inputs(binder *b, const fj_rt_tensor *const *inputs)
{
	fj_rt_binding *p = b->p;
	const fj_graph *g = p->g;
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
		const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
		if (!t)
			continue;
		const fj_type *pt = &g->values[g->params[i]].type;
		if (t->dtype != pt->dtype)
			return mismatch(b, i, t,
			                t->dtype == FJ_DT_BF16 ? "wrong dtype (a '<u2' .npy is read as bf16)" : "wrong dtype");
		if (t->rank != pt->rank)
			return mismatch(b, i, t, "wrong rank");
		for (int k = 0; k < pt->rank && st == FJ_OK; k++) {
			fj_dim d = pt->dims[k];
			if (fj_dim_is_static(d)) {
				if (t->dims[k] != d) {
					char why[64];
					snprintf(why, sizeof why, "wrong size at dim %d", k);
					st = mismatch(b, i, t, why);
				}
				continue;
			}
			const fj_symexpr *e = fj_dim_expr(p->m, d);
			if (e->nsyms == 1 && e->coef == 1 && !fj_symbol_is_derived(p->m, e->syms[0]))
				st = bind_sym(b, e->syms[0], t->dims[k], (sym_src){(int32_t)i, k});
		}
	}
	return st;
}

/* 2. --dim */
static fj_status bind_dim_args(binder *b, const fj_rt_dimarg *dims, size_t ndims)
{
	fj_rt_binding *p = b->p;
	for (size_t k = 0; k < ndims; k++) {
		uint32_t s = 0; /* a derived symbol (s0+1) is no name: --dim gives symbols */
		while (s < p->nsyms &&
		       (fj_symbol_is_derived(p->m, s) || strcmp(fj_symbol_name(p->m, s), dims[k].name) != 0))
			s++;
		if (s == p->nsyms)
			return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0},
			                       "--dim %s=%lld: graph @%s has no symbolic size named %s", dims[k].name,
			                       (long long)dims[k].value, p->g->name, dims[k].name);
		if (dims[k].value < 0)
			return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "--dim %s=%lld: a size cannot be negative",
			                       dims[k].name, (long long)dims[k].value);
		fj_status st = bind_sym(b, s, dims[k].value, (sym_src){-1, 0});
		if (st != FJ_OK)
			return st;
	}
	return FJ_OK;
}

/* The derived symbols (s0+1, s0//2) whose symbols are known, in table
 * order (a definition names earlier symbols only); a negative one that the
 * graph uses (used, when not NULL) is an error, named with the symbols'
 * values. */
static fj_status eval_derived(fj_rt_binding *p, const uint8_t *used)
{
	for (uint32_t s = 0; s < p->nsyms; s++) {
		if (!fj_symbol_is_derived(p->m, s) || p->symval[s] >= 0)
			continue;
		bool neg = false;
		if (fj_symbol_eval(p->m, s, p->symval, &p->symval[s], &neg))
			continue;
		p->symval[s] = -1;
		if (!neg || !used || !used[s])
			continue;
		char syms[300];
		size_t k = 0;
		syms[0] = 0;
		for (uint32_t q = 0; q < s && k + 1 < sizeof syms; q++)
			if (!fj_symbol_is_derived(p->m, q) && p->symval[q] >= 0)
				k += (size_t)snprintf(syms + k, sizeof syms - k, "%s%s=%lld", k ? ", " : "", fj_symbol_name(p->m, q),
				                      (long long)p->symval[q]);
		return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "size %s is negative at run time (with %s)",
		                       fj_symbol_name(p->m, s), syms);
	}
	return FJ_OK;
}

/* Binds symbol u (unbound) to value v found at dim k of input i: a bound
 * symbol directly; a derived sum whose terms are known but one, a bound
 * symbol with coefficient 1 (s0+1, s0-1, P+S with S known), by solving for
 * that symbol; nothing for the others (s0//2, s0*2+1). */
static fj_status solve_symbol(binder *b, uint32_t i, const fj_rt_tensor *t, int k, uint32_t u, int64_t v,
                              bool *progress)
{
	fj_rt_binding *p = b->p;
	const fj_symdef *def = fj_symbol_def(p->m, u);
	if (def->kind == FJ_SYM_BOUND) {
		*progress = true;
		return bind_sym(b, u, v, (sym_src){(int32_t)i, k});
	}
	if (def->kind != FJ_SYM_SUM)
		return FJ_OK;
	int64_t rest = def->c, tv;
	int64_t unk = -1;
	for (uint32_t q = 0; q < def->nterms; q++) {
		const fj_symexpr *e = fj_dim_expr(p->m, def->terms[q].mono);
		if (fj_rt_eval_dim(p, p->m, def->terms[q].mono, &tv)) {
			if (__builtin_mul_overflow(tv, def->terms[q].coef, &tv) || __builtin_add_overflow(rest, tv, &rest))
				return FJ_OK;
		} else if (unk < 0 && def->terms[q].coef == 1 && e->nsyms == 1 && e->coef == 1 &&
		           !fj_symbol_is_derived(p->m, e->syms[0]) && p->symval[e->syms[0]] < 0) {
			unk = e->syms[0];
		} else {
			return FJ_OK; /* two unknown terms, or one we cannot solve for */
		}
	}
	int64_t x;
	if (unk < 0)
		return FJ_OK;
	if (__builtin_sub_overflow(v, rest, &x) || x < 0) {
		char why[200];
		snprintf(why, sizeof why, "size %lld at dim %d cannot be %s for any size %s", (long long)t->dims[k], k,
		         fj_symbol_name(p->m, u), fj_symbol_name(p->m, (uint32_t)unk));
		return mismatch(b, i, t, why);
	}
	*progress = true;
	return bind_sym(b, (uint32_t)unk, x, (sym_src){(int32_t)i, k});
}

/* 3. a product dim of input i: solves for its one unbound symbol (*progress
 * when it did) */
static fj_status solve_product(binder *b, uint32_t i, const fj_rt_tensor *t, int k, bool *progress)
{
	fj_rt_binding *p = b->p;
	const fj_type *pt = &p->g->values[p->g->params[i]].type;
	const fj_symexpr *e = fj_dim_expr(p->m, pt->dims[k]);
	int64_t known = e->coef;
	int nunb = 0;
	uint32_t unb = 0;
	bool ovf = false;
	for (uint32_t q = 0; q < e->nsyms; q++) {
		int64_t sv = p->symval[e->syms[q]];
		if (sv < 0) {
			if (nunb && unb == e->syms[q]) {
				nunb = 2; /* N*N: not solved by division */
				continue;
			}
			nunb++;
			unb = e->syms[q];
		} else if (sv && known > INT64_MAX / sv) {
			ovf = true;
		} else {
			known *= sv;
		}
	}
	if (nunb != 1 || ovf || known == 0)
		return FJ_OK;
	if (t->dims[k] % known != 0) {
		char why[200], dd[100];
		fj_dim_format(p->m, pt->dims[k], dd, sizeof dd);
		snprintf(why, sizeof why, "size %lld at dim %d is not a multiple of %lld (%s)", (long long)t->dims[k], k,
		         (long long)known, dd);
		return mismatch(b, i, t, why);
	}
	return solve_symbol(b, i, t, k, unb, t->dims[k] / known, progress);
}

static fj_status solve_products(binder *b, const fj_rt_tensor *const *inputs)
{
	const fj_graph *g = b->p->g;
	fj_status st = FJ_OK;
	for (bool progress = true; progress && st == FJ_OK;) {
		progress = false;
		if ((st = eval_derived(b->p, NULL)) != FJ_OK)
			break;
		for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
			const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
			const fj_type *pt = &g->values[g->params[i]].type;
			for (int k = 0; t && k < pt->rank && st == FJ_OK; k++)
				if (!fj_dim_is_static(pt->dims[k]))
					st = solve_product(b, i, t, k, &progress);
		}
	}
	return st;
}

/* 4. every symbol the graph uses must be bound (used: the symbols it uses) */
static fj_status check_all_bound(fj_rt_binding *p, uint8_t *used)
{
	const fj_graph *g = p->g;
	for (uint32_t v = 0; v < g->nvalues; v++)
		if (g->values[v].kind != FJ_VK_LITERAL)
			mark_type_syms(p, &g->values[v].type, used);
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_opinfo *oi = fj_op_info(p->ctx, g->nodes[i].op);
		for (int k = 0; k < oi->nattrs; k++)
			mark_attr_syms(p, &g->nodes[i].attrs[k], used);
	}
	for (uint32_t s = p->nsyms; s-- > 0;) { /* a derived symbol needs the symbols it names */
		const fj_symdef *def = fj_symbol_def(p->m, s);
		if (!used[s] || def->kind == FJ_SYM_BOUND)
			continue;
		if (def->kind == FJ_SYM_FLOORDIV)
			mark_type_syms(p, &(fj_type){.rank = 1, .dims = (fj_dim *)&def->of}, used);
		for (uint32_t t = 0; t < def->nterms; t++)
			mark_type_syms(p, &(fj_type){.rank = 1, .dims = &def->terms[t].mono}, used);
	}
	for (uint32_t s = 0; s < p->nsyms; s++)
		if (used[s] && p->symval[s] < 0 && !fj_symbol_is_derived(p->m, s))
			return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0},
			                       "symbolic size %s is not bound by any input: give it with --dim %s=<size>",
			                       fj_symbol_name(p->m, s), fj_symbol_name(p->m, s));
	return FJ_OK;
}

/* 5. every value's concrete shape and size */
static fj_status eval_values(fj_rt_binding *p, const uint8_t *used)
{
	const fj_graph *g = p->g;
	for (uint32_t v = 0; v < g->nvalues; v++) {
		const fj_value *val = &g->values[v];
		int64_t *vd = &p->vdims[(size_t)v * FJ_MAX_RANK];
		int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
		bool ovf = false;
		for (int k = 0; k < rank; k++)
			if (!eval_dim(p, val->type.dims[k], &vd[k], NULL, &ovf)) {
				ovf = true;
				break;
			}
		if (ovf || !fj_rt_nbytes(val->type.dtype, vd, rank, &p->vbytes[v])) {
			char ty[300], syms[300];
			type_str(p, &val->type, ty, sizeof ty);
			sym_values_str(p, used, syms, sizeof syms);
			return fj_error_status(p->ctx, FJ_ERR_RUNTIME, val->loc, "the size of %%%s: %s overflows with %s",
			                       fj_rt_value_name(g, v), ty, syms);
		}
	}
	return FJ_OK;
}

/* 6. the inputs against their evaluated shapes (products, N*N ...) */
static fj_status check_inputs(binder *b, const fj_rt_tensor *const *inputs, const uint8_t *used)
{
	fj_rt_binding *p = b->p;
	const fj_graph *g = p->g;
	for (uint32_t i = 0; i < g->nparams; i++) {
		const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
		if (!t)
			continue;
		const int64_t *want = fj_rt_binding_dims(p, g->params[i]);
		for (int k = 0; k < t->rank; k++)
			if (t->dims[k] != want[k]) {
				char why[300], syms[200];
				sym_values_str(p, used, syms, sizeof syms);
				snprintf(why, sizeof why, "size %lld at dim %d, but %s gives %lld", (long long)t->dims[k], k, syms,
				         (long long)want[k]);
				return mismatch(b, i, t, why);
			}
	}
	return FJ_OK;
}

fj_status fj_rt_binding_bind(fj_rt_binding *p, const fj_rt_tensor *const *inputs, const char *const *origin,
                             const fj_rt_dimarg *dims, size_t ndims)
{
	fj_context *ctx = p->ctx;
	p->bound = false;
	uint32_t nsyms = fj_symbol_count(p->m);
	if (nsyms != p->nsyms || !p->symval) {
		FJ_RT_ARR_FREE(ctx, p->symval, p->nsyms);
		p->nsyms = 0;
		p->symval = FJ_RT_ARR_ALLOC(ctx, nsyms, int64_t);
		if (!p->symval)
			return fj_rt_oom(ctx);
		p->nsyms = nsyms;
	}
	for (uint32_t s = 0; s < nsyms; s++)
		p->symval[s] = -1;
	sym_src *src = FJ_RT_ARR_ALLOC(ctx, nsyms, sym_src);
	uint8_t *used = FJ_RT_ARR_ALLOC(ctx, nsyms, uint8_t);
	if (!src || !used) {
		FJ_RT_ARR_FREE(ctx, src, nsyms);
		FJ_RT_ARR_FREE(ctx, used, nsyms);
		return fj_rt_oom(ctx);
	}
	memset(used, 0, nsyms ? nsyms : 1);
	binder b = {p, origin, src};
	fj_status st = bind_inputs(&b, inputs);
	if (st == FJ_OK)
		st = bind_dim_args(&b, dims, ndims);
	if (st == FJ_OK)
		st = solve_products(&b, inputs);
	if (st == FJ_OK)
		st = check_all_bound(p, used);
	if (st == FJ_OK)
		st = eval_derived(p, used);
	if (st == FJ_OK)
		st = eval_values(p, used);
	if (st == FJ_OK)
		st = check_inputs(&b, inputs, used);
	if (st == FJ_OK) /* 7. every node with the concrete sizes */
		st = check_nodes(p, used);
	FJ_RT_ARR_FREE(ctx, src, nsyms);
	FJ_RT_ARR_FREE(ctx, used, nsyms);
	p->bound = st == FJ_OK; /* symbols the graph does not use read as -1 */
	return st;
}

fj_status fj_rt_binding_init(fj_rt_binding *b, fj_context *ctx, const fj_graph *g)
{
	memset(b, 0, sizeof *b);
	b->ctx = ctx;
	b->g = g;
	b->m = g->module;
	b->nvalues = g->nvalues;
	b->vdims = FJ_RT_ARR_ALLOC(ctx, (size_t)g->nvalues * FJ_MAX_RANK, int64_t);
	b->vbytes = FJ_RT_ARR_ALLOC(ctx, g->nvalues, size_t);
	if (!b->vdims || !b->vbytes) {
		fj_rt_binding_free(b);
		return fj_rt_oom(ctx);
	}
	memset(b->vdims, 0, fj_rt_nz((size_t)g->nvalues * FJ_MAX_RANK) * sizeof *b->vdims);
	memset(b->vbytes, 0, fj_rt_nz(g->nvalues) * sizeof *b->vbytes);
	return FJ_OK;
}

void fj_rt_binding_free(fj_rt_binding *b)
{
	if (!b->ctx)
		return;
	if (b->vdims)
		FJ_RT_ARR_FREE(b->ctx, b->vdims, (size_t)b->nvalues * FJ_MAX_RANK);
	if (b->vbytes)
		FJ_RT_ARR_FREE(b->ctx, b->vbytes, b->nvalues);
	if (b->symval)
		FJ_RT_ARR_FREE(b->ctx, b->symval, b->nsyms);
	memset(b, 0, sizeof *b);
}

int64_t fj_rt_binding_symbol(const fj_rt_binding *b, uint32_t s)
{
	return b->bound && s < b->nsyms ? b->symval[s] : -1;
}

bool fj_rt_eval_dim(const fj_rt_binding *b, const fj_module *m, fj_dim d, int64_t *out)
{
	if (fj_dim_is_static(d)) {
		*out = d;
		return true;
	}
	const fj_symexpr *e = fj_dim_expr(m, d);
	int64_t v = e->coef;
	for (uint32_t k = 0; k < e->nsyms; k++) {
		int64_t s = e->syms[k] < b->nsyms ? b->symval[e->syms[k]] : -1;
		if (s < 0 || (s && v > INT64_MAX / s))
			return false;
		v *= s;
	}
	*out = v;
	return true;
}

/* ---- the buffer plan ---- */

fj_status fj_rt_plan_init(fj_rt_plan *pl, fj_context *ctx, const fj_graph *g)
{
	memset(pl, 0, sizeof *pl);
	pl->ctx = ctx;
	pl->nvalues = g->nvalues;
	pl->last_use = FJ_RT_ARR_ALLOC(ctx, g->nvalues, int32_t);
	pl->out_pos = FJ_RT_ARR_ALLOC(ctx, g->nvalues, int32_t);
	pl->vbuf = FJ_RT_ARR_ALLOC(ctx, g->nvalues, int32_t);
	if (!pl->last_use || !pl->out_pos || !pl->vbuf) {
		fj_rt_plan_free(pl);
		return fj_rt_oom(ctx);
	}
	for (uint32_t v = 0; v < g->nvalues; v++)
		pl->last_use[v] = pl->out_pos[v] = pl->vbuf[v] = -1;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		for (uint32_t j = 0; j < n->nopnds; j++)
			if (n->opnds[j] != FJ_NOVAL)
				pl->last_use[n->opnds[j]] = (int32_t)i;
	}
	for (uint32_t k = 0; k < g->nresults; k++) {
		fj_vid v = g->results[k];
		if (g->values[v].kind == FJ_VK_RESULT && pl->out_pos[v] < 0)
			pl->out_pos[v] = (int32_t)k;
	}
	return FJ_OK;
}

void fj_rt_plan_free(fj_rt_plan *pl)
{
	fj_context *ctx = pl->ctx;
	if (!ctx)
		return;
	if (pl->last_use)
		FJ_RT_ARR_FREE(ctx, pl->last_use, pl->nvalues);
	if (pl->out_pos)
		FJ_RT_ARR_FREE(ctx, pl->out_pos, pl->nvalues);
	if (pl->vbuf)
		FJ_RT_ARR_FREE(ctx, pl->vbuf, pl->nvalues);
	if (pl->cap_bufs) {
		FJ_RT_ARR_FREE(ctx, pl->bufsize, pl->cap_bufs);
		FJ_RT_ARR_FREE(ctx, pl->busy, pl->cap_bufs);
	}
	memset(pl, 0, sizeof *pl);
}

/* A new buffer of `need` bytes (growing the arrays); -1 when out of memory. */
static int32_t new_buffer(fj_rt_plan *pl, size_t need)
{
	fj_context *ctx = pl->ctx;
	if (pl->nbufs == pl->cap_bufs) {
		uint32_t ncap = pl->cap_bufs ? pl->cap_bufs * 2 : 8;
		size_t *ns = FJ_RT_ARR_ALLOC(ctx, ncap, size_t);
		bool *nbusy = FJ_RT_ARR_ALLOC(ctx, ncap, bool);
		if (!ns || !nbusy) {
			if (ns)
				FJ_RT_ARR_FREE(ctx, ns, ncap);
			if (nbusy)
				FJ_RT_ARR_FREE(ctx, nbusy, ncap);
			return -1;
		}
		if (pl->cap_bufs) {
			memcpy(ns, pl->bufsize, pl->nbufs * sizeof *ns);
			memcpy(nbusy, pl->busy, pl->nbufs * sizeof *nbusy);
			FJ_RT_ARR_FREE(ctx, pl->bufsize, pl->cap_bufs);
			FJ_RT_ARR_FREE(ctx, pl->busy, pl->cap_bufs);
		}
		pl->bufsize = ns;
		pl->busy = nbusy;
		pl->cap_bufs = ncap;
	}
	pl->bufsize[pl->nbufs] = need;
	return (int32_t)pl->nbufs++;
}

/* The buffer for a value of `need` bytes: the best-fitting free one, else
 * the largest free one (grown), else a new one; -1 when out of memory. */
static int32_t take_buffer(fj_rt_plan *pl, size_t need)
{
	int32_t best = -1, largest = -1;
	for (uint32_t b = 0; b < pl->nbufs; b++) {
		if (pl->busy[b])
			continue;
		if (pl->bufsize[b] >= need && (best < 0 || pl->bufsize[b] < pl->bufsize[best]))
			best = (int32_t)b;
		if (largest < 0 || pl->bufsize[b] > pl->bufsize[largest])
			largest = (int32_t)b;
	}
	if (best < 0 && largest >= 0) {
		best = largest;
		pl->bufsize[best] = need;
	}
	if (best < 0)
		best = new_buffer(pl, need);
	if (best >= 0)
		pl->busy[best] = true;
	return best;
}

fj_status fj_rt_plan_make(fj_rt_plan *pl, const fj_graph *g, const size_t *vbytes)
{
	for (uint32_t v = 0; v < g->nvalues; v++)
		pl->vbuf[v] = -1;
	pl->nbufs = 0;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		for (uint32_t r = 0; r < n->nres; r++) {
			fj_vid v = n->res[r];
			if (pl->out_pos[v] >= 0)
				continue;
			pl->vbuf[v] = take_buffer(pl, vbytes[v]);
			if (pl->vbuf[v] < 0)
				return fj_rt_oom(pl->ctx);
		}
		/* results nobody reads die at once */
		for (uint32_t r = 0; r < n->nres; r++) {
			fj_vid v = n->res[r];
			if (pl->vbuf[v] >= 0 && pl->last_use[v] < 0)
				pl->busy[pl->vbuf[v]] = false;
		}
		for (uint32_t j = 0; j < n->nopnds; j++) {
			fj_vid v = n->opnds[j];
			if (v != FJ_NOVAL && pl->vbuf[v] >= 0 && pl->last_use[v] == (int32_t)i)
				pl->busy[pl->vbuf[v]] = false;
		}
	}
	return FJ_OK;
}
