/* program_nvptx.h -- the `nvptx` executor: a graph fused by the default
 * pipeline, its regions compiled to PTX (one module per region, cached per
 * context), device buffers, uploads, launches on one stream, downloads, and
 * --bench with device events. It runs on a GPU device of
 * backend_nvptx/device.h: the CUDA driver, or the host emulator.
 *
 * Life cycle (as fj_rt_program's, program.h):
 *   fj_rt_nvptx_create   copies the graph (ir/clone.c), runs
 *                        `default` on the copy when the graph is not fused
 *                        yet, and prepares every region on the device
 *   fj_rt_nvptx_bind     binds the symbols from the inputs' shapes and --dim
 *                        and checks every node of the graph given with the
 *                        concrete sizes (the shared binder, binder.h, as the
 *                        host executors do), plans launches, allocates
 *                        device buffers (the shared plan, binder.h) and
 *                        uploads the kernels' size arrays
 *   fj_rt_nvptx_run      uploads the inputs, launches, downloads the outputs
 * Several threads: programs on one device bracket bind, run and destroy with
 * the device's enter and leave (device.h). */
#ifndef FJ_RT_PROGRAM_NVPTX_H
#define FJ_RT_PROGRAM_NVPTX_H

#include "backend_nvptx/device.h"
#include "runtime/binder.h"

typedef struct fj_rt_nvprog fj_rt_nvprog;

/* On the CUDA driver's device (fj_nvptx_cuda_device). g must be verified and
 * must outlive the program. */
fj_status fj_rt_nvptx_create(fj_context *ctx, const fj_graph *g, fj_rt_nvprog **out);
/* The same on another device (dev is copied; its ud must outlive p). */
fj_status fj_rt_nvptx_create_on(fj_context *ctx, const fj_graph *g, const fj_nvptx_device *dev,
                                fj_rt_nvprog **out);
void fj_rt_nvptx_destroy(fj_rt_nvprog *p);
/* Regions compiled by create (cache misses), and all of them. */
uint32_t fj_rt_nvptx_compiled(const fj_rt_nvprog *p);
uint32_t fj_rt_nvptx_kernels(const fj_rt_nvprog *p);
/* The target the kernels were compiled for ("sm_90") and the GPU's name. */
const char *fj_rt_nvptx_target(const fj_rt_nvprog *p);
const char *fj_rt_nvptx_device(const fj_rt_nvprog *p);

fj_status fj_rt_nvptx_bind(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, const char *const *origin,
                           const fj_rt_dimarg *dims, size_t ndims);
/* After bind: the shape of parameter i of the graph given to create. */
const int64_t *fj_rt_nvptx_param_dims(const fj_rt_nvprog *p, uint32_t i);
/* The binding of the graph given to create (its values' shapes, symbols). */
const fj_rt_binding *fj_rt_nvptx_binding(const fj_rt_nvprog *p);
fj_status fj_rt_nvptx_run(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs);

/* fj_rt_nvptx_run with some buffers in the caller's device memory (the
 * public API's CUDA tensors), used in place, with no host round trip:
 * in_dev[i] != 0 is parameter i's dense device buffer (not uploaded: inputs[i]
 * gives its shape only); out_dev[k] != 0 is where result k goes, a dense
 * device buffer of the bound shape (outputs[k] is then left alone). The
 * kernels read and write those buffers directly; a returned parameter or
 * literal, or a value returned twice, is copied on the device. The caller's
 * buffers must not overlap. in_dev and out_dev may be NULL (all on the host:
 * the same as fj_rt_nvptx_run). */
fj_status fj_rt_nvptx_run_dev(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                              fj_rt_tensor *outputs, const uint64_t *out_dev);

/* The stream p's next binds, runs and benches queue their work on: a
 * caller's stream (a CUstream of the device's primary context; on the
 * emulator any non-NULL token), or NULL for the device's own. Set it on
 * every use: a pooled program keeps the last one. On the caller's stream
 * a run whose parameters and results are all in device memory (in_dev,
 * out_dev) returns without synchronising, unless a kernel may report an
 * error (indexing, argmax ...); any other run synchronises that stream
 * before returning. Work of p still queued on one stream is waited for by
 * the next run on another (on the device), and by the host before p's
 * buffers return to the device's allocator (bind, destroy). */
void fj_rt_nvptx_set_stream(fj_rt_nvprog *p, void *stream);

/* IR.md §5 --bench on the device: the median of the launches alone (inputs
 * uploaded once, outputs on the device), timed with events, and the same-run
 * device-to-device copy of bytes/2 (bytes = inputs + outputs). */
typedef struct fj_rt_nvptx_bench_result {
	double median_ms, copy_ms;
	int reps;
	size_t bytes;
} fj_rt_nvptx_bench_result;
fj_status fj_rt_nvptx_bench(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, fj_rt_nvptx_bench_result *br);

#endif
