/* api_test.c -- driver.api: the C API's CUDA tensors through the stand-in
 * driver (fakecuda.c), compared with host runs:
 *
 *   fj-driver-api LIBFJCUDA
 *
 * The test dlopens the same library fusejit loads (option libcuda), so both
 * share one driver: tensors are pointers from its cuMemAlloc_v2 in the
 * primary context. Runs: host inputs and outputs; CUDA inputs and outputs
 * (in place); a view at a 4-byte offset (aligned to its element only);
 * CUDA tensors on the caller's non-blocking stream and on a blocking one,
 * read back after synchronising it; a forward and backward with CUDA
 * tensors. At the end no fault was reported and fusejit freed all it
 * allocated (no leak when the primary context goes). Public API only. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusejit/fusejit.h>

#include "tests/api/expect.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static struct {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
	CUresult (*cuDevicePrimaryCtxRelease)(int);
	CUresult (*cuCtxSetCurrent)(void *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuStreamCreate)(void **, unsigned);
	CUresult (*cuStreamSynchronize)(void *);
	CUresult (*cuStreamDestroy)(void *);
	int (*fjcuda_last_fault)(char *, size_t);
	int (*fjcuda_leaks)(void);
} cu;

#define CU_OK(call) EXPECT((call) == 0)

static const char infer_text[] =
	"graph @main(%x: f32[N,8], %w: f32[8]) {\n"
	"  %a = aten.mul(%x, %w)\n"
	"  %b = aten.exp(%a)\n"
	"  %s = aten.sum(%b) {dims=[1], keepdim=true}\n"
	"  %c = aten.div(%b, %s)\n"
	"  return %c, %s\n"
	"}\n";

static const char train_text[] =
	"graph @f(%x: f32[4,6] {nograd}, %w: f32[6]) {\n"
	"  %y = aten.mul(%x, %w)\n"
	"  %z = aten.sin(%y)\n"
	"  %t = aten.tanh(%z)\n"
	"  %s = aten.sum(%t) {dims=[1]}\n"
	"  return %s, %z\n"
	"}\n";

enum { N = 37 };

static fj_status compile(fj_context *ctx, const char *text, fj_executor ex, int training, fj_program **p)
{
	return compile_text(ctx, text, "driver_api.fj", ex, training, NULL, p);
}

#define tensor f32_tensor

/* n floats within 1e-5 relative. */
static int near(const float *a, const float *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!(fabsf(a[i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])))) {
			fprintf(stderr, "  element %lld: %g vs %g\n", (long long)i, a[i], b[i]);
			return 0;
		}
	return 1;
}

/* An upload as a caller must make one before fusejit's (non-blocking)
 * stream reads it: cuMemcpyHtoD_v2 from pageable memory may return before
 * its copy on the legacy stream is done, so that stream is synchronised. */
static void upload(CUdeviceptr dst, const void *src, size_t n)
{
	CU_OK(cu.cuMemcpyHtoD(dst, src, n));
	CU_OK(cu.cuStreamSynchronize(NULL));
}

static CUdeviceptr dalloc(size_t n)
{
	CUdeviceptr p = 0;
	CU_OK(cu.cuMemAlloc(&p, n));
	return p;
}

/* The inference graph: host tensors, CUDA tensors, an offset view, streams. */
static void test_inference(fj_context *ctx)
{
	fj_program *nv = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &nv));
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_HOST, 0, &host));
	if (!nv || !host) {
		fj_program_destroy(nv);
		fj_program_destroy(host);
		return;
	}
	float x[N * 8], w[8], c[N * 8], s[N];
	for (int i = 0; i < N * 8; i++)
		x[i] = (float)((i * 37) % 19) / 10.0f - 0.9f;
	for (int i = 0; i < 8; i++)
		w[i] = 0.25f * (float)i - 1.0f;
	fj_tensor in[2] = {tensor(x, FJ_DEVICE_HOST, 2, N, 8), tensor(w, FJ_DEVICE_HOST, 1, 8, 0)};
	fj_tensor ref[2], got[2];
	memset(ref, 0, sizeof ref);
	memset(got, 0, sizeof got);
	EXPECT_OK(ctx, fj_program_run(host, in, 2, ref, 2));
	EXPECT_OK(ctx, fj_program_run(nv, in, 2, got, 2));
	if (!ref[0].data || !got[0].data)
		goto done;
	EXPECT(near(got[0].data, ref[0].data, N * 8) && near(got[1].data, ref[1].data, N));
	/* CUDA tensors: the stand-in's memory, used in place */
	CUdeviceptr dx = dalloc(sizeof x + 16), dw = dalloc(sizeof w), dc = dalloc(sizeof c), ds = dalloc(sizeof s);
	upload(dx, x, sizeof x);
	upload(dw, w, sizeof w);
	fj_tensor din[2] = {tensor((void *)(uintptr_t)dx, FJ_DEVICE_CUDA, 2, N, 8),
	                    tensor((void *)(uintptr_t)dw, FJ_DEVICE_CUDA, 1, 8, 0)};
	fj_tensor dout[2] = {tensor((void *)(uintptr_t)dc, FJ_DEVICE_CUDA, 2, N, 8),
	                     tensor((void *)(uintptr_t)ds, FJ_DEVICE_CUDA, 2, N, 1)};
	EXPECT_OK(ctx, fj_program_run(nv, din, 2, dout, 2));
	CU_OK(cu.cuMemcpyDtoH(c, dc, sizeof c));
	CU_OK(cu.cuMemcpyDtoH(s, ds, sizeof s));
	EXPECT(near(c, ref[0].data, N * 8) && near(s, ref[1].data, N));
	/* caller's streams: non-blocking and blocking; read back after a sync */
	for (unsigned flags = 0; flags < 2; flags++) {
		void *stream = NULL;
		CU_OK(cu.cuStreamCreate(&stream, flags == 0 ? 1 : 0));
		fj_run_options ro;
		fj_run_options_init(&ro);
		ro.stream = stream;
		float zero[N * 8];
		memset(zero, 0, sizeof zero);
		upload(dc, zero, sizeof c);
		EXPECT_OK(ctx, fj_program_run_with(nv, &ro, din, 2, dout, 2));
		CU_OK(cu.cuStreamSynchronize(stream));
		CU_OK(cu.cuMemcpyDtoH(c, dc, sizeof c));
		EXPECT(near(c, ref[0].data, N * 8));
		CU_OK(cu.cuStreamDestroy(stream));
	}
	/* a view at a 4-byte offset: aligned to its f32 elements only */
	upload(dx + 4, x, sizeof x);
	din[0].data = (void *)(uintptr_t)(dx + 4);
	EXPECT_OK(ctx, fj_program_run(nv, din, 2, dout, 2));
	CU_OK(cu.cuMemcpyDtoH(c, dc, sizeof c));
	EXPECT(near(c, ref[0].data, N * 8));
	CU_OK(cu.cuMemFree(dx));
	CU_OK(cu.cuMemFree(dw));
	CU_OK(cu.cuMemFree(dc));
	CU_OK(cu.cuMemFree(ds));
done:
	for (int k = 0; k < 2; k++) {
		fj_tensor_release(&ref[k]);
		fj_tensor_release(&got[k]);
	}
	fj_program_destroy(nv);
	fj_program_destroy(host);
}

/* Forward and backward with CUDA tensors: outputs and the gradient of %w
 * equal host's. */
static void train_run(fj_context *ctx, fj_program *p, bool dev, float *o0, float *o1, float *g)
{
	float x[24], w[6], t0[4], t1[24];
	for (int i = 0; i < 24; i++) {
		x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
		t1[i] = (float)(i % 5) / 4.0f - 0.5f;
	}
	for (int i = 0; i < 6; i++)
		w[i] = 0.3f * (float)i - 0.7f;
	for (int i = 0; i < 4; i++)
		t0[i] = 1.0f - 0.25f * (float)i;
	fj_device d = dev ? FJ_DEVICE_CUDA : FJ_DEVICE_HOST;
	CUdeviceptr dx = 0, dw = 0, dt0 = 0, dt1 = 0, do0 = 0, do1 = 0, dg = 0;
	void *px = x, *pw = w, *pt0 = t0, *pt1 = t1, *po0 = o0, *po1 = o1, *pg = g;
	if (dev) {
		dx = dalloc(sizeof x), dw = dalloc(sizeof w), dt0 = dalloc(sizeof t0), dt1 = dalloc(sizeof t1);
		do0 = dalloc(4 * 4), do1 = dalloc(24 * 4), dg = dalloc(6 * 4);
		upload(dx, x, sizeof x);
		upload(dw, w, sizeof w);
		upload(dt0, t0, sizeof t0);
		upload(dt1, t1, sizeof t1);
		px = (void *)(uintptr_t)dx, pw = (void *)(uintptr_t)dw, pt0 = (void *)(uintptr_t)dt0;
		pt1 = (void *)(uintptr_t)dt1, po0 = (void *)(uintptr_t)do0, po1 = (void *)(uintptr_t)do1;
		pg = (void *)(uintptr_t)dg;
	}
	fj_tensor in[2] = {tensor(px, d, 2, 4, 6), tensor(pw, d, 1, 6, 0)};
	fj_tensor out[2] = {tensor(po0, d, 1, 4, 0), tensor(po1, d, 2, 4, 6)};
	fj_tensor tan[2] = {tensor(pt0, d, 1, 4, 0), tensor(pt1, d, 2, 4, 6)};
	fj_tensor grad[1] = {tensor(pg, d, 1, 6, 0)};
	fj_saved *saved = NULL;
	EXPECT_OK(ctx, fj_program_forward(p, in, 2, out, 2, &saved));
	if (saved)
		EXPECT_OK(ctx, fj_program_backward(p, saved, tan, 2, grad, 1));
	fj_saved_destroy(saved);
	if (dev) {
		CU_OK(cu.cuMemcpyDtoH(o0, do0, 4 * 4));
		CU_OK(cu.cuMemcpyDtoH(o1, do1, 24 * 4));
		CU_OK(cu.cuMemcpyDtoH(g, dg, 6 * 4));
		CUdeviceptr all[7] = {dx, dw, dt0, dt1, do0, do1, dg};
		for (int i = 0; i < 7; i++)
			CU_OK(cu.cuMemFree(all[i]));
	}
}

static void test_training(fj_context *ctx)
{
	fj_program *nv = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_NVPTX, 1, &nv));
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_HOST, 1, &host));
	if (nv && host) {
		float h0[4], h1[24], hg[6], d0[4], d1[24], dg[6];
		memset(h0, 0, sizeof h0), memset(d0, 0, sizeof d0);
		train_run(ctx, host, false, h0, h1, hg);
		train_run(ctx, nv, true, d0, d1, dg);
		EXPECT(near(d0, h0, 4) && near(d1, h1, 24) && near(dg, hg, 6));
	}
	fj_program_destroy(nv);
	fj_program_destroy(host);
}

#define SYM(field, name)                                                                    \
	do {                                                                                \
		*(void **)&cu.field = dlsym(lib, name);                                     \
		if (!cu.field) {                                                            \
			fprintf(stderr, "fj-driver-api: %s lacks %s\n", path, name);        \
			return 1;                                                           \
		}                                                                           \
	} while (0)

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : NULL;
	if (!path) {
		fprintf(stderr, "usage: fj-driver-api LIBFJCUDA\n");
		return 2;
	}
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* the same handle fusejit gets */
	if (!lib) {
		fprintf(stderr, "fj-driver-api: %s\n", dlerror());
		return 1;
	}
	SYM(cuInit, "cuInit");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemFree, "cuMemFree_v2");
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(fjcuda_last_fault, "fjcuda_last_fault");
	SYM(fjcuda_leaks, "fjcuda_leaks");
	void *pctx = NULL;
	if (cu.cuInit(0) != 0 || cu.cuDevicePrimaryCtxRetain(&pctx, 0) != 0 || cu.cuCtxSetCurrent(pctx) != 0) {
		fprintf(stderr, "fj-driver-api: the stand-in did not set up\n");
		return 1;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx)
		return 1;
	fj_context_set_cache(ctx, "off", 0);
	EXPECT_OK(ctx, fj_context_set_option(ctx, "libcuda", path));
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "cuda"));
	test_inference(ctx);
	test_training(ctx);
	fj_context_destroy(ctx);
	/* fusejit restores nothing on this thread: make ours current again */
	CU_OK(cu.cuCtxSetCurrent(pctx));
	CU_OK(cu.cuDevicePrimaryCtxRelease(0)); /* the last reference: the context goes */
	char fault[512] = "";
	int code = cu.fjcuda_last_fault(fault, sizeof fault);
	EXPECT(code == 0);
	if (code)
		fprintf(stderr, "fj-driver-api: fault %d: %s\n", code, fault);
	EXPECT(cu.fjcuda_leaks() == 0);
	printf("%s: %d failure%s\n", fails ? "FAIL" : "ok", fails, fails == 1 ? "" : "s");
	return fails ? 1 : 0;
}
