/* fusejit-run-util.c -- fusejit-run's messages, random inputs, checks,
 * reports and output files (fusejit-run.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fusejit-run.h"
#include "npy.h"

int errorf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(TOOL ": error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* The nvptx executor's one sentence without a driver starts with this in
 * the library's words; fusejit-run prints the driver's reason alone (IR.md
 * §5: "fusejit-run: error: no CUDA driver: ..."). */
static const char no_driver_prefix[] = "the nvptx executor needs a CUDA driver and a GPU: ";

int report(fj_context *ctx, fj_status st)
{
	static const char *const sev[] = {"error", "warning", "note"};
	size_t n = fj_context_diagnostic_count(ctx);
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		const fj_diagnostic *d = fj_context_diagnostic(ctx, i);
		const char *s = (unsigned)d->severity < 3 ? sev[d->severity] : "note";
		const char *msg = d->message;
		if (strncmp(msg, no_driver_prefix, sizeof no_driver_prefix - 1) == 0)
			msg += sizeof no_driver_prefix - 1;
		if (d->file && d->line)
			fprintf(stderr, "%s:%u:%u: %s: %s\n", d->file, d->line, d->col, s, msg);
		else if (d->file)
			fprintf(stderr, "%s: %s: %s\n", d->file, s, msg);
		else
			fprintf(stderr, TOOL ": %s: %s\n", s, msg);
		any |= d->severity == FJ_SEV_ERROR;
	}
	if (!any) {
		const char *e = fj_context_error(ctx);
		if (e && *e)
			fprintf(stderr, TOOL ": %s\n", e);
		else
			errorf("failed (%s)", fj_status_name(st));
	}
	fj_context_clear_diagnostics(ctx);
	return 1;
}

double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int64_t numel(const fj_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->sizes[i];
	return n;
}

void type_str(const fj_tensor *t, char *buf, size_t size)
{
	size_t k = (size_t)snprintf(buf, size, "%s[", fj_scalar_type_name(t->dtype));
	for (int i = 0; i < t->rank && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)t->sizes[i]);
	if (k < size)
		snprintf(buf + k, size - k, "]");
}

bool is_float(fj_scalar_type t)
{
	return t == FJ_TYPE_F64 || t == FJ_TYPE_F32 || t == FJ_TYPE_F16 || t == FJ_TYPE_BF16;
}

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

typedef struct rng {
	uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) /* xoshiro256** */
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* One stream per (seed, parameter name): giving one input by file leaves the
 * others' random data unchanged. */
static void rng_init(rng *r, uint64_t seed, const char *param)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *c = param; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	uint64_t sm = seed ^ rotl(h, 17);
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&sm);
}

void fill_random(fj_tensor *t, uint64_t seed, const char *param, int64_t bound)
{
	rng r;
	rng_init(&r, seed, param);
	int64_t n = numel(t);
	for (int64_t i = 0; i < n; i++) {
		uint64_t x = rng_next(&r);
		if (is_float(t->dtype)) {
			double u = (double)(x >> 11) * 0x1.0p-53;
			fj_tensor_set_f64(t, i, -1.0 + 2.0 * u);
			if (fj_tensor_get_f64(t, i) >= 1.0) /* rounded up in f16/bf16 */
				fj_tensor_set_f64(t, i, t->dtype == FJ_TYPE_F16 ? 0.99951171875 : 0.99609375);
		} else if (t->dtype == FJ_TYPE_BOOL) {
			((uint8_t *)t->data)[i] = (uint8_t)(x >> 63);
		} else {
			int64_t lim = bound >= 0 ? bound : 10;
			int64_t v = lim > 0 ? (int64_t)((x >> 1) % (uint64_t)lim) : 0;
			if (t->dtype == FJ_TYPE_I64)
				((int64_t *)t->data)[i] = v;
			else
				fj_tensor_set_f64(t, i, (double)v);
		}
	}
}

void output_stem(const char *const *names, uint32_t n, uint32_t k, char *const *prev, char *stem)
{
	const char *vn = names[k][0] ? names[k] : NULL;
	for (uint32_t j = 0; vn && j < n; j++)
		if (j != k && strcmp(names[j], vn) == 0)
			vn = NULL;
	for (uint32_t j = 0; vn && j < k; j++)
		if (strcmp(prev[j], vn) == 0)
			vn = NULL;
	if (vn)
		snprintf(stem, STEM_MAX, "%s", vn);
	else
		snprintf(stem, STEM_MAX, "out%u", k);
}

/* ---- reports ---- */

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.17g", v);
	else
		fputs("null", f);
}

static void print_value(FILE *f, const fj_tensor *t, int64_t i)
{
	if (is_float(t->dtype))
		fprintf(f, "%.6g", fj_tensor_get_f64(t, i));
	else if (t->dtype == FJ_TYPE_BOOL)
		fputs(((const uint8_t *)t->data)[i] ? "true" : "false", f);
	else if (t->dtype == FJ_TYPE_I64)
		fprintf(f, "%lld", (long long)((const int64_t *)t->data)[i]);
	else
		fprintf(f, "%.0f", fj_tensor_get_f64(t, i));
}

void print_summary(FILE *f, const fj_tensor *t)
{
	int64_t n = numel(t);
	if (n == 0) {
		fprintf(f, "  (empty)\n");
		return;
	}
	fprintf(f, "  [");
	int64_t show = n < 8 ? n : 8;
	for (int64_t i = 0; i < show; i++) {
		if (i)
			fputs(", ", f);
		print_value(f, t, i);
	}
	fprintf(f, "%s]\n", n > show ? ", ..." : "");
	double mn = INFINITY, mx = -INFINITY, sum = 0;
	int64_t nnan = 0, ninf = 0, nfin = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = fj_tensor_get_f64(t, i);
		if (isnan(v)) {
			nnan++;
			continue;
		}
		if (isinf(v)) {
			ninf++;
			continue;
		}
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
		sum += v;
		nfin++;
	}
	if (nfin)
		fprintf(f, "  min %.6g  max %.6g  mean %.6g", mn, mx, sum / (double)nfin);
	else
		fprintf(f, "  no finite values");
	if (nnan || ninf)
		fprintf(f, "  (%lld NaN, %lld inf left out)", (long long)nnan, (long long)ninf);
	fputc('\n', f);
}

void print_bench(FILE *f, const char *what, const fj_bench_result *b)
{
	fprintf(f, "%s: median %.4f ms over %d runs, %zu bytes, %.3f GB/s; memcpy %.3f GB/s; memcpy_ratio %.3f\n", what,
	        b->median_ms, b->reps, b->bytes, b->bytes / (b->median_ms * 1e-3) / 1e9,
	        b->bytes / (b->copy_ms * 1e-3) / 1e9, b->copy_ms / b->median_ms);
}

void json_bench(FILE *f, double ms, double copy_ms, size_t bytes)
{
	fputs(", \"bench\": {\"median_ms\": ", f);
	json_num(f, ms);
	fprintf(f, ", \"bytes\": %zu, \"gbps\": ", bytes);
	json_num(f, bytes / (ms * 1e-3) / 1e9);
	fputs(", \"memcpy_gbps\": ", f);
	json_num(f, bytes / (copy_ms * 1e-3) / 1e9);
	fputs(", \"memcpy_ratio\": ", f);
	json_num(f, copy_ms / ms);
	fputc('}', f);
}

/* ---- checks ---- */

bool aten_judge(const fj_tensor *out, const fj_tensor *ref, double *relerr)
{
	int placed;
	*relerr = fj_check_error(FJ_CHECK_ATEN, out, ref, 0, &placed);
	return placed && *relerr <= fj_check_tolerance(FJ_CHECK_ATEN, out->dtype);
}

bool f64_ok(const f64_verdict *v) { return v->placed && v->err <= v->tol; }

f64_verdict f64_judge(const fj_reference *r, size_t i, const fj_tensor *out)
{
	f64_verdict v = {.placed = true};
	fj_tensor ref;
	fj_reference_value(r, i, out->dtype, &ref, &v.scale, &v.tol);
	bool same = out->rank == ref.rank;
	for (int d = 0; same && d < out->rank; d++)
		same = out->sizes[d] == ref.sizes[d];
	if (!same) {
		v.err = INFINITY;
		return v;
	}
	int placed;
	v.err = fj_check_error(FJ_CHECK_F64, out, &ref, v.scale, &placed);
	v.placed = placed;
	return v;
}

void f64_print(FILE *f, const f64_verdict *v)
{
	if (!v->placed)
		fprintf(f, "  vs f64: NaN/inf at different places: FAIL\n");
	else
		fprintf(f, "  vs f64: err %.3g (scale %.3g, tolerance %g): %s\n", v->err, v->scale, v->tol,
		        f64_ok(v) ? "ok" : "FAIL");
}

void f64_json(FILE *f, const f64_verdict *v)
{
	fputs(", \"f64_err\": ", f);
	json_num(f, v->placed ? v->err : INFINITY);
	fputs(", \"f64_scale\": ", f);
	json_num(f, v->scale);
	fputs(", \"f64_tolerance\": ", f);
	json_num(f, v->tol);
}

void check_failed(bool aten_ok, bool f64_all_ok, bool train, bool outdir)
{
	const char *what = train ? "an output or gradient" : "an output";
	const char *tail = outdir ? " (no output written)" : "";
	if (!aten_ok && !f64_all_ok)
		errorf("--check=aten and --check=f64: %s differs from aten beyond its dtype's tolerance and from its "
		       "f64 reference beyond its tolerance%s", what, tail);
	else if (!aten_ok)
		errorf("--check=aten: %s differs from aten beyond its dtype's tolerance%s", what, tail);
	else
		errorf("--check=f64: %s differs from its f64 reference beyond its tolerance%s", what, tail);
}

/* ---- output files ---- */

static bool ensure_dir(const char *dir)
{
	struct stat sb;
	if (stat(dir, &sb) == 0)
		return S_ISDIR(sb.st_mode);
	return mkdir(dir, 0777) == 0;
}

int write_outputs(const char *dir, named_out *outs, uint32_t n)
{
	if (!ensure_dir(dir))
		return errorf("--output-dir %s: cannot create the directory: %s", dir,
		              errno ? strerror(errno) : "not a directory");
	npy_error e;
	for (uint32_t j = 0; j < n; j++) {
		size_t len = strlen(dir) + strlen(outs[j].stem) + 8;
		if (!(outs[j].path = malloc(len)))
			return errorf("out of memory");
		snprintf(outs[j].path, len, "%s/%s.npy", dir, outs[j].stem);
		if (npy_write_temp(&e, outs[j].path, outs[j].t, &outs[j].tmp) != FJ_OK)
			return errorf("%s", e.msg);
	}
	for (uint32_t j = 0; j < n; j++) {
		fj_status st = npy_commit(&e, outs[j].tmp, outs[j].path);
		outs[j].tmp = NULL;
		if (st != FJ_OK)
			return errorf("%s", e.msg);
	}
	return 0;
}

void free_outputs(named_out *outs, uint32_t n)
{
	for (uint32_t j = 0; outs && j < n; j++) {
		npy_discard(outs[j].tmp);
		free(outs[j].path);
	}
	free(outs);
}
