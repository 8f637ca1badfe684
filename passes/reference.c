/* reference.c -- graph copies for numerical references (see reference.h).
 *
 * Not a pipeline pass: a pass rewrites a module's graphs, these add a new
 * graph beside the one they copy, built node by node with the IR builder
 * (ir/build.h), so that every copied node is checked and its result types
 * are inferred again from its (possibly promoted) operands.
 *
 * clone_f64: parameters and float dtype attributes become f64; the result
 * types follow by inference. Which casts stay: casts to integer and bool
 * dtypes (their truncation is the graph's meaning, not a rounding) and
 * prims.rand's dtype (it fixes how many random bits a value holds). A float
 * result narrower than f64 that is left after promotion (a float computed
 * from integer operands alone, where PyTorch's default float dtype f32
 * applies; prims.rand) gets a conversion to f64 right after it.
 *
 * clone_perturbed: Monte Carlo arithmetic (Parker, Pierce and Eggert, "Monte
 * Carlo Arithmetic: how to gamble with floating point and win", 2000; the
 * CESTAC method of Vignes): every rounding a run makes is simulated by a
 * random relative perturbation of each float node result, v * (1 + d), d
 * uniform in [-delta, delta) from prims.rand (one site, i.e. one Philox
 * offset, per perturbed value, under one seed). Layout ops are exact and are
 * not perturbed; parameters (the inputs) are exact and are not perturbed.
 * The perturbation is multiplicative, so signs and zeros stay.
 *
 * Invariants: parameters keep their names, order and nograd/recomputable
 * annotations; results keep their order; node results keep their names.
 * Complexity O(values + nodes). */
#include <stdio.h>
#include <string.h>

#include "ir/build.h"
#include "passes/reference.h"

void fj_pass_fresh_graph_name(const fj_module *m, const char *base, char *buf, size_t size)
{
	snprintf(buf, size, "%s", base);
	for (unsigned k = 1; fj_module_find_graph(m, buf); k++)
		snprintf(buf, size, "%s_%u", base, k);
}

/* The perturbation of the copy's value v (a float node result): v * (1 +
 * delta * (2u - 1)), u = prims.rand(seed, site) in v's shape; FJ_NOVAL after
 * an error (sticky in b). */
static fj_vid perturb(fj_builder *b, fj_vid v, fj_vid seed, uint64_t site, double delta)
{
	fj_graph *g = b->g;
	const fj_type *t = &g->values[v].type;
	fj_named_attr fa[3] = {{"shape", fj_attr_shape(g, NULL, 0)},
	                       {"value", fj_attr_int((int64_t)site)},
	                       {"dtype", fj_attr_dtype(FJ_DT_I64)}};
	fj_vid off = fj_b_op1(b, FJ_OP_PRIMS_FULL, NULL, 0, fa, 3);
	fj_named_attr ra[2] = {{"shape", fj_attr_shape(g, t->dims, t->rank)}, {"dtype", fj_attr_dtype(t->dtype)}};
	fj_vid u = fj_b_op1(b, FJ_OP_PRIMS_RAND, (fj_vid[]){seed, off}, 2, ra, 2);
	fj_vid s = fj_b_op1(b, FJ_OP_ATEN_MUL, (fj_vid[]){u, fj_b_float(b, 2 * delta)}, 2, NULL, 0);
	fj_vid f = fj_b_op1(b, FJ_OP_ATEN_ADD, (fj_vid[]){s, fj_b_float(b, 1 - delta)}, 2, NULL, 0);
	return fj_b_op1(b, FJ_OP_ATEN_MUL, (fj_vid[]){v, f}, 2, NULL, 0);
}

/* The attribute a of spec s, copied into ng (lists and strings live in the
 * old graph's arena), promoted for the f64 copy when to_f64. */
static fj_attr copy_attr(fj_graph *ng, fj_op op, const fj_attr_spec *s, const fj_attr *a, bool to_f64)
{
	fj_attr c = *a;
	if (a->kind == FJ_AK_LIST)
		c = fj_attr_list(ng, a->u.items, a->n);
	else if (a->kind == FJ_AK_STR)
		c = fj_attr_str(ng, a->u.s);
	if (!to_f64)
		return c;
	if (s->type == FJ_AT_DTYPE && c.kind == FJ_AK_DTYPE && fj_dtype_is_float(c.u.dt) && op != FJ_OP_PRIMS_RAND)
		c.u.dt = FJ_DT_F64;
	if (strcmp(s->name, "half_to_float") == 0 && c.kind == FJ_AK_BOOL)
		c.u.b = false;
	return c;
}

/* to_f64: clone_f64; delta > 0: clone_perturbed. */
static fj_status copy_graph(const fj_graph *g, const char *name, bool to_f64, double delta, uint64_t seed,
                            fj_graph **out)
{
	fj_module *m = g->module;
	fj_context *ctx = m->ctx;
	*out = NULL;
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].body)
			return fj_error(ctx, g->nodes[i].loc,
			                "a reference copy of @%s: graphs holding fusion.kernel nodes are not supported",
			                g->name);
	fj_graph *ng = fj_graph_create(m, name);
	uint32_t nres = g->nresults;
	fj_vid *map = fj_alloc(ctx, (g->nvalues + 1) * sizeof *map);
	fj_vid *res = fj_alloc(ctx, (nres + 1) * sizeof *res);
	uint32_t maxops = 1;
	for (uint32_t i = 0; i < g->nnodes; i++)
		maxops = g->nodes[i].nopnds > maxops ? g->nodes[i].nopnds : maxops;
	fj_vid *ops = fj_alloc(ctx, maxops * sizeof *ops);
	fj_named_attr attrs[FJ_MAX_SPEC];
	fj_status st = FJ_OK;
	if (!ng || !map || !res || !ops) {
		st = fj_error_status(ctx, FJ_ERR_NOMEM, g->loc, "out of memory");
		goto done;
	}
	memset(map, 0xff, (g->nvalues + 1) * sizeof *map);
	ng->loc = g->loc;
	if (!to_f64)
		ng->num_fwd_outputs = g->num_fwd_outputs;
	fj_builder b;
	fj_builder_init(&b, ng, g->loc);
	for (uint32_t i = 0; i < g->nparams; i++) {
		const fj_value *pv = &g->values[g->params[i]];
		fj_type t = pv->type;
		if (to_f64 && fj_dtype_is_float(t.dtype))
			t.dtype = FJ_DT_F64;
		fj_b_set_loc(&b, pv->loc);
		fj_vid v = fj_b_param(&b, pv->name, t);
		if (v == FJ_NOVAL)
			break;
		ng->values[v].nograd = pv->nograd;
		ng->values[v].recomputable = pv->recomputable;
		map[g->params[i]] = v;
	}
	fj_vid seedv = FJ_NOVAL;
	uint64_t site = 0;
	if (delta > 0) {
		fj_named_attr fa[3] = {{"shape", fj_attr_shape(ng, NULL, 0)},
		                       {"value", fj_attr_int((int64_t)(seed & INT64_MAX))},
		                       {"dtype", fj_attr_dtype(FJ_DT_I64)}};
		seedv = fj_b_op1(&b, FJ_OP_PRIMS_FULL, NULL, 0, fa, 3);
	}
	for (uint32_t ni = 0; ni < g->nnodes && fj_b_status(&b) == FJ_OK; ni++) {
		const fj_node *n = &g->nodes[ni];
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		for (uint32_t i = 0; i < n->nopnds; i++) {
			fj_vid v = n->opnds[i];
			if (v != FJ_NOVAL && map[v] == FJ_NOVAL && g->values[v].kind == FJ_VK_LITERAL)
				map[v] = fj_graph_add_literal(ng, g->values[v].lit, g->values[v].loc);
			ops[i] = v == FJ_NOVAL ? FJ_NOVAL : map[v];
		}
		uint32_t na = 0;
		for (int i = 0; i < oi->nattrs; i++)
			if (n->attrs[i].kind != FJ_AK_ABSENT)
				attrs[na++] = (fj_named_attr){oi->attrs[i].name,
				                              copy_attr(ng, n->op, &oi->attrs[i], &n->attrs[i], to_f64)};
		fj_b_set_loc(&b, n->loc);
		fj_vid rstack[8], *r = n->nres <= 8 ? rstack : fj_alloc(ctx, n->nres * sizeof *r);
		if (!r) {
			st = fj_error_status(ctx, FJ_ERR_NOMEM, n->loc, "out of memory");
			goto done;
		}
		uint32_t k = fj_b_op(&b, n->op, ops, n->nopnds, attrs, na, r, n->nres);
		if (k != FJ_NONODE) {
			ng->nodes[k].nograd = n->nograd;
			ng->nodes[k].recomputable = n->recomputable;
		}
		for (uint32_t i = 0; k != FJ_NONODE && i < n->nres; i++) {
			const char *vn = g->values[n->res[i]].name;
			if (vn && fj_graph_rename_value(ng, r[i], vn) != FJ_OK) {
				fj_b_fail(&b, FJ_ERR_NOMEM, "out of memory");
				break;
			}
			map[n->res[i]] = r[i];
			fj_dtype dt = ng->values[r[i]].type.dtype;
			if (to_f64 && fj_dtype_is_float(dt) && dt != FJ_DT_F64) {
				bool prims = (oi->flags & FJ_OPF_PRIMS) != 0;
				fj_named_attr a = {"dtype", fj_attr_dtype(FJ_DT_F64)};
				map[n->res[i]] = fj_b_op1(&b, prims ? FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE : FJ_OP_ATEN__TO_COPY,
				                          &r[i], 1, &a, 1);
			}
			if (delta > 0 && fj_dtype_is_float(dt) && !(oi->flags & FJ_OPF_LAYOUT))
				map[n->res[i]] = perturb(&b, r[i], seedv, site++, delta);
		}
		if (r != rstack)
			fj_free(ctx, r, n->nres * sizeof *r);
	}
	if ((st = fj_b_status(&b)) != FJ_OK)
		goto done;
	for (uint32_t i = 0; i < g->nresults; i++) {
		fj_vid v = g->results[i];
		if (map[v] == FJ_NOVAL && g->values[v].kind == FJ_VK_LITERAL)
			map[v] = fj_graph_add_literal(ng, g->values[v].lit, g->values[v].loc);
		res[i] = map[v];
	}
	for (uint32_t i = 0; i < nres; i++)
		if (res[i] == FJ_NOVAL) {
			st = fj_error_status(ctx, FJ_ERR_NOMEM, g->loc, "out of memory");
			goto done;
		}
	if ((st = fj_b_return(&b, res, nres)) != FJ_OK)
		goto done;
	if ((st = fj_module_insert_graph(m, m->ngraphs, ng)) == FJ_OK) {
		*out = ng;
		ng = NULL;
	}
done:
	if (ng)
		fj_graph_destroy(ng);
	if (map)
		fj_free(ctx, map, (g->nvalues + 1) * sizeof *map);
	if (res)
		fj_free(ctx, res, (nres + 1) * sizeof *res);
	if (ops)
		fj_free(ctx, ops, maxops * sizeof *ops);
	return st;
}

fj_status fj_pass_clone_f64(const fj_graph *g, const char *name, fj_graph **out)
{
	return copy_graph(g, name, true, 0, 0, out);
}

fj_status fj_pass_clone_perturbed(const fj_graph *g, const char *name, double delta, uint64_t seed, fj_graph **out)
{
	return copy_graph(g, name, false, delta, seed, out);
}
