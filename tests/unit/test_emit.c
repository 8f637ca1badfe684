/* test_emit.c -- the reference executor's kernels for the non-pointwise op
 * families (codegen/emit_{reduce,norm,matmul,index,random}.c): one-node
 * graphs parsed from .fj text, compiled by the host JIT, run on small
 * buffers and compared with double-precision references written here.
 *
 * Every run is done twice: once as one part [0, extent), once split into
 * three parts, on outputs poisoned with different bytes; the two must agree
 * bit for bit (the parts cover every output element, disjointly). */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "backend_host/host.h"
#include "codegen/cg.h"
#include "frontend/frontend.h"
#include "test.h"

/* ---- dtype conversions (the stored values) ---- */

static uint16_t bf16_from(double d)
{
	float f = (float)d;
	uint32_t u;
	memcpy(&u, &f, 4);
	if (isnan(f))
		return 0x7fc0;
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static double bf16_to(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void put(fj_dtype dt, void *p, int64_t i, double v)
{
	switch (dt) {
	case FJ_DT_F64: ((double *)p)[i] = v; break;
	case FJ_DT_F32: ((float *)p)[i] = (float)v; break;
	case FJ_DT_F16: ((_Float16 *)p)[i] = (_Float16)v; break;
	case FJ_DT_BF16: ((uint16_t *)p)[i] = bf16_from(v); break;
	case FJ_DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
	case FJ_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	case FJ_DT_I16: ((int16_t *)p)[i] = (int16_t)v; break;
	case FJ_DT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	case FJ_DT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
	case FJ_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
	default: ck_abort_msg("dtype");
	}
}

static double get(fj_dtype dt, const void *p, int64_t i)
{
	switch (dt) {
	case FJ_DT_F64: return ((const double *)p)[i];
	case FJ_DT_F32: return ((const float *)p)[i];
	case FJ_DT_F16: return (double)((const _Float16 *)p)[i];
	case FJ_DT_BF16: return bf16_to(((const uint16_t *)p)[i]);
	case FJ_DT_I64: return (double)((const int64_t *)p)[i];
	case FJ_DT_I32: return ((const int32_t *)p)[i];
	case FJ_DT_I16: return ((const int16_t *)p)[i];
	case FJ_DT_I8: return ((const int8_t *)p)[i];
	case FJ_DT_U8: return ((const uint8_t *)p)[i];
	case FJ_DT_BOOL: return ((const uint8_t *)p)[i];
	default: ck_abort_msg("dtype"); return 0;
	}
}

/* Rounds v to dtype dt. */
static double rnd(fj_dtype dt, double v)
{
	uint64_t buf;
	put(dt, &buf, 0, v);
	return get(dt, &buf, 0);
}

/* ---- the harness ---- */

#define MAXT 16

typedef struct run {
	fj_context *ctx;
	fj_module *m;
	fj_graph *g;
	uint32_t node;
	fj_host_kernel k;
	uint32_t nparams, nres;
	double *in[MAXT];     /* values per graph parameter (editable before exec) */
	int64_t in_n[MAXT];
	double *out[MAXT];    /* values per node result, after exec */
	int64_t out_n[MAXT];
	int32_t status;
	double ms;            /* time of the one-part run */
} run;

static uint64_t lcg_state = 0x12345678;
static double urand(void) /* [0, 1) */
{
	lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg_state >> 11) * 0x1.0p-53;
}

static int64_t numel(const fj_type *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->dims[i];
	return n;
}

/* Parses src (one graph whose last node is the one under test), compiles
 * that node; fills the parameters with random values of their dtype
 * (floats in [-1, 1), integers in [0, 10)). */
static void run_init(run *r, const char *src)
{
	memset(r, 0, sizeof *r);
	r->ctx = fj_context_create(NULL, NULL);
	fj_status st = fj_parse_module(r->ctx, src, strlen(src), "t.fj", &r->m);
	ck_assert_msg(st == FJ_OK, "parse failed: %s\n%s", fj_context_error(r->ctx), src);
	r->g = r->m->graphs[0];
	ck_assert_uint_ge(r->g->nnodes, 1);
	r->node = r->g->nnodes - 1;
	st = fj_host_compile_nodes(r->ctx, r->g, &r->node, 1, &r->k, NULL);
	ck_assert_msg(st == FJ_OK, "compile failed: %s\n%s", fj_context_error(r->ctx), src);
	r->nparams = r->g->nparams;
	for (uint32_t i = 0; i < r->nparams; i++) {
		const fj_type *t = &r->g->values[r->g->params[i]].type;
		r->in_n[i] = numel(t);
		r->in[i] = calloc((size_t)r->in_n[i] + 1, sizeof(double));
		for (int64_t j = 0; j < r->in_n[i]; j++)
			r->in[i][j] = fj_dtype_is_float(t->dtype) ? rnd(t->dtype, 2 * urand() - 1)
			                                           : (double)(int64_t)(10 * urand());
	}
	const fj_node *n = &r->g->nodes[r->node];
	r->nres = n->nres;
	for (uint32_t j = 0; j < n->nres; j++) {
		r->out_n[j] = numel(&r->g->values[n->res[j]].type);
		r->out[j] = calloc((size_t)r->out_n[j] + 1, sizeof(double));
	}
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs the node with the kernel split into `parts` parts; outputs poisoned
 * with byte `poison` first. Returns the status; bufs receive the results. */
static int32_t exec_parts(run *r, int parts, int poison, void **bufs, double *ms)
{
	const fj_node *n = &r->g->nodes[r->node];
	void *ptrs[2 * MAXT] = {0};
	int64_t dims[8 * 2 * MAXT];
	int nd = 0;
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_vid v = n->opnds[i];
		if (v == FJ_NOVAL)
			continue;
		const fj_value *val = &r->g->values[v];
		for (int d = 0; d < val->type.rank; d++)
			dims[nd++] = val->type.dims[d];
		if (val->kind != FJ_VK_PARAM)
			continue;
		uint32_t p = val->def;
		void *buf = calloc((size_t)r->in_n[p] + 1, 8);
		for (int64_t j = 0; j < r->in_n[p]; j++)
			put(val->type.dtype, buf, j, r->in[p][j]);
		ptrs[i] = buf;
	}
	for (uint32_t j = 0; j < n->nres; j++) {
		const fj_value *val = &r->g->values[n->res[j]];
		for (int d = 0; d < val->type.rank; d++)
			dims[nd++] = val->type.dims[d];
		bufs[j] = malloc((size_t)r->out_n[j] * 8 + 8);
		memset(bufs[j], poison, (size_t)r->out_n[j] * 8 + 8);
		ptrs[n->nopnds + j] = bufs[j];
	}
	const fj_type *pt = &r->g->values[n->res[r->k.par_out]].type;
	int64_t extent = 1;
	for (int d = 0; d < pt->rank; d++)
		if (r->k.par_mask & (1u << d))
			extent *= pt->dims[d];
	int32_t st = 0;
	double t0 = now_ms();
	for (int p = 0; p < parts; p++) {
		int64_t lo = extent * p / parts, hi = extent * (p + 1) / parts;
		if (lo == hi && parts > 1)
			continue;
		int32_t s = r->k.fn(ptrs, dims, lo, hi);
		if (s && !st)
			st = s;
	}
	if (ms)
		*ms = now_ms() - t0;
	for (uint32_t i = 0; i < n->nopnds; i++)
		free(ptrs[i]);
	return st;
}

static void run_exec(run *r)
{
	const fj_node *n = &r->g->nodes[r->node];
	void *b1[MAXT], *b2[MAXT];
	r->status = exec_parts(r, 1, 0xAB, b1, &r->ms);
	int32_t s2 = exec_parts(r, 3, 0xCD, b2, NULL);
	ck_assert_int_eq(r->status, s2);
	for (uint32_t j = 0; j < n->nres; j++) {
		const fj_value *val = &r->g->values[n->res[j]];
		size_t bytes = (size_t)r->out_n[j] * (size_t)fj_dtype_size(val->type.dtype);
		if (r->status == 0)
			ck_assert_msg(memcmp(b1[j], b2[j], bytes) == 0,
			              "result %u differs between a one-part and a three-part run (unwritten or "
			              "overlapping parts)", j);
		for (int64_t i = 0; i < r->out_n[j]; i++)
			r->out[j][i] = get(val->type.dtype, b1[j], i);
		free(b1[j]);
		free(b2[j]);
	}
}

static void run_free(run *r)
{
	for (uint32_t i = 0; i < r->nparams; i++)
		free(r->in[i]);
	for (uint32_t j = 0; j < r->nres; j++)
		free(r->out[j]);
	fj_module_destroy(r->m);
	fj_context_destroy(r->ctx);
}

/* Compares got with want: |got - want| <= atol + rtol * |want|, NaN matching NaN. */
static void near_(const double *got, const double *want, int64_t n, double rtol, double atol, const char *what,
                  int line)
{
	for (int64_t i = 0; i < n; i++) {
		double g = got[i], w = want[i];
		bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= atol + rtol * fabs(w);
		ck_assert_msg(ok, "line %d: %s[%lld] = %.9g, want %.9g", line, what, (long long)i, g, w);
	}
}
#define NEAR(got, want, n, rtol, atol) near_((got), (want), (n), (rtol), (atol), #got, __LINE__)

static double tol_of(fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F64: return 1e-12;
	case FJ_DT_F32: return 2e-6;
	case FJ_DT_F16: return 1e-3;
	case FJ_DT_BF16: return 8e-3;
	default: return 0;
	}
}

static const char *dtn(fj_dtype dt) { return fj_dtype_name(dt); }

/* ---- reference reductions ---- */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_LSE, R_VAR, R_ARGMAX, R_ARGMIN };

/* Reduces x (shape dims[rank]) over mask into out (kept dims in order). */
static void ref_reduce(int kind, const double *x, const int64_t *dims, int rank, uint32_t mask, double corr,
                       double *out, double *mean_out)
{
	int64_t nin = 1, nout = 1, rsz = 1;
	for (int d = 0; d < rank; d++) {
		nin *= dims[d];
		if (mask & (1u << d))
			rsz *= dims[d];
		else
			nout *= dims[d];
	}
	double *acc = calloc((size_t)nout + 1, sizeof(double));
	double *aux = calloc((size_t)nout + 1, sizeof(double));
	int64_t *cnt = calloc((size_t)nout + 1, sizeof(int64_t));
	for (int64_t o = 0; o < nout; o++)
		acc[o] = kind == R_PROD ? 1 : kind == R_MAX || kind == R_LSE ? -INFINITY : kind == R_MIN ? INFINITY : 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int64_t i = 0; i < nin; i++) {
			int64_t rem = i, o = 0, ostride = 1, ridx = 0, rstride = 1;
			for (int d = rank - 1; d >= 0; d--) {
				int64_t c = rem % dims[d];
				rem /= dims[d];
				if (mask & (1u << d)) {
					ridx += c * rstride;
					rstride *= dims[d];
				} else {
					o += c * ostride;
					ostride *= dims[d];
				}
			}
			double v = x[i];
			if (pass == 0) {
				switch (kind) {
				case R_SUM: case R_MEAN: case R_VAR: acc[o] += v; break;
				case R_PROD: acc[o] *= v; break;
				case R_MAX: case R_LSE: if (v > acc[o] || isnan(v)) acc[o] = isnan(acc[o]) ? acc[o] : v; break;
				case R_MIN: if (v < acc[o] || isnan(v)) acc[o] = isnan(acc[o]) ? acc[o] : v; break;
				case R_ARGMAX: case R_ARGMIN: {
					bool better = cnt[o] == 0 ||
					              (isnan(v) && !isnan(acc[o])) ||
					              (kind == R_ARGMAX ? v > acc[o] : v < acc[o]);
					if (better) {
						acc[o] = v;
						aux[o] = (double)ridx;
					}
					cnt[o]++;
					break;
				}
				}
			} else if (kind == R_VAR) {
				double m = acc[o] / (double)rsz;
				aux[o] += (v - m) * (v - m);
			} else if (kind == R_LSE) {
				double m = isinf(acc[o]) ? 0 : acc[o];
				aux[o] += exp(v - m);
			}
		}
	}
	for (int64_t o = 0; o < nout; o++) {
		switch (kind) {
		case R_MEAN: out[o] = acc[o] / (double)rsz; break;
		case R_VAR: {
			double div = (double)rsz - corr;
			out[o] = aux[o] / (div < 0 ? 0 : div);
			if (mean_out)
				mean_out[o] = acc[o] / (double)rsz;
			break;
		}
		case R_LSE: out[o] = log(aux[o]) + (isinf(acc[o]) ? 0 : acc[o]); break;
		case R_ARGMAX: case R_ARGMIN: out[o] = aux[o]; break;
		default: out[o] = acc[o]; break;
		}
	}
	free(acc);
	free(aux);
	free(cnt);
}

/* One reduction case: op over x: dt[3,4,5] (src built here). */
static void check_reduce(const char *op, fj_dtype dt, const char *attrs, int kind, uint32_t mask, double corr,
                         fj_dtype odt)
{
	char src[512];
	bool two = strstr(op, "var_mean") != NULL;
	snprintf(src, sizeof src, "graph @f(%%x: %s[3,4,5]) {\n  %%y%s = %s(%%x) %s\n  return %%y\n}\n", dtn(dt),
	         two ? ", %m" : "", op, attrs);
	run r;
	run_init(&r, src);
	if (kind == R_ARGMAX || kind == R_ARGMIN) { /* ties and a NaN */
		r.in[0][7] = r.in[0][6];
		if (fj_dtype_is_float(dt))
			r.in[0][33] = NAN;
	}
	run_exec(&r);
	ck_assert_int_eq(r.status, 0);
	int64_t dims[3] = {3, 4, 5};
	double want[64], wmean[64];
	ref_reduce(kind, r.in[0], dims, 3, mask, corr, want, wmean);
	for (int64_t i = 0; i < r.out_n[0]; i++)
		want[i] = rnd(odt, want[i]);
	double tol = tol_of(odt);
	if (kind == R_LSE && odt == FJ_DT_F16)
		tol = 2e-3;
	NEAR(r.out[0], want, r.out_n[0], tol, tol * 1e-3);
	if (two) {
		for (int64_t i = 0; i < r.out_n[1]; i++)
			wmean[i] = rnd(odt, wmean[i]);
		NEAR(r.out[1], wmean, r.out_n[1], tol, tol * 1e-3);
	}
	run_free(&r);
}

START_TEST(test_reduce_f32)
{
	fj_dtype F = FJ_DT_F32;
	check_reduce("aten.sum", F, "{dims=[1]}", R_SUM, 2, 0, F);
	check_reduce("aten.sum", F, "{dims=[-1], keepdim=true}", R_SUM, 4, 0, F);
	check_reduce("aten.sum", F, "", R_SUM, 7, 0, F);
	check_reduce("aten.sum", F, "{dims=[0, 2]}", R_SUM, 5, 0, F);
	check_reduce("aten.mean", F, "{dims=[1], keepdim=true}", R_MEAN, 2, 0, F);
	check_reduce("aten.amax", F, "{dims=[1]}", R_MAX, 2, 0, F);
	check_reduce("aten.amin", F, "{dims=[0, -1]}", R_MIN, 5, 0, F);
	check_reduce("aten.prod", F, "{dims=[2]}", R_PROD, 4, 0, F);
	check_reduce("aten.logsumexp", F, "{dims=[1]}", R_LSE, 2, 0, F);
	check_reduce("aten.var", F, "{dims=[1]}", R_VAR, 2, 1, F);
	check_reduce("aten.var", F, "{dims=[0, 2], correction=0, keepdim=true}", R_VAR, 5, 0, F);
	check_reduce("aten.var_mean", F, "{dims=[2], correction=1}", R_VAR, 4, 1, F);
	check_reduce("aten.argmax", F, "{dim=1}", R_ARGMAX, 2, 0, FJ_DT_I64);
	check_reduce("aten.argmin", F, "{dim=-1, keepdim=true}", R_ARGMIN, 4, 0, FJ_DT_I64);
	check_reduce("aten.argmax", F, "", R_ARGMAX, 7, 0, FJ_DT_I64);
	check_reduce("aten.argmin", F, "{keepdim=true}", R_ARGMIN, 7, 0, FJ_DT_I64);
	check_reduce("prims.sum", F, "{dims=[0]}", R_SUM, 1, 0, F);
	check_reduce("prims.amax", F, "{dims=[1, 2]}", R_MAX, 6, 0, F);
	check_reduce("prims.amin", F, "{dims=[1]}", R_MIN, 2, 0, F);
	check_reduce("prims.prod", F, "{dims=[0]}", R_PROD, 1, 0, F);
	check_reduce("prims.var_mean", F, "{dims=[1], correction=0}", R_VAR, 2, 0, F);
	check_reduce("prims.argmax", F, "{dim=2}", R_ARGMAX, 4, 0, FJ_DT_I64);
	check_reduce("prims.argmin", F, "{dim=0}", R_ARGMIN, 1, 0, FJ_DT_I64);
}
END_TEST

START_TEST(test_reduce_dtypes)
{
	fj_dtype fl[3] = {FJ_DT_F64, FJ_DT_F16, FJ_DT_BF16};
	for (int i = 0; i < 3; i++) {
		fj_dtype d = fl[i];
		check_reduce("aten.sum", d, "{dims=[1]}", R_SUM, 2, 0, d);
		check_reduce("aten.mean", d, "{dims=[0, 2]}", R_MEAN, 5, 0, d);
		check_reduce("aten.amax", d, "{dims=[2]}", R_MAX, 4, 0, d);
		check_reduce("aten.logsumexp", d, "{dims=[2]}", R_LSE, 4, 0, d);
		check_reduce("aten.var_mean", d, "{dims=[1], correction=0}", R_VAR, 2, 0, d);
		check_reduce("aten.argmax", d, "{dim=1}", R_ARGMAX, 2, 0, FJ_DT_I64);
	}
	/* f16 summed with dtype=f32 */
	check_reduce("aten.sum", FJ_DT_F16, "{dims=[1], dtype=f32}", R_SUM, 2, 0, FJ_DT_F32);
	/* integers: sum and prod give i64, argmax/amax keep going */
	check_reduce("aten.sum", FJ_DT_I32, "{dims=[1]}", R_SUM, 2, 0, FJ_DT_I64);
	check_reduce("aten.sum", FJ_DT_U8, "", R_SUM, 7, 0, FJ_DT_I64);
	check_reduce("aten.prod", FJ_DT_I64, "{dims=[0]}", R_PROD, 1, 0, FJ_DT_I64);
	check_reduce("aten.amax", FJ_DT_I32, "{dims=[2]}", R_MAX, 4, 0, FJ_DT_I32);
	check_reduce("aten.amin", FJ_DT_I8, "{dims=[0]}", R_MIN, 1, 0, FJ_DT_I8);
	check_reduce("aten.argmax", FJ_DT_I32, "{dim=0}", R_ARGMAX, 1, 0, FJ_DT_I64);
	check_reduce("aten.argmin", FJ_DT_I64, "", R_ARGMIN, 7, 0, FJ_DT_I64);
	check_reduce("prims.sum", FJ_DT_I32, "{dims=[2]}", R_SUM, 4, 0, FJ_DT_I32);
	check_reduce("aten.mean", FJ_DT_I32, "{dims=[1], dtype=f64}", R_MEAN, 2, 0, FJ_DT_F64);
}
END_TEST

/* One-result graph helper: runs src and returns the run (caller frees). */
static void run_src(run *r, const char *src)
{
	run_init(r, src);
	run_exec(r);
}

START_TEST(test_reduce_nan_and_empty)
{
	run r;
	/* amax/amin propagate NaN; logsumexp of -inf rows */
	run_init(&r, "graph @f(%x: f32[2,3]) {\n %y = aten.amax(%x) {dims=[1]}\n return %y\n}\n");
	r.in[0][1] = NAN;
	run_exec(&r);
	ck_assert(isnan(r.out[0][0]));
	ck_assert(!isnan(r.out[0][1]));
	run_free(&r);
	run_init(&r, "graph @f(%x: f32[2,3]) {\n %y = aten.logsumexp(%x) {dims=[1]}\n return %y\n}\n");
	for (int i = 0; i < 3; i++)
		r.in[0][i] = -INFINITY;
	r.in[0][3] = INFINITY;
	run_exec(&r);
	ck_assert(isinf(r.out[0][0]) && r.out[0][0] < 0);
	ck_assert(isinf(r.out[0][1]) && r.out[0][1] > 0);
	run_free(&r);
	/* empty reductions */
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.sum(%x) {dims=[0]}\n return %y\n}\n");
	ck_assert_int_eq(r.status, 0);
	for (int i = 0; i < 3; i++)
		ck_assert(r.out[0][i] == 0);
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.prod(%x) {dims=[0]}\n return %y\n}\n");
	for (int i = 0; i < 3; i++)
		ck_assert(r.out[0][i] == 1);
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.mean(%x) {dims=[0]}\n return %y\n}\n");
	ck_assert(isnan(r.out[0][0]));
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.amax(%x) {dims=[0]}\n return %y\n}\n");
	ck_assert_int_eq(r.status, FJ_KERR_VALUE);
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[3,0]) {\n %y = aten.argmax(%x) {dim=1}\n return %y\n}\n");
	ck_assert_int_eq(r.status, FJ_KERR_VALUE);
	run_free(&r);
	/* ... but nothing to produce is fine */
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.amax(%x) {dims=[1]}\n return %y\n}\n");
	ck_assert_int_eq(r.status, 0);
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[0,3]) {\n %y = aten.sum(%x)\n return %y\n}\n");
	ck_assert(r.out[0][0] == 0);
	run_free(&r);
	/* 0-d input */
	run_init(&r, "graph @f(%x: f32[]) {\n %y = aten.argmax(%x) {dim=0}\n return %y\n}\n");
	run_exec(&r);
	ck_assert(r.out[0][0] == 0);
	run_free(&r);
	run_init(&r, "graph @f(%x: f32[]) {\n %y = aten.sum(%x) {dims=[0]}\n return %y\n}\n");
	run_exec(&r);
	ck_assert(r.out[0][0] == (double)(float)r.in[0][0]);
	run_free(&r);
	/* the chunked path for reductions keeping the last dim: rows longer than a chunk */
	for (int c = 0; c < 2; c++) {
		run_init(&r, c ? "graph @f(%x: f32[3,2,600]) {\n %y = aten.amin(%x) {dims=[0]}\n return %y\n}\n"
		               : "graph @f(%x: f64[3,2,600]) {\n %y = aten.sum(%x) {dims=[0, 1], keepdim=true}\n return %y\n}\n");
		r.in[0][1300] = NAN;
		run_exec(&r);
		int64_t dims[3] = {3, 2, 600};
		double *want = malloc(1200 * sizeof(double));
		ref_reduce(c ? R_MIN : R_SUM, r.in[0], dims, 3, c ? 1 : 3, 0, want, NULL);
		NEAR(r.out[0], want, r.out_n[0], 1e-12, 1e-12);
		free(want);
		run_free(&r);
	}
	/* accuracy: f32 sum accumulates in f64 */
	run_init(&r, "graph @f(%x: f32[100000]) {\n %y = aten.sum(%x)\n return %y\n}\n");
	for (int i = 0; i < 100000; i++)
		r.in[0][i] = i == 0 ? 1e8 : 1.0;
	run_exec(&r);
	ck_assert(r.out[0][0] == 100099999.0 || r.out[0][0] == (double)(float)100099999.0);
	run_free(&r);
}
END_TEST

START_TEST(test_cumsum)
{
	static const struct { const char *src; int dim; fj_dtype odt; } cases[] = {
		{"graph @f(%x: f32[3,4,5]) {\n %y = aten.cumsum(%x) {dim=1}\n return %y\n}\n", 1, FJ_DT_F32},
		{"graph @f(%x: f32[3,4,5]) {\n %y = aten.cumsum(%x) {dim=-1}\n return %y\n}\n", 2, FJ_DT_F32},
		{"graph @f(%x: f64[3,4,5]) {\n %y = prims.cumsum(%x) {dim=0}\n return %y\n}\n", 0, FJ_DT_F64},
		{"graph @f(%x: i32[3,4,5]) {\n %y = aten.cumsum(%x) {dim=2}\n return %y\n}\n", 2, FJ_DT_I64},
		{"graph @f(%x: i32[3,4,5]) {\n %y = prims.cumsum(%x) {dim=1}\n return %y\n}\n", 1, FJ_DT_I32},
		{"graph @f(%x: f16[3,4,5]) {\n %y = aten.cumsum(%x) {dim=2}\n return %y\n}\n", 2, FJ_DT_F16},
		{"graph @f(%x: bf16[3,4,5]) {\n %y = aten.cumsum(%x) {dim=2, dtype=f32}\n return %y\n}\n", 2, FJ_DT_F32},
	};
	for (size_t c = 0; c < FJ_ARRAY_LEN(cases); c++) {
		run r;
		run_src(&r, cases[c].src);
		ck_assert_int_eq(r.status, 0);
		int64_t dims[3] = {3, 4, 5}, st[3] = {20, 5, 1};
		double want[60];
		for (int64_t i = 0; i < 60; i++) {
			int64_t ci = (i / st[cases[c].dim]) % dims[cases[c].dim];
			double s = 0;
			for (int64_t j = 0; j <= ci; j++)
				s += r.in[0][i - (ci - j) * st[cases[c].dim]];
			want[i] = rnd(cases[c].odt, s);
		}
		double tol = tol_of(cases[c].odt);
		NEAR(r.out[0], want, 60, tol, tol);
		run_free(&r);
	}
	run r;
	run_src(&r, "graph @f(%x: f32[]) {\n %y = aten.cumsum(%x) {dim=0}\n return %y\n}\n");
	ck_assert(r.out[0][0] == r.in[0][0]);
	run_free(&r);
	run_src(&r, "graph @f(%x: f32[2,0]) {\n %y = aten.cumsum(%x) {dim=1}\n return %y\n}\n");
	ck_assert_int_eq(r.status, 0);
	run_free(&r);
}
END_TEST

/* ---- normalization ---- */

static void check_softmax(const char *op, fj_dtype dt, const char *attrs, int dim, bool lg, fj_dtype odt)
{
	char src[512];
	snprintf(src, sizeof src, "graph @f(%%x: %s[3,4,5]) {\n  %%y = %s(%%x) %s\n  return %%y\n}\n", dtn(dt), op, attrs);
	run r;
	run_init(&r, src);
	for (int i = 0; i < 60; i++)
		r.in[0][i] = rnd(dt, r.in[0][i] * 8);
	run_exec(&r);
	ck_assert_int_eq(r.status, 0);
	int64_t dims[3] = {3, 4, 5}, st[3] = {20, 5, 1};
	double want[60];
	for (int64_t i = 0; i < 60; i++) {
		int64_t ci = (i / st[dim]) % dims[dim];
		int64_t b = i - ci * st[dim];
		double m = -INFINITY, s = 0;
		for (int64_t j = 0; j < dims[dim]; j++)
			m = fmax(m, r.in[0][b + j * st[dim]]);
		for (int64_t j = 0; j < dims[dim]; j++)
			s += exp(r.in[0][b + j * st[dim]] - m);
		want[i] = rnd(odt, lg ? r.in[0][i] - m - log(s) : exp(r.in[0][i] - m) / s);
	}
	double tol = tol_of(odt);
	NEAR(r.out[0], want, 60, tol, tol * 1e-2);
	run_free(&r);
}

START_TEST(test_softmax)
{
	check_softmax("aten._softmax", FJ_DT_F32, "{dim=1}", 1, false, FJ_DT_F32);
	check_softmax("aten.softmax", FJ_DT_F32, "{dim=-1}", 2, false, FJ_DT_F32);
	check_softmax("aten._log_softmax", FJ_DT_F32, "{dim=0}", 0, true, FJ_DT_F32);
	check_softmax("aten.log_softmax", FJ_DT_F64, "{dim=2}", 2, true, FJ_DT_F64);
	check_softmax("aten._softmax", FJ_DT_F16, "{dim=2}", 2, false, FJ_DT_F16);
	check_softmax("aten._softmax", FJ_DT_F16, "{dim=2, half_to_float=true}", 2, false, FJ_DT_F32);
	check_softmax("aten._log_softmax", FJ_DT_BF16, "{dim=1}", 1, true, FJ_DT_BF16);
	check_softmax("aten.softmax", FJ_DT_F32, "{dim=1, dtype=f64}", 1, false, FJ_DT_F64);
}
END_TEST

START_TEST(test_softmax_backward)
{
	for (int lg = 0; lg < 2; lg++) {
		char src[512];
		snprintf(src, sizeof src,
		         "graph @f(%%g: f32[3,4], %%y: f32[3,4]) {\n  %%d = aten.%s(%%g, %%y) {dim=1, input_dtype=f32}\n"
		         "  return %%d\n}\n", lg ? "_log_softmax_backward_data" : "_softmax_backward_data");
		run r;
		run_src(&r, src);
		double want[12];
		for (int i = 0; i < 3; i++) {
			double s = 0;
			for (int j = 0; j < 4; j++)
				s += lg ? r.in[0][i * 4 + j] : r.in[0][i * 4 + j] * r.in[1][i * 4 + j];
			for (int j = 0; j < 4; j++) {
				double g = r.in[0][i * 4 + j], y = r.in[1][i * 4 + j];
				want[i * 4 + j] = lg ? g - exp(y) * s : y * (g - s);
			}
		}
		NEAR(r.out[0], want, 12, 2e-6, 1e-7);
		run_free(&r);
	}
}
END_TEST

/* Reference layer norm over the last n elements of rows. */
static void ref_layer_norm(const double *x, const double *w, const double *b, int64_t rows, int64_t n, double eps,
                           double *y, double *mean, double *rstd)
{
	for (int64_t i = 0; i < rows; i++) {
		double m = 0, v = 0;
		for (int64_t j = 0; j < n; j++)
			m += x[i * n + j];
		m /= (double)n;
		for (int64_t j = 0; j < n; j++)
			v += (x[i * n + j] - m) * (x[i * n + j] - m);
		double r = 1 / sqrt(v / (double)n + eps);
		for (int64_t j = 0; j < n; j++)
			y[i * n + j] = (x[i * n + j] - m) * r * (w ? w[j] : 1) + (b ? b[j] : 0);
		if (mean) {
			mean[i] = m;
			rstd[i] = r;
		}
	}
}

START_TEST(test_layer_norm)
{
	static const fj_dtype dts[] = {FJ_DT_F32, FJ_DT_F64, FJ_DT_F16, FJ_DT_BF16};
	for (size_t c = 0; c < FJ_ARRAY_LEN(dts); c++) {
		const char *d = dtn(dts[c]);
		char src[512];
		snprintf(src, sizeof src,
		         "graph @f(%%x: %s[2,3,8], %%w: %s[3,8], %%b: %s[3,8]) {\n"
		         "  %%y, %%m, %%r = aten.native_layer_norm(%%x, %%w, %%b) {normalized_shape=[3,8], eps=1e-5}\n"
		         "  return %%y\n}\n", d, d, d);
		run r;
		run_src(&r, src);
		double y[48], m[2], rs[2];
		ref_layer_norm(r.in[0], r.in[1], r.in[2], 2, 24, 1e-5, y, m, rs);
		double tol = tol_of(dts[c]) * 4;
		for (int i = 0; i < 48; i++)
			y[i] = rnd(dts[c], y[i]);
		NEAR(r.out[0], y, 48, tol, tol);
		NEAR(r.out[1], m, 2, tol, tol);
		NEAR(r.out[2], rs, 2, tol, tol);
		run_free(&r);
	}
	run r;
	run_src(&r, "graph @f(%x: f32[4,6]) {\n  %y = aten.layer_norm(%x, none, none) {normalized_shape=[6]}\n  return %y\n}\n");
	double y[24];
	ref_layer_norm(r.in[0], NULL, NULL, 4, 6, 1e-5, y, NULL, NULL);
	NEAR(r.out[0], y, 24, 2e-6, 1e-6);
	run_free(&r);
	/* rms_norm: default eps is the dtype's epsilon */
	static const struct { const char *d; fj_dtype dt; double eps; const char *attrs; bool w; } rc[] = {
		{"f32", FJ_DT_F32, 1.1920928955078125e-07, "", true},
		{"f32", FJ_DT_F32, 1e-3, ", eps=1e-3", false},
		{"f16", FJ_DT_F16, 0.0009765625, "", true},
		{"bf16", FJ_DT_BF16, 0.0078125, "", false},
		{"f64", FJ_DT_F64, 2.220446049250313e-16, "", true},
	};
	for (size_t c = 0; c < FJ_ARRAY_LEN(rc); c++) {
		char src[512];
		snprintf(src, sizeof src,
		         "graph @f(%%x: %s[5,7], %%w: %s[7]) {\n  %%y = aten.rms_norm(%%x, %s) {normalized_shape=[7]%s}\n"
		         "  return %%y\n}\n", rc[c].d, rc[c].d, rc[c].w ? "%w" : "none", rc[c].attrs);
		run_src(&r, src);
		double want[35];
		for (int i = 0; i < 5; i++) {
			double s = 0;
			for (int j = 0; j < 7; j++)
				s += r.in[0][i * 7 + j] * r.in[0][i * 7 + j];
			double q = 1 / sqrt(s / 7 + rc[c].eps);
			for (int j = 0; j < 7; j++) {
				double v = r.in[0][i * 7 + j] * q;
				if (rc[c].w)
					v = rnd(rc[c].dt, v) * r.in[1][j];
				want[i * 7 + j] = rnd(rc[c].dt, v);
			}
		}
		double tol = tol_of(rc[c].dt) * 2;
		NEAR(r.out[0], want, 35, tol, tol);
		run_free(&r);
	}
}
END_TEST

START_TEST(test_layer_norm_backward)
{
	run r;
	run_init(&r, "graph @f(%dy: f32[3,2,5], %x: f32[3,2,5], %m: f32[3,1,1], %rs: f32[3,1,1], %w: f32[2,5], %b: f32[2,5]) {\n"
	             "  %gi, %gw, %gb = aten.native_layer_norm_backward(%dy, %x, %m, %rs, %w, %b) "
	             "{normalized_shape=[2,5], output_mask=[true, true, true]}\n  return %gi, %gw, %gb\n}\n");
	/* consistent mean/rstd */
	double y[30], m[3], rs[3];
	ref_layer_norm(r.in[1], NULL, NULL, 3, 10, 1e-5, y, m, rs);
	for (int i = 0; i < 3; i++) {
		r.in[2][i] = rnd(FJ_DT_F32, m[i]);
		r.in[3][i] = rnd(FJ_DT_F32, rs[i]);
	}
	run_exec(&r);
	double gi[30], gw[10] = {0}, gb[10] = {0};
	for (int i = 0; i < 3; i++) {
		double mg = 0, mgx = 0, xh[10], g[10];
		for (int j = 0; j < 10; j++) {
			xh[j] = (r.in[1][i * 10 + j] - r.in[2][i]) * r.in[3][i];
			g[j] = r.in[0][i * 10 + j] * r.in[4][j];
			mg += g[j] / 10;
			mgx += g[j] * xh[j] / 10;
			gw[j] += r.in[0][i * 10 + j] * xh[j];
			gb[j] += r.in[0][i * 10 + j];
		}
		for (int j = 0; j < 10; j++)
			gi[i * 10 + j] = r.in[3][i] * (g[j] - mg - xh[j] * mgx);
	}
	NEAR(r.out[0], gi, 30, 1e-5, 1e-6);
	NEAR(r.out[1], gw, 10, 1e-5, 1e-6);
	NEAR(r.out[2], gb, 10, 1e-5, 1e-6);
	run_free(&r);
}
END_TEST

/* Batch norm reference over x [N, C, S]. */
static void ref_bn_stats(const double *x, int64_t n, int64_t c, int64_t s, double *mean, double *var)
{
	for (int64_t ch = 0; ch < c; ch++) {
		double m = 0, v = 0;
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < s; j++)
				m += x[(i * c + ch) * s + j];
		m /= (double)(n * s);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < s; j++)
				v += (x[(i * c + ch) * s + j] - m) * (x[(i * c + ch) * s + j] - m);
		mean[ch] = m;
		var[ch] = v / (double)(n * s);
	}
}

START_TEST(test_batch_norm)
{
	for (int train = 0; train < 2; train++) {
		for (int functional = 0; functional < 2; functional++) {
			char src[640];
			snprintf(src, sizeof src,
			         "graph @f(%%x: f32[2,3,4], %%w: f32[3], %%b: f32[3], %%rm: f32[3], %%rv: f32[3]) {\n"
			         "  %%y, %%sm, %%sr%s = aten.%s(%%x, %%w, %%b, %%rm, %%rv) {training=%s, momentum=0.1, eps=1e-5}\n"
			         "  return %%y\n}\n", functional ? ", %nm, %nv" : "",
			         functional ? "_native_batch_norm_legit_functional" : "native_batch_norm",
			         train ? "true" : "false");
			run r;
			run_init(&r, src);
			for (int i = 0; i < 3; i++)
				r.in[4][i] = rnd(FJ_DT_F32, 0.5 + urand());
			run_exec(&r);
			ck_assert_int_eq(r.status, 0);
			double mean[3], var[3], y[24];
			ref_bn_stats(r.in[0], 2, 3, 4, mean, var);
			for (int i = 0; i < 24; i++) {
				int ch = (i / 4) % 3;
				double mu = train ? mean[ch] : r.in[3][ch], vv = train ? var[ch] : r.in[4][ch];
				y[i] = (r.in[0][i] - mu) / sqrt(vv + 1e-5) * r.in[1][ch] + r.in[2][ch];
			}
			NEAR(r.out[0], y, 24, 1e-5, 1e-6);
			if (train) {
				ck_assert_int_eq(r.out_n[1], 3);
				double rs[3];
				for (int i = 0; i < 3; i++)
					rs[i] = 1 / sqrt(var[i] + 1e-5);
				NEAR(r.out[1], mean, 3, 1e-6, 1e-7);
				NEAR(r.out[2], rs, 3, 1e-6, 1e-7);
			} else {
				ck_assert_int_eq(r.out_n[1], 0);
			}
			if (functional) {
				double nm[3], nv[3];
				for (int i = 0; i < 3; i++) {
					nm[i] = train ? 0.9 * r.in[3][i] + 0.1 * mean[i] : r.in[3][i];
					nv[i] = train ? 0.9 * r.in[4][i] + 0.1 * var[i] * 8 / 7 : r.in[4][i];
				}
				NEAR(r.out[3], nm, 3, 1e-6, 1e-7);
				NEAR(r.out[4], nv, 3, 1e-6, 1e-7);
			}
			run_free(&r);
		}
	}
	/* no weight, no bias, no running stats */
	run r;
	run_src(&r, "graph @f(%x: f64[4,2]) {\n  %y, %sm, %sr = aten.native_batch_norm(%x, none, none, none, none) "
	            "{training=true, momentum=0.1, eps=1e-5}\n  return %y\n}\n");
	double mean[2], var[2], y[8];
	ref_bn_stats(r.in[0], 4, 2, 1, mean, var);
	for (int i = 0; i < 8; i++)
		y[i] = (r.in[0][i] - mean[i % 2]) / sqrt(var[i % 2] + 1e-5);
	NEAR(r.out[0], y, 8, 1e-12, 1e-12);
	run_free(&r);
}
END_TEST

START_TEST(test_batch_norm_backward)
{
	for (int train = 0; train < 2; train++) {
		char src[640];
		snprintf(src, sizeof src,
		         "graph @f(%%dy: f32[2,3,4], %%x: f32[2,3,4], %%w: f32[3], %%rm: f32[3], %%rv: f32[3], %%sm: f32[3], "
		         "%%si: f32[3]) {\n  %%gi, %%gw, %%gb = aten.native_batch_norm_backward(%%dy, %%x, %%w, %%rm, %%rv, %%sm, %%si) "
		         "{train=%s, eps=1e-5, output_mask=[true, true, true]}\n  return %%gi\n}\n", train ? "true" : "false");
		run r;
		run_init(&r, src);
		double mean[3], var[3];
		ref_bn_stats(r.in[1], 2, 3, 4, mean, var);
		for (int i = 0; i < 3; i++) {
			r.in[4][i] = rnd(FJ_DT_F32, 0.5 + urand());
			r.in[5][i] = rnd(FJ_DT_F32, mean[i]);
			r.in[6][i] = rnd(FJ_DT_F32, 1 / sqrt(var[i] + 1e-5));
		}
		run_exec(&r);
		double gi[24], gw[3], gb[3];
		for (int ch = 0; ch < 3; ch++) {
			double mu = train ? r.in[5][ch] : r.in[3][ch];
			double is = train ? r.in[6][ch] : 1 / sqrt(r.in[4][ch] + 1e-5);
			double sd = 0, dot = 0;
			for (int i = 0; i < 24; i++)
				if ((i / 4) % 3 == ch) {
					sd += r.in[0][i];
					dot += r.in[0][i] * (r.in[1][i] - mu);
				}
			for (int i = 0; i < 24; i++)
				if ((i / 4) % 3 == ch) {
					double xh = (r.in[1][i] - mu) * is;
					gi[i] = train ? r.in[2][ch] * is * (r.in[0][i] - sd / 8 - xh * dot * is / 8)
					              : r.in[0][i] * is * r.in[2][ch];
				}
			gw[ch] = dot * is;
			gb[ch] = sd;
		}
		NEAR(r.out[0], gi, 24, 1e-5, 1e-6);
		NEAR(r.out[1], gw, 3, 1e-5, 1e-6);
		NEAR(r.out[2], gb, 3, 1e-5, 1e-6);
		run_free(&r);
	}
}
END_TEST

START_TEST(test_nll_loss)
{
	for (int red = 0; red < 3; red++) {
		for (int wt = 0; wt < 2; wt++) {
			char src[512];
			snprintf(src, sizeof src,
			         "graph @f(%%x: f32[5,4], %%t: i64[5], %%w: f32[4]) {\n"
			         "  %%o, %%tw = aten.nll_loss_forward(%%x, %%t, %s) {reduction=%d, ignore_index=2}\n"
			         "  return %%o\n}\n", wt ? "%w" : "none", red);
			run r;
			run_init(&r, src);
			static const double tg[5] = {0, 3, 2, 1, 3};
			memcpy(r.in[1], tg, sizeof tg);
			run_exec(&r);
			ck_assert_int_eq(r.status, 0);
			double outs[5], sum = 0, tw = 0;
			for (int i = 0; i < 5; i++) {
				int t = (int)tg[i];
				double w = t == 2 ? 0 : wt ? r.in[2][t] : 1;
				outs[i] = t == 2 ? 0 : -r.in[0][i * 4 + t] * w;
				sum += outs[i];
				tw += w;
			}
			if (red == 0) {
				NEAR(r.out[0], outs, 5, 1e-6, 1e-7);
				ck_assert(r.out[1][0] == 0);
			} else {
				double want = red == 1 ? sum / tw : sum;
				NEAR(r.out[0], &want, 1, 1e-6, 1e-7);
				NEAR(r.out[1], &tw, 1, 1e-6, 1e-7);
			}
			run_free(&r);
			/* backward */
			snprintf(src, sizeof src,
			         "graph @f(%%g: f32[%s], %%x: f32[5,4], %%t: i64[5], %%w: f32[4], %%tw: f32[]) {\n"
			         "  %%gi = aten.nll_loss_backward(%%g, %%x, %%t, %s, %%tw) {reduction=%d, ignore_index=2}\n"
			         "  return %%gi\n}\n", red == 0 ? "5" : "", wt ? "%w" : "none", red);
			run_init(&r, src);
			memcpy(r.in[2], tg, sizeof tg);
			r.in[4][0] = 2.5;
			run_exec(&r);
			ck_assert_int_eq(r.status, 0);
			double gi[20] = {0};
			for (int i = 0; i < 5; i++) {
				int t = (int)tg[i];
				if (t == 2)
					continue;
				double g = red == 0 ? r.in[0][i] : red == 1 ? r.in[0][0] / 2.5 : r.in[0][0];
				gi[i * 4 + t] = -(wt ? r.in[3][t] : 1) * g;
			}
			NEAR(r.out[0], gi, 20, 1e-6, 1e-7);
			run_free(&r);
		}
	}
	/* 1-d self; target out of range */
	run r;
	run_init(&r, "graph @f(%x: f32[4], %t: i64[]) {\n  %o, %tw = aten.nll_loss_forward(%x, %t, none) {reduction=1}\n"
	             "  return %o\n}\n");
	r.in[1][0] = 3;
	run_exec(&r);
	ck_assert(r.out[0][0] == -(double)(float)r.in[0][3]);
	r.in[1][0] = 4;
	run_exec(&r);
	ck_assert_int_eq(r.status, FJ_KERR_INDEX);
	r.in[1][0] = -1;
	run_exec(&r);
	ck_assert_int_eq(r.status, FJ_KERR_INDEX);
	run_free(&r);
}
END_TEST

/* ---- matrix products ---- */

/* out[b][m][n] = sum_k a[b][m][k] * b[b][k][n] with a, b batch strides. */
static void ref_mm(const double *a, const double *b, double *o, int64_t bt, int64_t m, int64_t k, int64_t n,
                   int64_t sab, int64_t sbb)
{
	for (int64_t q = 0; q < bt; q++)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				for (int64_t l = 0; l < k; l++)
					s += a[q * sab + i * k + l] * b[q * sbb + l * n + j];
				o[(q * m + i) * n + j] = s;
			}
}

static void check_mm(fj_dtype dt, int64_t m, int64_t k, int64_t n)
{
	char src[512];
	snprintf(src, sizeof src, "graph @f(%%a: %s[%lld,%lld], %%b: %s[%lld,%lld]) {\n  %%y = aten.mm(%%a, %%b)\n  return %%y\n}\n",
	         dtn(dt), (long long)m, (long long)k, dtn(dt), (long long)k, (long long)n);
	run r;
	run_src(&r, src);
	ck_assert_int_eq(r.status, 0);
	double *want = malloc((size_t)(m * n + 1) * sizeof(double));
	ref_mm(r.in[0], r.in[1], want, 1, m, k, n, 0, 0);
	for (int64_t i = 0; i < m * n; i++)
		want[i] = rnd(dt, want[i]);
	double tol = tol_of(dt);
	NEAR(r.out[0], want, m * n, tol, tol);
	free(want);
	run_free(&r);
}

START_TEST(test_mm)
{
	check_mm(FJ_DT_F32, 5, 7, 9);
	check_mm(FJ_DT_F32, 67, 130, 300);
	check_mm(FJ_DT_F32, 1, 1, 1);
	check_mm(FJ_DT_F32, 3, 0, 4);
	check_mm(FJ_DT_F64, 9, 17, 33);
	check_mm(FJ_DT_F16, 6, 40, 10);
	check_mm(FJ_DT_BF16, 6, 40, 10);
	check_mm(FJ_DT_I64, 5, 6, 7);
	check_mm(FJ_DT_I32, 4, 3, 2);
	run r;
	run_src(&r, "graph @f(%a: f32[0,3], %b: f32[3,4]) {\n  %y = aten.mm(%a, %b)\n  return %y\n}\n");
	ck_assert_int_eq(r.status, 0);
	run_free(&r);
}
END_TEST

START_TEST(test_bmm_matmul)
{
	run r;
	run_src(&r, "graph @f(%a: f32[3,5,6], %b: f32[3,6,7]) {\n  %y = aten.bmm(%a, %b)\n  return %y\n}\n");
	double want[105];
	ref_mm(r.in[0], r.in[1], want, 3, 5, 6, 7, 30, 42);
	NEAR(r.out[0], want, 105, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[3,5,6], %b: f32[3,6,7]) {\n  %y = prims.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 3, 5, 6, 7, 30, 42);
	NEAR(r.out[0], want, 105, 2e-6, 1e-6);
	run_free(&r);
	/* torch.matmul: batch broadcasting [2,1,3,4] x [5,4,6] -> [2,5,3,6] */
	run_src(&r, "graph @f(%a: f32[2,1,3,4], %b: f32[5,4,6]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ck_assert_int_eq(r.out_n[0], 180);
	double w2[180];
	for (int p = 0; p < 2; p++)
		for (int q = 0; q < 5; q++)
			ref_mm(r.in[0] + p * 12, r.in[1] + q * 24, w2 + (p * 5 + q) * 18, 1, 3, 4, 6, 0, 0);
	NEAR(r.out[0], w2, 180, 2e-6, 1e-6);
	run_free(&r);
	/* 1-d operands */
	run_src(&r, "graph @f(%a: f32[7], %b: f32[7]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 1, 1, 7, 1, 0, 0);
	NEAR(r.out[0], want, 1, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[13], %b: f32[13,5]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 1, 1, 13, 5, 0, 0);
	NEAR(r.out[0], want, 5, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[6,21], %b: f32[21]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 1, 6, 21, 1, 0, 0);
	NEAR(r.out[0], want, 6, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[3,6,21], %b: f32[21]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 1, 18, 21, 1, 0, 0);
	NEAR(r.out[0], want, 18, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[4], %b: f32[2,4,3]) {\n  %y = aten.matmul(%a, %b)\n  return %y\n}\n");
	ref_mm(r.in[0], r.in[1], want, 2, 1, 4, 3, 0, 12);
	NEAR(r.out[0], want, 6, 2e-6, 1e-6);
	run_free(&r);
}
END_TEST

START_TEST(test_addmm_linear)
{
	run r;
	/* beta = 0 ignores self, NaN included */
	run_init(&r, "graph @f(%c: f32[5,6], %a: f32[5,3], %b: f32[3,6]) {\n"
	             "  %y = aten.addmm(%c, %a, %b) {beta=0, alpha=2}\n  return %y\n}\n");
	r.in[0][4] = NAN;
	run_exec(&r);
	double want[400], p[400];
	ref_mm(r.in[1], r.in[2], p, 1, 5, 3, 6, 0, 0);
	for (int i = 0; i < 30; i++)
		want[i] = 2 * p[i];
	NEAR(r.out[0], want, 30, 2e-6, 1e-6);
	run_free(&r);
	/* broadcast self [6], beta 0.5 */
	run_src(&r, "graph @f(%c: f32[6], %a: f32[5,3], %b: f32[3,6]) {\n"
	            "  %y = aten.addmm(%c, %a, %b) {beta=0.5}\n  return %y\n}\n");
	ref_mm(r.in[1], r.in[2], p, 1, 5, 3, 6, 0, 0);
	for (int i = 0; i < 30; i++)
		want[i] = p[i] + 0.5 * r.in[0][i % 6];
	NEAR(r.out[0], want, 30, 2e-6, 1e-6);
	run_free(&r);
	run_src(&r, "graph @f(%c: f32[5,1], %a: f32[5,3], %b: f32[3,6]) {\n"
	            "  %y = aten.addmm(%c, %a, %b)\n  return %y\n}\n");
	ref_mm(r.in[1], r.in[2], p, 1, 5, 3, 6, 0, 0);
	for (int i = 0; i < 30; i++)
		want[i] = p[i] + r.in[0][i / 6];
	NEAR(r.out[0], want, 30, 2e-6, 1e-6);
	run_free(&r);
	/* linear, 3-d input, with and without bias, and K not a multiple of 8 */
	static const fj_dtype dts[] = {FJ_DT_F32, FJ_DT_F64, FJ_DT_F16, FJ_DT_BF16};
	for (size_t c = 0; c < FJ_ARRAY_LEN(dts); c++) {
		for (int bias = 0; bias < 2; bias++) {
			const char *d = dtn(dts[c]);
			char src[512];
			snprintf(src, sizeof src, "graph @f(%%x: %s[2,5,19], %%w: %s[7,19], %%b: %s[7]) {\n"
			         "  %%y = aten.linear(%%x, %%w, %s)\n  return %%y\n}\n", d, d, d, bias ? "%b" : "none");
			run_src(&r, src);
			for (int i = 0; i < 10; i++)
				for (int j = 0; j < 7; j++) {
					double s = bias ? r.in[2][j] : 0;
					for (int l = 0; l < 19; l++)
						s += r.in[0][i * 19 + l] * r.in[1][j * 19 + l];
					want[i * 7 + j] = rnd(dts[c], s);
				}
			double tol = tol_of(dts[c]);
			NEAR(r.out[0], want, 70, tol, tol);
			run_free(&r);
		}
	}
}
END_TEST

START_TEST(test_mm_speed)
{
	/* Not a benchmark: a sanity bound on the blocked kernels (and a number to read). */
	run r;
	run_src(&r, "graph @f(%a: f32[256,256], %b: f32[256,256]) {\n  %y = aten.mm(%a, %b)\n  return %y\n}\n");
	double mm_ms = r.ms;
	run_free(&r);
	run_src(&r, "graph @f(%a: f32[256,256], %b: f32[256,256]) {\n  %y = aten.linear(%a, %b)\n  return %y\n}\n");
	fprintf(stderr, "emit: 256^3 f32 mm %.2f ms, linear %.2f ms (one thread)\n", mm_ms, r.ms);
	ck_assert(mm_ms < 1000 && r.ms < 1000);
	run_free(&r);
}
END_TEST

/* ---- indexing ---- */

START_TEST(test_take)
{
	static const char *idt[2] = {"i64", "i32"};
	for (int c = 0; c < 2; c++) {
		char src[512];
		snprintf(src, sizeof src, "graph @f(%%w: f32[10,4], %%i: %s[2,3]) {\n  %%y = aten.embedding(%%w, %%i)\n"
		         "  return %%y\n}\n", idt[c]);
		run r;
		run_init(&r, src);
		static const double ix[6] = {0, 9, 3, 3, 1, 7};
		memcpy(r.in[1], ix, sizeof ix);
		run_exec(&r);
		ck_assert_int_eq(r.status, 0);
		double want[24];
		for (int i = 0; i < 6; i++)
			for (int j = 0; j < 4; j++)
				want[i * 4 + j] = r.in[0][(int)ix[i] * 4 + j];
		NEAR(r.out[0], want, 24, 0, 0);
		r.in[1][2] = 10;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		r.in[1][2] = -1;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		run_free(&r);
	}
	/* index_select at dim 1, prims.take with a 2-d index at dim 1 */
	run r;
	run_init(&r, "graph @f(%x: f16[3,5,2], %i: i64[4]) {\n  %y = aten.index_select(%x, %i) {dim=1}\n  return %y\n}\n");
	static const double i4[4] = {4, 0, 0, 2};
	memcpy(r.in[1], i4, sizeof i4);
	run_exec(&r);
	double want[64];
	for (int a = 0; a < 3; a++)
		for (int i = 0; i < 4; i++)
			for (int b = 0; b < 2; b++)
				want[(a * 4 + i) * 2 + b] = r.in[0][(a * 5 + (int)i4[i]) * 2 + b];
	NEAR(r.out[0], want, 24, 0, 0);
	run_free(&r);
	run_init(&r, "graph @f(%x: f32[3,5,2], %i: i32[2,2]) {\n  %y = prims.take(%x, %i) {dim=-2}\n  return %y\n}\n");
	memcpy(r.in[1], i4, sizeof i4);
	run_exec(&r);
	ck_assert_int_eq(r.out_n[0], 24);
	for (int a = 0; a < 3; a++)
		for (int i = 0; i < 4; i++)
			for (int b = 0; b < 2; b++)
				want[(a * 4 + i) * 2 + b] = r.in[0][(a * 5 + (int)i4[i]) * 2 + b];
	NEAR(r.out[0], want, 24, 0, 0);
	r.in[1][3] = 5;
	run_exec(&r);
	ck_assert_int_eq(r.status, FJ_KERR_INDEX);
	run_free(&r);
	run_init(&r, "graph @f(%x: f32[6], %i: i64[]) {\n  %y = aten.index_select(%x, %i) {dim=0}\n  return %y\n}\n");
	r.in[1][0] = 5;
	run_exec(&r);
	ck_assert(r.out[0][0] == r.in[0][5]);
	run_free(&r);
}
END_TEST

START_TEST(test_gather)
{
	for (int dim = 0; dim < 2; dim++) {
		char src[512];
		snprintf(src, sizeof src, "graph @f(%%x: f32[4,5], %%i: i64[3,2]) {\n  %%y = aten.gather(%%x, %%i) {dim=%d}\n"
		         "  return %%y\n}\n", dim == 0 ? 0 : -1);
		run r;
		run_init(&r, src);
		for (int i = 0; i < 6; i++)
			r.in[1][i] = (double)(int)(urand() * (dim ? 5 : 4));
		run_exec(&r);
		ck_assert_int_eq(r.status, 0);
		double want[6];
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 2; j++) {
				int id = (int)r.in[1][i * 2 + j];
				want[i * 2 + j] = dim ? r.in[0][i * 5 + id] : r.in[0][id * 5 + j];
			}
		NEAR(r.out[0], want, 6, 0, 0);
		r.in[1][5] = dim ? 5 : 4;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		run_free(&r);
	}
	run r;
	run_init(&r, "graph @f(%x: f32[2,3,4], %i: i32[2,2,4]) {\n  %y = prims.gather(%x, %i) {dim=1}\n  return %y\n}\n");
	for (int i = 0; i < 16; i++)
		r.in[1][i] = (double)(int)(urand() * 3);
	run_exec(&r);
	double want[16];
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 2; b++)
			for (int c = 0; c < 4; c++)
				want[(a * 2 + b) * 4 + c] = r.in[0][(a * 3 + (int)r.in[1][(a * 2 + b) * 4 + c]) * 4 + c];
	NEAR(r.out[0], want, 16, 0, 0);
	run_free(&r);
}
END_TEST

START_TEST(test_scatter_add)
{
	for (int prims = 0; prims < 2; prims++) {
		char src[512];
		snprintf(src, sizeof src, "graph @f(%%x: f32[4,5], %%i: i64[3,4], %%s: f32[3,5]) {\n"
		         "  %%y = %s.scatter_add(%%x, %%i, %%s) {dim=0}\n  return %%y\n}\n", prims ? "prims" : "aten");
		run r;
		run_init(&r, src);
		for (int i = 0; i < 12; i++)
			r.in[1][i] = (double)(int)(urand() * 4);
		run_exec(&r);
		ck_assert_int_eq(r.status, 0);
		double want[20];
		memcpy(want, r.in[0], sizeof want);
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 4; j++)
				want[(int)r.in[1][i * 4 + j] * 5 + j] += r.in[2][i * 5 + j];
		NEAR(r.out[0], want, 20, 1e-6, 1e-7);
		r.in[1][7] = 4;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		r.in[1][7] = -2;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		run_free(&r);
	}
	/* along the last dim */
	run r;
	run_init(&r, "graph @f(%x: f64[3,4], %i: i32[2,6], %s: f64[2,6]) {\n  %y = aten.scatter_add(%x, %i, %s) {dim=1}\n"
	             "  return %y\n}\n");
	for (int i = 0; i < 12; i++)
		r.in[1][i] = (double)(int)(urand() * 4);
	run_exec(&r);
	double want[12];
	memcpy(want, r.in[0], sizeof want);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 6; j++)
			want[i * 4 + (int)r.in[1][i * 6 + j]] += r.in[2][i * 6 + j];
	NEAR(r.out[0], want, 12, 1e-12, 1e-12);
	run_free(&r);
}
END_TEST

START_TEST(test_index_add)
{
	run r;
	run_init(&r, "graph @f(%x: f32[3,4], %i: i64[5], %s: f32[3,5]) {\n"
	             "  %y = aten.index_add(%x, %i, %s) {dim=1, alpha=2}\n  return %y\n}\n");
	static const double ix[5] = {3, 0, 3, 1, 3};
	memcpy(r.in[1], ix, sizeof ix);
	run_exec(&r);
	ck_assert_int_eq(r.status, 0);
	double want[12];
	memcpy(want, r.in[0], sizeof want);
	for (int a = 0; a < 3; a++)
		for (int i = 0; i < 5; i++)
			want[a * 4 + (int)ix[i]] += 2 * r.in[2][a * 5 + i];
	NEAR(r.out[0], want, 12, 1e-6, 1e-7);
	r.in[1][4] = 4;
	run_exec(&r);
	ck_assert_int_eq(r.status, FJ_KERR_INDEX);
	run_free(&r);
	run_init(&r, "graph @f(%x: i64[4,2], %i: i32[3], %s: i64[3,2]) {\n"
	             "  %y = prims.index_add(%x, %i, %s) {dim=0}\n  return %y\n}\n");
	static const double i3[3] = {1, 1, 0};
	memcpy(r.in[1], i3, sizeof i3);
	run_exec(&r);
	double w2[8];
	memcpy(w2, r.in[0], sizeof w2);
	for (int i = 0; i < 3; i++)
		for (int b = 0; b < 2; b++)
			w2[(int)i3[i] * 2 + b] += r.in[2][i * 2 + b];
	NEAR(r.out[0], w2, 8, 0, 0);
	run_free(&r);
}
END_TEST

START_TEST(test_embedding_backward)
{
	for (int freq = 0; freq < 2; freq++) {
		char src[512];
		snprintf(src, sizeof src, "graph @f(%%g: f32[2,3,4], %%i: i64[2,3]) {\n"
		         "  %%y = aten.embedding_dense_backward(%%g, %%i) {num_weights=5, padding_idx=1, "
		         "scale_grad_by_freq=%s}\n  return %%y\n}\n", freq ? "true" : "false");
		run r;
		run_init(&r, src);
		static const double ix[6] = {0, 1, 4, 4, 0, 4};
		memcpy(r.in[1], ix, sizeof ix);
		run_exec(&r);
		ck_assert_int_eq(r.status, 0);
		double want[20] = {0};
		for (int i = 0; i < 6; i++) {
			int id = (int)ix[i];
			if (id == 1)
				continue;
			int cnt = 0;
			for (int j = 0; j < 6; j++)
				cnt += (int)ix[j] == id;
			for (int d = 0; d < 4; d++)
				want[id * 4 + d] += r.in[0][i * 4 + d] / (freq ? cnt : 1);
		}
		NEAR(r.out[0], want, 20, 1e-6, 1e-7);
		r.in[1][3] = 5;
		run_exec(&r);
		ck_assert_int_eq(r.status, FJ_KERR_INDEX);
		run_free(&r);
	}
}
END_TEST

/* ---- random ---- */

/* Philox-4x32-10, the reference (Random123). */
static void philox_ref(uint32_t c[4], uint32_t k0, uint32_t k1)
{
	for (int r = 0; r < 10; r++) {
		if (r) {
			k0 += 0x9E3779B9u;
			k1 += 0xBB67AE85u;
		}
		uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
		c[0] = n0;
		c[1] = (uint32_t)p1;
		c[2] = n2;
		c[3] = (uint32_t)p0;
	}
}

/* The documented stream: word of element i. */
static uint32_t stream_word(uint64_t seed, uint64_t offset, uint64_t i)
{
	uint64_t blk = i >> 2;
	uint32_t c[4] = {(uint32_t)offset, (uint32_t)(offset >> 32), (uint32_t)blk, (uint32_t)(blk >> 32)};
	philox_ref(c, (uint32_t)seed, (uint32_t)(seed >> 32));
	return c[i & 3];
}

START_TEST(test_philox_kat)
{
	/* Random123's known-answer vectors for philox4x32_10 */
	uint32_t c[4] = {0, 0, 0, 0};
	philox_ref(c, 0, 0);
	ck_assert_uint_eq(c[0], 0x6627e8d5u);
	ck_assert_uint_eq(c[1], 0xe169c58du);
	ck_assert_uint_eq(c[2], 0xbc57ac4cu);
	ck_assert_uint_eq(c[3], 0x9b00dbd8u);
	uint32_t d[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
	philox_ref(d, 0xa4093822u, 0x299f31d0u);
	ck_assert_uint_eq(d[0], 0xd16cfe09u);
	ck_assert_uint_eq(d[1], 0x94fdccebu);
	ck_assert_uint_eq(d[2], 0x5001e420u);
	ck_assert_uint_eq(d[3], 0x24126ea1u);
}
END_TEST

START_TEST(test_rand)
{
	static const struct { const char *d; fj_dtype dt; int bits; } cs[] = {
		{"f32", FJ_DT_F32, 24}, {"f64", FJ_DT_F64, 24}, {"f16", FJ_DT_F16, 11}, {"bf16", FJ_DT_BF16, 8},
	};
	for (size_t c = 0; c < FJ_ARRAY_LEN(cs); c++) {
		char src[512];
		snprintf(src, sizeof src, "graph @f(%%s: i64[], %%o: i64[]) {\n"
		         "  %%y = prims.rand(%%s, %%o) {shape=[7,151], dtype=%s}\n  return %%y\n}\n", cs[c].d);
		run r;
		run_init(&r, src);
		r.in[0][0] = 0x123456789;
		r.in[1][0] = 40;
		run_exec(&r);
		double mean = 0;
		for (int64_t i = 0; i < r.out_n[0]; i++) {
			double want = (double)(stream_word(0x123456789, 40, (uint64_t)i) >> (32 - cs[c].bits)) /
			              (double)(1u << cs[c].bits);
			ck_assert_msg(r.out[0][i] == want, "%s rand[%lld] = %.9g, want %.9g", cs[c].d, (long long)i,
			              r.out[0][i], want);
			ck_assert(r.out[0][i] >= 0 && r.out[0][i] < 1);
			mean += r.out[0][i] / (double)r.out_n[0];
		}
		ck_assert(fabs(mean - 0.5) < 0.05);
		run_free(&r);
	}
}
END_TEST

START_TEST(test_dropout)
{
	const int n = 20000;
	char src[512];
	double p = 0.3;
	snprintf(src, sizeof src, "graph @f(%%x: f32[100,200], %%s: i64[], %%o: i64[]) {\n"
	         "  %%y, %%m = aten.native_dropout(%%x, %%s, %%o) {p=0.3, train=true}\n  return %%y, %%m\n}\n");
	run r;
	run_init(&r, src);
	r.in[1][0] = 7;
	r.in[2][0] = 0;
	run_exec(&r);
	ck_assert_int_eq(r.status, 0);
	int kept = 0;
	for (int i = 0; i < n; i++) {
		bool k = r.out[1][i] != 0;
		double u = (double)(stream_word(7, 0, (uint64_t)i) >> 8) / 16777216.0;
		ck_assert(k == (u >= p));
		kept += k;
		double want = k ? rnd(FJ_DT_F32, r.in[0][i] / (1 - p)) : 0;
		ck_assert_msg(fabs(r.out[0][i] - want) <= 1e-7 * fabs(want), "dropout[%d] = %g, want %g", i, r.out[0][i], want);
	}
	/* kept fraction within 5 sigma of 1 - p */
	double sigma = sqrt(n * p * (1 - p));
	ck_assert(fabs(kept - n * (1 - p)) < 5 * sigma);
	double *m1 = malloc(n * sizeof(double));
	memcpy(m1, r.out[1], n * sizeof(double));
	run_exec(&r); /* same seed and offset: same mask */
	ck_assert(memcmp(m1, r.out[1], n * sizeof(double)) == 0);
	r.in[2][0] = 4;
	run_exec(&r); /* another offset: another mask */
	int same = 0;
	for (int i = 0; i < n; i++)
		same += m1[i] == r.out[1][i];
	ck_assert(same < n * 0.7);
	r.in[2][0] = 0;
	r.in[1][0] = 8;
	run_exec(&r); /* another seed */
	same = 0;
	for (int i = 0; i < n; i++)
		same += m1[i] == r.out[1][i];
	ck_assert(same < n * 0.7);
	free(m1);
	run_free(&r);
	/* p = 0, p = 1, train = false */
	static const char *cases[3] = {"p=0.0, train=true", "p=1.0, train=true", "p=0.5, train=false"};
	for (int c = 0; c < 3; c++) {
		snprintf(src, sizeof src, "graph @f(%%x: f16[33], %%s: i64[], %%o: i64[]) {\n"
		         "  %%y, %%m = aten.native_dropout(%%x, %%s, %%o) {%s}\n  return %%y, %%m\n}\n", cases[c]);
		run_src(&r, src);
		for (int i = 0; i < 33; i++) {
			ck_assert(r.out[1][i] == (c == 1 ? 0 : 1));
			ck_assert(r.out[0][i] == (c == 1 ? 0 : r.in[0][i]));
		}
		run_free(&r);
	}
}
END_TEST

Suite *suite_emit(void)
{
	Suite *s = suite_create("emit");
	TCase *tc = tcase_create("reduce");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reduce_f32);
	tcase_add_test(tc, test_reduce_dtypes);
	tcase_add_test(tc, test_reduce_nan_and_empty);
	tcase_add_test(tc, test_cumsum);
	suite_add_tcase(s, tc);
	tc = tcase_create("norm");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_softmax);
	tcase_add_test(tc, test_softmax_backward);
	tcase_add_test(tc, test_layer_norm);
	tcase_add_test(tc, test_layer_norm_backward);
	tcase_add_test(tc, test_batch_norm);
	tcase_add_test(tc, test_batch_norm_backward);
	tcase_add_test(tc, test_nll_loss);
	suite_add_tcase(s, tc);
	tc = tcase_create("matmul");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_mm);
	tcase_add_test(tc, test_bmm_matmul);
	tcase_add_test(tc, test_addmm_linear);
	tcase_add_test(tc, test_mm_speed);
	suite_add_tcase(s, tc);
	tc = tcase_create("index");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_take);
	tcase_add_test(tc, test_gather);
	tcase_add_test(tc, test_scatter_add);
	tcase_add_test(tc, test_index_add);
	tcase_add_test(tc, test_embedding_backward);
	suite_add_tcase(s, tc);
	tc = tcase_create("random");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_philox_kat);
	tcase_add_test(tc, test_rand);
	tcase_add_test(tc, test_dropout);
	suite_add_tcase(s, tc);
	return s;
}
