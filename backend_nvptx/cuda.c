/* cuda.c -- the CUDA driver, loaded with dlopen (cuda.h).
 *
 * Entry points are resolved by their versioned names (cuMemAlloc_v2 ...: the
 * unversioned ones are the legacy 32-bit ABI), with the old name as a fallback
 * where older drivers lack the new one (cuEventElapsedTime_v2 is 13.0's).
 * Error names come from our own table: the toolkit's stub libcuda.so loads,
 * but its cuInit returns 34 (CUDA_ERROR_STUB_LIBRARY) and its
 * cuGetErrorString fails.
 *
 * The allocator keeps freed blocks and hands back the smallest free block of
 * at least the size asked for (and at most twice it); on out-of-memory it
 * returns every free block to the driver and tries once more. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/cuda.h"

static const struct {
	int code;
	const char *name;
} cu_errors[] = {
	{0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
	{3, "CUDA_ERROR_NOT_INITIALIZED"}, {4, "CUDA_ERROR_DEINITIALIZED"}, {5, "CUDA_ERROR_PROFILER_DISABLED"},
	{6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"}, {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"},
	{8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"}, {34, "CUDA_ERROR_STUB_LIBRARY"},
	{46, "CUDA_ERROR_DEVICE_UNAVAILABLE"}, {100, "CUDA_ERROR_NO_DEVICE"}, {101, "CUDA_ERROR_INVALID_DEVICE"},
	{102, "CUDA_ERROR_DEVICE_NOT_LICENSED"}, {200, "CUDA_ERROR_INVALID_IMAGE"},
	{201, "CUDA_ERROR_INVALID_CONTEXT"}, {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"},
	{205, "CUDA_ERROR_MAP_FAILED"}, {206, "CUDA_ERROR_UNMAP_FAILED"}, {207, "CUDA_ERROR_ARRAY_IS_MAPPED"},
	{208, "CUDA_ERROR_ALREADY_MAPPED"}, {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
	{210, "CUDA_ERROR_ALREADY_ACQUIRED"}, {211, "CUDA_ERROR_NOT_MAPPED"},
	{212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"}, {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"},
	{214, "CUDA_ERROR_ECC_UNCORRECTABLE"}, {215, "CUDA_ERROR_UNSUPPORTED_LIMIT"},
	{216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"}, {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
	{218, "CUDA_ERROR_INVALID_PTX"}, {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"},
	{220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"}, {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"}, {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
	{224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"}, {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"},
	{300, "CUDA_ERROR_INVALID_SOURCE"}, {301, "CUDA_ERROR_FILE_NOT_FOUND"},
	{302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"}, {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"},
	{304, "CUDA_ERROR_OPERATING_SYSTEM"}, {400, "CUDA_ERROR_INVALID_HANDLE"},
	{401, "CUDA_ERROR_ILLEGAL_STATE"}, {402, "CUDA_ERROR_LOSSY_QUERY"}, {500, "CUDA_ERROR_NOT_FOUND"},
	{600, "CUDA_ERROR_NOT_READY"}, {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"}, {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
	{703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"}, {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
	{705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"}, {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"},
	{709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"}, {710, "CUDA_ERROR_ASSERT"}, {711, "CUDA_ERROR_TOO_MANY_PEERS"},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"}, {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
	{714, "CUDA_ERROR_HARDWARE_STACK_ERROR"}, {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS"}, {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
	{718, "CUDA_ERROR_INVALID_PC"}, {719, "CUDA_ERROR_LAUNCH_FAILED"},
	{720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"}, {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"},
	{800, "CUDA_ERROR_NOT_PERMITTED"}, {801, "CUDA_ERROR_NOT_SUPPORTED"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY"}, {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
	{804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}, {805, "CUDA_ERROR_MPS_CONNECTION_FAILED"},
	{806, "CUDA_ERROR_MPS_RPC_FAILURE"}, {807, "CUDA_ERROR_MPS_SERVER_NOT_READY"},
	{808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"}, {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"},
	{810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"}, {811, "CUDA_ERROR_CDP_NOT_SUPPORTED"},
	{812, "CUDA_ERROR_CDP_VERSION_MISMATCH"}, {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
	{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"}, {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
	{903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"}, {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
	{905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"}, {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
	{907, "CUDA_ERROR_CAPTURED_EVENT"}, {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
	{909, "CUDA_ERROR_TIMEOUT"}, {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"},
	{911, "CUDA_ERROR_EXTERNAL_DEVICE"}, {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"},
	{913, "CUDA_ERROR_FUNCTION_NOT_LOADED"}, {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"},
	{915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"}, {999, "CUDA_ERROR_UNKNOWN"},
};

const char *fj_cu_error_name(int code)
{
	for (size_t i = 0; i < FJ_ARRAY_LEN(cu_errors); i++)
		if (cu_errors[i].code == code)
			return cu_errors[i].name;
	return NULL;
}

static const char *short_file(const char *file)
{
	/* the path from the source root: "backend_nvptx/cuda.c" */
	const char *p = strstr(file, "backend_nvptx/");
	if (!p)
		p = strstr(file, "runtime/");
	return p ? p : file;
}

/* The call as written, without the `api.` prefix the macro adds. */
static void call_text(char *buf, size_t size, const char *call)
{
	snprintf(buf, size, "%s", call);
	char *p = strstr(buf, "api.");
	if (p == buf)
		memmove(buf, buf + 4, strlen(buf + 4) + 1);
}

void fj_cu_format_error(char *buf, size_t size, int res, const char *call, const char *file, int line)
{
	const char *name = fj_cu_error_name(res);
	char ct[256];
	call_text(ct, sizeof ct, call);
	snprintf(buf, size, "CUDA driver: %s failed: %s (%d) at %s:%d", ct, name ? name : "unknown CUDA error", res,
	         short_file(file), line);
}

fj_status fj_cu_check(fj_context *ctx, int res, const char *call, const char *file, int line)
{
	if (res == 0)
		return FJ_OK;
	char msg[600];
	fj_cu_format_error(msg, sizeof msg, res, call, file, line);
	return fj_error_status(ctx, FJ_ERR_DRIVER, (fj_loc){0}, "%s", msg);
}

/* ---- loading ---- */

static void *sym(void *lib, const char *a, const char *b)
{
	void *p = dlsym(lib, a);
	if (!p && b)
		p = dlsym(lib, b);
	return p;
}

static fj_status fail(fj_cu *cu, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static fj_status fail(fj_cu *cu, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cu->init_error, sizeof cu->init_error, fmt, ap);
	va_end(ap);
	cu->init_status = FJ_ERR_DRIVER;
	return fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0}, "%s", cu->init_error);
}

#define LOAD(field, name, alt)                                                                       \
	do {                                                                                         \
		*(void **)&cu->api.field = sym(cu->lib, name, alt);                                   \
		if (!cu->api.field)                                                                  \
			return fail(cu, "CUDA driver %s lacks %s: the driver is too old", libname, name); \
	} while (0)

static fj_status open_driver(fj_cu *cu, const char *path)
{
	const char *libname = path ? path : fj_context_settings(cu->ctx)->libcuda;
	if (!libname || !*libname)
		libname = "libcuda.so.1";
	cu->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		const char *e = dlerror();
		return fail(cu, "no CUDA driver: %s not found (%s)", libname, e ? e : "dlopen failed");
	}
	LOAD(cuInit, "cuInit", NULL);
	LOAD(cuDriverGetVersion, "cuDriverGetVersion", NULL);
	LOAD(cuDeviceGetCount, "cuDeviceGetCount", NULL);
	LOAD(cuDeviceGet, "cuDeviceGet", NULL);
	LOAD(cuDeviceGetName, "cuDeviceGetName", NULL);
	LOAD(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL);
	LOAD(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	LOAD(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	LOAD(cuCtxSetCurrent, "cuCtxSetCurrent", NULL);
	LOAD(cuCtxPushCurrent, "cuCtxPushCurrent_v2", NULL);
	LOAD(cuCtxPopCurrent, "cuCtxPopCurrent_v2", NULL);
	LOAD(cuCtxSynchronize, "cuCtxSynchronize", NULL);
	LOAD(cuModuleLoadDataEx, "cuModuleLoadDataEx", NULL);
	LOAD(cuModuleUnload, "cuModuleUnload", NULL);
	LOAD(cuModuleGetFunction, "cuModuleGetFunction", NULL);
	LOAD(cuFuncSetAttribute, "cuFuncSetAttribute", NULL);
	LOAD(cuLaunchKernel, "cuLaunchKernel", NULL);
	LOAD(cuMemAlloc, "cuMemAlloc_v2", NULL);
	LOAD(cuMemFree, "cuMemFree_v2", NULL);
	LOAD(cuMemGetInfo, "cuMemGetInfo_v2", NULL);
	LOAD(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL);
	LOAD(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL);
	LOAD(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL);
	LOAD(cuMemsetD8Async, "cuMemsetD8Async", NULL);
	LOAD(cuStreamCreate, "cuStreamCreate", NULL);
	LOAD(cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy");
	LOAD(cuStreamSynchronize, "cuStreamSynchronize", NULL);
	LOAD(cuStreamWaitEvent, "cuStreamWaitEvent", NULL);
	LOAD(cuEventCreate, "cuEventCreate", NULL);
	LOAD(cuEventRecord, "cuEventRecord", NULL);
	LOAD(cuEventSynchronize, "cuEventSynchronize", NULL);
	LOAD(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	LOAD(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy");

	int r = cu->api.cuInit(0);
	if (r != 0) {
		const char *name = fj_cu_error_name(r);
		return fail(cu, "CUDA driver found but no GPU: cuInit returned %s (%d%s)", name ? name : "an unknown error",
		            r, r == 34 ? " = stub library" : "");
	}
	cu->api.cuDriverGetVersion(&cu->driver_version);
	int n = 0;
	r = cu->api.cuDeviceGetCount(&n);
	if (r != 0 || n == 0)
		return fail(cu, "CUDA driver found but no GPU: %s", r ? fj_cu_error_name(r) : "no CUDA device");
	fj_status st;
	if ((st = FJ_CU(cu, cuDeviceGet(&cu->device, 0))) != FJ_OK)
		goto out;
	cu->api.cuDeviceGetName(cu->name, (int)sizeof cu->name, cu->device);
	cu->api.cuDeviceGetAttribute(&cu->cc_major, 75, cu->device);
	cu->api.cuDeviceGetAttribute(&cu->cc_minor, 76, cu->device);
	cu->api.cuDeviceGetAttribute(&cu->sm_count, 16, cu->device);    /* MULTIPROCESSOR_COUNT */
	cu->api.cuDeviceGetAttribute(&cu->regs_per_sm, 82, cu->device); /* MAX_REGISTERS_PER_MULTIPROCESSOR */
	if ((st = FJ_CU(cu, cuDevicePrimaryCtxRetain(&cu->cuctx, cu->device))) != FJ_OK)
		goto out;
	/* the caller's current context (PyTorch's, say) is restored below */
	if ((st = fj_cu_push(cu)) != FJ_OK)
		goto out;
	st = FJ_CU(cu, cuStreamCreate(&cu->stream, 1 /* CU_STREAM_NON_BLOCKING */));
	fj_cu_pop(cu);
	if (st != FJ_OK)
		goto out;
	cu->cur = cu->stream;
	if (cu->cc_major < 8) {
		return fail(cu, "CUDA GPU %s (sm_%d%d) is too old: fusejit's NVPTX backend needs sm_80 or newer",
		            cu->name, cu->cc_major, cu->cc_minor);
	}
	cu->init_status = FJ_OK;
	return FJ_OK;
out:
	snprintf(cu->init_error, sizeof cu->init_error, "%s", fj_context_error(cu->ctx));
	cu->init_status = st;
	return st;
}

fj_status fj_cu_open(fj_context *ctx, const char *path, fj_cu **out)
{
	*out = NULL;
	fj_cu *cu = calloc(1, sizeof *cu);
	if (!cu)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	cu->ctx = ctx;
	cu->device = -1;
	*out = cu;
	return open_driver(cu, path);
}

static void free_blocks(fj_cu *cu, bool all)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < cu->nblocks; i++) {
		if (all || !cu->blocks[i].busy)
			cu->api.cuMemFree(cu->blocks[i].p);
		else
			cu->blocks[k++] = cu->blocks[i];
	}
	cu->nblocks = k;
}

void fj_cu_driver_free(fj_cu *cu)
{
	if (!cu)
		return;
	if (cu->cuctx && fj_cu_push(cu) == FJ_OK) {
		cu->api.cuCtxSynchronize();
		free_blocks(cu, true);
		if (cu->stream)
			cu->api.cuStreamDestroy(cu->stream);
		fj_cu_pop(cu);
	}
	if (cu->cuctx)
		cu->api.cuDevicePrimaryCtxRelease(cu->device);
	free(cu->blocks);
	if (cu->emu_free)
		cu->emu_free(cu->emu);
	/* The library stays loaded: unloading a CUDA driver is unsafe while
	 * other contexts of the process may use it. */
	free(cu);
}

/* ---- the context's driver: its own slot (FJ_SLOT_CUDA_DRIVER), so that
 * this file needs nothing else of backend_nvptx ---- */

typedef struct cu_slot {
	pthread_mutex_t lock; /* opening the driver */
	fj_cu *cu;            /* once tried */
	bool cu_tried;
} cu_slot;

static void slot_destroy(fj_context *ctx, void *p)
{
	cu_slot *s = p;
	if (!s)
		return;
	fj_cu_driver_free(s->cu);
	pthread_mutex_destroy(&s->lock);
	fj_free(ctx, s, sizeof *s);
}

static fj_status slot_create(fj_context *ctx, void **out)
{
	/* Runs under the context's lock: no diagnostics here. */
	cu_slot *s = fj_alloc(ctx, sizeof *s);
	if (!s)
		return FJ_ERR_NOMEM;
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return FJ_OK;
}

static fj_status slot_get(fj_context *ctx, cu_slot **out)
{
	void *p = NULL;
	fj_status st = fj_context_slot(ctx, FJ_SLOT_CUDA_DRIVER, slot_create, slot_destroy, &p);
	*out = p;
	if (st == FJ_ERR_NOMEM)
		fj_error_status(ctx, st, (fj_loc){0}, "out of memory");
	return st;
}

void fj_cu_module_unload(fj_context *ctx, void *mod)
{
	cu_slot *s;
	if (mod && slot_get(ctx, &s) == FJ_OK && s->cu && s->cu->init_status == FJ_OK && fj_cu_push(s->cu) == FJ_OK) {
		s->cu->api.cuModuleUnload(mod);
		fj_cu_pop(s->cu);
	}
}

/* Opens the driver once; a failure is remembered and reported again. */
static fj_status get_locked(fj_context *ctx, cu_slot *s, fj_cu **out)
{
	if (!s->cu_tried) {
		s->cu_tried = true;
		fj_cu_open(ctx, NULL, &s->cu); /* records its failure */
		*out = s->cu;
		return s->cu ? s->cu->init_status : FJ_ERR_NOMEM;
	}
	if (!s->cu)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (s->cu->init_status != FJ_OK)
		return fj_error_status(ctx, s->cu->init_status, (fj_loc){0}, "%s", s->cu->init_error);
	*out = s->cu;
	return FJ_OK;
}

fj_status fj_cu_get(fj_context *ctx, fj_cu **out)
{
	*out = NULL;
	cu_slot *s;
	fj_status st = slot_get(ctx, &s);
	if (st != FJ_OK)
		return st;
	pthread_mutex_lock(&s->lock);
	st = get_locked(ctx, s, out);
	pthread_mutex_unlock(&s->lock);
	if (st != FJ_OK)
		*out = NULL;
	return st;
}

bool fj_cu_usable(fj_context *ctx)
{
	/* A scratch context: the first attempt's diagnostics must not reach ctx. */
	cu_slot *s;
	if (slot_get(ctx, &s) != FJ_OK)
		return false;
	pthread_mutex_lock(&s->lock);
	bool ok;
	if (!s->cu_tried) {
		fj_context *scratch = fj_context_create(NULL, NULL);
		fj_cu *cu = NULL;
		if (scratch) /* with ctx's settings: its driver library */
			fj_cu_open(scratch, fj_context_settings(ctx)->libcuda, &cu);
		if (cu)
			cu->ctx = ctx;
		s->cu = cu;
		s->cu_tried = true;
		fj_context_destroy(scratch);
	}
	ok = s->cu && s->cu->init_status == FJ_OK;
	pthread_mutex_unlock(&s->lock);
	return ok;
}

/* ---- the current context ---- */

fj_status fj_cu_push(fj_cu *cu) { return FJ_CU(cu, cuCtxPushCurrent(cu->cuctx)); }

void fj_cu_pop(fj_cu *cu)
{
	void *popped = NULL;
	cu->api.cuCtxPopCurrent(&popped);
}

/* ---- faults ---- */

/* A synchronising call's result: an asynchronous fault of a kernel surfaces
 * here, so the message says which kernels may have caused it. */
static fj_status sync_check(fj_cu *cu, int res, const char *call, const char *file, int line)
{
	unsigned n = cu->launches_since_sync;
	if (res == 0) {
		cu->launches_since_sync = 0;
		return FJ_OK;
	}
	char msg[600];
	fj_cu_format_error(msg, sizeof msg, res, call, file, line);
	if (n == 0)
		return fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0}, "%s", msg);
	if (n == 1 && fj_context_settings(cu->ctx)->nvptx_sync)
		return fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0}, "%s: kernel %s faulted", msg, cu->last_kernel);
	return fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0},
	                       "%s: a fault of %s%u kernel%s launched since the last synchronisation (the last: %s); "
	                       "FUSEJIT_NVPTX_SYNC=1 (option nvptx_sync) waits after each launch and names the kernel",
	                       msg, n > 1 ? "one of the " : "", n, n > 1 ? "s" : "", cu->last_kernel);
}
#define FJ_CU_SYNC(cu, call) sync_check((cu), (int)((cu)->api.call), #call, __FILE__, __LINE__)

/* ---- memory ---- */

fj_status fj_cu_alloc(fj_cu *cu, size_t n, fj_cu_dptr *out)
{
	if (n == 0)
		n = 256;
	n = (n + 255) & ~(size_t)255;
	int best = -1;
	for (uint32_t i = 0; i < cu->nblocks; i++) {
		fj_cu_block *b = &cu->blocks[i];
		if (!b->busy && b->size >= n && b->size <= 2 * n && (best < 0 || b->size < cu->blocks[best].size))
			best = (int)i;
	}
	if (best >= 0) {
		cu->blocks[best].busy = true;
		*out = cu->blocks[best].p;
		return FJ_OK;
	}
	if (cu->nblocks == cu->cap_blocks) {
		uint32_t nc = cu->cap_blocks ? cu->cap_blocks * 2 : 32;
		fj_cu_block *nb = realloc(cu->blocks, nc * sizeof *nb);
		if (!nb)
			return fj_error_status(cu->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		cu->blocks = nb;
		cu->cap_blocks = nc;
	}
	fj_cu_dptr p = 0;
	int r = cu->api.cuMemAlloc(&p, n);
	if (r == 2 /* out of memory */) {
		fj_status st = FJ_CU_SYNC(cu, cuCtxSynchronize());
		if (st != FJ_OK)
			return st;
		free_blocks(cu, false);
		r = cu->api.cuMemAlloc(&p, n);
	}
	if (r != 0) {
		fj_cu_check(cu->ctx, r, "cuMemAlloc_v2(&p, n)", __FILE__, __LINE__);
		if (r == 2)
			fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0},
			                "CUDA device out of memory allocating %zu bytes", n);
		return FJ_ERR_DRIVER;
	}
	cu->blocks[cu->nblocks++] = (fj_cu_block){p, n, true};
	*out = p;
	return FJ_OK;
}

void fj_cu_release(fj_cu *cu, fj_cu_dptr p)
{
	for (uint32_t i = 0; i < cu->nblocks; i++)
		if (cu->blocks[i].p == p) {
			cu->blocks[i].busy = false;
			return;
		}
}

fj_status fj_cu_htod(fj_cu *cu, fj_cu_dptr dst, const void *src, size_t n)
{
	return n ? FJ_CU(cu, cuMemcpyHtoDAsync(dst, src, n, cu->cur)) : FJ_OK;
}

fj_status fj_cu_dtoh(fj_cu *cu, void *dst, fj_cu_dptr src, size_t n)
{
	/* from pageable memory it returns once copied: an earlier kernel's fault surfaces here */
	fj_status st = n ? FJ_CU_SYNC(cu, cuMemcpyDtoHAsync(dst, src, n, cu->cur)) : FJ_OK;
	return st ? st : FJ_CU_SYNC(cu, cuStreamSynchronize(cu->cur));
}

fj_status fj_cu_dtod(fj_cu *cu, fj_cu_dptr dst, fj_cu_dptr src, size_t n)
{
	return n ? FJ_CU(cu, cuMemcpyDtoDAsync(dst, src, n, cu->cur)) : FJ_OK;
}

fj_status fj_cu_memset0(fj_cu *cu, fj_cu_dptr dst, size_t n)
{
	return n ? FJ_CU(cu, cuMemsetD8Async(dst, 0, n, cu->cur)) : FJ_OK;
}

fj_status fj_cu_sync(fj_cu *cu)
{
	return FJ_CU_SYNC(cu, cuStreamSynchronize(cu->cur));
}

void fj_cu_set_stream(fj_cu *cu, void *stream) { cu->cur = stream ? stream : cu->stream; }

/* ---- modules and launches ---- */

fj_status fj_cu_module_load(fj_cu *cu, const char *ptx, void **mod)
{
	enum { ELOG = 8192, ILOG = 4096 };
	/* CU_JIT_ERROR_LOG_BUFFER (5) + size (6), CU_JIT_INFO_LOG_BUFFER (3) + size (4) */
	char *elog = calloc(1, ELOG), *ilog = calloc(1, ILOG);
	if (!elog || !ilog) {
		free(elog);
		free(ilog);
		return fj_error_status(cu->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	int opts[4] = {5, 6, 3, 4};
	void *vals[4] = {elog, (void *)(uintptr_t)ELOG, ilog, (void *)(uintptr_t)ILOG};
	int r = cu->api.cuModuleLoadDataEx(mod, ptx, 4, opts, vals);
	fj_status st = FJ_OK;
	if (r != 0) {
		fj_cu_check(cu->ctx, r, "cuModuleLoadDataEx(&mod, ptx, ...)", __FILE__, __LINE__);
		st = fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0}, "CUDA JIT error log: %s",
		                     *elog ? elog : "(empty)");
	}
	free(elog);
	free(ilog);
	return st;
}

fj_status fj_cu_function(fj_cu *cu, void *mod, const char *name, void **fn)
{
	return FJ_CU(cu, cuModuleGetFunction(fn, mod, name));
}

fj_status fj_cu_launch(fj_cu *cu, void *fn, const char *name, unsigned grid, unsigned block, unsigned shared,
                       void **params)
{
	fj_status st;
	if (shared > 48 * 1024) {
		/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
		if ((st = FJ_CU(cu, cuFuncSetAttribute(fn, 8, (int)shared))) != FJ_OK)
			return st;
	}
	snprintf(cu->last_kernel, sizeof cu->last_kernel, "%s", name);
	cu->launches_since_sync++;
	int r = cu->api.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared, cu->cur, params, NULL);
	if (r != 0) {
		char msg[600];
		fj_cu_format_error(msg, sizeof msg, r, "cuLaunchKernel", __FILE__, __LINE__);
		return fj_error_status(cu->ctx, FJ_ERR_DRIVER, (fj_loc){0}, "%s: kernel %s (grid %u, block %u, %u bytes of "
		                       "dynamic shared memory)", msg, name, grid, block, shared);
	}
	if (fj_context_settings(cu->ctx)->nvptx_sync)
		return FJ_CU_SYNC(cu, cuStreamSynchronize(cu->cur));
	return FJ_OK;
}

fj_status fj_cu_event_create(fj_cu *cu, void **ev)
{
	return FJ_CU(cu, cuEventCreate(ev, 0));
}

fj_status fj_cu_event_record(fj_cu *cu, void *ev)
{
	return FJ_CU(cu, cuEventRecord(ev, cu->cur));
}

fj_status fj_cu_event_elapsed(fj_cu *cu, void *start, void *end, float *ms)
{
	fj_status st = FJ_CU_SYNC(cu, cuEventSynchronize(end));
	return st ? st : FJ_CU(cu, cuEventElapsedTime(ms, start, end));
}

void fj_cu_event_destroy(fj_cu *cu, void *ev)
{
	if (ev)
		cu->api.cuEventDestroy(ev);
}

fj_status fj_cu_event_sync(fj_cu *cu, void *ev)
{
	return FJ_CU_SYNC(cu, cuEventSynchronize(ev));
}

fj_status fj_cu_stream_wait(fj_cu *cu, void *ev)
{
	return FJ_CU(cu, cuStreamWaitEvent(cu->cur, ev, 0));
}
