/* partition_attention.c -- partition{attention=true}: a training forward
 * saves the row logsumexp of an attention instead of its weights.
 *
 * For O = softmax(X) V with X computed from S = Q K (ir/attention.c's
 * pattern, which fj_attn_match_saved finds in a forward that returns P),
 * the split saves P, an [.., M, N] tensor, for the backward, and a forward
 * that returns P cannot be one flash-attention region. After the split,
 * for the pair @f.fw / @f.bw and each such pattern whose P the forward
 * returns as saved values only:
 *   forward: right after the softmax, the logsumexp of X as decompose
 *     writes aten.logsumexp over the last dim, from the softmax's row max MX:
 *       MS  = where(eq(abs(MX), full(inf)), full(0), MX)
 *       LSE = log(sum(exp(X - broadcast_in_dim(MS)))) + MS
 *     f32, X's dims but the last ([.., M]; [B, H, M] when a reshape S' of
 *     a rank-3 S folds the heads into the batch) (ir/attention.c's
 *     lse_group: fuse{attention=true} then makes the forward one region
 *     that also yields LSE); the saved P becomes LSE, O (mm2's result) is
 *     saved right after it unless it already is (a forward output may be
 *     saved besides, as partition does for any value), then the primals X
 *     reads that are not saved yet (an additive mask parameter: a primal
 *     takes no memory of its own; each added once, by the first pattern
 *     that reads it);
 *   backward: P's parameter becomes LSE's (O's and the primals' are
 *     inserted at their saved positions); at its start, clones of the
 *     forward's nodes that compute X from saved values (K's transpose,
 *     S = Q K, S' = reshape(S), the score chain), then
 *     P = exp(X - broadcast_in_dim(LSE)), which replaces the parameter;
 *     the softmax backward's row sum sum(dP * P), dP = G V^T (or
 *     reshape(G V^T)), becomes sum(G * O): the same number
 *     (sum_j (G V^T)_ij P_ij = G_i . (P V)_i), FlashAttention-2's D, read
 *     from [.., M, D] tensors instead of dP, and reshaped to the old row
 *     sum's dims when O is rank 3 and X 4-D.
 * A pattern is left as it is when the forward computes a logsumexp beside
 * it already, returns P as an output, or when X needs an intermediate
 * forward value that is not saved: the clones read saved values, primals
 * and literals only, besides the pattern's nodes, layout ops and nodes
 * computed from constants alone (prims.full, prims.iota and what
 * recomputable ops make of them, as a causal mask), so that the forward
 * saves no more memory than LSE and O in P's place. When the row sum is
 * not found (another spelling of the softmax backward) the rest still
 * holds: correct, one more pass over dP.
 *
 * Invariants: the forward's saved results and the backward's first
 * parameters stay in the same order; nodes stay in topological order; the
 * values the rewrite makes get names neither graph of the pair uses (so the
 * backward's copies keep theirs); nodes left dead are dropped.
 * Complexity: the matcher per matmul of the forward (O(nodes) once a tail
 * matched), one walk back from X per pattern (O(primals) per primal it
 * reaches), then one copy of each graph: O(values + nodes).
 * Reference: Tri Dao, FlashAttention-2 (2023), Algorithm 2: the backward
 * from the logsumexp L and D = rowsum(dO * O). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/build.h"
#include "passes/partition.h"
#include "passes/rebuild.h"

#define NONE UINT32_MAX

typedef struct pat {
	fj_attn m;
	fj_vid o, v;       /* forward: O (mm2's result) and V (its second operand) */
	uint32_t pdef;     /* the node defining P: the logsumexp goes after it */
	uint32_t ppos;     /* P's first saved position */
	uint32_t vpos;     /* V's saved position, or NONE */
	uint32_t opos;     /* O's saved position, or NONE (then it is added) */
	uint32_t prim0, nprim; /* the primals it adds to the saved values: r->prims[prim0 ..] */
	uint32_t rs_node;  /* backward: the row sum sum(dP * P), or NONE */
	fj_vid rs_g;       /* backward: dP's G */
	fj_vid lse;        /* new forward: the logsumexp */
	fj_vid lse_p, o_p; /* new backward: their parameters */
} pat;

/* One saved value of the new pair: the old one at position i, pattern i's
 * LSE or O, or the primal i that a pattern adds. */
typedef struct entry {
	enum { E_OLD, E_LSE, E_O, E_PRIM } kind;
	uint32_t i; /* E_PRIM: the forward value */
} entry;

typedef struct rw {
	fj_context *ctx;
	fj_graph *fw, *bw; /* the pair as partition made it */
	uint32_t K, S;     /* the forward's outputs and saved values */
	uint32_t *spos;    /* per forward value: its first saved position, or NONE */
	uint32_t *pof;     /* per forward value: the pattern whose P it is, or NONE */
	uint8_t *isout;    /* per forward value: returned as an output */
	uint8_t *konst;    /* per forward node: computed from constants alone */
	uint8_t *clone;    /* per forward node: cloned into the backward */
	uint8_t *tmp;      /* per forward node: the clones of the pattern being tried */
	uint8_t *padd;     /* per forward value: a primal that a pattern adds to the saved values */
	fj_vid *stack;     /* the walk back from X */
	fj_vid *prims;     /* the primals the patterns add, pattern by pattern */
	uint32_t nprims, ntry; /* ... and those of the pattern being tried after them */
	pat *pats;
	uint32_t npats;
	entry *ents;
	uint32_t nents;
} rw;

static bool is_lit(const fj_graph *g, fj_vid v) { return v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL; }

static const fj_node *def_op(const fj_graph *g, fj_vid v, fj_op op)
{
	if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_RESULT)
		return NULL;
	const fj_node *n = &g->nodes[g->values[v].def];
	return n->op == op ? n : NULL;
}

/* ---- names ---- */

static bool free_in(const fj_graph *g, const fj_graph *a, const fj_graph *b, const char *s)
{
	size_t n = strlen(s);
	return fj_graph_find_value(g, s, n) == FJ_NOVAL && (!a || fj_graph_find_value(a, s, n) == FJ_NOVAL) &&
	       (!b || fj_graph_find_value(b, s, n) == FJ_NOVAL);
}

/* The first hint_<k>, k counting on from *k, that g, a and b (NULL: none)
 * lack. */
static void next_free(const fj_graph *g, const fj_graph *a, const fj_graph *b, const char *hint, uint32_t *k,
                      char *buf, size_t size)
{
	do
		snprintf(buf, size, "%.120s_%u", hint, (*k)++);
	while (!free_in(g, a, b, buf));
}

/* hint when g, a and b (NULL: none) lack it, else next_free's. */
static void pick(const fj_graph *g, const fj_graph *a, const fj_graph *b, const char *hint, uint32_t *k,
                 char *buf, size_t size)
{
	snprintf(buf, size, "%.120s", hint);
	if (!free_in(g, a, b, buf))
		next_free(g, a, b, hint, k, buf, size);
}

static fj_status rename_to(fj_graph *g, const fj_graph *a, const fj_graph *b, fj_vid v, const char *hint)
{
	char buf[160];
	uint32_t k = 0;
	if (strcmp(g->values[v].name, hint) == 0 && fj_graph_find_value(g, hint, strlen(hint)) == v &&
	    (!a || fj_graph_find_value(a, hint, strlen(hint)) == FJ_NOVAL) &&
	    (!b || fj_graph_find_value(b, hint, strlen(hint)) == FJ_NOVAL))
		return FJ_OK;
	pick(g, a, b, hint, &k, buf, sizeof buf);
	return fj_graph_rename_value(g, v, buf);
}

/* Names the results of g's nodes from n0 on hint_<k>, free in g, a and b. */
static fj_status name_nodes(fj_graph *g, const fj_graph *a, const fj_graph *b, uint32_t n0, const char *hint)
{
	char buf[160];
	uint32_t k = 0;
	for (uint32_t ni = n0; ni < g->nnodes; ni++)
		for (uint32_t i = 0; i < g->nodes[ni].nres; i++) {
			next_free(g, a, b, hint, &k, buf, sizeof buf);
			if (fj_graph_rename_value(g, g->nodes[ni].res[i], buf) != FJ_OK)
				return FJ_ERR_NOMEM;
		}
	return FJ_OK;
}

/* ---- building ---- */

static fj_vid full(fj_builder *b, const fj_type *like, double value)
{
	fj_named_attr at[3] = {
		{"shape", fj_attr_shape(b->g, like->dims, like->rank)},
		{"value", fj_attr_float(value)},
		{"dtype", fj_attr_dtype(FJ_DT_F32)},
	};
	return fj_b_op1(b, FJ_OP_PRIMS_FULL, NULL, 0, at, 3);
}

/* The row value r (rank-1) broadcast back along the last dim of `to`. */
static fj_vid row_bcast(fj_builder *b, fj_vid r, const fj_type *to)
{
	int64_t bd[FJ_MAX_RANK];
	for (int i = 0; i + 1 < to->rank; i++)
		bd[i] = i;
	fj_named_attr at[2] = {
		{"shape", fj_attr_shape(b->g, to->dims, to->rank)},
		{"broadcast_dims", fj_attr_ints(b->g, bd, (uint32_t)to->rank - 1)},
	};
	return fj_b_op1(b, FJ_OP_PRIMS_BROADCAST_IN_DIM, &r, 1, at, 2);
}

static fj_vid sum_last(fj_builder *b, fj_vid x, int rank)
{
	int64_t d = rank - 1;
	fj_named_attr at = {"dims", fj_attr_ints(b->g, &d, 1)};
	return fj_b_op1(b, FJ_OP_PRIMS_SUM, &x, 1, &at, 1);
}

static fj_vid op2(fj_builder *b, fj_op op, fj_vid x, fj_vid y)
{
	return fj_b_op1(b, op, (fj_vid[]){x, y}, 2, NULL, 0);
}

/* ---- the patterns ---- */

static bool member(const pat *p, uint32_t ni)
{
	for (uint32_t k = 0; k < p->m.nnodes; k++)
		if (p->m.nodes[k] == ni)
			return true;
	return false;
}

static bool tried(const rw *r, fj_vid v)
{
	for (uint32_t i = r->nprims; i < r->nprims + r->ntry; i++)
		if (r->prims[i] == v)
			return true;
	return false;
}

/* Can the backward compute X of p from saved values and primals? Marks in
 * r->tmp the forward's nodes to clone, walking back from X, and lists after
 * r->prims[r->nprims] the r->ntry primals it reads that are not saved (nor
 * added by an earlier pattern). */
static bool closure(rw *r, const pat *p)
{
	const fj_graph *fw = r->fw;
	memset(r->tmp, 0, fw->nnodes ? fw->nnodes : 1);
	r->ntry = 0;
	uint32_t top = 0;
	r->stack[top++] = p->m.x;
	while (top) {
		fj_vid v = r->stack[--top];
		if (is_lit(fw, v) || r->spos[v] != NONE || r->padd[v])
			continue;
		if (fw->values[v].kind == FJ_VK_PARAM) {
			if (!tried(r, v))
				r->prims[r->nprims + r->ntry++] = v;
			continue;
		}
		if (fw->values[v].kind != FJ_VK_RESULT)
			return false;
		uint32_t ni = fw->values[v].def;
		if (r->tmp[ni])
			continue;
		const fj_node *n = &fw->nodes[ni];
		if (!member(p, ni) && !r->konst[ni] && !(fj_op_info(r->ctx, n->op)->flags & FJ_OPF_LAYOUT))
			return false;
		r->tmp[ni] = 1;
		for (uint32_t o = 0; o < n->nopnds; o++)
			r->stack[top++] = n->opnds[o];
	}
	return true;
}

static bool is_p_param(const rw *r, const pat *p, fj_vid v)
{
	const fj_value *val = &r->bw->values[v];
	return val->kind == FJ_VK_PARAM && val->def < r->S && r->fw->results[r->K + val->def] == p->m.p;
}

/* A transpose of the last two dims of a rank-`rank` value. */
static bool swaps_last(const fj_context *ctx, const fj_node *n, int rank)
{
	const fj_attr *a = fj_node_attr(ctx, n, "perm");
	if (!a || a->kind != FJ_AK_LIST || a->n != (uint32_t)rank)
		return false;
	for (int i = 0; i < rank; i++) {
		int want = i < rank - 2 ? i : i == rank - 2 ? rank - 1 : rank - 2;
		if (fj_attr_as_int(&a->u.items[i]) != want)
			return false;
	}
	return true;
}

/* The softmax backward's row sum in the old backward: %t = mul(P, dP) (either
 * order) with dP = matmul(G, transpose(V)), or a reshape of it when the
 * heads are folded into the matmuls' batch, and %r = sum(%t) over the last
 * dim. */
static void find_rowsum(rw *r, pat *p)
{
	const fj_graph *bw = r->bw;
	p->rs_node = NONE;
	if (p->vpos == NONE)
		return;
	fj_vid vb = bw->params[p->vpos];
	int rank = r->fw->values[p->m.p].type.rank;
	const fj_type *ot = &r->fw->values[p->o].type;
	for (uint32_t ni = 0; ni < bw->nnodes; ni++) {
		const fj_node *t = &bw->nodes[ni];
		if (t->op != FJ_OP_PRIMS_MUL || t->nopnds != 2)
			continue;
		for (int s = 0; s < 2; s++) {
			if (is_lit(bw, t->opnds[s]) || !is_p_param(r, p, t->opnds[s]))
				continue;
			fj_vid dv = t->opnds[1 - s];
			const fj_node *rsh = def_op(bw, dv, FJ_OP_PRIMS_RESHAPE);
			if (rsh && rsh->nopnds == 1)
				dv = rsh->opnds[0];
			const fj_node *dp = def_op(bw, dv, FJ_OP_PRIMS_MATMUL);
			const fj_node *vt = dp && dp->nopnds == 2 ? def_op(bw, dp->opnds[1], FJ_OP_PRIMS_TRANSPOSE) : NULL;
			if (!vt || vt->opnds[0] != vb || !swaps_last(r->ctx, vt, ot->rank) || is_lit(bw, dp->opnds[0]) ||
			    !fj_type_same_dims(&bw->values[dp->opnds[0]].type, ot))
				continue;
			for (uint32_t k = ni + 1; k < bw->nnodes; k++) {
				const fj_node *sn = &bw->nodes[k];
				if (sn->op == FJ_OP_PRIMS_SUM && sn->nopnds == 1 && sn->opnds[0] == t->res[0] &&
				    fj_node_reduced_mask(r->ctx, sn, rank) == 1u << (rank - 1)) {
					p->rs_node = k;
					p->rs_g = dp->opnds[0];
					return;
				}
			}
		}
	}
}

static fj_status find_patterns(rw *r, uint32_t *found)
{
	fj_graph *fw = r->fw;
	uint8_t *scratch = fj_alloc(r->ctx, fw->nnodes ? fw->nnodes : 1);
	if (!scratch)
		return FJ_ERR_NOMEM;
	for (uint32_t ni = 0; ni < fw->nnodes; ni++) {
		if (fw->nodes[ni].op != FJ_OP_PRIMS_MATMUL)
			continue;
		pat *p = &r->pats[r->npats];
		memset(p, 0, sizeof *p);
		if (!fj_attn_match_saved(fw, ni, scratch, &p->m) || r->spos[p->m.p] == NONE)
			continue;
		(*found)++;
		if (p->m.sum2 != FJ_NONODE || r->isout[p->m.p] || r->pof[p->m.p] != NONE || !closure(r, p))
			continue;
		p->prim0 = r->nprims;
		p->nprim = r->ntry;
		for (uint32_t i = 0; i < r->ntry; i++)
			r->padd[r->prims[r->nprims + i]] = 1;
		r->nprims += r->ntry;
		const fj_node *mm2 = &fw->nodes[p->m.mm2];
		p->o = mm2->res[0];
		p->v = mm2->opnds[1];
		p->pdef = fw->values[p->m.p].def;
		p->ppos = r->spos[p->m.p];
		p->vpos = is_lit(fw, p->v) ? NONE : r->spos[p->v];
		p->opos = r->spos[p->o];
		p->lse = p->lse_p = p->o_p = FJ_NOVAL;
		find_rowsum(r, p);
		for (uint32_t k = 0; k < fw->nnodes; k++)
			r->clone[k] |= r->tmp[k];
		r->pof[p->m.p] = r->npats++;
	}
	fj_free(r->ctx, scratch, fw->nnodes ? fw->nnodes : 1);
	return FJ_OK;
}

/* The new saved list, in the old order: P's place holds LSE, followed by O
 * when O was not saved, then the primals the pattern adds. */
static void saved_entries(rw *r)
{
	r->nents = 0;
	for (uint32_t j = 0; j < r->S; j++) {
		fj_vid v = r->fw->results[r->K + j];
		uint32_t k = is_lit(r->fw, v) ? NONE : r->pof[v];
		if (k == NONE) {
			r->ents[r->nents++] = (entry){E_OLD, j};
			continue;
		}
		r->ents[r->nents++] = (entry){E_LSE, k};
		if (j != r->pats[k].ppos)
			continue;
		if (r->pats[k].opos == NONE)
			r->ents[r->nents++] = (entry){E_O, k};
		for (uint32_t i = 0; i < r->pats[k].nprim; i++)
			r->ents[r->nents++] = (entry){E_PRIM, r->prims[r->pats[k].prim0 + i]};
	}
}

/* ---- the forward ---- */

/* The logsumexp of p's scores after the softmax (rule_logsumexp's form). */
/* Copies node n into rb's graph, its operands mapped by rb. */
static fj_status copy_mapped(fj_context *ctx, fj_rebuild *rb, const fj_node *n)
{
	fj_vid ostack[16];
	fj_vid *ops = n->nopnds <= 16 ? ostack : fj_alloc(ctx, n->nopnds * sizeof *ops);
	if (!ops)
		return FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < n->nopnds; i++)
		ops[i] = fj_pass_rebuild_value(rb, n->opnds[i]);
	fj_status st = fj_pass_rebuild_copy(rb, n, ops) == FJ_NONODE ? FJ_ERR_NOMEM : FJ_OK;
	if (ops != ostack)
		fj_free(ctx, ops, n->nopnds * sizeof *ops);
	return st;
}

static fj_status emit_lse(rw *r, fj_rebuild *rb, pat *p)
{
	fj_graph *g = rb->g;
	uint32_t n0 = g->nnodes;
	fj_builder b;
	fj_builder_init(&b, g, r->fw->nodes[p->pdef].loc);
	fj_vid mx = rb->map[p->m.mx], x = rb->map[p->m.x];
	/* copies: building nodes may move the value array (not the dims) */
	fj_type mt = g->values[mx].type, xt = g->values[x].type;
	fj_vid a = fj_b_op1(&b, FJ_OP_PRIMS_ABS, &mx, 1, NULL, 0);
	fj_vid e = op2(&b, FJ_OP_PRIMS_EQ, a, full(&b, &mt, INFINITY));
	fj_vid ms = fj_b_op1(&b, FJ_OP_PRIMS_WHERE, (fj_vid[]){e, full(&b, &mt, 0.0), mx}, 3, NULL, 0);
	fj_vid d = op2(&b, FJ_OP_PRIMS_SUB, x, row_bcast(&b, ms, &xt));
	fj_vid ex = fj_b_op1(&b, FJ_OP_PRIMS_EXP, &d, 1, NULL, 0);
	fj_vid s2 = sum_last(&b, ex, xt.rank);
	fj_vid lg = fj_b_op1(&b, FJ_OP_PRIMS_LOG, &s2, 1, NULL, 0);
	p->lse = op2(&b, FJ_OP_PRIMS_ADD, lg, ms);
	fj_status st = fj_b_status(&b);
	if (st == FJ_OK)
		st = name_nodes(g, r->fw, r->bw, n0, "lse");
	if (st == FJ_OK)
		st = rename_to(g, r->fw, r->bw, p->lse, "lse");
	return st;
}

static fj_status new_forward(rw *r, fj_graph **out)
{
	fj_graph *fw = r->fw;
	fj_rebuild rb;
	fj_status st = fj_pass_rebuild_begin(&rb, fw);
	fj_vid *res = fj_alloc(r->ctx, (r->K + r->nents + 1) * sizeof *res);
	if (!res)
		st = FJ_ERR_NOMEM;
	for (uint32_t ni = 0; ni < fw->nnodes && st == FJ_OK; ni++) {
		const fj_node *n = &fw->nodes[ni];
		st = copy_mapped(r->ctx, &rb, n);
		for (uint32_t k = 0; k < r->npats && st == FJ_OK; k++)
			if (r->pats[k].pdef == ni)
				st = emit_lse(r, &rb, &r->pats[k]);
	}
	if (st == FJ_OK) {
		uint32_t nr = 0;
		for (uint32_t i = 0; i < r->K; i++)
			res[nr++] = fj_pass_rebuild_value(&rb, fw->results[i]);
		for (uint32_t i = 0; i < r->nents; i++) {
			const entry *e = &r->ents[i];
			res[nr++] = e->kind == E_OLD    ? fj_pass_rebuild_value(&rb, fw->results[r->K + e->i])
			            : e->kind == E_PRIM ? rb.map[e->i]
			            : e->kind == E_LSE  ? r->pats[e->i].lse
			                                : rb.map[r->pats[e->i].o];
		}
		st = fj_graph_set_results(rb.g, res, nr);
	}
	if (res)
		fj_free(r->ctx, res, (r->K + r->nents + 1) * sizeof *res);
	if (rb.map)
		fj_free(r->ctx, rb.map, (rb.nmap ? rb.nmap : 1) * sizeof *rb.map);
	if (st != FJ_OK) {
		fj_graph_destroy(rb.g);
		return st;
	}
	*out = rb.g;
	return FJ_OK;
}

/* ---- the backward ---- */

static fj_vid add_param(fj_graph *g, const char *name, const fj_value *like)
{
	fj_vid v = fj_graph_add_param(g, name, like->type, like->loc);
	if (v != FJ_NOVAL) {
		g->values[v].nograd = like->nograd;
		g->values[v].recomputable = like->recomputable;
	}
	return v;
}

static fj_status backward_params(rw *r, const fj_graph *nfw, fj_graph *g, fj_vid *bmap, fj_vid *fmap)
{
	const fj_graph *fw = r->fw, *bw = r->bw;
	char buf[160];
	uint32_t k = 0;
	for (uint32_t i = 0; i < r->nents; i++) {
		const entry *e = &r->ents[i];
		fj_vid v;
		if (e->kind == E_OLD) {
			fj_vid old = bw->params[e->i];
			v = add_param(g, bw->values[old].name, &bw->values[old]);
			fj_vid fv = fw->results[r->K + e->i];
			bmap[old] = v;
			if (!is_lit(fw, fv) && fmap[fv] == FJ_NOVAL)
				fmap[fv] = v;
		} else if (e->kind == E_PRIM) {
			pick(g, bw, NULL, fw->values[e->i].name, &k, buf, sizeof buf);
			v = add_param(g, buf, &fw->values[e->i]);
			fmap[e->i] = v;
		} else {
			pat *p = &r->pats[e->i];
			const fj_value *like = e->kind == E_LSE ? &nfw->values[p->lse] : &fw->values[p->o];
			pick(g, bw, NULL, like->name, &k, buf, sizeof buf);
			v = add_param(g, buf, like);
			if (e->kind == E_O)
				p->o_p = v;
			else if (p->lse_p == FJ_NOVAL)
				p->lse_p = v;
		}
		if (v == FJ_NOVAL)
			return FJ_ERR_NOMEM;
	}
	for (uint32_t i = r->S; i < bw->nparams; i++) {
		fj_vid old = bw->params[i];
		if ((bmap[old] = add_param(g, bw->values[old].name, &bw->values[old])) == FJ_NOVAL)
			return FJ_ERR_NOMEM;
	}
	for (uint32_t i = 0; i < r->npats; i++)
		if (r->pats[i].opos != NONE)
			r->pats[i].o_p = fmap[r->pats[i].o];
	return FJ_OK;
}

/* Copies node n of rb's old graph into its new one (operands mapped);
 * results mapped already (saved besides) keep their mapping; a copy whose
 * name the new graph or `avoid` has gets a fresh one. */
static fj_status copy_into(rw *r, fj_rebuild *rb, const fj_node *n, const fj_graph *avoid)
{
	fj_graph *g = rb->g;
	enum { STK = 16 };
	fj_vid ostack[STK], pstack[STK];
	bool cstack[STK];
	fj_vid *ops = n->nopnds <= STK ? ostack : fj_alloc(r->ctx, n->nopnds * sizeof *ops);
	fj_vid *prev = n->nres <= STK ? pstack : fj_alloc(r->ctx, n->nres * sizeof *prev);
	bool *clash = n->nres <= STK ? cstack : fj_alloc(r->ctx, n->nres * sizeof *clash);
	fj_status st = ops && prev && clash ? FJ_OK : FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < n->nopnds && st == FJ_OK; i++) {
		ops[i] = fj_pass_rebuild_value(rb, n->opnds[i]);
		if (ops[i] == FJ_NOVAL && n->opnds[i] != FJ_NOVAL)
			st = fj_error(r->ctx, n->loc, "partition{attention}: internal error: %%%s is not available in @%s",
			              rb->old->values[n->opnds[i]].name, g->name);
	}
	for (uint32_t i = 0; i < n->nres && st == FJ_OK; i++) {
		prev[i] = rb->map[n->res[i]];
		clash[i] = !free_in(g, avoid, NULL, rb->old->values[n->res[i]].name);
	}
	uint32_t k = st == FJ_OK ? fj_pass_rebuild_copy(rb, n, ops) : FJ_NONODE;
	if (st == FJ_OK && k == FJ_NONODE)
		st = FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < n->nres && st == FJ_OK; i++) {
		fj_vid nv = g->nodes[k].res[i];
		if (clash[i]) {
			char buf[160];
			uint32_t c = 0;
			next_free(g, avoid, NULL, rb->old->values[n->res[i]].name, &c, buf, sizeof buf);
			st = fj_graph_rename_value(g, nv, buf);
		}
		if (prev[i] != FJ_NOVAL)
			rb->map[n->res[i]] = prev[i];
	}
	if (st == FJ_OK)
		g->nodes[k].recomputable = FJ_TRI_UNSET;
	if (ops && ops != ostack)
		fj_free(r->ctx, ops, n->nopnds * sizeof *ops);
	if (prev && prev != pstack)
		fj_free(r->ctx, prev, n->nres * sizeof *prev);
	if (clash && clash != cstack)
		fj_free(r->ctx, clash, n->nres * sizeof *clash);
	return st;
}

/* P = exp(X - broadcast_in_dim(LSE)) at the start of the backward. */
static fj_status recompute_p(rw *r, fj_graph *g, const fj_vid *fmap, pat *p, fj_vid *pb)
{
	uint32_t n0 = g->nnodes;
	fj_builder b;
	fj_builder_init(&b, g, r->fw->nodes[p->pdef].loc);
	fj_vid x = fmap[p->m.x];
	fj_type xt = g->values[x].type; /* a copy: building moves the value array */
	fj_vid d = op2(&b, FJ_OP_PRIMS_SUB, x, row_bcast(&b, p->lse_p, &xt));
	*pb = fj_b_op1(&b, FJ_OP_PRIMS_EXP, &d, 1, NULL, 0);
	fj_status st = fj_b_status(&b);
	const char *pname = r->fw->values[p->m.p].name;
	if (st == FJ_OK)
		st = name_nodes(g, r->bw, NULL, n0, pname);
	/* P's parameter is gone: its name is free for the recomputed P */
	if (st == FJ_OK)
		st = rename_to(g, NULL, NULL, *pb, pname);
	return st;
}

/* sum(G * O) over the last dim, in place of the old row sum `rs` (then
 * reshaped to its dims when the heads are folded into O's batch). */
static fj_status rowsum_from_o(rw *r, fj_graph *g, const fj_vid *bmap, const pat *p, const fj_node *rs,
                               fj_vid *out)
{
	uint32_t n0 = g->nnodes;
	fj_builder b;
	fj_builder_init(&b, g, rs->loc);
	fj_vid gr = bmap[p->rs_g];
	fj_vid t = op2(&b, FJ_OP_PRIMS_MUL, gr, p->o_p);
	*out = sum_last(&b, t, r->fw->values[p->o].type.rank);
	const fj_type *rt = &r->bw->values[rs->res[0]].type;
	if (fj_b_status(&b) == FJ_OK && !fj_type_same_dims(&g->values[*out].type, rt)) {
		fj_named_attr at = {"shape", fj_attr_shape(g, rt->dims, rt->rank)};
		*out = fj_b_op1(&b, FJ_OP_PRIMS_RESHAPE, out, 1, &at, 1);
	}
	fj_status st = fj_b_status(&b);
	const char *rname = r->bw->values[rs->res[0]].name;
	if (st == FJ_OK)
		st = name_nodes(g, r->bw, NULL, n0, rname);
	/* the old row sum is not copied: its name is free */
	if (st == FJ_OK)
		st = rename_to(g, NULL, NULL, *out, rname);
	return st;
}

static fj_status new_backward(rw *r, const fj_graph *nfw, fj_graph **out)
{
	fj_graph *fw = r->fw, *bw = r->bw;
	fj_graph *g = fj_graph_create(bw->module, bw->name);
	uint32_t nbv = bw->nvalues ? bw->nvalues : 1, nfv = fw->nvalues ? fw->nvalues : 1;
	fj_vid *bmap = fj_alloc(r->ctx, nbv * sizeof *bmap), *fmap = fj_alloc(r->ctx, nfv * sizeof *fmap);
	fj_status st = g && bmap && fmap ? FJ_OK : FJ_ERR_NOMEM;
	if (st == FJ_OK) {
		g->loc = bw->loc;
		g->num_fwd_outputs = bw->num_fwd_outputs;
		memset(bmap, 0xff, nbv * sizeof *bmap);
		memset(fmap, 0xff, nfv * sizeof *fmap);
		st = backward_params(r, nfw, g, bmap, fmap);
	}
	/* the scores from saved values, then P */
	fj_rebuild rbf = {.old = fw, .g = g, .map = fmap, .nmap = fw->nvalues};
	for (uint32_t ni = 0; ni < fw->nnodes && st == FJ_OK; ni++)
		if (r->clone[ni])
			st = copy_into(r, &rbf, &fw->nodes[ni], bw);
	for (uint32_t k = 0; k < r->npats && st == FJ_OK; k++) {
		fj_vid pb = FJ_NOVAL;
		st = recompute_p(r, g, fmap, &r->pats[k], &pb);
		for (uint32_t j = 0; j < r->S && st == FJ_OK; j++)
			if (r->fw->results[r->K + j] == r->pats[k].m.p)
				bmap[bw->params[j]] = pb;
	}
	/* the old backward, its row sums from O */
	fj_rebuild rbb = {.old = bw, .g = g, .map = bmap, .nmap = bw->nvalues};
	for (uint32_t ni = 0; ni < bw->nnodes && st == FJ_OK; ni++) {
		const fj_node *n = &bw->nodes[ni];
		uint32_t k = 0;
		while (k < r->npats && r->pats[k].rs_node != ni)
			k++;
		if (k < r->npats)
			st = rowsum_from_o(r, g, bmap, &r->pats[k], n, &bmap[n->res[0]]);
		else
			st = copy_into(r, &rbb, n, NULL);
	}
	if (st == FJ_OK) {
		fj_vid *res = fj_alloc(r->ctx, (bw->nresults + 1) * sizeof *res);
		if (!res)
			st = FJ_ERR_NOMEM;
		for (uint32_t i = 0; i < bw->nresults && st == FJ_OK; i++)
			res[i] = fj_pass_rebuild_value(&rbb, bw->results[i]);
		if (st == FJ_OK)
			st = fj_graph_set_results(g, res, bw->nresults);
		if (res)
			fj_free(r->ctx, res, (bw->nresults + 1) * sizeof *res);
	}
	if (bmap)
		fj_free(r->ctx, bmap, nbv * sizeof *bmap);
	if (fmap)
		fj_free(r->ctx, fmap, nfv * sizeof *fmap);
	if (st != FJ_OK) {
		fj_graph_destroy(g);
		return st;
	}
	*out = g;
	return FJ_OK;
}

/* ---- dead nodes ---- */

/* Replaces *gp by a copy without the nodes no result needs (when it has any). */
static fj_status prune(fj_context *ctx, fj_graph **gp)
{
	fj_graph *g = *gp;
	size_t uv = g->nvalues ? g->nvalues : 1, ln = g->nnodes ? g->nnodes : 1;
	bool *used, *live;
	fj_status st = fj_pass_liveness(g, &used, &live);
	if (st != FJ_OK)
		return st;
	uint32_t dead = 0;
	for (uint32_t ni = 0; ni < g->nnodes; ni++)
		dead += !live[ni];
	fj_rebuild rb = {0};
	if (dead)
		st = fj_pass_rebuild_begin(&rb, g);
	for (uint32_t ni = 0; ni < g->nnodes && dead && st == FJ_OK; ni++) {
		const fj_node *n = &g->nodes[ni];
		if (!live[ni])
			continue;
		st = copy_mapped(ctx, &rb, n);
	}
	if (dead && st == FJ_OK) {
		fj_vid *res = fj_alloc(ctx, (g->nresults + 1) * sizeof *res);
		if (!res)
			st = FJ_ERR_NOMEM;
		for (uint32_t i = 0; i < g->nresults && st == FJ_OK; i++)
			res[i] = fj_pass_rebuild_value(&rb, g->results[i]);
		if (st == FJ_OK)
			st = fj_graph_set_results(rb.g, res, g->nresults);
		if (res)
			fj_free(ctx, res, (g->nresults + 1) * sizeof *res);
	}
	if (rb.map)
		fj_free(ctx, rb.map, (rb.nmap ? rb.nmap : 1) * sizeof *rb.map);
	fj_free(ctx, used, uv);
	fj_free(ctx, live, ln);
	if (dead && st == FJ_OK) {
		fj_graph_destroy(g);
		*gp = rb.g;
	} else {
		fj_graph_destroy(rb.g);
	}
	return st;
}

/* ---- the driver ---- */

fj_status fj_pass_partition_attention(fj_graph **fwp, fj_graph **bwp, uint32_t *found, uint32_t *done)
{
	fj_graph *fw = *fwp, *bw = *bwp;
	rw r = {.ctx = fj_graph_ctx(fw), .fw = fw, .bw = bw};
	*found = *done = 0;
	if (fw->num_fwd_outputs < 0 || (uint64_t)fw->num_fwd_outputs > fw->nresults)
		return FJ_OK;
	r.K = (uint32_t)fw->num_fwd_outputs;
	r.S = fw->nresults - r.K;
	if (r.S > bw->nparams)
		return FJ_OK;
	uint32_t nv = fw->nvalues ? fw->nvalues : 1, nn = fw->nnodes ? fw->nnodes : 1, nops = 1, nmm = 0;
	uint32_t np = fw->nparams + 1;
	for (uint32_t ni = 0; ni < fw->nnodes; ni++) {
		nops += fw->nodes[ni].nopnds;
		nmm += fw->nodes[ni].op == FJ_OP_PRIMS_MATMUL;
	}
	if (!nmm)
		return FJ_OK;
	r.spos = fj_alloc(r.ctx, nv * sizeof *r.spos);
	r.pof = fj_alloc(r.ctx, nv * sizeof *r.pof);
	r.isout = fj_alloc(r.ctx, nv);
	r.konst = fj_alloc(r.ctx, nn);
	r.clone = fj_alloc(r.ctx, nn);
	r.tmp = fj_alloc(r.ctx, nn);
	r.padd = fj_alloc(r.ctx, nv);
	r.stack = fj_alloc(r.ctx, nops * sizeof *r.stack);
	r.prims = fj_alloc(r.ctx, np * sizeof *r.prims);
	r.pats = fj_alloc(r.ctx, nmm * sizeof *r.pats);
	r.ents = fj_alloc(r.ctx, (r.S + nmm + np) * sizeof *r.ents);
	fj_status st = r.spos && r.pof && r.isout && r.konst && r.clone && r.tmp && r.padd && r.stack && r.prims &&
	               r.pats && r.ents ? FJ_OK : FJ_ERR_NOMEM;
	fj_graph *nfw = NULL, *nbw = NULL;
	if (st != FJ_OK)
		goto done;
	memset(r.spos, 0xff, nv * sizeof *r.spos);
	memset(r.pof, 0xff, nv * sizeof *r.pof);
	memset(r.isout, 0, nv);
	memset(r.padd, 0, nv);
	memset(r.clone, 0, nn);
	for (uint32_t i = 0; i < fw->nresults; i++) {
		fj_vid v = fw->results[i];
		if (is_lit(fw, v))
			continue;
		if (i < r.K)
			r.isout[v] = 1;
		else if (r.spos[v] == NONE)
			r.spos[v] = i - r.K;
	}
	for (uint32_t ni = 0; ni < fw->nnodes; ni++) {
		const fj_node *n = &fw->nodes[ni];
		bool k = (fj_op_info(r.ctx, n->op)->flags & FJ_OPF_RECOMPUTABLE) && !n->body;
		for (uint32_t o = 0; o < n->nopnds && k; o++)
			k = is_lit(fw, n->opnds[o]) ||
			    (fw->values[n->opnds[o]].kind == FJ_VK_RESULT && r.konst[fw->values[n->opnds[o]].def]);
		r.konst[ni] = k;
	}
	if ((st = find_patterns(&r, found)) != FJ_OK || !r.npats)
		goto done;
	saved_entries(&r);
	if ((st = new_forward(&r, &nfw)) != FJ_OK || (st = new_backward(&r, nfw, &nbw)) != FJ_OK ||
	    (st = prune(r.ctx, &nfw)) != FJ_OK || (st = prune(r.ctx, &nbw)) != FJ_OK)
		goto done;
	fj_graph_destroy(fw);
	fj_graph_destroy(bw);
	*fwp = nfw;
	*bwp = nbw;
	nfw = nbw = NULL;
	*done = r.npats;
done:
	fj_graph_destroy(nfw);
	fj_graph_destroy(nbw);
	if (r.spos)
		fj_free(r.ctx, r.spos, nv * sizeof *r.spos);
	if (r.pof)
		fj_free(r.ctx, r.pof, nv * sizeof *r.pof);
	if (r.isout)
		fj_free(r.ctx, r.isout, nv);
	if (r.konst)
		fj_free(r.ctx, r.konst, nn);
	if (r.clone)
		fj_free(r.ctx, r.clone, nn);
	if (r.tmp)
		fj_free(r.ctx, r.tmp, nn);
	if (r.padd)
		fj_free(r.ctx, r.padd, nv);
	if (r.stack)
		fj_free(r.ctx, r.stack, nops * sizeof *r.stack);
	if (r.prims)
		fj_free(r.ctx, r.prims, np * sizeof *r.prims);
	if (r.pats)
		fj_free(r.ctx, r.pats, nmm * sizeof *r.pats);
	if (r.ents)
		fj_free(r.ctx, r.ents, (r.S + nmm + np) * sizeof *r.ents);
	if (st == FJ_ERR_NOMEM)
		fw->module->oom = true;
	return st;
}
