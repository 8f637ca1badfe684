/* test_nvptx.c -- backend_nvptx/ without a GPU: the driver loader's messages
 * (no driver; the toolkit's stub library, loaded by path), FJ_CU error
 * formatting and the error-name table, the target whitelist, libdevice's
 * lazy link and the fallback math, and region compile times (cold and a
 * cache hit, printed on stderr). */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include "backend_nvptx/cuda.h"
#include "backend_nvptx/emu.h"
#include "runtime/npy.h"
#include "runtime/program_nvptx.h"
#include "backend_nvptx/nvptx.h"
#include "backend_nvptx/region_gpu.h"
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
		fprintf(stderr, "test_stub_library: %s absent, skipped\n", STUB);
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
	fj_nvptx_mark_kernel(&c, f, 128);
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
	if (!fj_nvptx_libdevice_path()) {
		fprintf(stderr, "test_libdevice_lazy: no libdevice, skipped\n");
		return;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
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
	fprintf(stderr, "libdevice link+O3+PTX: first %.2f ms, then %.2f ms\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3);
	free(ptx);
	free(ptx2);
	free(ir);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_fallback_math)
{
	setenv("FUSEJIT_LIBDEVICE", "none", 1);
	fj_context *ctx = fj_context_create(NULL, NULL);
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
	unsetenv("FUSEJIT_LIBDEVICE");
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
	ck_assert_msg(best < 2000, "a cache hit took %.1f us", best);
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
	fj_rt_gpu_dev dev = fj_nvptx_emu_device(emu);
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

/* Whether a case's graph has ops that make reduction or transpose regions. */
static bool has_reduction_or_layout(const char *dir)
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
	for (size_t i = 0; i < FJ_ARRAY_LEN(pats); i++)
		if (strstr(buf, pats[i]))
			return true;
	return false;
}

START_TEST(test_emulated_goldens)
{
	char cases[1024];
	snprintf(cases, sizeof cases, "%s/golden/cases", fj_test_data_dir());
	DIR *d = opendir(cases);
	if (!d) {
		fprintf(stderr, "test_emulated_goldens: %s absent, skipped\n", cases);
		return;
	}
	char *names[512];
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d)) && n < 512;)
		if (de->d_name[0] != '.')
			names[n++] = strdup(de->d_name);
	closedir(d);
	qsort(names, n, sizeof *names, cmp_name);
	const char *only = getenv("FJ_EMU_CASE");
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	int pass = 0, fail = 0, skip = 0;
	double t0 = now_us();
	/* the sizes pick the variants (small goldens: mostly a thread per row,
	 * 16-byte vectors); then force the others: a block per row with scalar
	 * pointwise, rows in registers, column tiles */
	static const char *const modes[] = {NULL, "bpr", "reg", "col"};
	/* FJ_TEST_QUICK (the sanitizer build of CI): the variants the sizes pick */
	size_t nmodes = getenv("FJ_TEST_QUICK") ? 1 : FJ_ARRAY_LEN(modes);
	for (size_t mi = 0; mi < nmodes; mi++)
	for (size_t i = 0; i < n; i++) {
		if (modes[mi])
			setenv("FUSEJIT_NVPTX_VARIANTS", modes[mi], 1);
		else
			unsetenv("FUSEJIT_NVPTX_VARIANTS");
		char dir[1400], mark[1500];
		snprintf(dir, sizeof dir, "%s/%s", cases, names[i]);
		struct stat sb;
		snprintf(mark, sizeof mark, "%s/skip", dir);
		bool skipped = stat(mark, &sb) == 0;
		snprintf(mark, sizeof mark, "%s/skip_nvptx", dir);
		skipped |= stat(mark, &sb) == 0;
		if (skipped || (only && strcmp(only, names[i]) != 0)) {
			skip++;
			continue;
		}
		if (modes[mi] && !has_reduction_or_layout(dir))
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
		free(why);
	}
	unsetenv("FUSEJIT_NVPTX_VARIANTS");
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	fprintf(stderr, "emulated nvptx goldens (4 variant modes): %d passed, %d failed, %d skipped (%.1f s)\n", pass,
	        fail, skip,
	        (now_us() - t0) / 1e6);
	fj_nvptx_emu_destroy(emu);
	fj_context_destroy(ctx);
	ck_assert_int_eq(fail, 0);
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
	tcase_add_test(tc, test_compile_times);
	suite_add_tcase(s, tc);
	TCase *te = tcase_create("emulated");
	tcase_set_timeout(te, 600);
	tcase_add_test(te, test_emulated_goldens);
	suite_add_tcase(s, te);
	return s;
}
