/* rebuild.h -- rebuilding a graph into a fresh one, node by node, for the
 * passes that rewrite a whole graph (decompose, canonicalize).
 *
 * A rewrite builds a NEW graph beside the old one: parameters (names, types,
 * annotations) and graph annotations are copied, every old value is mapped to
 * a new one (map[old] = new), nodes are copied, rewritten or expanded, and the
 * new graph finally replaces the old one in the module under the same name,
 * at the same position. Dead values and stale ids never survive a rewrite,
 * which keeps the verifier's strict checks trivially true. */
#ifndef FJ_PASS_REBUILD_H
#define FJ_PASS_REBUILD_H

#include "ir.h"

typedef struct fj_rebuild {
	fj_graph *old;   /* the graph being rewritten (not modified) */
	fj_graph *g;     /* the new graph */
	fj_vid *map;     /* old value -> new value, FJ_NOVAL until mapped */
	uint32_t nmap;
} fj_rebuild;

/* Starts a rewrite of old: a new stand-alone graph with old's name, location,
 * annotations and parameters. Returns FJ_ERR_NOMEM on failure. */
fj_status fj_pass_rebuild_begin(fj_rebuild *rb, fj_graph *old);
/* The new value of old value v: literals are copied on first use; FJ_NOVAL
 * (a `none` operand) maps to FJ_NOVAL. */
fj_vid fj_pass_rebuild_value(fj_rebuild *rb, fj_vid v);
/* Appends a copy of node n of the old graph with the given new operands:
 * same op, attributes, annotations, location, result names and types; a
 * fusion.kernel's body is cloned with its parameters named after the new
 * operands. Maps n's results. Returns the new node index, or FJ_NONODE. */
uint32_t fj_pass_rebuild_copy(fj_rebuild *rb, const fj_node *n, const fj_vid *opnds);
/* Names the results of the new graph's nodes from n0 on `hint``sep`<k>
 * (k counting up from 0), each with a name neither graph uses: values a
 * rewrite builds get names no later copied value can clash with. */
fj_status fj_pass_rebuild_name_from(fj_rebuild *rb, uint32_t n0, const char *hint, const char *sep);
/* Sets the results (mapped) and puts the new graph in the old one's place,
 * destroying the old graph; on failure destroys the new graph instead. */
fj_status fj_pass_rebuild_finish(fj_rebuild *rb, fj_module *m, fj_status st);
/* Abandons the rewrite: the new graph is destroyed, the old one stays. */
void fj_pass_rebuild_abort(fj_rebuild *rb);
/* Values used by some node (or returned), transitively from the results:
 * used[v] for the old graph's values; live[i] for its nodes (a node is live
 * when one of its results is used). Arrays allocated with fj_alloc. */
fj_status fj_pass_liveness(const fj_graph *g, bool **used, bool **live);

#endif
