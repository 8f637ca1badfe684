/* fixes.c -- fj-driver-fixes: the nvptx executor's driver defects of issue
 * 14, each checked through the public API against the stand-in driver
 * (fakecuda.c), which enforces what the real one does and what the host
 * emulator never did:
 *
 *   align    a caller's CUDA tensors 4 bytes past a 16-byte boundary (dense,
 *            aligned to their element: used in place) on a pointwise graph:
 *            the vectorised entry (.ptr .align 16) would fault with
 *            CUDA_ERROR_MISALIGNED_ADDRESS; the run must pick the scalar
 *            entry from the actual pointers and match the host executor.
 *            Host tensors too: their uploads must be ordered before the
 *            kernels on fusejit's non-blocking stream (a legacy-stream copy
 *            lands late under the stand-in, as its DMA may on a GPU).
 *   context  the caller's current CUDA context (not the primary one) is
 *            current again after compiling, running and destroying an nvptx
 *            program.
 *   fault    a CUDA input at an address no allocation holds: the run fails
 *            with one message naming the kernel that faulted (with option
 *            nvptx_sync) or the kernels launched since the last
 *            synchronisation (without it), never a crash or a hang.
 *
 *   fj-driver-fixes LIBFJCUDA align|context|fault|fault-sync
 *
 * One mode a process: a fault poisons the driver's context, as on a GPU. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusejit/fusejit.h>

#include "tests/api/expect.h"

static void *lib;

static void *sym(const char *name)
{
	void *f = dlsym(lib, name);
	if (!f) {
		fprintf(stderr, "stand-in driver lacks %s\n", name);
		exit(1);
	}
	return f;
}

/* A driver call: CU(name, (parameter types), arguments...). */
#define CU(name, params, ...) ((int(*) params)(uintptr_t)sym(#name))(__VA_ARGS__)

static const char pw_text[] = "graph @main(%x: f32[1003], %w: f32[1003]) {\n"
                              "  %a = aten.mul(%x, %w)\n"
                              "  %b = aten.add(%a, %x)\n"
                              "  return %b\n"
                              "}\n";

static fj_context *new_ctx(const char *libcuda)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx) {
		fprintf(stderr, "no context\n");
		exit(1);
	}
	fj_context_set_cache(ctx, "off", 0);
	fj_context_set_option(ctx, "libcuda", libcuda);
	fj_context_set_option(ctx, "nvptx_device", "cuda");
	return ctx;
}

static fj_status compile(fj_context *ctx, fj_executor ex, fj_program **p)
{
	return compile_text(ctx, pw_text, "fixes.fj", ex, 0, NULL, p);
}

enum { N = 1003 };

static void tensor(fj_tensor *t, void *data, fj_device dev) { *t = f32_tensor(data, dev, 1, N, 0); }

/* The host executor's result for x, w. */
static void host_result(const char *libcuda, const float *x, const float *w, float *out)
{
	fj_context *ctx = new_ctx(libcuda);
	fj_program *p = NULL;
	EXPECT_OK(ctx, compile(ctx, FJ_EXECUTOR_HOST, &p));
	fj_tensor in[2], o;
	tensor(&in[0], (void *)x, FJ_DEVICE_HOST);
	tensor(&in[1], (void *)w, FJ_DEVICE_HOST);
	tensor(&o, out, FJ_DEVICE_HOST);
	if (p)
		EXPECT_OK(ctx, fj_program_run(p, in, 2, &o, 1));
	fj_program_destroy(p);
	fj_context_destroy(ctx);
}

static int close_to(const float *a, const float *b)
{
	for (int i = 0; i < N; i++)
		if (!(fabsf(a[i] - b[i]) <= 1e-6f * (1 + fabsf(b[i])))) {
			fprintf(stderr, "element %d: %g, expected %g\n", i, a[i], b[i]);
			return 0;
		}
	return 1;
}

static void inputs(float *x, float *w)
{
	for (int i = 0; i < N; i++) {
		x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
		w[i] = (float)((i * 11) % 13) / 6.0f - 1.0f;
	}
}

static int mode_align(const char *libcuda)
{
	static float x[N], w[N], want[N], got[N];
	inputs(x, w);
	host_result(libcuda, x, w, want);
	/* the caller's memory: the primary context, as PyTorch uses it */
	void *pctx = NULL;
	int dev = 0;
	EXPECT(CU(cuInit, (unsigned), 0) == 0);
	EXPECT(CU(cuDeviceGet, (int *, int), &dev, 0) == 0);
	EXPECT(CU(cuDevicePrimaryCtxRetain, (void **, int), &pctx, dev) == 0);
	EXPECT(CU(cuCtxSetCurrent, (void *), pctx) == 0);
	uint64_t bx = 0, bw = 0, bo = 0;
	size_t bytes = N * sizeof(float) + 16;
	EXPECT(CU(cuMemAlloc_v2, (uint64_t *, size_t), &bx, bytes) == 0);
	EXPECT(CU(cuMemAlloc_v2, (uint64_t *, size_t), &bw, bytes) == 0);
	EXPECT(CU(cuMemAlloc_v2, (uint64_t *, size_t), &bo, bytes) == 0);
	EXPECT(CU(cuMemcpyHtoD_v2, (uint64_t, const void *, size_t), bx + 4, x, N * sizeof(float)) == 0);
	EXPECT(CU(cuMemcpyHtoD_v2, (uint64_t, const void *, size_t), bw + 4, w, N * sizeof(float)) == 0);
	EXPECT(((int (*)(void))(uintptr_t)sym("cuCtxSynchronize"))() == 0);

	fj_context *ctx = new_ctx(libcuda);
	fj_program *p = NULL;
	EXPECT_OK(ctx, compile(ctx, FJ_EXECUTOR_NVPTX, &p));
	if (p) {
		/* host tensors: uploaded on fusejit's stream before the kernel */
		fj_tensor in[2], o;
		tensor(&in[0], x, FJ_DEVICE_HOST);
		tensor(&in[1], w, FJ_DEVICE_HOST);
		tensor(&o, got, FJ_DEVICE_HOST);
		memset(got, 0, sizeof got);
		EXPECT_OK(ctx, fj_program_run(p, in, 2, &o, 1));
		EXPECT(close_to(got, want));
		/* CUDA tensors at 4 bytes past a 16-byte boundary */
		tensor(&in[0], (void *)(uintptr_t)(bx + 4), FJ_DEVICE_CUDA);
		tensor(&in[1], (void *)(uintptr_t)(bw + 4), FJ_DEVICE_CUDA);
		tensor(&o, (void *)(uintptr_t)(bo + 4), FJ_DEVICE_CUDA);
		EXPECT_OK(ctx, fj_program_run(p, in, 2, &o, 1));
		memset(got, 0, sizeof got);
		EXPECT(CU(cuMemcpyDtoH_v2, (void *, uint64_t, size_t), got, bo + 4, N * sizeof(float)) == 0);
		EXPECT(close_to(got, want));
		/* and aligned ones again, in the same program */
		tensor(&in[0], (void *)(uintptr_t)bx, FJ_DEVICE_CUDA);
		tensor(&in[1], (void *)(uintptr_t)bw, FJ_DEVICE_CUDA);
		tensor(&o, (void *)(uintptr_t)bo, FJ_DEVICE_CUDA);
		EXPECT(CU(cuMemcpyHtoD_v2, (uint64_t, const void *, size_t), bx, x, N * sizeof(float)) == 0);
		EXPECT(CU(cuMemcpyHtoD_v2, (uint64_t, const void *, size_t), bw, w, N * sizeof(float)) == 0);
		EXPECT(((int (*)(void))(uintptr_t)sym("cuCtxSynchronize"))() == 0);
		EXPECT_OK(ctx, fj_program_run(p, in, 2, &o, 1));
		memset(got, 0, sizeof got);
		EXPECT(CU(cuMemcpyDtoH_v2, (void *, uint64_t, size_t), got, bo, N * sizeof(float)) == 0);
		EXPECT(close_to(got, want));
	}
	fj_program_destroy(p);
	fj_context_destroy(ctx);
	EXPECT(CU(cuMemFree_v2, (uint64_t), bx) == 0);
	EXPECT(CU(cuMemFree_v2, (uint64_t), bw) == 0);
	EXPECT(CU(cuMemFree_v2, (uint64_t), bo) == 0);
	EXPECT(CU(cuDevicePrimaryCtxRelease_v2, (int), dev) == 0);
	return fails ? 1 : 0;
}

static int mode_context(const char *libcuda)
{
	static float x[N], w[N], want[N], got[N];
	inputs(x, w);
	host_result(libcuda, x, w, want);
	void *mine = NULL, *cur = NULL;
	int dev = 0;
	EXPECT(CU(cuInit, (unsigned), 0) == 0);
	EXPECT(CU(cuDeviceGet, (int *, int), &dev, 0) == 0);
	EXPECT(CU(cuCtxCreate_v2, (void **, unsigned, int), &mine, 0, dev) == 0); /* current now */
	fj_context *ctx = new_ctx(libcuda);
	fj_program *p = NULL;
	EXPECT_OK(ctx, compile(ctx, FJ_EXECUTOR_NVPTX, &p));
	EXPECT(CU(cuCtxGetCurrent, (void **), &cur) == 0 && cur == mine);
	if (p) {
		fj_tensor in[2], o;
		tensor(&in[0], x, FJ_DEVICE_HOST);
		tensor(&in[1], w, FJ_DEVICE_HOST);
		tensor(&o, got, FJ_DEVICE_HOST);
		EXPECT_OK(ctx, fj_program_run(p, in, 2, &o, 1));
		EXPECT(close_to(got, want));
		EXPECT(CU(cuCtxGetCurrent, (void **), &cur) == 0 && cur == mine);
	}
	fj_program_destroy(p);
	EXPECT(CU(cuCtxGetCurrent, (void **), &cur) == 0 && cur == mine);
	fj_context_destroy(ctx); /* unloads the modules, frees the buffers, releases the primary context */
	EXPECT(CU(cuCtxGetCurrent, (void **), &cur) == 0 && cur == mine);
	EXPECT(CU(cuCtxDestroy_v2, (void *), mine) == 0);
	return fails ? 1 : 0;
}

static int mode_fault(const char *libcuda, bool sync_each)
{
	static float w[N], got[N];
	inputs(got, w);
	fj_context *ctx = new_ctx(libcuda);
	if (sync_each)
		EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_sync", "1"));
	fj_program *p = NULL;
	EXPECT_OK(ctx, compile(ctx, FJ_EXECUTOR_NVPTX, &p));
	if (p) {
		fj_tensor in[2], o;
		/* no allocation holds this address (the stand-in's are host memory) */
		tensor(&in[0], (void *)(uintptr_t)0x10000, FJ_DEVICE_CUDA);
		tensor(&in[1], w, FJ_DEVICE_HOST);
		tensor(&o, got, FJ_DEVICE_HOST);
		fj_status st = fj_program_run(p, in, 2, &o, 1);
		const char *e = fj_context_error(ctx);
		fprintf(stderr, "the run's error (expected): %s\n", e);
		EXPECT(st == FJ_ERR_DRIVER);
		EXPECT(strstr(e, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL);
		EXPECT(strstr(e, "fj_main_k0") != NULL);
		if (sync_each)
			EXPECT(strstr(e, "kernel fj_main_k0 faulted") != NULL);
		else
			EXPECT(strstr(e, "launched since the last synchronisation") != NULL);
		/* the context stays broken, as on a GPU: a clear error again */
		st = fj_program_run(p, in, 2, &o, 1);
		EXPECT(st == FJ_ERR_DRIVER);
	}
	fj_program_destroy(p);
	fj_context_destroy(ctx);
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fj-driver-fixes LIBFJCUDA align|context|fault|fault-sync\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "cannot load the stand-in driver %s: %s\n", argv[1], dlerror());
		return 1;
	}
	const char *m = argv[2];
	int rc = strcmp(m, "align") == 0     ? mode_align(argv[1])
	         : strcmp(m, "context") == 0 ? mode_context(argv[1])
	         : strcmp(m, "fault") == 0   ? mode_fault(argv[1], false)
	         : strcmp(m, "fault-sync") == 0 ? mode_fault(argv[1], true)
	                                        : 2;
	printf("fj-driver-fixes %s: %s\n", m, rc ? "FAILED" : "ok");
	return rc;
}
