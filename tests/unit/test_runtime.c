/* test_runtime.c -- runtime/: .npy I/O (round trips, every corrupt file),
 * half-precision conversions, the relative L2 error, the thread pool, the
 * binding of symbolic sizes, the buffer plan, the executor interface (aten,
 * host and nvptx on the emulator bind and run alike), the nvptx executor's
 * stream rules on a device that queues, and --check=f64's measure (wrong
 * results fail it, rounding does not). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "backend_host/host.h"
#include "frontend/frontend.h"
#include "passes/reference.h"
#include "backend_nvptx/emu.h"
#include "runtime/executor.h"
#include "tests/common/npy_rt.h"
#include "runtime/program.h"
#include "test.h"

/* ---- .npy ---- */

static char *tmpdir(void)
{
	static char dir[64];
	snprintf(dir, sizeof dir, "/tmp/fj-unit-rt.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	return dir;
}

START_TEST(test_npy_roundtrip)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	char *dir = tmpdir();
	static const int64_t shapes[][3] = {{2, 3, 5}, {7, 0, 0}, {0, 0, 0}, {0, 4, 0}};
	static const int ranks[] = {3, 1, 0, 2};
	for (int dt = 0; dt < FJ_DT_COUNT; dt++)
		for (size_t s = 0; s < FJ_ARRAY_LEN(ranks); s++) {
			fj_rt_tensor t, r;
			ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &t, (fj_dtype)dt, ranks[s], shapes[s]), FJ_OK);
			ck_assert_uint_eq((uintptr_t)t.data % 64, 0);
			for (size_t b = 0; b < t.nbytes; b++)
				((unsigned char *)t.data)[b] = (unsigned char)(b * 37 + dt);
			if (dt == FJ_DT_BOOL)
				for (size_t b = 0; b < t.nbytes; b++)
					((unsigned char *)t.data)[b] &= 1;
			char path[128];
			snprintf(path, sizeof path, "%s/t_%d_%zu.npy", dir, dt, s);
			ck_assert_int_eq(fj_npy_write(ctx, path, &t), FJ_OK);
			ck_assert_int_eq(fj_npy_read(ctx, path, &r), FJ_OK);
			ck_assert_int_eq(r.dtype, dt);
			ck_assert(fj_rt_tensor_same_type(&t, &r));
			ck_assert_uint_eq(r.nbytes, t.nbytes);
			ck_assert(t.nbytes == 0 || memcmp(t.data, r.data, t.nbytes) == 0);
			/* the header is 64-byte aligned and ends with '\n' */
			FILE *f = fopen(path, "rb");
			unsigned char pre[10];
			ck_assert_uint_eq(fread(pre, 1, 10, f), 10);
			fclose(f);
			size_t hlen = pre[8] | pre[9] << 8;
			ck_assert_uint_eq((10 + hlen) % 64, 0);
			unlink(path);
			fj_rt_tensor_free(&t);
			fj_rt_tensor_free(&r);
		}
	rmdir(dir);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_npy_bf16_descr)
{
	fj_dtype dt;
	const char *why;
	ck_assert(fj_npy_dtype_from_descr("<u2", &dt, &why) && dt == FJ_DT_BF16);
	ck_assert_str_eq(fj_dtype_npy(FJ_DT_BF16), "<u2");
	ck_assert(!fj_npy_dtype_from_descr("|O", &dt, &why));
	ck_assert(strstr(why, "pickled"));
	ck_assert(!fj_npy_dtype_from_descr(">f4", &dt, &why));
	ck_assert(strstr(why, "big-endian"));
}
END_TEST

/* A .npy in memory: v1 header around dict, then nbytes of data. */
static size_t make_npy(unsigned char *buf, int major, const char *dict, size_t nbytes)
{
	size_t pre = major == 1 ? 10 : 12, len = strlen(dict);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (unsigned char)major;
	buf[7] = 0;
	buf[8] = (unsigned char)(len & 0xff);
	buf[9] = (unsigned char)(len >> 8);
	if (major != 1)
		buf[10] = buf[11] = 0;
	memcpy(buf + pre, dict, len);
	memset(buf + pre + len, 0, nbytes);
	return pre + len + nbytes;
}

static void expect_bad(const unsigned char *buf, size_t len, const char *what)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_rt_tensor t;
	fj_status st = fj_npy_read_mem(ctx, "bad.npy", buf, len, &t);
	ck_assert_msg(st != FJ_OK, "accepted a file that is %s", what);
	ck_assert_ptr_null(t.data);
	const char *e = fj_context_error(ctx);
	ck_assert_msg(strstr(e, "bad.npy") != NULL, "error does not name the file: %s", e);
	ck_assert_msg(strstr(e, what) != NULL, "expected '%s' in: %s", what, e);
	fj_context_destroy(ctx);
}

START_TEST(test_npy_corrupt)
{
	unsigned char buf[1024];
	size_t n;
	const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
	/* good, v1, v2 and v3 */
	fj_context *ctx = fj_context_create(NULL, NULL);
	for (int major = 1; major <= 3; major++) {
		fj_rt_tensor t;
		n = make_npy(buf, major, good, 24);
		ck_assert_int_eq(fj_npy_read_mem(ctx, "good.npy", buf, n, &t), FJ_OK);
		ck_assert_int_eq(t.rank, 2);
		ck_assert_int_eq(t.dims[1], 3);
		fj_rt_tensor_free(&t);
	}
	fj_context_destroy(ctx);

	n = make_npy(buf, 1, good, 24);
	buf[1] = 'X';
	expect_bad(buf, n, "bad magic");
	n = make_npy(buf, 4, good, 24);
	expect_bad(buf, n, "version");
	n = make_npy(buf, 1, good, 24);
	expect_bad(buf, 8, "too short");
	expect_bad(buf, 30, "truncated .npy header");
	expect_bad(buf, n - 1, "truncated data");
	n = make_npy(buf, 1, good, 25);
	expect_bad(buf, n, "unexpected data");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24);
	expect_bad(buf, n, "Fortran");
	n = make_npy(buf, 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }\n", 48);
	expect_bad(buf, n, "pickled");
	n = make_npy(buf, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24);
	expect_bad(buf, n, "big-endian");
	n = make_npy(buf, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }\n", 48);
	expect_bad(buf, n, "unsupported dtype");
	n = make_npy(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", 8);
	expect_bad(buf, n, "structured");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk\n", 24);
	expect_bad(buf, n, "malformed header");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False}\n", 4);
	expect_bad(buf, n, "missing");
	n = make_npy(buf, 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", 4);
	expect_bad(buf, n, "repeated");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", 24);
	expect_bad(buf, n, "unknown");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2; 3), }\n", 24);
	expect_bad(buf, n, "malformed header");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }\n", 24);
	expect_bad(buf, n, "malformed header");
	n = make_npy(buf, 1, "garbage", 0);
	expect_bad(buf, n, "malformed header");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", 4);
	expect_bad(buf, n, "overflows");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", 4);
	expect_bad(buf, n, "overflows");
	n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }\n", 4);
	expect_bad(buf, n, "rank 9");
	/* a header length pointing past the end */
	n = make_npy(buf, 1, good, 24);
	buf[9] = 0x7f;
	expect_bad(buf, n, "truncated .npy header");
}
END_TEST

START_TEST(test_npy_missing_file)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_rt_tensor t;
	ck_assert_int_eq(fj_npy_read(ctx, "/nonexistent/x.npy", &t), FJ_ERR_IO);
	ck_assert(strstr(fj_context_error(ctx), "/nonexistent/x.npy"));
	ck_assert_int_eq(fj_npy_read(ctx, "/tmp", &t), FJ_ERR_IO);
	ck_assert(strstr(fj_context_error(ctx), "directory"));
	/* writing into a missing directory fails and leaves nothing */
	fj_rt_tensor w;
	int64_t d = 3;
	ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &w, FJ_DT_F32, 1, &d), FJ_OK);
	ck_assert_int_eq(fj_npy_write(ctx, "/nonexistent/y.npy", &w), FJ_ERR_IO);
	fj_rt_tensor_free(&w);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- conversions and comparison ---- */

START_TEST(test_half_conversions)
{
	/* every f16 bit pattern survives f16 -> f32 -> f16 (NaNs stay NaN) */
	/* (counted, not asserted one by one: check's fork mode sends every assertion) */
	int bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = fj_rt_f16_to_f32((uint16_t)h);
		uint16_t back = fj_rt_f32_to_f16(f);
		if (isnan(f) ? !isnan(fj_rt_f16_to_f32(back)) : back != h)
			bad++;
		float b = fj_rt_bf16_to_f32((uint16_t)h);
		if (!isnan(b) && fj_rt_f32_to_bf16(b) != h)
			bad++;
	}
	ck_assert_int_eq(bad, 0);
	ck_assert_uint_eq(fj_rt_f32_to_f16(65520.0f), 0x7c00);   /* rounds to inf */
	ck_assert_uint_eq(fj_rt_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(fj_rt_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
	ck_assert_uint_eq(fj_rt_f32_to_f16(0x1p-25f), 0);            /* tie to even: 0 */
	ck_assert_uint_eq(fj_rt_f32_to_f16(0x1.8p-25f), 1);
	ck_assert_uint_eq(fj_rt_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	ck_assert_uint_eq(fj_rt_f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);
	ck_assert_uint_eq(fj_rt_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82); /* tie to even */
}
END_TEST

START_TEST(test_rel_l2)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	int64_t d = 4;
	fj_rt_tensor a, r;
	fj_rt_tensor_alloc(ctx, &a, FJ_DT_F32, 1, &d);
	fj_rt_tensor_alloc(ctx, &r, FJ_DT_F32, 1, &d);
	float *pa = a.data, *pr = r.data;
	float ref[4] = {3, 4, NAN, INFINITY};
	memcpy(pr, ref, sizeof ref);
	memcpy(pa, ref, sizeof ref);
	pa[0] = 3.5f;
	bool placed;
	double e = fj_rt_rel_l2(&a, &r, &placed);
	ck_assert(placed);
	ck_assert_double_eq_tol(e, 0.5 / 5.0, 1e-12);
	pa[2] = 1; /* NaN missing */
	fj_rt_rel_l2(&a, &r, &placed);
	ck_assert(!placed);
	pa[2] = NAN;
	pa[3] = -INFINITY; /* inf of the other sign */
	fj_rt_rel_l2(&a, &r, &placed);
	ck_assert(!placed);
	/* ||ref|| = 0: the absolute norm */
	memset(pr, 0, 16);
	memset(pa, 0, 16);
	pa[1] = 0.25f;
	ck_assert_double_eq_tol(fj_rt_rel_l2(&a, &r, &placed), 0.25, 1e-12);
	ck_assert_double_eq(fj_rt_tolerance(FJ_DT_F32), 1e-5);
	ck_assert_double_eq(fj_rt_tolerance(FJ_DT_BF16), 1e-2);
	ck_assert_double_eq(fj_rt_tolerance(FJ_DT_I32), 0);
	fj_rt_tensor_free(&a);
	fj_rt_tensor_free(&r);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- thread pool ---- */

typedef struct pool_arg {
	atomic_int *hits;
	atomic_int calls;
	int64_t fail_from;
} pool_arg;

static int32_t pool_task(void *varg, int64_t lo, int64_t hi)
{
	pool_arg *a = varg;
	atomic_fetch_add(&a->calls, 1);
	for (int64_t i = lo; i < hi; i++)
		atomic_fetch_add(&a->hits[i], 1);
	return a->fail_from >= 0 && hi > a->fail_from ? (int32_t)(1 + lo / 1000) : 0;
}

/* Every element once, more than one chunk, the error of the lowest failing chunk. */
static void check_jobs(fj_context *ctx, atomic_int *hits, int n)
{
	for (int round = 0; round < 20; round++) {
		pool_arg a = {hits, 0, -1};
		memset(hits, 0, (size_t)n * sizeof *hits);
		ck_assert_int_eq(fj_host_parallel_for(ctx, 4, n, 1000, pool_task, &a), 0);
		int bad = 0;
		for (int i = 0; i < n; i++)
			bad += atomic_load(&hits[i]) != 1;
		ck_assert_int_eq(bad, 0);
		ck_assert_int_ge(atomic_load(&a.calls), 2);
	}
	pool_arg f = {hits, 0, n / 2};
	int32_t rc = fj_host_parallel_for(ctx, 4, n, 1000, pool_task, &f);
	ck_assert_int_gt(rc, 0);
	ck_assert_int_le(rc, 1 + n / 2 / 1000);
	ck_assert_int_eq(fj_host_parallel_for(ctx, 4, n, 1000, pool_task, &f), rc);
}

START_TEST(test_pool)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_context_set_option(ctx, "threads", "4"), FJ_OK);
	ck_assert_int_eq(fj_host_thread_count(ctx), 4);
	enum { N = 100000 };
	atomic_int *hits = calloc(N, sizeof *hits);
	check_jobs(ctx, hits, N);
	/* small extents run on the caller in one call */
	pool_arg s = {hits, 0, -1};
	memset(hits, 0, N * sizeof *hits);
	ck_assert_int_eq(fj_host_parallel_for(ctx, 4, 500, 1000, pool_task, &s), 0);
	ck_assert_int_eq(atomic_load(&s.calls), 1);
	/* threads = 1: the caller only */
	pool_arg one = {hits, 0, -1};
	ck_assert_int_eq(fj_host_parallel_for(ctx, 1, N, 1000, pool_task, &one), 0);
	ck_assert_int_eq(atomic_load(&one.calls), 1);
	/* empty */
	ck_assert_int_eq(fj_host_parallel_for(ctx, 4, 0, 1, pool_task, &one), 0);
	free(hits);
	fj_context_destroy(ctx);
	ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_context_set_option(ctx, "threads", "1"), FJ_OK);
	ck_assert_int_eq(fj_host_thread_count(ctx), 1);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- an embedder's runner instead of the pool (fj_test_runner, main.c) ---- */

typedef struct nest_arg {
	fj_context *ctx;
	pool_arg *inner;
	atomic_int inner_rc;
} nest_arg;

/* Each chunk starts a job of its own: it must run on this thread alone. */
static int32_t nest_task(void *varg, int64_t lo, int64_t hi)
{
	nest_arg *a = varg;
	(void)lo;
	(void)hi;
	int before = atomic_load(&fj_test_runner_calls);
	int32_t rc = fj_host_parallel_for(a->ctx, 4, 100000, 1000, pool_task, a->inner);
	if (atomic_load(&fj_test_runner_calls) != before)
		rc = 99; /* the nested job went to the runner */
	atomic_fetch_or(&a->inner_rc, rc);
	return 0;
}

START_TEST(test_parallel_runner)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	ck_assert_int_eq(fj_context_set_option(ctx, "threads", "4"), FJ_OK);
	fj_context_set_parallel_runner(ctx, fj_test_runner);
	ck_assert_int_eq(fj_host_thread_count(ctx), 4);
	enum { N = 100000 };
	atomic_int *hits = calloc(N, sizeof *hits);
	atomic_store(&fj_test_runner_calls, 0);
	atomic_store(&fj_test_runner_threads, 0);
	check_jobs(ctx, hits, N);
	ck_assert_int_eq(atomic_load(&fj_test_runner_calls), 20 + 2);
	ck_assert_int_eq(atomic_load(&fj_test_runner_threads), 4 * (20 + 2));
	/* one chunk's worth, or threads = 1: the caller, no runner */
	pool_arg s = {hits, 0, -1};
	ck_assert_int_eq(fj_host_parallel_for(ctx, 4, 500, 1000, pool_task, &s), 0);
	ck_assert_int_eq(fj_host_parallel_for(ctx, 1, N, 1000, pool_task, &s), 0);
	ck_assert_int_eq(atomic_load(&s.calls), 2);
	ck_assert_int_eq(atomic_load(&fj_test_runner_calls), 22);
	/* a job started inside a body runs on that thread */
	pool_arg inner = {hits, 0, -1};
	memset(hits, 0, N * sizeof *hits);
	nest_arg na = {ctx, &inner, 0};
	ck_assert_int_eq(fj_host_parallel_for(ctx, 4, 8, 1, nest_task, &na), 0);
	ck_assert_int_eq(atomic_load(&na.inner_rc), 0);
	ck_assert_int_eq(atomic_load(&inner.calls), 8);
	/* NULL: the pool again */
	fj_context_set_parallel_runner(ctx, NULL);
	int calls = atomic_load(&fj_test_runner_calls);
	check_jobs(ctx, hits, N);
	ck_assert_int_eq(atomic_load(&fj_test_runner_calls), calls);
	/* GOMP_parallel itself, where libgomp is installed (the bridge passes PyTorch's) */
	void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL);
	if (gomp) {
		fj_parallel_runner run;
		*(void **)&run = dlsym(gomp, "GOMP_parallel");
		ck_assert_ptr_nonnull(*(void **)&run);
		fj_context_set_parallel_runner(ctx, run);
		check_jobs(ctx, hits, N);
		fj_context_set_parallel_runner(ctx, NULL);
	}
	free(hits);
	fj_context_destroy(ctx); /* libgomp stays loaded: its threads outlive the test */
}
END_TEST

/* ---- programs ---- */

static fj_module *parse(fj_context *ctx, const char *text)
{
	fj_module *m = NULL;
	fj_status st = fj_parse_module(ctx, text, strlen(text), "t.fj", &m);
	ck_assert_msg(st == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	return m;
}

static void make_input(fj_context *ctx, fj_rt_tensor *t, fj_dtype dt, int rank, int64_t d0, int64_t d1)
{
	int64_t d[2] = {d0, d1};
	ck_assert_int_eq(fj_rt_tensor_alloc(ctx, t, dt, rank, d), FJ_OK);
	for (int64_t i = 0; i < fj_rt_tensor_numel(t); i++)
		fj_rt_store_f64(t->data, dt, i, 0.01 * (double)(i % 17));
}

START_TEST(test_bind)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: f32[N,4], %y: f32[N], %z: f32[M*4]) {\n"
	                          "  %a = aten.exp(%x)\n"
	                          "  %b = aten.exp(%z)\n"
	                          "  return %a, %y, %b\n"
	                          "}\n");
	fj_graph *g = m->graphs[0];
	fj_rt_program *p;
	ck_assert_int_eq(fj_rt_program_create(ctx, g, FJ_RT_EXEC_ATEN, &p), FJ_OK);
	fj_rt_tensor x, y, y2, z, z2, out[3] = {0};
	make_input(ctx, &x, FJ_DT_F32, 2, 3, 4);
	make_input(ctx, &y, FJ_DT_F32, 1, 3, 0);
	make_input(ctx, &y2, FJ_DT_F32, 1, 5, 0);
	make_input(ctx, &z, FJ_DT_F32, 1, 8, 0);
	make_input(ctx, &z2, FJ_DT_F32, 1, 6, 0);
	const char *origin[3] = {"x.npy", "y.npy", NULL};

	/* all given: N from x and y, M from the product M*4 */
	const fj_rt_tensor *in[3] = {&x, &y, &z};
	ck_assert_msg(fj_rt_program_bind(p, in, origin, NULL, 0) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_int_eq(fj_rt_program_symbol(p, 0), 3);
	ck_assert_int_eq(fj_rt_program_symbol(p, 1), 2);
	ck_assert_int_eq(fj_rt_program_run(p, in, out), FJ_OK);
	ck_assert_int_eq(out[0].dims[0], 3);
	ck_assert_double_eq_tol(((float *)out[0].data)[5], exp(0.05), 1e-6);
	ck_assert_int_eq(out[2].dims[0], 8);
	ck_assert_int_eq(memcmp(out[1].data, y.data, y.nbytes), 0);

	/* N bound to two sizes: the message names the symbol, the sizes and the inputs */
	const fj_rt_tensor *bad[3] = {&x, &y2, &z};
	ck_assert_int_eq(fj_rt_program_bind(p, bad, origin, NULL, 0), FJ_ERR_RUNTIME);
	const char *e = fj_context_error(ctx);
	ck_assert_msg(strstr(e, "symbol N") && strstr(e, "3") && strstr(e, "5") && strstr(e, "%x") && strstr(e, "%y") &&
	                  strstr(e, "y.npy"),
	              "%s", e);
	/* --dim against an input */
	fj_rt_dimarg dn = {"N", 7};
	ck_assert_int_eq(fj_rt_program_bind(p, in, origin, &dn, 1), FJ_ERR_RUNTIME);
	ck_assert(strstr(fj_context_error(ctx), "--dim"));
	/* a product that does not divide */
	const fj_rt_tensor *odd[3] = {&x, &y, &z2};
	fj_rt_dimarg dm = {"M", 2};
	ck_assert_int_eq(fj_rt_program_bind(p, odd, NULL, &dm, 1), FJ_ERR_RUNTIME);
	/* unbound: names the symbol and --dim */
	const fj_rt_tensor *part[3] = {&x, &y, NULL};
	ck_assert_int_eq(fj_rt_program_bind(p, part, NULL, NULL, 0), FJ_ERR_RUNTIME);
	e = fj_context_error(ctx);
	ck_assert_msg(strstr(e, "M") && strstr(e, "--dim M="), "%s", e);
	ck_assert_int_eq(fj_rt_program_bind(p, part, NULL, &dm, 1), FJ_OK);
	ck_assert_int_eq(fj_rt_program_value_dims(p, g->params[2])[0], 8);
	/* an unknown --dim */
	fj_rt_dimarg dk = {"K", 2};
	ck_assert_int_eq(fj_rt_program_bind(p, in, NULL, &dk, 1), FJ_ERR_RUNTIME);
	/* wrong dtype, wrong static size */
	fj_rt_tensor xi, xs;
	make_input(ctx, &xi, FJ_DT_I32, 2, 3, 4);
	make_input(ctx, &xs, FJ_DT_F32, 2, 3, 5);
	const fj_rt_tensor *bi[3] = {&xi, &y, &z};
	ck_assert_int_eq(fj_rt_program_bind(p, bi, origin, NULL, 0), FJ_ERR_RUNTIME);
	ck_assert(strstr(fj_context_error(ctx), "dtype"));
	const fj_rt_tensor *bs[3] = {&xs, &y, &z};
	ck_assert_int_eq(fj_rt_program_bind(p, bs, origin, NULL, 0), FJ_ERR_RUNTIME);
	ck_assert(strstr(fj_context_error(ctx), "dim 1"));

	fj_rt_tensor *all[] = {&x, &y, &y2, &z, &z2, &xi, &xs, &out[0], &out[1], &out[2]};
	for (size_t i = 0; i < FJ_ARRAY_LEN(all); i++)
		fj_rt_tensor_free(all[i]);
	fj_rt_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* The three executors through executor.h on one graph: the same results,
 * and, from the one binder, the same error for the same bad input. */
START_TEST(test_executors)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: f32[N,4], %y: f32[N]) {\n"
	                          "  %a = aten.exp(%x)\n"
	                          "  %s = aten.sum(%a) {dims=[1]}\n"
	                          "  %r = aten.add(%s, %y)\n"
	                          "  return %r, %a\n"
	                          "}\n");
	fj_graph *g = m->graphs[0];
	ck_assert_ptr_eq(fj_rt_executor_named("host"), &fj_rt_host_executor);
	ck_assert_ptr_null(fj_rt_executor_named("gpu"));
	ck_assert(fj_rt_aten_executor.supports(ctx, g) && fj_rt_host_executor.supports(ctx, g));
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	fj_nvptx_device dev = fj_nvptx_emu_device(emu);
	const fj_rt_executor *exs[3] = {&fj_rt_aten_executor, &fj_rt_host_executor, &fj_rt_nvptx_executor};
	fj_rt_tensor x, y, y2, out[3][2];
	memset(out, 0, sizeof out);
	make_input(ctx, &x, FJ_DT_F32, 2, 3, 4);
	make_input(ctx, &y, FJ_DT_F32, 1, 3, 0);
	make_input(ctx, &y2, FJ_DT_F32, 1, 5, 0);
	const fj_rt_tensor *in[2] = {&x, &y}, *bad[2] = {&x, &y2};
	char err[3][600];
	for (int e = 0; e < 3; e++) {
		fj_rt_exec_options o = {.threads = 2, .device = &dev};
		fj_rt_exec *ex = NULL;
		ck_assert_msg(fj_rt_exec_create(exs[e], ctx, g, &o, &ex) == FJ_OK, "%s", fj_context_error(ctx));
		ck_assert_int_eq(fj_rt_exec_bind(ex, bad, NULL, NULL, 0), FJ_ERR_RUNTIME);
		snprintf(err[e], sizeof err[e], "%s", fj_context_error(ctx));
		ck_assert_msg(fj_rt_exec_bind(ex, in, NULL, NULL, 0) == FJ_OK, "%s", fj_context_error(ctx));
		ck_assert_int_eq(fj_rt_exec_symbol(ex, 0), 3);
		ck_assert_int_eq(fj_rt_exec_value_dims(ex, g->results[1])[1], 4);
		ck_assert_msg(fj_rt_exec_run(ex, in, NULL, out[e], NULL) == FJ_OK, "%s", fj_context_error(ctx));
		fj_rt_exec_info info = fj_rt_exec_info_of(ex);
		ck_assert_int_eq(info.kernels > 0, exs[e] == &fj_rt_nvptx_executor);
		fj_rt_exec_destroy(ex);
	}
	for (int e = 1; e < 3; e++) {
		ck_assert_str_eq(err[e], err[0]);
		for (int k = 0; k < 2; k++) {
			bool placed;
			ck_assert(fj_rt_rel_l2(&out[e][k], &out[0][k], &placed) < 1e-6 && placed);
		}
	}
	ck_assert(strstr(err[0], "symbol N"));
	for (int e = 0; e < 3; e++)
		for (int k = 0; k < 2; k++)
			fj_rt_tensor_free(&out[e][k]);
	fj_rt_tensor_free(&x);
	fj_rt_tensor_free(&y);
	fj_rt_tensor_free(&y2);
	fj_nvptx_emu_destroy(emu);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- the nvptx executor's streams, on a device that queues ---- */

/* The emulator's kernels behind a device with the CUDA driver's stream
 * entries: fake events, and a log of the calls that order work. */
typedef struct rec_dev {
	fj_nvptx_device in;
	void *cur;
	int nev;
	char log[4096];
} rec_dev;

static int stream_a, stream_b;

static const char *sname(const void *s) { return s == &stream_a ? "A" : s == &stream_b ? "B" : s ? "?" : "own"; }

static void rlog(rec_dev *r, const char *fmt, const char *a, long b)
{
	size_t n = strlen(r->log);
	snprintf(r->log + n, sizeof r->log - n, fmt, a, b);
}

static fj_status r_alloc(void *ud, size_t n, uint64_t *p) { rec_dev *r = ud; return r->in.alloc(r->in.ud, n, p); }
static void r_release(void *ud, uint64_t p)
{
	rec_dev *r = ud;
	rlog(r, "free%s%ld ", "", 0);
	r->in.release(r->in.ud, p);
}
static fj_status r_htod(void *ud, uint64_t d, const void *s, size_t n) { rec_dev *r = ud; return r->in.htod(r->in.ud, d, s, n); }
static fj_status r_dtoh(void *ud, void *d, uint64_t s, size_t n)
{
	rec_dev *r = ud;
	rlog(r, "dtoh(%s)%.0ld ", sname(r->cur), 0);
	return r->in.dtoh(r->in.ud, d, s, n);
}
static fj_status r_memset0(void *ud, uint64_t d, size_t n) { rec_dev *r = ud; return r->in.memset0(r->in.ud, d, n); }
static fj_status r_sync(void *ud)
{
	rec_dev *r = ud;
	rlog(r, "sync(%s)%.0ld ", sname(r->cur), 0);
	return FJ_OK;
}
static fj_status r_prepare(void *ud, const fj_graph *g, uint32_t node, void **k, bool *hit)
{
	rec_dev *r = ud;
	return r->in.prepare(r->in.ud, g, node, k, hit);
}
static fj_status r_launch(void *ud, void *k, int v, unsigned grid, unsigned block, unsigned sh, const uint64_t *a,
                          uint32_t n)
{
	rec_dev *r = ud;
	rlog(r, "launch(%s)%.0ld ", sname(r->cur), 0);
	return r->in.launch(r->in.ud, k, v, grid, block, sh, a, n);
}
static fj_status r_event_create(void *ud, void **ev)
{
	rec_dev *r = ud;
	*ev = (void *)(intptr_t)++r->nev;
	return FJ_OK;
}
static fj_status r_event_record(void *ud, void *ev)
{
	rec_dev *r = ud;
	rlog(r, "record(%s:e%ld) ", sname(r->cur), (long)(intptr_t)ev);
	return FJ_OK;
}
static fj_status r_event_elapsed(void *ud, void *e0, void *e1, float *ms)
{
	(void)ud, (void)e0, (void)e1;
	*ms = 1;
	return FJ_OK;
}
static void r_event_destroy(void *ud, void *ev) { (void)ud, (void)ev; }
static void r_set_stream(void *ud, void *s) { ((rec_dev *)ud)->cur = s; }
static fj_status r_event_sync(void *ud, void *ev)
{
	rlog(ud, "evsync(%se%ld) ", "", (long)(intptr_t)ev);
	return FJ_OK;
}
static fj_status r_stream_wait(void *ud, void *ev)
{
	rec_dev *r = ud;
	rlog(r, "wait(%s:e%ld) ", sname(r->cur), (long)(intptr_t)ev);
	return FJ_OK;
}

/* a before b in s (both present) */
static bool before(const char *s, const char *a, const char *b)
{
	const char *x = strstr(s, a), *y = strstr(s, b);
	return x && y && x < y;
}

START_TEST(test_nvptx_streams)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: f32[N,4]) {\n"
	                          "  %a = aten.exp(%x)\n"
	                          "  %s = aten.sum(%a) {dims=[1]}\n"
	                          "  return %s\n"
	                          "}\n");
	fj_graph *g = m->graphs[0];
	fj_nvptx_emu *emu = NULL;
	ck_assert_int_eq(fj_nvptx_emu_create(ctx, &emu), FJ_OK);
	rec_dev r = {.in = fj_nvptx_emu_device(emu)};
	fj_nvptx_device dev = {
		.ud = &r, .name = "recorder", .target = "emu", .emulated = true, .limits = r.in.limits,
		.alloc = r_alloc, .release = r_release,
		.htod = r_htod, .dtoh = r_dtoh, .memset0 = r_memset0, .sync = r_sync, .prepare = r_prepare,
		.launch = r_launch, .event_create = r_event_create, .event_record = r_event_record,
		.event_elapsed = r_event_elapsed, .event_destroy = r_event_destroy, .set_stream = r_set_stream,
		.event_sync = r_event_sync, .stream_wait = r_stream_wait,
	};
	fj_rt_exec_options o = {.device = &dev};
	fj_rt_exec *ex = NULL;
	ck_assert_msg(fj_rt_exec_create(&fj_rt_nvptx_executor, ctx, g, &o, &ex) == FJ_OK, "%s", fj_context_error(ctx));
	fj_rt_tensor x, x5, out[1];
	memset(out, 0, sizeof out);
	make_input(ctx, &x, FJ_DT_F32, 2, 3, 4);
	make_input(ctx, &x5, FJ_DT_F32, 2, 5, 4);
	const fj_rt_tensor *in[1] = {&x}, *in5[1] = {&x5};
	float dres[5];
	uint64_t in_dev[1] = {(uint64_t)(uintptr_t)x.data}, out_dev[1] = {(uint64_t)(uintptr_t)dres};
	/* on stream A, all on the device: queued there, not waited for, an event behind it */
	fj_rt_exec_set_stream(ex, &stream_a);
	ck_assert_int_eq(fj_rt_exec_bind(ex, in, NULL, NULL, 0), FJ_OK);
	r.log[0] = 0;
	ck_assert_int_eq(fj_rt_exec_run(ex, in, in_dev, out, out_dev), FJ_OK);
	ck_assert_msg(strstr(r.log, "launch(A)") && !strstr(r.log, "sync") && !strstr(r.log, "launch(own)") &&
	                  strstr(r.log, "record(A:e1)"), "%s", r.log);
	/* on stream B: B waits for A's work on the device first */
	fj_rt_exec_set_stream(ex, &stream_b);
	r.log[0] = 0;
	ck_assert_int_eq(fj_rt_exec_run(ex, in, in_dev, out, out_dev), FJ_OK);
	ck_assert_msg(before(r.log, "wait(B:e1)", "launch(B)") && !strstr(r.log, "sync") &&
	                  strstr(r.log, "record(B:e1)"), "%s", r.log);
	/* on stream A with a host output: synchronised before returning */
	fj_rt_exec_set_stream(ex, &stream_a);
	r.log[0] = 0;
	ck_assert_int_eq(fj_rt_exec_run(ex, in, in_dev, out, NULL), FJ_OK);
	ck_assert_msg(before(r.log, "wait(A:e1)", "launch(A)") && before(r.log, "launch(A)", "dtoh(A)") &&
	                  strstr(r.log, "sync(A)"), "%s", r.log);
	ck_assert_float_eq_tol(((float *)out[0].data)[0], dres[0], 1e-6);
	/* on fusejit's own stream: it waits for A's event, and is synchronised */
	fj_rt_exec_set_stream(ex, NULL);
	r.log[0] = 0;
	ck_assert_int_eq(fj_rt_exec_run(ex, in, in_dev, out, out_dev), FJ_OK);
	ck_assert_msg(before(r.log, "wait(own:e1)", "launch(own)") && strstr(r.log, "sync(own)") &&
	                  !strstr(r.log, "record"), "%s", r.log);
	/* queued on A again, then new shapes: the host waits before the buffers are freed */
	fj_rt_exec_set_stream(ex, &stream_a);
	ck_assert_int_eq(fj_rt_exec_run(ex, in, in_dev, out, out_dev), FJ_OK);
	r.log[0] = 0;
	ck_assert_int_eq(fj_rt_exec_bind(ex, in5, NULL, NULL, 0), FJ_OK);
	ck_assert_msg(before(r.log, "evsync(e1)", "free"), "%s", r.log);
	/* and before destroy frees them */
	in_dev[0] = (uint64_t)(uintptr_t)x5.data;
	ck_assert_int_eq(fj_rt_exec_run(ex, in5, in_dev, out, out_dev), FJ_OK);
	r.log[0] = 0;
	fj_rt_exec_destroy(ex);
	ck_assert_msg(before(r.log, "evsync(e1)", "free"), "%s", r.log);
	fj_rt_tensor_free(&out[0]);
	fj_rt_tensor_free(&x);
	fj_rt_tensor_free(&x5);
	fj_nvptx_emu_destroy(emu);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_broadcast_symbols)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: f32[N], %y: f32[M]) {\n"
	                          "  %a = aten.add(%x, %y)\n"
	                          "  return %a\n"
	                          "}\n");
	fj_rt_program *p;
	ck_assert_int_eq(fj_rt_program_create(ctx, m->graphs[0], FJ_RT_EXEC_HOST, &p), FJ_OK);
	fj_rt_dimarg ok[2] = {{"N", 5}, {"M", 5}}, one[2] = {{"N", 5}, {"M", 1}}, bad[2] = {{"N", 5}, {"M", 4}};
	const fj_rt_tensor *none[2] = {NULL, NULL};
	ck_assert_int_eq(fj_rt_program_bind(p, none, NULL, ok, 2), FJ_OK);
	ck_assert_int_eq(fj_rt_program_bind(p, none, NULL, one, 2), FJ_OK);
	ck_assert_int_ne(fj_rt_program_bind(p, none, NULL, bad, 2), FJ_OK);
	ck_assert_msg(strstr(fj_context_error(ctx), "t.fj:2:"), "%s", fj_context_error(ctx));
	fj_rt_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_buffer_reuse)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	/* a chain of 8 ops: two buffers alternate; the returned %e8 is the output's */
	fj_module *m = parse(ctx, "graph @main(%x: f32[N]) {\n"
	                          "  %e1 = aten.mul(%x, 0.5)\n"
	                          "  %e2 = aten.add(%e1, 1.0)\n"
	                          "  %e3 = aten.mul(%e2, 0.5)\n"
	                          "  %e4 = aten.add(%e3, 1.0)\n"
	                          "  %e5 = aten.mul(%e4, 0.5)\n"
	                          "  %e6 = aten.add(%e5, %e1)\n"
	                          "  %e7 = aten.mul(%e6, 0.5)\n"
	                          "  %e8 = aten.add(%e7, 1.0)\n"
	                          "  return %e8, %e8, %e3\n"
	                          "}\n");
	fj_rt_program *p;
	ck_assert_int_eq(fj_rt_program_create(ctx, m->graphs[0], FJ_RT_EXEC_HOST, &p), FJ_OK);
	fj_rt_tensor x, out[3] = {0};
	make_input(ctx, &x, FJ_DT_F32, 1, 1000, 0);
	const fj_rt_tensor *in[1] = {&x};
	ck_assert_int_eq(fj_rt_program_bind(p, in, NULL, NULL, 0), FJ_OK);
	uint32_t nbuf;
	size_t bytes = fj_rt_program_plan_bytes(p, &nbuf);
	/* e1 lives to e6, plus two alternating: 3 buffers (e3 and e8 are outputs) */
	ck_assert_uint_le(nbuf, 3);
	ck_assert_uint_le(bytes, 3 * 4000);
	ck_assert_int_eq(fj_rt_program_run(p, in, out), FJ_OK);
	void *keep = out[0].data;
	ck_assert_int_eq(fj_rt_program_run(p, in, out), FJ_OK);
	ck_assert_ptr_eq(out[0].data, keep); /* outputs are reused */
	int bad = 0;
	for (int i = 0; i < 1000; i++) {
		float xv = ((float *)x.data)[i];
		float e1 = xv * 0.5f, e3 = (e1 + 1.0f) * 0.5f, e5 = (e3 + 1.0f) * 0.5f;
		float e8 = (e5 + e1) * 0.5f + 1.0f;
		bad += fabsf(((float *)out[0].data)[i] - e8) > 1e-6f;
		bad += fabsf(((float *)out[1].data)[i] - e8) > 1e-6f;
		bad += fabsf(((float *)out[2].data)[i] - e3) > 1e-6f;
	}
	ck_assert_int_eq(bad, 0);
	ck_assert_ptr_ne(out[0].data, out[1].data); /* returned twice: its own tensor */
	/* a smaller rebind keeps working; an empty one too */
	fj_rt_tensor x0;
	make_input(ctx, &x0, FJ_DT_F32, 1, 0, 0);
	const fj_rt_tensor *in0[1] = {&x0};
	ck_assert_int_eq(fj_rt_program_bind(p, in0, NULL, NULL, 0), FJ_OK);
	ck_assert_int_eq(fj_rt_program_run(p, in0, out), FJ_OK);
	ck_assert_int_eq(out[0].dims[0], 0);
	fj_rt_tensor_free(&x);
	fj_rt_tensor_free(&x0);
	for (int i = 0; i < 3; i++)
		fj_rt_tensor_free(&out[i]);
	fj_rt_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_literal_and_param_outputs)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: i64[2]) {\n"
	                          "  return 7, %x, 2.5, true\n"
	                          "}\n");
	fj_rt_program *p;
	ck_assert_int_eq(fj_rt_program_create(ctx, m->graphs[0], FJ_RT_EXEC_ATEN, &p), FJ_OK);
	fj_rt_tensor x, out[4] = {0};
	make_input(ctx, &x, FJ_DT_I64, 1, 2, 0);
	((int64_t *)x.data)[1] = 42;
	const fj_rt_tensor *in[1] = {&x};
	ck_assert_int_eq(fj_rt_program_bind(p, in, NULL, NULL, 0), FJ_OK);
	ck_assert_int_eq(fj_rt_program_run(p, in, out), FJ_OK);
	ck_assert_int_eq(out[0].rank, 0);
	ck_assert_int_eq(fj_rt_load_f64(out[0].data, out[0].dtype, 0), 7);
	ck_assert_int_eq(((int64_t *)out[1].data)[1], 42);
	ck_assert_ptr_ne(out[1].data, x.data);
	ck_assert_double_eq(fj_rt_load_f64(out[2].data, out[2].dtype, 0), 2.5);
	ck_assert_double_eq(fj_rt_load_f64(out[3].data, out[3].dtype, 0), 1);
	fj_rt_tensor_free(&x);
	for (int i = 0; i < 4; i++)
		fj_rt_tensor_free(&out[i]);
	fj_rt_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ---- --check=f64 (IR.md §5) ---- */

START_TEST(test_f64_err_basics)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	int64_t d = 4;
	fj_rt_tensor a, r;
	fj_rt_tensor_alloc(ctx, &a, FJ_DT_F16, 1, &d);
	fj_rt_tensor_alloc(ctx, &r, FJ_DT_F64, 1, &d);
	double ref[4] = {3, 1e6, 1e-12, NAN}; /* beyond f16's range: inf; below it: 0 */
	memcpy(r.data, ref, sizeof ref);
	fj_rt_store_f64(a.data, FJ_DT_F16, 0, 3);
	fj_rt_store_f64(a.data, FJ_DT_F16, 1, INFINITY);
	fj_rt_store_f64(a.data, FJ_DT_F16, 2, 0);
	fj_rt_store_f64(a.data, FJ_DT_F16, 3, NAN);
	bool placed;
	ck_assert_double_eq(fj_rt_f64_err(&a, &r, 0, &placed), 0);
	ck_assert(placed);
	fj_rt_store_f64(a.data, FJ_DT_F16, 3, 1); /* NaN missing */
	fj_rt_f64_err(&a, &r, 0, &placed);
	ck_assert(!placed);
	fj_rt_store_f64(a.data, FJ_DT_F16, 3, NAN);
	fj_rt_store_f64(a.data, FJ_DT_F16, 0, 3.5); /* 0.5 / (3 + 1) */
	ck_assert_double_eq_tol(fj_rt_f64_err(&a, &r, 1, &placed), 0.125, 1e-12);
	/* a zero reference: the scale alone */
	memset(r.data, 0, 32);
	memset(a.data, 0, 8);
	fj_rt_store_f64(a.data, FJ_DT_F16, 1, 0.25);
	ck_assert_double_eq_tol(fj_rt_f64_err(&a, &r, 0.5, &placed), 0.5, 1e-12);
	ck_assert(isinf(fj_rt_f64_err(&a, &r, 0, &placed)));
	ck_assert_double_eq(fj_rt_f64_tolerance(FJ_DT_F64), 1e-12);
	ck_assert_double_eq(fj_rt_f64_tolerance(FJ_DT_I64), 0);
	fj_rt_tensor_free(&a);
	fj_rt_tensor_free(&r);
	fj_context_destroy(ctx);
}
END_TEST

/* Runs graph g on aten with inputs in (converted to g's f64 parameters). */
static void run_aten(fj_context *ctx, fj_graph *g, const fj_rt_tensor *in, int nin, fj_rt_tensor *out)
{
	fj_rt_tensor conv[4] = {{0}};
	const fj_rt_tensor *ip[4];
	for (int i = 0; i < nin; i++) {
		const fj_type *t = &g->values[g->params[i]].type;
		ip[i] = &in[i];
		if (t->dtype == in[i].dtype)
			continue;
		ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &conv[i], t->dtype, in[i].rank, in[i].dims), FJ_OK);
		for (int64_t k = 0; k < fj_rt_tensor_numel(&in[i]); k++)
			fj_rt_store_f64(conv[i].data, t->dtype, k, fj_rt_load_f64(in[i].data, in[i].dtype, k));
		ip[i] = &conv[i];
	}
	fj_rt_program *p;
	ck_assert_int_eq(fj_rt_program_create(ctx, g, FJ_RT_EXEC_ATEN, &p), FJ_OK);
	ck_assert_msg(fj_rt_program_bind(p, ip, NULL, NULL, 0) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_msg(fj_rt_program_run(p, ip, out) == FJ_OK, "%s", fj_context_error(ctx));
	fj_rt_program_destroy(p);
	for (int i = 0; i < nin; i++)
		fj_rt_tensor_free(&conv[i]);
}

/* The whole measure on y = x @ w + x, with its scale from a perturbed f64
 * run as fusejit-run measures it: aten's f32 result passes by a wide
 * margin; a transposed result, two elements swapped (a wrong index) and a
 * dropped term each fail by a wide margin. */
START_TEST(test_f64_check_wrong_results)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse(ctx, "graph @main(%x: f32[8,8], %w: f32[8,8]) {\n"
	                          "  %h = aten.mm(%x, %w)\n"
	                          "  %y = aten.add(%h, %x)\n"
	                          "  return %y, %h\n"
	                          "}\n");
	fj_graph *g = m->graphs[0], *g64, *gp;
	ck_assert_int_eq(fj_pass_clone_f64(g, "main.f64", &g64), FJ_OK);
	ck_assert_int_eq(g64->values[g64->results[0]].type.dtype, FJ_DT_F64);
	ck_assert_int_eq(fj_pass_clone_perturbed(g64, "main.p", 0x1p-20, 1, &gp), FJ_OK);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	fj_rt_tensor in[2];
	make_input(ctx, &in[0], FJ_DT_F32, 2, 8, 8);
	make_input(ctx, &in[1], FJ_DT_F32, 2, 8, 8);
	for (int k = 0; k < 64; k++) {
		fj_rt_store_f64(in[0].data, FJ_DT_F32, k, sin(k * 0.7));
		fj_rt_store_f64(in[1].data, FJ_DT_F32, k, cos(k * 1.3));
	}
	fj_rt_tensor out[2] = {{0}}, ref[2] = {{0}}, pert[2] = {{0}};
	run_aten(ctx, g, in, 2, out);
	run_aten(ctx, g64, in, 2, ref);
	run_aten(ctx, gp, in, 2, pert);
	double scale = fj_rt_l2_dist(&pert[0], &ref[0]) / 0x1p-20;
	ck_assert(scale > 0);
	bool placed;
	double tol = fj_rt_f64_tolerance(FJ_DT_F32);
	double ok = fj_rt_f64_err(&out[0], &ref[0], scale, &placed);
	ck_assert_msg(placed && ok <= tol / 10, "the f32 result: err %g", ok);
	float *y = out[0].data, keep[64];
	memcpy(keep, y, sizeof keep);
	for (int i = 0; i < 8; i++) /* a wrong transpose */
		for (int j = 0; j < 8; j++)
			y[i * 8 + j] = keep[j * 8 + i];
	double e = fj_rt_f64_err(&out[0], &ref[0], scale, &placed);
	ck_assert_msg(e > 100 * tol, "transposed: err %g", e);
	memcpy(y, keep, sizeof keep); /* a wrong index: two elements swapped */
	y[9] = keep[10];
	y[10] = keep[9];
	e = fj_rt_f64_err(&out[0], &ref[0], scale, &placed);
	ck_assert_msg(e > 100 * tol, "swapped: err %g", e);
	memcpy(y, out[1].data, sizeof keep); /* the term + x dropped */
	e = fj_rt_f64_err(&out[0], &ref[0], scale, &placed);
	ck_assert_msg(e > 100 * tol, "dropped term: err %g", e);
	for (int i = 0; i < 2; i++) {
		fj_rt_tensor_free(&in[i]);
		fj_rt_tensor_free(&out[i]);
		fj_rt_tensor_free(&ref[i]);
		fj_rt_tensor_free(&pert[i]);
	}
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

Suite *suite_runtime(void)
{
	Suite *s = suite_create("runtime");
	TCase *tc = tcase_create("npy");
	tcase_add_test(tc, test_npy_roundtrip);
	tcase_add_test(tc, test_npy_bf16_descr);
	tcase_add_test(tc, test_npy_corrupt);
	tcase_add_test(tc, test_npy_missing_file);
	suite_add_tcase(s, tc);
	tc = tcase_create("values");
	tcase_add_test(tc, test_half_conversions);
	tcase_add_test(tc, test_rel_l2);
	tcase_add_test(tc, test_f64_err_basics);
	suite_add_tcase(s, tc);
	tc = tcase_create("check_f64");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_f64_check_wrong_results);
	suite_add_tcase(s, tc);
	tc = tcase_create("pool");
	tcase_add_test(tc, test_pool);
	tcase_add_test(tc, test_parallel_runner);
	suite_add_tcase(s, tc);
	tc = tcase_create("program");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_bind);
	tcase_add_test(tc, test_broadcast_symbols);
	tcase_add_test(tc, test_buffer_reuse);
	tcase_add_test(tc, test_literal_and_param_outputs);
	tcase_add_test(tc, test_executors);
	tcase_add_test(tc, test_nvptx_streams);
	suite_add_tcase(s, tc);
	return s;
}
