/* host.h -- the host backend: ORC LLJIT with a host target machine, the
 * per-node reference kernels (the `aten` executor's), their in-process cache,
 * and a thread pool.
 *
 * One fj_host_jit per context, created on first use and destroyed with the
 * context. Compilation is thread-safe (one mutex around the JIT; each module is
 * built in its own thread-safe LLVM context). */
#ifndef FJ_HOST_H
#define FJ_HOST_H

#include "ir.h"

typedef int32_t (*fj_host_kernel_fn)(void *const *ptrs, const int64_t *dims, int64_t lo, int64_t hi);

/* A compiled per-node kernel (see codegen/cg.h for the ABI). */
typedef struct fj_host_kernel {
	fj_host_kernel_fn fn;
	uint32_t par_out;  /* parallel extent = product of result par_out's dims in par_mask */
	uint32_t par_mask;
	void *entry;       /* the kernel cache's entry, held (its code stays) until fj_host_release_kernels */
} fj_host_kernel;

typedef struct fj_host_jit fj_host_jit;

/* The context's JIT, created on first call. */
fj_status fj_host_jit_get(fj_context *ctx, fj_host_jit **out);

/* Compiles the per-node kernels of nodes[0..n) of g (nodes with an emitter;
 * a fusion.kernel's is its region's), through the kernel cache
 * (cache/kcache.h: keyed by the target and fj_cg_node_key, so identical
 * kernels compile once per context and once per machine): the distinct
 * missing ones compile in parallel (setting compile_jobs), each in its own
 * LLVM module, optimised with default<O3> for the host CPU. out[i] receives
 * node nodes[i]'s kernel. compiled (may be NULL) receives the number of
 * distinct kernels compiled or loaded from the disk (memory misses). */
fj_status fj_host_compile_nodes(fj_context *ctx, const fj_graph *g, const uint32_t *nodes, uint32_t n,
                                fj_host_kernel *out, uint32_t *compiled);
/* Drops the references kernels[0..n) hold on the kernel cache (entries no
 * longer used by anyone may then be evicted, their code freed); clears
 * them. Kernels without an entry (fn NULL) are skipped. */
void fj_host_release_kernels(fj_context *ctx, fj_host_kernel *kernels, uint32_t n);

/* Writes the optimised LLVM IR of the per-node kernels of g to b
 * (fusejit-opt --emit=llvm-host). */
fj_status fj_host_emit_llvm(fj_context *ctx, const fj_graph *g, fj_buf *b);

/* Thread pool: the context's pool of workers (FUSEJIT_THREADS overrides the
 * number of cores), created on first use. fj_host_parallel_for runs fn(arg,
 * lo, hi) over [0, extent) in chunks of at least `grain` iterations, on
 * `threads` threads at most (1: on the caller only). Returns the first
 * non-zero value fn returned. */
typedef int32_t (*fj_host_task_fn)(void *arg, int64_t lo, int64_t hi);
int fj_host_thread_count(fj_context *ctx);
int32_t fj_host_parallel_for(fj_context *ctx, int threads, int64_t extent, int64_t grain,
                             fj_host_task_fn fn, void *arg);

#endif
