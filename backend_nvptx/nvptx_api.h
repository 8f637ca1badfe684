/* nvptx_api.h -- the NVPTX backend's entry points that need no LLVM headers
 * (for the tools and the runtime): targets and PTX emission of a module. */
#ifndef FJ_NVPTX_API_H
#define FJ_NVPTX_API_H

#include "ir.h"

/* ---- targets ---- */

#define FJ_NVPTX_DEFAULT_SM "sm_80"
/* The whitelist: sm_80, sm_86, sm_89, sm_90, sm_90a. */
bool fj_nvptx_sm_supported(const char *sm);
/* FJ_OK, or an error naming the target and the supported ones (sm_100 and
 * newer: "not supported by LLVM 19's NVPTX backend"). */
fj_status fj_nvptx_check_sm(fj_context *ctx, const char *sm);
/* "sm_80" for a compute capability (8, 0), or NULL when not whitelisted; a
 * newer GPU than the newest target (sm_100 ...) gets the newest compatible
 * PTX (sm_90 runs on it through the driver's JIT). */
const char *fj_nvptx_sm_for_cc(int major, int minor);

/* Writes the PTX of every fusion.kernel of every graph of m, in one PTX
 * module, to out (fusejit-opt --emit=ptx): one .entry per region, its main
 * variant, named by its kernel attribute (with FUSEJIT_PTX_ALL_VARIANTS=1 in
 * the environment: every variant, for the ptxas tests). llvm: the optimised
 * LLVM IR instead (--emit=llvm-nvptx). Graph nodes outside regions are an
 * error (the backend runs fused graphs only). */
fj_status fj_nvptx_emit_module(fj_context *ctx, const fj_module *m, const char *sm, bool llvm, fj_buf *out);

#endif
