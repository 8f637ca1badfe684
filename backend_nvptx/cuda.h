/* cuda.h -- the CUDA driver API, loaded at run time with dlopen("libcuda.so.1")
 * (never linked): fusejit builds, tests and emits PTX on machines with no GPU.
 *
 * One fj_cu per context (its slot FJ_SLOT_CUDA_DRIVER): the library
 * handle, the entry points (versioned names: cuMemAlloc_v2 ...), device 0's
 * primary context, one stream, and a caching device allocator. Every driver
 * call goes through FJ_CU, which turns a failure into a diagnostic naming the
 * call, the file:line and the error's name (from fusejit's own table: the
 * stub library's cuGetErrorString fails) and returns FJ_ERR_DRIVER. Nothing
 * aborts.
 *
 * Without a driver or GPU, fj_cu_get fails with one sentence:
 *   "no CUDA driver: libcuda.so.1 not found (...)"
 *   "CUDA driver found but no GPU: cuInit returned CUDA_ERROR_STUB_LIBRARY (34 = stub library)"
 */
#ifndef FJ_NVPTX_CUDA_H
#define FJ_NVPTX_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef uint64_t fj_cu_dptr; /* CUdeviceptr */
typedef int fj_cu_result;    /* CUresult */

typedef struct fj_cu_api {
	fj_cu_result (*cuInit)(unsigned);
	fj_cu_result (*cuDriverGetVersion)(int *);
	fj_cu_result (*cuDeviceGetCount)(int *);
	fj_cu_result (*cuDeviceGet)(int *, int);
	fj_cu_result (*cuDeviceGetName)(char *, int, int);
	fj_cu_result (*cuDeviceGetAttribute)(int *, int, int);
	fj_cu_result (*cuDevicePrimaryCtxRetain)(void **, int);
	fj_cu_result (*cuDevicePrimaryCtxRelease)(int);   /* _v2 */
	fj_cu_result (*cuCtxSetCurrent)(void *);
	fj_cu_result (*cuCtxPushCurrent)(void *);                    /* _v2 */
	fj_cu_result (*cuCtxPopCurrent)(void **);                    /* _v2 */
	fj_cu_result (*cuCtxSynchronize)(void);
	fj_cu_result (*cuModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
	fj_cu_result (*cuModuleUnload)(void *);
	fj_cu_result (*cuModuleGetFunction)(void **, void *, const char *);
	fj_cu_result (*cuFuncSetAttribute)(void *, int, int);
	fj_cu_result (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
	                               void *, void **, void **);
	fj_cu_result (*cuMemAlloc)(fj_cu_dptr *, size_t);            /* _v2 */
	fj_cu_result (*cuMemFree)(fj_cu_dptr);                       /* _v2 */
	fj_cu_result (*cuMemGetInfo)(size_t *, size_t *);            /* _v2 */
	fj_cu_result (*cuMemcpyDtoDAsync)(fj_cu_dptr, fj_cu_dptr, size_t, void *); /* _v2 */
	fj_cu_result (*cuMemcpyHtoDAsync)(fj_cu_dptr, const void *, size_t, void *); /* _v2 */
	fj_cu_result (*cuMemcpyDtoHAsync)(void *, fj_cu_dptr, size_t, void *);       /* _v2 */
	fj_cu_result (*cuMemsetD8Async)(fj_cu_dptr, unsigned char, size_t, void *);
	fj_cu_result (*cuStreamCreate)(void **, unsigned);
	fj_cu_result (*cuStreamDestroy)(void *);                     /* _v2 */
	fj_cu_result (*cuStreamSynchronize)(void *);
	fj_cu_result (*cuStreamWaitEvent)(void *, void *, unsigned);
	fj_cu_result (*cuEventCreate)(void **, unsigned);
	fj_cu_result (*cuEventRecord)(void *, void *);
	fj_cu_result (*cuEventSynchronize)(void *);
	fj_cu_result (*cuEventElapsedTime)(float *, void *, void *); /* _v2, else the old name */
	fj_cu_result (*cuEventDestroy)(void *);                      /* _v2 */
} fj_cu_api;

typedef struct fj_cu_block {
	fj_cu_dptr p;
	size_t size;
	bool busy;
} fj_cu_block;

typedef struct fj_cu {
	fj_context *ctx;
	void *lib;         /* dlopen handle */
	fj_cu_api api;
	int driver_version;
	int device;
	void *cuctx;       /* the primary context */
	void *stream;      /* fusejit's own (non-blocking) stream */
	void *cur;         /* where queued work goes: stream, or a caller's (fj_cu_set_stream) */
	int cc_major, cc_minor, sm_count, regs_per_sm;
	char name[128];
	fj_cu_block *blocks; /* the caching allocator's blocks */
	uint32_t nblocks, cap_blocks;
	/* what ran since the last synchronisation: a fault surfaces there */
	char last_kernel[112];
	unsigned launches_since_sync;
	void *emu;                /* tests only: the host emulator that runs the kernels of the
	                           * stand-in driver (tests/driver, fjcuda_hook.h); NULL otherwise */
	void (*emu_free)(void *); /* frees emu (set by device.c, which owns the hook) */
	fj_status init_status; /* FJ_OK once initialised; the failure otherwise */
	char init_error[512];
} fj_cu;

/* The name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), or NULL when unknown. */
const char *fj_cu_error_name(int code);
/* Records "CUDA driver: CALL failed: NAME (CODE) at FILE:LINE" and returns
 * FJ_ERR_DRIVER; FJ_OK for CUDA_SUCCESS. */
fj_status fj_cu_check(fj_context *ctx, int res, const char *call, const char *file, int line);
#define FJ_CU(cu, call) fj_cu_check((cu)->ctx, (int)((cu)->api.call), #call, __FILE__, __LINE__)
/* Formats an error like fj_cu_check without recording it. */
void fj_cu_format_error(char *buf, size_t size, int res, const char *call, const char *file, int line);

/* Loads the driver library at `path` (NULL: the settings' libcuda, else libcuda.so.1),
 * resolves the entry points, runs cuInit and sets up device 0. On failure the
 * message is recorded on ctx and kept in (*out)->init_error; *out is set
 * whenever memory allowed, so tests can inspect it. */
fj_status fj_cu_open(fj_context *ctx, const char *path, fj_cu **out);
void fj_cu_driver_free(fj_cu *cu);
/* The context's driver (opened once; a failure is remembered and reported
 * again, as the same sentence, on each call). The calling thread's current
 * CUDA context is left as it was: driver work runs between fj_cu_push and
 * fj_cu_pop (the device's enter and leave). */
fj_status fj_cu_get(fj_context *ctx, fj_cu **out);
/* True when a driver and a GPU are usable (records nothing): --executor=auto. */
bool fj_cu_usable(fj_context *ctx);
/* Unloads module mod with the context's driver, when it was opened (a
 * compiled region freed with the kernel cache, which the driver outlives),
 * its context made current for that and the caller's restored. */
void fj_cu_module_unload(fj_context *ctx, void *mod);

/* Makes the primary context current on this thread (pushed on its stack of
 * contexts); fj_cu_pop restores the caller's. */
fj_status fj_cu_push(fj_cu *cu);
void fj_cu_pop(fj_cu *cu);

/* Device memory: the caching allocator (blocks are reused by size, freed to
 * the driver on out-of-memory and at the end). */
fj_status fj_cu_alloc(fj_cu *cu, size_t n, fj_cu_dptr *out);
void fj_cu_release(fj_cu *cu, fj_cu_dptr p);
/* Copies, always on the current stream (fusejit's own, non-blocking, or a
 * caller's), never on the legacy stream, which a non-blocking stream does
 * not wait for: htod is queued (the driver stages pageable memory before it
 * returns, so src may be reused at once), dtoh waits for the stream (the
 * data is there on return). */
fj_status fj_cu_htod(fj_cu *cu, fj_cu_dptr dst, const void *src, size_t n);
fj_status fj_cu_dtoh(fj_cu *cu, void *dst, fj_cu_dptr src, size_t n);
fj_status fj_cu_dtod(fj_cu *cu, fj_cu_dptr dst, fj_cu_dptr src, size_t n); /* on the stream */
fj_status fj_cu_memset0(fj_cu *cu, fj_cu_dptr dst, size_t n);            /* on the stream */
/* Waits for the current stream. A fault there (an asynchronous error) is
 * reported with the kernels launched since the last synchronisation. */
fj_status fj_cu_sync(fj_cu *cu);
/* The stream the copies, launches and events above use from now on: a
 * caller's CUstream (of the primary context), or NULL for fusejit's own. */
void fj_cu_set_stream(fj_cu *cu, void *stream);

/* Modules: PTX -> module, with the JIT's error log in the diagnostic. */
fj_status fj_cu_module_load(fj_cu *cu, const char *ptx, void **mod);
fj_status fj_cu_function(fj_cu *cu, void *mod, const char *name, void **fn);
/* Launches entry `name` (fn) on the current stream. With the settings'
 * nvptx_sync (a debugging aid), waits for it and names it on a fault. */
fj_status fj_cu_launch(fj_cu *cu, void *fn, const char *name, unsigned grid, unsigned block, unsigned shared,
                       void **params);

/* Events, for --bench. */
fj_status fj_cu_event_create(fj_cu *cu, void **ev);
fj_status fj_cu_event_record(fj_cu *cu, void *ev);
fj_status fj_cu_event_elapsed(fj_cu *cu, void *start, void *end, float *ms);
void fj_cu_event_destroy(fj_cu *cu, void *ev);
/* Ordering across streams: the host waits for ev; the current stream waits for ev. */
fj_status fj_cu_event_sync(fj_cu *cu, void *ev);
fj_status fj_cu_stream_wait(fj_cu *cu, void *ev);

#endif
