/* verify.c -- the verifier: structure, SSA, op specs, inferred types and
 * annotations of a module, its graphs and fusion.kernel bodies.
 *
 * One walk per graph, in node order: parameters are defined first, literals
 * are always available, each node's operands must already be defined (so the
 * nodes are in topological order) and its results are defined by it. Each
 * node is checked against its op's spec (fj_check_node), its body verified
 * (recursively, with a depth limit), then its result types re-inferred
 * (fj_infer_node) and compared with the stored ones. Every problem is
 * recorded at the node's or value's place; the walk goes on where it safely
 * can, so one run reports them all. The verifier trusts nothing it reads:
 * ids, kinds, dtypes, ranks and size expressions are range-checked before
 * use, so a graph broken by hand or by a buggy pass is reported, never
 * crashed on. Cost: O(values + nodes + names log names) per graph, plus
 * inference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define MAX_BODY_DEPTH 32

typedef struct verifier {
	fj_context *ctx;
	fj_module *m;
	size_t nerr;
	bool oom;
} verifier;

#define VERR(vf, loc, ...) ((vf)->nerr++, (void)fj_error((vf)->ctx, (loc), __VA_ARGS__))

/* ---- helpers ---- */

static bool name_ok(const char *s)
{
	if (!s || !*s)
		return false;
	for (const char *p = s; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.'))
			return false;
	}
	return true;
}

static bool dim_ok(const fj_module *m, fj_dim d)
{
	return d >= 0 || (uint64_t)(-(d + 1)) < m->nexprs;
}

/* Type problems, or NULL. */
static const char *type_problem(const fj_module *m, const fj_type *t)
{
	if ((unsigned)t->dtype >= FJ_DT_COUNT)
		return "an invalid dtype";
	if (t->rank > FJ_MAX_RANK)
		return "a rank above the maximum";
	if (t->rank && !t->dims)
		return "no sizes";
	for (int i = 0; i < t->rank; i++)
		if (!dim_ok(m, t->dims[i]))
			return "an invalid size";
	return NULL;
}

static const char *vname(const fj_value *v) { return v->name ? v->name : "<unnamed>"; }

static int cmp_names(const void *a, const void *b)
{
	const fj_value *x = *(const fj_value *const *)a, *y = *(const fj_value *const *)b;
	int c = strcmp(x->name, y->name);
	/* Stable order for equal names: the later value is the redefinition. */
	return c ? c : (x < y ? -1 : x > y);
}

static bool name_in_ancestors(const fj_graph *g, const char *name)
{
	for (const fj_graph *p = g->parent; p; p = p->parent)
		if (fj_graph_find_value(p, name, strlen(name)) != FJ_NOVAL)
			return true;
	return false;
}

/* ---- values ---- */

/* Checks every value by itself: kind, links, type, name, annotations.
 * Returns a mask of bad values (1 = unusable) in *bad. */
static void check_values(verifier *vf, fj_graph *g, uint8_t *bad)
{
	fj_module *m = g->module;
	for (fj_vid v = 0; v < g->nvalues; v++) {
		fj_value *val = &g->values[v];
		const char *tp = type_problem(m, &val->type);
		switch (val->kind) {
		case FJ_VK_PARAM:
			if (val->def >= g->nparams || !g->params || g->params[val->def] != v) {
				VERR(vf, val->loc, "parameter %%%s is not in its graph's parameter list", vname(val));
				bad[v] = 1;
			}
			break;
		case FJ_VK_RESULT:
			if (val->def >= g->nnodes || val->res >= g->nodes[val->def].nres ||
			    !g->nodes[val->def].res || g->nodes[val->def].res[val->res] != v) {
				VERR(vf, val->loc, "%%%s is not a result of the node that should define it", vname(val));
				bad[v] = 1;
			}
			break;
		case FJ_VK_LITERAL:
			if (val->lit.kind != FJ_LIT_INT && val->lit.kind != FJ_LIT_FLOAT && val->lit.kind != FJ_LIT_BOOL) {
				VERR(vf, val->loc, "literal operand of an invalid kind");
				bad[v] = 1;
			}
			if (val->recomputable != FJ_TRI_UNSET || val->nograd)
				VERR(vf, val->loc, "a literal operand carries annotations");
			break;
		default:
			VERR(vf, val->loc, "value %u has an invalid kind %d", v, val->kind);
			bad[v] = 1;
			continue;
		}
		if (tp) {
			VERR(vf, val->loc, "%s%s has %s in its type",
			     val->kind == FJ_VK_LITERAL ? "" : "%", val->kind == FJ_VK_LITERAL ? "literal" : vname(val), tp);
			bad[v] = 1;
		}
		if (val->kind == FJ_VK_LITERAL)
			continue;
		if (!name_ok(val->name))
			VERR(vf, val->loc, "%s name '%%%s': names are [A-Za-z0-9_.]+",
			     val->name ? "invalid" : "missing", val->name ? val->name : "");
		if (val->recomputable > FJ_TRI_TRUE)
			VERR(vf, val->loc, "%%%s: invalid recomputable annotation", vname(val));
		if (val->kind == FJ_VK_RESULT) {
			if (val->nograd)
				VERR(vf, val->loc, "%%%s: nograd annotates a node or a graph parameter, not a result", vname(val));
			if (val->recomputable != FJ_TRI_UNSET)
				VERR(vf, val->loc, "%%%s: recomputable annotates the node, not its result", vname(val));
		}
		if (g->parent && val->kind == FJ_VK_PARAM && (val->nograd || val->recomputable != FJ_TRI_UNSET))
			VERR(vf, val->loc, "%%%s: a fusion.kernel body's parameters carry no annotations", vname(val));
	}
}

/* Names unique in g; a body's names must not redefine an outer name (its
 * parameters carry the outer names on purpose). */
static fj_status check_names(verifier *vf, fj_graph *g)
{
	uint32_t n = 0;
	for (fj_vid v = 0; v < g->nvalues; v++)
		if (g->values[v].kind != FJ_VK_LITERAL && g->values[v].name)
			n++;
	if (!n)
		return FJ_OK;
	const fj_value **names = fj_alloc(vf->ctx, n * sizeof *names);
	if (!names)
		return FJ_ERR_NOMEM;
	n = 0;
	for (fj_vid v = 0; v < g->nvalues; v++)
		if (g->values[v].kind != FJ_VK_LITERAL && g->values[v].name)
			names[n++] = &g->values[v];
	qsort(names, n, sizeof *names, cmp_names);
	for (uint32_t i = 1; i < n; i++)
		if (strcmp(names[i - 1]->name, names[i]->name) == 0)
			VERR(vf, names[i]->loc, "%%%s is defined more than once", names[i]->name);
	if (g->parent)
		for (uint32_t i = 0; i < n; i++)
			if (names[i]->kind == FJ_VK_RESULT && name_in_ancestors(g, names[i]->name))
				VERR(vf, names[i]->loc, "%%%s in a fusion.kernel body redefines an outer name",
				     names[i]->name);
	fj_free(vf->ctx, names, n * sizeof *names);
	return FJ_OK;
}

/* ---- graphs ---- */

static fj_status verify_graph(verifier *vf, fj_graph *g, const fj_node *kernel, const fj_graph *outer, int depth);

/* A fusion.kernel's body against its node (in graph g). */
static fj_status check_body(verifier *vf, fj_graph *g, const fj_node *n, int depth)
{
	fj_graph *b = n->body;
	if (b->module != g->module || b->parent != g) {
		VERR(vf, n->loc, "fusion.kernel body does not belong to its graph");
		return FJ_OK;
	}
	if (depth >= MAX_BODY_DEPTH) {
		VERR(vf, n->loc, "fusion.kernel bodies nested deeper than %d", MAX_BODY_DEPTH);
		return FJ_OK;
	}
	return verify_graph(vf, b, n, g, depth + 1);
}

/* The body's parameters mirror the kernel's operands; it yields one value
 * per result. */
static void check_kernel_signature(verifier *vf, fj_graph *b, const fj_node *n, const fj_graph *outer,
                                   const uint8_t *bad)
{
	fj_module *m = b->module;
	if (b->nparams != n->nopnds) {
		VERR(vf, n->loc, "fusion.kernel has %u operands but its body %u parameters", n->nopnds, b->nparams);
	} else {
		for (uint32_t i = 0; i < n->nopnds; i++) {
			fj_vid o = n->opnds[i], p = b->params[i];
			if (p >= b->nvalues || (bad[p] & 1) || o == FJ_NOVAL || o >= outer->nvalues)
				continue; /* reported elsewhere */
			const fj_value *ov = &outer->values[o], *pv = &b->values[p];
			if (ov->kind == FJ_VK_LITERAL) {
				VERR(vf, n->loc, "fusion.kernel operand %u is a literal; kernels take tensors", i);
				continue;
			}
			if (type_problem(m, &ov->type))
				continue;
			if (ov->name && pv->name && strcmp(ov->name, pv->name) != 0)
				VERR(vf, pv->loc, "fusion.kernel body parameter %u is %%%s but the operand is %%%s",
				     i, pv->name, ov->name);
			if (!fj_type_equal(&ov->type, &pv->type)) {
				char ta[256], tb[256];
				fj_type_format(m, &ov->type, ta, sizeof ta);
				fj_type_format(m, &pv->type, tb, sizeof tb);
				VERR(vf, pv->loc, "fusion.kernel body parameter %%%s has type %s but the operand has type %s",
				     vname(pv), tb, ta);
			}
		}
	}
	if (b->nresults != n->nres)
		VERR(vf, n->loc, "fusion.kernel has %u results but its body yields %u values", n->nres, b->nresults);
}

static fj_status verify_graph(verifier *vf, fj_graph *g, const fj_node *kernel, const fj_graph *outer, int depth)
{
	fj_context *ctx = vf->ctx;
	fj_module *m = g->module;
	fj_status st = FJ_OK;
	bool top = kernel == NULL;

	if (top && !name_ok(g->name))
		VERR(vf, g->loc, "invalid graph name '@%s': names are [A-Za-z0-9_.]+", g->name ? g->name : "");
	if ((g->nvalues && !g->values) || (g->nnodes && !g->nodes) || (g->nparams && !g->params) ||
	    (g->nresults && !g->results)) {
		VERR(vf, g->loc, "graph @%s has missing arrays", g->name ? g->name : "");
		return FJ_OK;
	}
	/* One byte per value: bit 0 bad, bit 1 defined. */
	uint8_t *state = fj_alloc(ctx, g->nvalues ? g->nvalues : 1);
	if (!state)
		return FJ_ERR_NOMEM;
	memset(state, 0, g->nvalues ? g->nvalues : 1);
	uint8_t *bad = state; /* bit 0 */
	check_values(vf, g, bad);
	if ((st = check_names(vf, g)) != FJ_OK)
		goto done;

	/* Annotations of the graph. */
	if (!top && g->num_fwd_outputs != -1)
		VERR(vf, g->loc, "num_fwd_outputs is only allowed on a graph, not on a fusion.kernel body");
	if (top && g->num_fwd_outputs != -1 && (g->num_fwd_outputs < 0 || (uint64_t)g->num_fwd_outputs > g->nresults))
		VERR(vf, g->loc, "num_fwd_outputs=%lld is out of range: @%s returns %u values",
		     (long long)g->num_fwd_outputs, g->name ? g->name : "", g->nresults);

	/* Parameters: defined on entry, each listed once. */
	for (uint32_t i = 0; i < g->nparams; i++) {
		fj_vid p = g->params[i];
		if (p >= g->nvalues || g->values[p].kind != FJ_VK_PARAM) {
			VERR(vf, g->loc, "parameter %u of @%s is not a parameter value", i, g->name ? g->name : "");
			continue;
		}
		if (state[p] & 2)
			VERR(vf, g->values[p].loc, "parameter %%%s is listed twice", vname(&g->values[p]));
		state[p] |= 2;
	}
	if (kernel)
		check_kernel_signature(vf, g, kernel, outer, bad);

	for (uint32_t ni = 0; ni < g->nnodes; ni++) {
		fj_node *n = &g->nodes[ni];
		if ((unsigned)n->op >= FJ_OP_COUNT) {
			VERR(vf, n->loc, "node %u has an invalid op %d", ni, (int)n->op);
			continue;
		}
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		bool ok = true;
		if ((n->nopnds && !n->opnds) || (n->nres && !n->res) || (oi->nattrs && !n->attrs)) {
			VERR(vf, n->loc, "%s has missing arrays", oi->name);
			continue;
		}
		for (uint32_t i = 0; i < n->nopnds; i++) {
			fj_vid v = n->opnds[i];
			if (v == FJ_NOVAL)
				continue;
			if (v >= g->nvalues) {
				VERR(vf, n->loc, "%s: operand %u refers to no value (id %u)", oi->name, i, v);
				ok = false;
			} else if (bad[v] & 1) {
				ok = false;
			} else if (g->values[v].kind != FJ_VK_LITERAL && !(state[v] & 2)) {
				VERR(vf, n->loc, "%s: %%%s is used before its definition%s", oi->name, vname(&g->values[v]),
				     g->values[v].kind == FJ_VK_RESULT && g->values[v].def > ni ? " (nodes out of order)" : "");
				ok = false;
			}
		}
		for (uint32_t i = 0; i < n->nres; i++) {
			fj_vid v = n->res[i];
			if (v >= g->nvalues || g->values[v].kind != FJ_VK_RESULT || g->values[v].def != ni ||
			    g->values[v].res != i) {
				VERR(vf, n->loc, "%s: result %u is not a value this node defines", oi->name, i);
				ok = false;
				continue;
			}
			if (bad[v] & 1)
				ok = false;
		}
		/* Annotations of the node. */
		if (n->recomputable > FJ_TRI_TRUE)
			VERR(vf, n->loc, "%s: invalid recomputable annotation", oi->name);
		if (n->op != FJ_OP_FUSION_KERNEL && (n->schedule || n->kernel))
			VERR(vf, n->loc, "%s: the %s annotation is only allowed on fusion.kernel", oi->name,
			     n->schedule ? "schedule" : "kernel");
		if (n->op == FJ_OP_FUSION_KERNEL && !n->body) {
			VERR(vf, n->loc, "fusion.kernel has no body");
			ok = false;
		}
		if (n->op != FJ_OP_FUSION_KERNEL && n->body)
			VERR(vf, n->loc, "%s cannot have a body", oi->name);

		if (ok && fj_check_node(g, ni) != FJ_OK) {
			vf->nerr++;
			ok = false;
		}
		if (n->op == FJ_OP_FUSION_KERNEL && n->body) {
			size_t before = vf->nerr;
			if ((st = check_body(vf, g, n, depth)) != FJ_OK)
				goto done;
			if (vf->nerr != before)
				ok = false;
		}
		if (ok) {
			fj_type stack[4], *types = stack;
			if (n->nres > FJ_ARRAY_LEN(stack)) {
				types = fj_alloc(ctx, n->nres * sizeof *types);
				if (!types) {
					st = FJ_ERR_NOMEM;
					goto done;
				}
			}
			st = fj_infer_node(g, ni, types);
			if (st == FJ_ERR_NOMEM || m->oom) {
				st = FJ_ERR_NOMEM;
			} else if (st != FJ_OK) {
				vf->nerr++;
				st = FJ_OK;
			} else {
				for (uint32_t i = 0; i < n->nres; i++) {
					const fj_value *rv = &g->values[n->res[i]];
					if (type_problem(m, &types[i]) || fj_type_equal(&types[i], &rv->type))
						continue;
					char ta[256], tb[256];
					fj_type_format(m, &rv->type, ta, sizeof ta);
					fj_type_format(m, &types[i], tb, sizeof tb);
					VERR(vf, rv->loc, "%s: %%%s has type %s but its inferred type is %s", oi->name,
					     vname(rv), ta, tb);
				}
			}
			if (types != stack)
				fj_free(ctx, types, n->nres * sizeof *types);
			if (st != FJ_OK)
				goto done;
		}
		for (uint32_t i = 0; i < n->nres; i++) {
			fj_vid v = n->res[i];
			if (v < g->nvalues && g->values[v].kind == FJ_VK_RESULT && g->values[v].def == ni)
				state[v] |= 2;
		}
	}

	/* return / yield */
	for (uint32_t i = 0; i < g->nresults; i++) {
		fj_vid v = g->results[i];
		const char *what = top ? "return" : "yield";
		if (v == FJ_NOVAL)
			VERR(vf, g->loc, "%s: `none` is never returned (operand %u)", what, i);
		else if (v >= g->nvalues)
			VERR(vf, g->loc, "%s: operand %u refers to no value (id %u)", what, i, v);
		else if (g->values[v].kind != FJ_VK_LITERAL && !(state[v] & 2) && !(bad[v] & 1))
			VERR(vf, g->values[v].loc, "%s: %%%s is not defined", what, vname(&g->values[v]));
	}
done:
	fj_free(ctx, state, g->nvalues ? g->nvalues : 1);
	return st;
}

/* ---- entry points ---- */

static fj_status finish(verifier *vf, fj_status st)
{
	if (st == FJ_OK && vf->m->oom)
		st = FJ_ERR_NOMEM;
	if (st != FJ_OK)
		return st;
	return vf->nerr ? FJ_ERR_INVALID : FJ_OK;
}

fj_status fj_verify_graph(fj_graph *g)
{
	verifier vf = {fj_graph_ctx(g), g->module, 0, false};
	if (!g->parent)
		return finish(&vf, verify_graph(&vf, g, NULL, NULL, 0));
	/* A body: find its kernel node in the parent. */
	fj_graph *p = g->parent;
	for (uint32_t i = 0; i < p->nnodes; i++)
		if (p->nodes[i].body == g && p->nodes[i].op == FJ_OP_FUSION_KERNEL)
			return finish(&vf, verify_graph(&vf, g, &p->nodes[i], p, 1));
	VERR(&vf, g->loc, "fusion.kernel body has no kernel node in its parent graph");
	return finish(&vf, FJ_OK);
}

fj_status fj_verify_module(fj_module *m)
{
	verifier vf = {m->ctx, m, 0, false};
	fj_status st = FJ_OK;
	fj_loc mloc = {m->file, 0, 0};
	if (m->ngraphs && !m->graphs) {
		VERR(&vf, mloc, "module has no graph array");
		return finish(&vf, FJ_OK);
	}
	for (uint32_t i = 0; i < m->ngraphs && st == FJ_OK; i++) {
		fj_graph *g = m->graphs[i];
		if (!g) {
			VERR(&vf, mloc, "graph %u of the module is missing", i);
			continue;
		}
		if (g->module != m || g->parent) {
			VERR(&vf, g->loc, "graph @%s does not belong to its module", g->name ? g->name : "");
			continue;
		}
		for (uint32_t j = 0; j < i; j++)
			if (m->graphs[j] && m->graphs[j]->name && g->name && strcmp(m->graphs[j]->name, g->name) == 0)
				VERR(&vf, g->loc, "graph @%s is defined more than once", g->name);
		st = verify_graph(&vf, g, NULL, NULL, 0);
	}
	return finish(&vf, st);
}
