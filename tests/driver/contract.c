/* contract.c -- driver.contract: the stand-in CUDA driver (fakecuda.c)
 * enforces each rule of the driver's contract it claims, checked on small
 * hand-written PTX through the driver API alone (dlopen, no fusejit):
 *
 *   fj-driver-contract LIBFJCUDA
 *
 * Kernels run through tiny C functions bound with fjcuda_bind_entry. The
 * register limit needs ptxas (its part is skipped, and says so, without).
 * Exit 0 when every check held, 1 otherwise. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_nvptx/fjcuda_hook.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static struct {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDeviceGet)(int *, int);
	CUresult (*cuDeviceGetAttribute)(int *, int, int);
	CUresult (*cuCtxCreate)(void **, unsigned, int);
	CUresult (*cuCtxDestroy)(void *);
	CUresult (*cuCtxSetCurrent)(void *);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, void *);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, void *);
	CUresult (*cuModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
	CUresult (*cuModuleGetFunction)(void **, void *, const char *);
	CUresult (*cuFuncSetAttribute)(void *, int, int);
	CUresult (*cuFuncGetAttribute)(int *, int, void *);
	CUresult (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
	                           void **, void **);
	CUresult (*cuStreamCreate)(void **, unsigned);
	CUresult (*cuStreamDestroy)(void *);
	CUresult (*cuStreamSynchronize)(void *);
	CUresult (*cuStreamWaitEvent)(void *, void *, unsigned);
	CUresult (*cuEventCreate)(void **, unsigned);
	CUresult (*cuEventRecord)(void *, void *);
	CUresult (*cuEventQuery)(void *);
	CUresult (*cuEventSynchronize)(void *);
	CUresult (*cuEventElapsedTime)(float *, void *, void *);
	CUresult (*cuEventDestroy)(void *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	fjcuda_bind_fn fjcuda_bind_entry;
	int (*fjcuda_last_fault)(char *, size_t);
	int (*fjcuda_leaks)(void);
	int (*fjcuda_bad_frees)(void);
} cu;

static int failures;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			failures++;                                           \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);           \
			printf(__VA_ARGS__);                                  \
			printf("\n");                                         \
		}                                                             \
	} while (0)
#define EXPECT_RES(call, want)                                                                        \
	do {                                                                                          \
		CUresult r_ = (call);                                                                 \
		CHECK(r_ == (want), "%s returned %d, expected %d (%s)", #call, r_, (want), name_of(r_)); \
	} while (0)

static const char *name_of(CUresult r)
{
	const char *s = NULL;
	return cu.cuGetErrorName(r, &s) == 0 && s ? s : "?";
}

/* Two entries: k_store(.ptr dst align 16, u32 v) stores v at dst;
 * k_copy(.ptr src, .ptr dst) copies 4 bytes. k_req has .reqntid 64. */
static const char *ptx_small =
	".version 7.8\n"
	".target sm_90\n"
	".address_size 64\n"
	"// a comment .entry not_an_entry(\n"
	".visible .entry k_store(\n"
	"\t.param .u64 .ptr .global .align 16 k_store_param_0,\n"
	"\t.param .u32 k_store_param_1\n"
	")\n"
	".maxntid 256, 1, 1\n"
	"{\n"
	"\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<3>;\n"
	"\tld.param.u64 %rd1, [k_store_param_0];\n"
	"\tld.param.u32 %r1, [k_store_param_1];\n"
	"\tcvta.to.global.u64 %rd2, %rd1;\n"
	"\tst.global.u32 [%rd2], %r1;\n"
	"\tret;\n"
	"}\n"
	".visible .entry k_copy(\n"
	"\t.param .u64 .ptr .global .align 4 k_copy_param_0,\n"
	"\t.param .u64 .ptr .global .align 4 k_copy_param_1\n"
	")\n"
	"{\n"
	"\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<5>;\n"
	"\tld.param.u64 %rd1, [k_copy_param_0];\n"
	"\tld.param.u64 %rd2, [k_copy_param_1];\n"
	"\tcvta.to.global.u64 %rd3, %rd1;\n"
	"\tcvta.to.global.u64 %rd4, %rd2;\n"
	"\tld.global.u32 %r1, [%rd3];\n"
	"\tst.global.u32 [%rd4], %r1;\n"
	"\tret;\n"
	"}\n"
	".visible .entry k_req()\n"
	".reqntid 64\n"
	"{\n"
	"\tret;\n"
	"}\n";

/* The bound kernels: run counts, the order mode they saw. */
static int runs, seen_order = -1;

static int run_store(void *ud, int variant, unsigned grid, unsigned block, unsigned shared, const uint64_t *args,
                     unsigned nargs, int order, unsigned seed)
{
	(void)ud, (void)variant, (void)grid, (void)block, (void)shared, (void)seed;
	runs++;
	seen_order = order;
	if (nargs == 2 && args[0])
		*(uint32_t *)(uintptr_t)args[0] = (uint32_t)args[1];
	return 0;
}

static int run_copy(void *ud, int variant, unsigned grid, unsigned block, unsigned shared, const uint64_t *args,
                    unsigned nargs, int order, unsigned seed)
{
	(void)ud, (void)variant, (void)grid, (void)block, (void)shared, (void)order, (void)seed;
	runs++;
	if (nargs == 2)
		memcpy((void *)(uintptr_t)args[1], (const void *)(uintptr_t)args[0], 4);
	return 0;
}

typedef struct kit {
	void *ctx, *mod, *store, *copy, *req;
} kit;

/* A fresh context (current) with ptx_small loaded and its entries bound. */
static kit open_kit(void)
{
	kit k = {0};
	EXPECT_RES(cu.cuCtxCreate(&k.ctx, 0, 0), 0);
	EXPECT_RES(cu.cuModuleLoadDataEx(&k.mod, ptx_small, 0, NULL, NULL), 0);
	EXPECT_RES(cu.cuModuleGetFunction(&k.store, k.mod, "k_store"), 0);
	EXPECT_RES(cu.cuModuleGetFunction(&k.copy, k.mod, "k_copy"), 0);
	EXPECT_RES(cu.cuModuleGetFunction(&k.req, k.mod, "k_req"), 0);
	EXPECT_RES(cu.fjcuda_bind_entry(k.mod, "k_store", run_store, NULL, 0), 0);
	EXPECT_RES(cu.fjcuda_bind_entry(k.mod, "k_copy", run_copy, NULL, 0), 0);
	return k;
}

static CUresult launch_store(kit *k, void *stream, CUdeviceptr p, uint32_t v, unsigned block, unsigned shared)
{
	void *params[2] = {&p, &v};
	return cu.cuLaunchKernel(k->store, 1, 1, 1, block, 1, 1, shared, stream, params, NULL);
}

static CUresult launch_copy(kit *k, void *stream, CUdeviceptr src, CUdeviceptr dst)
{
	void *params[2] = {&src, &dst};
	return cu.cuLaunchKernel(k->copy, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
}

static void test_setup(void)
{
	CUdeviceptr p;
	int v = 0;
	EXPECT_RES(cu.cuMemAlloc(&p, 16), 3);      /* before cuInit: CUDA_ERROR_NOT_INITIALIZED */
	EXPECT_RES(cu.cuDeviceGet(&v, 0), 3);
	EXPECT_RES(cu.cuInit(0), 0);
	EXPECT_RES(cu.cuMemAlloc(&p, 16), 201);    /* no current context: CUDA_ERROR_INVALID_CONTEXT */
	EXPECT_RES(cu.cuCtxSynchronize(), 201);
	static const int attrs[][2] = {{16, 132}, {75, 9}, {76, 0}, {82, 65536}, {81, 228 * 1024}, {8, 48 * 1024},
	                               {97, 227 * 1024}, {1, 1024}};
	for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++) {
		EXPECT_RES(cu.cuDeviceGetAttribute(&v, attrs[i][0], 0), 0);
		CHECK(v == attrs[i][1], "device attribute %d is %d, expected %d", attrs[i][0], v, attrs[i][1]);
	}
}

static void test_modules(bool have_ptxas)
{
	kit k = open_kit();
	void *mod = NULL, *fn = NULL;
	char elog[4096] = "";
	int opts[2] = {5, 6};
	void *vals[2] = {elog, (void *)(uintptr_t)sizeof elog};
	EXPECT_RES(cu.cuModuleLoadDataEx(&mod, "this is not PTX", 2, opts, vals), 218);
	CHECK(strstr(elog, ".version") != NULL, "no JIT error log for unparsable PTX: '%s'", elog);
	CHECK((uintptr_t)vals[1] == strlen(elog), "the log's size was not written back");
	if (have_ptxas) { /* a body ptxas refuses */
		elog[0] = 0;
		vals[1] = (void *)(uintptr_t)sizeof elog;
		EXPECT_RES(cu.cuModuleLoadDataEx(&mod, ".version 7.8\n.target sm_90\n.address_size 64\n"
		                                       ".visible .entry bad()\n{\n\tnot_an_instruction %r1;\n}\n",
		                                 2, opts, vals),
		           218);
		CHECK(strstr(elog, "ptxas") != NULL, "no ptxas error in the JIT log: '%s'", elog);
	}
	EXPECT_RES(cu.cuModuleGetFunction(&fn, k.mod, "not_an_entry"), 500);
	EXPECT_RES(cu.cuModuleGetFunction(&fn, k.mod, "no_such_entry"), 500);
	CUdeviceptr p;
	EXPECT_RES(cu.cuMemAlloc(&p, 64), 0);
	EXPECT_RES(launch_store(&k, NULL, p, 1, 512, 0), 1);         /* over .maxntid 256 */
	EXPECT_RES(launch_store(&k, NULL, p, 1, 2048, 0), 1);        /* over 1024 */
	EXPECT_RES(cu.cuLaunchKernel(k.req, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), 1); /* not .reqntid 64 */
	EXPECT_RES(cu.cuLaunchKernel(k.req, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL), 801); /* unbound */
	EXPECT_RES(cu.cuLaunchKernel(k.store, 1, 65536, 1, 32, 1, 1, 0, NULL, NULL, NULL), 1); /* grid y */
	EXPECT_RES(launch_store(&k, NULL, p, 1, 32, 50000), 1);       /* > 48 KiB without the opt-in */
	EXPECT_RES(cu.cuFuncSetAttribute(k.store, 8, 240 * 1024), 1); /* > 227 KiB */
	EXPECT_RES(cu.cuFuncSetAttribute(k.store, 8, 50000), 0);
	EXPECT_RES(launch_store(&k, NULL, p, 1, 32, 50000), 0);
	EXPECT_RES(launch_store(&k, NULL, p, 1, 32, 60000), 1);       /* over what was opted in */
	EXPECT_RES(cu.cuCtxSynchronize(), 0);
	EXPECT_RES(cu.cuMemFree(p), 0);
	if (!have_ptxas) {
		printf("SKIP the register limit (701): no ptxas (FJCUDA_PTXAS=0 or /usr/local/cuda/bin/ptxas absent)\n");
		EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0);
		return;
	}
	/* 160 floats loaded, then stored in reverse: all live at once */
	size_t cap = 64 * 1024, n = 0;
	char *ptx = malloc(cap);
	n += (size_t)snprintf(ptx + n, cap - n, ".version 7.8\n.target sm_90\n.address_size 64\n"
	                      ".visible .entry k_regs(.param .u64 .ptr .global .align 16 k_regs_p)\n{\n"
	                      "\t.reg .f32 %%f<161>;\n\t.reg .b64 %%rd<3>;\n\tld.param.u64 %%rd1, [k_regs_p];\n"
	                      "\tcvta.to.global.u64 %%rd2, %%rd1;\n");
	for (int i = 0; i < 160; i++)
		n += (size_t)snprintf(ptx + n, cap - n, "\tld.volatile.global.f32 %%f%d, [%%rd2+%d];\n", i, 4 * i);
	for (int i = 0; i < 160; i++)
		n += (size_t)snprintf(ptx + n, cap - n, "\tst.volatile.global.f32 [%%rd2+%d], %%f%d;\n", 4 * (160 + i),
		                      159 - i);
	snprintf(ptx + n, cap - n, "\tret;\n}\n");
	void *rmod = NULL, *rfn = NULL;
	EXPECT_RES(cu.cuModuleLoadDataEx(&rmod, ptx, 0, NULL, NULL), 0);
	free(ptx);
	EXPECT_RES(cu.cuModuleGetFunction(&rfn, rmod, "k_regs"), 0);
	int regs = 0;
	EXPECT_RES(cu.cuFuncGetAttribute(&regs, 4, rfn), 0);
	CHECK(regs > 64, "k_regs uses %d registers by ptxas, expected over 64", regs);
	EXPECT_RES(cu.fjcuda_bind_entry(rmod, "k_regs", run_store, NULL, 0), 0);
	CUdeviceptr q = 0;
	EXPECT_RES(cu.cuMemAlloc(&q, 4096), 0);
	void *params[1] = {&q};
	EXPECT_RES(cu.cuLaunchKernel(rfn, 1, 1, 1, 1024, 1, 1, 0, NULL, params, NULL), 701);
	EXPECT_RES(cu.cuLaunchKernel(rfn, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL), 0);
	EXPECT_RES(cu.cuCtxSynchronize(), 0);
	EXPECT_RES(cu.cuMemFree(q), 0);
	EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0);
}

/* A bad pointer argument: cuLaunchKernel succeeds, the next
 * synchronisation returns want, and so does every later call. */
static void test_fault(int want, CUdeviceptr (*bad)(CUdeviceptr), const char *what)
{
	kit k = open_kit();
	CUdeviceptr p, q;
	EXPECT_RES(cu.cuMemAlloc(&p, 256), 0);
	void *s;
	EXPECT_RES(cu.cuStreamCreate(&s, 1), 0);
	EXPECT_RES(launch_store(&k, s, bad(p), 7, 32, 0), 0);
	EXPECT_RES(cu.cuStreamSynchronize(s), want);
	EXPECT_RES(cu.cuMemAlloc(&q, 16), want); /* sticky */
	EXPECT_RES(cu.cuCtxSynchronize(), want);
	char buf[512];
	CHECK(cu.fjcuda_last_fault(buf, sizeof buf) == want, "fjcuda_last_fault is not %d", want);
	CHECK(strstr(buf, "k_store") && strstr(buf, "parameter 0") && strstr(buf, what),
	      "the fault's description '%s' names neither the entry, the parameter nor '%s'", buf, what);
	EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0);
}

static CUdeviceptr plus4(CUdeviceptr p) { return p + 4; }
static CUdeviceptr outside(CUdeviceptr p) { return p + 4096; }

static void test_memory(void)
{
	kit k = open_kit();
	CUdeviceptr p, q;
	int bad0 = cu.fjcuda_bad_frees(), leaks0 = cu.fjcuda_leaks();
	EXPECT_RES(cu.cuMemAlloc(&p, 100), 0);
	CHECK(p % 256 == 0, "allocations are not 256-aligned");
	EXPECT_RES(cu.cuMemFree(p), 0);
	EXPECT_RES(cu.cuMemFree(p), 1);     /* double free */
	EXPECT_RES(cu.cuMemFree(12345), 1); /* never allocated */
	CHECK(cu.fjcuda_bad_frees() == bad0 + 2, "bad frees not counted");
	EXPECT_RES(cu.cuMemAlloc(&p, 100), 0);
	EXPECT_RES(cu.cuMemAlloc(&q, 10), 0);
	EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0); /* two leaks */
	CHECK(cu.fjcuda_leaks() == leaks0 + 2, "leaks counted %d, expected %d", cu.fjcuda_leaks(), leaks0 + 2);
	/* a guard overwritten (device memory is host memory) */
	k = open_kit();
	EXPECT_RES(cu.cuMemAlloc(&p, 100), 0);
	((unsigned char *)(uintptr_t)p)[100] ^= 1;
	EXPECT_RES(cu.cuCtxSynchronize(), 700);
	EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0);
}

static void test_streams(void)
{
	kit k = open_kit();
	CUdeviceptr d, out;
	uint32_t v = 42, got = 0;
	void *nb, *bl;
	EXPECT_RES(cu.cuMemAlloc(&d, 4), 0);
	EXPECT_RES(cu.cuMemAlloc(&out, 4), 0);
	EXPECT_RES(cu.cuStreamCreate(&nb, 1), 0); /* CU_STREAM_NON_BLOCKING */
	EXPECT_RES(cu.cuStreamCreate(&bl, 0), 0);
	/* deferred: nothing runs before a synchronisation */
	runs = 0;
	EXPECT_RES(launch_store(&k, nb, out, 5, 32, 0), 0);
	CHECK(runs == 0, "a launch ran before any synchronisation");
	EXPECT_RES(cu.cuStreamSynchronize(nb), 0);
	CHECK(runs == 1, "the launch did not run at the synchronisation");
	CHECK(seen_order == FJCUDA_ORDER_REVERSE, "blocks not in reverse order by default (%d)", seen_order);
	/* cuMemcpyHtoD_v2 is on the legacy stream: a non-blocking stream does
	 * not wait for it (the kernel reads the fresh allocation's 0xff bytes) */
	EXPECT_RES(cu.cuMemcpyHtoD(d, &v, 4), 0);
	EXPECT_RES(launch_copy(&k, nb, d, out), 0);
	EXPECT_RES(cu.cuStreamSynchronize(nb), 0);
	EXPECT_RES(cu.cuMemcpyDtoH(&got, out, 4), 0);
	CHECK(got == 0xffffffffu, "a non-blocking stream saw the legacy stream's copy (%u)", got);
	/* ... and a blocking stream does */
	v = 43;
	EXPECT_RES(cu.cuMemcpyHtoD(d, &v, 4), 0);
	EXPECT_RES(launch_copy(&k, bl, d, out), 0);
	EXPECT_RES(cu.cuStreamSynchronize(bl), 0);
	EXPECT_RES(cu.cuMemcpyDtoHAsync(&got, out, 4, bl), 0);
	CHECK(got == 43, "a blocking stream did not see the legacy stream's copy (%u)", got);
	/* the async copy captures the data at the call */
	v = 44;
	EXPECT_RES(cu.cuMemcpyHtoDAsync(d, &v, 4, nb), 0);
	v = 0;
	EXPECT_RES(cu.cuMemcpyDtoHAsync(&got, d, 4, nb), 0); /* pageable: complete on return */
	CHECK(got == 44, "HtoDAsync did not capture its data at the call (%u)", got);
	/* events: pending until a synchronisation; a wait pulls the other stream */
	void *e0, *e1, *e2;
	float ms = -1;
	EXPECT_RES(cu.cuEventCreate(&e0, 0), 0);
	EXPECT_RES(cu.cuEventCreate(&e1, 0), 0);
	EXPECT_RES(cu.cuEventCreate(&e2, 0), 0);
	EXPECT_RES(cu.cuEventElapsedTime(&ms, e0, e1), 400); /* never recorded */
	EXPECT_RES(cu.cuEventSynchronize(e2), 0);           /* never recorded: nothing to wait for */
	EXPECT_RES(cu.cuEventRecord(e0, nb), 0);
	EXPECT_RES(launch_store(&k, nb, out, 6, 32, 0), 0);
	EXPECT_RES(cu.cuEventRecord(e1, nb), 0);
	EXPECT_RES(cu.cuEventElapsedTime(&ms, e0, e1), 600);
	EXPECT_RES(cu.cuEventQuery(e1), 600);
	EXPECT_RES(cu.cuEventSynchronize(e1), 0);
	EXPECT_RES(cu.cuEventQuery(e1), 0);
	EXPECT_RES(cu.cuEventElapsedTime(&ms, e0, e1), 0);
	CHECK(ms >= 0, "elapsed time %g", ms);
	v = 45;
	EXPECT_RES(cu.cuMemcpyHtoDAsync(d, &v, 4, bl), 0);
	EXPECT_RES(cu.cuEventRecord(e2, bl), 0);
	EXPECT_RES(cu.cuStreamWaitEvent(nb, e2, 0), 0);
	EXPECT_RES(launch_copy(&k, nb, d, out), 0);
	EXPECT_RES(cu.cuMemcpyDtoHAsync(&got, out, 4, nb), 0);
	CHECK(got == 45, "cuStreamWaitEvent did not order the copy before the kernel (%u)", got);
	EXPECT_RES(cu.cuEventDestroy(e0), 0);
	EXPECT_RES(cu.cuEventDestroy(e1), 0);
	EXPECT_RES(cu.cuEventDestroy(e2), 0);
	EXPECT_RES(cu.cuStreamDestroy(nb), 0);
	EXPECT_RES(cu.cuStreamDestroy(bl), 0);
	EXPECT_RES(cu.cuMemFree(d), 0);
	EXPECT_RES(cu.cuMemFree(out), 0);
	EXPECT_RES(cu.cuCtxDestroy(k.ctx), 0);
}

#define SYM(field, name)                                                          \
	do {                                                                      \
		*(void **)&cu.field = dlsym(lib, name);                           \
		if (!cu.field) {                                                  \
			fprintf(stderr, "fj-driver-contract: %s lacks %s\n", path, name); \
			return 1;                                                 \
		}                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : getenv("FUSEJIT_LIBCUDA");
	if (!path) {
		fprintf(stderr, "usage: fj-driver-contract LIBFJCUDA\n");
		return 2;
	}
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "fj-driver-contract: %s\n", dlerror());
		return 1;
	}
	SYM(cuInit, "cuInit");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(cuCtxCreate, "cuCtxCreate_v2");
	SYM(cuCtxDestroy, "cuCtxDestroy_v2");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemFree, "cuMemFree_v2");
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx");
	SYM(cuModuleGetFunction, "cuModuleGetFunction");
	SYM(cuFuncSetAttribute, "cuFuncSetAttribute");
	SYM(cuFuncGetAttribute, "cuFuncGetAttribute");
	SYM(cuLaunchKernel, "cuLaunchKernel");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuStreamWaitEvent, "cuStreamWaitEvent");
	SYM(cuEventCreate, "cuEventCreate");
	SYM(cuEventRecord, "cuEventRecord");
	SYM(cuEventQuery, "cuEventQuery");
	SYM(cuEventSynchronize, "cuEventSynchronize");
	SYM(cuEventElapsedTime, "cuEventElapsedTime_v2");
	SYM(cuEventDestroy, "cuEventDestroy_v2");
	SYM(cuGetErrorName, "cuGetErrorName");
	SYM(fjcuda_bind_entry, FJCUDA_BIND_SYMBOL);
	SYM(fjcuda_last_fault, "fjcuda_last_fault");
	SYM(fjcuda_leaks, "fjcuda_leaks");
	SYM(fjcuda_bad_frees, "fjcuda_bad_frees");
	const char *px = getenv("FJCUDA_PTXAS");
	bool have_ptxas = px && strcmp(px, "0") != 0 ? access(px, X_OK) == 0
	                                             : !px && access("/usr/local/cuda/bin/ptxas", X_OK) == 0;
	test_setup();
	test_modules(have_ptxas);
	test_fault(716, plus4, "not a multiple of its .align 16");
	test_fault(700, outside, "outside every live allocation");
	test_memory();
	test_streams();
	printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
