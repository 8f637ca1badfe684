/* device.h -- the GPU device interface of backend_nvptx: what the runtime's
 * nvptx executor runs compiled regions on. Two implementations: the CUDA
 * driver (device.c, over cuda.h) and the host emulator (emu.h, a testing aid
 * for machines with no GPU). The runtime uses this header only (with the
 * launch plans of region_gpu.h), never the driver's or the backend's state.
 *
 * A device is a table of functions over an opaque `ud`; device pointers are
 * u64 (CUdeviceptr on CUDA, host addresses on the emulator). It is copied by
 * value: every copy shares the one `ud`, which fj_nvptx_device_close frees
 * (the emulator) or leaves to the context (the CUDA driver, one per context).
 *
 * Streams: queued work (copies, launches, events) goes to the device's
 * current stream: its own (the default), or a caller's CUstream set with
 * set_stream between enter and leave (leave goes back to its own). On a
 * caller's stream htod is queued, and dtoh and sync wait for that stream.
 * A device without event entries (the emulator) runs everything
 * synchronously: a caller's stream there is only a token, and no work is
 * ever outstanding when a call returns.
 *
 * Threads: a device's state (the caching allocator, the current stream, the
 * emulator's shared memory) is not thread-safe. A caller that may share it
 * between threads brackets each bind, run and free with enter/leave, which
 * also make the CUDA primary context current on the calling thread. */
#ifndef FJ_NVPTX_DEVICE_H
#define FJ_NVPTX_DEVICE_H

#include "backend_nvptx/nvptx_api.h"
#include "backend_nvptx/region_gpu.h" /* launch plans: fj_nvptx_plan, fj_nvptx_plan_region */

typedef struct fj_nvptx_device {
	void *ud;
	const char *name;   /* the GPU's name ("NVIDIA H200", "host emulator") */
	const char *target; /* what the kernels are compiled for ("sm_90"; "emu") */
	bool emulated;      /* the host emulator: not a GPU */
	fj_nvptx_limits limits; /* SMs and register file, for launch plans (the emulator: an H100's) */
	/* device memory */
	fj_status (*alloc)(void *ud, size_t n, uint64_t *p);
	void (*release)(void *ud, uint64_t p);
	fj_status (*htod)(void *ud, uint64_t dst, const void *src, size_t n);
	fj_status (*dtoh)(void *ud, void *dst, uint64_t src, size_t n);
	fj_status (*dtod)(void *ud, uint64_t dst, uint64_t src, size_t n); /* queued; fj_nvptx_device_copy */
	fj_status (*memset0)(void *ud, uint64_t dst, size_t n);
	fj_status (*sync)(void *ud);
	/* compiles (or finds in a cache: *hit) and loads region `node` of g */
	fj_status (*prepare)(void *ud, const fj_graph *g, uint32_t node, void **kern, bool *hit);
	/* launches variant `variant` of a prepared region; args: nargs device
	 * pointers (the kernel ABI of backend_nvptx/nvptx.h) */
	fj_status (*launch)(void *ud, void *kern, int variant, unsigned grid, unsigned block, unsigned shared,
	                    const uint64_t *args, uint32_t nargs);
	/* timing with events, for --bench; NULL where the device cannot time */
	fj_status (*event_create)(void *ud, void **ev);
	fj_status (*event_record)(void *ud, void *ev);
	fj_status (*event_elapsed)(void *ud, void *start, void *end, float *ms); /* waits for end */
	void (*event_destroy)(void *ud, void *ev);
	/* streams (see above): the current stream (NULL: the device's own); the
	 * host waits for ev; the current stream waits for ev (NULL entries on
	 * the emulator, which has no events) */
	void (*set_stream)(void *ud, void *stream);
	fj_status (*event_sync)(void *ud, void *ev);
	fj_status (*stream_wait)(void *ud, void *ev);
	/* several threads: see above; leave only after an enter that succeeded */
	fj_status (*enter)(void *ud);
	void (*leave)(void *ud);
	void (*close)(void *ud); /* frees ud; NULL: nothing to free */
} fj_nvptx_device;

/* Opens the device the context's settings name (fj_context_settings:
 * nvptx_device "cuda", the default, or "emulator"): the CUDA driver (a
 * clear error without a driver or a GPU, naming the nvptx executor), its
 * kernels compiled for the settings' nvptx_target or else the GPU's own
 * architecture; or a new host emulator. */
fj_status fj_nvptx_device_open(fj_context *ctx, fj_nvptx_device *out);
/* The CUDA driver's device (the context's driver, opened once). */
fj_status fj_nvptx_cuda_device(fj_context *ctx, fj_nvptx_device *out);
/* Frees what the device owns (the emulator); the copies become unusable. */
void fj_nvptx_device_close(fj_nvptx_device *d);

/* Whether the settings pick the emulator (*emulated); FJ_ERR_INVALID, with a
 * message, for an nvptx_device that is neither "cuda" nor "emulator". */
fj_status fj_nvptx_device_kind(fj_context *ctx, bool *emulated);
/* True when a CUDA driver and a GPU are usable (records nothing): what
 * --executor=auto asks. */
bool fj_nvptx_cuda_usable(fj_context *ctx);

/* Copies n bytes between two device buffers: on the device's stream with
 * dtod, else staged through host memory. */
fj_status fj_nvptx_device_copy(fj_context *ctx, const fj_nvptx_device *d, uint64_t dst, uint64_t src, size_t n);

/* The backend's lock over the context's driver (cache, allocator, stream):
 * the CUDA device's enter and leave. */
fj_status fj_nvptx_enter(fj_context *ctx);
void fj_nvptx_leave(fj_context *ctx);

#endif
