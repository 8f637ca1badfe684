/* maxflow.h -- maximum flow / minimum s-t cut (Dinic's algorithm), for the
 * min-cut rematerialization of `partition`.
 *
 * Nodes are 0..n-1; capacities are int64_t >= 0, FJ_FLOW_INF standing for an
 * edge the cut may not cross. Add edges, run once, then ask which side of
 * the minimum cut each node is on. */
#ifndef FJ_PASS_MAXFLOW_H
#define FJ_PASS_MAXFLOW_H

#include "ir.h"

#define FJ_FLOW_INF (INT64_MAX / 4)

typedef struct fj_maxflow fj_maxflow;

/* NULL on allocation failure. */
fj_maxflow *fj_maxflow_create(fj_context *ctx, uint32_t nnodes);
void fj_maxflow_destroy(fj_maxflow *f);
/* Adds a directed edge u -> v of capacity cap (FJ_ERR_NOMEM on failure). */
fj_status fj_maxflow_add_edge(fj_maxflow *f, uint32_t u, uint32_t v, int64_t cap);
/* Computes a maximum flow from s to t into *flow (FJ_FLOW_INF when an
 * infinite path joins them). */
fj_status fj_maxflow_run(fj_maxflow *f, uint32_t s, uint32_t t, int64_t *flow);
/* After a run: whether u lies on the source side of the minimum cut (it is
 * reachable from s in the residual network). The cut's edges are the edges
 * from the source side to the other. */
bool fj_maxflow_source_side(const fj_maxflow *f, uint32_t u);
uint32_t fj_maxflow_edge_count(const fj_maxflow *f);

#endif
