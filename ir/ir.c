/* ir.c -- modules, graphs, values, nodes and attributes (symbolic sizes:
 * dim.c).
 *
 * Graph storage is arrays grown on the graph's arena (old copies stay in the
 * arena until the graph dies: at most twice the live size). Names are found
 * through an open-addressed hash table of value ids. */
#include <stdio.h>
#include <string.h>

#include "context.h"

/* ---- modules ---- */

fj_module *fj_module_create(fj_context *ctx)
{
	fj_module *m = fj_alloc(ctx, sizeof *m);
	if (!m)
		return NULL;
	memset(m, 0, sizeof *m);
	m->ctx = ctx;
	fj_arena_init(&m->arena, ctx);
	return m;
}

void fj_module_destroy(fj_module *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->ngraphs; i++)
		fj_graph_destroy(m->graphs[i]);
	fj_free(m->ctx, m->graphs, m->cap_graphs * sizeof *m->graphs);
	fj_arena_free(&m->arena);
	fj_free(m->ctx, m, sizeof *m);
}

fj_graph *fj_module_find_graph(const fj_module *m, const char *name)
{
	for (uint32_t i = 0; i < m->ngraphs; i++)
		if (strcmp(m->graphs[i]->name, name) == 0)
			return m->graphs[i];
	return NULL;
}

fj_status fj_module_insert_graph(fj_module *m, uint32_t i, fj_graph *g)
{
	if (i > m->ngraphs)
		i = m->ngraphs;
	if (fj_module_find_graph(m, g->name))
		return fj_error(m->ctx, g->loc, "graph @%s is defined twice", g->name);
	if (m->ngraphs == m->cap_graphs) {
		uint32_t ncap = m->cap_graphs ? m->cap_graphs * 2 : 4;
		fj_graph **ng = fj_realloc(m->ctx, m->graphs, m->cap_graphs * sizeof *ng, ncap * sizeof *ng);
		if (!ng) {
			m->oom = true;
			return FJ_ERR_NOMEM;
		}
		m->graphs = ng;
		m->cap_graphs = ncap;
	}
	memmove(&m->graphs[i + 1], &m->graphs[i], (m->ngraphs - i) * sizeof *m->graphs);
	m->graphs[i] = g;
	m->ngraphs++;
	return FJ_OK;
}

fj_graph *fj_module_add_graph(fj_module *m, const char *name, fj_loc loc)
{
	fj_graph *g = fj_graph_create(m, name);
	if (!g)
		return NULL;
	g->loc = loc;
	if (fj_module_insert_graph(m, m->ngraphs, g) != FJ_OK) {
		fj_graph_destroy(g);
		return NULL;
	}
	return g;
}

void fj_module_remove_graph(fj_module *m, uint32_t i)
{
	FJ_ASSERT(i < m->ngraphs);
	fj_graph_destroy(m->graphs[i]);
	memmove(&m->graphs[i], &m->graphs[i + 1], (m->ngraphs - i - 1) * sizeof *m->graphs);
	m->ngraphs--;
}

/* ---- graphs ---- */

fj_graph *fj_graph_create(fj_module *m, const char *name)
{
	fj_graph *g = fj_alloc(m->ctx, sizeof *g);
	if (!g) {
		m->oom = true;
		return NULL;
	}
	memset(g, 0, sizeof *g);
	g->module = m;
	g->num_fwd_outputs = -1;
	fj_arena_init(&g->arena, m->ctx);
	g->name = fj_arena_strdup(&g->arena, name);
	if (!g->name) {
		fj_graph_destroy(g);
		m->oom = true;
		return NULL;
	}
	return g;
}

void fj_graph_destroy(fj_graph *g)
{
	if (!g)
		return;
	/* Bodies live in the top-level graph's arena. */
	if (!g->parent) {
		fj_arena_free(&g->arena);
		fj_free(g->module->ctx, g, sizeof *g);
	}
}

static fj_graph *top_graph(fj_graph *g)
{
	while (g->parent)
		g = g->parent;
	return g;
}

static fj_arena *graph_arena(fj_graph *g) { return &top_graph(g)->arena; }

fj_graph *fj_graph_create_body(fj_graph *parent)
{
	fj_graph *b = fj_arena_alloc(graph_arena(parent), sizeof *b);
	if (!b) {
		parent->module->oom = true;
		return NULL;
	}
	b->module = parent->module;
	b->parent = parent;
	b->name = parent->name;
	b->num_fwd_outputs = -1;
	return b;
}

static uint32_t hash_name(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

fj_vid fj_graph_find_value(const fj_graph *g, const char *name, size_t len)
{
	if (!g->name_cap)
		return FJ_NOVAL;
	uint32_t mask = g->name_cap - 1;
	for (uint32_t i = hash_name(name, len) & mask;; i = (i + 1) & mask) {
		fj_vid v = g->name_tab[i];
		if (v == FJ_NOVAL)
			return FJ_NOVAL;
		const char *vn = g->values[v].name;
		if (strncmp(vn, name, len) == 0 && vn[len] == 0)
			return v;
	}
}

static bool name_insert(fj_graph *g, fj_vid v)
{
	if ((g->name_count + 1) * 2 > g->name_cap) {
		uint32_t ncap = g->name_cap ? g->name_cap * 2 : 64;
		fj_vid *tab = fj_arena_alloc(graph_arena(g), ncap * sizeof *tab);
		if (!tab)
			return false;
		memset(tab, 0xff, ncap * sizeof *tab);
		for (uint32_t i = 0; i < g->name_cap; i++) {
			fj_vid w = g->name_tab[i];
			if (w == FJ_NOVAL)
				continue;
			const char *n = g->values[w].name;
			uint32_t j = hash_name(n, strlen(n)) & (ncap - 1);
			while (tab[j] != FJ_NOVAL)
				j = (j + 1) & (ncap - 1);
			tab[j] = w;
		}
		g->name_tab = tab;
		g->name_cap = ncap;
	}
	const char *n = g->values[v].name;
	uint32_t mask = g->name_cap - 1, j = hash_name(n, strlen(n)) & mask;
	while (g->name_tab[j] != FJ_NOVAL) {
		if (g->name_tab[j] == v)
			return true;
		j = (j + 1) & mask;
	}
	g->name_tab[j] = v;
	g->name_count++;
	return true;
}

static void name_remove(fj_graph *g, fj_vid v)
{
	/* Rebuild-free removal: re-insert the cluster after the slot. */
	const char *n = g->values[v].name;
	if (!g->name_cap || !n)
		return;
	uint32_t mask = g->name_cap - 1, j = hash_name(n, strlen(n)) & mask;
	while (g->name_tab[j] != FJ_NOVAL && g->name_tab[j] != v)
		j = (j + 1) & mask;
	if (g->name_tab[j] == FJ_NOVAL)
		return;
	g->name_tab[j] = FJ_NOVAL;
	g->name_count--;
	for (j = (j + 1) & mask; g->name_tab[j] != FJ_NOVAL; j = (j + 1) & mask) {
		fj_vid w = g->name_tab[j];
		g->name_tab[j] = FJ_NOVAL;
		g->name_count--;
		name_insert(g, w); /* cannot grow: the count did not increase */
	}
}

static bool name_taken(const fj_graph *g, const char *name)
{
	for (; g; g = g->parent)
		if (fj_graph_find_value(g, name, strlen(name)) != FJ_NOVAL)
			return true;
	return false;
}

const char *fj_graph_fresh_name(fj_graph *g, const char *hint)
{
	char buf[96];
	if (hint && *hint && !name_taken(g, hint))
		return fj_arena_strdup(graph_arena(g), hint);
	for (;;) {
		if (hint && *hint)
			snprintf(buf, sizeof buf, "%.64s%u", hint, g->fresh++);
		else
			snprintf(buf, sizeof buf, "%u", g->fresh++);
		if (!name_taken(g, buf))
			return fj_arena_strdup(graph_arena(g), buf);
	}
}

fj_status fj_graph_rename_value(fj_graph *g, fj_vid v, const char *name)
{
	const char *n = fj_arena_strdup(graph_arena(g), name);
	if (!n)
		return FJ_ERR_NOMEM;
	name_remove(g, v);
	g->values[v].name = n;
	return name_insert(g, v) ? FJ_OK : FJ_ERR_NOMEM;
}

static fj_vid new_value(fj_graph *g)
{
	if (g->nvalues == UINT32_MAX - 1)
		return FJ_NOVAL;
	if (g->nvalues == g->cap_values) {
		uint32_t ncap = g->cap_values ? g->cap_values * 2 : 16;
		fj_value *nv = fj_arena_grow(graph_arena(g), g->values, g->nvalues, ncap, sizeof *nv);
		if (!nv) {
			g->module->oom = true;
			return FJ_NOVAL;
		}
		g->values = nv;
		g->cap_values = ncap;
	}
	fj_vid v = g->nvalues++;
	memset(&g->values[v], 0, sizeof g->values[v]);
	return v;
}

bool fj_graph_copy_type(fj_graph *g, fj_type *dst, const fj_type *src)
{
	fj_type t = *src;
	t.dims = NULL;
	if (t.rank) {
		t.dims = fj_arena_alloc(graph_arena(g), t.rank * sizeof *t.dims);
		if (!t.dims) {
			g->module->oom = true;
			return false;
		}
		memcpy(t.dims, src->dims, t.rank * sizeof *t.dims);
	}
	*dst = t;
	return true;
}

fj_vid fj_graph_add_param(fj_graph *g, const char *name, fj_type type, fj_loc loc)
{
	fj_vid v = new_value(g);
	if (v == FJ_NOVAL)
		return v;
	fj_value *val = &g->values[v];
	val->kind = FJ_VK_PARAM;
	val->loc = loc;
	val->def = g->nparams;
	val->name = fj_arena_strdup(graph_arena(g), name);
	if (!val->name || !fj_graph_copy_type(g, &val->type, &type) || !name_insert(g, v))
		goto oom;
	if (g->nparams == g->cap_params) {
		uint32_t ncap = g->cap_params ? g->cap_params * 2 : 8;
		fj_vid *np = fj_arena_grow(graph_arena(g), g->params, g->nparams, ncap, sizeof *np);
		if (!np)
			goto oom;
		g->params = np;
		g->cap_params = ncap;
	}
	g->params[g->nparams++] = v;
	return v;
oom:
	g->module->oom = true;
	return FJ_NOVAL;
}

double fj_literal_value(const fj_literal *l)
{
	return l->kind == FJ_LIT_FLOAT ? l->f : l->kind == FJ_LIT_INT ? (double)l->i : (double)l->b;
}

fj_vid fj_graph_add_literal(fj_graph *g, fj_literal lit, fj_loc loc)
{
	fj_vid v = new_value(g);
	if (v == FJ_NOVAL)
		return v;
	fj_value *val = &g->values[v];
	val->kind = FJ_VK_LITERAL;
	val->lit = lit;
	val->loc = loc;
	val->def = FJ_NONODE;
	val->type.weak = true;
	val->type.dtype = lit.kind == FJ_LIT_FLOAT ? FJ_DT_F64 : lit.kind == FJ_LIT_INT ? FJ_DT_I64 : FJ_DT_BOOL;
	return v;
}

uint32_t fj_graph_add_node(fj_graph *g, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                           uint32_t nres, const char *const *names, const fj_type *types,
                           fj_loc loc)
{
	fj_arena *a = graph_arena(g);
	const fj_opinfo *oi = fj_op_info(g->module->ctx, op);
	if (g->nnodes == UINT32_MAX - 1)
		goto oom;
	if (g->nnodes == g->cap_nodes) {
		uint32_t ncap = g->cap_nodes ? g->cap_nodes * 2 : 16;
		fj_node *nn = fj_arena_grow(a, g->nodes, g->nnodes, ncap, sizeof *nn);
		if (!nn)
			goto oom;
		g->nodes = nn;
		g->cap_nodes = ncap;
	}
	fj_node n;
	memset(&n, 0, sizeof n);
	n.op = op;
	n.loc = loc;
	n.nopnds = nopnds;
	n.nres = nres;
	n.opnds = fj_arena_alloc(a, (nopnds ? nopnds : 1) * sizeof *n.opnds);
	n.res = fj_arena_alloc(a, (nres ? nres : 1) * sizeof *n.res);
	n.attrs = fj_arena_alloc(a, (oi->nattrs ? oi->nattrs : 1) * sizeof *n.attrs);
	if (!n.opnds || !n.res || !n.attrs)
		goto oom;
	if (nopnds)
		memcpy(n.opnds, opnds, nopnds * sizeof *opnds);
	uint32_t idx = g->nnodes;
	for (uint32_t i = 0; i < nres; i++) {
		fj_vid v = new_value(g);
		if (v == FJ_NOVAL)
			goto oom;
		fj_value *val = &g->values[v];
		val->kind = FJ_VK_RESULT;
		val->def = idx;
		val->res = i;
		val->loc = loc;
		val->name = names && names[i] ? fj_arena_strdup(a, names[i]) : fj_graph_fresh_name(g, NULL);
		if (!val->name || !name_insert(g, v))
			goto oom;
		if (types && !fj_graph_copy_type(g, &val->type, &types[i]))
			goto oom;
		n.res[i] = v;
	}
	g->nodes[g->nnodes++] = n;
	return idx;
oom:
	g->module->oom = true;
	return FJ_NONODE;
}

fj_status fj_graph_set_results(fj_graph *g, const fj_vid *res, uint32_t n)
{
	fj_vid *r = fj_arena_alloc(graph_arena(g), (n ? n : 1) * sizeof *r);
	if (!r) {
		g->module->oom = true;
		return FJ_ERR_NOMEM;
	}
	if (n)
		memcpy(r, res, n * sizeof *r);
	g->results = r;
	g->nresults = n;
	return FJ_OK;
}

bool fj_type_same_dims(const fj_type *a, const fj_type *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

bool fj_type_equal(const fj_type *a, const fj_type *b)
{
	return a->dtype == b->dtype && fj_type_same_dims(a, b);
}

void fj_slice_clamp(int64_t size, int64_t *start, int64_t *end)
{
	if (*start < 0)
		*start = *start < -size ? 0 : *start + size;
	if (*end < 0)
		*end = *end < -size ? 0 : *end + size;
	if (*start > size)
		*start = size;
	if (*end > size)
		*end = size;
	if (*end < *start)
		*end = *start;
}

void fj_type_format(const fj_module *m, const fj_type *t, char *buf, size_t size)
{
	size_t len = (size_t)snprintf(buf, size, "%s[", fj_dtype_name(t->dtype));
	for (int i = 0; i < t->rank && len < size; i++) {
		if (i)
			len += (size_t)snprintf(buf + len, size - len, ",");
		if (len < size)
			len += (size_t)fj_dim_format(m, t->dims[i], buf + len, size - len);
	}
	if (len < size)
		snprintf(buf + len, size - len, "]");
}

/* ---- attributes ---- */

fj_attr fj_attr_int(int64_t i) { return (fj_attr){.kind = FJ_AK_INT, .u.i = i}; }
fj_attr fj_attr_float(double f) { return (fj_attr){.kind = FJ_AK_FLOAT, .u.f = f}; }
fj_attr fj_attr_bool(bool b) { return (fj_attr){.kind = FJ_AK_BOOL, .u.b = b}; }
fj_attr fj_attr_dtype(fj_dtype dt) { return (fj_attr){.kind = FJ_AK_DTYPE, .u.dt = dt}; }

fj_attr fj_attr_str(fj_graph *g, const char *s)
{
	fj_attr a = {.kind = FJ_AK_STR};
	a.u.s = fj_arena_strdup(graph_arena(g), s);
	if (!a.u.s) {
		g->module->oom = true;
		a.kind = FJ_AK_ABSENT;
	}
	return a;
}

fj_attr fj_attr_list(fj_graph *g, const fj_attr *items, uint32_t n)
{
	fj_attr a = {.kind = FJ_AK_LIST, .n = n};
	a.u.items = fj_arena_alloc(graph_arena(g), (n ? n : 1) * sizeof *items);
	if (!a.u.items) {
		g->module->oom = true;
		a.kind = FJ_AK_ABSENT;
		return a;
	}
	if (n)
		memcpy(a.u.items, items, n * sizeof *items);
	return a;
}

fj_attr fj_attr_ints(fj_graph *g, const int64_t *v, uint32_t n)
{
	fj_attr a = {.kind = FJ_AK_LIST, .n = n};
	a.u.items = fj_arena_alloc(graph_arena(g), (n ? n : 1) * sizeof *a.u.items);
	if (!a.u.items) {
		g->module->oom = true;
		a.kind = FJ_AK_ABSENT;
		return a;
	}
	for (uint32_t i = 0; i < n; i++)
		a.u.items[i] = fj_attr_int(v[i]);
	return a;
}

fj_attr fj_attr_size(fj_dim d)
{
	return fj_dim_is_static(d) ? fj_attr_int(d) : (fj_attr){.kind = FJ_AK_DIM, .u.dim = d};
}

fj_attr fj_attr_shape(fj_graph *g, const fj_dim *dims, int rank)
{
	fj_attr items[FJ_MAX_RANK];
	for (int k = 0; k < rank; k++)
		items[k] = fj_attr_size(dims[k]);
	return fj_attr_list(g, items, (uint32_t)rank);
}

fj_status fj_node_set_attr(fj_graph *g, uint32_t node, const char *name, fj_attr a)
{
	fj_node *n = &g->nodes[node];
	const fj_opinfo *oi = fj_op_info(g->module->ctx, n->op);
	int i = fj_op_attr_index(oi, name, strlen(name));
	if (i < 0)
		return fj_error(g->module->ctx, n->loc, "%s has no attribute '%s'", oi->name, name);
	n->attrs[i] = a;
	return FJ_OK;
}

const fj_attr *fj_node_attr(const fj_context *ctx, const fj_node *n, const char *name)
{
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	int i = fj_op_attr_index(oi, name, strlen(name));
	FJ_ASSERT(i >= 0);
	return n->attrs[i].kind != FJ_AK_ABSENT ? &n->attrs[i] : &oi->attrs[i].dflt;
}

/* Reduced-dims mask of a reduction node over an operand of rank `rank`. */
uint32_t fj_node_reduced_mask(const fj_context *ctx, const fj_node *n, int rank)
{
	uint32_t mask = 0;
	if (n->op == FJ_OP_PRIMS_ARGMAX || n->op == FJ_OP_PRIMS_ARGMIN) {
		int64_t d = fj_attr_as_int(fj_node_attr(ctx, n, "dim"));
		if (d < 0)
			d += rank ? rank : 1;
		return rank && d >= 0 && d < rank ? 1u << d : 0;
	}
	const fj_attr *a = fj_node_attr(ctx, n, "dims");
	if (!a || a->kind != FJ_AK_LIST)
		return 0;
	for (uint32_t i = 0; i < a->n; i++) {
		int64_t d = fj_attr_as_int(&a->u.items[i]);
		if (d < 0)
			d += rank;
		if (d >= 0 && d < rank)
			mask |= 1u << d;
	}
	return mask;
}

int64_t fj_attr_as_int(const fj_attr *a)
{
	switch (a->kind) {
	case FJ_AK_INT: return a->u.i;
	case FJ_AK_BOOL: return a->u.b;
	case FJ_AK_FLOAT: return (int64_t)a->u.f;
	default: return 0;
	}
}

double fj_attr_as_float(const fj_attr *a)
{
	switch (a->kind) {
	case FJ_AK_INT: return (double)a->u.i;
	case FJ_AK_BOOL: return a->u.b;
	case FJ_AK_FLOAT: return a->u.f;
	default: return 0;
	}
}

bool fj_attr_is_none(const fj_attr *a) { return a->kind == FJ_AK_NONE || a->kind == FJ_AK_ABSENT; }

bool fj_attr_equal(const fj_attr *a, const fj_attr *b)
{
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case FJ_AK_ABSENT:
	case FJ_AK_NONE: return true;
	case FJ_AK_BOOL: return a->u.b == b->u.b;
	case FJ_AK_INT: return a->u.i == b->u.i;
	case FJ_AK_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
	case FJ_AK_STR: return strcmp(a->u.s, b->u.s) == 0;
	case FJ_AK_DTYPE: return a->u.dt == b->u.dt;
	case FJ_AK_DIM: return a->u.dim == b->u.dim;
	case FJ_AK_LIST:
		if (a->n != b->n)
			return false;
		for (uint32_t i = 0; i < a->n; i++)
			if (!fj_attr_equal(&a->u.items[i], &b->u.items[i]))
				return false;
		return true;
	}
	return false;
}
