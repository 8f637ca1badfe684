/* autodiff.c -- the `autodiff` pass: reverse-mode differentiation of prims
 * graphs into joint graphs (IR.md §4).
 *
 * For each graph @f (not itself a joint, forward or backward graph) it adds,
 * right after @f, `@f.joint(primals..., tangents...) -> (outputs...,
 * grads...)` with {num_fwd_outputs=K}:
 *   - primals: @f's parameters, unchanged (names, types, nograd);
 *   - tangents: one per floating-point output k, `%tangent_<k>` (k the output
 *     position), of the output's type;
 *   - the body: every node of @f, copied as it is (names kept), then the
 *     backward nodes; the joint recomputes nothing by itself;
 *   - results: @f's K outputs, then one gradient per primal of floating dtype
 *     not marked {nograd}, in parameter order (zeros when no output depends
 *     on it), named `%grad_<param>` when the pass created the value.
 *
 * Algorithm: a forward sweep marks the values that depend on a primal that
 * wants a gradient (floating dtype only: integer and bool values carry none;
 * the results of a node marked {nograd} are constants: no gradient flows
 * through them, and the node needs no VJP rule);
 * a backward sweep marks the values some floating output depends on. A node
 * with both an operand of the first kind and a floating result of the second
 * lies on a gradient path and must have a VJP rule (vjp.c): an aten op there
 * is an error ("autodiff works on prims: run decompose first"), and so is an
 * op without a rule, named at its file:line:col. Then one reverse sweep over
 * the nodes applies the rules, summing the gradients of fanned-out values
 * with prims.add; decompose's softmax and log_softmax are differentiated as a
 * whole (fj_vjp_idiom), so their backward needs only their result, and so
 * are its sigmoids, whose rules one by one give NaN where exp overflows.
 * O(nodes + values) plus the rules' output.
 *
 * References: JAX's backward_pass (ad.py), PyTorch's derivatives.yaml, and
 * AOTAutograd's joint graph (functorch/_src/aot_autograd.py). */
#include <stdio.h>
#include <string.h>

#include "passes/autodiff.h"
#include "passes/pass.h"
#include "passes/rebuild.h"

static bool is_float(const fj_graph *g, fj_vid v)
{
	return v != FJ_NOVAL && g->values[v].kind != FJ_VK_LITERAL && fj_dtype_is_float(g->values[v].type.dtype);
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && strcmp(s + n - k, suf) == 0;
}

typedef struct ad_state {
	fj_module *m;
	fj_context *ctx;
	fj_graph *f, *g;
	fj_rebuild rb;
	bool *req, *reach;
	fj_vid *grad;   /* f's value -> its gradient in g */
	uint32_t *uses; /* f's value -> its uses (operands and graph results) */
	fj_builder b;
} ad_state;

static void accumulate(ad_state *s, fj_vid v, fj_vid d)
{
	if (s->grad[v] == FJ_NOVAL)
		s->grad[v] = d;
	else
		s->grad[v] = fj_b_op1(&s->b, FJ_OP_PRIMS_ADD, (fj_vid[]){s->grad[v], d}, 2, NULL, 0);
}

/* Marks req (depends on a primal wanting a gradient) and reach (a floating
 * output depends on it), then checks the ops on gradient paths. */
static fj_status analyse(ad_state *s, bool *on_path)
{
	fj_graph *f = s->f;
	for (uint32_t i = 0; i < f->nparams; i++) {
		fj_vid v = f->params[i];
		s->req[v] = is_float(f, v) && !f->values[v].nograd;
	}
	for (uint32_t ni = 0; ni < f->nnodes; ni++) {
		const fj_node *n = &f->nodes[ni];
		bool any = false;
		for (uint32_t i = 0; i < n->nopnds; i++)
			any |= n->opnds[i] != FJ_NOVAL && s->req[n->opnds[i]];
		any &= !n->nograd; /* stop-gradient: its results are constants */
		for (uint32_t i = 0; i < n->nres && any; i++)
			s->req[n->res[i]] = is_float(f, n->res[i]);
	}
	for (uint32_t i = 0; i < f->nresults; i++)
		if (is_float(f, f->results[i]))
			s->reach[f->results[i]] = true;
	for (uint32_t ni = f->nnodes; ni-- > 0;) {
		const fj_node *n = &f->nodes[ni];
		bool any = false, onp = false;
		for (uint32_t i = 0; i < n->nres; i++) {
			any |= s->reach[n->res[i]];
			onp |= s->reach[n->res[i]] && s->req[n->res[i]];
		}
		if (!any)
			continue;
		for (uint32_t i = 0; i < n->nopnds; i++)
			if (is_float(f, n->opnds[i]))
				s->reach[n->opnds[i]] = true;
		on_path[ni] = onp;
	}
	for (uint32_t ni = 0; ni < f->nnodes; ni++) {
		if (!on_path[ni])
			continue;
		const fj_node *n = &f->nodes[ni];
		const fj_opinfo *oi = fj_op_info(s->ctx, n->op);
		if (oi->flags & FJ_OPF_ATEN)
			return fj_error(s->ctx, n->loc, "autodiff works on prims: run decompose first (found %s)", oi->name);
		fj_vjp_kind k = fj_vjp_rules[n->op].kind;
		if (k == FJ_VJP_MISSING || k == FJ_VJP_NONE)
			return fj_error(s->ctx, n->loc,
			                "autodiff: %s is not differentiable, but it lies on a gradient path of @%s", oi->name,
			                f->name);
	}
	return FJ_OK;
}

static fj_status differentiate(ad_state *s, const bool *on_path)
{
	fj_graph *f = s->f, *g = s->g;
	fj_status st = FJ_OK;
	fj_builder_init(&s->b, g, f->loc);
	/* seeds: the tangents */
	uint32_t t = f->nparams;
	for (uint32_t k = 0; k < f->nresults; k++) {
		fj_vid v = f->results[k];
		if (v == FJ_NOVAL || !fj_dtype_is_float(f->values[v].type.dtype))
			continue;
		fj_vid tv = g->params[t++];
		if (f->values[v].kind != FJ_VK_LITERAL && s->req[v])
			accumulate(s, v, tv);
	}
	uint32_t cap = 16;
	fj_vid *buf = fj_alloc(s->ctx, 4 * cap * sizeof *buf);
	bool *want = fj_alloc(s->ctx, cap);
	if (!buf || !want) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	for (uint32_t ni = f->nnodes; ni-- > 0 && st == FJ_OK;) {
		const fj_node *n = &f->nodes[ni];
		if (!on_path[ni] || fj_vjp_rules[n->op].kind != FJ_VJP_RULE)
			continue;
		bool any = false;
		for (uint32_t i = 0; i < n->nres; i++)
			any |= s->grad[n->res[i]] != FJ_NOVAL;
		if (!any)
			continue;
		uint32_t need = n->nopnds > n->nres ? n->nopnds : n->nres;
		if (need > cap) {
			fj_free(s->ctx, buf, 4 * cap * sizeof *buf);
			fj_free(s->ctx, want, cap);
			cap = need;
			buf = fj_alloc(s->ctx, 4 * cap * sizeof *buf);
			want = fj_alloc(s->ctx, cap);
			if (!buf || !want) {
				st = FJ_ERR_NOMEM;
				break;
			}
		}
		fj_vid *in = buf, *out = buf + cap, *gout = buf + 2 * cap, *gin = buf + 3 * cap;
		for (uint32_t i = 0; i < n->nopnds; i++) {
			fj_vid v = n->opnds[i];
			in[i] = fj_pass_rebuild_value(&s->rb, v);
			want[i] = v != FJ_NOVAL && f->values[v].kind != FJ_VK_LITERAL && s->req[v];
			gin[i] = FJ_NOVAL;
		}
		for (uint32_t i = 0; i < n->nres; i++) {
			out[i] = s->rb.map[n->res[i]];
			gout[i] = s->grad[n->res[i]];
		}
		fj_b_set_loc(&s->b, n->loc);
		fj_ad a = {.b = s->b, .g = g, .m = s->m, .ctx = s->ctx, .f = f, .n = n,
		           .in = in, .out = out, .gout = gout, .want = want, .gin = gin, .map = s->rb.map};
		fj_vid target = FJ_NOVAL, gt = fj_vjp_idiom(&a, s->uses, &target);
		if (gt != FJ_NOVAL || fj_b_status(&a.b)) {
			/* an idiom: the gradient goes to the exponent at once */
			s->b = a.b;
			st = fj_b_status(&s->b);
			if (st == FJ_OK && s->req[target]) {
				accumulate(s, target, gt);
				st = fj_b_status(&s->b);
			}
		} else {
			st = fj_vjp_rules[n->op].fn(&a);
			s->b = a.b;
			if (st == FJ_OK)
				st = fj_b_status(&s->b);
		}
		for (uint32_t i = 0; i < n->nopnds && st == FJ_OK; i++) {
			if (!want[i] || gin[i] == FJ_NOVAL)
				continue;
			if (!fj_type_equal(&g->values[gin[i]].type, &g->values[in[i]].type)) {
				st = fj_error(s->ctx, n->loc, "autodiff: internal error: the VJP of %s gives operand %u a "
				              "gradient of the wrong type", fj_op_name(n->op), i);
				break;
			}
			accumulate(s, n->opnds[i], gin[i]);
			st = fj_b_status(&s->b);
		}
	}
done:
	if (buf)
		fj_free(s->ctx, buf, 4 * cap * sizeof *buf);
	if (want)
		fj_free(s->ctx, want, cap);
	return st;
}

static fj_status autodiff_graph(fj_module *m, uint32_t gi)
{
	fj_context *ctx = m->ctx;
	fj_graph *f = m->graphs[gi];
	char name[512];
	snprintf(name, sizeof name, "%s.joint", f->name);
	ad_state s = {.m = m, .ctx = ctx, .f = f};
	uint32_t nv = f->nvalues ? f->nvalues : 1, nn = f->nnodes ? f->nnodes : 1;
	s.req = fj_alloc(ctx, nv);
	s.reach = fj_alloc(ctx, nv);
	s.grad = fj_alloc(ctx, nv * sizeof *s.grad);
	s.uses = fj_alloc(ctx, nv * sizeof *s.uses);
	bool *on_path = fj_alloc(ctx, nn);
	s.rb.map = fj_alloc(ctx, nv * sizeof *s.rb.map);
	s.g = fj_graph_create(m, name);
	fj_status st = FJ_OK;
	if (!s.req || !s.reach || !s.grad || !s.uses || !on_path || !s.rb.map || !s.g) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	memset(s.req, 0, nv);
	memset(s.reach, 0, nv);
	memset(on_path, 0, nn);
	memset(s.grad, 0xff, nv * sizeof *s.grad);
	memset(s.uses, 0, nv * sizeof *s.uses);
	for (uint32_t ni = 0; ni < f->nnodes; ni++)
		for (uint32_t i = 0; i < f->nodes[ni].nopnds; i++)
			if (f->nodes[ni].opnds[i] != FJ_NOVAL)
				s.uses[f->nodes[ni].opnds[i]]++;
	for (uint32_t i = 0; i < f->nresults; i++)
		if (f->results[i] != FJ_NOVAL)
			s.uses[f->results[i]]++;
	memset(s.rb.map, 0xff, nv * sizeof *s.rb.map);
	s.rb.old = f;
	s.rb.g = s.g;
	s.rb.nmap = f->nvalues;
	if ((st = analyse(&s, on_path)) != FJ_OK)
		goto done;

	fj_graph *g = s.g;
	g->loc = f->loc;
	for (uint32_t i = 0; i < f->nparams; i++) {
		const fj_value *pv = &f->values[f->params[i]];
		fj_vid v = fj_graph_add_param(g, pv->name, pv->type, pv->loc);
		if (v == FJ_NOVAL) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
		g->values[v].nograd = pv->nograd;
		s.rb.map[f->params[i]] = v;
	}
	for (uint32_t k = 0; k < f->nresults; k++) {
		fj_vid v = f->results[k];
		if (v == FJ_NOVAL || !fj_dtype_is_float(f->values[v].type.dtype))
			continue;
		char tn[32];
		snprintf(tn, sizeof tn, "tangent_%u", k);
		const char *tname = fj_graph_fresh_name(g, tn);
		fj_type tt = f->values[v].type;
		tt.weak = false;
		if (!tname || fj_graph_add_param(g, tname, tt, f->values[v].loc) == FJ_NOVAL) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
	}
	for (uint32_t ni = 0; ni < f->nnodes; ni++) {
		const fj_node *n = &f->nodes[ni];
		fj_vid stack[16], *ops = n->nopnds <= 16 ? stack : fj_alloc(ctx, n->nopnds * sizeof *ops);
		if (!ops) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
		for (uint32_t i = 0; i < n->nopnds; i++)
			ops[i] = fj_pass_rebuild_value(&s.rb, n->opnds[i]);
		uint32_t k = fj_pass_rebuild_copy(&s.rb, n, ops);
		if (ops != stack)
			fj_free(ctx, ops, n->nopnds * sizeof *ops);
		if (k == FJ_NONODE) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
		g->nodes[k].recomputable = FJ_TRI_UNSET;
	}
	uint32_t first_bw = g->nvalues;
	if ((st = differentiate(&s, on_path)) != FJ_OK)
		goto done;

	/* results: the outputs, then one gradient per primal that wants one */
	uint32_t nres = f->nresults;
	for (uint32_t i = 0; i < f->nparams; i++)
		nres += s.req[f->params[i]];
	fj_vid *res = fj_alloc(ctx, (nres ? nres : 1) * sizeof *res);
	if (!res) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	uint32_t r = 0;
	for (uint32_t k = 0; k < f->nresults; k++)
		res[r++] = fj_pass_rebuild_value(&s.rb, f->results[k]);
	for (uint32_t i = 0; i < f->nparams && st == FJ_OK; i++) {
		fj_vid p = f->params[i];
		if (!s.req[p])
			continue;
		fj_vid d = s.grad[p];
		const fj_value *pv = &f->values[p];
		fj_b_set_loc(&s.b, pv->loc);
		if (d == FJ_NOVAL) {
			fj_named_attr at[3] = {{"shape", fj_attr_shape(g, pv->type.dims, pv->type.rank)},
			                       {"value", fj_attr_float(0.0)},
			                       {"dtype", fj_attr_dtype(pv->type.dtype)}};
			d = fj_b_op1(&s.b, FJ_OP_PRIMS_FULL, NULL, 0, at, 3);
		}
		st = fj_b_status(&s.b);
		if (st == FJ_OK && d >= first_bw && g->values[d].kind == FJ_VK_RESULT &&
		    strncmp(g->values[d].name, "grad_", 5) != 0) {
			char gn[256];
			snprintf(gn, sizeof gn, "grad_%s", pv->name);
			const char *nm = fj_graph_fresh_name(g, gn);
			st = nm ? fj_graph_rename_value(g, d, nm) : FJ_ERR_NOMEM;
		}
		res[r++] = d;
	}
	if (st == FJ_OK)
		st = fj_graph_set_results(g, res, nres);
	fj_free(ctx, res, (nres ? nres : 1) * sizeof *res);
	if (st == FJ_OK) {
		g->num_fwd_outputs = f->nresults;
		st = fj_module_insert_graph(m, gi + 1, g);
		if (st == FJ_OK)
			s.g = NULL;
	}
done:
	if (st == FJ_ERR_NOMEM)
		m->oom = true;
	fj_graph_destroy(s.g);
	if (s.req)
		fj_free(ctx, s.req, nv);
	if (s.reach)
		fj_free(ctx, s.reach, nv);
	if (s.grad)
		fj_free(ctx, s.grad, nv * sizeof *s.grad);
	if (s.uses)
		fj_free(ctx, s.uses, nv * sizeof *s.uses);
	if (on_path)
		fj_free(ctx, on_path, nn);
	if (s.rb.map)
		fj_free(ctx, s.rb.map, nv * sizeof *s.rb.map);
	return st;
}

fj_status fj_pass_autodiff(fj_pass_run *r)
{
	fj_module *m = r->m;
	uint32_t n0 = m->ngraphs;
	fj_graph **todo = fj_alloc(m->ctx, (n0 ? n0 : 1) * sizeof *todo);
	if (!todo)
		return FJ_ERR_NOMEM;
	uint32_t nt = 0;
	for (uint32_t i = 0; i < n0; i++) {
		fj_graph *f = m->graphs[i];
		char name[512];
		snprintf(name, sizeof name, "%s.joint", f->name);
		if (f->num_fwd_outputs >= 0 || has_suffix(f->name, ".bw") || fj_module_find_graph(m, name))
			continue;
		todo[nt++] = f;
	}
	fj_status st = FJ_OK;
	for (uint32_t t = 0; t < nt && st == FJ_OK; t++) {
		uint32_t gi = 0;
		while (m->graphs[gi] != todo[t])
			gi++;
		st = autodiff_graph(m, gi);
	}
	fj_free(m->ctx, todo, (n0 ? n0 : 1) * sizeof *todo);
	return st;
}
