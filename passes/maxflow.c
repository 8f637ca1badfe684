/* maxflow.c -- Dinic's maximum flow (see maxflow.h).
 *
 * Algorithm: repeat { BFS from s over edges with residual capacity, giving
 * each node its level; if t is unreachable, stop; find a blocking flow with
 * depth-first searches that only go from level l to l+1, each node keeping a
 * current-edge pointer so that no edge is looked at twice per phase }. The
 * DFS is iterative (an explicit path of edges), so deep graphs cannot
 * overflow the C stack. When it stops, the nodes BFS reached form the source
 * side of a minimum cut (max-flow min-cut theorem).
 *
 * Complexity: O(V^2 E) in general, O(E sqrt(V)) on unit-capacity networks;
 * the networks of partition (DAGs of split nodes, most paths short) run in
 * a few phases. Memory: O(V + E). Edges are stored in pairs (e, e^1: the
 * reverse edge, of capacity 0), adjacency as linked lists (head/next).
 *
 * Reference: E. A. Dinic, "Algorithm for solution of a problem of maximum
 * flow in networks with power estimation", 1970; Cormen et al., ch. 26. */
#include <string.h>

#include "passes/maxflow.h"

struct fj_maxflow {
	fj_context *ctx;
	uint32_t n, m, cap_m;  /* nodes, edges (both directions), allocated edges */
	int32_t *head, *next;  /* adjacency lists */
	uint32_t *to;
	int64_t *cap;          /* residual capacities */
	int32_t *level, *it, *queue, *path;
};

fj_maxflow *fj_maxflow_create(fj_context *ctx, uint32_t nnodes)
{
	fj_maxflow *f = fj_alloc(ctx, sizeof *f);
	if (!f)
		return NULL;
	memset(f, 0, sizeof *f);
	f->ctx = ctx;
	f->n = nnodes;
	size_t n = nnodes ? nnodes : 1;
	f->head = fj_alloc(ctx, n * sizeof *f->head);
	f->level = fj_alloc(ctx, n * sizeof *f->level);
	f->it = fj_alloc(ctx, n * sizeof *f->it);
	f->queue = fj_alloc(ctx, n * sizeof *f->queue);
	f->path = fj_alloc(ctx, (n + 1) * sizeof *f->path);
	if (!f->head || !f->level || !f->it || !f->queue || !f->path) {
		fj_maxflow_destroy(f);
		return NULL;
	}
	memset(f->head, 0xff, n * sizeof *f->head);
	memset(f->level, 0xff, n * sizeof *f->level);
	return f;
}

void fj_maxflow_destroy(fj_maxflow *f)
{
	if (!f)
		return;
	size_t n = f->n ? f->n : 1;
	fj_context *ctx = f->ctx;
	if (f->head)
		fj_free(ctx, f->head, n * sizeof *f->head);
	if (f->level)
		fj_free(ctx, f->level, n * sizeof *f->level);
	if (f->it)
		fj_free(ctx, f->it, n * sizeof *f->it);
	if (f->queue)
		fj_free(ctx, f->queue, n * sizeof *f->queue);
	if (f->path)
		fj_free(ctx, f->path, (n + 1) * sizeof *f->path);
	if (f->cap_m) {
		fj_free(ctx, f->next, f->cap_m * sizeof *f->next);
		fj_free(ctx, f->to, f->cap_m * sizeof *f->to);
		fj_free(ctx, f->cap, f->cap_m * sizeof *f->cap);
	}
	fj_free(ctx, f, sizeof *f);
}

uint32_t fj_maxflow_edge_count(const fj_maxflow *f) { return f->m / 2; }

fj_status fj_maxflow_add_edge(fj_maxflow *f, uint32_t u, uint32_t v, int64_t cap)
{
	FJ_ASSERT(u < f->n && v < f->n && cap >= 0);
	if (f->m + 2 > f->cap_m) {
		uint32_t nc = f->cap_m ? f->cap_m * 2 : 64;
		int32_t *nx = fj_alloc(f->ctx, nc * sizeof *nx);
		uint32_t *nt = fj_alloc(f->ctx, nc * sizeof *nt);
		int64_t *ncp = fj_alloc(f->ctx, nc * sizeof *ncp);
		if (!nx || !nt || !ncp) {
			if (nx)
				fj_free(f->ctx, nx, nc * sizeof *nx);
			if (nt)
				fj_free(f->ctx, nt, nc * sizeof *nt);
			if (ncp)
				fj_free(f->ctx, ncp, nc * sizeof *ncp);
			return FJ_ERR_NOMEM;
		}
		if (f->cap_m) {
			memcpy(nx, f->next, f->m * sizeof *nx);
			memcpy(nt, f->to, f->m * sizeof *nt);
			memcpy(ncp, f->cap, f->m * sizeof *ncp);
			fj_free(f->ctx, f->next, f->cap_m * sizeof *nx);
			fj_free(f->ctx, f->to, f->cap_m * sizeof *nt);
			fj_free(f->ctx, f->cap, f->cap_m * sizeof *ncp);
		}
		f->next = nx;
		f->to = nt;
		f->cap = ncp;
		f->cap_m = nc;
	}
	uint32_t e = f->m;
	f->to[e] = v;
	f->cap[e] = cap;
	f->next[e] = f->head[u];
	f->head[u] = (int32_t)e;
	f->to[e + 1] = u;
	f->cap[e + 1] = 0;
	f->next[e + 1] = f->head[v];
	f->head[v] = (int32_t)(e + 1);
	f->m += 2;
	return FJ_OK;
}

/* Levels from s over residual edges; true when t is reached. */
static bool bfs(fj_maxflow *f, uint32_t s, uint32_t t)
{
	memset(f->level, 0xff, f->n * sizeof *f->level);
	uint32_t qh = 0, qt = 0;
	f->level[s] = 0;
	f->queue[qt++] = (int32_t)s;
	while (qh < qt) {
		uint32_t u = (uint32_t)f->queue[qh++];
		for (int32_t e = f->head[u]; e >= 0; e = f->next[e]) {
			uint32_t v = f->to[e];
			if (f->cap[e] > 0 && f->level[v] < 0) {
				f->level[v] = f->level[u] + 1;
				f->queue[qt++] = (int32_t)v;
			}
		}
	}
	return f->level[t] >= 0;
}

/* A blocking flow over the level graph, by iterative DFS. */
static int64_t blocking(fj_maxflow *f, uint32_t s, uint32_t t)
{
	int64_t total = 0;
	memcpy(f->it, f->head, f->n * sizeof *f->it);
	uint32_t d = 0, u = s;
	for (;;) {
		if (u == t) {
			int64_t b = FJ_FLOW_INF;
			for (uint32_t i = 0; i < d; i++)
				if (f->cap[f->path[i]] < b)
					b = f->cap[f->path[i]];
			if (b >= FJ_FLOW_INF)
				return FJ_FLOW_INF;
			uint32_t first = d;
			for (uint32_t i = 0; i < d; i++) {
				int32_t e = f->path[i];
				f->cap[e] -= b;
				f->cap[e ^ 1] += b;
				if (f->cap[e] == 0 && first == d)
					first = i;
			}
			total += b;
			d = first;
			u = d ? f->to[f->path[d - 1]] : s;
			continue;
		}
		int32_t e = f->it[u];
		while (e >= 0 && !(f->cap[e] > 0 && f->level[f->to[e]] == f->level[u] + 1))
			e = f->next[e];
		f->it[u] = e;
		if (e >= 0) {
			f->path[d++] = e;
			u = f->to[e];
			continue;
		}
		/* dead end: u is useless for the rest of this phase */
		f->level[u] = -1;
		if (d == 0)
			return total;
		d--;
		u = d ? f->to[f->path[d - 1]] : s;
		f->it[u] = f->next[f->it[u]];
	}
}

fj_status fj_maxflow_run(fj_maxflow *f, uint32_t s, uint32_t t, int64_t *flow)
{
	int64_t total = 0;
	while (bfs(f, s, t)) {
		int64_t b = blocking(f, s, t);
		if (b >= FJ_FLOW_INF || total >= FJ_FLOW_INF - b) {
			total = FJ_FLOW_INF;
			break;
		}
		total += b;
	}
	bfs(f, s, t); /* leaves the source side in level[] */
	*flow = total;
	return FJ_OK;
}

bool fj_maxflow_source_side(const fj_maxflow *f, uint32_t u) { return f->level[u] >= 0; }
