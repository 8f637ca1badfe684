/* test_api.c -- the public C API (include/fusejit/fusejit.h): every entry
 * point, its error paths, strided and misaligned inputs, outputs given and
 * allocated, training, and out-of-memory at every allocation of a whole
 * parse + compile + run. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "api/api.h"
#include "runtime/tensor.h"
#include "test.h"

static const char text[] =
	"graph @main(%x: f32[N,4], %w: f32[4]) {\n"
	"  %h = aten.mul(%x, %w)\n"
	"  %y = aten.tanh(%h)\n"
	"  %s = aten.sum(%y) {dims=[1]}\n"
	"  return %y, %s\n"
	"}\n";

static fj_context *new_ctx(void)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(fj_context_set_cache(ctx, "off", 0), FJ_OK);
	return ctx;
}

static fj_tensor desc(void *data, fj_scalar_type dt, int rank, int64_t d0, int64_t d1)
{
	fj_tensor t;
	memset(&t, 0, sizeof t);
	t.data = data;
	t.dtype = dt;
	t.rank = rank;
	t.sizes[0] = d0;
	t.sizes[1] = d1;
	return t;
}

/* ... on at most `threads` threads (0: all) */
static fj_program *compile_threads(fj_context *ctx, const char *src, fj_executor ex, int training, int threads)
{
	fj_module *m;
	ck_assert_int_eq(fj_module_parse(ctx, src, strlen(src), "t.fj", &m), FJ_OK);
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = ex;
	o.training = training;
	o.threads = threads;
	fj_program *p = NULL;
	fj_status st = fj_compile(ctx, m, &o, &p);
	if (st != FJ_OK)
		fprintf(stderr, "%s\n", fj_context_error(ctx));
	ck_assert_int_eq(st, FJ_OK);
	fj_module_destroy(m);
	return p;
}

static fj_program *compile_text(fj_context *ctx, const char *src, fj_executor ex, int training)
{
	return compile_threads(ctx, src, ex, training, 0);
}

START_TEST(test_version)
{
	ck_assert_str_eq(fj_version(), FUSEJIT_VERSION);
	ck_assert_int_eq(fj_version_number(), FUSEJIT_VERSION_NUMBER);
	ck_assert_str_eq(fj_scalar_type_name(FJ_TYPE_BF16), "bf16");
	ck_assert_uint_eq(fj_scalar_type_size(FJ_TYPE_I16), 2);
	ck_assert_ptr_null(fj_scalar_type_name((fj_scalar_type)99));
	ck_assert_uint_eq(fj_scalar_type_size((fj_scalar_type)-1), 0);
}
END_TEST

START_TEST(test_modules)
{
	fj_context *ctx = new_ctx();
	fj_module *m = (fj_module *)1;
	ck_assert_int_eq(fj_module_parse(NULL, text, 1, NULL, &m), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_module_parse(ctx, NULL, 3, NULL, &m), FJ_ERR_INVALID);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(fj_module_parse(ctx, "graph @g( {", 11, "bad.fj", &m), FJ_ERR_PARSE);
	ck_assert_ptr_null(m);
	ck_assert(strstr(fj_context_error(ctx), "bad.fj:1:") != NULL);
	ck_assert_int_eq(fj_module_parse_file(ctx, "/nonexistent/x.fj", &m), FJ_ERR_IO);
	ck_assert_int_eq(fj_module_parse_file(ctx, NULL, &m), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_module_parse(ctx, text, strlen(text), NULL, &m), FJ_OK);
	ck_assert_uint_eq(fj_module_graph_count(m), 1);
	ck_assert_str_eq(fj_module_graph_name(m, 0), "main");
	ck_assert_ptr_null(fj_module_graph_name(m, 1));
	char *s;
	size_t n;
	ck_assert_int_eq(fj_module_print(ctx, m, &s, &n), FJ_OK);
	ck_assert(strstr(s, "aten.tanh") != NULL && n == strlen(s));
	fj_string_free(ctx, s);
	ck_assert_int_eq(fj_module_print(ctx, NULL, &s, &n), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_module_run_pipeline(ctx, m, "nosuchpass"), FJ_ERR_PARSE);
	ck_assert_int_eq(fj_module_run_pipeline(ctx, m, "decompose,canonicalize"), FJ_OK);
	ck_assert_int_eq(fj_module_run_pipeline(ctx, NULL, "verify"), FJ_ERR_INVALID);
	fj_module_destroy(m);
	fj_module_destroy(NULL);
	ck_assert_int_eq(fj_op_schema(ctx, "aten.native_layer_norm", &s), FJ_OK);
	ck_assert_str_eq(s, "operands: input weight? bias?\nresults: out mean rstd\nattributes: normalized_shape eps\n");
	fj_string_free(ctx, s);
	ck_assert_int_eq(fj_op_schema(ctx, "aten.nope", &s), FJ_ERR_INVALID);
	ck_assert_ptr_null(s);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_builder)
{
	fj_context *ctx = new_ctx();
	fj_module *m;
	ck_assert_int_eq(fj_module_new(ctx, &m), FJ_OK);
	fj_graph_builder *b;
	ck_assert_int_eq(fj_build_begin(m, "@g", &b), FJ_OK);
	fj_value_id x = fj_build_param(b, "%x", "f32[N, 2*N]");
	ck_assert_uint_ne(x, FJ_NO_VALUE);
	fj_attribute shape = {.name = "shape", .kind = FJ_ATTR_SHAPE, .s = "[2*N*N]"};
	fj_value_id v = fj_build_op1(b, "aten.view", &x, 1, &shape, 1);
	int64_t dims[1] = {0};
	fj_attribute red[2] = {{.name = "dims", .kind = FJ_ATTR_INTS, .ints = dims, .n = 1},
	                       {.name = "keepdim", .kind = FJ_ATTR_BOOL, .i = 0}};
	fj_value_id s = fj_build_op1(b, "aten.sum", &v, 1, red, 2);
	fj_value_id y = fj_build_op1(b, "aten.add", (fj_value_id[]){s, fj_build_int(b, 1)}, 2,
	                             &(fj_attribute){.name = "alpha", .kind = FJ_ATTR_FLOAT, .f = 2.0}, 1);
	fj_value_id r3[3];
	ck_assert_int_eq(fj_build_op(b, "aten.native_layer_norm", (fj_value_id[]){x, FJ_NO_VALUE, FJ_NO_VALUE}, 3,
	                             (fj_attribute[]){{.name = "normalized_shape", .kind = FJ_ATTR_SHAPE, .s = "2*N"},
	                                              {.name = "eps", .kind = FJ_ATTR_FLOAT, .f = 1e-5}},
	                             2, r3, 3),
	                 FJ_OK);
	ck_assert_int_eq(fj_build_status(b), FJ_OK);
	ck_assert_int_eq(fj_build_end(b, (fj_value_id[]){y, r3[0]}, 2), FJ_OK);
	char *t;
	ck_assert_int_eq(fj_module_print(ctx, m, &t, NULL), FJ_OK);
	ck_assert(strstr(t, "graph @g(%x: f32[N,N*2])") != NULL);
	ck_assert(strstr(t, "aten.view(%x) {shape=[N*N*2]}") != NULL);
	fj_string_free(ctx, t);
	/* run it */
	fj_program *p;
	ck_assert_int_eq(fj_compile(ctx, m, NULL, &p), FJ_OK);
	float xv[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, yv = 0;
	fj_tensor in = desc(xv, FJ_TYPE_F32, 2, 2, 4), out[2];
	out[0] = desc(&yv, FJ_TYPE_F32, 0, 0, 0);
	out[1] = desc(NULL, FJ_TYPE_F32, 0, 0, 0);
	ck_assert_int_eq(fj_program_run(p, &in, 1, out, 2), FJ_OK);
	ck_assert(fabsf(yv - (36 + 2)) < 1e-5f);
	ck_assert(out[1].flags & FJ_TENSOR_OWNED);
	ck_assert_int_eq(out[1].rank, 2);
	fj_tensor_release(&out[1]);
	ck_assert_ptr_null(out[1].data);
	fj_tensor_release(NULL);
	fj_program_destroy(p);

	/* errors: sticky, and the graph is removed */
	ck_assert_int_eq(fj_build_begin(m, "bad", &b), FJ_OK);
	ck_assert_uint_eq(fj_build_param(b, "x", "f99[3]"), FJ_NO_VALUE);
	ck_assert_int_eq(fj_build_status(b), FJ_ERR_INVALID);
	ck_assert_uint_eq(fj_build_float(b, 1.0), FJ_NO_VALUE);
	ck_assert_int_eq(fj_build_end(b, NULL, 0), FJ_ERR_INVALID);
	ck_assert_uint_eq(fj_module_graph_count(m), 1);
	ck_assert_int_eq(fj_build_begin(m, "bad", &b), FJ_OK);
	x = fj_build_param(b, "x", "f32[3]");
	ck_assert_int_eq(fj_build_op(b, "aten.frobnicate", &x, 1, NULL, 0, NULL, 0), FJ_ERR_INVALID);
	fj_build_abort(b);
	ck_assert_int_eq(fj_build_begin(m, "bad", &b), FJ_OK);
	x = fj_build_param(b, "x", "f32[3]");
	ck_assert_uint_eq(fj_build_op1(b, "aten.sum", &x, 1, &(fj_attribute){.name = "nope", .kind = FJ_ATTR_INT}, 1),
	                  FJ_NO_VALUE);
	ck_assert_int_eq(fj_build_end(b, &x, 1), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_build_begin(m, "bad", &b), FJ_OK);
	x = fj_build_param(b, "x", "f32[3]");
	ck_assert_uint_eq(fj_build_op1(b, "aten.mul", (fj_value_id[]){x, 77}, 2, NULL, 0), FJ_NO_VALUE);
	ck_assert_int_eq(fj_build_end(b, (fj_value_id[]){99}, 1), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_build_begin(m, "bad", &b), FJ_OK);
	x = fj_build_param(b, "x", "f32[3]");
	ck_assert_uint_eq(fj_build_op1(b, "aten.view", &x, 1,
	                               &(fj_attribute){.name = "shape", .kind = FJ_ATTR_SHAPE, .s = "[3*-1]"}, 1),
	                  FJ_NO_VALUE);
	fj_build_abort(b);
	ck_assert_int_eq(fj_build_begin(m, "g", &b), FJ_ERR_INVALID); /* the name is taken */
	ck_assert_int_eq(fj_build_begin(NULL, "g", &b), FJ_ERR_INVALID);
	ck_assert_uint_eq(fj_module_graph_count(m), 1);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_compile_errors)
{
	fj_context *ctx = new_ctx();
	fj_module *m, *empty;
	ck_assert_int_eq(fj_module_parse(ctx, text, strlen(text), NULL, &m), FJ_OK);
	ck_assert_int_eq(fj_module_new(ctx, &empty), FJ_OK);
	fj_program *p = (fj_program *)1;
	fj_compile_options o;
	ck_assert_int_eq(fj_compile(ctx, NULL, NULL, &p), FJ_ERR_INVALID);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(fj_compile(ctx, empty, NULL, &p), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "empty") != NULL);
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_NVPTX; /* without a CUDA driver (forced: the same with a GPU) */
	ck_assert_int_eq(fj_context_set_option(ctx, "libcuda", "/nonexistent/libcuda.so.1"), FJ_OK);
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_DRIVER);
	ck_assert(strstr(fj_context_error(ctx), "nvptx executor needs a CUDA driver") != NULL);
	ck_assert_int_eq(fj_context_set_option(ctx, "libcuda", NULL), FJ_OK);
	o.executor = (fj_executor)42;
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	fj_compile_options_init(&o);
	o.target = "sm_100";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "sm_100") != NULL);
	fj_compile_options_init(&o);
	o.graph = "@other";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	fj_compile_options_init(&o);
	o.pipeline = "decompose,bogus";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_PARSE);
	fj_compile_options_init(&o);
	o.training = 1;
	o.pipeline = "verify";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "autodiff") != NULL);
	o.struct_size = 3;
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	fj_compile_options_init(&o);
	o.graph = "main";
	o.executor = FJ_EXECUTOR_AUTO;
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_OK);
	ck_assert_int_eq(fj_program_executor(p), FJ_EXECUTOR_HOST);
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_INPUT), 2);
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_SAVED), 0);
	ck_assert_uint_eq(fj_program_count(p, (fj_value_role)9), 0);
	fj_value_info vi;
	ck_assert_int_eq(fj_program_info(p, FJ_ROLE_INPUT, 0, &vi), FJ_OK);
	ck_assert_str_eq(vi.name, "x");
	ck_assert_str_eq(vi.type, "f32[N,4]");
	ck_assert_int_eq(vi.sizes[0], -1);
	ck_assert_int_eq(vi.sizes[1], 4);
	ck_assert_uint_eq(vi.bytes, 0);
	ck_assert_int_eq(fj_program_info(p, FJ_ROLE_INPUT, 1, &vi), FJ_OK);
	ck_assert_uint_eq(vi.bytes, 16);
	ck_assert_int_eq(fj_program_info(p, FJ_ROLE_OUTPUT, 5, &vi), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_forward(p, NULL, 0, NULL, 0, NULL), FJ_ERR_INVALID);
	fj_program_destroy(p);
	fj_program_destroy(NULL);
	fj_module_destroy(m);
	fj_module_destroy(empty);
	fj_context_destroy(ctx);
}
END_TEST

static void expect_y(float x[][4], const float *w, float y[][4], float *s, int n)
{
	for (int i = 0; i < n; i++) {
		float sum = 0;
		for (int j = 0; j < 4; j++) {
			float want = tanhf(x[i][j] * w[j]);
			ck_assert_msg(fabsf(y[i][j] - want) < 1e-6f, "y[%d][%d] = %g, want %g", i, j, y[i][j], want);
			sum += want;
		}
		if (s)
			ck_assert(fabsf(s[i] - sum) < 1e-5f);
	}
}

START_TEST(test_run)
{
	fj_context *ctx = new_ctx();
	fj_program *p = compile_text(ctx, text, _i ? FJ_EXECUTOR_ATEN : FJ_EXECUTOR_HOST, 0);
	float x[3][4], w[4] = {0.5f, -1, 2, 0.25f}, y[3][4], s[3];
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			x[i][j] = 0.1f * (float)(i * 4 + j) - 0.5f;
	fj_tensor in[2] = {desc(x, FJ_TYPE_F32, 2, 3, 4), desc(w, FJ_TYPE_F32, 1, 4, 0)};
	fj_tensor out[2] = {desc(y, FJ_TYPE_F32, 2, 3, 4), desc(s, FJ_TYPE_F32, 1, 3, 0)};
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(x, w, y, s, 3);

	/* strided input: x as the transpose of a [4,3] buffer */
	float xt[4][3];
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			xt[j][i] = x[i][j];
	static const int64_t st_t[2] = {1, 3};
	in[0] = desc(xt, FJ_TYPE_F32, 2, 3, 4);
	in[0].strides = st_t;
	memset(y, 0, sizeof y);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(x, w, y, s, 3);
	/* broadcast (zero strides) and dense strides given explicitly */
	static const int64_t st_b[2] = {0, 1}, st_d[2] = {4, 1};
	float row[4] = {0.3f, -0.2f, 0.1f, 0.9f}, xb[3][4];
	for (int i = 0; i < 3; i++)
		memcpy(xb[i], row, sizeof row);
	in[0] = desc(row, FJ_TYPE_F32, 2, 3, 4);
	in[0].strides = st_b;
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(xb, w, y, s, 3);
	in[0] = desc(x, FJ_TYPE_F32, 2, 3, 4);
	in[0].strides = st_d;
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(x, w, y, s, 3);
	/* misaligned input (copied) */
	char *raw = malloc(sizeof x + 8);
	memcpy(raw + 1, x, sizeof x);
	in[0] = desc(raw + 1, FJ_TYPE_F32, 2, 3, 4);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(x, w, y, s, 3);
	free(raw);
	in[0] = desc(x, FJ_TYPE_F32, 2, 3, 4);

	/* strided output: y written transposed into a [4,3] buffer */
	float yt[4][3];
	out[0] = desc(yt, FJ_TYPE_F32, 2, 3, 4);
	out[0].strides = st_t;
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			ck_assert(fabsf(yt[j][i] - tanhf(x[i][j] * w[j])) < 1e-6f);

	/* outputs allocated by fusejit, reused when of the right shape, replaced otherwise */
	out[0] = desc(NULL, FJ_TYPE_F32, 0, 0, 0);
	out[1] = desc(NULL, FJ_TYPE_F32, 0, 0, 0);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	ck_assert(out[0].flags & FJ_TENSOR_OWNED);
	ck_assert_uint_eq((uintptr_t)out[0].data % 64, 0);
	ck_assert_int_eq(out[0].rank, 2);
	ck_assert_int_eq(out[0].sizes[0], 3);
	void *keep = out[0].data;
	expect_y(x, w, out[0].data, out[1].data, 3);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	ck_assert_ptr_eq(out[0].data, keep);
	in[0] = desc(x, FJ_TYPE_F32, 2, 2, 4); /* N = 2 now */
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	ck_assert_int_eq(out[0].sizes[0], 2);
	expect_y(x, w, out[0].data, out[1].data, 2);
	fj_tensor_release(&out[0]);
	fj_tensor_release(&out[1]);
	/* empty tensors */
	in[0] = desc(NULL, FJ_TYPE_F32, 2, 0, 4);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	ck_assert_int_eq(out[0].sizes[0], 0);
	fj_tensor_release(&out[0]);
	fj_tensor_release(&out[1]);

	/* errors */
	in[0] = desc(x, FJ_TYPE_F32, 2, 3, 4);
	out[0] = desc(y, FJ_TYPE_F32, 2, 3, 4);
	out[1] = desc(s, FJ_TYPE_F32, 1, 3, 0);
	ck_assert_int_eq(fj_program_run(NULL, in, 2, out, 2), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_run(p, in, 1, out, 2), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "takes 2 inputs") != NULL);
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 1), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_run(p, NULL, 2, out, 2), FJ_ERR_INVALID);
	fj_tensor bad = desc(x, FJ_TYPE_F64, 2, 3, 4);
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_RUNTIME);
	ck_assert(strstr(fj_context_error(ctx), "dtype") != NULL);
	bad = desc(x, FJ_TYPE_F32, 1, 12, 0);
	ck_assert_int_ne(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_OK);
	bad = desc(x, FJ_TYPE_F32, 2, 3, 5); /* 5 != 4 */
	ck_assert_int_ne(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_OK);
	bad = desc(NULL, FJ_TYPE_F32, 2, 3, 4);
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_INVALID);
	bad = desc(x, FJ_TYPE_F32, 2, -3, 4);
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_INVALID);
	bad = desc(x, FJ_TYPE_F32, 9, 3, 4);
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_INVALID);
	bad = desc(x, (fj_scalar_type)17, 2, 3, 4);
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_INVALID);
	bad = desc(x, FJ_TYPE_F32, 2, 3, 4);
	bad.device = FJ_DEVICE_CUDA;
	ck_assert_int_eq(fj_program_run(p, (fj_tensor[]){bad, in[1]}, 2, out, 2), FJ_ERR_UNSUPPORTED);
	ck_assert(strstr(fj_context_error(ctx), "nvptx") != NULL);
	fj_tensor badout[2] = {desc(y, FJ_TYPE_F32, 2, 4, 3), out[1]};
	ck_assert_int_eq(fj_program_run(p, in, 2, badout, 2), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "output 0") != NULL);
	badout[0] = desc(y, FJ_TYPE_I32, 2, 3, 4);
	ck_assert_int_eq(fj_program_run(p, in, 2, badout, 2), FJ_ERR_INVALID);
	/* still fine afterwards */
	ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
	expect_y(x, w, y, s, 3);
	fj_saved *sv = (fj_saved *)1;
	ck_assert_int_eq(fj_program_forward(p, in, 2, out, 2, &sv), FJ_ERR_INVALID);
	ck_assert_ptr_null(sv);
	ck_assert_int_eq(fj_program_backward(p, NULL, NULL, 0, NULL, 0), FJ_ERR_INVALID);
	fj_program_destroy(p);
	fj_context_destroy(ctx);
}
END_TEST

static const char train_text[] =
	"graph @f(%x: f32[B,3] {nograd}, %w: f32[3], %i: i64[B]) {\n"
	"  %h = aten.mul(%x, %w)\n"
	"  %e = aten.exp(%h)\n"
	"  %s = aten.sum(%e)\n"
	"  %c = aten.mul(%i, 2)\n"
	"  return %s, %c\n"
	"}\n";

START_TEST(test_training)
{
	fj_context *ctx = new_ctx();
	fj_program *p = compile_text(ctx, train_text, FJ_EXECUTOR_HOST, 1);
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_INPUT), 3);
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_OUTPUT), 2);
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_TANGENT), 1); /* only the float output */
	ck_assert_uint_eq(fj_program_count(p, FJ_ROLE_GRADIENT), 1);
	fj_value_info vi;
	ck_assert_int_eq(fj_program_info(p, FJ_ROLE_GRADIENT, 0, &vi), FJ_OK);
	ck_assert_str_eq(vi.name, "w");
	ck_assert_str_eq(vi.type, "f32[3]");
	size_t nsaved = fj_program_count(p, FJ_ROLE_SAVED);
	ck_assert_uint_gt(nsaved, 0);
	float x[2][3] = {{0.1f, 0.2f, 0.3f}, {-0.4f, 0.5f, 0.6f}}, w[3] = {1, 2, -1};
	int64_t iv[2] = {4, 5}, c[2];
	float s = 0, t = 2.0f, gw[3];
	fj_tensor in[3] = {desc(x, FJ_TYPE_F32, 2, 2, 3), desc(w, FJ_TYPE_F32, 1, 3, 0), desc(iv, FJ_TYPE_I64, 1, 2, 0)};
	fj_tensor out[2] = {desc(&s, FJ_TYPE_F32, 0, 0, 0), desc(c, FJ_TYPE_I64, 1, 2, 0)};
	fj_saved *sv;
	ck_assert_int_eq(fj_program_forward(p, in, 3, out, 2, &sv), FJ_OK);
	ck_assert_uint_eq(fj_saved_count(sv), nsaved);
	ck_assert_uint_gt(fj_saved_bytes(sv), 0);
	fj_tensor view;
	ck_assert_int_eq(fj_saved_info(sv, 0, &vi, &view), FJ_OK);
	ck_assert_uint_gt(vi.bytes, 0);
	ck_assert_ptr_nonnull(view.data);
	ck_assert_int_eq(fj_saved_info(sv, 99, &vi, NULL), FJ_ERR_INVALID);
	ck_assert_int_eq(c[1], 10);
	fj_tensor tan = desc(&t, FJ_TYPE_F32, 0, 0, 0), g = desc(gw, FJ_TYPE_F32, 1, 3, 0);
	ck_assert_int_eq(fj_program_backward(p, sv, &tan, 1, &g, 1), FJ_OK);
	float want_s = 0;
	for (int j = 0; j < 3; j++) {
		float want = 0;
		for (int i = 0; i < 2; i++) {
			want += 2.0f * x[i][j] * expf(x[i][j] * w[j]);
			want_s += expf(x[i][j] * w[j]);
		}
		ck_assert(fabsf(gw[j] - want) < 1e-5f);
	}
	ck_assert(fabsf(s - want_s) < 1e-5f);
	/* again (saved is not consumed), and the errors */
	ck_assert_int_eq(fj_program_backward(p, sv, &tan, 1, &g, 1), FJ_OK);
	ck_assert_int_eq(fj_program_backward(p, sv, &tan, 0, &g, 1), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_backward(p, sv, &tan, 1, &g, 2), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_backward(p, NULL, &tan, 1, &g, 1), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_program_forward(p, in, 3, out, 2, NULL), FJ_ERR_INVALID);
	/* run() on a training program: the forward only */
	ck_assert_int_eq(fj_program_run(p, in, 3, out, 2), FJ_OK);
	fj_saved_destroy(sv);
	fj_saved_destroy(NULL);
	fj_program_destroy(p);
	fj_context_destroy(ctx);
}
END_TEST

/* fj_run_options.saved_in_place: a saved input or output is the caller's
 * memory (no copy), the gradients are those of a run that copies, a strided
 * input (converted) is still copied, and a forward bench counts the shared
 * memory once. _i: the executor (host, aten). silu's backward saves x, exp's
 * its output. */
static const char saved_text[] =
	"graph @silu(%x: f32[4,8]) {\n"
	"  %y = aten.silu(%x)\n"
	"  return %y\n"
	"}\n"
	"graph @exp(%x: f32[4,8]) {\n"
	"  %y = aten.exp(%x)\n"
	"  return %y\n"
	"}\n";

enum { SHARES_X = 1, SHARES_Y = 2 };

/* The forward and backward of p on x (strides may be NULL) with in_place
 * set or not, the output in y (NULL: fusejit allocates it): the gradient
 * into g; returns which of x and y a saved value's memory is. */
static int train_once(fj_program *p, float *x, const int64_t *strides, int in_place, float *y, float *g)
{
	float t[32];
	for (int i = 0; i < 32; i++)
		t[i] = 0.25f * (float)(i % 7) - 0.5f;
	fj_tensor in = desc(x, FJ_TYPE_F32, 2, 4, 8), out = desc(y, FJ_TYPE_F32, 2, 4, 8);
	in.strides = strides;
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.saved_in_place = in_place;
	fj_saved *sv;
	ck_assert_int_eq(fj_program_forward_with(p, &ro, &in, 1, &out, 1, &sv), FJ_OK);
	ck_assert_ptr_nonnull(out.data);
	int shares = 0;
	for (size_t k = 0; k < fj_saved_count(sv); k++) {
		fj_tensor view;
		ck_assert_int_eq(fj_saved_info(sv, k, NULL, &view), FJ_OK);
		shares |= (view.data == (void *)x ? SHARES_X : 0) | (view.data == out.data ? SHARES_Y : 0);
	}
	fj_tensor tan = desc(t, FJ_TYPE_F32, 2, 4, 8), gd = desc(g, FJ_TYPE_F32, 2, 4, 8);
	ck_assert_int_eq(fj_program_backward(p, sv, &tan, 1, &gd, 1), FJ_OK);
	fj_saved_destroy(sv); /* frees fusejit's saved values, never x or y */
	if (!y)
		fj_tensor_release(&out);
	return shares;
}

/* fj_program_bench's bytes of a forward of p on x, saved_in_place or not. */
static size_t bench_bytes(fj_program *p, float *x, int in_place)
{
	fj_bench_options bo;
	fj_bench_options_init(&bo);
	bo.reps = 5;
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.saved_in_place = in_place;
	bo.run = &ro;
	fj_tensor in = desc(x, FJ_TYPE_F32, 2, 4, 8);
	fj_bench_result b;
	fj_bench_result_init(&b);
	ck_assert_int_eq(fj_program_bench(p, &bo, &in, 1, &b), FJ_OK);
	return b.bytes;
}

START_TEST(test_saved_in_place)
{
	fj_context *ctx = new_ctx();
	fj_module *m;
	ck_assert_int_eq(fj_module_parse(ctx, saved_text, strlen(saved_text), "t.fj", &m), FJ_OK);
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = _i ? FJ_EXECUTOR_ATEN : FJ_EXECUTOR_HOST;
	o.training = 1;
	fj_program *silu, *ex;
	o.graph = "silu";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &silu), FJ_OK);
	o.graph = "exp";
	ck_assert_int_eq(fj_compile(ctx, m, &o, &ex), FJ_OK);
	fj_module_destroy(m);
	float x[32], y[32], g0[32], g1[32];
	for (int i = 0; i < 32; i++)
		x[i] = 0.1f * (float)i - 1.5f;
	/* a saved input */
	ck_assert_int_eq(train_once(silu, x, NULL, 0, y, g0), 0);
	ck_assert_int_eq(train_once(silu, x, NULL, 1, y, g1), SHARES_X);
	ck_assert_mem_eq(g0, g1, sizeof g0);
	static const int64_t dense[2] = {8, 1}; /* dense strides given: read in place */
	ck_assert_int_eq(train_once(silu, x, dense, 1, y, g1), SHARES_X);
	ck_assert_mem_eq(g0, g1, sizeof g0);
	float xt[32]; /* x as the transpose of an [8,4] buffer: converted for the run, so copied */
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 8; j++)
			xt[j * 4 + i] = x[i * 8 + j];
	static const int64_t tr[2] = {1, 4};
	ck_assert_int_eq(train_once(silu, xt, tr, 1, y, g1), 0);
	ck_assert_mem_eq(g0, g1, sizeof g0);
	ck_assert_uint_eq(bench_bytes(silu, x, 0), bench_bytes(silu, x, 1) + sizeof x);
	/* a saved output: the caller's, or one fusejit allocates for the caller */
	ck_assert_int_eq(train_once(ex, x, NULL, 0, y, g0), 0);
	ck_assert_int_eq(train_once(ex, x, NULL, 1, y, g1), SHARES_Y);
	ck_assert_mem_eq(g0, g1, sizeof g0);
	ck_assert_int_eq(train_once(ex, x, NULL, 1, NULL, g1), SHARES_Y);
	ck_assert_mem_eq(g0, g1, sizeof g0);
	ck_assert_uint_eq(bench_bytes(ex, x, 0), bench_bytes(ex, x, 1) + sizeof y);
	fj_program_destroy(silu);
	fj_program_destroy(ex);
	fj_context_destroy(ctx);
}
END_TEST

static void diag_count(void *ud, const fj_diagnostic *d)
{
	(void)d;
	++*(int *)ud;
}

START_TEST(test_cache_settings)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	int ndiag = 0;
	fj_context_set_diag_handler(ctx, diag_count, &ndiag);
	char dir[] = "/tmp/fj-unit-api.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(fj_context_set_cache(ctx, dir, 1 << 20), FJ_OK);
	ck_assert_int_eq(fj_context_set_cache(NULL, dir, 0), FJ_ERR_INVALID);
	fj_program *p = compile_text(ctx, text, FJ_EXECUTOR_ATEN, 0);
	fj_cache_stats cs;
	fj_context_cache_stats(ctx, &cs);
	ck_assert_uint_gt(cs.kernels_compiled, 0);
	ck_assert_uint_eq(cs.disk_stores, 1);
	fj_program *p2 = compile_text(ctx, text, FJ_EXECUTOR_ATEN, 0);
	fj_cache_stats cs2;
	fj_context_cache_stats(ctx, &cs2);
	ck_assert_uint_eq(cs2.kernels_compiled, cs.kernels_compiled);
	ck_assert_uint_gt(cs2.memory_hits, cs.memory_hits);
	fj_context_cache_stats(NULL, &cs2);
	ck_assert_uint_eq(cs2.kernels_compiled, 0);
	fj_context_cache_stats(ctx, NULL);
	fj_program_destroy(p);
	fj_program_destroy(p2);
	ck_assert_int_eq(fj_compile(ctx, NULL, NULL, &p), FJ_ERR_INVALID);
	ck_assert_int_ge(ndiag, 1);
	fj_context_destroy(ctx);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* fj_context_set_option: names, values, errors, and the environment's
 * defaults (this test runs in its own process: setenv is its subject). */
START_TEST(test_options)
{
	setenv("FUSEJIT_THREADS", "3", 1);
	setenv("FUSEJIT_NVPTX_VARIANTS", "split", 1);
	setenv("FUSEJIT_PTX_ALL_VARIANTS", "1", 1);
	fj_context *ctx = fj_context_create(NULL, NULL);
	const fj_settings *st = fj_context_settings(ctx);
	ck_assert_int_eq(st->threads, 3);
	ck_assert_str_eq(st->nvptx_variants, "split");
	ck_assert(st->ptx_all_variants);
	ck_assert_uint_eq(fj_context_diagnostic_count(ctx), 0);

	ck_assert_int_eq(fj_context_set_option(ctx, "threads", "8"), FJ_OK);
	ck_assert_int_eq(st->threads, 8);
	ck_assert_int_eq(fj_context_set_option(ctx, "threads", "eight"), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "threads: 'eight' is not a non-negative integer"));
	ck_assert_int_eq(st->threads, 8);
	ck_assert_int_eq(fj_context_set_option(ctx, "threads", NULL), FJ_OK); /* back to the environment's */
	ck_assert_int_eq(st->threads, 3);
	ck_assert_int_eq(fj_context_set_option(ctx, "nvptx_variants", ""), FJ_OK);
	ck_assert_ptr_null(st->nvptx_variants);
	ck_assert_int_eq(fj_context_set_option(ctx, "ptx_all_variants", "off"), FJ_OK);
	ck_assert(!st->ptx_all_variants);
	ck_assert_int_eq(fj_context_set_option(ctx, "ptx_all_variants", "maybe"), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_context_set_option(ctx, "cache_dir", "off"), FJ_OK);
	ck_assert_ptr_null(st->cache_dir);
	ck_assert_int_eq(fj_context_set_option(ctx, "cache_max_mb", "0"), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_context_set_option(ctx, "cache_max_mb", "64"), FJ_OK);
	ck_assert_uint_eq(st->cache_max_bytes, (uint64_t)64 << 20);
	ck_assert_int_eq(fj_context_set_option(ctx, "no_such_option", "1"), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "unknown option 'no_such_option' (options: threads,"));
	ck_assert_int_eq(fj_context_set_option(ctx, NULL, "1"), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_context_set_option(NULL, "threads", "1"), FJ_ERR_INVALID);
	fj_context_destroy(ctx);

	/* A bad value in the environment: a warning, and the built-in default. */
	setenv("FUSEJIT_THREADS", "-2", 1);
	ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_context_settings(ctx)->threads, 0);
	ck_assert_uint_eq(fj_context_diagnostic_count(ctx), 1);
	const fj_diagnostic *d = fj_context_diagnostic(ctx, 0);
	ck_assert_int_eq(d->severity, FJ_SEV_WARNING);
	ck_assert_ptr_nonnull(strstr(d->message, "FUSEJIT_THREADS: '-2' is not a non-negative integer; the default is used"));
	fj_context_destroy(ctx);
	unsetenv("FUSEJIT_THREADS");
	unsetenv("FUSEJIT_NVPTX_VARIANTS");
	unsetenv("FUSEJIT_PTX_ALL_VARIANTS");
}
END_TEST

/* host_target, host_vector_bits and host_stream: their values, and fixed at
 * the context's first host compile (a later change fails the next host
 * compile clearly; back to the first values, it compiles again). */
START_TEST(test_host_target_options)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_context_set_cache(ctx, "off", 0);
	const fj_settings *st = fj_context_settings(ctx);
	ck_assert_int_eq(fj_context_set_option(ctx, "host_target", "avx9"), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "host_target: 'avx9' is not native or avx2"));
	ck_assert_int_eq(fj_context_set_option(ctx, "host_vector_bits", "1024"), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "is not auto, 256 or 512"));
	ck_assert_int_eq(fj_context_set_option(ctx, "host_vector_bits", "256"), FJ_OK);
	ck_assert_int_eq(st->host_vector_bits, FJ_HOST_VECTOR_256);
	ck_assert_int_eq(fj_context_set_option(ctx, "host_stream", "always"), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "host_stream: 'always' is not auto, on or off"));
	ck_assert_int_eq(fj_context_set_option(ctx, "host_stream", "off"), FJ_OK);
	ck_assert_int_eq(st->host_stream, FJ_HOST_STREAM_OFF);
	const char *src = "graph @g(%x: f32[4]) {\n  %y = aten.exp(%x)\n  return %y\n}\n";
	fj_program_destroy(compile_text(ctx, src, FJ_EXECUTOR_HOST, 0));
	ck_assert_int_eq(fj_context_set_option(ctx, "host_vector_bits", "auto"), FJ_OK);
	fj_module *m;
	ck_assert_int_eq(fj_module_parse(ctx, src, strlen(src), "t.fj", &m), FJ_OK);
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	fj_program *p = NULL;
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(fj_context_error(ctx), "changed after this context's first host compile"));
	ck_assert_int_eq(fj_context_set_option(ctx, "host_vector_bits", "256"), FJ_OK);
	ck_assert_int_eq(fj_context_set_option(ctx, "host_stream", "on"), FJ_OK);
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_ERR_INVALID);
	ck_assert_int_eq(fj_context_set_option(ctx, "host_stream", "off"), FJ_OK);
	ck_assert_int_eq(fj_compile(ctx, m, &o, &p), FJ_OK);
	fj_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* src compiled for the host in a new context (*ctx) with host_stream on or
 * off, on 3 threads, without the disk cache */
static fj_program *compile_streamed(fj_context **ctx, const char *src, bool on)
{
	*ctx = fj_context_create(NULL, NULL);
	fj_context_set_cache(*ctx, "off", 0);
	ck_assert_int_eq(fj_context_set_option(*ctx, "host_stream", on ? "on" : "off"), FJ_OK);
	ck_assert_int_eq(fj_context_set_option(*ctx, "threads", "3"), FJ_OK);
	return compile_text(*ctx, src, FJ_EXECUTOR_HOST, 0);
}

/* host_stream on caller outputs at any alignment: y = silu(x) and z = x * y
 * (33.6 MB together, streamed when split among threads) into buffers at
 * byte offsets 0, 4 (aligned alike: up to the first 64-byte aligned index
 * plainly, then streamed), 4 and 8 (aligned unlike: plain) and 2 and 2 (not
 * element-aligned: plain), on 3 threads, bit for bit as with host_stream
 * off, every element written. */
START_TEST(test_host_stream_alignment)
{
	enum { N = 4200007 };
	static const int off[][2] = {{0, 0}, {4, 4}, {4, 8}, {2, 2}};
	const char *src = "graph @g(%x: f32[4200007]) {\n  %y = aten.silu(%x)\n  %z = aten.mul(%x, %y)\n"
	                  "  return %y, %z\n}\n";
	/* z's buffer: 64-byte aligned, after y's; the whole a multiple of 64 (aligned_alloc) */
	enum { ZAT = (N * sizeof(float) + 127) / 64 * 64, BUF = 2 * ZAT };
	float *x = malloc(N * sizeof *x);
	char *buf = aligned_alloc(64, BUF), *ref = malloc(2 * N * sizeof(float));
	ck_assert(x && buf && ref);
	for (int64_t i = 0; i < N; i++)
		x[i] = (float)((i * 7919) % 2001 - 1000) / 100.0f;
	fj_tensor in = desc(x, FJ_TYPE_F32, 1, N, 0);
	for (int on = 0; on < 2; on++) {
		fj_context *ctx;
		fj_program *p = compile_streamed(&ctx, src, on);
		for (size_t c = 0; c < (on ? FJ_ARRAY_LEN(off) : 1); c++) {
			char *y = buf + off[c][0], *z = buf + ZAT + off[c][1];
			memset(buf, 0xff, BUF); /* NaNs */
			fj_tensor out[2] = {desc(y, FJ_TYPE_F32, 1, N, 0), desc(z, FJ_TYPE_F32, 1, N, 0)};
			ck_assert_int_eq(fj_program_run(p, &in, 1, out, 2), FJ_OK);
			if (!on) {
				memcpy(ref, y, N * sizeof(float));
				memcpy(ref + N * sizeof(float), z, N * sizeof(float));
				continue;
			}
			ck_assert_msg(memcmp(y, ref, N * sizeof(float)) == 0, "y differs at offsets %d, %d", off[c][0],
			              off[c][1]);
			ck_assert_msg(memcmp(z, ref + N * sizeof(float), N * sizeof(float)) == 0, "z differs at offsets %d, %d",
			              off[c][0], off[c][1]);
		}
		fj_program_destroy(p);
		fj_context_destroy(ctx);
	}
	free(x);
	free(buf);
	free(ref);
}
END_TEST

/* host_stream on a matmul's epilogue (region_matmul.c: nt_plan): c = a b
 * and d = relu(c) + 1, both 2 MiB or more, at caller outputs 64-byte
 * aligned (streamed) and not (stored in place), with N x 4 bytes a
 * multiple of 64 and not, on 3 threads with odd M and K: bit for bit as
 * with host_stream off. */
START_TEST(test_host_stream_matmul)
{
	enum { M = 301, K = 67, NMAX = 2048 };
	static const int ns[] = {2048, 2040};
	static const int off[][2] = {{0, 0}, {4, 0}, {0, 8}};
	enum { DAT = (M * NMAX * sizeof(float) + 127) / 64 * 64, BUF = 2 * DAT };
	float *a = malloc(M * K * sizeof *a), *b = malloc(K * NMAX * sizeof *b);
	char *buf = aligned_alloc(64, BUF), *ref = malloc(BUF);
	ck_assert(a && b && buf && ref);
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 37) % 101 - 50) / 50.0f;
	for (int i = 0; i < K * NMAX; i++)
		b[i] = (float)((i * 53) % 97 - 48) / 48.0f;
	for (size_t g = 0; g < FJ_ARRAY_LEN(ns); g++) {
		int n = ns[g];
		char src[512];
		snprintf(src, sizeof src,
		         "graph @g(%%a: f32[%d,%d], %%b: f32[%d,%d]) {\n  %%c = aten.mm(%%a, %%b)\n  %%r = aten.relu(%%c)\n"
		         "  %%d = aten.add(%%r, 1.0)\n  return %%c, %%d\n}\n",
		         M, K, K, n);
		fj_tensor in[2] = {desc(a, FJ_TYPE_F32, 2, M, K), desc(b, FJ_TYPE_F32, 2, K, n)};
		size_t bytes = (size_t)M * (size_t)n * sizeof(float);
		for (int on = 0; on < 2; on++) {
			fj_context *ctx;
			fj_program *p = compile_streamed(&ctx, src, on);
			for (size_t c = 0; c < (on ? FJ_ARRAY_LEN(off) : 1); c++) {
				char *cp = buf + off[c][0], *dp = buf + DAT + off[c][1];
				memset(buf, 0xff, BUF); /* NaNs */
				fj_tensor out[2] = {desc(cp, FJ_TYPE_F32, 2, M, n), desc(dp, FJ_TYPE_F32, 2, M, n)};
				ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
				if (!on) {
					memcpy(ref, cp, bytes);
					memcpy(ref + DAT, dp, bytes);
					continue;
				}
				ck_assert_msg(memcmp(cp, ref, bytes) == 0, "c differs: N %d, offsets %d, %d", n, off[c][0], off[c][1]);
				ck_assert_msg(memcmp(dp, ref + DAT, bytes) == 0, "d differs: N %d, offsets %d, %d", n, off[c][0],
				              off[c][1]);
			}
			fj_program_destroy(p);
			fj_context_destroy(ctx);
		}
	}
	free(a);
	free(b);
	free(buf);
	free(ref);
}
END_TEST

/* Row kernels stream their outputs of 8 MiB or more (region_host_inner.c:
 * output_pass_nt) at any alignment: layer_norm over rows of 1028 floats
 * (4112 bytes: the rows' starts move through the lines) and softmax's
 * streamed version (32 MiB or more: stream_plan) over rows of 1025, into
 * outputs at byte offsets 0, 4, 16 and 60 from a line (the chunks then fall
 * on the lines) and 2 (not element-aligned: every chunk has partial lines
 * at both ends), on 3 threads. Row i's bits are those of row i % PERIOD of
 * the same graph on PERIOD rows (too small to stream: stored in place);
 * every element is written, no byte around the output. */
START_TEST(test_host_stream_rows_alignment)
{
	enum { PERIOD = 50, GUARD = 64 };
	static const struct {
		const char *op;
		int rows, cols;
	} g[] = {{"aten.layer_norm(%x, %w, %b) {normalized_shape=[1028], eps=1e-5}", 2100, 1028},
	         {"aten._softmax(%x) {dim=1}", 8195, 1025}};
	static const int off[] = {0, 4, 16, 60, 2};
	for (size_t gi = 0; gi < FJ_ARRAY_LEN(g); gi++) {
		int rows = g[gi].rows, cols = g[gi].cols;
		size_t bytes = (size_t)rows * (size_t)cols * sizeof(float), total = (bytes + 2 * GUARD + 127) / 64 * 64;
		float *x = malloc(bytes), *w = malloc(cols * sizeof *w), *ref = malloc((size_t)PERIOD * cols * sizeof *ref);
		unsigned char *buf = aligned_alloc(64, total);
		ck_assert(x && w && ref && buf);
		for (int i = 0; i < rows; i++)
			for (int j = 0; j < cols; j++)
				x[(size_t)i * cols + j] = (float)(((i % PERIOD) * 7919 + j * 31) % 2001 - 1000) / 100.0f;
		for (int j = 0; j < cols; j++)
			w[j] = (float)(j % 13) / 8.0f - 0.5f;
		fj_context *ctx;
		char src[512];
		fj_tensor in[3] = {desc(x, FJ_TYPE_F32, 2, PERIOD, cols), desc(w, FJ_TYPE_F32, 1, cols, 0),
		                   desc(w, FJ_TYPE_F32, 1, cols, 0)};
		size_t nin = gi == 0 ? 3 : 1;
		for (int big = 0; big < 2; big++) {
			snprintf(src, sizeof src, "graph @g(%%x: f32[%d,%d]%s) {\n  %%y = %s\n  return %%y\n}\n",
			         big ? rows : PERIOD, cols, gi == 0 ? ", %w: f32[1028], %b: f32[1028]" : "", g[gi].op);
			fj_program *p = compile_streamed(&ctx, src, true);
			if (!big) {
				fj_tensor out = desc(ref, FJ_TYPE_F32, 2, PERIOD, cols);
				ck_assert_int_eq(fj_program_run(p, in, nin, &out, 1), FJ_OK);
			}
			for (size_t c = 0; big && c < FJ_ARRAY_LEN(off); c++) {
				unsigned char *y = buf + GUARD + off[c];
				memset(buf, 0xff, total); /* NaNs */
				in[0].sizes[0] = rows;
				fj_tensor out = desc(y, FJ_TYPE_F32, 2, rows, cols);
				ck_assert_int_eq(fj_program_run(p, in, nin, &out, 1), FJ_OK);
				for (int i = 0; i < rows; i++)
					ck_assert_msg(memcmp(y + (size_t)i * cols * sizeof(float), ref + (size_t)(i % PERIOD) * cols,
					                     cols * sizeof(float)) == 0,
					              "%s: row %d differs at offset %d", g[gi].op, i, off[c]);
				for (unsigned char *q = buf; q < buf + total; q = q == y - 1 ? y + bytes : q + 1)
					ck_assert_msg(*q == 0xff, "%s: byte %td written at offset %d", g[gi].op, q - y, off[c]);
			}
			fj_program_destroy(p);
			fj_context_destroy(ctx);
		}
		free(x);
		free(w);
		free(ref);
		free(buf);
	}
}
END_TEST

/* A matmul whose A is packed, not read in place (region_matmul.c:
 * pack_a), over several K blocks, M-tiles and N-tiles: G^T X and its
 * batched form, and A converted from f16; and last an f32 A read in
 * place. M, K and N are not multiples of the blocks; on 1, 2 and 3
 * threads (calls that start in the middle of an N-tile, and at a
 * micro-panel in the middle of an M-tile), against a double reference,
 * and bit for bit alike. */
START_TEST(test_matmul_packed_a)
{
	enum { B = 3, M = 203, K = 300, N = 1100 };
	static const char *srcs[] = {
		"graph @g(%x: f32[300,203], %y: f32[300,1100]) {\n  %a = aten.t(%x)\n  %c = aten.mm(%a, %y)\n"
		"  return %c\n}\n",
		"graph @g(%x: f32[3,300,203], %y: f32[3,300,1100]) {\n  %a = aten.transpose(%x) {dim0=1, dim1=2}\n"
		"  %c = aten.bmm(%a, %y)\n  return %c\n}\n",
		"graph @g(%x: f16[203,300], %y: f32[300,1100]) {\n  %a = aten._to_copy(%x) {dtype=f32}\n"
		"  %c = aten.mm(%a, %y)\n  return %c\n}\n",
		"graph @g(%x: f32[203,300], %y: f32[300,1100]) {\n  %c = aten.mm(%x, %y)\n  return %c\n}\n"};
	float *x = malloc(B * K * M * sizeof *x), *y = malloc(B * K * N * sizeof *y);
	uint16_t *xh = malloc(M * K * sizeof *xh);
	float *c = malloc(B * M * N * sizeof *c), *c1 = malloc(B * M * N * sizeof *c1);
	ck_assert(x && y && xh && c && c1);
	for (int i = 0; i < B * K * M; i++)
		x[i] = (float)((i * 37) % 101 - 50) / 64.0f; /* exact in f16 */
	for (int i = 0; i < M * K; i++)
		xh[i] = fj_rt_f32_to_f16(x[i]);
	for (int i = 0; i < B * K * N; i++)
		y[i] = (float)((i * 53) % 97 - 48) / 48.0f;
	for (size_t s = 0; s < FJ_ARRAY_LEN(srcs); s++) {
		int nb = s == 1 ? B : 1;
		fj_tensor in[2] = {desc(x, FJ_TYPE_F32, 2, K, M), desc(y, FJ_TYPE_F32, 2, K, N)};
		fj_tensor out = desc(c, FJ_TYPE_F32, 2, M, N);
		if (s == 1) {
			in[0] = (fj_tensor){.data = x, .dtype = FJ_TYPE_F32, .rank = 3, .sizes = {B, K, M}};
			in[1] = (fj_tensor){.data = y, .dtype = FJ_TYPE_F32, .rank = 3, .sizes = {B, K, N}};
			out = (fj_tensor){.data = c, .dtype = FJ_TYPE_F32, .rank = 3, .sizes = {B, M, N}};
		} else if (s == 2) {
			in[0] = desc(xh, FJ_TYPE_F16, 2, M, K);
		} else if (s == 3) {
			in[0] = desc(x, FJ_TYPE_F32, 2, M, K);
		}
		for (int threads = 1; threads <= 3; threads++) {
			fj_context *ctx = fj_context_create(NULL, NULL);
			fj_context_set_cache(ctx, "off", 0);
			ck_assert_int_eq(fj_context_set_option(ctx, "threads", "3"), FJ_OK); /* 3 even on fewer cores */
			fj_program *p = compile_threads(ctx, srcs[s], FJ_EXECUTOR_HOST, 0, threads);
			out.data = threads == 1 ? c1 : c;
			ck_assert_int_eq(fj_program_run(p, in, 2, &out, 1), FJ_OK);
			fj_program_destroy(p);
			fj_context_destroy(ctx);
			if (threads > 1)
				ck_assert_msg(memcmp(c, c1, (size_t)nb * M * N * sizeof *c) == 0, "graph %zu: 1 and %d threads differ",
				              s, threads);
		}
		for (int q = 0; q < nb; q++)
			for (int i = 0; i < M; i++)
				for (int j = 0; j < N; j++) {
					double want = 0;
					for (int k = 0; k < K; k++) {
						double a = s >= 2 ? x[i * K + k] : x[(q * K + k) * M + i];
						want += a * y[(q * K + k) * N + j];
					}
					double got = c[((size_t)q * M + i) * N + j];
					ck_assert_msg(fabs(got - want) <= 1e-4 * (1 + fabs(want)), "graph %zu: c[%d][%d][%d] = %g, not %g", s,
					              q, i, j, got, want);
				}
	}
	free(x);
	free(y);
	free(xh);
	free(c);
	free(c1);
}
END_TEST

/* fj_compile_options.threads bounds the threads of every kernel's run, also
 * where fj_compile fuses an aten graph at run time (the runtime's fused copy
 * of it once ignored the bound and ran on all of the context's threads): a
 * counting runner sees none of a one-thread program's runs, and the parallel
 * loops of a program of more ask it for 2 threads or more, never more than
 * the program's. */
START_TEST(test_compile_threads)
{
	enum { M = 256, K = 128, N = 256 };
	const char *src = "graph @g(%a: f32[256,128], %b: f32[128,256]) {\n  %c = aten.mm(%a, %b)\n"
	                  "  %d = aten.relu(%c)\n  %e = aten.exp(%a)\n  return %d, %e\n}\n";
	float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
	float *d = malloc(M * N * sizeof *d), *e = malloc(M * K * sizeof *e), *d1 = malloc(M * N * sizeof *d1);
	ck_assert(a && b && d && e && d1);
	for (int i = 0; i < M * K; i++)
		a[i] = (float)(i % 13) / 13.0f - 0.5f;
	for (int i = 0; i < K * N; i++)
		b[i] = (float)(i % 7) / 7.0f - 0.5f;
	fj_tensor in[2] = {desc(a, FJ_TYPE_F32, 2, M, K), desc(b, FJ_TYPE_F32, 2, K, N)};
	for (int threads = 1; threads <= 3; threads++) {
		fj_context *ctx = new_ctx();
		ck_assert_int_eq(fj_context_set_option(ctx, "threads", "4"), FJ_OK);
		fj_context_set_parallel_runner(ctx, fj_test_runner);
		fj_program *p = compile_threads(ctx, src, FJ_EXECUTOR_HOST, 0, threads);
		fj_program_stats st;
		fj_program_stats_init(&st);
		ck_assert_int_eq(fj_program_stats_get(p, &st), FJ_OK);
		ck_assert_int_eq(st.threads, threads);
		atomic_store(&fj_test_runner_calls, 0);
		atomic_store(&fj_test_runner_most, 0);
		fj_tensor out[2] = {desc(threads == 1 ? d1 : d, FJ_TYPE_F32, 2, M, N), desc(e, FJ_TYPE_F32, 2, M, K)};
		ck_assert_int_eq(fj_program_run(p, in, 2, out, 2), FJ_OK);
		int calls = atomic_load(&fj_test_runner_calls);
		if (threads == 1)
			ck_assert_int_eq(calls, 0);
		else {
			ck_assert_int_gt(calls, 0);
			ck_assert_int_ge(atomic_load(&fj_test_runner_most), 2);
			ck_assert_int_le(atomic_load(&fj_test_runner_most), threads);
			ck_assert_int_eq(memcmp(d, d1, M * N * sizeof *d), 0); /* tiles are summed alike */
		}
		fj_program_destroy(p);
		fj_context_destroy(ctx);
	}
	free(a);
	free(b);
	free(d);
	free(e);
	free(d1);
}
END_TEST

/* Out of memory at the n-th allocation of parse + compile + run: an error,
 * never a crash or a leak. Every n up to 60, then a sample up to success. */
START_TEST(test_alloc_failures)
{
	bool done = false;
	for (long n = 1; !done && n < 100000; n += n < 60 ? 1 : 97) {
		fj_test_alloc a = {0, n, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &a);
		if (!ctx) {
			ck_assert_uint_eq(a.live, 0);
			continue;
		}
		fj_context_set_cache(ctx, "off", 0);
		fj_module *m = NULL;
		fj_program *p = NULL;
		fj_status st = fj_module_parse(ctx, text, strlen(text), "oom.fj", &m);
		if (st == FJ_OK) {
			fj_compile_options o;
			fj_compile_options_init(&o);
			o.executor = FJ_EXECUTOR_ATEN;
			st = fj_compile(ctx, m, &o, &p);
		}
		if (st == FJ_OK) {
			float x[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, w[4] = {1, 1, 1, 1};
			fj_tensor in[2] = {desc(x, FJ_TYPE_F32, 2, 2, 4), desc(w, FJ_TYPE_F32, 1, 4, 0)};
			fj_tensor out[2] = {desc(NULL, FJ_TYPE_F32, 0, 0, 0), desc(NULL, FJ_TYPE_F32, 0, 0, 0)};
			st = fj_program_run(p, in, 2, out, 2);
			fj_tensor_release(&out[0]);
			fj_tensor_release(&out[1]);
			done = st == FJ_OK;
		}
		if (!done)
			ck_assert_int_ne(st, FJ_OK);
		fj_program_destroy(p);
		fj_module_destroy(m);
		fj_context_destroy(ctx);
		ck_assert_msg(a.live == 0, "%zu bytes leaked when allocation %ld failed", a.live, n);
	}
	ck_assert(done);
}
END_TEST

/* fj_api_strided_copy against an element-by-element walk, over random
 * layouts: permuted, sliced, flipped (negative strides), broadcast (zero
 * strides, gather only), size-1 dims with any stride, elements of 1-8 bytes. */
START_TEST(test_strided_copy)
{
	enum { SPAN = 4096 };
	unsigned char *buf = malloc(SPAN), *want = malloc(SPAN), *dense = malloc(SPAN);
	unsigned seed = 12345;
	for (int iter = 0; iter < 3000; iter++) {
		size_t es = (size_t)1 << (rand_r(&seed) % 4);
		int rank = rand_r(&seed) % 6;
		bool gather = rand_r(&seed) % 2, broadcast = gather && rand_r(&seed) % 3 == 0;
		int64_t sizes[FJ_MAX_DIMS], strides[FJ_MAX_DIMS], n = 1;
		int perm[FJ_MAX_DIMS];
		for (int k = 0; k < rank; k++) {
			sizes[k] = 1 + rand_r(&seed) % 5;
			n *= sizes[k];
			perm[k] = k;
		}
		for (int k = rank - 1; k > 0; k--) { /* the order of the dims in memory */
			int j = rand_r(&seed) % (k + 1), t = perm[k];
			perm[k] = perm[j];
			perm[j] = t;
		}
		int64_t step = 1 + (rand_r(&seed) % 4 == 0), lo = 0, hi = 0;
		for (int k = rank - 1; k >= 0; k--) { /* perm[k]: the k-th innermost dim, maybe padded */
			int d = perm[k];
			strides[d] = sizes[d] == 1 && rand_r(&seed) % 2 ? 77 : step;
			if (broadcast && rand_r(&seed) % 3 == 0)
				strides[d] = 0;
			else
				step *= sizes[d] + (rand_r(&seed) % 4 == 0);
			if (gather && rand_r(&seed) % 4 == 0)
				strides[d] = -strides[d];
		}
		for (int k = 0; k < rank; k++) {
			int64_t e = strides[k] * (sizes[k] - 1);
			lo += e < 0 ? e : 0;
			hi += e > 0 ? e : 0;
		}
		if ((hi - lo + 1) * (int64_t)es > SPAN || n * (int64_t)es > SPAN)
			continue;
		for (int i = 0; i < SPAN; i++) {
			buf[i] = (unsigned char)rand_r(&seed);
			dense[i] = (unsigned char)rand_r(&seed);
		}
		fj_tensor t = {.struct_size = sizeof t, .data = buf - lo * (int64_t)es, .rank = rank, .strides = strides};
		memcpy(t.sizes, sizes, sizeof sizes);
		/* the walk: element e of the dense buffer is at its multi-index's offset */
		memcpy(want, gather ? dense : buf, SPAN);
		for (int64_t e = 0; e < n; e++) {
			int64_t off = 0, r = e;
			for (int k = rank - 1; k >= 0; k--) {
				off += r % sizes[k] * strides[k];
				r /= sizes[k];
			}
			unsigned char *at = (unsigned char *)t.data + off * (int64_t)es;
			if (gather)
				memcpy(want + e * (int64_t)es, at, es);
			else
				memcpy(want + (at - buf), dense + e * (int64_t)es, es);
		}
		fj_api_strided_copy(&t, dense, es, n, gather);
		ck_assert_msg(memcmp(gather ? dense : buf, want, SPAN) == 0, "layout %d: rank %d, es %zu, %s", iter,
		              rank, es, gather ? "gather" : "scatter");
	}
	free(buf);
	free(want);
	free(dense);
}
END_TEST

Suite *suite_api(void)
{
	Suite *s = suite_create("api");
	TCase *tc = tcase_create("api");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_version);
	tcase_add_test(tc, test_modules);
	tcase_add_test(tc, test_builder);
	tcase_add_test(tc, test_compile_errors);
	tcase_add_loop_test(tc, test_run, 0, 2);
	tcase_add_test(tc, test_training);
	tcase_add_test(tc, test_strided_copy);
	tcase_add_loop_test(tc, test_saved_in_place, 0, 2);
	tcase_add_test(tc, test_cache_settings);
	tcase_add_test(tc, test_options);
	tcase_add_test(tc, test_host_target_options);
	tcase_add_test(tc, test_host_stream_alignment);
	tcase_add_test(tc, test_host_stream_matmul);
	tcase_add_test(tc, test_host_stream_rows_alignment);
	tcase_add_test(tc, test_matmul_packed_a);
	tcase_add_test(tc, test_compile_threads);
	tcase_add_test(tc, test_alloc_failures);
	suite_add_tcase(s, tc);
	return s;
}
