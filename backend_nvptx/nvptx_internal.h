/* nvptx_internal.h -- the NVPTX compiler's per-context state, shared by
 * nvptx.c, compile_gpu.c and device.c. The CUDA driver keeps its own
 * (cuda.c): the compiler does not depend on it. */
#ifndef FJ_NVPTX_INTERNAL_H
#define FJ_NVPTX_INTERNAL_H

#include <pthread.h>

#include "backend_nvptx/nvptx.h"

/* The per-context state (FJ_SLOT_CUDA). */
struct fj_nvptx_state {
	fj_context *ctx;
	pthread_mutex_t lock;       /* libdevice loading, decoding cached kernels; the
	                             * backend's lock (device.c: fj_nvptx_enter) */
	bool libdevice_tried;
	char *libdevice;            /* the bitcode's bytes (malloc), or NULL */
	size_t libdevice_len;
};

#endif
