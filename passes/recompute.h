/* recompute.h -- the recomputation policy of the `recompute` pass, shared
 * with `partition` (which runs it itself on a joint graph nothing marked). */
#ifndef FJ_PASS_RECOMPUTE_H
#define FJ_PASS_RECOMPUTE_H

#include "ir.h"

/* The symbolic size substituted for every symbol when sizes are weighed. */
#define FJ_SYM_WEIGHT 8192.0

/* A joint graph: {num_fwd_outputs} and a name ending in ".joint". */
bool fj_is_joint_graph(const fj_graph *g);
/* Bytes of a value of type t, symbols taken as FJ_SYM_WEIGHT. */
double fj_type_bytes_est(const fj_module *m, const fj_type *t);
/* Whether node n of g may be recomputed in the backward (functorch's
 * ban_recomputation, negated, on prims; see recompute.c). */
bool fj_recompute_node(const fj_graph *g, const fj_node *n, bool aggressive);
/* Marks every node of g {recomputable=...} and its parameters false. */
void fj_recompute_graph(fj_graph *g, bool aggressive);

#endif
