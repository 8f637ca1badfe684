/* fuse.c -- the `fuse` pass: groups prims into fusion.kernel regions, each to
 * become exactly one kernel (IR.md §4).
 *
 * Purpose: the fewest kernels, and the fewest intermediate tensors written to
 * memory, that the code generators can still emit as one loop nest each.
 *
 * Node classes (per live node; dead nodes are dropped, as DCE would):
 *   outside   aten.* ops (left by decompose{target=...}) and existing
 *             fusion.kernel nodes: copied as plain nodes, never in a region;
 *   fusible   pointwise, layout, reduction and source prims, prims.rand;
 *   matmul    prims.matmul: a region of its own, which pointwise consumers may
 *             join as its epilogue;
 *   solo      prims.take, gather, scatter_add, index_add (opaque) and
 *             prims.cumsum (scan): always a region of exactly one node;
 *   free      a duplicable node, copied into every region that uses it instead
 *             of belonging to one: a source (full, iota), a layout op or a
 *             convert_element_type, or a pointwise op, whose operands are all
 *             parameters, literals or other duplicable nodes (a pure function
 *             of the graph's inputs; a pointwise cone may read at most 3
 *             distinct parameters and hold at most 48 nodes), that is not
 *             returned and whose consumers all go into regions. Broadcast
 *             biases, constants, casts of inputs and x_hat-like values are
 *             thus recomputed where they are needed, never written to memory
 *             to be read back (recomputing reads only inputs, which exist
 *             anyway). Take, gather and scatter regions take layout copies
 *             only: they say how an operand is read (an index broadcast to
 *             [N,1]); the opaque op stays the region's only computation. A
 *             matmul region takes layout copies (a transposed weight) and
 *             pointwise ones within the prologue budget (the cost rule at
 *             PROLOGUE_BUDGET: cost per element times the evaluations the
 *             packing makes), evaluated while packing its operands.
 *
 * Legality: the rules every region obeys (checked on the candidate union
 * before each merge; a region is the set of its members, in node order).
 *   L1 Opaque and scan ops: a solo region never merges. A matmul region holds
 *      one prims.matmul and pointwise nodes of the matmul's result shape that
 *      the matmul does not read (an epilogue, evaluated at each result point
 *      from the matmul value, from each other or from other kernels' values:
 *      no layout op, no reduction; broadcasts of inputs come in as free
 *      copies). Its only
 *      prologue is layout ops read by the matmul (or by each other) alone:
 *      how an operand computed by another kernel is read, X^T in the weight
 *      gradient X^T dY, which the packing reads in place instead of a
 *      transpose kernel writing it out; no computation of another kernel's
 *      value, which would be repeated per packed panel, and free copies
 *      only within the prologue budget.
 *   L2 Iteration space: a region with reductions has a domain D (a shape) and
 *      a set K of reduced dims: every reduction of the region reduces exactly
 *      the dims K of an operand of shape exactly D (e.g. f32[N,4096] over
 *      dims [1]). R is D without the dims K.
 *   L2b Column sums (persistent_inner_outer): besides, a region may hold
 *      prims.sum nodes over exactly the other dims of the same D (not K)
 *      when K holds D's innermost dim and a row value of D's shape exists
 *      (the region is persistent): a normalization backward's weight and
 *      bias gradients. Their operands may be row values; their results (the
 *      columns C: D's K dims) flow through pointwise ops only, never into a
 *      row value or a reduction, and leave as outputs of C's element count.
 *   L3 Values computed from a reduction of the region ("per-row" values, of
 *      R's element count, or "per-element" values of shape D) may only flow
 *      through pointwise ops, further reductions (the chained persistent
 *      pattern), order-preserving reshapes/squeezes/size-1 broadcasts of
 *      per-row values, and broadcasts back from a per-row value to exactly D
 *      whose non-unit operand dims are exactly the kept dims of D, in order
 *      (the normalization pattern: reduce, broadcast back, pointwise). No
 *      transpose, slice, pad, cat or rev of them. A broadcast back needs a
 *      kept dim (K is not every dim of D): a full reduction is never broadcast
 *      back inside its own kernel.
 *   L4 Outputs (member values used outside the region or returned): in a
 *      region with reductions, each has the element count of D or of R; in a
 *      region without, all have the same element count (L2b: or that of C).
 *      Values that stay
 *      inside may have any shape (broadcast inputs, sliced prologues ...):
 *      the code generator computes them inline.
 *   L5 No cycle: the graph of regions stays acyclic. Before each merge of A
 *      and B, a breadth-first walk from the consumers of A and B (expanding
 *      each region reached to all its members) must not come back into A or B.
 *      Every unit carries a level that climbs along every path (kept valid
 *      across merges), so the walk stays below the higher of the two levels,
 *      and regions of equal level need no walk at all.
 *   L6 At most 128 operands + results per kernel (launch parameter space;
 *      a free copy's value counts as one operand, standing for its inputs).
 *   L7 At most FJ_MAX_KERNEL_REDUCTIONS (ir.h) reductions along the rows,
 *      and as many column sums, per kernel: what codegen accepts. Horizontal
 *      merging of many same-space reductions (the bias gradients of a deep
 *      stack) stops there and opens another kernel.
 * Schedules follow (passes/schedule.c): no reduction -> pointwise (or
 * transpose); a reduction whose results are broadcast back and consumed in
 * the region (L3) -> persistent_inner/outer (persistent_inner_outer with L2b's
 * column sums), one kernel that keeps the rows in
 * registers/shared memory (the backend falls back to several passes over the
 * row when a row is too big); otherwise reduction_inner/outer.
 *
 * Algorithm (greedy, deterministic):
 *   1. classify nodes; use lists of the live nodes; union-find over nodes,
 *      each region a sorted member list;
 *   2. vertical: for each node in order, try to merge its region with the
 *      region of each producer (operand order; a matmul, with its layout
 *      producers, and those that only matmuls read are left to them, L1);
 *      repeat to a fixed point;
 *   3. horizontal: regions that read the same input (a parameter or an outer
 *      value, directly or through free copies) are merged when legal, and so
 *      are reduction regions over the same (D, K); then step 2 again, until
 *      nothing changes; then a region that reads an input a matmul region
 *      reads joins it where legal (epilogue_siblings), and step 2 once more;
 *   4. emission: regions and outside nodes in a topological order of the
 *      region graph (Kahn, ties by first node), kernels numbered in that
 *      order `fj_<graph>_k<i>`; a kernel's operands are its inputs, in first
 *      use, its results the outputs, under their original names; inside the
 *      body, values keep their names, but a yielded value is renamed
 *      (`%y` -> `%y_0`) since the kernel's result carries its name outside.
 * Invariants: the result verifies; every returned value is preserved (same
 * name, type and position); every live prims node that is not free lands in
 * exactly one kernel. Sizes impose no rule: a region may use a symbol that
 * none of its operands and results has (var's VJP counts prims.full [N,16]
 * among 0-d values); the executors pass it to the kernel (codegen/region.h,
 * extra symbols), so no operand is added to carry it.
 * Complexity: O(V + E) per legality check and cycle check, O(E) checks per
 * round: quadratic in the worst case, linear-ish on real graphs.
 * References: nvFuser's segmenter, TorchInductor's scheduler (fusion
 * legality, horizontal fusion), XLA's instruction fusion (producer-consumer
 * merging with a cycle check). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"
#include "passes/rebuild.h"
#include "passes/recompute.h"

enum { NC_DEAD, NC_OUTSIDE, NC_FUSIBLE, NC_FREE, NC_MATMUL, NC_SOLO };
enum { RF_MATMUL = 1, RF_SOLO = 2 };

typedef struct fz_block {
	void *p;
	size_t n;
} fz_block;

typedef struct fuser {
	fj_context *ctx;
	fj_module *m;
	fj_graph *g;
	uint32_t nn, nv;
	uint8_t *cls;      /* per node: NC_* */
	uint16_t *fcost;   /* per free node: its copy's cost per element (op_cost, summed) */
	uint8_t *rflags;   /* per region root: RF_* */
	uint32_t *parent;  /* union-find */
	uint32_t *next;    /* member lists, sorted by node index */
	uint32_t *head;    /* per root: first member */
	uint32_t *ustart;  /* consumers of value v: ulist[ustart[v] .. ustart[v+1]) */
	uint32_t *ulist;
	bool *returned;    /* per value */
	uint32_t *mem;     /* scratch: members of a candidate */
	uint8_t *flag;     /* scratch per node */
	uint32_t *stamp;   /* scratch per node (BFS visits) */
	uint32_t *queue;
	uint32_t *reds;    /* scratch: one reduction per region */
	uint32_t *level;   /* per unit: a depth in the unit graph, kept valid */
	uint32_t *rmask;   /* per reduction node: its reduced dims */
	uint32_t *vstamp;  /* scratch per value */
	uint32_t vepoch;
	uint32_t *ver;     /* per root: the clock of its last merge */
	uint32_t level_bound; /* creates_cycle skips units at or above it */
	uint32_t clock, sweep_start;
	bool swept;
	uint32_t epoch;
	fz_block *allocs;  /* everything allocated, freed at the end */
	uint32_t nallocs, cap_allocs;
	bool oom;
} fuser;

static void *fz_alloc(fuser *f, size_t n)
{
	if (f->oom)
		return NULL;
	if (!n)
		n = 1;
	if (f->nallocs == f->cap_allocs) {
		uint32_t nc = f->cap_allocs ? f->cap_allocs * 2 : 32;
		fz_block *na = fj_realloc(f->ctx, f->allocs, f->cap_allocs * sizeof *na, nc * sizeof *na);
		if (!na) {
			f->oom = true;
			return NULL;
		}
		f->allocs = na;
		f->cap_allocs = nc;
	}
	void *p = fj_alloc(f->ctx, n);
	if (!p) {
		f->oom = true;
		return NULL;
	}
	memset(p, 0, n);
	f->allocs[f->nallocs++] = (fz_block){p, n};
	return p;
}

static void fz_free_all(fuser *f)
{
	for (uint32_t i = 0; i < f->nallocs; i++)
		fj_free(f->ctx, f->allocs[i].p, f->allocs[i].n);
	if (f->allocs)
		fj_free(f->ctx, f->allocs, f->cap_allocs * sizeof *f->allocs);
}

/* ---- small helpers ---- */

static uint32_t def_node(const fj_graph *g, fj_vid v)
{
	if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_RESULT)
		return FJ_NONODE;
	return g->values[v].def;
}

static uint32_t op_flags(const fuser *f, uint32_t n) { return fj_op_info(f->ctx, f->g->nodes[n].op)->flags; }

static const fj_type *vtype(const fuser *f, fj_vid v) { return &f->g->values[v].type; }

static bool numel(fuser *f, const fj_dim *dims, int rank, fj_dim *out)
{
	return fj_dim_product(f->m, dims, rank, out);
}

static uint32_t find(fuser *f, uint32_t x)
{
	uint32_t r = x;
	while (f->parent[r] != r)
		r = f->parent[r];
	while (f->parent[x] != r) {
		uint32_t nx = f->parent[x];
		f->parent[x] = r;
		x = nx;
	}
	return r;
}

static bool in_region_class(const fuser *f, uint32_t n)
{
	return n != FJ_NONODE && (f->cls[n] == NC_FUSIBLE || f->cls[n] == NC_MATMUL || f->cls[n] == NC_SOLO);
}

/* Is node n a member of region a or b (roots)? */
static bool in_pair(fuser *f, uint32_t n, uint32_t a, uint32_t b)
{
	if (!in_region_class(f, n))
		return false;
	uint32_t r = find(f, n);
	return r == a || r == b;
}

/* ---- classification ---- */

/* Limits on what a free pointwise copy may cost: the distinct parameters it
 * reads and the nodes in its cone (a copy per kernel that uses it). */
enum { MAX_FREE_LEAVES = 3, MAX_FREE_CONE = 48 };
/* Operands + results of one kernel (L6): the launch passes them all. */
enum { MAX_KERNEL_IO = 128 };
/* Cycle checks same_space may spend on one region's partners. */
enum { MAX_SPACE_WALKS = 8 };

typedef struct dupinfo {
	bool dup;     /* duplicable */
	bool layout;  /* ... through layout, convert and source ops only */
	uint8_t nleaves;
	uint16_t cone;
	uint16_t cost; /* op_cost over the cone (saturating) */
	fj_vid leaves[MAX_FREE_LEAVES];
} dupinfo;

/* The cost rule of matmul prologues. A copy evaluated while packing an
 * operand runs once per element per tile that reads it: an element of A
 * (M x K) once per tile of C's columns, one of B (K x N) once per tile of
 * C's rows. The pass counts ceil(N / 64) and ceil(M / 64) evaluations: the
 * GPU's tensor-core tiles are 64 wide, the host's C tiles 128 or 256 wide
 * (fewer evaluations; B is even packed once per column tile). The GPU's
 * 16 x 16 SIMT tiles (f32) evaluate 4x as often, on a device with ~3x a
 * host core's arithmetic per byte of memory. A copy whose cost per element
 * (op_cost, summed over its cone) times that count is at most
 * PROLOGUE_BUDGET goes into the packing; a dearer one is computed once, by
 * its own kernel, into memory. The budget is what materializing costs
 * instead: a kernel writing the value and the matmul reading it back, two
 * memory passes over the element, ~50 arithmetic steps per element on a
 * 2-vCPU host (8 bytes at ~10 GB/s against 8-lane vectors at ~3 a cycle),
 * more on a GPU; the budget takes a third of it. */
enum { MM_TILE = 64, PROLOGUE_BUDGET = 16 };

/* The cost of pointwise op n per element, in arithmetic steps: the cheap
 * arithmetic 1, division and square roots 4, transcendental functions 16
 * (the host's polynomials are 20-40 steps, libdevice's similar). Layout,
 * source and conversion ops cost 0 (an index computation or a cast):
 * classify's `cheap` ops. */
static uint16_t op_cost(const fj_node *n)
{
	switch (n->op) {
	case FJ_OP_PRIMS_DIV: case FJ_OP_PRIMS_SQRT: case FJ_OP_PRIMS_RSQRT: case FJ_OP_PRIMS_RECIPROCAL:
	case FJ_OP_PRIMS_FMOD: case FJ_OP_PRIMS_REMAINDER:
		return 4;
	case FJ_OP_PRIMS_EXP: case FJ_OP_PRIMS_EXP2: case FJ_OP_PRIMS_EXPM1: case FJ_OP_PRIMS_LOG:
	case FJ_OP_PRIMS_LOG2: case FJ_OP_PRIMS_LOG10: case FJ_OP_PRIMS_LOG1P: case FJ_OP_PRIMS_SIN:
	case FJ_OP_PRIMS_COS: case FJ_OP_PRIMS_TAN: case FJ_OP_PRIMS_TANH: case FJ_OP_PRIMS_SINH:
	case FJ_OP_PRIMS_COSH: case FJ_OP_PRIMS_ASIN: case FJ_OP_PRIMS_ACOS: case FJ_OP_PRIMS_ATAN:
	case FJ_OP_PRIMS_ASINH: case FJ_OP_PRIMS_ACOSH: case FJ_OP_PRIMS_ATANH: case FJ_OP_PRIMS_ERF:
	case FJ_OP_PRIMS_ERFC: case FJ_OP_PRIMS_POW: case FJ_OP_PRIMS_ATAN2:
		return 16;
	default:
		return 1;
	}
}

/* How often packing evaluates an element of matmul k's operand v (A, B or
 * both: the larger), by the rule above; symbolic sizes count as
 * FJ_SYM_WEIGHT. */
static double mm_evals(const fuser *f, uint32_t k, fj_vid v)
{
	const fj_node *n = &f->g->nodes[k];
	const fj_type *t = &f->g->values[n->res[0]].type;
	double e = 1;
	for (int o = 0; o < 2 && o < (int)n->nopnds && t->rank >= 2; o++) {
		if (n->opnds[o] != v)
			continue;
		fj_dim d = t->dims[t->rank - 1 - o]; /* A: N, B: M */
		double x = fj_dim_is_static(d) ? (double)d : FJ_SYM_WEIGHT;
		double c = ceil(x / MM_TILE);
		e = c > e ? c : e;
	}
	return e;
}

static bool add_leaf(dupinfo *d, fj_vid v)
{
	for (uint32_t i = 0; i < d->nleaves; i++)
		if (d->leaves[i] == v)
			return true;
	if (d->nleaves == MAX_FREE_LEAVES)
		return false;
	d->leaves[d->nleaves++] = v;
	return true;
}

static fj_status classify(fuser *f, const bool *live)
{
	fj_graph *g = f->g;
	dupinfo *di = fz_alloc(f, f->nn * sizeof *di);
	if (!di)
		return FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < f->nn; i++) {
		const fj_node *n = &g->nodes[i];
		uint32_t fl = op_flags(f, i);
		if (!live[i])
			f->cls[i] = NC_DEAD;
		else if (!(fl & FJ_OPF_PRIMS))
			f->cls[i] = NC_OUTSIDE;
		else if (n->op == FJ_OP_PRIMS_MATMUL)
			f->cls[i] = NC_MATMUL;
		else if ((fl & FJ_OPF_OPAQUE) || n->op == FJ_OP_PRIMS_CUMSUM)
			f->cls[i] = NC_SOLO;
		else
			f->cls[i] = NC_FUSIBLE;
		if (f->cls[i] != NC_FUSIBLE)
			continue;
		bool cheap = (fl & FJ_OPF_LAYOUT) || ((fl & FJ_OPF_SOURCE) && !(fl & FJ_OPF_RANDOM)) ||
		             n->op == FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE;
		dupinfo *d = &di[i];
		d->dup = cheap || (fl & FJ_OPF_POINTWISE);
		d->layout = cheap;
		d->cone = 1;
		d->cost = cheap ? 0 : op_cost(n);
		bool leaves_ok = true;
		for (uint32_t k = 0; k < n->nopnds && d->dup; k++) {
			fj_vid v = n->opnds[k];
			if (v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL)
				continue;
			if (g->values[v].kind == FJ_VK_PARAM) {
				leaves_ok = add_leaf(d, v) && leaves_ok;
				continue;
			}
			const dupinfo *o = &di[g->values[v].def];
			if (!o->dup) {
				d->dup = false;
				break;
			}
			d->layout = d->layout && o->layout;
			d->cone = (uint16_t)(d->cone + o->cone < 4096 ? d->cone + o->cone : 4096);
			d->cost = (uint16_t)(d->cost + o->cost < 4096 ? d->cost + o->cost : 4096);
			if (o->nleaves > MAX_FREE_LEAVES)
				leaves_ok = false;
			for (uint32_t j = 0; j < o->nleaves && j < MAX_FREE_LEAVES; j++)
				leaves_ok = add_leaf(d, o->leaves[j]) && leaves_ok;
		}
		if (!leaves_ok)
			d->nleaves = MAX_FREE_LEAVES + 1; /* too many: only layout may go on */
		if (d->dup && !d->layout && (!leaves_ok || d->cone > MAX_FREE_CONE))
			d->dup = false;
	}
	/* Free: duplicable, not returned, every consumer in a region that may
	 * take a copy: any fusible node; a matmul a copy within the prologue
	 * budget; other opaque ones only layout copies (backwards). */
	bool *fr = fz_alloc(f, f->nn);
	if (!fr)
		return FJ_ERR_NOMEM;
	for (uint32_t i = f->nn; i-- > 0;) {
		if (!di[i].dup)
			continue;
		const fj_node *n = &g->nodes[i];
		bool ok = true;
		for (uint32_t r = 0; r < n->nres && ok; r++) {
			fj_vid v = n->res[r];
			if (f->returned[v])
				ok = false;
			for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1] && ok; u++) {
				uint32_t k = f->ulist[u];
				uint8_t c = f->cls[k];
				ok = c == NC_FUSIBLE || ((c == NC_MATMUL || c == NC_SOLO) && di[i].layout) ||
				     (c == NC_MATMUL && di[i].cost * mm_evals(f, k, v) <= PROLOGUE_BUDGET);
			}
		}
		fr[i] = ok;
	}
	/* ... and every duplicable operand free as well (forwards). */
	for (uint32_t i = 0; i < f->nn; i++) {
		if (!fr[i])
			continue;
		const fj_node *n = &g->nodes[i];
		for (uint32_t k = 0; k < n->nopnds; k++) {
			uint32_t p = def_node(g, n->opnds[k]);
			if (p != FJ_NONODE && !fr[p])
				fr[i] = false;
		}
		if (fr[i]) {
			f->cls[i] = NC_FREE;
			f->fcost[i] = di[i].cost;
		}
	}
	return FJ_OK;
}

/* ---- legality ---- */

/* Gathers the members of regions a and b (sorted) into f->mem. */
static uint32_t gather_members(fuser *f, uint32_t a, uint32_t b)
{
	uint32_t k = 0, x = f->head[a], y = f->head[b];
	while (x != FJ_NONODE || y != FJ_NONODE) {
		if (y == FJ_NONODE || (x != FJ_NONODE && x < y)) {
			f->mem[k++] = x;
			x = f->next[x];
		} else {
			f->mem[k++] = y;
			y = f->next[y];
		}
	}
	return k;
}

/* The flag of operand v's defining member when it is computed in the
 * candidate, else 0. */
static uint8_t opnd_flag(fuser *f, fj_vid v, uint32_t a, uint32_t b)
{
	uint32_t d = def_node(f->g, v);
	return d != FJ_NONODE && in_pair(f, d, a, b) ? f->flag[d] : 0;
}

/* How often matmul mk's packing evaluates an element of v, a prologue
 * value of the candidate: through its layout consumers down to the matmul
 * (the larger count where it reaches both operands). */
static double prologue_evals(fuser *f, fj_vid v, uint32_t mk, int depth)
{
	double e = 1;
	for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++) {
		uint32_t c = f->ulist[u];
		double x = c == mk ? mm_evals(f, mk, v)
		         : depth < 8 && f->g->nodes[c].nres == 1 ? prologue_evals(f, f->g->nodes[c].res[0], mk, depth + 1)
		                                                  : FJ_SYM_WEIGHT;
		e = x > e ? x : e;
	}
	return e;
}

/* May a matmul's prologue, evaluated `evals` times per element, read node
 * d? Any node but a free copy over the prologue budget (layout, convert and
 * source ops cost nothing). */
static bool prologue_copy(fuser *f, uint32_t d, double evals)
{
	return f->cls[d] != NC_FREE || f->fcost[d] * evals <= PROLOGUE_BUDGET;
}

/* Is member ni of the candidate (a, b) a prologue node: a layout op, not
 * returned, that only the matmul or other layout members read? */
static bool prologue_node(fuser *f, uint32_t ni, uint32_t a, uint32_t b)
{
	const fj_graph *g = f->g;
	const fj_node *n = &g->nodes[ni];
	if (!(op_flags(f, ni) & FJ_OPF_LAYOUT) || n->nres != 1 || f->returned[n->res[0]])
		return false;
	fj_vid v = n->res[0];
	for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++) {
		uint32_t c = f->ulist[u];
		if (!in_pair(f, c, a, b) || !(g->nodes[c].op == FJ_OP_PRIMS_MATMUL || (op_flags(f, c) & FJ_OPF_LAYOUT)))
			return false;
	}
	return true;
}

static bool legal_matmul(fuser *f, uint32_t k, uint32_t a, uint32_t b)
{
	fj_graph *g = f->g;
	const fj_type *mt = NULL;
	uint32_t mk = FJ_NONODE;
	for (uint32_t i = 0; i < k; i++)
		if (g->nodes[f->mem[i]].op == FJ_OP_PRIMS_MATMUL)
			mk = f->mem[i];
	for (uint32_t i = 0; i < k; i++) {
		uint32_t ni = f->mem[i];
		const fj_node *n = &g->nodes[ni];
		f->flag[ni] = 0;
		if (n->op == FJ_OP_PRIMS_MATMUL) {
			if (mt)
				return false;
			/* its operands: the prologue's or other kernels' values */
			for (uint32_t o = 0; o < n->nopnds; o++) {
				uint32_t d = def_node(g, n->opnds[o]);
				if (d != FJ_NONODE && in_pair(f, d, a, b) && f->flag[d] != 2)
					return false;
			}
			mt = vtype(f, n->res[0]);
			f->flag[ni] = 1;
			continue;
		}
		if (!mt && prologue_node(f, ni, a, b)) { /* a prologue: layout ops that only the matmul reads */
			fj_vid v = n->res[0];
			if (mk == FJ_NONODE)
				return false;
			double evals = prologue_evals(f, v, mk, 0);
			for (uint32_t o = 0; o < n->nopnds; o++) {
				uint32_t d = def_node(g, n->opnds[o]);
				if (d != FJ_NONODE && ((in_pair(f, d, a, b) && f->flag[d] != 2) || !prologue_copy(f, d, evals)))
					return false;
			}
			f->flag[ni] = 2;
			continue;
		}
		/* the epilogue: pointwise nodes of the result's shape, evaluated at
		 * each result point from the matmul value, each other and other
		 * kernels' values (a sibling computing from the same inputs: the
		 * backward's recomputed gelu beside the matmul whose epilogue takes
		 * its derivative, epilogue_siblings) */
		const fj_type *rt = mk != FJ_NONODE ? vtype(f, g->nodes[mk].res[0]) : NULL;
		if (!rt || !(op_flags(f, ni) & FJ_OPF_POINTWISE) || n->nres != 1 || !fj_type_same_dims(vtype(f, n->res[0]), rt))
			return false;
		for (uint32_t o = 0; o < n->nopnds; o++) {
			uint32_t d = def_node(g, n->opnds[o]);
			if (d != FJ_NONODE && in_pair(f, d, a, b) && f->flag[d] != 1)
				return false;
		}
		f->flag[ni] = 1;
	}
	return mt != NULL;
}

typedef struct space {
	bool red;
	const fj_type *d; /* the domain D */
	uint32_t kmask;   /* reduced dims K */
	fj_dim nd, nr;    /* element counts of D and R */
	bool io;          /* L2b: also column sums over okmask */
	uint32_t okmask;
	fj_dim nc;        /* element count of the columns C (D's K dims) */
} space;

/* L2: the reductions of members mem[0..k) agree; fills sp. */
static bool reduction_space(fuser *f, uint32_t k, space *sp)
{
	fj_graph *g = f->g;
	memset(sp, 0, sizeof *sp);
	uint32_t other = 0; /* L2b: the second mask seen */
	bool have_other = false;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t ni = f->mem[i];
		if (!(op_flags(f, ni) & FJ_OPF_REDUCTION))
			continue;
		const fj_node *n = &g->nodes[ni];
		const fj_type *t = vtype(f, n->opnds[0]);
		uint32_t mask = f->rmask[ni];
		if (!sp->red) {
			sp->red = true;
			sp->d = t;
			sp->kmask = mask;
		} else if (!fj_type_same_dims(t, sp->d)) {
			return false;
		} else if (mask != sp->kmask) {
			if (have_other && mask != other)
				return false;
			have_other = true;
			other = mask;
		}
	}
	if (!sp->red)
		return true;
	const fj_type *d = sp->d;
	if (have_other) {
		/* L2b: the inner mask holds D's innermost dim, the outer one is its
		 * complement, and every outer reduction is a prims.sum */
		uint32_t all = (1u << d->rank) - 1, last = d->rank ? 1u << (d->rank - 1) : 0;
		uint32_t in = sp->kmask & last ? sp->kmask : other, out = in == sp->kmask ? other : sp->kmask;
		if (d->rank < 2 || !(in & last) || out != (all & ~in))
			return false;
		for (uint32_t i = 0; i < k; i++) {
			uint32_t ni = f->mem[i];
			if ((op_flags(f, ni) & FJ_OPF_REDUCTION) && f->rmask[ni] == out &&
			    g->nodes[ni].op != FJ_OP_PRIMS_SUM)
				return false;
		}
		sp->io = true;
		sp->kmask = in;
		sp->okmask = out;
	}
	fj_dim rd[FJ_MAX_RANK], cd[FJ_MAX_RANK];
	int rr = 0, cr = 0;
	for (int j = 0; j < d->rank; j++) {
		if (!(sp->kmask & (1u << j)))
			rd[rr++] = d->dims[j];
		else
			cd[cr++] = d->dims[j];
	}
	return numel(f, d->dims, d->rank, &sp->nd) && numel(f, rd, rr, &sp->nr) && numel(f, cd, cr, &sp->nc);
}

/* L3 for a broadcast_in_dim of a value computed from a reduction. */
static bool rd_broadcast_ok(fuser *f, const fj_node *n, const space *sp)
{
	const fj_type *in = vtype(f, n->opnds[0]), *out = vtype(f, n->res[0]);
	fj_dim ni, no;
	if (!numel(f, in->dims, in->rank, &ni) || !numel(f, out->dims, out->rank, &no) || ni != sp->nr)
		return false;
	if (no == sp->nr)
		return true; /* size-1 dims inserted: the order of the row stays */
	const fj_type *d = sp->d;
	if (!fj_type_same_dims(out, d) || sp->kmask == (d->rank ? (1u << d->rank) - 1 : 0u))
		return false;
	const fj_attr *bd = fj_node_attr(f->ctx, n, "broadcast_dims");
	if (!bd || bd->kind != FJ_AK_LIST || bd->n != in->rank)
		return false;
	/* Non-unit operand dims map, in order, onto the kept non-unit dims of D. */
	int j = 0;
	for (int i = 0; i < in->rank; i++) {
		if (in->dims[i] == 1)
			continue;
		while (j < d->rank && ((sp->kmask & (1u << j)) || d->dims[j] == 1))
			j++;
		if (j >= d->rank || fj_attr_as_int(&bd->u.items[i]) != j)
			return false;
		j++;
	}
	while (j < d->rank && ((sp->kmask & (1u << j)) || d->dims[j] == 1))
		j++;
	return j == d->rank;
}

/* Is result value v of a member used outside regions a and b, or returned? */
static bool escapes(fuser *f, fj_vid v, uint32_t a, uint32_t b)
{
	if (f->returned[v])
		return true;
	for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++)
		if (!in_pair(f, f->ulist[u], a, b))
			return true;
	return false;
}

static bool legal_fusible(fuser *f, uint32_t k, uint32_t a, uint32_t b)
{
	fj_graph *g = f->g;
	space sp;
	if (!reduction_space(f, k, &sp))
		return false;
	/* L3: flag = computed from a reduction of the candidate: FL_ROW from a
	 * row reduction (over K), FL_COL from a column sum (L2b, over okmask). */
	enum { FL_ROW = 1, FL_COL = 2 };
	bool row_d = false; /* L2b: a row value of D's shape (persistent) */
	uint32_t nred[2] = {0, 0}; /* reductions along the rows, column sums */
	for (uint32_t i = 0; i < k; i++) {
		uint32_t ni = f->mem[i];
		const fj_node *n = &g->nodes[ni];
		uint32_t fl = op_flags(f, ni);
		uint8_t rd = 0;
		for (uint32_t o = 0; o < n->nopnds; o++)
			rd |= opnd_flag(f, n->opnds[o], a, b);
		f->flag[ni] = 0;
		if (rd & FL_COL) {
			/* L2b: column values flow through pointwise ops only */
			if ((rd & FL_ROW) || !(fl & FJ_OPF_POINTWISE))
				return false;
			f->flag[ni] = FL_COL;
			continue;
		}
		if (fl & FJ_OPF_REDUCTION) {
			f->flag[ni] = sp.io && f->rmask[ni] == sp.okmask ? FL_COL : FL_ROW;
			/* L7: the reductions of each kind codegen accepts */
			if (++nred[f->flag[ni] == FL_COL] > FJ_MAX_KERNEL_REDUCTIONS)
				return false;
			continue;
		}
		if (!rd)
			continue;
		f->flag[ni] = FL_ROW;
		if (n->nres && fj_type_same_dims(vtype(f, n->res[0]), sp.d))
			row_d = true;
		if (fl & FJ_OPF_POINTWISE)
			continue;
		if (n->op == FJ_OP_PRIMS_BROADCAST_IN_DIM) {
			if (!rd_broadcast_ok(f, n, &sp))
				return false;
			continue;
		}
		if (n->op == FJ_OP_PRIMS_RESHAPE || n->op == FJ_OP_PRIMS_SQUEEZE) {
			const fj_type *in = vtype(f, n->opnds[0]);
			fj_dim ne;
			if (!numel(f, in->dims, in->rank, &ne) || ne != sp.nr)
				return false;
			continue;
		}
		return false;
	}
	if (sp.io && !row_d)
		return false;
	/* L4: outputs. */
	bool have = false;
	fj_dim first = 0;
	for (uint32_t i = 0; i < k; i++) {
		const fj_node *n = &g->nodes[f->mem[i]];
		for (uint32_t r = 0; r < n->nres; r++) {
			if (!escapes(f, n->res[r], a, b))
				continue;
			const fj_type *t = vtype(f, n->res[r]);
			fj_dim ne;
			if (!numel(f, t->dims, t->rank, &ne))
				return false;
			if (sp.red) {
				/* C's count: a column value only (an unrelated value of
				 * that count has no place in the kernel's loops) */
				bool col = sp.io && ne == sp.nc && f->flag[f->mem[i]] == FL_COL;
				if (ne != sp.nd && ne != sp.nr && !col)
					return false;
			} else if (!have) {
				have = true;
				first = ne;
			} else if (ne != first) {
				return false;
			}
		}
	}
	return true;
}

static void visit(fuser *f, uint32_t c, uint32_t *qn)
{
	if (f->cls[c] == NC_FREE || f->cls[c] == NC_DEAD)
		return;
	uint32_t r = in_region_class(f, c) ? find(f, c) : c;
	if (f->stamp[r] == f->epoch || f->level[r] >= f->level_bound)
		return;
	f->stamp[r] = f->epoch;
	f->queue[(*qn)++] = r;
}

/* Pushes the consumers of node x's results; true when one is in a or b. */
static bool push_consumers(fuser *f, uint32_t x, uint32_t a, uint32_t b, bool from_pair, uint32_t *qn)
{
	const fj_node *n = &f->g->nodes[x];
	for (uint32_t r = 0; r < n->nres; r++) {
		fj_vid v = n->res[r];
		for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++) {
			uint32_t c = f->ulist[u];
			if (in_pair(f, c, a, b)) {
				if (!from_pair)
					return true;
				continue;
			}
			visit(f, c, qn);
		}
	}
	return false;
}

/* L5: would merging regions a and b close a cycle through another unit?
 * Levels climb along every path, so a path from a or b back into them only
 * visits units below the higher of their levels: the walk stays there. */
static bool creates_cycle(fuser *f, uint32_t a, uint32_t b)
{
	uint32_t qn = 0, qh = 0;
	f->epoch++;
	f->level_bound = f->level[a] > f->level[b] ? f->level[a] : f->level[b];
	for (uint32_t x = f->head[a]; x != FJ_NONODE; x = f->next[x])
		push_consumers(f, x, a, b, true, &qn);
	for (uint32_t x = f->head[b]; x != FJ_NONODE; x = f->next[x])
		push_consumers(f, x, a, b, true, &qn);
	while (qh < qn) {
		uint32_t u = f->queue[qh++];
		if (in_region_class(f, u)) {
			for (uint32_t x = f->head[u]; x != FJ_NONODE; x = f->next[x])
				if (push_consumers(f, x, a, b, false, &qn))
					return true;
		} else if (push_consumers(f, u, a, b, false, &qn)) {
			return true;
		}
	}
	return false;
}

/* L6: a kernel's operands and results, all passed at launch, stay few. */
static bool io_ok(fuser *f, uint32_t k, uint32_t a, uint32_t b)
{
	uint32_t n = 0;
	f->vepoch++;
	for (uint32_t i = 0; i < k; i++) {
		const fj_node *nd = &f->g->nodes[f->mem[i]];
		for (uint32_t r = 0; r < nd->nres; r++)
			n += escapes(f, nd->res[r], a, b);
		for (uint32_t o = 0; o < nd->nopnds; o++) {
			fj_vid v = nd->opnds[o];
			if (v == FJ_NOVAL || f->g->values[v].kind == FJ_VK_LITERAL || f->vstamp[v] == f->vepoch)
				continue;
			uint32_t d = def_node(f->g, v);
			if (d != FJ_NONODE && in_pair(f, d, a, b))
				continue;
			f->vstamp[v] = f->vepoch;
			n++;
		}
	}
	return n <= MAX_KERNEL_IO;
}

static bool legal(fuser *f, uint32_t a, uint32_t b, bool check_cycle)
{
	if (a == b)
		return false;
	uint8_t fa = f->rflags[a], fb = f->rflags[b];
	if ((fa | fb) & RF_SOLO)
		return false;
	if ((fa & RF_MATMUL) && (fb & RF_MATMUL))
		return false;
	uint32_t k = gather_members(f, a, b);
	bool ok = (fa | fb) & RF_MATMUL ? legal_matmul(f, k, a, b) : legal_fusible(f, k, a, b);
	return ok && io_ok(f, k, a, b) && (!check_cycle || !creates_cycle(f, a, b));
}

static bool compute_levels(fuser *f);

/* Restores level[u] < level[v] on every unit edge after root's level rose
 * (a worklist forwards from root; merges keep the unit graph acyclic). */
static void raise_levels(fuser *f, uint32_t root)
{
	uint32_t qn = 0;
	f->queue[qn++] = root;
	while (qn) {
		uint32_t u = f->queue[--qn];
		bool region = in_region_class(f, u);
		for (uint32_t x = region ? f->head[u] : u; x != FJ_NONODE; x = region ? f->next[x] : FJ_NONODE) {
			const fj_node *n = &f->g->nodes[x];
			for (uint32_t r = 0; r < n->nres; r++)
				for (uint32_t k = f->ustart[n->res[r]]; k < f->ustart[n->res[r] + 1]; k++) {
					uint32_t c = f->ulist[k];
					if (f->cls[c] == NC_FREE || f->cls[c] == NC_DEAD)
						continue;
					uint32_t w = in_region_class(f, c) ? find(f, c) : c;
					if (w == u || f->level[w] > f->level[u])
						continue;
					f->level[w] = f->level[u] + 1;
					if (qn == f->nn) { /* the worklist is full: recompute all */
						compute_levels(f);
						return;
					}
					f->queue[qn++] = w;
				}
		}
	}
}

static void unite(fuser *f, uint32_t a, uint32_t b)
{
	uint32_t k = gather_members(f, a, b);
	uint32_t root = a < b ? a : b, other = root == a ? b : a;
	for (uint32_t i = 0; i + 1 < k; i++)
		f->next[f->mem[i]] = f->mem[i + 1];
	f->next[f->mem[k - 1]] = FJ_NONODE;
	f->head[root] = f->mem[0];
	f->rflags[root] |= f->rflags[other];
	f->parent[other] = root;
	f->ver[root] = ++f->clock;
	f->level[root] = f->level[a] > f->level[b] ? f->level[a] : f->level[b];
	raise_levels(f, root);
}

static bool try_merge(fuser *f, uint32_t x, uint32_t y)
{
	uint32_t a = find(f, x), b = find(f, y);
	/* Equal levels: no path between a and b, no cycle to look for. */
	if (a == b || !legal(f, a, b, f->level[a] != f->level[b]))
		return false;
	unite(f, a, b);
	return true;
}

/* ---- the merging rounds ---- */

/* Is node i a layout op that matmuls alone read (not returned)? Its
 * producer's kernel does not take it: the matmul reads the producer's
 * result through it in place (L1). */
static bool matmul_prologue(fuser *f, uint32_t i)
{
	const fj_node *n = &f->g->nodes[i];
	if (f->cls[i] != NC_FUSIBLE || !(op_flags(f, i) & FJ_OPF_LAYOUT) || n->nres != 1 || f->returned[n->res[0]])
		return false;
	fj_vid v = n->res[0];
	for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++)
		if (f->cls[f->ulist[u]] != NC_MATMUL)
			return false;
	return f->ustart[v] < f->ustart[v + 1];
}

/* Producer-consumer merges, in node order, to a fixed point. A failed check
 * can only succeed later if one of its two regions has grown since (others'
 * merges only add paths): edges whose regions are both older than the last
 * sweep's start are skipped. */
static bool vertical(fuser *f)
{
	bool any = false, changed = true;
	for (int round = 0; changed && round < 8; round++) {
		changed = false;
		uint32_t start = f->clock;
		for (uint32_t i = 0; i < f->nn; i++) {
			/* a fusible node joins its producers; a matmul takes a layout
			 * prologue (L1), which is left to it */
			if ((f->cls[i] != NC_FUSIBLE && f->cls[i] != NC_MATMUL) || matmul_prologue(f, i))
				continue;
			const fj_node *n = &f->g->nodes[i];
			for (uint32_t o = 0; o < n->nopnds; o++) {
				uint32_t d = def_node(f->g, n->opnds[o]);
				if (d == FJ_NONODE || (f->cls[d] != NC_FUSIBLE && f->cls[d] != NC_MATMUL) ||
				    (f->cls[i] == NC_MATMUL && !(op_flags(f, d) & FJ_OPF_LAYOUT)))
					continue;
				uint32_t a = find(f, d), b = find(f, i);
				if (f->swept && f->ver[a] < f->sweep_start && f->ver[b] < f->sweep_start)
					continue;
				if (try_merge(f, a, b))
					changed = any = true;
			}
		}
		f->swept = true;
		f->sweep_start = start;
	}
	return any;
}

/* Regions reading value v as an input (directly or through free copies),
 * appended to out (distinct roots: fusible regions, and with `mm` matmul
 * regions too). */
static uint32_t readers(fuser *f, fj_vid v, uint32_t *out, uint32_t cap, bool mm)
{
	uint32_t n = 0, sp = 0;
	uint32_t *stack = f->queue; /* free nodes to expand */
	f->epoch++;
	uint32_t dv = def_node(f->g, v);
	uint32_t own = dv != FJ_NONODE && in_region_class(f, dv) ? find(f, dv) : FJ_NONODE;
	for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1]; u++)
		if (f->stamp[f->ulist[u]] != f->epoch) {
			f->stamp[f->ulist[u]] = f->epoch;
			stack[sp++] = f->ulist[u];
		}
	while (sp) {
		uint32_t c = stack[--sp];
		if (f->cls[c] == NC_FREE) {
			const fj_node *fn = &f->g->nodes[c];
			for (uint32_t r = 0; r < fn->nres; r++)
				for (uint32_t u = f->ustart[fn->res[r]]; u < f->ustart[fn->res[r] + 1]; u++)
					if (f->stamp[f->ulist[u]] != f->epoch) {
						f->stamp[f->ulist[u]] = f->epoch;
						stack[sp++] = f->ulist[u];
					}
			continue;
		}
		if (f->cls[c] != NC_FUSIBLE)
			continue;
		uint32_t r = find(f, c);
		if (r == own || (f->rflags[r] & RF_SOLO) || (!mm && (f->rflags[r] & RF_MATMUL)))
			continue;
		bool seen = false;
		for (uint32_t i = 0; i < n && !seen; i++)
			seen = out[i] == r;
		if (!seen && n < cap)
			out[n++] = r;
	}
	/* Deterministic order: by first member. */
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && f->head[out[j]] < f->head[out[j - 1]]; j--) {
			uint32_t t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Merges regions that read the same value (readers): any two fusible ones
 * (`mm` false), or a fusible one into a matmul region (`mm`). */
static bool merge_readers(fuser *f, bool mm)
{
	enum { CAP = 64 };
	uint32_t rs[CAP];
	bool any = false;
	for (fj_vid v = 0; v < f->nv; v++) {
		const fj_value *val = &f->g->values[v];
		if (val->kind == FJ_VK_LITERAL)
			continue;
		if (val->kind == FJ_VK_RESULT && (f->cls[val->def] == NC_FREE || f->cls[val->def] == NC_DEAD))
			continue;
		uint32_t n = readers(f, v, rs, CAP, mm);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = mm ? 0 : i + 1; j < n; j++) {
				uint32_t a = find(f, rs[i]), b = find(f, rs[j]);
				if (mm && (!(f->rflags[a] & RF_MATMUL) || (f->rflags[b] & RF_MATMUL)))
					continue;
				if (try_merge(f, b, a))
					any = true;
			}
	}
	return any;
}

static bool horizontal(fuser *f) { return merge_readers(f, false); }

/* A pointwise region of a matmul's result shape that reads the same input
 * as the matmul's region joins it as part of its epilogue (L1): evaluated
 * at each result point, its values no longer go through a kernel of their
 * own, and what both compute from that input is computed once. The
 * backward of an exact-gelu MLP recomputes gelu(h) for the weight gradient
 * dW2 = dY^T gelu(h) beside dG = dY W2^T, whose epilogue takes gelu'(h):
 * the recomputation, erf and all, was a kernel reading h and writing
 * gelu(h); it is now one more output of dG's epilogue, which evaluates erf
 * once for both. Runs after the merging rounds, so that regions that can
 * merge with each other have done so first. */
static bool epilogue_siblings(fuser *f) { return merge_readers(f, true); }

static uint32_t unit_of(fuser *f, uint32_t n)
{
	if (f->cls[n] == NC_OUTSIDE)
		return n;
	if (in_region_class(f, n))
		return find(f, n);
	return FJ_NONODE;
}

/* The graph of units (regions and outside nodes, each named by its root
 * node): edges[estart[u] .. estart[u+1]) are u's successors (with repeats),
 * indeg[u] its number of incoming edges. */
typedef struct unit_graph {
	uint32_t *estart, *edges, *indeg;
} unit_graph;

static bool build_unit_graph(fuser *f, unit_graph *ug)
{
	const fj_graph *g = f->g;
	uint32_t nn = f->nn, nedges = 0;
	ug->estart = fz_alloc(f, (nn + 2) * sizeof *ug->estart);
	ug->indeg = fz_alloc(f, (nn + 1) * sizeof *ug->indeg);
	uint32_t *fill = fz_alloc(f, (nn + 1) * sizeof *fill);
	if (!ug->estart || !ug->indeg || !fill)
		return false;
	for (int pass = 0; pass < 2; pass++) {
		if (pass) {
			ug->edges = fz_alloc(f, (nedges + 1) * sizeof *ug->edges);
			if (!ug->edges)
				return false;
			for (uint32_t i = 0; i < nn; i++)
				ug->estart[i + 1] += ug->estart[i];
			memcpy(fill, ug->estart, nn * sizeof *fill);
		}
		for (uint32_t i = 0; i < nn; i++) {
			uint32_t u = unit_of(f, i);
			if (u == FJ_NONODE)
				continue;
			const fj_node *n = &g->nodes[i];
			for (uint32_t o = 0; o < n->nopnds; o++) {
				uint32_t d = def_node(g, n->opnds[o]);
				uint32_t ud = d == FJ_NONODE ? FJ_NONODE : unit_of(f, d);
				if (ud == FJ_NONODE || ud == u)
					continue;
				if (!pass) {
					ug->estart[ud + 1]++;
					nedges++;
					ug->indeg[u]++;
				} else {
					ug->edges[fill[ud]++] = u;
				}
			}
		}
	}
	return true;
}

/* Longest-path depth of every unit in the unit graph (f->level): a path
 * from u to v means level[u] < level[v], so two regions of equal level can
 * merge without a cycle (and the merged region keeps a valid level). */
static bool compute_levels(fuser *f)
{
	unit_graph ug;
	if (!build_unit_graph(f, &ug))
		return false;
	uint32_t qn = 0, qh = 0;
	for (uint32_t i = 0; i < f->nn; i++) {
		f->level[i] = 0;
		if (unit_of(f, i) == i && !ug.indeg[i])
			f->queue[qn++] = i;
	}
	while (qh < qn) {
		uint32_t u = f->queue[qh++];
		for (uint32_t j = ug.estart[u]; j < ug.estart[u + 1]; j++) {
			uint32_t v = ug.edges[j];
			if (f->level[v] < f->level[u] + 1)
				f->level[v] = f->level[u] + 1;
			if (--ug.indeg[v] == 0)
				f->queue[qn++] = v;
		}
	}
	return true;
}

/* Reduction regions over the same iteration space (D, K) are siblings too,
 * even without a common input (layer_norm backward's grad_weight and
 * grad_bias: two column sums of [N,H]); a few cycle checks per region at
 * most, and none between regions of equal level. */
static bool same_space(fuser *f)
{
	bool any = false;
	uint32_t nr = 0;
	for (uint32_t i = 0; i < f->nn; i++) {
		if (f->cls[i] != NC_FUSIBLE || find(f, i) != i || (f->rflags[i] & (RF_MATMUL | RF_SOLO)))
			continue;
		for (uint32_t x = f->head[i]; x != FJ_NONODE; x = f->next[x])
			if (op_flags(f, x) & FJ_OPF_REDUCTION) {
				f->reds[nr++] = x; /* the region's first reduction */
				break;
			}
	}
	uint32_t *red = f->reds;
	/* A key per region: its space (D, K) hashed, compared before anything. */
	uint64_t *key = fz_alloc(f, (nr + 1) * sizeof *key);
	if (!key)
		return false;
	for (uint32_t i = 0; i < nr; i++) {
		const fj_node *a = &f->g->nodes[red[i]];
		const fj_type *t = vtype(f, a->opnds[0]);
		uint64_t h = 1469598103934665603u ^ f->rmask[red[i]];
		for (int k = 0; k < t->rank; k++)
			h = (h ^ (uint64_t)t->dims[k]) * 1099511628211u;
		key[i] = (h ^ t->rank) * 1099511628211u;
	}
	for (uint32_t i = 0; i < nr; i++) {
		const fj_node *a = &f->g->nodes[red[i]];
		const fj_type *ta = vtype(f, a->opnds[0]);
		uint32_t walks = 0; /* cycle checks for this region: a few only */
		for (uint32_t j = i + 1; j < nr; j++) {
			if (key[i] != key[j])
				continue;
			const fj_node *b = &f->g->nodes[red[j]];
			const fj_type *tb = vtype(f, b->opnds[0]);
			if (!fj_type_same_dims(ta, tb) || f->rmask[red[i]] != f->rmask[red[j]])
				continue;
			uint32_t ra = find(f, red[i]), rb = find(f, red[j]);
			if (ra == rb)
				continue;
			bool same = f->level[ra] == f->level[rb];
			if (!same && walks++ >= MAX_SPACE_WALKS)
				continue;
			if (!legal(f, ra, rb, !same))
				continue;
			unite(f, ra, rb);
			any = true;
		}
	}
	return any;
}

/* ---- emission ---- */

typedef struct emitter {
	fuser *f;
	fj_rebuild rb;
	bool *outer;      /* per old value: named in the new outer graph */
	uint32_t *local;  /* per old value: its id in the body being built */
	uint32_t *lstamp; /* per old value: the region that set local[] */
	uint32_t *set;    /* scratch: nodes of a body */
	uint8_t *inset;   /* per node: in the current body */
	fj_vid *in, *out, *ops, *yl; /* scratch per body, one entry per old value */
	const char **names;
	fj_type *types;
	uint32_t nkernels;
	const char *gname; /* sanitised graph name */
} emitter;

static bool kernel_name_taken(const fj_graph *g, const char *name)
{
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].kernel && strcmp(g->nodes[i].kernel, name) == 0)
			return true;
	return false;
}

/* A body name for old value v: its own unless the outer graph has it. */
static const char *inner_name(emitter *e, fj_graph *body, fj_vid v)
{
	const fj_graph *old = e->f->g;
	const char *name = old->values[v].name;
	if (name && !e->outer[v] && fj_graph_find_value(body, name, strlen(name)) == FJ_NOVAL)
		return name;
	char buf[128];
	for (uint32_t i = 0;; i++) {
		snprintf(buf, sizeof buf, "%.100s_%u", name ? name : "v", i);
		size_t len = strlen(buf);
		if (fj_graph_find_value(old, buf, len) == FJ_NOVAL && fj_graph_find_value(body, buf, len) == FJ_NOVAL)
			return fj_arena_strdup(&e->rb.g->arena, buf);
	}
}

static fj_status copy_into_body(emitter *e, fj_graph *body, uint32_t ni, uint32_t region)
{
	fuser *f = e->f;
	const fj_graph *old = f->g;
	const fj_node *n = &old->nodes[ni];
	fj_context *ctx = f->ctx;
	fj_vid ostack[16], *ops = n->nopnds <= 16 ? ostack : fj_alloc(ctx, n->nopnds * sizeof *ops);
	const char *nstack[8], **names = n->nres <= 8 ? nstack : fj_alloc(ctx, n->nres * sizeof *names);
	fj_type tstack[8], *types = n->nres <= 8 ? tstack : fj_alloc(ctx, n->nres * sizeof *types);
	fj_status st = FJ_OK;
	if (!ops || !names || !types) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	for (uint32_t o = 0; o < n->nopnds; o++) {
		fj_vid v = n->opnds[o];
		if (v == FJ_NOVAL) {
			ops[o] = FJ_NOVAL;
		} else if (old->values[v].kind == FJ_VK_LITERAL) {
			ops[o] = fj_graph_add_literal(body, old->values[v].lit, old->values[v].loc);
			if (ops[o] == FJ_NOVAL) {
				st = FJ_ERR_NOMEM;
				goto done;
			}
		} else {
			FJ_ASSERT(e->lstamp[v] == region + 1);
			ops[o] = e->local[v];
		}
	}
	for (uint32_t r = 0; r < n->nres; r++) {
		names[r] = inner_name(e, body, n->res[r]);
		types[r] = old->values[n->res[r]].type;
		if (!names[r]) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
	}
	uint32_t k = fj_graph_add_node(body, n->op, ops, n->nopnds, n->nres, names, types, n->loc);
	if (k == FJ_NONODE) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	fj_node *nn = &body->nodes[k];
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	for (int i = 0; i < oi->nattrs; i++) {
		fj_attr a = n->attrs[i];
		if (a.kind == FJ_AK_LIST)
			a = fj_attr_list(body, a.u.items, a.n);
		else if (a.kind == FJ_AK_STR)
			a = fj_attr_str(body, a.u.s);
		if (a.kind == FJ_AK_ABSENT && n->attrs[i].kind != FJ_AK_ABSENT) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
		nn->attrs[i] = a;
	}
	nn->recomputable = n->recomputable;
	for (uint32_t r = 0; r < n->nres; r++) {
		e->local[n->res[r]] = nn->res[r];
		e->lstamp[n->res[r]] = region + 1;
	}
done:
	if (ops && ops != ostack)
		fj_free(ctx, ops, n->nopnds * sizeof *ops);
	if (names && names != nstack)
		fj_free(ctx, (void *)names, n->nres * sizeof *names);
	if (types && types != tstack)
		fj_free(ctx, types, n->nres * sizeof *types);
	return st;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static fj_status emit_region(emitter *e, uint32_t root)
{
	fuser *f = e->f;
	fj_graph *old = f->g, *g = e->rb.g;
	/* The body's nodes: the members and the free nodes they use. */
	uint32_t k = 0;
	for (uint32_t x = f->head[root]; x != FJ_NONODE; x = f->next[x]) {
		e->set[k++] = x;
		e->inset[x] = 1;
	}
	for (uint32_t i = 0; i < k; i++) {
		const fj_node *n = &old->nodes[e->set[i]];
		for (uint32_t o = 0; o < n->nopnds; o++) {
			uint32_t d = def_node(old, n->opnds[o]);
			if (d != FJ_NONODE && f->cls[d] == NC_FREE && !e->inset[d]) {
				e->inset[d] = 1;
				e->set[k++] = d;
			}
		}
	}
	qsort(e->set, k, sizeof *e->set, cmp_u32);
	/* Inputs (first use) and outputs (member order). */
	uint32_t nin = 0, nout = 0;
	fj_vid *in = e->in, *out = e->out, *ops = e->ops, *yl = e->yl;
	const char **names = e->names;
	fj_type *types = e->types;
	for (uint32_t i = 0; i < k; i++) {
		const fj_node *n = &old->nodes[e->set[i]];
		for (uint32_t o = 0; o < n->nopnds; o++) {
			fj_vid v = n->opnds[o];
			if (v == FJ_NOVAL || old->values[v].kind == FJ_VK_LITERAL)
				continue;
			uint32_t d = def_node(old, v);
			if (d != FJ_NONODE && e->inset[d])
				continue;
			if (e->lstamp[v] == root + 1)
				continue;
			e->lstamp[v] = root + 1; /* set again below, to the body param */
			in[nin++] = v;
		}
		if (f->cls[e->set[i]] == NC_FREE)
			continue;
		for (uint32_t r = 0; r < n->nres; r++)
			if (e->outer[n->res[r]])
				out[nout++] = n->res[r];
	}
	FJ_ASSERT(nout > 0);
	for (uint32_t i = 0; i < nin; i++) {
		ops[i] = e->rb.map[in[i]];
		FJ_ASSERT(ops[i] != FJ_NOVAL);
	}
	for (uint32_t i = 0; i < nout; i++) {
		names[i] = old->values[out[i]].name;
		types[i] = old->values[out[i]].type;
	}
	uint32_t kn = fj_graph_add_node(g, FJ_OP_FUSION_KERNEL, ops, nin, nout, names, types,
	                                old->nodes[f->head[root]].loc);
	if (kn == FJ_NONODE)
		return FJ_ERR_NOMEM;
	/* The kernel's name. */
	char kname[256];
	do
		snprintf(kname, sizeof kname, "fj_%.200s_k%u", e->gname, e->nkernels++);
	while (kernel_name_taken(old, kname));
	g->nodes[kn].kernel = fj_arena_strdup(&g->arena, kname);
	fj_graph *body = fj_graph_create_body(g);
	if (!body || !g->nodes[kn].kernel)
		return FJ_ERR_NOMEM;
	body->loc = g->nodes[kn].loc;
	for (uint32_t i = 0; i < nin; i++) {
		fj_vid p = fj_graph_add_param(body, g->values[ops[i]].name, g->values[ops[i]].type, old->values[in[i]].loc);
		if (p == FJ_NOVAL)
			return FJ_ERR_NOMEM;
		e->local[in[i]] = p;
		e->lstamp[in[i]] = root + 1;
	}
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < k && st == FJ_OK; i++)
		st = copy_into_body(e, body, e->set[i], root);
	for (uint32_t i = 0; i < k; i++)
		e->inset[e->set[i]] = 0;
	if (st)
		return st;
	for (uint32_t i = 0; i < nout; i++)
		yl[i] = e->local[out[i]];
	if ((st = fj_graph_set_results(body, yl, nout)) != FJ_OK)
		return st;
	g->nodes[kn].body = body;
	for (uint32_t i = 0; i < nout; i++)
		e->rb.map[out[i]] = g->nodes[kn].res[i];
	return FJ_OK;
}

/* Binary min-heap of units keyed by first node. */
static void heap_push(uint32_t *h, uint32_t *n, const uint32_t *key, uint32_t u)
{
	uint32_t i = (*n)++;
	h[i] = u;
	while (i && key[h[(i - 1) / 2]] > key[h[i]]) {
		uint32_t p = (i - 1) / 2, t = h[p];
		h[p] = h[i];
		h[i] = t;
		i = p;
	}
}

static uint32_t heap_pop(uint32_t *h, uint32_t *n, const uint32_t *key)
{
	uint32_t top = h[0];
	h[0] = h[--(*n)];
	for (uint32_t i = 0;;) {
		uint32_t l = 2 * i + 1, r = l + 1, s = i;
		if (l < *n && key[h[l]] < key[h[s]])
			s = l;
		if (r < *n && key[h[r]] < key[h[s]])
			s = r;
		if (s == i)
			break;
		uint32_t t = h[s];
		h[s] = h[i];
		h[i] = t;
		i = s;
	}
	return top;
}

static fj_status emit(fuser *f, uint32_t *nkernels)
{
	fj_graph *old = f->g;
	uint32_t nn = f->nn;
	emitter e = {.f = f};
	e.outer = fz_alloc(f, old->nvalues);
	e.local = fz_alloc(f, (old->nvalues + 1) * sizeof *e.local);
	e.lstamp = fz_alloc(f, (old->nvalues + 1) * sizeof *e.lstamp);
	e.set = fz_alloc(f, (nn + 1) * sizeof *e.set);
	e.inset = fz_alloc(f, nn + 1);
	size_t nvs = old->nvalues + 1;
	e.in = fz_alloc(f, nvs * sizeof *e.in);
	e.out = fz_alloc(f, nvs * sizeof *e.out);
	e.ops = fz_alloc(f, nvs * sizeof *e.ops);
	e.yl = fz_alloc(f, nvs * sizeof *e.yl);
	e.names = fz_alloc(f, nvs * sizeof *e.names);
	e.types = fz_alloc(f, nvs * sizeof *e.types);
	char *gname = fz_alloc(f, strlen(old->name) + 1);
	uint32_t *key = fz_alloc(f, (nn + 1) * sizeof *key);
	uint32_t *heap = fz_alloc(f, (nn + 1) * sizeof *heap);
	if (f->oom || !e.outer || !e.local || !e.lstamp || !e.set || !e.inset || !gname || !key || !heap)
		return FJ_ERR_NOMEM;
	for (size_t i = 0; old->name[i]; i++) {
		char c = old->name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
		gname[i] = ok ? c : '_';
	}
	e.gname = gname;
	/* Outer values: parameters, results of outside nodes, region outputs. */
	for (fj_vid v = 0; v < old->nvalues; v++) {
		const fj_value *val = &old->values[v];
		if (val->kind == FJ_VK_PARAM) {
			e.outer[v] = true;
		} else if (val->kind == FJ_VK_RESULT) {
			uint32_t d = val->def;
			if (f->cls[d] == NC_OUTSIDE) {
				e.outer[v] = true;
			} else if (in_region_class(f, d)) {
				uint32_t r = find(f, d);
				bool o = f->returned[v];
				for (uint32_t u = f->ustart[v]; u < f->ustart[v + 1] && !o; u++)
					o = unit_of(f, f->ulist[u]) != r;
				e.outer[v] = o;
			}
		}
	}
	/* Kahn's algorithm over the units, ties broken by first node. */
	unit_graph ug;
	if (!build_unit_graph(f, &ug))
		return FJ_ERR_NOMEM;
	uint32_t hn = 0, done = 0, total = 0;
	for (uint32_t i = 0; i < nn; i++) {
		if (unit_of(f, i) != i)
			continue;
		total++;
		key[i] = in_region_class(f, i) ? f->head[i] : i;
		if (!ug.indeg[i])
			heap_push(heap, &hn, key, i);
	}
	fj_status st = fj_pass_rebuild_begin(&e.rb, old);
	if (st)
		return fj_pass_rebuild_finish(&e.rb, f->m, st);
	while (hn && st == FJ_OK) {
		uint32_t u = heap_pop(heap, &hn, key);
		done++;
		if (f->cls[u] == NC_OUTSIDE) {
			const fj_node *n = &old->nodes[u];
			fj_vid ostack[16], *ops = n->nopnds <= 16 ? ostack : fz_alloc(f, n->nopnds * sizeof *ops);
			if (!ops) {
				st = FJ_ERR_NOMEM;
				break;
			}
			for (uint32_t o = 0; o < n->nopnds; o++)
				ops[o] = fj_pass_rebuild_value(&e.rb, n->opnds[o]);
			if (fj_pass_rebuild_copy(&e.rb, n, ops) == FJ_NONODE)
				st = FJ_ERR_NOMEM;
		} else {
			st = emit_region(&e, u);
		}
		for (uint32_t j = ug.estart[u]; j < ug.estart[u + 1]; j++)
			if (--ug.indeg[ug.edges[j]] == 0)
				heap_push(heap, &hn, key, ug.edges[j]);
	}
	if (st == FJ_OK && done != total)
		st = fj_error(f->ctx, old->loc, "internal error: fuse formed a cycle between regions of @%s", old->name);
	*nkernels = e.nkernels;
	return fj_pass_rebuild_finish(&e.rb, f->m, st);
}

/* ---- the pass ---- */

/* ---- attention (fuse{attention=true}) ---- */

/* Is node d a layout op of one result, not returned, whose consumers are
 * all in the group grp[0..n)? */
static bool group_layout(const fuser *f, uint32_t d, const uint32_t *grp, uint32_t n)
{
	const fj_node *x = &f->g->nodes[d];
	if (f->cls[d] != NC_FUSIBLE || !(op_flags(f, d) & FJ_OPF_LAYOUT) || x->nres != 1 || f->returned[x->res[0]])
		return false;
	for (uint32_t u = f->ustart[x->res[0]]; u < f->ustart[x->res[0] + 1]; u++) {
		bool in = false;
		for (uint32_t k = 0; k < n && !in; k++)
			in = grp[k] == f->ulist[u];
		if (!in)
			return false;
	}
	return true;
}

enum { ATT_CAP = FJ_ATTN_MAX_NODES + 32 };

/* Makes nodes grp[0..n) (the pattern's, each still a region of its own)
 * one solo region, with the layout ops that only the group reads (Q, K and
 * V reshaped or transposed from other kernels' results, read in place; a
 * row value broadcast back over the weights), to a fixed point: those of
 * the matmuls and of each other, and with `all`, those of every member; and
 * the reshapes of the results of outs[0..nouts) (heads unfolded from the
 * batch), the only consumer each. False (nothing changed) when a node is
 * taken. */
static bool group_solo(fuser *f, uint32_t *grp, uint32_t n, bool all, const uint32_t *outs, uint32_t nouts)
{
	fj_graph *g = f->g;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t x = grp[k];
		if (!((f->cls[x] == NC_FUSIBLE || f->cls[x] == NC_MATMUL) && f->parent[x] == x && f->next[x] == FJ_NONODE))
			return false;
	}
	for (bool grew = true; grew;) {
		grew = false;
		for (uint32_t k = 0; k < n && n < ATT_CAP; k++) {
			const fj_node *x = &g->nodes[grp[k]];
			if (!all && x->op != FJ_OP_PRIMS_MATMUL && !(op_flags(f, grp[k]) & FJ_OPF_LAYOUT))
				continue;
			for (uint32_t o = 0; o < x->nopnds && n < ATT_CAP; o++) {
				uint32_t d = def_node(g, x->opnds[o]);
				bool have = false;
				for (uint32_t j = 0; j < n && !have; j++)
					have = grp[j] == d;
				if (d != FJ_NONODE && !have && f->parent[d] == d && group_layout(f, d, grp, n)) {
					grp[n++] = d;
					grew = true;
				}
			}
		}
	}
	for (uint32_t k = 0; k < nouts; k++)
		for (fj_vid o = g->nodes[outs[k]].res[0];
		     n < ATT_CAP && !f->returned[o] && f->ustart[o + 1] == f->ustart[o] + 1;) {
			uint32_t c = f->ulist[f->ustart[o]];
			if (g->nodes[c].op != FJ_OP_PRIMS_RESHAPE || f->cls[c] != NC_FUSIBLE || f->parent[c] != c)
				break;
			grp[n++] = c;
			o = g->nodes[c].res[0];
		}
	qsort(grp, n, sizeof *grp, cmp_u32);
	uint32_t root = grp[0];
	for (uint32_t k = 0; k < n; k++) {
		f->parent[grp[k]] = root;
		f->next[grp[k]] = k + 1 < n ? grp[k + 1] : FJ_NONODE;
	}
	f->head[root] = root;
	f->rflags[root] = RF_SOLO;
	return true;
}

/* Is node i a matmul still in a region of its own? */
static bool lone_matmul(const fuser *f, uint32_t i)
{
	return f->cls[i] == NC_MATMUL && f->parent[i] == i && f->head[i] == i && f->next[i] == FJ_NONODE;
}

/* Groups each attention pattern (ir/attention.c) into one solo region,
 * before the merging rounds: the two matmuls, the score chain and the
 * softmax (group_solo adds their layout prologues and the output's
 * reshapes), so that neither the scores nor the weights are ever written
 * to memory. Then each attention backward with its weights recomputed
 * (fj_attn_bw_match): its first-stage matmuls, the weights' pointwise
 * nodes and its second-stage matmuls (dQ, dK, dV), with the layout ops
 * only they read. The schedule pass names such regions `attention` and
 * `attention_bw`. */
static void group_attention(fuser *f, const bool *live)
{
	fj_graph *g = f->g;
	uint32_t grp[ATT_CAP];
	for (uint32_t i = 0; i < f->nn; i++) {
		fj_attn at;
		if (!lone_matmul(f, i) || !fj_attn_match(g, i, live, f->flag, &at))
			continue;
		memcpy(grp, at.nodes, at.nnodes * sizeof *grp);
		group_solo(f, grp, at.nnodes, false, &i, 1);
	}
	for (uint32_t i = 0; i < f->nn; i++) {
		fj_attn_bw ab;
		if (!lone_matmul(f, i) || !fj_attn_bw_match(g, i, live, f->flag, &ab))
			continue;
		memcpy(grp, ab.nodes, ab.nnodes * sizeof *grp);
		group_solo(f, grp, ab.nnodes, true, ab.g, ab.ng);
	}
}

static fj_status fuse_graph(fj_module *m, fj_graph *g, bool attention, uint32_t *nkernels, bool *changed)
{
	fj_context *ctx = m->ctx;
	fuser f = {.ctx = ctx, .m = m, .g = g, .nn = g->nnodes, .nv = g->nvalues};
	*nkernels = 0;
	*changed = false;
	bool *used = NULL, *live = NULL;
	fj_status st = fj_pass_liveness(g, &used, &live);
	if (st)
		return st;
	bool any = false;
	for (uint32_t i = 0; i < g->nnodes && !any; i++)
		any = fj_op_info(ctx, g->nodes[i].op)->flags & FJ_OPF_PRIMS;
	if (!any)
		goto out;
	uint32_t nn = f.nn, nv = f.nv;
	f.cls = fz_alloc(&f, nn);
	f.fcost = fz_alloc(&f, nn * sizeof *f.fcost);
	f.rflags = fz_alloc(&f, nn);
	f.parent = fz_alloc(&f, nn * sizeof *f.parent);
	f.next = fz_alloc(&f, nn * sizeof *f.next);
	f.head = fz_alloc(&f, nn * sizeof *f.head);
	f.ustart = fz_alloc(&f, (nv + 2) * sizeof *f.ustart);
	f.returned = fz_alloc(&f, nv);
	f.mem = fz_alloc(&f, (nn + 1) * sizeof *f.mem);
	f.flag = fz_alloc(&f, nn);
	f.stamp = fz_alloc(&f, (nn + 1) * sizeof *f.stamp);
	f.queue = fz_alloc(&f, (nn + 1) * sizeof *f.queue);
	f.reds = fz_alloc(&f, (nn + 1) * sizeof *f.reds);
	f.level = fz_alloc(&f, (nn + 1) * sizeof *f.level);
	f.ver = fz_alloc(&f, (nn + 1) * sizeof *f.ver);
	f.rmask = fz_alloc(&f, (nn + 1) * sizeof *f.rmask);
	f.vstamp = fz_alloc(&f, (nv + 1) * sizeof *f.vstamp);
	if (f.oom) {
		st = FJ_ERR_NOMEM;
		goto out;
	}
	/* Use lists of live nodes (each consumer once per value). */
	uint32_t nuses = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass) {
			for (fj_vid v = 0; v < nv; v++)
				f.ustart[v + 2] += f.ustart[v + 1];
			f.ulist = fz_alloc(&f, (nuses + 1) * sizeof *f.ulist);
			if (!f.ulist) {
				st = FJ_ERR_NOMEM;
				goto out;
			}
		}
		for (uint32_t i = 0; i < nn; i++) {
			if (!live[i])
				continue;
			const fj_node *n = &g->nodes[i];
			for (uint32_t o = 0; o < n->nopnds; o++) {
				fj_vid v = n->opnds[o];
				bool seen = v == FJ_NOVAL;
				for (uint32_t p = 0; p < o && !seen; p++)
					seen = n->opnds[p] == v;
				if (seen)
					continue;
				if (!pass) {
					f.ustart[v + 2]++;
					nuses++;
				} else {
					f.ulist[f.ustart[v + 1]++] = i;
				}
			}
		}
	}
	for (uint32_t i = 0; i < g->nresults; i++)
		if (g->results[i] != FJ_NOVAL)
			f.returned[g->results[i]] = true;
	if ((st = classify(&f, live)) != FJ_OK)
		goto out;
	for (uint32_t i = 0; i < nn; i++) {
		if (live[i] && (op_flags(&f, i) & FJ_OPF_REDUCTION) && g->nodes[i].nopnds)
			f.rmask[i] = fj_node_reduced_mask(f.ctx, &g->nodes[i], vtype(&f, g->nodes[i].opnds[0])->rank);
		f.parent[i] = i;
		f.next[i] = FJ_NONODE;
		f.head[i] = i;
		f.rflags[i] = f.cls[i] == NC_MATMUL ? RF_MATMUL : f.cls[i] == NC_SOLO ? RF_SOLO : 0;
	}
	if (attention)
		group_attention(&f, live);
	if (!compute_levels(&f)) {
		st = FJ_ERR_NOMEM;
		goto out;
	}
	vertical(&f);
	for (int round = 0; round < 4; round++) {
		bool h = horizontal(&f);
		h = same_space(&f) || h;
		if (!h || !vertical(&f))
			break;
	}
	if (epilogue_siblings(&f))
		vertical(&f);
	if (f.oom) {
		st = FJ_ERR_NOMEM;
		goto out;
	}
	st = emit(&f, nkernels);
	*changed = true;
out: /* g may be gone (replaced by its rewrite): sizes from f */
	fj_free(ctx, used, f.nv ? f.nv : 1);
	fj_free(ctx, live, f.nn ? f.nn : 1);
	fz_free_all(&f);
	if (st == FJ_ERR_NOMEM)
		m->oom = true;
	return st;
}

fj_status fj_pass_fuse(fj_pass_run *r)
{
	fj_module *m = r->m;
	/* Each graph is replaced, at its position, by its rewrite. */
	for (uint32_t i = 0; i < m->ngraphs; i++) {
		fj_graph *g = m->graphs[i];
		uint32_t nk = 0;
		bool changed = false;
		fj_status st = fuse_graph(m, g, fj_pass_opt_bool(r, "attention"), &nk, &changed);
		if (st)
			return st;
		if (changed)
			fj_pass_stat(r, "fuse @%s: %u kernels", m->graphs[i]->name, nk);
	}
	return FJ_OK;
}
