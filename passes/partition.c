/* partition.c -- the `partition` pass: splits each joint graph
 * @f.joint(primals..., tangents...) -> (outputs..., grads...) into
 *   @f.fw(primals...) -> (outputs..., saved...)   {num_fwd_outputs=K}
 *   @f.bw(saved..., tangents...) -> (grads...)
 * in the joint's place (IR.md §4); the backward recomputes the forward values
 * it needs that were not saved. `--stats` prints, per joint graph,
 * `partition @f.joint: saved: N values, B bytes` (every value the backward
 * receives from the forward, primals included; B in the symbols when sizes
 * are symbolic).
 *
 * {mode=default} saves every forward value the backward uses (the values
 * needed for the forward outputs, primals included, that a backward node or
 * a gradient uses directly): functorch's default_partition.
 *
 * {mode=mincut} is functorch's min_cut_rematerialization_partition (late
 * 2022) on prims, with a better cost model:
 *   - classification: values depending on a tangent are backward values
 *     (they go to the sink); values the forward outputs need are forward
 *     values; the rest ("unclaimed") may go either way;
 *   - network: each other value v is split into v_in -> v_out with capacity
 *     weight(v); data dependences are infinite edges u_out -> v_in;
 *     source -> primal_in and source -> v_in for forward values the backward
 *     may not recompute (recompute's flags; the pass runs recompute's policy
 *     itself when nothing is marked); backward values' _in -> sink, and a
 *     gradient that is not a backward value: its _out -> sink;
 *   - weight(v) = bytes(v) * 1.1^clamp(dist_from_bw, 1, 100), doubled when v
 *     will be fused away (all its users and itself are fusible: functorch's
 *     is_materialized), with sizes symbol := 8192;
 *   - better than functorch: the recomputable set comes from the op table's
 *     flags, so prims graphs recompute (functorch's list knows only aten
 *     ops); a broadcast_in_dim is charged at its source's size, and a saved
 *     broadcast is replaced by its source (the backward re-broadcasts), so
 *     per-row statistics are saved instead of their expansions; a primal's
 *     distance counts from its users like any value's (so the targets of a
 *     cross-entropy are saved rather than the masks and indices made from
 *     them, and a log_softmax the backward uses directly rather than the
 *     logits plus their row max). With the softmax idioms differentiated as a
 *     whole (autodiff) and the stabilising max {nograd} (decompose), the
 *     bench/partition table saves no more than functorch on any function.
 *   - the saved set is the cut (v_in on the source side, v_out not), minus
 *     the values the extracted backward does not use.
 * {attention=true} then rewrites the pair so that an attention whose softmax
 * weights the forward saves saves their row logsumexp and O instead, the
 * backward recomputing the weights (partition_attention.c).
 * Graph extraction: the forward computes the ancestors of its outputs and of
 * the saved values; the backward the ancestors of the gradients, stopping at
 * saved values and tangents. Both copy nodes in the joint's order, keeping
 * names (a recomputed multi-result node whose other result is saved gets a
 * fresh name for that result).
 *
 * Complexity: O(V + E) for the analyses and extraction, plus Dinic's max
 * flow (maxflow.c) on 2V + 2 nodes: a 10,000-node joint partitions in a few
 * milliseconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/maxflow.h"
#include "passes/partition.h"
#include "passes/pass.h"
#include "passes/rebuild.h"
#include "passes/recompute.h"

enum {
	V_LIVE = 1 << 0,    /* an ancestor of some result */
	V_BW = 1 << 1,      /* depends on a tangent */
	V_FW = 1 << 2,      /* needed for the forward outputs */
	V_PRIMAL = 1 << 3,
	V_TANGENT = 1 << 4,
	V_SAVED = 1 << 5,
	V_NEED = 1 << 6,    /* used by the backward graph */
	V_NEEDFW = 1 << 7,  /* computed by the forward graph */
	V_GRAD = 1 << 8     /* returned as a gradient */
};

typedef struct part {
	fj_module *m;
	fj_context *ctx;
	fj_graph *j;
	uint32_t K, np, nt;
	uint16_t *fl;          /* per value */
	uint32_t *ustart, *users; /* value -> user nodes (CSR) */
	size_t ustart_size, users_size; /* bytes allocated */
	uint32_t *dist;        /* per value: functorch's dist_from_bw */
	bool mincut;
} part;

static bool is_lit(const fj_graph *g, fj_vid v) { return v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL; }

/* ---- analyses ---- */

static fj_status build_users(part *p)
{
	fj_graph *j = p->j;
	uint32_t nv = j->nvalues, total = 0;
	p->ustart_size = (nv + 1) * sizeof *p->ustart;
	p->ustart = fj_alloc(p->ctx, p->ustart_size);
	if (!p->ustart)
		return FJ_ERR_NOMEM;
	memset(p->ustart, 0, (nv + 1) * sizeof *p->ustart);
	for (uint32_t ni = 0; ni < j->nnodes; ni++)
		for (uint32_t i = 0; i < j->nodes[ni].nopnds; i++)
			if (!is_lit(j, j->nodes[ni].opnds[i])) {
				p->ustart[j->nodes[ni].opnds[i] + 1]++;
				total++;
			}
	for (uint32_t v = 0; v < nv; v++)
		p->ustart[v + 1] += p->ustart[v];
	p->users_size = (total ? total : 1) * sizeof *p->users;
	p->users = fj_alloc(p->ctx, p->users_size);
	uint32_t *fill = fj_alloc(p->ctx, (nv ? nv : 1) * sizeof *fill);
	if (!p->users || !fill) {
		if (fill)
			fj_free(p->ctx, fill, (nv ? nv : 1) * sizeof *fill);
		return FJ_ERR_NOMEM;
	}
	memcpy(fill, p->ustart, nv * sizeof *fill);
	for (uint32_t ni = 0; ni < j->nnodes; ni++)
		for (uint32_t i = 0; i < j->nodes[ni].nopnds; i++) {
			fj_vid v = j->nodes[ni].opnds[i];
			if (!is_lit(j, v) && (fill[v] == p->ustart[v] || p->users[fill[v] - 1] != ni))
				p->users[fill[v]++] = ni;
		}
	/* duplicates (x used twice by one node) leave holes: mark them */
	for (uint32_t v = 0; v < nv; v++)
		for (uint32_t k = fill[v]; k < p->ustart[v + 1]; k++)
			p->users[k] = FJ_NONODE;
	fj_free(p->ctx, fill, (nv ? nv : 1) * sizeof *fill);
	return FJ_OK;
}

static void classify(part *p)
{
	fj_graph *j = p->j;
	for (uint32_t i = 0; i < j->nparams; i++)
		p->fl[j->params[i]] |= i < p->np ? V_PRIMAL : (V_TANGENT | V_BW);
	for (uint32_t ni = 0; ni < j->nnodes; ni++) {
		const fj_node *n = &j->nodes[ni];
		bool bw = false;
		for (uint32_t i = 0; i < n->nopnds; i++)
			bw |= !is_lit(j, n->opnds[i]) && (p->fl[n->opnds[i]] & V_BW);
		for (uint32_t i = 0; i < n->nres && bw; i++)
			p->fl[n->res[i]] |= V_BW;
	}
	for (uint32_t r = 0; r < j->nresults; r++) {
		fj_vid v = j->results[r];
		if (is_lit(j, v))
			continue;
		p->fl[v] |= V_LIVE | (r < p->K ? V_FW : V_GRAD);
	}
	for (uint32_t ni = j->nnodes; ni-- > 0;) {
		const fj_node *n = &j->nodes[ni];
		uint16_t any = 0;
		for (uint32_t i = 0; i < n->nres; i++)
			any |= p->fl[n->res[i]];
		any &= V_LIVE | V_FW;
		for (uint32_t i = 0; i < n->nres; i++)
			p->fl[n->res[i]] |= any;
		for (uint32_t i = 0; i < n->nopnds; i++)
			if (!is_lit(j, n->opnds[i]))
				p->fl[n->opnds[i]] |= any;
	}
}

/* functorch's dist_from_bw: 0 off the forward, else 1 + the least over users
 * (the forward outputs' user, the output node, counts 0). */
static void distances(part *p)
{
	fj_graph *j = p->j;
	uint32_t *nd = p->dist; /* per value */
	for (fj_vid v = 0; v < j->nvalues; v++)
		nd[v] = (p->fl[v] & V_FW) ? 1000000000u : 0;
	for (uint32_t r = 0; r < p->K && r < j->nresults; r++)
		if (!is_lit(j, j->results[r]))
			nd[j->results[r]] = 1;
	for (uint32_t s = 0; s <= j->nnodes; s++) {
		/* nodes last to first, then (s == nnodes) the parameters, after
		 * every node: users before the values they use */
		uint32_t ni = j->nnodes - 1 - s;
		uint32_t nres = s < j->nnodes ? j->nodes[ni].nres : j->nparams;
		for (uint32_t i = 0; i < nres; i++) {
			fj_vid v = s < j->nnodes ? j->nodes[ni].res[i] : j->params[i];
			if (!(p->fl[v] & V_FW))
				continue;
			for (uint32_t k = p->ustart[v]; k < p->ustart[v + 1]; k++) {
				if (p->users[k] == FJ_NONODE)
					continue;
				const fj_node *u = &j->nodes[p->users[k]];
				uint32_t du = UINT32_MAX;
				for (uint32_t q = 0; q < u->nres; q++)
					du = nd[u->res[q]] < du ? nd[u->res[q]] : du;
				if (du + 1 < nd[v])
					nd[v] = du + 1;
			}
		}
	}
}

static bool fusible(const fj_graph *g, const fj_node *n)
{
	const fj_opinfo *oi = fj_op_info(fj_graph_ctx(g), n->op);
	return !(oi->flags & (FJ_OPF_OPAQUE | FJ_OPF_FUSION)) && n->op != FJ_OP_FUSION_KERNEL &&
	       ((oi->flags & (FJ_OPF_RECOMPUTABLE | FJ_OPF_RANDOM)));
}

static double weight(part *p, fj_vid v)
{
	fj_graph *j = p->j;
	const fj_value *val = &j->values[v];
	double bytes = fj_type_bytes_est(p->m, &val->type);
	bool materialized = val->kind == FJ_VK_PARAM || (p->fl[v] & V_GRAD);
	if (val->kind == FJ_VK_RESULT) {
		const fj_node *n = &j->nodes[val->def];
		if (n->op == FJ_OP_PRIMS_BROADCAST_IN_DIM && !is_lit(j, n->opnds[0]))
			bytes = fj_type_bytes_est(p->m, &j->values[n->opnds[0]].type);
		if (!fusible(j, n))
			materialized = true;
		for (uint32_t r = 0; r < p->K && r < j->nresults; r++)
			materialized |= j->results[r] == v;
		for (uint32_t k = p->ustart[v]; k < p->ustart[v + 1] && !materialized; k++)
			if (p->users[k] != FJ_NONODE && !fusible(j, &j->nodes[p->users[k]]))
				materialized = true;
	}
	uint32_t d = p->dist[v];
	d = d < 1 ? 1 : d > 100 ? 100 : d;
	double w = bytes * pow(1.1, (double)d);
	return materialized ? w : 2 * w;
}

static bool banned(const part *p, fj_vid v)
{
	const fj_value *val = &p->j->values[v];
	return val->kind == FJ_VK_RESULT && p->j->nodes[val->def].recomputable == FJ_TRI_FALSE;
}

/* ---- the cut ---- */

static fj_status mincut(part *p)
{
	fj_graph *j = p->j;
	uint32_t nv = j->nvalues;
	double *w = fj_alloc(p->ctx, (nv ? nv : 1) * sizeof *w);
	if (!w)
		return FJ_ERR_NOMEM;
	double total = 0;
	for (fj_vid v = 0; v < nv; v++) {
		w[v] = 0;
		if ((p->fl[v] & V_LIVE) && !(p->fl[v] & V_BW) && j->values[v].kind != FJ_VK_LITERAL) {
			w[v] = weight(p, v);
			total += w[v];
		}
	}
	/* integer capacities whose sum stays far below FJ_FLOW_INF */
	double scale = total > 1e18 ? 1e18 / total : 1.0;
	fj_maxflow *f = fj_maxflow_create(p->ctx, 2 * nv + 2);
	fj_status st = f ? FJ_OK : FJ_ERR_NOMEM;
	const uint32_t S = 0, T = 1;
#define IN(v) (2 * (v) + 2)
#define OUT(v) (2 * (v) + 3)
	for (fj_vid v = 0; v < nv && st == FJ_OK; v++) {
		uint16_t fl = p->fl[v];
		if (!(fl & V_LIVE) || j->values[v].kind == FJ_VK_LITERAL)
			continue;
		if (fl & V_BW) {
			st = fj_maxflow_add_edge(f, IN(v), T, FJ_FLOW_INF);
			continue;
		}
		if ((fl & V_PRIMAL) || ((fl & V_FW) && banned(p, v)))
			st = fj_maxflow_add_edge(f, S, IN(v), FJ_FLOW_INF);
		if (st == FJ_OK) {
			double c = w[v] * scale;
			st = fj_maxflow_add_edge(f, IN(v), OUT(v), w[v] > 0 && c < 1 ? 1 : (int64_t)llround(c));
		}
		if (st == FJ_OK && (fl & V_GRAD))
			st = fj_maxflow_add_edge(f, OUT(v), T, FJ_FLOW_INF);
		for (uint32_t k = p->ustart[v]; k < p->ustart[v + 1] && st == FJ_OK; k++) {
			if (p->users[k] == FJ_NONODE)
				continue;
			const fj_node *u = &j->nodes[p->users[k]];
			for (uint32_t q = 0; q < u->nres && st == FJ_OK; q++)
				if (p->fl[u->res[q]] & V_LIVE)
					st = fj_maxflow_add_edge(f, OUT(v), IN(u->res[q]), FJ_FLOW_INF);
		}
	}
	int64_t flow = 0;
	if (st == FJ_OK)
		st = fj_maxflow_run(f, S, T, &flow);
	if (st == FJ_OK && flow >= FJ_FLOW_INF)
		st = fj_error(p->ctx, j->loc, "partition: internal error: no finite cut of @%s", j->name);
	for (fj_vid v = 0; v < nv && st == FJ_OK; v++)
		if ((p->fl[v] & V_LIVE) && !(p->fl[v] & V_BW) && j->values[v].kind != FJ_VK_LITERAL &&
		    fj_maxflow_source_side(f, IN(v)) && !fj_maxflow_source_side(f, OUT(v)))
			p->fl[v] |= V_SAVED;
#undef IN
#undef OUT
	fj_maxflow_destroy(f);
	fj_free(p->ctx, w, (nv ? nv : 1) * sizeof *w);
	if (st != FJ_OK)
		return st;
	/* a saved broadcast: save its source instead (the backward re-broadcasts) */
	for (uint32_t ni = j->nnodes; ni-- > 0;) {
		const fj_node *n = &j->nodes[ni];
		if (n->op == FJ_OP_PRIMS_BROADCAST_IN_DIM && (p->fl[n->res[0]] & V_SAVED) && !banned(p, n->res[0]) &&
		    !is_lit(j, n->opnds[0])) {
			p->fl[n->res[0]] &= (uint16_t)~V_SAVED;
			p->fl[n->opnds[0]] |= V_SAVED;
		}
	}
	return FJ_OK;
}

/* What the backward needs: walking back from the gradients, stopping at
 * values it receives (avail). Returns the first needed parameter that is
 * not available (an internal error), or FJ_NOVAL. */
static fj_vid need_bw(part *p, uint16_t avail)
{
	fj_graph *j = p->j;
	for (fj_vid v = 0; v < j->nvalues; v++)
		p->fl[v] &= (uint16_t)~V_NEED;
	for (uint32_t r = p->K; r < j->nresults; r++)
		if (!is_lit(j, j->results[r]))
			p->fl[j->results[r]] |= V_NEED;
	for (uint32_t ni = j->nnodes; ni-- > 0;) {
		const fj_node *n = &j->nodes[ni];
		bool run = false;
		for (uint32_t i = 0; i < n->nres; i++)
			run |= (p->fl[n->res[i]] & V_NEED) && !(p->fl[n->res[i]] & avail);
		for (uint32_t i = 0; i < n->nopnds && run; i++)
			if (!is_lit(j, n->opnds[i]))
				p->fl[n->opnds[i]] |= V_NEED;
	}
	for (uint32_t i = 0; i < j->nparams; i++) {
		fj_vid v = j->params[i];
		if ((p->fl[v] & V_NEED) && !(p->fl[v] & (avail | V_TANGENT)))
			return v;
	}
	return FJ_NOVAL;
}

/* ---- extraction ---- */

/* Copies node n of the joint into dst, mapping through map; results already
 * mapped (saved values the node recomputes) keep their mapping, and their
 * copies get fresh names. */
static fj_status copy_node(part *p, fj_graph *dst, fj_vid *map, const fj_node *n)
{
	fj_rebuild rb = {.old = p->j, .g = dst, .map = map, .nmap = p->j->nvalues};
	fj_vid ostack[16], *ops = n->nopnds <= 16 ? ostack : fj_alloc(p->ctx, n->nopnds * sizeof *ops);
	fj_vid pstack[16], *prev = n->nres <= 16 ? pstack : fj_alloc(p->ctx, n->nres * sizeof *prev);
	fj_status st = ops && prev ? FJ_OK : FJ_ERR_NOMEM;
	if (st == FJ_OK) {
		for (uint32_t i = 0; i < n->nopnds; i++)
			ops[i] = fj_pass_rebuild_value(&rb, n->opnds[i]);
		for (uint32_t i = 0; i < n->nres; i++)
			prev[i] = map[n->res[i]];
		uint32_t k = fj_pass_rebuild_copy(&rb, n, ops);
		if (k == FJ_NONODE)
			st = FJ_ERR_NOMEM;
		for (uint32_t i = 0; i < n->nres && st == FJ_OK; i++) {
			if (prev[i] == FJ_NOVAL)
				continue;
			fj_vid nv = dst->nodes[k].res[i];
			const char *nm = fj_graph_fresh_name(dst, dst->values[nv].name);
			st = nm ? fj_graph_rename_value(dst, nv, nm) : FJ_ERR_NOMEM;
			map[n->res[i]] = prev[i];
		}
		if (st == FJ_OK)
			dst->nodes[k].recomputable = FJ_TRI_UNSET;
	}
	if (ops && ops != ostack)
		fj_free(p->ctx, ops, n->nopnds * sizeof *ops);
	if (prev && prev != pstack)
		fj_free(p->ctx, prev, n->nres * sizeof *prev);
	return st;
}

static fj_graph *new_graph(part *p, const char *base, const char *suffix)
{
	char name[1100];
	snprintf(name, sizeof name, "%s%s", base, suffix);
	fj_graph *g = fj_graph_create(p->m, name);
	if (g)
		g->loc = p->j->loc;
	return g;
}

static fj_vid add_param(fj_graph *g, const fj_value *v)
{
	fj_vid nv = fj_graph_add_param(g, v->name, v->type, v->loc);
	if (nv != FJ_NOVAL)
		g->values[nv].nograd = v->nograd;
	return nv;
}

/* The saved values in the joint's order: primals, then node results. */
static uint32_t saved_list(part *p, fj_vid *out)
{
	fj_graph *j = p->j;
	uint32_t n = 0;
	for (uint32_t i = 0; i < j->nparams; i++)
		if (p->fl[j->params[i]] & V_SAVED)
			out[n++] = j->params[i];
	for (uint32_t ni = 0; ni < j->nnodes; ni++)
		for (uint32_t i = 0; i < j->nodes[ni].nres; i++)
			if (p->fl[j->nodes[ni].res[i]] & V_SAVED)
				out[n++] = j->nodes[ni].res[i];
	return n;
}

static fj_status extract(part *p, const fj_vid *saved, uint32_t nsaved, fj_graph **fwp, fj_graph **bwp)
{
	fj_graph *j = p->j;
	char base[512];
	size_t bl = strlen(j->name) - strlen(".joint");
	snprintf(base, sizeof base, "%.*s", (int)bl, j->name);
	uint32_t nv = j->nvalues ? j->nvalues : 1;
	fj_vid *map = fj_alloc(p->ctx, nv * sizeof *map);
	fj_vid *res = fj_alloc(p->ctx, (j->nresults + nsaved + 1) * sizeof *res);
	fj_graph *fw = new_graph(p, base, ".fw"), *bw = new_graph(p, base, ".bw");
	fj_status st = map && res && fw && bw ? FJ_OK : FJ_ERR_NOMEM;

	/* forward: ancestors of the outputs and of the saved values */
	for (fj_vid v = 0; v < j->nvalues; v++)
		p->fl[v] &= (uint16_t)~V_NEEDFW;
	for (uint32_t r = 0; r < p->K; r++)
		if (!is_lit(j, j->results[r]))
			p->fl[j->results[r]] |= V_NEEDFW;
	for (uint32_t i = 0; i < nsaved; i++)
		p->fl[saved[i]] |= V_NEEDFW;
	for (uint32_t ni = j->nnodes; ni-- > 0;) {
		const fj_node *n = &j->nodes[ni];
		bool run = false;
		for (uint32_t i = 0; i < n->nres; i++)
			run |= (p->fl[n->res[i]] & V_NEEDFW) != 0;
		for (uint32_t i = 0; i < n->nres && run; i++)
			p->fl[n->res[i]] |= V_NEEDFW;
		for (uint32_t i = 0; i < n->nopnds && run; i++)
			if (!is_lit(j, n->opnds[i]))
				p->fl[n->opnds[i]] |= V_NEEDFW;
	}
	if (st == FJ_OK) {
		memset(map, 0xff, nv * sizeof *map);
		for (uint32_t i = 0; i < p->np && st == FJ_OK; i++)
			if ((map[j->params[i]] = add_param(fw, &j->values[j->params[i]])) == FJ_NOVAL)
				st = FJ_ERR_NOMEM;
		for (uint32_t ni = 0; ni < j->nnodes && st == FJ_OK; ni++) {
			const fj_node *n = &j->nodes[ni];
			bool run = false;
			for (uint32_t i = 0; i < n->nres; i++)
				run |= (p->fl[n->res[i]] & V_NEEDFW) != 0;
			if (run)
				st = copy_node(p, fw, map, n);
		}
		fj_rebuild rb = {.old = j, .g = fw, .map = map, .nmap = j->nvalues};
		uint32_t nr = 0;
		for (uint32_t r = 0; r < p->K && st == FJ_OK; r++)
			res[nr++] = fj_pass_rebuild_value(&rb, j->results[r]);
		for (uint32_t i = 0; i < nsaved; i++)
			res[nr++] = map[saved[i]];
		if (st == FJ_OK)
			st = fj_graph_set_results(fw, res, nr);
		fw->num_fwd_outputs = p->K;
	}

	/* backward: saved values and tangents in; the gradients out */
	if (st == FJ_OK) {
		memset(map, 0xff, nv * sizeof *map);
		for (uint32_t i = 0; i < nsaved && st == FJ_OK; i++)
			if ((map[saved[i]] = add_param(bw, &j->values[saved[i]])) == FJ_NOVAL)
				st = FJ_ERR_NOMEM;
		for (uint32_t i = p->np; i < j->nparams && st == FJ_OK; i++)
			if ((map[j->params[i]] = add_param(bw, &j->values[j->params[i]])) == FJ_NOVAL)
				st = FJ_ERR_NOMEM;
		for (uint32_t ni = 0; ni < j->nnodes && st == FJ_OK; ni++) {
			const fj_node *n = &j->nodes[ni];
			bool run = false;
			for (uint32_t i = 0; i < n->nres; i++)
				run |= (p->fl[n->res[i]] & V_NEED) && !(p->fl[n->res[i]] & V_SAVED);
			if (run)
				st = copy_node(p, bw, map, n);
		}
		fj_rebuild rb = {.old = j, .g = bw, .map = map, .nmap = j->nvalues};
		uint32_t nr = 0;
		for (uint32_t r = p->K; r < j->nresults && st == FJ_OK; r++) {
			res[nr] = fj_pass_rebuild_value(&rb, j->results[r]);
			if (res[nr++] == FJ_NOVAL)
				st = fj_error(p->ctx, j->loc, "partition: internal error: gradient %u of @%s is not computable "
				              "in the backward", r - p->K, j->name);
		}
		if (st == FJ_OK)
			st = fj_graph_set_results(bw, res, nr);
	}
	if (map)
		fj_free(p->ctx, map, nv * sizeof *map);
	if (res)
		fj_free(p->ctx, res, (j->nresults + nsaved + 1) * sizeof *res);
	if (st != FJ_OK) {
		fj_graph_destroy(fw);
		fj_graph_destroy(bw);
		return st;
	}
	*fwp = fw;
	*bwp = bw;
	return FJ_OK;
}

/* ---- statistics: bytes as an expression in the symbols ---- */

typedef struct mono {
	int64_t coef;
	uint32_t nsyms;
	const uint32_t *syms;
} mono;

static int cmp_mono(const void *a, const void *b)
{
	const mono *x = a, *y = b;
	if (x->nsyms != y->nsyms)
		return x->nsyms > y->nsyms ? -1 : 1;
	for (uint32_t i = 0; i < x->nsyms; i++)
		if (x->syms[i] != y->syms[i])
			return x->syms[i] < y->syms[i] ? -1 : 1;
	return 0;
}

static void format_bytes(part *p, const fj_graph *g, const fj_vid *saved, uint32_t n, char *buf, size_t size)
{
	mono ms[64];
	uint32_t nm = 0;
	int64_t cst = 0;
	bool exact = true;
	double est = 0;
	for (uint32_t i = 0; i < n; i++) {
		const fj_type *t = &g->values[saved[i]].type;
		int64_t es = fj_dtype_size(t->dtype);
		est += fj_type_bytes_est(p->m, t);
		fj_dim d;
		if (!fj_dim_product(p->m, t->dims, t->rank, &d)) {
			exact = false;
			continue;
		}
		if (fj_dim_is_static(d)) {
			cst += d * es;
			continue;
		}
		const fj_symexpr *e = fj_dim_expr(p->m, d);
		mono x = {e->coef * es, e->nsyms, e->syms};
		uint32_t k = 0;
		while (k < nm && cmp_mono(&ms[k], &x) != 0)
			k++;
		if (k < nm)
			ms[k].coef += x.coef;
		else if (nm < FJ_ARRAY_LEN(ms))
			ms[nm++] = x;
		else
			exact = false;
	}
	if (!exact) {
		snprintf(buf, size, "~%.0f", est);
		return;
	}
	qsort(ms, nm, sizeof *ms, cmp_mono);
	size_t len = 0;
	buf[0] = 0;
	for (uint32_t k = 0; k < nm && len < size; k++) {
		len += (size_t)snprintf(buf + len, size - len, "%s", k ? " + " : "");
		for (uint32_t s = 0; s < ms[k].nsyms && len < size; s++) {
			bool paren = fj_symbol_is_derived(p->m, ms[k].syms[s]); /* (s0+1)*4 */
			len += (size_t)snprintf(buf + len, size - len, "%s%s%s%s", s ? "*" : "", paren ? "(" : "",
			                        fj_symbol_name(p->m, ms[k].syms[s]), paren ? ")" : "");
		}
		if (ms[k].coef != 1 && len < size)
			len += (size_t)snprintf(buf + len, size - len, "*%lld", (long long)ms[k].coef);
	}
	if ((cst || !nm) && len < size)
		snprintf(buf + len, size - len, "%s%lld", nm ? " + " : "", (long long)cst);
}

/* ---- the pass ---- */

static fj_status partition_graph(fj_pass_run *r, uint32_t gi, bool use_mincut, bool attention)
{
	fj_module *m = r->m;
	fj_graph *j = m->graphs[gi];
	part p = {.m = m, .ctx = m->ctx, .j = j, .mincut = use_mincut};
	p.K = (uint32_t)j->num_fwd_outputs;
	for (uint32_t k = 0; k < p.K && k < j->nresults; k++)
		if (j->results[k] != FJ_NOVAL && fj_dtype_is_float(j->values[j->results[k]].type.dtype))
			p.nt++;
	if (p.K > j->nresults || p.nt > j->nparams)
		return fj_error(m->ctx, j->loc, "partition: @%s is not a joint graph (%u tangents expected)", j->name,
		                p.nt);
	p.np = j->nparams - p.nt;
	uint32_t nv = j->nvalues ? j->nvalues : 1;
	p.fl = fj_alloc(m->ctx, nv * sizeof *p.fl);
	p.dist = fj_alloc(m->ctx, nv * sizeof *p.dist);
	fj_vid *saved = fj_alloc(m->ctx, nv * sizeof *saved);
	fj_status st = p.fl && p.dist && saved ? build_users(&p) : FJ_ERR_NOMEM;
	fj_graph *fw = NULL, *bw = NULL;
	if (st)
		goto done;
	memset(p.fl, 0, nv * sizeof *p.fl);
	classify(&p);
	if (use_mincut) {
		bool marked = false;
		for (uint32_t ni = 0; ni < j->nnodes && !marked; ni++)
			marked = j->nodes[ni].recomputable != FJ_TRI_UNSET;
		if (!marked)
			fj_recompute_graph(j, false);
		distances(&p);
		if ((st = mincut(&p)) != FJ_OK)
			goto done;
		fj_vid bad = need_bw(&p, V_SAVED);
		if (bad != FJ_NOVAL) {
			st = fj_error(m->ctx, j->loc, "partition: internal error: the backward of @%s needs %%%s", j->name,
			              j->values[bad].name);
			goto done;
		}
		for (fj_vid v = 0; v < j->nvalues; v++)
			if ((p.fl[v] & V_SAVED) && !(p.fl[v] & V_NEED))
				p.fl[v] &= (uint16_t)~V_SAVED;
	} else {
		need_bw(&p, V_FW);
		for (fj_vid v = 0; v < j->nvalues; v++)
			if ((p.fl[v] & V_NEED) && (p.fl[v] & V_FW) && j->values[v].kind != FJ_VK_LITERAL)
				p.fl[v] |= V_SAVED;
		need_bw(&p, V_SAVED);
	}
	uint32_t nsaved = saved_list(&p, saved);
	if ((st = extract(&p, saved, nsaved, &fw, &bw)) != FJ_OK)
		goto done;
	uint32_t found = 0, rewritten = 0;
	if (attention && (st = fj_pass_partition_attention(&fw, &bw, &found, &rewritten)) != FJ_OK)
		goto done;
	if (r->stats) {
		char b[512];
		uint32_t K = (uint32_t)fw->num_fwd_outputs;
		format_bytes(&p, fw, fw->results + K, fw->nresults - K, b, sizeof b);
		fj_pass_stat(r, "partition @%s: saved: %u values, %s bytes", j->name, fw->nresults - K, b);
		if (found)
			fj_pass_stat(r, "partition @%s: attention: %u of %u save the logsumexp", j->name, rewritten, found);
	}
	fj_module_remove_graph(m, gi);
	st = fj_module_insert_graph(m, gi, fw);
	if (st == FJ_OK) {
		fw = NULL;
		st = fj_module_insert_graph(m, gi + 1, bw);
		if (st == FJ_OK)
			bw = NULL;
	}
done:
	fj_graph_destroy(fw);
	fj_graph_destroy(bw);
	if (p.fl)
		fj_free(m->ctx, p.fl, nv * sizeof *p.fl);
	if (p.dist)
		fj_free(m->ctx, p.dist, nv * sizeof *p.dist);
	if (saved)
		fj_free(m->ctx, saved, nv * sizeof *saved);
	if (p.ustart)
		fj_free(m->ctx, p.ustart, p.ustart_size);
	if (p.users)
		fj_free(m->ctx, p.users, p.users_size);
	if (st == FJ_ERR_NOMEM)
		m->oom = true;
	return st;
}

fj_status fj_pass_partition(fj_pass_run *r)
{
	bool use_mincut = strcmp(fj_pass_opt_str(r, "mode"), "default") != 0;
	bool attention = fj_pass_opt_bool(r, "attention");
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < r->m->ngraphs && st == FJ_OK; i++)
		if (fj_is_joint_graph(r->m->graphs[i]))
			st = partition_graph(r, i, use_mincut, attention);
	return st;
}
