/* nvptx.h -- the NVPTX backend: targets, the LLVM NVPTX target machine,
 * libdevice linking, PTX emission, and the GPU kernels of fused regions.
 * The CUDA driver (cuda.h) and this compiler do not include each other; the
 * templates (region_gpu*.c) include this header, never cuda.h; compile_gpu.c
 * (compiled regions, which unload their CUDA modules) and device.c (the
 * device interface) sit above all three.
 *
 * Per-context state (fj_context_slot FJ_SLOT_CUDA): the libdevice bitcode
 * (read once, lazily); the driver has its own slot (cuda.c); compiled kernels
 * live in the context's kernel cache (cache/kcache.h, compile_gpu.c). Each
 * compilation builds its module in a fresh LLVM context
 * with a diagnostic handler that counts errors (LLVM's default handler calls
 * exit(1) on a backend error).
 *
 * GPU kernel ABI (every kernel fusejit emits for NVPTX):
 *
 *   .entry fj_<graph>_k<i>[_<variant>](ptr p_0, ..., ptr p_{n-1}, ptr dims,
 *                                      ptr status[, ptr workspace])
 *
 *   p_j   device pointers: the region's operands in order (NULL for `none`
 *         and literal operands), then its results.
 *   dims  a device pointer to the i64 sizes of every operand (rank entries
 *         each; literals and `none` have rank 0), then of every result,
 *         concatenated, then the values of the region's extra symbols
 *         (codegen/region.h: sizes its body uses that no operand or result
 *         has), one each (the host ABI's dims array, cg.h); the runtime
 *         uploads it once per bind. Kernels read it through ld.global.nc.
 *   status  an i32 the kernel ORs its FJ_KERR_* errors into.
 *   workspace  only the entries whose plan asks for one (split reductions,
 *         fj_nvptx_plan.workspace): device memory zeroed before the first
 *         launch, which the kernel leaves zeroed where it must start so. The
 *         runtime passes it to every entry (those without it ignore it).
 *   Launch: a 1-D grid of 1-D blocks; the variant, grid and block sizes
 *   come from fj_nvptx_plan_region() (region_gpu.h) on the bound sizes.
 */
#ifndef FJ_NVPTX_H
#define FJ_NVPTX_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "backend_nvptx/nvptx_api.h"
#include "codegen/cg.h"

/* ---- one compilation: an LLVM context + module for a target ---- */

typedef struct fj_nvptx_state fj_nvptx_state;

typedef struct fj_nvptx_comp {
	fj_context *ctx;         /* diagnostics and allocations */
	fj_nvptx_state *state;   /* the owning context's state (libdevice) */
	char sm[16];
	char sym_suffix[16];     /* appended to every module-local symbol before
	                          * and after O3 ("": none), so that the PTX of
	                          * several compilations can be joined into one
	                          * module (region_gpu.c) */
	LLVMContextRef llctx;
	LLVMModuleRef mod;
	LLVMTargetMachineRef tm;
	bool approx;             /* the nvptx_math setting "approx": PTX approximations */
	bool libdevice;          /* libdevice was read (not when approx): math calls it;
	                          * without it a kernel that needs it fails to compile */
	unsigned nerrors;        /* backend errors reported through the diagnostic handler */
	char first_error[512];
} fj_nvptx_comp;

/* Creates the context (with the counting diagnostic handler), the module
 * (triple nvptx64-nvidia-cuda, the target machine's data layout,
 * nvvm-reflect-ftz = 0) and the target machine. */
fj_status fj_nvptx_comp_begin(fj_context *ctx, const char *sm, fj_nvptx_comp *c);
/* The same, with the state of a context given: diagnostics go to ctx, the
 * libdevice bytes come from s (another context's, e.g. a worker thread's
 * private diagnostics context compiling for the owner of s). */
fj_status fj_nvptx_comp_begin_state(fj_context *ctx, fj_nvptx_state *s, const char *sm, fj_nvptx_comp *c);
void fj_nvptx_comp_end(fj_nvptx_comp *c);
/* The code generator's target hooks for this compilation. */
const fj_cg_target *fj_nvptx_cg_target(const fj_nvptx_comp *c);
/* Marks f a kernel: ptx_kernel calling convention, launch bounds maxntid
 * (.maxntid: the most threads a block may have) and minblocks
 * (.minnctapersm: ptxas keeps registers low enough for that many blocks of
 * maxntid threads to be resident on an SM); 0: no bound. */
void fj_nvptx_mark_kernel(fj_nvptx_comp *c, LLVMValueRef f, unsigned maxntid, unsigned minblocks);
/* Verifies, links the libdevice functions used, internalizes them, appends
 * sym_suffix to the module-local symbols and runs default<O3> (then appends
 * it to the local symbols O3 created). */
fj_status fj_nvptx_comp_optimise(fj_nvptx_comp *c);
/* PTX of the (optimised) module, appended to out. */
fj_status fj_nvptx_comp_ptx(fj_nvptx_comp *c, fj_buf *out);
/* Textual LLVM IR of the module, appended to out. */
fj_status fj_nvptx_comp_llvm(fj_nvptx_comp *c, fj_buf *out);

/* ---- GPU intrinsics and helpers for the kernel templates ---- */

typedef enum fj_nvptx_sreg { FJ_SREG_TID_X, FJ_SREG_NTID_X, FJ_SREG_CTAID_X, FJ_SREG_NCTAID_X } fj_nvptx_sreg_id;
LLVMValueRef fj_nvptx_sreg(fj_cg *cg, fj_nvptx_sreg_id r); /* i32 */
void fj_nvptx_barrier(fj_cg *cg);
/* __shfl_xor_sync(0xffffffff, v, lanemask): v of type float, double, i32 or i64. */
LLVMValueRef fj_nvptx_shfl_xor(fj_cg *cg, LLVMValueRef v, int lanemask);
/* A shared-memory array of n elements of type ty (internal, undef). */
LLVMValueRef fj_nvptx_shared(fj_cg *cg, LLVMTypeRef ty, unsigned n, const char *name);

/* ---- per-context state, libdevice ---- */

fj_status fj_nvptx_state_get(fj_context *ctx, fj_nvptx_state **out);
/* Path of libdevice: the settings' libdevice (FUSEJIT_LIBDEVICE), else the
 * CUDA toolkit's; NULL when none is readable or it is "none". */
const char *fj_nvptx_libdevice_path(fj_context *ctx);
/* What the kernels' math is ("libdevice" or "approx", the nvptx_math
 * setting): part of a compiled kernel's cache key. */
const char *fj_nvptx_math_mode(fj_context *ctx);

/* ---- fused regions -> PTX (region_gpu.c) ---- */

/* Kernel launch parameters decided at run time from the sizes. */
typedef struct fj_nvptx_launch {
	unsigned grid, block;    /* 1-D */
	unsigned shared_bytes;   /* dynamic shared memory (0: all static) */
} fj_nvptx_launch;


#endif
