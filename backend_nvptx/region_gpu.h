/* region_gpu.h -- compiled GPU regions (region_gpu.c): the cache entry, and
 * launch plans chosen from the bound sizes. */
#ifndef FJ_NVPTX_REGION_GPU_H
#define FJ_NVPTX_REGION_GPU_H

#include "backend_nvptx/nvptx.h"
#include "codegen/region.h"

#define FJ_NVPTX_MAX_VARIANTS 5

/* A compiled region, owned by the context's cache (valid until the context
 * is destroyed). The driver-side fields are filled by the runtime on first
 * launch (under the state's lock). */
typedef struct fj_nvptx_kernel {
	char *ptx;              /* NUL-terminated */
	size_t ptxlen;
	char name[96];          /* the kernel attribute */
	int sched;              /* fj_rg_schedule */
	int nvariants;
	char entry[FJ_NVPTX_MAX_VARIANTS][112];
	int nreds;
	uint32_t nparams;       /* operands + results + dims + status */
	void *cumod;            /* CUmodule, once loaded */
	void *fn[FJ_NVPTX_MAX_VARIANTS];
} fj_nvptx_kernel;

/* fj_rg_analyze for the GPU: also refuses a schedule that has no GPU
 * template (attention, which only fuse{attention=true} makes). */
fj_status fj_gpu_analyze(fj_context *ctx, const fj_graph *g, uint32_t node, fj_rg_analysis *a);

/* Compiles region `node` of g (a fusion.kernel with a schedule) for target
 * sm (NULL: sm_80), or finds it in the context's kernel cache (cache/kcache.h,
 * kind "ptx": memory, then disk; *hit: found in memory). A region with
 * several variants compiles them in parallel, one LLVM module each (up to
 * compile_jobs threads, 0: one per core, 1: serial), and joins their PTX
 * into one module (compile_gpu.c). Identical regions share one kernel,
 * whose entries keep the names of the first one compiled. */
fj_status fj_nvptx_compile_region(fj_context *ctx, const fj_graph *g, uint32_t node, const char *sm,
                                  fj_nvptx_kernel **out, bool *hit);

/* Emits every variant of region `node` of g into cg's module with cg's
 * target hooks (the GPU ones must be set); c (may be NULL: no NVPTX kernel
 * marks, e.g. the host emulator, emu.h) is the NVPTX compilation. Writes the
 * entries' names, the main one first. */
fj_status fj_nvptx_emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int *nvariants,
                                char entries[][112]);
/* The same for variant `variant` only (0: the main one): its entry alone
 * in cg's module (its name in entry), *nvariants the region's count. */
fj_status fj_nvptx_emit_region_variant(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                                       int *nvariants, char entry[112]);

typedef struct fj_nvptx_launch_step {
	int variant;            /* index into entry[] */
	unsigned grid, block, shared;
} fj_nvptx_launch_step;

typedef struct fj_nvptx_plan {
	fj_nvptx_launch_step launch[3];
	int n;                  /* launches, in order (0: nothing to do, e.g. empty) */
	bool may_fail;          /* read the status word back after the run */
	size_t workspace;       /* bytes of device workspace the launches need
	                         * (split reductions), zeroed before the first
	                         * launch and passed as the parameter after status */
} fj_nvptx_plan;

/* What a launch plan needs to know of the device (device.h: the CUDA
 * driver's attributes; the emulator reports an H100's). */
typedef struct fj_nvptx_limits {
	unsigned sm_count;    /* multiprocessors (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) */
	unsigned regs_per_sm; /* 32-bit registers of one multiprocessor
	                       * (CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) */
} fj_nvptx_limits;

/* Chooses variants and grid/block sizes (the region's template family
 * decides: region_gpu_internal.h's variant table) for device lim (the
 * persistent grids and the split reductions fill its SMs). dimval evaluates
 * a (symbolic) size of g's module with the bound symbols; aligned16: every
 * pointer of the launch is 16-byte aligned. */
fj_status fj_nvptx_plan_region(const fj_nvptx_kernel *k, const fj_nvptx_limits *lim, const fj_graph *g,
                               uint32_t node, int64_t (*dimval)(void *ud, fj_dim d), void *ud, bool aligned16,
                               fj_nvptx_plan *plan);

#endif
