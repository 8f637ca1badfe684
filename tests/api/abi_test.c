/* abi_test.c -- fj-api-abi: the ABI policy of fusejit.h and the entries
 * fusejit-run needs, through the public header alone.
 *
 *   1. older, smaller structs are accepted: a zero-initialised fj_tensor
 *      (struct_size 0, as callers wrote before fj_tensor_init), compile and
 *      run options whose struct_size stops before their last fields (those
 *      take their defaults), and stats and bench results filled only as far
 *      as the caller's struct_size goes;
 *   2. fj_program_sizes: input and output sizes from some inputs' shapes and
 *      --dim values, index bounds from the graph as written, its errors;
 *   3. run options: dims, and origins named in shape errors;
 *   4. fj_module_value_info, fj_program_stats_get, fj_program_bench;
 *   5. fj_reference_f64 and fj_check_error on a graph with f32 math;
 *   6. a backward that needs a size only the forward's inputs fixed.
 * Public API only. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusejit/fusejit.h>

#include "expect.h"

static const char text[] =
	"graph @main(%x: f32[N,4], %ids: i64[M], %t: f32[K]) {\n"
	"  %e = aten.embedding(%x, %ids)\n"
	"  %s = aten.sum(%e) {dims=[1]}\n"
	"  %f = prims.full() {shape=[K], value=1.5, dtype=f32}\n"
	"  %u = aten.add(%t, %f)\n"
	"  return %s, %u, 2.0\n"
	"}\n"
	"graph @other(%y: f32[P]) {\n"
	"  return %y\n"
	"}\n";

static void test_old_structs(fj_context *ctx, fj_module *m)
{
	/* compile options of an older caller: no threads field */
	fj_compile_options co;
	fj_compile_options_init(&co);
	co.struct_size = (uint32_t)offsetof(fj_compile_options, threads);
	co.threads = -5; /* beyond struct_size: not read (it would be refused) */
	co.executor = FJ_EXECUTOR_HOST;
	fj_program *p = NULL;
	EXPECT_OK(ctx, fj_compile(ctx, m, &co, &p));
	if (!p)
		return;
	/* zero-initialised tensors (struct_size 0) in and out; run options
	 * without origins */
	float x[3 * 4];
	int64_t ids[2] = {2, 0};
	float t[1] = {0.5f};
	for (int i = 0; i < 12; i++)
		x[i] = (float)i;
	fj_tensor in[3], out[3];
	memset(in, 0, sizeof in);
	memset(out, 0, sizeof out);
	in[0] = (fj_tensor){.data = x, .dtype = FJ_TYPE_F32, .rank = 2, .sizes = {3, 4}};
	in[1] = (fj_tensor){.data = ids, .dtype = FJ_TYPE_I64, .rank = 1, .sizes = {2}};
	in[2] = (fj_tensor){.data = t, .dtype = FJ_TYPE_F32, .rank = 1, .sizes = {1}};
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.struct_size = (uint32_t)offsetof(fj_run_options, origins);
	ro.origins = (const char *const *)(uintptr_t)1; /* beyond struct_size: not read */
	EXPECT_OK(ctx, fj_program_run_with(p, &ro, in, 3, out, 3));
	EXPECT(out[0].data && out[0].rank == 1 && out[0].sizes[0] == 2 && out[0].struct_size == 0);
	if (out[0].data)
		EXPECT(((float *)out[0].data)[0] == 8 + 9 + 10 + 11 && ((float *)out[0].data)[1] == 0 + 1 + 2 + 3);
	EXPECT(out[1].data && fabs(((float *)out[1].data)[0] - 2.0) < 1e-6);
	EXPECT(out[2].data && fj_tensor_get_f64(&out[2], 0) == 2.0);
	for (int k = 0; k < 3; k++)
		fj_tensor_release(&out[k]);
	/* a 0.1 caller's run options end before stream: a stream beyond them is not
	 * read (a host program refuses one that is) */
	fj_run_options_init(&ro);
	ro.struct_size = (uint32_t)offsetof(fj_run_options, stream);
	ro.stream = &ro;
	EXPECT_OK(ctx, fj_program_run_with(p, &ro, in, 3, out, 3));
	for (int k = 0; k < 3; k++)
		fj_tensor_release(&out[k]);
	fj_run_options_init(&ro);
	ro.stream = &ro;
	EXPECT(fj_program_run_with(p, &ro, in, 3, out, 3) == FJ_ERR_UNSUPPORTED);
	/* stats of an older caller: only the fields its struct_size covers */
	fj_program_stats s;
	fj_program_stats_init(&s);
	s.struct_size = (uint32_t)offsetof(fj_program_stats, threads);
	s.threads = -7;
	EXPECT_OK(ctx, fj_program_stats_get(p, &s));
	EXPECT(s.threads == -7 && s.struct_size == offsetof(fj_program_stats, threads));
	fj_program_stats_init(&s);
	EXPECT_OK(ctx, fj_program_stats_get(p, &s));
	EXPECT(s.threads >= 1 && s.device == NULL);
	/* a bench result of an older caller */
	fj_bench_options bo;
	fj_bench_options_init(&bo);
	bo.reps = 5;
	fj_bench_result br;
	fj_bench_result_init(&br);
	br.struct_size = (uint32_t)offsetof(fj_bench_result, reps);
	br.reps = -3;
	EXPECT_OK(ctx, fj_program_bench(p, &bo, in, 3, &br));
	EXPECT(br.median_ms > 0 && br.copy_ms > 0 && br.reps == -3);
	fj_bench_result_init(&br);
	EXPECT_OK(ctx, fj_program_bench(p, &bo, in, 3, &br));
	EXPECT(br.reps == 5 && br.bytes == sizeof x + sizeof ids + sizeof t + 2 * 4 + 4 + 8);
	fj_program_destroy(p);
	/* an uninitialised options struct is refused */
	memset(&co, 0, sizeof co);
	EXPECT(fj_compile(ctx, m, &co, &p) == FJ_ERR_INVALID);
}

static void test_sizes(fj_context *ctx, fj_module *m)
{
	fj_program *p = NULL;
	EXPECT_OK(ctx, fj_compile(ctx, m, NULL, &p));
	if (!p)
		return;
	fj_tensor x;
	fj_tensor_init(&x);
	x.dtype = FJ_TYPE_F32; /* shape only: data may be NULL */
	x.rank = 2;
	x.sizes[0] = 5;
	x.sizes[1] = 4;
	const fj_tensor *given[3] = {&x, NULL, NULL};
	fj_run_options ro;
	fj_run_options_init(&ro);
	const char *names[] = {"M", "K"};
	int64_t values[] = {3, 2};
	ro.dim_names = names;
	ro.dim_values = values;
	ro.ndims = 2;
	fj_value_info in[3], out[3];
	int64_t bounds[3];
	EXPECT_OK(ctx, fj_program_sizes(p, &ro, given, 3, in, out, bounds));
	EXPECT(in[1].rank == 1 && in[1].sizes[0] == 3 && in[1].bytes == 24 && strcmp(in[1].name, "ids") == 0);
	EXPECT(in[2].sizes[0] == 2);
	EXPECT(out[0].rank == 1 && out[0].sizes[0] == 3 && out[1].sizes[0] == 2 && out[2].rank == 0);
	EXPECT(bounds[0] == -1 && bounds[1] == 5 && bounds[2] == -1); /* ids index x's 5 rows */
	/* an unbound symbol, an unknown one, a wrong shape with its origin */
	ro.ndims = 1;
	EXPECT(fj_program_sizes(p, &ro, given, 3, in, NULL, NULL) != FJ_OK &&
	       strstr(fj_context_error(ctx), "symbolic size K is not bound"));
	const char *bad[] = {"Q"};
	ro.dim_names = bad;
	EXPECT(fj_program_sizes(p, &ro, given, 3, in, NULL, NULL) != FJ_OK &&
	       strstr(fj_context_error(ctx), "no symbolic size named Q"));
	x.rank = 1;
	const char *origins[3] = {"x.npy", NULL, NULL};
	ro.origins = origins;
	ro.ndims = 0;
	EXPECT(fj_program_sizes(p, &ro, given, 3, in, NULL, NULL) != FJ_OK &&
	       strstr(fj_context_error(ctx), "(from x.npy)"));
	fj_program_destroy(p);
	/* the graph as written */
	fj_value_info vi;
	EXPECT(fj_module_value_count(m, "@main", FJ_ROLE_OUTPUT) == 3 && fj_module_value_count(m, "nope", FJ_ROLE_INPUT) == 0);
	EXPECT_OK(ctx, fj_module_value_info(m, NULL, FJ_ROLE_OUTPUT, 2, &vi));
	EXPECT(strcmp(vi.name, "") == 0 && vi.rank == 0 && vi.type == NULL);
	EXPECT_OK(ctx, fj_module_value_info(m, NULL, FJ_ROLE_INPUT, 0, &vi));
	EXPECT(strcmp(vi.name, "x") == 0 && vi.sizes[0] == -1 && vi.sizes[1] == 4 && vi.bytes == 0);
}

static void test_reference(fj_context *ctx)
{
	/* f32 math: its f64 reference differs by f32 roundings, well within
	 * f32's tolerance; a result of 0 from ints is exact */
	static const char t2[] = "graph @main(%x: f32[64]) {\n"
	                         "  %a = aten.exp(%x)\n"
	                         "  %b = aten.mul(%a, 3.0)\n"
	                         "  %s = aten.sum(%b)\n"
	                         "  return %s, %b\n"
	                         "}\n";
	fj_module *m = NULL;
	EXPECT_OK(ctx, fj_module_parse(ctx, t2, sizeof t2 - 1, "ref.fj", &m));
	fj_program *p = NULL;
	EXPECT_OK(ctx, fj_compile(ctx, m, NULL, &p));
	if (!p) {
		fj_module_destroy(m);
		return;
	}
	float x[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)sin(i);
	fj_tensor in, out[2];
	fj_tensor_init(&in);
	fj_tensor_init(&out[0]);
	fj_tensor_init(&out[1]);
	in.data = x;
	in.dtype = FJ_TYPE_F32;
	in.rank = 1;
	in.sizes[0] = 64;
	EXPECT_OK(ctx, fj_program_run(p, &in, 1, out, 2));
	fj_reference *r = NULL;
	EXPECT_OK(ctx, fj_reference_f64(ctx, m, NULL, &in, 1, NULL, 0, &r));
	EXPECT(fj_reference_count(r) == 2);
	for (size_t k = 0; r && k < 2; k++) {
		fj_tensor ref;
		double scale, tol;
		EXPECT_OK(ctx, fj_reference_value(r, k, out[k].dtype, &ref, &scale, &tol));
		int placed;
		double err = fj_check_error(FJ_CHECK_F64, &out[k], &ref, scale, &placed);
		EXPECT(ref.dtype == FJ_TYPE_F64 && tol == 1e-5 && scale > 0 && placed && err <= tol);
		EXPECT(fj_check_error(FJ_CHECK_ATEN, &out[k], &out[k], 0, &placed) == 0 && placed);
	}
	fj_reference_destroy(r);
	fj_tensor_release(&out[0]);
	fj_tensor_release(&out[1]);
	fj_program_destroy(p);
	fj_module_destroy(m);
	EXPECT(fj_check_tolerance(FJ_CHECK_ATEN, FJ_TYPE_BF16) == 1e-2 && fj_check_tolerance(FJ_CHECK_F64, FJ_TYPE_I32) == 0);
}

static void test_backward_sizes(fj_context *ctx)
{
	static const char t3[] = "graph @f(%x: f32[N,4]) {\n  %s = aten.sum(%x)\n  return %s\n}\n";
	fj_module *m = NULL;
	EXPECT_OK(ctx, fj_module_parse(ctx, t3, sizeof t3 - 1, "bw.fj", &m));
	fj_compile_options co;
	fj_compile_options_init(&co);
	co.training = 1;
	fj_program *p = NULL;
	EXPECT_OK(ctx, fj_compile(ctx, m, &co, &p));
	float x[3 * 4] = {0}, one = 1;
	fj_tensor in, out, tan, grad;
	fj_tensor_init(&in);
	fj_tensor_init(&out);
	fj_tensor_init(&tan);
	fj_tensor_init(&grad);
	in.data = x;
	in.dtype = FJ_TYPE_F32;
	in.rank = 2;
	in.sizes[0] = 3;
	in.sizes[1] = 4;
	tan.data = &one;
	tan.dtype = FJ_TYPE_F32;
	fj_saved *saved = NULL;
	if (p)
		EXPECT_OK(ctx, fj_program_forward(p, &in, 1, &out, 1, &saved));
	if (saved)
		EXPECT_OK(ctx, fj_program_backward(p, saved, &tan, 1, &grad, 1)); /* N = 3, from the forward */
	EXPECT(grad.data && grad.rank == 2 && grad.sizes[0] == 3 && ((float *)grad.data)[11] == 1);
	fj_tensor_release(&out);
	fj_tensor_release(&grad);
	fj_saved_destroy(saved);
	fj_program_destroy(p);
	fj_module_destroy(m);
}

int main(void)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	EXPECT_OK(ctx, fj_module_parse(ctx, text, sizeof text - 1, "abi.fj", &m));
	fj_tensor t;
	fj_tensor_init(&t);
	EXPECT(t.struct_size == sizeof t && t.data == NULL && t.rank == 0 && t.device == FJ_DEVICE_HOST);
	if (m) {
		test_old_structs(ctx, m);
		test_sizes(ctx, m);
	}
	test_reference(ctx);
	test_backward_sizes(ctx);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	if (fails)
		fprintf(stderr, "fj-api-abi: %d failures\n", fails);
	return fails != 0;
}
