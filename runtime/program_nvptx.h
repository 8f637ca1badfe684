/* program_nvptx.h -- the `nvptx` executor: a graph fused by the default
 * pipeline, its regions compiled to PTX (one module per region, cached per
 * context), device buffers, uploads, launches on one stream, downloads, and
 * --bench with CUDA events.
 *
 * Life cycle (as fj_rt_program's, program.h):
 *   fj_rt_nvptx_create   loads the CUDA driver (a clear error without one),
 *                        clones the graph's module (text round trip), runs
 *                        `default` on the clone when the graph is not fused
 *                        yet, and compiles every region for the GPU's target
 *   fj_rt_nvptx_bind     binds the symbols from the inputs' shapes and --dim,
 *                        plans launches, allocates device buffers (one per
 *                        value; the caching allocator reuses them across
 *                        binds) and uploads the kernels' size arrays
 *   fj_rt_nvptx_run      uploads the inputs, launches, downloads the outputs
 * Unlike the host executors, a bind does not re-run each node's inference
 * on concrete sizes: symbols bound inconsistently by inputs are refused, but
 * two symbols broadcast against each other are not checked here. */
#ifndef FJ_RT_PROGRAM_NVPTX_H
#define FJ_RT_PROGRAM_NVPTX_H

#include "runtime/program.h"

typedef struct fj_rt_nvprog fj_rt_nvprog;

/* The device a program runs on: the CUDA driver (fj_rt_nvptx_create), or the
 * host emulator of backend_nvptx/emu.h (tests). Pointers are device
 * addresses as u64. */
typedef struct fj_rt_gpu_dev {
	void *ud;
	const char *name, *target;
	fj_status (*alloc)(void *ud, size_t n, uint64_t *p);
	void (*release)(void *ud, uint64_t p);
	fj_status (*htod)(void *ud, uint64_t dst, const void *src, size_t n);
	fj_status (*dtoh)(void *ud, void *dst, uint64_t src, size_t n);
	fj_status (*memset0)(void *ud, uint64_t dst, size_t n);
	fj_status (*sync)(void *ud);
	/* compiles (or finds in a cache: *hit) and loads region `node` of g */
	fj_status (*prepare)(void *ud, const fj_graph *g, uint32_t node, void **kern, bool *hit);
	/* launches variant `variant` of a prepared region; args: nargs device
	 * pointers (the kernel ABI of backend_nvptx/nvptx.h) */
	fj_status (*launch)(void *ud, void *kern, int variant, unsigned grid, unsigned block, unsigned shared,
	                    const uint64_t *args, uint32_t nargs);
} fj_rt_gpu_dev;

fj_status fj_rt_nvptx_create(fj_context *ctx, const fj_graph *g, fj_rt_nvprog **out);
/* The same on another device (dev is copied; its ud must outlive p). */
fj_status fj_rt_nvptx_create_on(fj_context *ctx, const fj_graph *g, const fj_rt_gpu_dev *dev, fj_rt_nvprog **out);
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

/* Several threads: the CUDA driver's state is shared by every program of a
 * context and is not thread-safe (the caching allocator, the one stream),
 * and its primary context must be current on the thread that calls it.
 * fj_rt_nvptx_enter makes it current on the calling thread and takes the
 * context's driver lock (*held) until fj_rt_nvptx_leave(ctx, *held); bind,
 * run and destroy in between. Nothing is held on another device (the
 * emulator). */
fj_status fj_rt_nvptx_enter(fj_rt_nvprog *p, bool *held);
void fj_rt_nvptx_leave(fj_context *ctx, bool held);

/* IR.md §5 --bench on the device: the median of the launches alone (inputs
 * uploaded once, outputs on the device), timed with events, and the same-run
 * device-to-device copy of bytes/2 (bytes = inputs + outputs). */
typedef struct fj_rt_nvptx_bench_result {
	double median_ms, copy_ms;
	int reps;
	size_t bytes;
} fj_rt_nvptx_bench_result;
fj_status fj_rt_nvptx_bench(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, fj_rt_nvptx_bench_result *br);

/* FUSEJIT_NVPTX_DEVICE picks the device nvptx programs run on: "cuda" (the
 * default; also when unset or empty) or "emulator" (backend_nvptx/emu.h, a
 * testing aid for machines with no GPU). *emulator says which; any other
 * value is FJ_ERR_INVALID, with a message. */
fj_status fj_rt_nvptx_device_env(fj_context *ctx, bool *emulator);

#endif
