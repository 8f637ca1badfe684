/* program.h -- a compiled program: a graph's per-node kernels for an
 * executor, the binding of its symbolic sizes, a buffer plan and the
 * execution of its steps.
 *
 * Life cycle:
 *   fj_rt_program_create   compiles every node's kernel (fj_host_compile_nodes;
 *                          identical kernels compile once per context)
 *   fj_rt_program_bind     binds the symbols from the given inputs' shapes and
 *                          --dim values, checks every node's shapes with the
 *                          concrete sizes (the shared binder, binder.h) and
 *                          plans the buffers (the shared plan, binder.h)
 *   fj_rt_program_run      runs the kernels (any number of times)
 *
 * Executors: `aten` runs each node's kernel on one thread (unfused graphs
 * only); `host` runs a graph through the `default` pipeline (on a copy: the
 * graph given is left as it is) and then each fusion.kernel as one kernel
 * (codegen/region_host.c) and any node left outside regions with its per-node
 * kernel, split over all cores with fj_host_parallel_for. A graph that holds
 * fusion.kernel nodes already runs as it is; one whose pointwise ops broadcast
 * two different symbolic sizes against each other (which prims cannot
 * express) runs its per-node kernels.
 *
 * Buffer plan (binder.h): one buffer per intermediate value, reused once the
 * value is dead (liveness over the node order, best fit by size). Graph
 * inputs are the caller's; graph outputs are the caller's tensors (fj_rt_program_run
 * allocates them, or reuses them when already of the right type, so repeated
 * runs allocate nothing). A value returned twice, a returned parameter and a
 * returned literal each get their own output tensor. */
#ifndef FJ_RT_PROGRAM_H
#define FJ_RT_PROGRAM_H

#include "runtime/binder.h"

/* The kind of program (the aten or the host executor, executor.h). */
typedef enum fj_rt_program_kind { FJ_RT_EXEC_ATEN, FJ_RT_EXEC_HOST } fj_rt_program_kind;

typedef struct fj_rt_program fj_rt_program;

/* Compiles g for the executor. g must be verified and must outlive the program. */
fj_status fj_rt_program_create(fj_context *ctx, fj_graph *g, fj_rt_program_kind ex, fj_rt_program **out);
void fj_rt_program_destroy(fj_rt_program *p);
/* Host executor: run on at most n threads (n > 0; at most the pool's); 0:
 * all of the pool's. No effect on other executors. */
void fj_rt_program_set_threads(fj_rt_program *p, int n);
/* Kernels compiled by fj_rt_program_create (cache misses). */
uint32_t fj_rt_program_compiled(const fj_rt_program *p);
const fj_graph *fj_rt_program_graph(const fj_rt_program *p);

/* Binds the symbols. inputs[i] is parameter i's tensor, or NULL when it is
 * not given (its shape then comes from the symbols); origin[i] (may be NULL,
 * or hold NULLs) names where input i came from, for messages. Errors: an
 * input of the wrong dtype or shape, a symbol bound to two sizes (naming the
 * symbol, both sizes and where they came from), a symbol left unbound (naming
 * it and --dim), a --dim for a symbol the module does not have, sizes that
 * overflow, and shapes that are invalid at run time (two symbols broadcast
 * against each other with different sizes ...), at the node's place. */
fj_status fj_rt_program_bind(fj_rt_program *p, const fj_rt_tensor *const *inputs,
                             const char *const *origin, const fj_rt_dimarg *dims, size_t ndims);
/* After a successful bind: the concrete shape of value v (rank = its type's). */
const int64_t *fj_rt_program_value_dims(const fj_rt_program *p, fj_vid v);
/* After a successful bind: symbol s's size, or -1 when the graph does not use it. */
int64_t fj_rt_program_symbol(const fj_rt_program *p, uint32_t s);
/* The binding itself (the sizes of the graph given to create). */
const fj_rt_binding *fj_rt_program_binding(const fj_rt_program *p);
/* Bytes of intermediate buffers in the plan, and how many buffers (for tests). */
size_t fj_rt_program_plan_bytes(const fj_rt_program *p, uint32_t *nbuffers);

/* Runs the program on inputs (one per parameter, of the bound shapes) into
 * outputs[0..g->nresults) (allocated, or reused when already of the right
 * dtype and shape). A kernel failing (an index out of range ...) is an error
 * at the node's place. */
fj_status fj_rt_program_run(fj_rt_program *p, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs);

/* The thread count the executor uses (1 for aten). */
int fj_rt_program_threads(const fj_rt_program *p);

#endif
