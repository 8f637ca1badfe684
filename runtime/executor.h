/* executor.h -- the one executor interface: how a graph is compiled, bound
 * to sizes, run and timed, whatever runs it.
 *
 * Three executors sit behind it, as rows of one table of functions (ggml's
 * backend vtable):
 *   aten   one kernel per op on one thread: the reference (program.h)
 *   host   the `default` pipeline's regions as host kernels, over all
 *          cores (program.h)
 *   nvptx  the regions as PTX on a GPU device of backend_nvptx/device.h:
 *          the CUDA driver, or the host emulator (program_nvptx.h)
 * All three bind with the one symbol binder and plan their intermediate
 * buffers with the one buffer plan (binder.h), so an input is checked, and
 * a size error reported, the same way on each.
 *
 * Life cycle: fj_rt_exec_create (compile) -> fj_rt_exec_bind (sizes, shape
 * checks, buffers; again when the input shapes change) -> fj_rt_exec_run
 * (any number of times) -> fj_rt_exec_destroy. A compiled program holds
 * mutable state (bound sizes, buffers): one thread uses it at a time, and
 * programs sharing a GPU device bracket bind, run and destroy with the
 * device's enter and leave (backend_nvptx/device.h). */
#ifndef FJ_RT_EXECUTOR_H
#define FJ_RT_EXECUTOR_H

#include "backend_nvptx/device.h"
#include "runtime/binder.h"

/* What a compilation may be told. */
typedef struct fj_rt_exec_options {
	int threads;                   /* host: run on at most this many threads (0: all of the pool's) */
	const fj_nvptx_device *device; /* nvptx: the device (copied; NULL: the CUDA driver's) */
} fj_rt_exec_options;

/* IR.md §5 --bench: the median time of one run (the host: a whole run; a
 * device: the launches alone, inputs uploaded once, timed with events) over
 * `reps` runs, and the same-run copy of bytes/2 (bytes = inputs + outputs)
 * as the baseline. */
typedef struct fj_rt_bench {
	double median_ms, copy_ms;
	int reps;
	size_t bytes;
} fj_rt_bench;

/* What a compiled program reports. */
typedef struct fj_rt_exec_info {
	uint32_t compiled;  /* kernels compiled by create (cache misses) */
	uint32_t kernels;   /* nvptx: the fused regions; else 0 */
	int threads;        /* threads a run uses (1 for aten and nvptx) */
	const char *target; /* nvptx: "sm_90" ...; else NULL */
	const char *device; /* nvptx: the GPU's name; else NULL */
} fj_rt_exec_info;

typedef struct fj_rt_executor {
	const char *name; /* "aten", "host", "nvptx" */
	/* Whether --executor=auto may pick this executor for g here (aten: g
	 * unfused; host: always; nvptx: a CUDA driver and a GPU are usable). */
	bool (*supports)(fj_context *ctx, const fj_graph *g);
	/* Compiles g (verified; it must outlive the program) into *prog. */
	fj_status (*compile)(fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o, void **prog);
	/* Binds the sizes (binder.h's fj_rt_binding_bind) and plans the buffers. */
	fj_status (*bind)(void *prog, const fj_rt_tensor *const *inputs, const char *const *origin,
	                  const fj_rt_dimarg *dims, size_t ndims);
	/* Runs on inputs into outputs (allocated, or reused when of the right
	 * type). in_dev/out_dev: inputs and outputs in the device's memory
	 * (nvptx only; see fj_rt_nvptx_run_dev); NULL for host memory. */
	fj_status (*run)(void *prog, const fj_rt_tensor *const *inputs, const uint64_t *in_dev, fj_rt_tensor *outputs,
	                 const uint64_t *out_dev);
	/* --bench after a run; reps > 0: exactly that many timed runs (the host). */
	fj_status (*bench)(void *prog, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs, int reps,
	                   fj_rt_bench *out);
	void (*free)(void *prog);
	/* The binding of the graph given to compile. */
	const fj_rt_binding *(*binding)(const void *prog);
	void (*info)(const void *prog, fj_rt_exec_info *out);
	/* nvptx: the caller's stream for the next binds, runs and benches
	 * (fj_rt_nvptx_set_stream; NULL: the device's own); NULL entry for
	 * executors without a device */
	void (*set_stream)(void *prog, void *stream);
} fj_rt_executor;

extern const fj_rt_executor fj_rt_aten_executor, fj_rt_host_executor, fj_rt_nvptx_executor;

/* The executor named `name` ("aten", "host", "nvptx"), or NULL. */
const fj_rt_executor *fj_rt_executor_named(const char *name);
/* --executor=auto: nvptx where it is supported, else host. */
const fj_rt_executor *fj_rt_executor_auto(fj_context *ctx, const fj_graph *g);

/* A compiled program of some executor. */
typedef struct fj_rt_exec {
	const fj_rt_executor *ex;
	fj_context *ctx;
	fj_graph *g;
	void *prog;
} fj_rt_exec;

fj_status fj_rt_exec_create(const fj_rt_executor *ex, fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o,
                            fj_rt_exec **out);
void fj_rt_exec_destroy(fj_rt_exec *e);
fj_status fj_rt_exec_bind(fj_rt_exec *e, const fj_rt_tensor *const *inputs, const char *const *origin,
                          const fj_rt_dimarg *dims, size_t ndims);
fj_status fj_rt_exec_run(fj_rt_exec *e, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                         fj_rt_tensor *outputs, const uint64_t *out_dev);
/* The stream of e's next binds, runs and benches (executors without one ignore it). */
void fj_rt_exec_set_stream(fj_rt_exec *e, void *stream);
fj_status fj_rt_exec_bench(fj_rt_exec *e, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs, int reps,
                           fj_rt_bench *out);
/* After a successful bind: the shape of value v of the graph, and symbol s's
 * size (-1 when the graph does not use it). */
const int64_t *fj_rt_exec_value_dims(const fj_rt_exec *e, fj_vid v);
int64_t fj_rt_exec_symbol(const fj_rt_exec *e, uint32_t s);
fj_rt_exec_info fj_rt_exec_info_of(const fj_rt_exec *e);

#endif
