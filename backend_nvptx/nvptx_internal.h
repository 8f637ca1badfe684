/* nvptx_internal.h -- state shared by the files of backend_nvptx/. */
#ifndef FJ_NVPTX_INTERNAL_H
#define FJ_NVPTX_INTERNAL_H

#include <pthread.h>

#include "backend_nvptx/cuda.h"
#include "backend_nvptx/nvptx.h"

/* The per-context state (FJ_SLOT_CUDA). */
struct fj_nvptx_state {
	fj_context *ctx;
	pthread_mutex_t lock;       /* libdevice loading, decoding cached kernels, the driver */
	bool libdevice_tried;
	char *libdevice;            /* the bitcode's bytes (malloc), or NULL */
	size_t libdevice_len;
	fj_cu *cu;                  /* the driver, once tried */
	bool cu_tried;
};

#endif
