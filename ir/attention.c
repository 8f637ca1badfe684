/* attention.c -- the attention pattern in a graph of prims (ir.h,
 * fj_attn_match): O = softmax(f(Q K)) V, which the fuse pass groups into one
 * `attention` region and the host compiles to one flash-attention kernel
 * (codegen/region_host_attention.c).
 *
 * The shape matched, read backwards from the second matmul (mm2):
 *   O  = prims.matmul(P', V)           rank 2 or 3, f32
 *   P' = P, or prims.reshape(P)        (heads folded into the batch: 4-D P)
 *   P  = prims.div(E, broadcast_in_dim(L))
 *   L  = prims.sum(E) over the last dim
 *   E  = prims.exp(prims.sub(X, broadcast_in_dim(MX)))
 *   MX = prims.amax(X) over the last dim
 *   X  = the "score chain": pointwise prims of X's shape over S', each node
 *        with at least one operand computed from S' (the scale, an additive
 *        mask, a causal where(...)); X may be S' itself
 *   S' = S, or prims.reshape(S);  S = prims.matmul(Q, K) (mm1), f32
 * The broadcasts put the row values back along the last dim
 * (broadcast_dims = [0 .. rank-2]); X's last two dims are P's; the batch of
 * mm1 is mm2's. Operands of the chain that do not depend on S (the mask,
 * the scale's prims.full, ...) are anything: the kernel evaluates them at
 * each score. Every value of the pattern except O is used by pattern nodes
 * only and is not returned: nothing else may need S or P in memory (a
 * training forward that saves P does not match). One addition: the
 * logsumexp of the same scores (lse_group), whose row values may leave: the
 * bridge's scaled-dot-product forward returns it beside O.
 *
 * This is exactly what decompose makes of `_softmax(q @ k^T * scale + mask)
 * @ v` in f32 (docs/IR.md §4, the attention schedule); other spellings (the
 * weights as exp(X - logsumexp), a log_softmax, f16 scores) are not matched
 * and keep their three kernels.
 *
 * Cost: O(nodes of the graph) per call once the tail matched (the use
 * checks scan the graph); a matmul that does not end such a tail costs a few
 * steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct matcher {
	const fj_graph *g;
	const bool *live;
	fj_attn *m;
	uint8_t *seen; /* per node, for the chain walk: 1 visited, 2 depends on S */
	bool ok;
	bool p_leaves; /* P may be returned (fj_attn_match_saved) */
} matcher;

/* The node defining v when it is op `op` (any op: FJ_OP_COUNT), else NULL. */
static const fj_node *def_op(const fj_graph *g, fj_vid v, int op)
{
	if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_RESULT)
		return NULL;
	const fj_node *n = &g->nodes[g->values[v].def];
	return op == FJ_OP_COUNT || (int)n->op == op ? n : NULL;
}

static uint32_t node_of(const fj_graph *g, const fj_node *n) { return (uint32_t)(n - g->nodes); }

/* Adds node i to a pattern's node list (once); false when it is full. */
static bool add_node(uint32_t *nodes, uint32_t *n, uint32_t i)
{
	for (uint32_t k = 0; k < *n; k++)
		if (nodes[k] == i)
			return true;
	if (*n == FJ_ATTN_MAX_NODES)
		return false;
	nodes[(*n)++] = i;
	return true;
}

static void add(matcher *x, const fj_node *n)
{
	if (!n || !add_node(x->m->nodes, &x->m->nnodes, node_of(x->g, n)))
		x->ok = false;
}

static const fj_type *vt(const matcher *x, fj_vid v) { return &x->g->values[v].type; }

/* n reduces exactly the last dim of its rank-r operand. */
static bool over_last(const matcher *x, const fj_node *n, int r)
{
	return n && n->nopnds == 1 && fj_node_reduced_mask(fj_graph_ctx(x->g), n, r) == (1u << (r - 1));
}

/* b broadcasts a row value (rank r-1) back to `to` along the last dim. */
static bool row_broadcast(const matcher *x, const fj_node *b, const fj_type *to)
{
	if (!b || b->nopnds != 1 || !fj_type_same_dims(vt(x, b->res[0]), to))
		return false;
	const fj_attr *bd = fj_node_attr(fj_graph_ctx(x->g), b, "broadcast_dims");
	int r = to->rank;
	if (!bd || bd->kind != FJ_AK_LIST || bd->n != (uint32_t)(r - 1) || vt(x, b->opnds[0])->rank != r - 1)
		return false;
	for (int i = 0; i < r - 1; i++)
		if (fj_attr_as_int(&bd->u.items[i]) != i)
			return false;
	return true;
}

/* Can the walks back (chain, bw_walk) go through n: a pointwise node of
 * one result with dims `dims`, not too deep? */
static bool pointwise_step(const fj_graph *g, const fj_node *n, const fj_type *dims, int depth)
{
	return depth <= 64 && (fj_op_info(fj_graph_ctx(g), n->op)->flags & FJ_OPF_POINTWISE) && n->nres == 1 &&
	       fj_type_same_dims(&g->values[n->res[0]].type, dims);
}

/* The chain from X back to S': pointwise nodes of X's shape. Returns
 * whether v depends on S' (and records S' when it is found: a matmul result
 * of the right rank, or a reshape of one). */
static bool chain(matcher *x, fj_vid v, int depth)
{
	const fj_graph *g = x->g;
	const fj_node *n = def_op(g, v, FJ_OP_COUNT);
	if (!n || !x->ok)
		return false;
	uint32_t i = node_of(g, n);
	if (x->seen[i])
		return x->seen[i] == 2;
	x->seen[i] = 1;
	const fj_node *mm = n->op == FJ_OP_PRIMS_MATMUL ? n : NULL;
	if (n->op == FJ_OP_PRIMS_RESHAPE && n->nopnds == 1)
		mm = def_op(g, n->opnds[0], FJ_OP_PRIMS_MATMUL);
	if (mm) {
		if (x->m->mm1 != FJ_NONODE && x->m->mm1 != node_of(g, mm)) {
			x->ok = false; /* two matmuls feed the scores */
			return false;
		}
		x->m->mm1 = node_of(g, mm);
		x->m->s = mm->res[0];
		add(x, mm);
		if (mm != n)
			add(x, n);
		x->seen[i] = 2;
		return true;
	}
	if (!pointwise_step(g, n, vt(x, x->m->x), depth))
		return false;
	bool dep = false;
	for (uint32_t o = 0; o < n->nopnds; o++)
		dep = chain(x, n->opnds[o], depth + 1) || dep;
	if (dep) {
		x->seen[i] = 2;
		add(x, n);
	}
	return dep;
}

/* Is every value of the pattern used by pattern nodes only, and none
 * returned, but O and the row values (the logsumexp's group)? mark: per
 * node, 1 a member, 2 a member whose value may leave. */
static bool closed(const matcher *x, uint8_t *mark)
{
	const fj_graph *g = x->g;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		if (mark[i] || (x->live && !x->live[i]))
			continue;
		const fj_node *n = &g->nodes[i];
		for (uint32_t o = 0; o < n->nopnds; o++) {
			fj_vid v = n->opnds[o];
			if (v != FJ_NOVAL && g->values[v].kind == FJ_VK_RESULT && mark[g->values[v].def] == 1)
				return false;
		}
	}
	for (uint32_t r = 0; r < g->nresults; r++) {
		fj_vid v = g->results[r];
		if (v != FJ_NOVAL && g->values[v].kind == FJ_VK_RESULT && mark[g->values[v].def] == 1 &&
		    !(x->p_leaves && v == x->m->p))
			return false;
	}
	return true;
}

/* The consumer of v that is op `op` and whose operand `at` is v (the first
 * in node order), or NULL. */
static const fj_node *user(const matcher *x, fj_vid v, int op, uint32_t at)
{
	const fj_graph *g = x->g;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		if ((int)n->op == op && (!x->live || x->live[i]) && at < n->nopnds && n->opnds[at] == v)
			return n;
	}
	return NULL;
}

/* Is v a prims.full of value `val`? */
static bool full_of(const matcher *x, fj_vid v, double val)
{
	const fj_node *n = def_op(x->g, v, FJ_OP_PRIMS_FULL);
	const fj_attr *a = n ? fj_node_attr(fj_graph_ctx(x->g), n, "value") : NULL;
	return a && fj_attr_as_float(a) == val;
}

/* The logsumexp of the same scores beside the softmax, as decompose writes
 * aten.logsumexp (the bridge's scaled-dot-product forward returns it with
 * O; its backward recomputes the weights from it):
 *   MS  = where(eq(abs(MX), full(inf)), full(0), MX)
 *   S2  = sum(exp(X - broadcast_in_dim(MS))) over the last dim
 * and the row values computed pointwise from MX, MS and S2 (log(S2) + MS),
 * which may leave the region. The kernel has S2 from its running sum: when
 * MX is finite, MS is MX; when MX is -inf both are 0; when MX is +inf, S2
 * is +inf. Marks the group's nodes in mark (2: may leave); false when the
 * consumers of MX besides the softmax are not this. */
static bool lse_group(matcher *x, const fj_node *am, uint8_t *mark)
{
	const fj_graph *g = x->g;
	fj_attn *m = x->m;
	fj_vid mx = am->res[0];
	const fj_node *ab = user(x, mx, FJ_OP_PRIMS_ABS, 0);
	const fj_node *eq = ab ? user(x, ab->res[0], FJ_OP_PRIMS_EQ, 0) : NULL;
	const fj_node *ms = eq ? user(x, eq->res[0], FJ_OP_PRIMS_WHERE, 0) : NULL;
	if (!ms || ms->nopnds != 3 || ms->opnds[2] != mx || !full_of(x, ms->opnds[1], 0.0) ||
	    !full_of(x, eq->opnds[1], (double)INFINITY))
		return false;
	const fj_node *bms = user(x, ms->res[0], FJ_OP_PRIMS_BROADCAST_IN_DIM, 0);
	const fj_node *d2 = bms ? user(x, bms->res[0], FJ_OP_PRIMS_SUB, 1) : NULL;
	const fj_node *e2 = d2 && d2->opnds[0] == m->x ? user(x, d2->res[0], FJ_OP_PRIMS_EXP, 0) : NULL;
	const fj_node *s2 = e2 ? user(x, e2->res[0], FJ_OP_PRIMS_SUM, 0) : NULL;
	const fj_type *xt = vt(x, m->x);
	if (!row_broadcast(x, bms, xt) || !over_last(x, s2, xt->rank))
		return false;
	m->sum2 = node_of(g, s2);
	m->s2 = s2->res[0];
	const fj_node *nodes[] = {ab, eq, ms, bms, d2, e2, s2};
	for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
		add(x, nodes[i]);
		mark[node_of(g, nodes[i])] = 2;
	}
	mark[node_of(g, bms)] = mark[node_of(g, d2)] = mark[node_of(g, e2)] = 1;
	mark[node_of(g, am)] = 2;
	/* the row values computed from them, pointwise, in node order */
	const fj_type *rt = vt(x, mx);
	for (uint32_t i = node_of(g, s2) + 1; i < g->nnodes && x->ok; i++) {
		const fj_node *n = &g->nodes[i];
		if ((x->live && !x->live[i]) || n->nres != 1 || !(fj_op_info(fj_graph_ctx(g), n->op)->flags & FJ_OPF_POINTWISE) ||
		    !fj_type_same_dims(vt(x, n->res[0]), rt))
			continue;
		bool row = false;
		for (uint32_t o = 0; o < n->nopnds && !row; o++) {
			fj_vid v = n->opnds[o];
			row = v != FJ_NOVAL && g->values[v].kind == FJ_VK_RESULT && mark[g->values[v].def] == 2;
		}
		if (row) {
			add(x, n);
			mark[i] = 2;
		}
	}
	return x->ok;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static bool match(const fj_graph *g, uint32_t mm2, const bool *live, uint8_t *scratch, bool p_leaves, fj_attn *out)
{
	memset(out, 0, sizeof *out);
	out->mm1 = out->mm2 = out->sum2 = FJ_NONODE;
	out->s2 = FJ_NOVAL;
	if (mm2 >= g->nnodes || g->nodes[mm2].op != FJ_OP_PRIMS_MATMUL || g->nodes[mm2].nopnds != 2)
		return false;
	matcher x = {.g = g, .live = live, .m = out, .seen = scratch, .ok = true, .p_leaves = p_leaves};
	const fj_node *n2 = &g->nodes[mm2];
	const fj_type *to = vt(&x, n2->res[0]);
	if ((to->rank != 2 && to->rank != 3) || to->dtype != FJ_DT_F32)
		return false;
	out->mm2 = mm2;
	add(&x, n2);
	fj_vid pin = n2->opnds[0];
	const fj_node *rs = def_op(g, pin, FJ_OP_PRIMS_RESHAPE);
	fj_vid p = rs ? rs->opnds[0] : pin;
	if (rs)
		add(&x, rs);
	const fj_node *dv = def_op(g, p, FJ_OP_PRIMS_DIV);
	if (!dv || dv->nopnds != 2)
		return false;
	const fj_type *pt = vt(&x, p);
	int r = pt->rank;
	const fj_type *pit = vt(&x, pin);
	if (r < 2 || pt->dtype != FJ_DT_F32 || pt->dims[r - 1] != pit->dims[pit->rank - 1] ||
	    pt->dims[r - 2] != pit->dims[pit->rank - 2])
		return false;
	const fj_node *lb = def_op(g, dv->opnds[1], FJ_OP_PRIMS_BROADCAST_IN_DIM);
	const fj_node *sm = lb ? def_op(g, lb->opnds[0], FJ_OP_PRIMS_SUM) : NULL;
	const fj_node *ex = def_op(g, dv->opnds[0], FJ_OP_PRIMS_EXP);
	if (!row_broadcast(&x, lb, pt) || !over_last(&x, sm, r) || !ex || sm->opnds[0] != dv->opnds[0])
		return false;
	const fj_node *sb = def_op(g, ex->opnds[0], FJ_OP_PRIMS_SUB);
	const fj_node *mb = sb && sb->nopnds == 2 ? def_op(g, sb->opnds[1], FJ_OP_PRIMS_BROADCAST_IN_DIM) : NULL;
	const fj_node *am = mb ? def_op(g, mb->opnds[0], FJ_OP_PRIMS_AMAX) : NULL;
	if (!row_broadcast(&x, mb, pt) || !over_last(&x, am, r) || am->opnds[0] != sb->opnds[0] ||
	    !fj_type_same_dims(vt(&x, sb->opnds[0]), pt) || vt(&x, sb->opnds[0])->dtype != FJ_DT_F32 ||
	    vt(&x, ex->res[0])->dtype != FJ_DT_F32)
		return false;
	out->x = sb->opnds[0];
	out->mx = am->res[0];
	out->e = ex->res[0];
	out->l = sm->res[0];
	out->p = p;
	out->amax = node_of(g, am);
	out->sum = node_of(g, sm);
	const fj_node *tail[] = {dv, lb, sm, ex, sb, mb, am};
	for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
		add(&x, tail[i]);
	memset(scratch, 0, g->nnodes);
	if (!chain(&x, out->x, 0) || !x.ok || out->mm1 == FJ_NONODE || out->mm1 == mm2)
		return false;
	const fj_type *st = vt(&x, out->s);
	if (st->rank != to->rank || st->dtype != FJ_DT_F32 || st->dims[st->rank - 1] != pt->dims[r - 1] ||
	    st->dims[st->rank - 2] != pt->dims[r - 2] || (to->rank == 3 && st->dims[0] != to->dims[0]) ||
	    to->dims[to->rank - 2] != st->dims[st->rank - 2])
		return false;
	/* membership marks (the chain walk's are done with) */
	memset(scratch, 0, g->nnodes);
	for (uint32_t k = 0; k < out->nnodes; k++)
		scratch[out->nodes[k]] = 1;
	scratch[mm2] = 2;
	bool more = false; /* MX read by something besides the softmax's broadcast */
	for (uint32_t i = 0; i < g->nnodes && !more; i++)
		for (uint32_t o = 0; o < g->nodes[i].nopnds && !more; o++)
			more = (!live || live[i]) && g->nodes[i].opnds[o] == out->mx && &g->nodes[i] != mb;
	if ((more && !lse_group(&x, am, scratch)) || !x.ok || !closed(&x, scratch))
		return false;
	qsort(out->nodes, out->nnodes, sizeof *out->nodes, cmp_u32);
	return true;
}

bool fj_attn_match(const fj_graph *g, uint32_t mm2, const bool *live, uint8_t *scratch, fj_attn *out)
{
	return match(g, mm2, live, scratch, false, out);
}

bool fj_attn_match_saved(const fj_graph *g, uint32_t mm2, uint8_t *scratch, fj_attn *out)
{
	return match(g, mm2, NULL, scratch, true, out);
}

/* ---- the backward (fj_attn_bw_match) ---- */

/* Is transpose t a swap of its operand's last two dims? */
static bool swaps_last_two(const fj_graph *g, const fj_node *t)
{
	const fj_attr *pa = fj_node_attr(fj_graph_ctx(g), t, "perm");
	int r = g->values[t->res[0]].type.rank;
	if (!pa || pa->kind != FJ_AK_LIST || pa->n != (uint32_t)r || r < 2)
		return false;
	for (int i = 0; i < r; i++) {
		int want = i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i;
		if (fj_attr_as_int(&pa->u.items[i]) != want)
			return false;
	}
	return true;
}

typedef struct bwm {
	const fj_graph *g;
	const bool *live;
	fj_attn_bw *m;
	uint8_t *st; /* per node: 1 visited (independent of the first stage), 2 a member, 3 an F */
	const fj_type *wt;
	int mrank; /* the matmuls' rank (2 or 3; W's may be higher: heads) */
	bool ok;
} bwm;

/* Do a and b end in the same two dims (swapped with `swap`)? */
static bool last_two(const fj_type *a, const fj_type *b, bool swap)
{
	if (a->rank < 2 || b->rank < 2)
		return false;
	fj_dim a1 = a->dims[a->rank - 2], a2 = a->dims[a->rank - 1];
	return swap ? a1 == b->dims[b->rank - 1] && a2 == b->dims[b->rank - 2]
	            : a1 == b->dims[b->rank - 2] && a2 == b->dims[b->rank - 1];
}

static void bw_add(bwm *x, uint32_t i)
{
	if (!add_node(x->m->nodes, &x->m->nnodes, i))
		x->ok = false;
}

/* Walks back from W-space value v: returns whether v depends on a first
 * stage matmul (records those, and the pointwise nodes between, as
 * members). */
static bool bw_walk(bwm *x, fj_vid v, int depth)
{
	const fj_graph *g = x->g;
	const fj_node *n = def_op(g, v, FJ_OP_COUNT);
	if (!n || !x->ok)
		return false;
	uint32_t i = node_of(g, n);
	if (x->st[i])
		return x->st[i] >= 2;
	x->st[i] = 1;
	const fj_type *t = &g->values[v].type;
	/* a first-stage matmul, or a reshape of one folding W's batch dims */
	const fj_node *mm = n->op == FJ_OP_PRIMS_MATMUL ? n : NULL;
	if (n->op == FJ_OP_PRIMS_RESHAPE && n->nopnds == 1 && (mm = def_op(g, n->opnds[0], FJ_OP_PRIMS_MATMUL)) &&
	    (t->rank < 3 || g->values[mm->res[0]].type.rank != 3 || !last_two(&g->values[mm->res[0]].type, t, false)))
		return false;
	if (mm) {
		uint32_t mi = node_of(g, mm);
		const fj_type *mt = &g->values[mm->res[0]].type;
		if (!fj_type_same_dims(t, x->wt) || mt->dtype != FJ_DT_F32 || mm->nopnds != 2 || mt->rank != x->mrank)
			return false;
		bool known = false;
		for (uint32_t k = 0; k < x->m->nf && !known; k++)
			known = x->m->f[k] == mi;
		if (!known && x->m->nf == FJ_ATTN_BW_MAX_F) {
			x->ok = false;
			return false;
		}
		if (!known)
			x->m->f[x->m->nf++] = mi;
		x->st[mi] = 3;
		x->st[i] = mm == n ? 3 : 2;
		bw_add(x, mi);
		bw_add(x, i);
		return true;
	}
	if (!pointwise_step(g, n, x->wt, depth))
		return false;
	bool dep = false;
	for (uint32_t o = 0; o < n->nopnds; o++)
		dep = bw_walk(x, n->opnds[o], depth + 1) || dep;
	if (dep) {
		x->st[i] = 2;
		bw_add(x, i);
	}
	return dep;
}

/* Is v (of W's dims) a broadcast_in_dim of a value constant along W's last
 * dim (a row value: [.., M] or [.., M, 1])? */
static bool row_value(const fj_graph *g, fj_vid v, const fj_type *wt)
{
	const fj_node *b = def_op(g, v, FJ_OP_PRIMS_BROADCAST_IN_DIM);
	const fj_attr *bd = b && b->nopnds == 1 ? fj_node_attr(fj_graph_ctx(g), b, "broadcast_dims") : NULL;
	if (!bd || bd->kind != FJ_AK_LIST || !fj_type_same_dims(&g->values[v].type, wt))
		return false;
	const fj_type *it = &g->values[b->opnds[0]].type;
	for (uint32_t i = 0; i < bd->n && i < (uint32_t)it->rank; i++)
		if (fj_attr_as_int(&bd->u.items[i]) == wt->rank - 1 && it->dims[i] != 1)
			return false;
	return true;
}

/* G's W-space operand W_g, read back through at most three layout nodes
 * (a transpose of the last two dims, reshapes that fold W's batch dims
 * into G's and keep the last two), which go to lay[0..*nl); *tr: whether
 * G reads W_g transposed. FJ_NOVAL when G's first operand is not such a
 * value of W's dims (wt; any dims of rank >= 2 when wt is NULL). */
static fj_vid bw_weights(const fj_graph *g, const fj_node *gm, const fj_type *wt, bool *tr, const fj_node **lay,
                         uint32_t *nl)
{
	fj_vid a = gm->opnds[0];
	*tr = false;
	*nl = 0;
	for (int k = 0; k < 3; k++) { /* all of them: a square W's transpose has W's dims */
		const fj_node *n = def_op(g, a, FJ_OP_COUNT);
		if (!n || n->nopnds != 1)
			break;
		const fj_type *in = &g->values[n->opnds[0]].type, *res = &g->values[a].type;
		if (n->op == FJ_OP_PRIMS_TRANSPOSE && swaps_last_two(g, n))
			*tr = !*tr;
		else if (!(n->op == FJ_OP_PRIMS_RESHAPE && in->rank >= 3 && res->rank >= 3 && last_two(in, res, false)))
			break;
		lay[(*nl)++] = n;
		a = n->opnds[0];
	}
	const fj_type *at = &g->values[a].type;
	if (wt ? !fj_type_same_dims(at, wt) : at->rank < 2)
		return FJ_NOVAL;
	return a;
}

bool fj_attn_bw_match(const fj_graph *g, uint32_t g0, const bool *live, uint8_t *scratch, fj_attn_bw *out)
{
	memset(out, 0, sizeof *out);
	if (g0 >= g->nnodes || g->nodes[g0].op != FJ_OP_PRIMS_MATMUL || g->nodes[g0].nopnds != 2 ||
	    (live && !live[g0]))
		return false;
	const fj_node *n0 = &g->nodes[g0];
	bool tr;
	const fj_node *lay[3];
	uint32_t nl;
	fj_vid w0 = bw_weights(g, n0, NULL, &tr, lay, &nl);
	if (w0 == FJ_NOVAL)
		return false;
	const fj_type *wt = &g->values[w0].type;
	const fj_type *ot = &g->values[n0->res[0]].type;
	int mr = ot->rank;
	if ((mr != 2 && mr != 3) || wt->dtype != FJ_DT_F32 || ot->dtype != FJ_DT_F32 || wt->rank < mr ||
	    (wt->rank > mr && mr != 3))
		return false;
	bwm x = {.g = g, .live = live, .m = out, .st = scratch, .wt = wt, .mrank = mr, .ok = true};
	memset(scratch, 0, g->nnodes);
	/* every second-stage matmul reading a W value of this space that depends
	 * on the first stage; their W chains, to a fixed point (a G found later
	 * may read W values an earlier walk did not reach) */
	for (bool grew = true; grew && x.ok;) {
		grew = false;
		for (uint32_t i = 0; i < g->nnodes && x.ok; i++) {
			const fj_node *n = &g->nodes[i];
			if (n->op != FJ_OP_PRIMS_MATMUL || n->nopnds != 2 || (live && !live[i]) || scratch[i] >= 2)
				continue;
			bool known = false;
			for (uint32_t k = 0; k < out->ng && !known; k++)
				known = out->g[k] == i;
			if (known)
				continue;
			bool t;
			fj_vid w = bw_weights(g, n, wt, &t, lay, &nl);
			const fj_node *wd = w == FJ_NOVAL ? NULL : def_op(g, w, FJ_OP_COUNT);
			if (!wd || (i != g0 && scratch[node_of(g, wd)] < 2))
				continue; /* G0 starts the walk; the others read what it reached */
			if (!bw_walk(&x, w, 0))
				continue;
			if (out->ng == FJ_ATTN_BW_MAX_G) {
				x.ok = false;
				break;
			}
			out->g[out->ng] = i;
			out->gw[out->ng] = w;
			out->gt[out->ng] = t;
			out->ng++;
			bw_add(&x, i);
			for (uint32_t k = 0; k < nl; k++)
				bw_add(&x, node_of(g, lay[k]));
			grew = true;
		}
	}
	if (!x.ok || out->nf == 0 || out->ng == 0 || out->g[0] != g0)
		return false;
	/* the shapes: every F and G a matmul of G0's rank and batch; G's
	 * second operand of the rows it sums over (W's N for W Y, M for W^T Y) */
	const fj_type *ft = &g->values[g->nodes[out->f[0]].res[0]].type;
	for (uint32_t k = 0; k < out->nf; k++) {
		const fj_node *f = &g->nodes[out->f[k]];
		const fj_type *t = &g->values[f->res[0]].type;
		if (g->values[f->opnds[0]].type.rank != mr || g->values[f->opnds[1]].type.rank != mr ||
		    !last_two(t, wt, false) || (mr == 3 && t->dims[0] != ot->dims[0]))
			return false;
	}
	for (uint32_t k = 0; k < out->ng; k++) {
		const fj_node *gm = &g->nodes[out->g[k]];
		const fj_type *yt = &g->values[gm->opnds[1]].type, *rt = &g->values[gm->res[0]].type;
		if (yt->rank != mr || rt->rank != mr || rt->dtype != FJ_DT_F32 || (mr == 3 && rt->dims[0] != ft->dims[0]) ||
		    yt->dims[mr - 2] != wt->dims[wt->rank - (out->gt[k] ? 2 : 1)] ||
		    rt->dims[mr - 2] != wt->dims[wt->rank - (out->gt[k] ? 1 : 2)])
			return false;
	}
	/* membership marks: 1 a member whose value stays inside, 2 a G (its
	 * value leaves) */
	memset(scratch, 0, g->nnodes);
	for (uint32_t k = 0; k < out->nnodes; k++)
		scratch[out->nodes[k]] = 1;
	for (uint32_t k = 0; k < out->ng; k++)
		scratch[out->g[k]] = 2;
	/* nothing outside reads a member but a G; a member reads neither a G
	 * nor an outside value computed from one (bit 4: depends on a G) */
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		if (live && !live[i])
			continue;
		uint8_t mi = scratch[i] & 3;
		bool dep = mi == 2;
		for (uint32_t o = 0; o < n->nopnds; o++) {
			fj_vid v = n->opnds[o];
			if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_RESULT)
				continue;
			uint8_t md = scratch[g->values[v].def];
			if ((md & 3) == 1 && !mi)
				return false; /* an outside node reads a value of the pattern */
			if (mi && ((md & 3) == 2 || ((md & 3) == 0 && (md & 4))))
				return false; /* the pattern reads a G */
			dep = dep || (md & 3) == 2 || (md & 4);
		}
		if (dep)
			scratch[i] |= 4;
	}
	for (uint32_t k = 0; k < out->ng; k++) { /* G's second operand: from outside */
		const fj_node *gm = &g->nodes[out->g[k]];
		const fj_node *yd = def_op(g, gm->opnds[1], FJ_OP_COUNT);
		if (yd && scratch[node_of(g, yd)])
			return false;
	}
	for (uint32_t k = 0; k < out->nf; k++) /* F's operands: from outside */
		for (uint32_t o = 0; o < 2; o++) {
			const fj_node *od = def_op(g, g->nodes[out->f[k]].opnds[o], FJ_OP_COUNT);
			if (od && scratch[node_of(g, od)])
				return false;
		}
	for (uint32_t j = 0; j < g->nresults; j++) {
		fj_vid v = g->results[j];
		if (v != FJ_NOVAL && g->values[v].kind == FJ_VK_RESULT && (scratch[g->values[v].def] & 3) == 1)
			return false;
	}
	/* the weights of attention, recomputed from a row value (the
	 * logsumexp): a chain that only looks alike (an MLP's layer, W2
	 * gelu(X W1), has no row value under its exp) stays with the matmul
	 * template */
	bool lse = false;
	for (uint32_t k = 0; k < out->nnodes && !lse; k++) {
		const fj_node *e = &g->nodes[out->nodes[k]];
		const fj_node *sb = e->op == FJ_OP_PRIMS_EXP ? def_op(g, e->opnds[0], FJ_OP_PRIMS_SUB) : NULL;
		lse = sb && row_value(g, sb->opnds[1], wt);
	}
	if (!lse)
		return false;
	qsort(out->nodes, out->nnodes, sizeof *out->nodes, cmp_u32);
	return true;
}

/* ---- values a mask removes whatever the scores ----
 * to depends on the values `from` only through steps that carry a NaN
 * through (add, sub, mul, div, neg, exp, conversions between floats,
 * layout) and through where's values, never its condition, and at least
 * one where. Then, at each point, `to` either does not depend on `from`
 * at all (a where dropped it) or is NaN when they are: evaluated with every
 * `from` bound to NaN, a value that is not NaN is the value for all of
 * them (the attention kernels skip the blocks a causal mask makes -inf or
 * 0 that way). */
bool fj_attn_drops_only(const fj_graph *g, const fj_vid *from, uint32_t nfrom, fj_vid to, uint8_t *scratch)
{
	uint8_t *dep = scratch, *need = scratch + g->nvalues; /* from reaches v; v reaches to */
	memset(scratch, 0, 2 * (size_t)g->nvalues);
	need[to] = 1;
	for (uint32_t i = g->nnodes; i-- > 0;) {
		const fj_node *n = &g->nodes[i];
		bool on = false;
		for (uint32_t k = 0; k < n->nres; k++)
			on |= need[n->res[k]] != 0;
		for (uint32_t k = 0; on && k < n->nopnds; k++)
			need[n->opnds[k]] = 1;
	}
	for (uint32_t k = 0; k < nfrom; k++)
		dep[from[k]] = 1;
	bool drops = false;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		bool from_in = false, to_out = false;
		for (uint32_t k = 0; k < n->nopnds; k++)
			from_in |= dep[n->opnds[k]] != 0;
		for (uint32_t k = 0; k < n->nres; k++)
			to_out |= need[n->res[k]] != 0;
		if (!from_in)
			continue;
		for (uint32_t k = 0; k < n->nres; k++)
			dep[n->res[k]] = 1;
		if (!to_out)
			continue;
		switch (n->op) {
		case FJ_OP_PRIMS_WHERE:
		case FJ_OP_ATEN_WHERE:
			if (dep[n->opnds[0]])
				return false;
			drops = true;
			break;
		case FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE:
			if (!fj_dtype_is_float(g->values[n->res[0]].type.dtype))
				return false;
			break;
		case FJ_OP_PRIMS_ADD:
		case FJ_OP_PRIMS_SUB:
		case FJ_OP_PRIMS_MUL:
		case FJ_OP_PRIMS_DIV:
		case FJ_OP_PRIMS_NEG:
		case FJ_OP_PRIMS_EXP:
		case FJ_OP_PRIMS_BROADCAST_IN_DIM:
		case FJ_OP_PRIMS_RESHAPE:
		case FJ_OP_PRIMS_TRANSPOSE:
		case FJ_OP_PRIMS_SQUEEZE:
			break;
		default:
			return false;
		}
	}
	return drops;
}

bool fj_attn_depends(const fj_graph *g, const fj_vid *from, uint32_t nfrom, fj_vid to, uint8_t *scratch)
{
	memset(scratch, 0, g->nvalues);
	for (uint32_t k = 0; k < nfrom; k++)
		scratch[from[k]] = 1;
	for (uint32_t i = 0; i < g->nnodes && !scratch[to]; i++) {
		const fj_node *n = &g->nodes[i];
		bool in = false;
		for (uint32_t k = 0; k < n->nopnds; k++)
			in |= scratch[n->opnds[k]] != 0;
		for (uint32_t k = 0; in && k < n->nres; k++)
			scratch[n->res[k]] = 1;
	}
	return scratch[to] != 0;
}
