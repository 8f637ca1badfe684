/* rebuild.c -- whole-graph rewrites into a fresh graph (see rebuild.h).
 *
 * Copies are exact: attributes, annotations, locations, result names and
 * types travel unchanged (types are not re-inferred: a copy has the same
 * operand types by construction, and the verifier checks it anyway).
 * fusion.kernel bodies are cloned recursively; a body's parameters carry the
 * names of the kernel's new operands. Liveness is one backward walk over the
 * nodes. Everything is O(values + nodes). */
#include <stdio.h>
#include <string.h>

#include "passes/rebuild.h"

static fj_status nomem(fj_graph *g)
{
	g->module->oom = true;
	return FJ_ERR_NOMEM;
}

fj_status fj_pass_rebuild_begin(fj_rebuild *rb, fj_graph *old)
{
	memset(rb, 0, sizeof *rb);
	rb->old = old;
	fj_context *ctx = fj_graph_ctx(old);
	rb->g = fj_graph_create(old->module, old->name);
	rb->nmap = old->nvalues;
	rb->map = fj_alloc(ctx, (rb->nmap ? rb->nmap : 1) * sizeof *rb->map);
	if (!rb->g || !rb->map) {
		fj_graph_destroy(rb->g);
		if (rb->map)
			fj_free(ctx, rb->map, (rb->nmap ? rb->nmap : 1) * sizeof *rb->map);
		rb->g = NULL;
		rb->map = NULL;
		return nomem(old);
	}
	memset(rb->map, 0xff, rb->nmap * sizeof *rb->map);
	rb->g->loc = old->loc;
	rb->g->num_fwd_outputs = old->num_fwd_outputs;
	for (uint32_t i = 0; i < old->nparams; i++) {
		const fj_value *pv = &old->values[old->params[i]];
		fj_vid v = fj_graph_add_param(rb->g, pv->name, pv->type, pv->loc);
		if (v == FJ_NOVAL)
			return nomem(old);
		rb->g->values[v].recomputable = pv->recomputable;
		rb->g->values[v].nograd = pv->nograd;
		rb->map[old->params[i]] = v;
	}
	return FJ_OK;
}

fj_vid fj_pass_rebuild_value(fj_rebuild *rb, fj_vid v)
{
	if (v == FJ_NOVAL)
		return FJ_NOVAL;
	FJ_ASSERT(v < rb->nmap);
	if (rb->map[v] == FJ_NOVAL && rb->old->values[v].kind == FJ_VK_LITERAL)
		rb->map[v] = fj_graph_add_literal(rb->g, rb->old->values[v].lit, rb->old->values[v].loc);
	return rb->map[v];
}

static uint32_t copy_node(fj_graph *g, const fj_graph *og, const fj_node *n, const fj_vid *opnds);

/* Clones body b (of a node of og) for the new kernel node knode of g. */
static fj_status clone_body(fj_graph *g, uint32_t knode, const fj_graph *b)
{
	fj_context *ctx = fj_graph_ctx(g);
	fj_graph *nb = fj_graph_create_body(g);
	if (!nb)
		return nomem(g);
	nb->loc = b->loc;
	fj_vid *map = fj_alloc(ctx, (b->nvalues ? b->nvalues : 1) * sizeof *map);
	if (!map)
		return nomem(g);
	memset(map, 0xff, (b->nvalues ? b->nvalues : 1) * sizeof *map);
	fj_status st = FJ_OK;
	const fj_node *kn = &g->nodes[knode];
	for (uint32_t i = 0; i < b->nparams && st == FJ_OK; i++) {
		const fj_value *pv = &b->values[b->params[i]];
		const char *name = i < kn->nopnds && kn->opnds[i] != FJ_NOVAL ? g->values[kn->opnds[i]].name : pv->name;
		fj_vid v = fj_graph_add_param(nb, name, pv->type, pv->loc);
		if (v == FJ_NOVAL)
			st = nomem(g);
		else
			map[b->params[i]] = v;
	}
	for (uint32_t ni = 0; ni < b->nnodes && st == FJ_OK; ni++) {
		const fj_node *n = &b->nodes[ni];
		fj_vid stack[16], *ops = n->nopnds <= 16 ? stack : fj_alloc(ctx, n->nopnds * sizeof *ops);
		if (!ops) {
			st = nomem(g);
			break;
		}
		for (uint32_t i = 0; i < n->nopnds; i++) {
			fj_vid v = n->opnds[i];
			if (v != FJ_NOVAL && map[v] == FJ_NOVAL && b->values[v].kind == FJ_VK_LITERAL)
				map[v] = fj_graph_add_literal(nb, b->values[v].lit, b->values[v].loc);
			ops[i] = v == FJ_NOVAL ? FJ_NOVAL : map[v];
		}
		uint32_t k = copy_node(nb, b, n, ops);
		if (ops != stack)
			fj_free(ctx, ops, n->nopnds * sizeof *ops);
		if (k == FJ_NONODE) {
			st = nomem(g);
			break;
		}
		for (uint32_t i = 0; i < n->nres; i++)
			map[n->res[i]] = nb->nodes[k].res[i];
	}
	if (st == FJ_OK) {
		fj_vid rstack[16], *res = b->nresults <= 16 ? rstack : fj_alloc(ctx, b->nresults * sizeof *res);
		if (!res) {
			st = nomem(g);
		} else {
			for (uint32_t i = 0; i < b->nresults; i++) {
				fj_vid v = b->results[i];
				if (map[v] == FJ_NOVAL && b->values[v].kind == FJ_VK_LITERAL)
					map[v] = fj_graph_add_literal(nb, b->values[v].lit, b->values[v].loc);
				res[i] = map[v];
			}
			st = fj_graph_set_results(nb, res, b->nresults);
			if (res != rstack)
				fj_free(ctx, res, b->nresults * sizeof *res);
		}
	}
	fj_free(ctx, map, (b->nvalues ? b->nvalues : 1) * sizeof *map);
	if (st == FJ_OK)
		g->nodes[knode].body = nb;
	return st;
}

static uint32_t copy_node(fj_graph *g, const fj_graph *og, const fj_node *n, const fj_vid *opnds)
{
	fj_context *ctx = fj_graph_ctx(g);
	const char *nstack[8], **names = n->nres <= 8 ? nstack : fj_alloc(ctx, n->nres * sizeof *names);
	fj_type tstack[8], *types = n->nres <= 8 ? tstack : fj_alloc(ctx, n->nres * sizeof *types);
	uint32_t k = FJ_NONODE;
	if (!names || !types)
		goto done;
	for (uint32_t i = 0; i < n->nres; i++) {
		names[i] = og->values[n->res[i]].name;
		types[i] = og->values[n->res[i]].type;
	}
	k = fj_graph_add_node(g, n->op, opnds, n->nopnds, n->nres, names, types, n->loc);
	if (k == FJ_NONODE)
		goto done;
	fj_node *nn = &g->nodes[k];
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	if (oi->nattrs)
		memcpy(nn->attrs, n->attrs, oi->nattrs * sizeof *nn->attrs); /* items live in og's arena: copy them */
	for (int i = 0; i < oi->nattrs; i++) {
		fj_attr *a = &nn->attrs[i];
		if (a->kind == FJ_AK_LIST)
			*a = fj_attr_list(g, a->u.items, a->n);
		else if (a->kind == FJ_AK_STR)
			*a = fj_attr_str(g, a->u.s);
		if (a->kind == FJ_AK_ABSENT && n->attrs[i].kind != FJ_AK_ABSENT) {
			k = FJ_NONODE;
			goto done;
		}
	}
	nn->recomputable = n->recomputable;
	nn->nograd = n->nograd;
	fj_graph *top = g;
	while (top->parent)
		top = top->parent;
	nn->schedule = n->schedule ? fj_arena_strdup(&top->arena, n->schedule) : NULL;
	nn->kernel = n->kernel ? fj_arena_strdup(&top->arena, n->kernel) : NULL;
	if ((n->schedule && !nn->schedule) || (n->kernel && !nn->kernel)) {
		k = FJ_NONODE;
		goto done;
	}
	if (n->body && clone_body(g, k, n->body) != FJ_OK)
		k = FJ_NONODE;
done:
	if (names && names != nstack)
		fj_free(ctx, names, n->nres * sizeof *names);
	if (types && types != tstack)
		fj_free(ctx, types, n->nres * sizeof *types);
	if (k == FJ_NONODE)
		g->module->oom = true;
	return k;
}

uint32_t fj_pass_rebuild_copy(fj_rebuild *rb, const fj_node *n, const fj_vid *opnds)
{
	uint32_t k = copy_node(rb->g, rb->old, n, opnds);
	if (k != FJ_NONODE)
		for (uint32_t i = 0; i < n->nres; i++)
			rb->map[n->res[i]] = rb->g->nodes[k].res[i];
	return k;
}

fj_status fj_pass_rebuild_finish(fj_rebuild *rb, fj_module *m, fj_status st)
{
	fj_context *ctx = m->ctx;
	if (st == FJ_OK && rb->g) {
		fj_vid stack[16], *res = rb->old->nresults <= 16 ? stack : fj_alloc(ctx, rb->old->nresults * sizeof *res);
		if (!res) {
			st = nomem(rb->old);
		} else {
			for (uint32_t i = 0; i < rb->old->nresults; i++) {
				res[i] = fj_pass_rebuild_value(rb, rb->old->results[i]);
				if (res[i] == FJ_NOVAL)
					st = fj_error(ctx, rb->old->loc, "internal error: result %u of @%s was not rebuilt", i,
					              rb->old->name);
			}
			if (st == FJ_OK)
				st = fj_graph_set_results(rb->g, res, rb->old->nresults);
			if (res != stack)
				fj_free(ctx, res, rb->old->nresults * sizeof *res);
		}
	}
	if (st == FJ_OK) {
		uint32_t i = 0;
		while (i < m->ngraphs && m->graphs[i] != rb->old)
			i++;
		FJ_ASSERT(i < m->ngraphs);
		fj_module_remove_graph(m, i);
		st = fj_module_insert_graph(m, i, rb->g);
		if (st != FJ_OK)
			fj_graph_destroy(rb->g);
	} else {
		fj_graph_destroy(rb->g);
	}
	if (rb->map)
		fj_free(ctx, rb->map, (rb->nmap ? rb->nmap : 1) * sizeof *rb->map);
	rb->map = NULL;
	rb->g = NULL;
	return st;
}

void fj_pass_rebuild_abort(fj_rebuild *rb)
{
	fj_context *ctx = fj_graph_ctx(rb->old);
	fj_graph_destroy(rb->g);
	if (rb->map)
		fj_free(ctx, rb->map, (rb->nmap ? rb->nmap : 1) * sizeof *rb->map);
	rb->map = NULL;
	rb->g = NULL;
}

fj_status fj_pass_liveness(const fj_graph *g, bool **usedp, bool **livep)
{
	fj_context *ctx = fj_graph_ctx(g);
	bool *used = fj_alloc(ctx, g->nvalues ? g->nvalues : 1);
	bool *live = fj_alloc(ctx, g->nnodes ? g->nnodes : 1);
	if (!used || !live) {
		if (used)
			fj_free(ctx, used, g->nvalues ? g->nvalues : 1);
		if (live)
			fj_free(ctx, live, g->nnodes ? g->nnodes : 1);
		return nomem((fj_graph *)g);
	}
	memset(used, 0, g->nvalues ? g->nvalues : 1);
	memset(live, 0, g->nnodes ? g->nnodes : 1);
	for (uint32_t i = 0; i < g->nresults; i++)
		if (g->results[i] != FJ_NOVAL)
			used[g->results[i]] = true;
	for (uint32_t ni = g->nnodes; ni-- > 0;) {
		const fj_node *n = &g->nodes[ni];
		for (uint32_t i = 0; i < n->nres && !live[ni]; i++)
			live[ni] = used[n->res[i]];
		if (!live[ni])
			continue;
		for (uint32_t i = 0; i < n->nopnds; i++)
			if (n->opnds[i] != FJ_NOVAL)
				used[n->opnds[i]] = true;
	}
	*usedp = used;
	*livep = live;
	return FJ_OK;
}

static bool name_free(const fj_rebuild *rb, const char *s)
{
	size_t n = strlen(s);
	return fj_graph_find_value(rb->g, s, n) == FJ_NOVAL && fj_graph_find_value(rb->old, s, n) == FJ_NOVAL;
}

fj_status fj_pass_rebuild_name_from(fj_rebuild *rb, uint32_t n0, const char *hint, const char *sep)
{
	fj_graph *g = rb->g;
	char buf[160];
	uint32_t counter = 0;
	for (uint32_t k = n0; k < g->nnodes; k++)
		for (uint32_t r = 0; r < g->nodes[k].nres; r++) {
			do
				snprintf(buf, sizeof buf, "%.120s%.8s%u", hint, sep, counter++);
			while (!name_free(rb, buf));
			if (fj_graph_rename_value(g, g->nodes[k].res[r], buf))
				return FJ_ERR_NOMEM;
		}
	return FJ_OK;
}
