/* test_nvptx.c -- backend_nvptx/ without a GPU: the driver loader's messages
 * (no driver; the toolkit's stub library, loaded by path), FJ_CU error
 * formatting and the error-name table, the target whitelist, libdevice's
 * lazy link and the fallback math, region compile times (cold and a cache
 * hit, printed on stderr), a region's variants compiled in parallel and
 * joined into one PTX module (ptxas, same bytes serially), launch plans (tensor cores, split reductions),
 * and the GPU templates run on the host emulator: a split reduction picked
 * by its sizes, every golden case in each variant mode, and
 * persistent_inner_outer regions (training backwards: rows and column sums
 * in one launch) against the reference, in each of their entries. */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include "backend_nvptx/cuda.h"
#include "backend_nvptx/emu.h"
#include "runtime/program.h"
#include "tests/common/npy_rt.h"
#include "runtime/program_nvptx.h"
#include "backend_nvptx/nvptx.h"
#include "backend_nvptx/region_gpu.h"
#include "backend_nvptx/region_gpu_internal.h"
#include "codegen/region.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "test.h"

#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Sets a context option (value "": unset, the built-in default). */
static void set_option(fj_context *ctx, const char *name, const char *value)
{
	ck_assert_msg(fj_context_set_option(ctx, name, value) == FJ_OK, "%s=%s: %s", name, value,
	              fj_context_error(ctx));
}

START_TEST(test_missing_driver)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_cu *cu = NULL;
	fj_status st = fj_cu_open(ctx, "libcuda-missing.so.1", &cu);
	ck_assert_int_eq(st, FJ_ERR_DRIVER);
	ck_assert_ptr_nonnull(cu);
	ck_assert_msg(strncmp(cu->init_error, "no CUDA driver: libcuda-missing.so.1 not found", 46) == 0, "%s",
	              cu->init_error);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "no CUDA driver"));
	fj_cu_driver_free(cu);
	if (access("/usr/lib/x86_64-linux-gnu/libcuda.so.1", F_OK) != 0 && !getenv("FUSEJIT_LIBCUDA")) {
		/* the default name, on a machine without a driver */
		ck_assert(!fj_cu_usable(ctx));
		fj_cu *c2 = NULL;
		ck_assert_int_eq(fj_cu_get(ctx, &c2), FJ_ERR_DRIVER);
		ck_assert_ptr_null(c2);
		ck_assert_msg(strstr(fj_context_error(ctx), "no CUDA driver: libcuda.so.1 not found"), "%s",
		              fj_context_error(ctx));
	}
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_stub_library)
{
	if (access(STUB, R_OK) != 0) {
		fj_test_skip("test_stub_library", "%s absent (no CUDA toolkit)", STUB);
		return;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_cu *cu = NULL;
	fj_status st = fj_cu_open(ctx, STUB, &cu);
	ck_assert_int_eq(st, FJ_ERR_DRIVER);
	ck_assert_msg(strcmp(cu->init_error, "CUDA driver found but no GPU: cuInit returned CUDA_ERROR_STUB_LIBRARY "
	                                     "(34 = stub library)") == 0,
	              "%s", cu->init_error);
	/* FJ_CU on a real entry point of the stub: the call, the place, the name */
	int n = 0;
	int line = __LINE__ + 1;
	st = FJ_CU(cu, cuDeviceGetCount(&n));
	ck_assert_int_eq(st, FJ_ERR_DRIVER);
	char want[64];
	snprintf(want, sizeof want, "test_nvptx.c:%d", line);
	ck_assert_msg(strstr(fj_context_error(ctx), want), "%s", fj_context_error(ctx));
	ck_assert_msg(strstr(fj_context_error(ctx), "cuDeviceGetCount(&n) failed: CUDA_ERROR_STUB_LIBRARY (34) at "),
	              "%s", fj_context_error(ctx));
	ck_assert_msg(strstr(fj_context_error(ctx), "test_nvptx.c:"), "%s", fj_context_error(ctx));
	fj_cu_driver_free(cu);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_error_names)
{
	ck_assert_str_eq(fj_cu_error_name(0), "CUDA_SUCCESS");
	ck_assert_str_eq(fj_cu_error_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
	ck_assert_str_eq(fj_cu_error_name(34), "CUDA_ERROR_STUB_LIBRARY");
	ck_assert_str_eq(fj_cu_error_name(218), "CUDA_ERROR_INVALID_PTX");
	ck_assert_str_eq(fj_cu_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
	ck_assert_str_eq(fj_cu_error_name(999), "CUDA_ERROR_UNKNOWN");
	ck_assert_ptr_null(fj_cu_error_name(12345));
	char buf[256];
	fj_cu_format_error(buf, sizeof buf, 2, "api.cuMemAlloc(&p, n)", "/src/backend_nvptx/cuda.c", 42);
	ck_assert_str_eq(buf, "CUDA driver: cuMemAlloc(&p, n) failed: CUDA_ERROR_OUT_OF_MEMORY (2) at "
	                      "backend_nvptx/cuda.c:42");
	fj_cu_format_error(buf, sizeof buf, 4242, "cuInit(0)", "x.c", 1);
	ck_assert_str_eq(buf, "CUDA driver: cuInit(0) failed: unknown CUDA error (4242) at x.c:1");
	fj_context *ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_cu_check(ctx, 0, "cuInit(0)", "x.c", 1), FJ_OK);
	ck_assert_int_eq(fj_cu_check(ctx, 700, "cuLaunchKernel(...)", "x.c", 7), FJ_ERR_DRIVER);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "CUDA_ERROR_ILLEGAL_ADDRESS (700)"));
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_targets)
{
	const char *ok[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};
	for (size_t i = 0; i < FJ_ARRAY_LEN(ok); i++)
		ck_assert(fj_nvptx_sm_supported(ok[i]));
	const char *bad[] = {"sm_100", "sm_100a", "sm_75", "sm_70", "sm_90b", "", "compute_80"};
	for (size_t i = 0; i < FJ_ARRAY_LEN(bad); i++)
		ck_assert(!fj_nvptx_sm_supported(bad[i]));
	ck_assert(!fj_nvptx_sm_supported(NULL));
	fj_context *ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_nvptx_check_sm(ctx, "sm_100"), FJ_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(fj_context_error(ctx), "sm_100 is not supported by LLVM 19's NVPTX backend"), "%s",
	              fj_context_error(ctx));
	ck_assert_int_eq(fj_nvptx_check_sm(ctx, "sm_75"), FJ_ERR_UNSUPPORTED);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "unknown target 'sm_75'"));
	ck_assert_int_eq(fj_nvptx_check_sm(ctx, "sm_90a"), FJ_OK);
	ck_assert_str_eq(fj_nvptx_sm_for_cc(8, 0), "sm_80");
	ck_assert_str_eq(fj_nvptx_sm_for_cc(8, 6), "sm_86");
	ck_assert_str_eq(fj_nvptx_sm_for_cc(8, 9), "sm_89");
	ck_assert_str_eq(fj_nvptx_sm_for_cc(9, 0), "sm_90");
	ck_assert_str_eq(fj_nvptx_sm_for_cc(10, 0), "sm_90");
	ck_assert_ptr_null(fj_nvptx_sm_for_cc(7, 5));
	/* the PTX version is the lowest the target allows */
	fj_nvptx_comp c;
	ck_assert_int_eq(fj_nvptx_comp_begin(ctx, "sm_90a", &c), FJ_OK);
	fj_buf b;
	fj_buf_init(&b, ctx);
	ck_assert_int_eq(fj_nvptx_comp_ptx(&c, &b), FJ_OK);
	ck_assert_ptr_nonnull(strstr(b.data, ".version 8.0"));
	ck_assert_ptr_nonnull(strstr(b.data, ".target sm_90a"));
	fj_buf_free(&b);
	fj_nvptx_comp_end(&c);
	fj_context_destroy(ctx);
}
END_TEST

/* A kernel computing out[tid] = exp(in[tid]) and sin: PTX of it. */
static char *math_kernel_ptx(fj_context *ctx, bool *libdevice, char **llvm_ir)
{
	fj_nvptx_comp c;
	ck_assert_int_eq(fj_nvptx_comp_begin(ctx, "sm_80", &c), FJ_OK);
	*libdevice = c.libdevice;
	fj_cg cg;
	fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
	LLVMTypeRef ps[2] = {cg.t_ptr, cg.t_ptr};
	LLVMValueRef f = LLVMAddFunction(c.mod, "k", LLVMFunctionType(cg.t_void, ps, 2, 0));
	fj_nvptx_mark_kernel(&c, f, 128, 3);
	cg.fn = f;
	cg.entry = LLVMAppendBasicBlockInContext(c.llctx, f, "entry");
	LLVMPositionBuilderAtEnd(cg.b, cg.entry);
	LLVMValueRef tid = LLVMBuildZExt(cg.b, fj_nvptx_sreg(&cg, FJ_SREG_TID_X), cg.t_i64, "");
	LLVMValueRef pi = LLVMBuildGEP2(cg.b, cg.t_f32, LLVMGetParam(f, 0), &tid, 1, "");
	LLVMValueRef x = LLVMBuildLoad2(cg.b, cg.t_f32, pi, "");
	LLVMValueRef y = fj_cg_math1(&cg, FJ_MATH_EXP, x);
	y = LLVMBuildFAdd(cg.b, y, fj_cg_math1(&cg, FJ_MATH_SIN, x), "");
	LLVMValueRef po = LLVMBuildGEP2(cg.b, cg.t_f32, LLVMGetParam(f, 1), &tid, 1, "");
	LLVMBuildStore(cg.b, y, po);
	LLVMBuildRetVoid(cg.b);
	fj_cg_dispose(&cg);
	ck_assert_int_eq(fj_nvptx_comp_optimise(&c), FJ_OK);
	fj_buf b;
	fj_buf_init(&b, ctx);
	ck_assert_int_eq(fj_nvptx_comp_llvm(&c, &b), FJ_OK);
	*llvm_ir = strdup(b.data);
	b.len = 0;
	ck_assert_int_eq(fj_nvptx_comp_ptx(&c, &b), FJ_OK);
	char *s = strdup(b.data);
	fj_buf_free(&b);
	fj_nvptx_comp_end(&c);
	return s;
}

START_TEST(test_libdevice_lazy)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!fj_nvptx_libdevice_path(ctx)) {
		fj_test_skip("test_libdevice_lazy", "no libdevice (FUSEJIT_LIBDEVICE or the CUDA toolkit's)");
		fj_context_destroy(ctx);
		return;
	}
	bool ld;
	char *ir, *ir2;
	double t0 = now_us();
	char *ptx = math_kernel_ptx(ctx, &ld, &ir);
	double t1 = now_us();
	char *ptx2 = math_kernel_ptx(ctx, &ld, &ir2); /* second: libdevice bytes already loaded */
	double t2 = now_us();
	free(ir2);
	ck_assert(ld);
	/* only what is used was linked, and it was inlined and dropped */
	ck_assert_ptr_null(strstr(ir, "@__nv_"));
	ck_assert_ptr_null(strstr(ir, "declare float @__nv"));
	ck_assert_ptr_nonnull(strstr(ptx, ".entry k("));
	ck_assert_ptr_null(strstr(ptx, "call"));
	ck_assert_ptr_null(strstr(ptx, ".func"));
	ck_assert_ptr_nonnull(strstr(ptx, ".maxntid 128, 1, 1"));
	ck_assert_ptr_nonnull(strstr(ptx, ".minnctapersm 3"));
	fprintf(stderr, "libdevice link+O3+PTX: first %.2f ms, then %.2f ms\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3);
	free(ptx);
	free(ptx2);
	free(ir);
	fj_context_destroy(ctx);
}
END_TEST

/* Approximate math, opted into (nvptx_math=approx): PTX approximations,
 * libdevice unused. */
START_TEST(test_fallback_math)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "libdevice", "none");
	set_option(ctx, "nvptx_math", "approx");
	bool ld;
	char *ir;
	char *ptx = math_kernel_ptx(ctx, &ld, &ir);
	ck_assert(!ld);
	ck_assert_ptr_nonnull(strstr(ptx, "ex2.approx"));
	ck_assert_ptr_nonnull(strstr(ptx, "sin.approx"));
	ck_assert_ptr_null(strstr(ptx, "call"));
	free(ptx);
	free(ir);
	fj_context_destroy(ctx);
}
END_TEST

/* Compiles the one region of src (fused) for sm_80: its status. */
static fj_status compile_one(fj_context *ctx, const char *src, char **ptx)
{
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, src, strlen(src), "math.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "main");
	ck_assert_uint_eq(g->nnodes, 1);
	fj_nvptx_kernel *k = NULL;
	bool hit = false;
	fj_status st = fj_nvptx_compile_region(ctx, g, 0, "sm_80", &k, &hit);
	*ptx = st == FJ_OK ? strdup(k->ptx) : NULL;
	fj_module_destroy(m);
	return st;
}

/* Without libdevice, a kernel that needs it is one clear error (the kernel,
 * the function, the dtype, the two ways out), never approximations; a
 * kernel without math compiles; nvptx_math=approx opts in. */
START_TEST(test_no_libdevice)
{
	static const char exp64[] = "graph @main(%x: f64[N]) {\n  %y = aten.exp(%x)\n  return %y\n}\n";
	static const char add32[] = "graph @main(%x: f32[N]) {\n  %y = aten.add(%x, %x)\n  return %y\n}\n";
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "cache_dir", "off");
	set_option(ctx, "libdevice", "none");
	set_option(ctx, "nvptx_math", "libdevice"); /* whatever the environment asks */
	char *ptx = NULL;
	ck_assert_int_eq(compile_one(ctx, exp64, &ptx), FJ_ERR_UNSUPPORTED);
	const char *e = fj_context_error(ctx);
	ck_assert_msg(strstr(e, "nvptx: kernel fj_main_k0") && strstr(e, "computes exp in f64, which needs libdevice"),
	              "%s", e);
	ck_assert_msg(strstr(e, "FUSEJIT_LIBDEVICE (the option libdevice) is none"), "%s", e);
	ck_assert_msg(strstr(e, "libdevice.10.bc") && strstr(e, "FUSEJIT_NVPTX_MATH=approx"), "%s", e);
	set_option(ctx, "libdevice", "/nonexistent/libdevice.10.bc");
	ck_assert_int_eq(compile_one(ctx, exp64, &ptx), FJ_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(fj_context_error(ctx), "FUSEJIT_LIBDEVICE=/nonexistent/libdevice.10.bc is not a readable"),
	              "%s", fj_context_error(ctx));
	ck_assert_int_eq(compile_one(ctx, add32, &ptx), FJ_OK);
	free(ptx);
	set_option(ctx, "nvptx_math", "approx");
	ck_assert_int_eq(compile_one(ctx, exp64, &ptx), FJ_OK);
	ck_assert_ptr_nonnull(strstr(ptx, "ex2.approx"));
	free(ptx);
	ck_assert_int_eq(fj_context_set_option(ctx, "nvptx_math", "fast"), FJ_ERR_INVALID);
	ck_assert_msg(strstr(fj_context_error(ctx), "libdevice or approx"), "%s", fj_context_error(ctx));
	fj_context_destroy(ctx);
}
END_TEST

static const char region_src[] = "graph @main(%x: f32[N,4096], %w: f32[4096]) {\n"
                                 "  %y = aten.mul(%x, %w)\n"
                                 "  %z = aten.gelu(%y) {approximate=\"tanh\"}\n"
                                 "  return %z\n"
                                 "}\n";

START_TEST(test_compile_times)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, region_src, strlen(region_src), "t.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "main");
	ck_assert_uint_eq(g->nnodes, 1);
	ck_assert_int_eq(g->nodes[0].op, FJ_OP_FUSION_KERNEL);
	fj_nvptx_kernel *k = NULL;
	bool hit = true;
	double t0 = now_us();
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, "sm_80", &k, &hit), FJ_OK);
	double t1 = now_us();
	ck_assert(!hit);
	ck_assert_ptr_nonnull(strstr(k->ptx, ".entry fj_main_k0("));
	ck_assert_ptr_nonnull(strstr(k->ptx, ".entry fj_main_k0_s1("));
	ck_assert_int_eq(k->nvariants, 2);
	/* a second region kernel cold (libdevice already read), then hits */
	fj_nvptx_kernel *k2 = NULL;
	double t2 = now_us();
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, "sm_90", &k2, &hit), FJ_OK);
	double t3 = now_us();
	ck_assert(!hit);
	double best = 1e9;
	for (int i = 0; i < 20; i++) {
		double a = now_us();
		ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, "sm_80", &k2, &hit), FJ_OK);
		double b = now_us() - a;
		best = b < best ? b : best;
		ck_assert(hit);
		ck_assert_ptr_eq(k2, k);
	}
	fprintf(stderr, "region -> PTX: first cold %.2f ms, cold %.2f ms, cache hit %.1f us\n", (t1 - t0) / 1e3,
	        (t3 - t2) / 1e3, best);
	/* a persistent (softmax) region: four variants in its module */
	static const char sm_src[] = "graph @sm(%x: f32[N,4096]) {\n"
	                             "  %y = aten._softmax(%x) {dim=1, half_to_float=false}\n"
	                             "  return %y\n"
	                             "}\n";
	fj_module *m2 = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, sm_src, strlen(sm_src), "sm.fj", &m2), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m2, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g2 = fj_module_find_graph(m2, "sm");
	double t4 = now_us();
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g2, 0, "sm_90", &k2, &hit), FJ_OK);
	double t5 = now_us();
	ck_assert(!hit);
	ck_assert_int_eq(k2->nvariants, 4);
	fprintf(stderr, "persistent softmax region -> PTX (4 variants), cold: %.2f ms\n", (t5 - t4) / 1e3);
	fj_module_destroy(m2);
	/* an f16 matmul region: tensor cores first, the SIMT kernel second */
	static const char mm_src[] = "graph @mm(%a: f16[M,K], %b: f16[K,N]) {\n"
	                             "  %c = aten.mm(%a, %b)\n"
	                             "  return %c\n"
	                             "}\n";
	ck_assert_int_eq(fj_parse_module(ctx, mm_src, strlen(mm_src), "mm.fj", &m2), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m2, fj_named_pipeline("default"), NULL), FJ_OK);
	g2 = fj_module_find_graph(m2, "mm");
	t4 = now_us();
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g2, 0, "sm_80", &k2, &hit), FJ_OK);
	t5 = now_us();
	ck_assert_int_eq(k2->nvariants, 2);
	ck_assert_str_eq(k2->entry[1], "fj_mm_k0_simt");
	ck_assert_ptr_nonnull(strstr(k2->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
	fprintf(stderr, "f16 matmul region -> PTX (mma + simt), cold: %.2f ms\n", (t5 - t4) / 1e3);
	fj_module_destroy(m2);
	/* layer_norm's backward with weight and bias gradients: one
	 * persistent_inner_outer region (rows and column sums) */
	static const char ln_src[] = "graph @ln(%x: f32[N,4096], %w: f32[4096], %b: f32[4096]) {\n"
	                             "  %y = aten.layer_norm(%x, %w, %b) {normalized_shape=[4096], eps=1e-5}\n"
	                             "  return %y\n"
	                             "}\n";
	ck_assert_int_eq(fj_parse_module(ctx, ln_src, strlen(ln_src), "ln.fj", &m2), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m2, fj_named_pipeline("train"), NULL), FJ_OK);
	g2 = fj_module_find_graph(m2, "ln.bw");
	ck_assert_ptr_nonnull(g2);
	ck_assert_uint_eq(g2->nnodes, 1);
	ck_assert_str_eq(g2->nodes[0].schedule, "persistent_inner_outer");
	t4 = now_us();
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g2, 0, "sm_90", &k2, &hit), FJ_OK);
	t5 = now_us();
	ck_assert(!hit);
	fprintf(stderr, "layer_norm backward region (rows + column sums) -> PTX (%d variants), cold: %.2f ms\n",
	        k2->nvariants, (t5 - t4) / 1e3);
	fj_module_destroy(m2);
	ck_assert_msg(best < 2000, "a cache hit took %.1f us", best);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST


/* ---- a region's variants compiled in parallel, joined into one PTX module ---- */

static int count_of(const char *s, const char *what)
{
	int n = 0;
	for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

/* Runs ptxas -arch=sm on the PTX; false (with the log on stderr) if it fails. */
static bool ptxas_ok(const char *ptx, const char *sm)
{
	char path[] = "/tmp/fj_pv_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fputs(ptx, f);
	fclose(f);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "/usr/local/cuda/bin/ptxas -arch=%s %s -o /dev/null", sm, path);
	int rc = system(cmd);
	unlink(path);
	return rc == 0;
}

/* f64 sin and tan: libdevice's trig reduction keeps a .func
 * (__internal_trig_reduction_slowpathd) and the table __cudart_i2opi_d in
 * each variant's module; f32 sin adds __cudart_i2opi_f. */
static const char trig_src[] = "graph @trig(%x: f64[N,256], %y: f32[N,256]) {\n"
                               "  %a = aten.sin(%x)\n"
                               "  %b = aten.tan(%x)\n"
                               "  %c = aten.sin(%y)\n"
                               "  %d = aten._to_copy(%c) {dtype=f64}\n"
                               "  %e = aten.add(%a, %d)\n"
                               "  return %e, %b\n"
                               "}\n";

static char *compile_trig(const char *sm, const char *jobs, int *nv, char entries[][112])
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "compile_jobs", jobs ? jobs : "0");
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, trig_src, strlen(trig_src), "trig.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "trig");
	ck_assert_uint_eq(g->nnodes, 1);
	fj_nvptx_kernel *k = NULL, *k2 = NULL;
	bool hit = true;
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, sm, &k, &hit), FJ_OK);
	ck_assert(!hit);
	/* the cache: the same entry */
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, sm, &k2, &hit), FJ_OK);
	ck_assert(hit);
	ck_assert_ptr_eq(k, k2);
	ck_assert_uint_eq(strlen(k->ptx), k->ptxlen);
	*nv = k->nvariants;
	for (int v = 0; v < k->nvariants; v++)
		memcpy(entries[v], k->entry[v], 112);
	char *ptx = strdup(k->ptx);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	return ptx;
}

/* The worker contexts of parallel variants (fj_context_new_like): the
 * settings copied (strings too: the copy outlives the original), the same
 * allocator; out of memory at each allocation: NULL, nothing leaked, the
 * original's strings untouched. */
START_TEST(test_context_new_like)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "nvptx_variants", "col");
	set_option(ctx, "compile_jobs", "3");
	set_option(ctx, "libdevice", "none");
	fj_context *w = fj_context_new_like(ctx);
	ck_assert_ptr_nonnull(w);
	const fj_settings *s = fj_context_settings(w);
	ck_assert_ptr_ne(s->nvptx_variants, fj_context_settings(ctx)->nvptx_variants);
	fj_context_destroy(ctx);
	ck_assert_str_eq(s->nvptx_variants, "col");
	ck_assert_str_eq(s->libdevice, "none");
	ck_assert_int_eq(s->compile_jobs, 3);
	fj_context_destroy(w);
	for (long n = 1; n < 400; n++) {
		fj_test_alloc a = {0, 0, 0};
		fj_context *c = fj_context_create(fj_test_alloc_fn, &a);
		ck_assert_ptr_nonnull(c);
		set_option(c, "nvptx_variants", "reg");
		set_option(c, "libcuda", "libcuda.so.1");
		size_t live = a.live;
		a.fail_at = a.count + n;
		fj_context *cw = fj_context_new_like(c);
		a.fail_at = 0;
		ck_assert_str_eq(fj_context_settings(c)->nvptx_variants, "reg");
		if (cw) {
			ck_assert_str_eq(fj_context_settings(cw)->libcuda, "libcuda.so.1");
			fj_context_destroy(cw);
		}
		ck_assert_uint_eq(a.live, live);
		fj_context_destroy(c);
		ck_assert_uint_eq(a.live, 0);
		if (cw)
			break; /* every allocation before the last has failed once */
	}
}
END_TEST

START_TEST(test_parallel_variants)
{
	fj_context *lctx = fj_context_create(NULL, NULL);
	bool have_libdevice = fj_nvptx_libdevice_path(lctx) != NULL;
	fj_context_destroy(lctx);
	if (!have_libdevice) {
		fj_test_skip("test_parallel_variants", "no libdevice (FUSEJIT_LIBDEVICE or the CUDA toolkit's)");
		return;
	}
	bool have_ptxas = access("/usr/local/cuda/bin/ptxas", X_OK) == 0;
	if (!have_ptxas)
		fj_test_skip("test_parallel_variants", "/usr/local/cuda/bin/ptxas not found, its ptxas checks not run");
	static const char *const sms[] = {"sm_80", "sm_90"};
	for (int t = 0; t < 2; t++) {
		int nv = 0, nv1 = 0;
		char entries[FJ_NVPTX_MAX_VARIANTS][112], entries1[FJ_NVPTX_MAX_VARIANTS][112];
		char *ptx = compile_trig(sms[t], NULL, &nv, entries);
		ck_assert_int_eq(nv, 2);
		/* one header */
		ck_assert_int_eq(count_of(ptx, ".version "), 1);
		ck_assert_int_eq(count_of(ptx, ".target "), 1);
		ck_assert_int_eq(count_of(ptx, ".address_size "), 1);
		/* every entry once, with its own name */
		for (int v = 0; v < nv; v++) {
			char e[160];
			snprintf(e, sizeof e, ".entry %.111s(", entries[v]);
			ck_assert_msg(count_of(ptx, e) == 1, "%s: %d times", e, count_of(ptx, e));
		}
		ck_assert_int_eq(count_of(ptx, ".entry "), nv);
		/* module-scope symbols: each defined once per variant, with its suffix */
		ck_assert_int_eq(count_of(ptx, "__cudart_i2opi_d["), 0);
		ck_assert_int_eq(count_of(ptx, "__cudart_i2opi_f["), 0);
		for (int v = 0; v < nv; v++) {
			char sym[96];
			snprintf(sym, sizeof sym, ".global .align 8 .b8 __cudart_i2opi_d_v%d[", v);
			ck_assert_msg(count_of(ptx, sym) == 1, "%s: %d times", sym, count_of(ptx, sym));
			snprintf(sym, sizeof sym, ".global .align 4 .b8 __cudart_i2opi_f_v%d[", v);
			ck_assert_msg(count_of(ptx, sym) == 1, "%s: %d times", sym, count_of(ptx, sym));
			/* the slow path stays a .func: declared ahead of the entries, then
			 * defined once */
			snprintf(sym, sizeof sym, "__internal_trig_reduction_slowpathd_v%d\n(", v);
			ck_assert_msg(count_of(ptx, sym) == 1, "%s: %d times", sym, count_of(ptx, sym));
			snprintf(sym, sizeof sym, "__internal_trig_reduction_slowpathd_v%d(", v);
			ck_assert_msg(count_of(ptx, sym) == 1, "%s: %d times", sym, count_of(ptx, sym));
		}
		/* the same bytes serially (compile_jobs 1) */
		char *ptx1 = compile_trig(sms[t], "1", &nv1, entries1);
		ck_assert_int_eq(nv1, nv);
		if (strcmp(ptx1, ptx) != 0) {
			size_t i = 0;
			while (ptx1[i] == ptx[i])
				i++;
			ck_abort_msg("serial and parallel PTX differ at byte %zu: ...%.60s... vs ...%.60s...", i,
			             ptx + (i > 20 ? i - 20 : 0), ptx1 + (i > 20 ? i - 20 : 0));
		}
		free(ptx1);
		if (have_ptxas)
			ck_assert_msg(ptxas_ok(ptx, sms[t]), "ptxas -arch=%s rejected the joined PTX", sms[t]);
		free(ptx);
	}
	/* a 4-variant region (persistent softmax): its PTX passes ptxas */
	static const char sm_src[] = "graph @sm(%x: f32[N,4096]) {\n"
	                             "  %y = aten._softmax(%x) {dim=1, half_to_float=false}\n"
	                             "  return %y\n"
	                             "}\n";
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, sm_src, strlen(sm_src), "sm.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "sm");
	fj_nvptx_kernel *k = NULL;
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, "sm_90", &k, NULL), FJ_OK);
	ck_assert_int_eq(k->nvariants, 4);
	ck_assert_int_eq(count_of(k->ptx, ".entry "), 4);
	for (int v = 0; v < k->nvariants; v++) {
		char e[160];
		snprintf(e, sizeof e, ".entry %.111s(", k->entry[v]);
		ck_assert_int_eq(count_of(k->ptx, e), 1);
	}
	if (have_ptxas)
		ck_assert(ptxas_ok(k->ptx, "sm_90"));
	/* an unsupported target: the error, no entry */
	ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, 0, "sm_100", &k, NULL), FJ_ERR_UNSUPPORTED);
	ck_assert_ptr_null(k);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "sm_100"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- launch plans: tensor cores, split reductions ---- */

static int64_t static_dim(void *ud, fj_dim d)
{
	(void)ud;
	ck_assert(fj_dim_is_static(d));
	return d;
}

/* The devices plans are made for: an H100 or H200 (the emulator reports
 * it), and an A100. */
static const fj_nvptx_limits h100 = {.sm_count = 132, .regs_per_sm = 65536};
static const fj_nvptx_limits a100 = {.sm_count = 108, .regs_per_sm = 65536};

/* Fuses src (one region) and plans it with static sizes for device lim. */
static void plan_on(fj_context *ctx, const char *src, const fj_nvptx_limits *lim, fj_nvptx_plan *plan)
{
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, src, strlen(src), "plan.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = m->graphs[0];
	ck_assert_uint_eq(g->nnodes, 1);
	ck_assert_int_eq(fj_nvptx_plan_region(NULL, lim, g, 0, static_dim, NULL, true, plan), FJ_OK);
	fj_module_destroy(m);
}

static void plan_of(fj_context *ctx, const char *src, fj_nvptx_plan *plan) { plan_on(ctx, src, &h100, plan); }

START_TEST(test_plans)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "nvptx_variants", "");
	fj_nvptx_plan p;
	/* the bias gradient: 128 tiles of 32 columns, 8192 rows -> 8 chunks */
	plan_of(ctx, "graph @g(%x: f32[8192,4096]) {\n  %s = aten.sum(%x) {dims=[0]}\n  return %s\n}\n", &p);
	ck_assert_int_eq(p.n, 1);
	ck_assert_int_eq(p.launch[0].variant, 4);
	ck_assert_uint_eq(p.launch[0].grid, 128 * 8);
	ck_assert_uint_eq(p.launch[0].block, 256);
	ck_assert_uint_eq(p.workspace, 128 * 4 + 3 * 128 * 8 * 32 * 8);
	/* short columns: no split, no workspace */
	plan_of(ctx, "graph @g(%x: f32[64,4096]) {\n  %s = aten.sum(%x) {dims=[0]}\n  return %s\n}\n", &p);
	ck_assert_int_eq(p.launch[0].variant, 3);
	ck_assert_uint_eq(p.workspace, 0);
	/* many columns fill the GPU without splitting */
	plan_of(ctx, "graph @g(%x: f32[8192,65536]) {\n  %s = aten.sum(%x) {dims=[0]}\n  return %s\n}\n", &p);
	ck_assert_int_eq(p.launch[0].variant, 3);
	/* f16 matmul: tensor cores, 64x64 tiles of 4 warps */
	plan_of(ctx, "graph @g(%a: f16[500,256], %b: f16[256,130]) {\n  %c = aten.mm(%a, %b)\n  return %c\n}\n", &p);
	ck_assert_int_eq(p.launch[0].variant, 0);
	ck_assert_uint_eq(p.launch[0].block, 128);
	ck_assert_uint_eq(p.launch[0].grid, 8 * 3);
	/* forced SIMT ("bpr"): the second entry, 16x16 tiles */
	set_option(ctx, "nvptx_variants", "bpr");
	plan_of(ctx, "graph @g(%a: bf16[500,256], %b: bf16[256,130]) {\n  %c = aten.mm(%a, %b)\n  return %c\n}\n", &p);
	set_option(ctx, "nvptx_variants", "");
	ck_assert_int_eq(p.launch[0].variant, 1);
	ck_assert_uint_eq(p.launch[0].block, 256);
	/* f32: the SIMT kernel only */
	plan_of(ctx, "graph @g(%a: f32[500,256], %b: f32[256,130]) {\n  %c = aten.mm(%a, %b)\n  return %c\n}\n", &p);
	ck_assert_int_eq(p.launch[0].variant, 0);
	ck_assert_uint_eq(p.launch[0].block, 256);
	fj_context_destroy(ctx);
}
END_TEST

/* A split reduction chosen by the sizes (not forced), emulated twice on the
 * same binding: the partials, the last-block merge and the epilogue, and the
 * counters the last blocks re-zero for the next run. */
START_TEST(test_emulated_split)
{
	static const char src[] = "graph @main(%x: f32[2048,40]) {\n"
	                          "  %s = aten.sum(%x) {dims=[0]}\n"
	                          "  %r = aten.mul(%s, 0.5)\n"
	                          "  return %r\n"
	                          "}\n";
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "nvptx_variants", "");
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, src, strlen(src), "split.fj", &m), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "main");
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	fj_rt_nvprog *p = NULL;
	ck_assert_int_eq(fj_rt_nvptx_create_on(ctx, g, &dev, &p), FJ_OK);
	fj_rt_tensor x = {0}, out = {0};
	int64_t dims[2] = {2048, 40};
	ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &x, FJ_DT_F32, 2, dims), FJ_OK);
	float *xd = x.data;
	double want[40] = {0};
	for (int64_t i = 0; i < 2048 * 40; i++) {
		xd[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
		want[i % 40] += xd[i];
	}
	const fj_rt_tensor *in[1] = {&x};
	ck_assert_int_eq(fj_rt_nvptx_bind(p, in, NULL, NULL, 0), FJ_OK);
	for (int run = 0; run < 2; run++) {
		ck_assert_int_eq(fj_rt_nvptx_run(p, in, &out), FJ_OK);
		const float *od = out.data;
		for (int c = 0; c < 40; c++)
			ck_assert_msg(fabs(od[c] - 0.5 * want[c]) <= 1e-4 * (1 + fabs(want[c])), "run %d column %d: %g, want %g",
			              run, c, od[c], 0.5 * want[c]);
	}
	fj_rt_tensor_free(&x);
	fj_rt_tensor_free(&out);
	fj_rt_nvptx_destroy(p);
	fj_nvptx_emu_destroy(emu);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- every golden case on the GPU templates, emulated on the host ---- */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs one case; returns NULL when it passes, else a malloc'ed reason. */
static char *emu_case(fj_nvptx_emu *emu, fj_context *ctx, const char *dir)
{
	char path[2048], *why = NULL;
	snprintf(path, sizeof path, "%s/graph.fj", dir);
	fj_module *m = NULL;
	fj_rt_nvprog *p = NULL;
	fj_rt_tensor *in = NULL, *out = NULL;
	const fj_rt_tensor **inp = NULL;
	uint32_t np = 0, nr = 0;
	fj_status st = fj_parse_file(ctx, path, &m);
	if (st == FJ_OK)
		st = fj_verify_module(m);
	fj_graph *g = st == FJ_OK ? fj_module_find_graph(m, "main") : NULL;
	if (st == FJ_OK && !g)
		g = m->graphs[0];
	if (st == FJ_OK) {
		np = g->nparams;
		nr = g->nresults;
		in = calloc(np + 1, sizeof *in);
		inp = calloc(np + 1, sizeof *inp);
		out = calloc(nr + 1, sizeof *out);
		for (uint32_t i = 0; i < np && st == FJ_OK; i++) {
			snprintf(path, sizeof path, "%s/in_%s.npy", dir, g->values[g->params[i]].name);
			st = fj_npy_read(ctx, path, &in[i]);
			inp[i] = &in[i];
		}
	}
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	if (st == FJ_OK)
		st = fj_rt_nvptx_create_on(ctx, g, &dev, &p);
	if (st == FJ_OK)
		st = fj_rt_nvptx_bind(p, inp, NULL, NULL, 0);
	if (st == FJ_OK)
		st = fj_rt_nvptx_run(p, inp, out);
	if (st != FJ_OK) {
		why = strdup(fj_context_error(ctx));
	} else {
		for (uint32_t k = 0; k < nr && !why; k++) {
			fj_rt_tensor ref = {0};
			snprintf(path, sizeof path, "%s/out_%u.npy", dir, k);
			if (fj_npy_read(ctx, path, &ref) != FJ_OK) {
				why = strdup(fj_context_error(ctx));
				break;
			}
			bool placed = true;
			double err = fj_rt_tensor_same_type(&out[k], &ref) ? fj_rt_rel_l2(&out[k], &ref, &placed) : 1e30;
			if (!placed || !(err <= fj_rt_tolerance(ref.dtype))) {
				char b[200];
				snprintf(b, sizeof b, "output %u: rel_err %.3g%s", k, err, placed ? "" : " (NaN/inf placement)");
				why = strdup(b);
			}
			fj_rt_tensor_free(&ref);
		}
	}
	fj_rt_nvptx_destroy(p);
	for (uint32_t i = 0; in && i < np; i++)
		fj_rt_tensor_free(&in[i]);
	for (uint32_t k = 0; out && k < nr; k++)
		fj_rt_tensor_free(&out[k]);
	free(in);
	free(inp);
	free(out);
	fj_module_destroy(m);
	fj_context_clear_diagnostics(ctx);
	return why;
}

/* Whether a case's graph has ops that make reduction or transpose regions
 * (and, with matmul, matmul regions: "bpr" forces their SIMT kernel). */
static bool has_variants(const char *dir, bool matmul)
{
	char path[1600];
	snprintf(path, sizeof path, "%s/graph.fj", dir);
	FILE *f = fopen(path, "rb");
	if (!f)
		return true;
	char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	static const char *const pats[] = {"sum", "mean", "amax", "amin", "prod", "var", "softmax", "norm",
	                                   "logsumexp", "argm", "nll_loss", "permute", "transpose", "aten.t("};
	static const char *const mm_pats[] = {"aten.mm(", "bmm", "matmul", "linear", "addmm"};
	for (size_t i = 0; i < FJ_ARRAY_LEN(pats); i++)
		if (strstr(buf, pats[i]))
			return true;
	for (size_t i = 0; matmul && i < FJ_ARRAY_LEN(mm_pats); i++)
		if (strstr(buf, mm_pats[i]))
			return true;
	return false;
}

START_TEST(test_emulated_goldens)
{
	char cases[1024];
	snprintf(cases, sizeof cases, "%s/golden/cases", fj_test_data_dir());
	DIR *d = opendir(cases);
	if (!d) {
		fj_test_skip("test_emulated_goldens", "%s absent", cases);
		return;
	}
	char *names[512];
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d)) && n < 512;)
		if (de->d_name[0] != '.')
			names[n++] = strdup(de->d_name);
	closedir(d);
	qsort(names, n, sizeof *names, cmp_name);
	const char *only = getenv("FJ_EMU_CASE");     /* one case */
	const char *only_mode = getenv("FJ_EMU_MODE"); /* one mode ("default", "split" ...) */
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	int pass = 0, fail = 0, skip = 0;
	size_t marked = 0, ran_default = 0; /* the default mode's skip markers and runs */
	bool mode_known = !only_mode, case_known = !only;
	double t0 = now_us();
	/* the sizes pick the variants (small goldens: mostly a thread per row,
	 * 16-byte vectors, tensor cores for f16/bf16 matmuls); then force the
	 * others: a block per row with scalar pointwise and SIMT matmuls, rows
	 * in registers, column tiles, reductions split across blocks */
	static const char *const modes[] = {NULL, "bpr", "reg", "col", "split"};
	/* FJ_TEST_QUICK (the sanitizer build of CI): the variants the sizes pick */
	size_t nmodes = getenv("FJ_TEST_QUICK") ? 1 : FJ_ARRAY_LEN(modes);
	for (size_t mi = 0; mi < nmodes; mi++)
	for (size_t i = 0; i < n; i++) {
		if (only_mode && strcmp(only_mode, modes[mi] ? modes[mi] : "default") != 0)
			continue;
		mode_known = true;
		case_known |= only && strcmp(only, names[i]) == 0;
		set_option(ctx, "nvptx_variants", modes[mi] ? modes[mi] : "");
		char dir[1400], mark[1500];
		snprintf(dir, sizeof dir, "%s/%s", cases, names[i]);
		struct stat sb;
		snprintf(mark, sizeof mark, "%s/skip", dir);
		bool skipped = stat(mark, &sb) == 0;
		snprintf(mark, sizeof mark, "%s/skip_nvptx", dir);
		skipped |= stat(mark, &sb) == 0;
		if (skipped || (only && strcmp(only, names[i]) != 0)) {
			skip++;
			marked += skipped && !modes[mi];
			continue;
		}
		if (modes[mi] && !has_variants(dir, strcmp(modes[mi], "bpr") == 0))
			continue; /* the forced variants only differ for these */
		/* each forced variant on a third of the cases (a different third
		 * each), all of them with FJ_TEST_FULL=1: CI's time is bounded */
		if (modes[mi] && !getenv("FJ_TEST_FULL") && i % 3 != mi % 3)
			continue;
		char *why = emu_case(emu, ctx, dir);
		if (why) {
			fprintf(stderr, "emulated nvptx (%s): FAIL %s: %s\n", modes[mi] ? modes[mi] : "default", names[i],
			        why);
			fail++;
		} else {
			pass++;
		}
		ran_default += !modes[mi];
		free(why);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	fprintf(stderr, "emulated nvptx goldens (%zu variant modes): %d passed, %d failed, %d skipped (%.1f s)\n",
	        nmodes, pass, fail, skip,
	        (now_us() - t0) / 1e6);
	fj_nvptx_emu_destroy(emu);
	fj_context_destroy(ctx);
	ck_assert_int_eq(fail, 0);
	/* a filter that selects nothing, or fewer cases than the folder holds: a
	 * failure, never a pass over what is left */
	ck_assert_msg(mode_known, "FJ_EMU_MODE=%s: no such mode (default, bpr, reg, col, split)", only_mode);
	ck_assert_msg(case_known, "FJ_EMU_CASE=%s: no such case in %s", only, cases);
	ck_assert_msg(pass > 0, "no emulated golden ran (%d skipped)", skip);
	if (!only && (!only_mode || strcmp(only_mode, "default") == 0))
		ck_assert_msg(ran_default + marked == n, "default mode: %zu cases ran and %zu are marked skip of %zu", ran_default,
		              marked, n);
}
END_TEST

/* ---- sizes no operand or result carries (the region's extra symbols) ---- */

/* Three regions that read symbolic sizes only through their dims array's
 * extra entries (codegen/region.h): var's VJP counting [N,16], mean's
 * counting [N,M] (two symbols, passed in name order), and a count of a
 * prims.full [N] whose N comes from --dim alone. */
static const char xsym_src[] =
	"graph @var.bw(%x: f32[N,16], %mean: f32[], %tangent_0: f32[]) {\n"
	"  %0 = prims.full() {shape=[N,16], value=1.0, dtype=f32}\n"
	"  %1 = prims.sum(%0) {dims=[0,1]}\n"
	"  %2 = prims.full() {shape=[], value=-1.0, dtype=f32}\n"
	"  %3 = prims.add(%1, %2)\n"
	"  %4 = prims.full() {shape=[], value=2.0, dtype=f32}\n"
	"  %5 = prims.mul(%tangent_0, %4)\n"
	"  %6 = prims.div(%5, %3)\n"
	"  %7 = prims.broadcast_in_dim(%mean) {shape=[N,16], broadcast_dims=[]}\n"
	"  %8 = prims.sub(%x, %7)\n"
	"  %9 = prims.broadcast_in_dim(%6) {shape=[N,16], broadcast_dims=[]}\n"
	"  %grad_x = prims.mul(%9, %8)\n"
	"  return %grad_x\n"
	"}\n"
	"graph @mean_all.bw(%x: f32[N,M], %tangent_0: f32[]) {\n"
	"  %0 = prims.full() {shape=[N,M], value=1.0, dtype=f32}\n"
	"  %1 = prims.sum(%0) {dims=[0,1]}\n"
	"  %2 = prims.div(%tangent_0, %1)\n"
	"  %3 = prims.broadcast_in_dim(%2) {shape=[N,M], broadcast_dims=[]}\n"
	"  %grad_x = prims.mul(%3, %x)\n"
	"  return %grad_x\n"
	"}\n"
	"graph @count(%x: f32[4]) {\n"
	"  %ones = prims.full() {shape=[N], value=1.0, dtype=f32}\n"
	"  %n = prims.sum(%ones) {dims=[0]}\n"
	"  %nb = prims.broadcast_in_dim(%n) {shape=[4], broadcast_dims=[]}\n"
	"  %y = prims.mul(%x, %nb)\n"
	"  return %y\n"
	"}\n";

/* The size the tests give symbol s: N = 7, M = 5, others 4. */
static int64_t xsym_value(const fj_module *m, uint32_t s)
{
	const char *name = fj_symbol_name(m, s);
	return strcmp(name, "N") == 0 ? 7 : strcmp(name, "M") == 0 ? 5 : 4;
}

/* Allocates and fills (deterministic values in [-1, 1.5)) an input for
 * every parameter of g, its sizes evaluated with xsym_value. */
static void xsym_inputs(fj_context *ctx, const fj_graph *g, fj_rt_tensor *in, const fj_rt_tensor **inp)
{
	for (uint32_t i = 0; i < g->nparams; i++) {
		const fj_type *t = &g->values[g->params[i]].type;
		int64_t dims[FJ_MAX_RANK];
		for (int d = 0; d < t->rank; d++) {
			dims[d] = t->dims[d];
			if (fj_dim_is_static(t->dims[d]))
				continue;
			const fj_symexpr *e = fj_dim_expr(g->module, t->dims[d]);
			dims[d] = e->coef;
			for (uint32_t k = 0; k < e->nsyms; k++)
				dims[d] *= xsym_value(g->module, e->syms[k]);
		}
		ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &in[i], t->dtype, t->rank, dims), FJ_OK);
		int64_t ne = 1;
		for (int d = 0; d < t->rank; d++)
			ne *= dims[d];
		for (int64_t k = 0; k < ne; k++)
			fj_rt_store_f64(in[i].data, t->dtype, k, (double)((k * 7 + i * 3) % 11) * 0.25 - 1.0);
		inp[i] = &in[i];
	}
}

/* Runs graph g on the emulated GPU and on the aten reference (inputs from
 * xsym_inputs, other sizes bound by dims); asserts that they agree. */
static void xsym_case(fj_nvptx_emu *emu, fj_context *ctx, const fj_graph *g, const fj_rt_dimarg *dims, size_t ndims)
{
	enum { MAXIN = 64, MAXOUT = 64 };
	fj_rt_tensor in[MAXIN] = {0}, out[MAXOUT] = {0}, ref[MAXOUT] = {0};
	const fj_rt_tensor *inp[MAXIN];
	ck_assert_uint_le(g->nparams, MAXIN);
	ck_assert_uint_le(g->nresults, MAXOUT);
	xsym_inputs(ctx, g, in, inp);
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	fj_rt_nvprog *p = NULL;
	fj_status st = fj_rt_nvptx_create_on(ctx, g, &dev, &p);
	if (st == FJ_OK)
		st = fj_rt_nvptx_bind(p, inp, NULL, dims, ndims);
	if (st == FJ_OK)
		st = fj_rt_nvptx_run(p, inp, out);
	ck_assert_msg(st == FJ_OK, "@%s on the emulated GPU: %s", g->name, fj_context_error(ctx));
	fj_rt_nvptx_destroy(p);
	fj_rt_program *rp = NULL;
	ck_assert_int_eq(fj_rt_program_create(ctx, (fj_graph *)g, FJ_RT_EXEC_ATEN, &rp), FJ_OK);
	ck_assert_int_eq(fj_rt_program_bind(rp, inp, NULL, dims, ndims), FJ_OK);
	ck_assert_int_eq(fj_rt_program_run(rp, inp, ref), FJ_OK);
	fj_rt_program_destroy(rp);
	for (uint32_t k = 0; k < g->nresults; k++) {
		bool placed = true;
		ck_assert(fj_rt_tensor_same_type(&out[k], &ref[k]));
		double err = fj_rt_rel_l2(&out[k], &ref[k], &placed);
		ck_assert_msg(placed && err <= fj_rt_tolerance(ref[k].dtype), "@%s output %u: rel_err %g", g->name, k, err);
		fj_rt_tensor_free(&out[k]);
		fj_rt_tensor_free(&ref[k]);
	}
	for (uint32_t i = 0; i < g->nparams; i++)
		fj_rt_tensor_free(&in[i]);
}

/* The backward of golden case `name` (the train pipeline up to partition). */
static fj_module *golden_bw(fj_context *ctx, const char *name, fj_graph **bw)
{
	char path[1200];
	snprintf(path, sizeof path, "%s/golden/cases/%s/graph.fj", fj_test_data_dir(), name);
	fj_module *m = NULL;
	ck_assert_msg(fj_parse_file(ctx, path, &m) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_int_eq(fj_run_pipeline(m, "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition",
	                                 NULL),
	                 FJ_OK);
	*bw = fj_module_find_graph(m, "main.bw");
	ck_assert_ptr_nonnull(*bw);
	return m;
}

START_TEST(test_emulated_extra_syms)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, xsym_src, strlen(xsym_src), "xsym.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	/* the fused first kernel of @mean_all.bw: M, then N (by name, not by id) */
	fj_module *fm = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, xsym_src, strlen(xsym_src), "xsym.fj", &fm), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(fm, "fuse,schedule", NULL), FJ_OK);
	fj_graph *fg = fj_module_find_graph(fm, "mean_all.bw");
	uint32_t xs[8], nx = 0;
	ck_assert_uint_le(fj_symbol_count(fm), 8);
	ck_assert_int_eq(fj_rg_extra_syms(ctx, fg, 0, xs, &nx), FJ_OK);
	ck_assert_uint_eq(nx, 2);
	ck_assert_str_eq(fj_symbol_name(fm, xs[0]), "M");
	ck_assert_str_eq(fj_symbol_name(fm, xs[1]), "N");
	ck_assert_int_eq(fj_rg_extra_syms(ctx, fg, 1, xs, &nx), FJ_OK);
	ck_assert_uint_eq(nx, 0);
	fj_module_destroy(fm);
	/* the backward graphs of the reduce goldens (var over N among them) */
	static const char *const cases[] = {"reduce_f32", "reduce_f64", "reduce_f16", "reduce_bf16"};
	fj_module *gm[FJ_ARRAY_LEN(cases)];
	fj_graph *gbw[FJ_ARRAY_LEN(cases)];
	for (size_t c = 0; c < FJ_ARRAY_LEN(cases); c++)
		gm[c] = golden_bw(ctx, cases[c], &gbw[c]);

	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	/* every variant mode; each golden backward in the default mode and in
	 * one forced mode (each mode gets one): CI's time is bounded */
	static const char *const modes[] = {NULL, "bpr", "reg", "col", "split"};
	size_t nmodes = getenv("FJ_TEST_QUICK") ? 1 : FJ_ARRAY_LEN(modes);
	for (size_t mi = 0; mi < nmodes; mi++) {
		set_option(ctx, "nvptx_variants", modes[mi] ? modes[mi] : "");
		xsym_case(emu, ctx, fj_module_find_graph(m, "var.bw"), NULL, 0);
		xsym_case(emu, ctx, fj_module_find_graph(m, "mean_all.bw"), NULL, 0);
		const fj_rt_dimarg n5 = {"N", 5};
		xsym_case(emu, ctx, fj_module_find_graph(m, "count"), &n5, 1);
		for (size_t c = 0; c < FJ_ARRAY_LEN(cases); c++)
			if (mi == 0 || mi == 1 + c % (FJ_ARRAY_LEN(modes) - 1))
				xsym_case(emu, ctx, gbw[c], NULL, 0);
	}
	fj_nvptx_emu_destroy(emu);
	for (size_t c = 0; c < FJ_ARRAY_LEN(cases); c++)
		fj_module_destroy(gm[c]);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- persistent_inner_outer: rows and column sums in one launch ---- */

/* Training graphs whose backward fuses into a persistent_inner_outer region:
 * layer_norm (grad_weight, grad_bias) with odd sizes (37 rows: not a
 * multiple of the emulator's 7 blocks; its two-level merge groups them as
 * 3, 3 and 1), rms_norm over 4096 (the _reg8 limit; 5 rows: 5 blocks in
 * groups of 3 and 2) and over 5000 (the workspace entry; 3 rows: groups
 * of 2 and 1), the f16 residual + bias + layer_norm of rank 3 (21 rows:
 * 7 blocks; grad_bias's operand depends on the row sums), and empty or
 * single rows (one block, one group). */
static const char *const io_srcs[] = {
	"graph @main(%x: f32[37,300], %w: f32[300], %b: f32[300]) {\n"
	"  %y = aten.layer_norm(%x, %w, %b) {normalized_shape=[300], eps=1e-5}\n"
	"  return %y\n"
	"}\n",
	"graph @main(%x: f32[5,4096], %w: f32[4096]) {\n"
	"  %y = aten.rms_norm(%x, %w) {normalized_shape=[4096], eps=1e-6}\n"
	"  return %y\n"
	"}\n",
	"graph @main(%x: f32[3,5000], %w: f32[5000]) {\n"
	"  %y = aten.rms_norm(%x, %w) {normalized_shape=[5000], eps=1e-6}\n"
	"  return %y\n"
	"}\n",
	"graph @main(%x: f16[3,7,520], %bias: f16[520], %res: f16[3,7,520], %w: f16[520], %b: f16[520]) {\n"
	"  %h = aten.add(%x, %bias)\n"
	"  %h2 = aten.add(%h, %res)\n"
	"  %y = aten.layer_norm(%h2, %w, %b) {normalized_shape=[520], eps=1e-5}\n"
	"  return %y\n"
	"}\n",
	"graph @main(%x: f32[1,8], %w: f32[8], %b: f32[8]) {\n"
	"  %y = aten.layer_norm(%x, %w, %b) {normalized_shape=[8], eps=1e-5}\n"
	"  return %y\n"
	"}\n",
	"graph @main(%x: f16[0,16], %bias: f16[16], %res: f16[0,16], %w: f16[16], %b: f16[16]) {\n"
	"  %h = aten.add(%x, %bias)\n"
	"  %h2 = aten.add(%h, %res)\n"
	"  %y = aten.layer_norm(%h2, %w, %b) {normalized_shape=[16], eps=1e-5}\n"
	"  return %y\n"
	"}\n",
};

/* src through the train pipeline up to partition (@main.fw, @main.bw). */
static fj_module *io_module(fj_context *ctx, const char *src)
{
	fj_module *m = NULL;
	ck_assert_msg(fj_parse_module(ctx, src, strlen(src), "io.fj", &m) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_int_eq(fj_run_pipeline(m, "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition",
	                                 NULL),
	                 FJ_OK);
	ck_assert_ptr_nonnull(fj_module_find_graph(m, "main.fw"));
	ck_assert_ptr_nonnull(fj_module_find_graph(m, "main.bw"));
	return m;
}

/* The backward of src fused as the runtime does (the default pipeline):
 * asserts that it holds a persistent_inner_outer region with outer
 * reductions, and plans it with its static sizes for device lim. */
static void io_plan_on(fj_context *ctx, const char *src, const fj_nvptx_limits *lim, fj_nvptx_plan *plan)
{
	fj_module *m = io_module(ctx, src);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	fj_graph *g = fj_module_find_graph(m, "main.bw");
	ck_assert_ptr_nonnull(g);
	int found = 0;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		if (g->nodes[i].op != FJ_OP_FUSION_KERNEL)
			continue;
		fj_rg_analysis a;
		ck_assert_int_eq(fj_rg_analyze(ctx, g, i, &a), FJ_OK);
		bool io = a.sched == FJ_RG_PERSISTENT_INNER_OUTER && a.noreds > 0;
		fj_rg_analysis_free(&a);
		if (!io)
			continue;
		found++;
		ck_assert_int_eq(fj_nvptx_plan_region(NULL, lim, g, i, static_dim, NULL, true, plan), FJ_OK);
	}
	ck_assert_int_eq(found, 1);
	fj_module_destroy(m);
}

static void io_plan(fj_context *ctx, const char *src, fj_nvptx_plan *plan) { io_plan_on(ctx, src, &h100, plan); }

/* Runs src's forward on the reference (deterministic inputs), then its
 * backward on the emulated GPU (twice on one binding: the last block must
 * re-zero the counter) and on the reference, from the forward's saved values
 * and deterministic tangents; asserts that they agree. */
static void io_case(fj_nvptx_emu *emu, fj_context *ctx, const char *src, const char *mode)
{
	enum { MAXIN = 32, MAXOUT = 32 };
	fj_module *m = io_module(ctx, src);
	fj_graph *gf = fj_module_find_graph(m, "main.fw"), *gb = fj_module_find_graph(m, "main.bw");
	ck_assert_uint_le(gf->nparams, MAXIN);
	ck_assert_uint_le(gb->nparams, MAXIN);
	ck_assert_uint_le(gf->nresults, MAXOUT);
	ck_assert_uint_le(gb->nresults, MAXOUT);
	fj_rt_tensor fin[MAXIN] = {0}, fout[MAXOUT] = {0}, tan[MAXIN] = {0}, out[MAXOUT] = {0}, ref[MAXOUT] = {0};
	const fj_rt_tensor *finp[MAXIN], *tanp[MAXIN], *bin[MAXIN];
	xsym_inputs(ctx, gf, fin, finp);
	fj_rt_program *rp = NULL;
	ck_assert_int_eq(fj_rt_program_create(ctx, gf, FJ_RT_EXEC_ATEN, &rp), FJ_OK);
	ck_assert_int_eq(fj_rt_program_bind(rp, finp, NULL, NULL, 0), FJ_OK);
	ck_assert_int_eq(fj_rt_program_run(rp, finp, fout), FJ_OK);
	fj_rt_program_destroy(rp);
	uint32_t nfwd = gf->num_fwd_outputs >= 0 ? (uint32_t)gf->num_fwd_outputs : 0;
	uint32_t nsaved = gf->nresults - nfwd;
	ck_assert_uint_le(nsaved, gb->nparams);
	xsym_inputs(ctx, gb, tan, tanp); /* the tangents (and unused fillers for the saved values) */
	for (uint32_t i = 0; i < gb->nparams; i++)
		bin[i] = i < nsaved ? &fout[nfwd + i] : tanp[i];
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	fj_rt_nvprog *p = NULL;
	fj_status st = fj_rt_nvptx_create_on(ctx, gb, &dev, &p);
	if (st == FJ_OK)
		st = fj_rt_nvptx_bind(p, bin, NULL, NULL, 0);
	ck_assert_msg(st == FJ_OK, "%s: %s", mode ? mode : "default", fj_context_error(ctx));
	ck_assert_int_eq(fj_rt_program_create(ctx, gb, FJ_RT_EXEC_ATEN, &rp), FJ_OK);
	ck_assert_int_eq(fj_rt_program_bind(rp, bin, NULL, NULL, 0), FJ_OK);
	for (int run = 0; run < 2; run++) {
		if (run == 1) /* other tangents: stale column results would show */
			for (uint32_t i = nsaved; i < gb->nparams; i++)
				for (int64_t e = 0; e < fj_rt_tensor_numel(&tan[i]); e++)
					fj_rt_store_f64(tan[i].data, tan[i].dtype, e,
					                0.5 - fj_rt_load_f64(tan[i].data, tan[i].dtype, e) * 0.75);
		ck_assert_int_eq(fj_rt_program_run(rp, bin, ref), FJ_OK);
		st = fj_rt_nvptx_run(p, bin, out);
		ck_assert_msg(st == FJ_OK, "%s run %d: %s", mode ? mode : "default", run, fj_context_error(ctx));
		for (uint32_t k = 0; k < gb->nresults; k++) {
			bool placed = true;
			ck_assert(fj_rt_tensor_same_type(&out[k], &ref[k]));
			double err = fj_rt_rel_l2(&out[k], &ref[k], &placed);
			ck_assert_msg(placed && err <= fj_rt_tolerance(ref[k].dtype), "%s run %d output %u: rel_err %g\n%s",
			              mode ? mode : "default", run, k, err, src);
			fj_rt_tensor_free(&out[k]);
			fj_rt_tensor_free(&ref[k]);
		}
	}
	fj_rt_program_destroy(rp);
	fj_rt_nvptx_destroy(p);
	for (uint32_t k = 0; k < gf->nresults; k++)
		fj_rt_tensor_free(&fout[k]);
	for (uint32_t i = 0; i < gf->nparams; i++)
		fj_rt_tensor_free(&fin[i]);
	for (uint32_t i = 0; i < gb->nparams; i++)
		fj_rt_tensor_free(&tan[i]);
	fj_module_destroy(m);
}

/* The plans: _reg8 up to 4096 positions, the workspace entry beyond (and
 * forced by "bpr"), one wave of blocks, never more than the rows, one block
 * for no rows; the workspace: the counters (the global one, one per group
 * of ceil(sqrt(blocks)) blocks) padded to 16 bytes, a slice per block, a
 * partial per group. */
START_TEST(test_plans_inner_outer)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "nvptx_variants", "");
	fj_nvptx_plan p;
	static const char ln_big[] = "graph @main(%x: f32[8192,4096], %w: f32[4096], %b: f32[4096]) {\n"
	                             "  %y = aten.layer_norm(%x, %w, %b) {normalized_shape=[4096], eps=1e-5}\n"
	                             "  return %y\n"
	                             "}\n";
	io_plan(ctx, ln_big, &p);
	ck_assert_int_eq(p.n, 1);
	ck_assert_int_eq(p.launch[0].variant, 1);
	ck_assert_uint_eq(p.launch[0].block, 512);
	ck_assert_uint_eq(p.launch[0].grid, 132);
	/* groups of 12: 11, 12 counters in 48 bytes */
	ck_assert_uint_eq(p.workspace, 48 + (132 + 11) * 2 * 4096 * 8);
	/* more than 4096 positions: the workspace entry, in blocks of at most
	 * 512 threads (2 resident per SM: tests/nvptx/budgets.tsv) */
	io_plan(ctx, io_srcs[2], &p);
	ck_assert_int_eq(p.n, 1);
	ck_assert_int_eq(p.launch[0].variant, 0);
	ck_assert_uint_eq(p.launch[0].block, 512);
	ck_assert_uint_eq(p.launch[0].grid, 3);
	ck_assert_uint_eq(p.workspace, 16 + (3 + 2) * 1 * 5000 * 8); /* groups of 2: 2 */
	/* no rows: one block still writes the columns */
	io_plan(ctx, io_srcs[5], &p);
	ck_assert_int_eq(p.n, 1);
	ck_assert_uint_eq(p.launch[0].grid, 1);
	ck_assert_uint_eq(p.workspace, 16 + (1 + 1) * 3 * 16 * 8);
	set_option(ctx, "nvptx_variants", "bpr");
	io_plan(ctx, ln_big, &p);
	ck_assert_int_eq(p.launch[0].variant, 0);
	ck_assert_uint_eq(p.launch[0].grid, 264);
	/* groups of 17: 16 (the last of 9 blocks), 17 counters in 80 bytes */
	ck_assert_uint_eq(p.workspace, 80 + (264 + 16) * 2 * 4096 * 8);
	fj_context_destroy(ctx);
}
END_TEST

/* Plans follow the device: the persistent grid fills its SMs (an A100's 108)
 * by its register file, and a split reduction's chunks fill them too; a
 * plan without a device's limits is an error. */
START_TEST(test_plans_device)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	set_option(ctx, "nvptx_variants", "");
	fj_nvptx_plan p;
	static const char ln_big[] = "graph @main(%x: f32[8192,4096], %w: f32[4096], %b: f32[4096]) {\n"
	                             "  %y = aten.layer_norm(%x, %w, %b) {normalized_shape=[4096], eps=1e-5}\n"
	                             "  return %y\n"
	                             "}\n";
	io_plan_on(ctx, ln_big, &a100, &p);
	ck_assert_int_eq(p.launch[0].variant, 1);
	ck_assert_uint_eq(p.launch[0].block, 512);
	ck_assert_uint_eq(p.launch[0].grid, 108);
	/* groups of 11: 10, 11 counters in 48 bytes */
	ck_assert_uint_eq(p.workspace, 48 + (108 + 10) * 2 * 4096 * 8);
	/* half the register file: _reg8 still one block per SM; the main entry
	 * (about 64 registers a thread) one block of 512 instead of two */
	const fj_nvptx_limits half = {.sm_count = 132, .regs_per_sm = 32768};
	io_plan_on(ctx, ln_big, &half, &p);
	ck_assert_uint_eq(p.launch[0].grid, 132);
	set_option(ctx, "nvptx_variants", "bpr");
	io_plan_on(ctx, ln_big, &a100, &p);
	ck_assert_int_eq(p.launch[0].variant, 0);
	ck_assert_uint_eq(p.launch[0].grid, 216);
	io_plan_on(ctx, ln_big, &half, &p);
	ck_assert_uint_eq(p.launch[0].grid, 132);
	set_option(ctx, "nvptx_variants", "");
	/* the bias gradient on an A100: 108 x 8 blocks, 6 chunks of 128 tiles */
	static const char bias[] = "graph @g(%x: f32[8192,4096]) {\n  %s = aten.sum(%x) {dims=[0]}\n  return %s\n}\n";
	plan_on(ctx, bias, &a100, &p);
	ck_assert_int_eq(p.launch[0].variant, 4);
	ck_assert_uint_eq(p.launch[0].grid, 128 * 6);
	ck_assert_uint_eq(p.workspace, 128 * 4 + 3 * 128 * 6 * 32 * 8);
	/* no device: a clear error */
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, bias, strlen(bias), "plan.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, fj_named_pipeline("default"), NULL), FJ_OK);
	const fj_nvptx_limits none = {0, 0};
	ck_assert_int_eq(fj_nvptx_plan_region(NULL, &none, m->graphs[0], 0, static_dim, NULL, true, &p), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "SM count and registers per SM"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* The variant table: every family has at most FJ_NVPTX_MAX_VARIANTS rows, a
 * main entry (suffix "") and a plan choice; the emulator's device reports
 * an H100's SMs and registers. */
START_TEST(test_variant_table)
{
	const fj_gpu_family *const fams[] = {&fj_gpu_pointwise_family, &fj_gpu_rows_family, &fj_gpu_io_family,
	                                     &fj_gpu_matmul_family, &fj_gpu_index_family};
	for (size_t i = 0; i < FJ_ARRAY_LEN(fams); i++) {
		ck_assert_int_le(fams[i]->nvariants, FJ_NVPTX_MAX_VARIANTS);
		ck_assert_str_eq(fams[i]->variants[0].suffix, "");
		ck_assert_ptr_nonnull(fams[i]->choose);
		for (int v = 0; v < fams[i]->nvariants; v++)
			ck_assert_ptr_nonnull(fams[i]->variants[v].emit);
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	ck_assert_uint_eq(dev.limits.sm_count, 132);
	ck_assert_uint_eq(dev.limits.regs_per_sm, 65536);
	fj_nvptx_emu_destroy(emu);
	fj_context_destroy(ctx);
}
END_TEST

/* Every case on the emulator with the nvptx_variants setting mode (NULL: the
 * variant the sizes pick). */
static void io_cases(const char *mode)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	set_option(ctx, "nvptx_variants", mode ? mode : "");
	for (size_t c = 0; c < FJ_ARRAY_LEN(io_srcs); c++)
		io_case(emu, ctx, io_srcs[c], mode);
	fj_nvptx_emu_destroy(emu);
	fj_context_destroy(ctx);
}

/* Every case with the variant the sizes pick, and with _reg8 forced:
 * several groups of blocks with a partial last one (7, 5 and 3 blocks), a
 * single group (one block); io_case runs each twice (counters re-zeroed). */
START_TEST(test_emulated_inner_outer)
{
	io_cases(NULL);
	io_cases("reg");
}
END_TEST

/* The workspace entry forced ("bpr") on every case: the column partials in
 * the blocks' slices of the workspace (the same groups as above). */
START_TEST(test_emulated_inner_outer_ws)
{
	io_cases("bpr");
}
END_TEST

Suite *suite_nvptx(void)
{
	Suite *s = suite_create("nvptx");
	TCase *tc = tcase_create("nvptx");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_missing_driver);
	tcase_add_test(tc, test_stub_library);
	tcase_add_test(tc, test_error_names);
	tcase_add_test(tc, test_targets);
	tcase_add_test(tc, test_libdevice_lazy);
	tcase_add_test(tc, test_fallback_math);
	tcase_add_test(tc, test_no_libdevice);
	tcase_add_test(tc, test_compile_times);
	tcase_add_test(tc, test_context_new_like);
	tcase_add_test(tc, test_parallel_variants);
	tcase_add_test(tc, test_plans);
	tcase_add_test(tc, test_plans_device);
	tcase_add_test(tc, test_variant_table);
	tcase_add_test(tc, test_plans_inner_outer);
	suite_add_tcase(s, tc);
	TCase *te = tcase_create("emulated");
	tcase_set_timeout(te, 600);
	tcase_add_test(te, test_emulated_split);
	tcase_add_test(te, test_emulated_goldens);
	tcase_add_test(te, test_emulated_extra_syms);
	tcase_add_test(te, test_emulated_inner_outer);
	tcase_add_test(te, test_emulated_inner_outer_ws);
	suite_add_tcase(s, te);
	return s;
}
