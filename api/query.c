/* query.c -- the public API's queries (fusejit.h, "Queries"): the sizes a
 * run would bind (fj_program_sizes), the valid range of index inputs, and
 * what a graph of a module takes and returns as written.
 *
 * Index bounds: a parameter used directly as the index operand of an op
 * (index, indices, target) indexes a dim of another operand; its size is
 * taken from the graph as written, at compile time (fj_api_index_dims),
 * because after decompose an index reaches prims.gather through casts and
 * selects; fj_program_sizes makes it concrete with the bound symbols. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

static int opnd_index(const fj_opinfo *oi, const char *name)
{
	for (int i = 0; i < oi->noperands; i++)
		if (strcmp(oi->operands[i].name, name) == 0)
			return i;
	return -1;
}

/* The dim node n indexes with its operand *ix (set: the index operand, or
 * -1 when n takes none), or FJ_API_NO_BOUND. */
static fj_dim indexed_dim(fj_context *ctx, const fj_graph *g, const fj_node *n, int *ix)
{
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	int src;
	*ix = opnd_index(oi, "index");
	if (*ix < 0 && (*ix = opnd_index(oi, "indices")) >= 0) {
		src = opnd_index(oi, "weight");
		if (src < 0) { /* embedding_dense_backward: num_weights */
			const fj_attr *a = fj_node_attr(ctx, n, "num_weights");
			if (fj_op_attr_index(oi, "num_weights", 11) >= 0 && a && a->kind == FJ_AK_INT)
				return a->u.i;
		} else if ((uint32_t)src < n->nopnds && n->opnds[src] != FJ_NOVAL &&
		           g->values[n->opnds[src]].type.rank >= 1) {
			return g->values[n->opnds[src]].type.dims[0];
		}
	} else if (*ix < 0 && (*ix = opnd_index(oi, "target")) >= 0) {
		src = opnd_index(oi, "self");
		if (src >= 0 && (uint32_t)src < n->nopnds && n->opnds[src] != FJ_NOVAL) {
			const fj_type *t = &g->values[n->opnds[src]].type;
			if (t->rank >= 1)
				return t->dims[t->rank >= 2 ? 1 : 0];
		}
	} else if (*ix >= 0) {
		if (n->nopnds > 0 && n->opnds[0] != FJ_NOVAL && fj_op_attr_index(oi, "dim", 3) >= 0) {
			const fj_type *t = &g->values[n->opnds[0]].type;
			int64_t d = fj_attr_as_int(fj_node_attr(ctx, n, "dim"));
			if (d < 0)
				d += t->rank;
			if (d >= 0 && d < t->rank)
				return t->dims[d];
			if (t->rank == 0)
				return 1;
		}
	}
	return FJ_API_NO_BOUND;
}

fj_status fj_api_index_dims(fj_context *ctx, const fj_graph *g, fj_dim **out, uint32_t *n)
{
	fj_dim *bound = fj_alloc(ctx, (g->nparams ? g->nparams : 1) * sizeof *bound);
	if (!bound)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (uint32_t i = 0; i < g->nparams; i++)
		bound[i] = FJ_API_NO_BOUND;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *nd = &g->nodes[i];
		int ix;
		fj_dim dimsz = indexed_dim(ctx, g, nd, &ix);
		if (ix < 0 || (uint32_t)ix >= nd->nopnds || dimsz == FJ_API_NO_BOUND)
			continue;
		fj_vid v = nd->opnds[ix];
		if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_PARAM)
			continue;
		uint32_t pi = g->values[v].def;
		/* several uses: the smallest static size, else the first */
		if (bound[pi] == FJ_API_NO_BOUND ||
		    (fj_dim_is_static(dimsz) && fj_dim_is_static(bound[pi]) && dimsz < bound[pi]))
			bound[pi] = dimsz;
	}
	*out = bound;
	*n = g->nparams;
	return FJ_OK;
}

/* A bound dim made concrete with the symbols rt bound (-1: none). */
static int64_t concrete_bound(const fj_module *m, const fj_rt_exec *rt, fj_dim d)
{
	if (d == FJ_API_NO_BOUND)
		return -1;
	if (fj_dim_is_static(d))
		return d;
	const fj_symexpr *e = fj_dim_expr(m, d);
	int64_t v = e->coef;
	for (uint32_t k = 0; k < e->nsyms && v >= 0; k++) {
		int64_t s = fj_rt_exec_symbol(rt, e->syms[k]);
		v = s < 0 ? -1 : v * s;
	}
	return v;
}

typedef struct sizes_req {
	const fj_program *p;
	fj_value_info *in_info, *out_info;
	int64_t *bounds;
} sizes_req;

static void concrete_info(const fj_rt_exec *rt, const fj_graph *g, fj_vid v, fj_value_info *info)
{
	const fj_value *val = &g->values[v];
	int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
	const int64_t *dims = fj_rt_exec_value_dims(rt, v);
	info->rank = rank;
	memset(info->sizes, 0, sizeof info->sizes);
	memcpy(info->sizes, dims, (size_t)rank * sizeof *dims);
	fj_rt_nbytes(val->type.dtype, dims, rank, &info->bytes);
}

static fj_status sizes_fn(void *ud, const fj_api_inst *i)
{
	sizes_req *q = ud;
	const fj_graph *g = i->g;
	fj_status st = fj_rt_exec_bind(i->rt, i->in, i->origin, i->dims, i->ndims);
	for (uint32_t k = 0; st == FJ_OK && q->in_info && k < g->nparams; k++)
		if ((st = fj_program_info(q->p, FJ_ROLE_INPUT, k, &q->in_info[k])) == FJ_OK)
			concrete_info(i->rt, g, g->params[k], &q->in_info[k]);
	size_t nout = fj_program_count(q->p, FJ_ROLE_OUTPUT);
	for (uint32_t k = 0; st == FJ_OK && q->out_info && k < nout; k++)
		if ((st = fj_program_info(q->p, FJ_ROLE_OUTPUT, k, &q->out_info[k])) == FJ_OK)
			concrete_info(i->rt, g, g->results[k], &q->out_info[k]);
	for (uint32_t k = 0; st == FJ_OK && q->bounds && k < g->nparams; k++)
		q->bounds[k] = i->index_dims ? concrete_bound(g->module, i->rt, i->index_dims[k]) : -1;
	return st;
}

fj_status fj_program_sizes(fj_program *p, const fj_run_options *o, const fj_tensor *const *inputs, size_t ninputs,
                           fj_value_info *in_info, fj_value_info *out_info, int64_t *index_bounds)
{
	if (!p)
		return FJ_ERR_INVALID;
	fj_api_use u = {.in = inputs, .n = ninputs, .run = o, .shapes_only = true};
	sizes_req q = {p, in_info, out_info, index_bounds};
	return fj_api_program_with(p, &u, sizes_fn, &q);
}

/* ---- a module's graphs as written ---- */

static const fj_graph *find_graph(const fj_module *m, const char *name)
{
	if (!m)
		return NULL;
	if (name)
		return fj_module_find_graph(m, name[0] == '@' ? name + 1 : name);
	const fj_graph *g = fj_module_find_graph(m, "main");
	return g ? g : m->ngraphs ? m->graphs[0] : NULL;
}

size_t fj_module_value_count(const fj_module *m, const char *graph, fj_value_role role)
{
	const fj_graph *g = find_graph(m, graph);
	if (!g)
		return 0;
	return role == FJ_ROLE_INPUT ? g->nparams : role == FJ_ROLE_OUTPUT ? g->nresults : 0;
}

fj_status fj_module_value_info(const fj_module *m, const char *graph, fj_value_role role, size_t i,
                               fj_value_info *out)
{
	const fj_graph *g = find_graph(m, graph);
	if (!g || !out || i >= fj_module_value_count(m, graph, role))
		return m ? fj_api_arg_error(m->ctx, "fj_module_value_info", "no such graph or value") : FJ_ERR_INVALID;
	const fj_value *val = &g->values[role == FJ_ROLE_INPUT ? g->params[i] : g->results[i]];
	memset(out, 0, sizeof *out);
	out->name = val->kind == FJ_VK_LITERAL || !val->name ? "" : val->name;
	out->dtype = (fj_scalar_type)val->type.dtype;
	out->rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
	size_t bytes = (size_t)fj_dtype_size(val->type.dtype);
	for (int d = 0; d < out->rank; d++) {
		fj_dim dim = val->type.dims[d];
		out->sizes[d] = fj_dim_is_static(dim) ? dim : -1;
		bytes = fj_dim_is_static(dim) ? bytes * (size_t)dim : 0;
	}
	out->bytes = bytes;
	return FJ_OK;
}
