/* nvptx_test.c -- fj-api-nvptx: the nvptx executor through the public API,
 * on a machine with or without a GPU.
 *
 *   1. no driver (the option libcuda names a missing library): FJ_EXECUTOR_NVPTX
 *      fails with one sentence naming the executor and the driver; AUTO
 *      compiles for host; CUDA tensors given to a host program are refused,
 *      naming the tensor; a bad nvptx_device option is refused.
 *   2. the emulated device (the option nvptx_device=emulator): an inference graph
 *      run with host tensors (outputs allocated by fusejit, strided inputs)
 *      and with "CUDA" tensors (on the emulator device addresses are host
 *      addresses), including a returned parameter, a returned literal and a
 *      value returned twice (copied on the device), and a graph the caller's
 *      pipeline fused already; strided CUDA inputs and outputs (staged);
 *      other device indexes are refused. Results are compared with the host
 *      executor's.
 *   3. training on the emulated device: forward + backward with host and
 *      CUDA tensors, saved values and gradients compared with host's.
 *   4. one emulated program run by several threads at once.
 *   5. runs on the caller's stream (fj_run_options.stream; on the emulator
 *      any non-NULL token): CUDA and host tensors, several runs queued on
 *      one stream and on two, a forward and backward with the saved values
 *      kept on the device (saved_on_device), gradients equal to the
 *      host-saved path's; bad arguments (a stream given to a host program,
 *      saved values of another program).
 * Public API only. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusejit/fusejit.h>

#include "expect.h"

/* %x returned as it is, %c returned twice, a literal returned. */
static const char infer_text[] =
	"graph @main(%x: f32[N,8], %w: f32[8]) {\n"
	"  %a = aten.mul(%x, %w)\n"
	"  %b = aten.exp(%a)\n"
	"  %s = aten.sum(%b) {dims=[1], keepdim=true}\n"
	"  %c = aten.div(%b, %s)\n"
	"  return %c, %s, %x, %c, 2.5\n"
	"}\n";

static const char train_text[] =
	"graph @f(%x: f32[4,6] {nograd}, %w: f32[6]) {\n"
	"  %y = aten.mul(%x, %w)\n"
	"  %z = aten.sin(%y)\n"
	"  %t = aten.tanh(%z)\n"
	"  %s = aten.sum(%t) {dims=[1]}\n"
	"  return %s, %z\n"
	"}\n";

static fj_context *new_ctx(void)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx) {
		fprintf(stderr, "no context\n");
		exit(1);
	}
	fj_context_set_cache(ctx, "off", 0);
	return ctx;
}

static fj_status compile_with(fj_context *ctx, const char *text, fj_executor ex, int training, const char *pipeline,
                              fj_program **p)
{
	return compile_text(ctx, text, "nvptx_test.fj", ex, training, pipeline, p);
}

static fj_status compile(fj_context *ctx, const char *text, fj_executor ex, int training, fj_program **p)
{
	return compile_text(ctx, text, "nvptx_test.fj", ex, training, NULL, p);
}

#define tensor f32_tensor

static int64_t numel(const fj_tensor *t)
{
	int64_t n = 1;
	for (int k = 0; k < t->rank; k++)
		n *= t->sizes[k];
	return n;
}

static double elem(const fj_tensor *t, int64_t i)
{
	return t->dtype == FJ_TYPE_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

/* Same dtype (f32 or f64), shape and values within 1e-5 relative. */
static int near(const fj_tensor *a, const fj_tensor *b)
{
	if (a->dtype != b->dtype || (a->dtype != FJ_TYPE_F32 && a->dtype != FJ_TYPE_F64) || a->rank != b->rank)
		return 0;
	for (int k = 0; k < a->rank; k++)
		if (a->sizes[k] != b->sizes[k])
			return 0;
	for (int64_t i = 0; i < numel(a); i++) {
		double x = elem(a, i), y = elem(b, i);
		if (!(fabs(x - y) <= 1e-5 * (1.0 + fabs(y)))) {
			fprintf(stderr, "  element %lld: %g vs %g\n", (long long)i, x, y);
			return 0;
		}
	}
	return 1;
}

static void release_all(fj_tensor *t, size_t n)
{
	for (size_t k = 0; k < n; k++)
		fj_tensor_release(&t[k]);
}

/* ---- 1. no driver ---- */

static void test_no_driver(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "libcuda", "/nonexistent/libcuda.so.1"));
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "cuda"));
	fj_program *p = NULL;
	fj_status st = compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &p);
	EXPECT(st == FJ_ERR_DRIVER && !p);
	const char *err = fj_context_error(ctx);
	EXPECT(strstr(err, "nvptx executor") && strstr(err, "no CUDA driver") && strstr(err, "libcuda.so.1"));
	EXPECT(!strchr(err, '\n'));
	fprintf(stderr, "no driver, nvptx: %s: %s\n", fj_status_name(st), err);
	/* auto: host */
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_AUTO, 0, &p));
	EXPECT(p && fj_program_executor(p) == FJ_EXECUTOR_HOST);
	/* CUDA tensors for a host program: refused, naming the tensor */
	float x[16] = {0}, w[8] = {0};
	fj_tensor in[2] = {tensor(x, FJ_DEVICE_HOST, 2, 2, 8), tensor(w, FJ_DEVICE_CUDA, 1, 8, 0)};
	fj_tensor out[5];
	memset(out, 0, sizeof out);
	st = p ? fj_program_run(p, in, 2, out, 5) : FJ_ERR_INTERNAL;
	EXPECT(st == FJ_ERR_UNSUPPORTED && strstr(fj_context_error(ctx), "input 1 (%w) is in CUDA device memory"));
	fprintf(stderr, "host program, CUDA input: %s\n", fj_context_error(ctx));
	in[1].device = FJ_DEVICE_HOST;
	out[2] = tensor(x, FJ_DEVICE_CUDA, 2, 2, 8);
	st = p ? fj_program_run(p, in, 2, out, 5) : FJ_ERR_INTERNAL;
	EXPECT(st == FJ_ERR_UNSUPPORTED && strstr(fj_context_error(ctx), "output 2 (%x) is in CUDA device memory"));
	release_all(out, 5);
	fj_program_destroy(p);
	/* the emulator is not a GPU: auto stays host */
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	p = NULL;
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_AUTO, 0, &p));
	EXPECT(p && fj_program_executor(p) == FJ_EXECUTOR_HOST);
	fj_program_destroy(p);
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "gpu9"));
	p = NULL;
	st = compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &p);
	EXPECT(st == FJ_ERR_INVALID && !p && strstr(fj_context_error(ctx), "FUSEJIT_NVPTX_DEVICE=gpu9"));
	fj_context_destroy(ctx);
}

/* ---- 2. inference on the emulated device ---- */

enum { N = 5 };

static void test_emulated_inference(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	fj_program *nv = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &nv));
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_HOST, 0, &host));
	if (!nv || !host)
		goto done;
	EXPECT(fj_program_executor(nv) == FJ_EXECUTOR_NVPTX);
	float x[N * 8], w[8];
	for (int i = 0; i < N * 8; i++)
		x[i] = (float)((i * 37) % 19) / 10.0f - 0.9f;
	for (int i = 0; i < 8; i++)
		w[i] = 0.25f * (float)i - 1.0f;
	fj_tensor in[2] = {tensor(x, FJ_DEVICE_HOST, 2, N, 8), tensor(w, FJ_DEVICE_HOST, 1, 8, 0)};
	fj_tensor ref[5], got[5];
	memset(ref, 0, sizeof ref);
	memset(got, 0, sizeof got);
	EXPECT_OK(ctx, fj_program_run(host, in, 2, ref, 5));
	/* host tensors: uploaded, and downloaded into outputs fusejit allocates */
	EXPECT_OK(ctx, fj_program_run(nv, in, 2, got, 5));
	for (int k = 0; k < 5; k++) {
		EXPECT(near(&got[k], &ref[k]));
		EXPECT(got[k].flags & FJ_TENSOR_OWNED && got[k].device == FJ_DEVICE_HOST);
	}
	/* a strided host input: made dense on the host, then uploaded */
	float xt[8 * N];
	int64_t tstrides[2] = {1, N};
	for (int i = 0; i < N; i++)
		for (int j = 0; j < 8; j++)
			xt[j * N + i] = x[i * 8 + j];
	fj_tensor sin_[2] = {tensor(xt, FJ_DEVICE_HOST, 2, N, 8), in[1]};
	sin_[0].strides = tstrides;
	EXPECT_OK(ctx, fj_program_run(nv, sin_, 2, got, 5));
	EXPECT(near(&got[0], &ref[0]));
	/* "CUDA" tensors: on the emulator device addresses are host addresses */
	float dx[N * 8], dw[8], dc[N * 8], ds[N], dxo[N * 8], dc2[N * 8];
	double dlit[1]; /* the literal 2.5 is returned as f64 */
	memcpy(dx, x, sizeof dx);
	memcpy(dw, w, sizeof dw);
	memset(dc, 0, sizeof dc);
	fj_tensor din[2] = {tensor(dx, FJ_DEVICE_CUDA, 2, N, 8), tensor(dw, FJ_DEVICE_CUDA, 1, 8, 0)};
	fj_tensor dout[5] = {tensor(dc, FJ_DEVICE_CUDA, 2, N, 8), tensor(ds, FJ_DEVICE_CUDA, 2, N, 1),
	                     tensor(dxo, FJ_DEVICE_CUDA, 2, N, 8), tensor(dc2, FJ_DEVICE_CUDA, 2, N, 8),
	                     tensor(NULL, FJ_DEVICE_CUDA, 0, 0, 0)};
	dout[4].data = dlit;
	dout[4].dtype = FJ_TYPE_F64;
	EXPECT_OK(ctx, fj_program_run(nv, din, 2, dout, 5));
	for (int k = 0; k < 5; k++) {
		EXPECT(near(&dout[k], &ref[k]));
		EXPECT(!(dout[k].flags & FJ_TENSOR_OWNED));
	}
	EXPECT(dout[0].data == dc && dlit[0] == 2.5);
	/* mixed: CUDA inputs, host outputs fusejit allocates, and the reverse */
	release_all(got, 5);
	EXPECT_OK(ctx, fj_program_run(nv, din, 2, got, 5));
	for (int k = 0; k < 5; k++)
		EXPECT(near(&got[k], &ref[k]));
	memset(dc, 0, sizeof dc);
	memset(dxo, 0, sizeof dxo);
	EXPECT_OK(ctx, fj_program_run(nv, in, 2, dout, 5));
	for (int k = 0; k < 5; k++)
		EXPECT(near(&dout[k], &ref[k]));
	/* another shape: rebinds */
	fj_tensor in3[2] = {tensor(dx, FJ_DEVICE_HOST, 2, 3, 8), tensor(dw, FJ_DEVICE_HOST, 1, 8, 0)};
	fj_tensor ref3[5], got3[5];
	memset(ref3, 0, sizeof ref3);
	memset(got3, 0, sizeof got3);
	EXPECT_OK(ctx, fj_program_run(host, in3, 2, ref3, 5));
	in3[0].device = in3[1].device = FJ_DEVICE_CUDA;
	EXPECT_OK(ctx, fj_program_run(nv, in3, 2, got3, 5));
	for (int k = 0; k < 5; k++)
		EXPECT(near(&got3[k], &ref3[k]));
	release_all(ref3, 5);
	release_all(got3, 5);
	/* a strided CUDA input and a strided CUDA output: staged */
	fj_tensor sdin[2] = {tensor(xt, FJ_DEVICE_CUDA, 2, N, 8), din[1]};
	sdin[0].strides = tstrides;
	float oct[8 * N];
	memset(oct, 0, sizeof oct);
	fj_tensor sdout[5] = {tensor(oct, FJ_DEVICE_CUDA, 2, N, 8), dout[1], dout[2], dout[3], dout[4]};
	sdout[0].strides = tstrides;
	EXPECT_OK(ctx, fj_program_run(nv, sdin, 2, sdout, 5));
	int strided_ok = ref[0].data != NULL;
	for (int i = 0; strided_ok && i < N; i++)
		for (int j = 0; j < 8; j++)
			strided_ok &= fabsf(oct[j * N + i] - ((float *)ref[0].data)[i * 8 + j]) <= 1e-5f * (1 + fabsf(oct[j * N + i]));
	EXPECT(strided_ok);
	for (int k = 1; k < 5; k++)
		EXPECT(near(&sdout[k], &ref[k]));
	/* refused: a CUDA tensor on device 1 */
	fj_tensor bad[2] = {din[0], din[1]};
	/* a graph fused by the caller's pipeline already runs as it is */
	fj_program *fused = NULL;
	EXPECT_OK(ctx, compile_with(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, "verify,decompose,canonicalize,fuse,schedule",
	                            &fused));
	release_all(got, 5);
	if (fused)
		EXPECT_OK(ctx, fj_program_run(fused, din, 2, got, 5));
	for (int k = 0; fused && k < 5; k++)
		EXPECT(near(&got[k], &ref[k]));
	fj_program_destroy(fused);
	bad[1].device_index = 1;
	fj_status st = fj_program_run(nv, bad, 2, got, 5);
	EXPECT(st == FJ_ERR_UNSUPPORTED && strstr(fj_context_error(ctx), "input 1 (%w) is on CUDA device 1"));
	release_all(got, 5);
	release_all(ref, 5);
done:
	fj_program_destroy(nv);
	fj_program_destroy(host);
	fj_context_destroy(ctx);
}

/* ---- 3. training on the emulated device ---- */

/* Forward and backward of p; outputs, saved values and gradients into the
 * arrays (released by the caller). cuda: inputs and tangents as CUDA
 * tensors, the gradients preallocated CUDA tensors in gbuf. */
static void train_run(fj_context *ctx, fj_program *p, int cuda, fj_tensor *outs, fj_tensor *grads, float *gbuf,
                      size_t *nsaved, fj_tensor *saved_copy)
{
	static float x[24], w[6], t0[4], t1[24];
	for (int i = 0; i < 24; i++) {
		x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
		t1[i] = (float)(i % 5) / 4.0f;
	}
	for (int i = 0; i < 6; i++)
		w[i] = 0.3f * (float)i - 0.7f;
	for (int i = 0; i < 4; i++)
		t0[i] = 1.0f + (float)i;
	fj_device dev = cuda ? FJ_DEVICE_CUDA : FJ_DEVICE_HOST;
	fj_tensor in[2] = {tensor(x, dev, 2, 4, 6), tensor(w, dev, 1, 6, 0)};
	fj_saved *saved = NULL;
	EXPECT_OK(ctx, fj_program_forward(p, in, 2, outs, 2, &saved));
	if (!saved)
		return;
	*nsaved = fj_saved_count(saved);
	for (size_t k = 0; k < *nsaved && k < 8; k++) {
		fj_tensor v;
		EXPECT_OK(ctx, fj_saved_info(saved, k, NULL, &v));
		saved_copy[k] = v;
		size_t bytes = (size_t)numel(&v) * sizeof(float);
		saved_copy[k].data = malloc(bytes ? bytes : 1);
		memcpy(saved_copy[k].data, v.data, bytes);
	}
	EXPECT(fj_program_count(p, FJ_ROLE_TANGENT) == 2 && fj_program_count(p, FJ_ROLE_GRADIENT) == 1);
	fj_tensor tan[2] = {tensor(t0, dev, 1, 4, 0), tensor(t1, dev, 2, 4, 6)};
	if (cuda)
		grads[0] = tensor(gbuf, FJ_DEVICE_CUDA, 1, 6, 0);
	EXPECT_OK(ctx, fj_program_backward(p, saved, tan, 2, grads, 1));
	/* the saved values stay: a second backward gives the same */
	fj_tensor again = {0};
	EXPECT_OK(ctx, fj_program_backward(p, saved, tan, 2, &again, 1));
	EXPECT(near(&again, &grads[0]));
	fj_tensor_release(&again);
	fj_saved_destroy(saved);
}

static void test_emulated_training(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	fj_program *nv = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_NVPTX, 1, &nv));
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_HOST, 1, &host));
	if (!nv || !host)
		goto done;
	EXPECT(fj_program_count(nv, FJ_ROLE_SAVED) == fj_program_count(host, FJ_ROLE_SAVED));
	fj_value_info gi;
	EXPECT_OK(ctx, fj_program_info(nv, FJ_ROLE_GRADIENT, 0, &gi));
	EXPECT(strcmp(gi.name, "w") == 0);
	for (int cuda = 0; cuda < 2; cuda++) {
		fj_tensor ro[2], rg[1], go[2], gg[1], rs[8], gs[8];
		float gbuf[6] = {0};
		size_t rn = 0, gn = 0;
		memset(ro, 0, sizeof ro);
		memset(rg, 0, sizeof rg);
		memset(go, 0, sizeof go);
		memset(gg, 0, sizeof gg);
		train_run(ctx, host, 0, ro, rg, NULL, &rn, rs);
		train_run(ctx, nv, cuda, go, gg, gbuf, &gn, gs);
		EXPECT(rn == gn && rn > 0);
		for (int k = 0; k < 2; k++)
			EXPECT(near(&go[k], &ro[k]));
		for (size_t k = 0; k < rn && k < gn && k < 8; k++)
			EXPECT(near(&gs[k], &rs[k]));
		EXPECT(near(&gg[0], &rg[0]));
		EXPECT(!cuda || gg[0].data == gbuf);
		release_all(ro, 2);
		release_all(go, 2);
		release_all(rg, 1);
		release_all(gg, 1);
		for (size_t k = 0; k < rn && k < 8; k++)
			free(rs[k].data);
		for (size_t k = 0; k < gn && k < 8; k++)
			free(gs[k].data);
	}
done:
	fj_program_destroy(nv);
	fj_program_destroy(host);
	fj_context_destroy(ctx);
}

/* ---- 4. several threads ---- */

typedef struct job {
	fj_program *p;
	int rows, ok;
	fj_status st;
} job;

/* Runs p on rows x 8 inputs of its own, CUDA and host in turn, and checks
 * the first result against a direct computation. */
static void *job_run(void *arg)
{
	job *j = arg;
	float x[8 * 8], w[8], c[8 * 8], e[8];
	for (int i = 0; i < j->rows * 8; i++)
		x[i] = (float)((i * 13 + j->rows) % 17) / 8.0f - 1.0f;
	for (int i = 0; i < 8; i++)
		w[i] = 0.1f * (float)(i + j->rows);
	j->ok = 1;
	for (int rep = 0; rep < 4 && j->ok; rep++) {
		fj_device dev = rep % 2 ? FJ_DEVICE_CUDA : FJ_DEVICE_HOST;
		fj_tensor in[2] = {tensor(x, dev, 2, j->rows, 8), tensor(w, dev, 1, 8, 0)};
		fj_tensor out[5];
		memset(out, 0, sizeof out);
		out[0] = tensor(c, dev, 2, j->rows, 8);
		j->st = fj_program_run(j->p, in, 2, out, 5);
		if (j->st != FJ_OK) {
			j->ok = 0;
			break;
		}
		for (int r = 0; r < j->rows; r++) {
			float sum = 0;
			for (int k = 0; k < 8; k++)
				sum += e[k] = expf(x[r * 8 + k] * w[k]);
			for (int k = 0; k < 8; k++)
				if (!(fabsf(c[r * 8 + k] - e[k] / sum) <= 1e-5f))
					j->ok = 0;
		}
		release_all(out, 5);
	}
	return NULL;
}

static void test_emulated_threads(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	fj_program *nv = NULL;
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &nv));
	enum { NT = 4 };
	pthread_t th[NT];
	job jobs[NT];
	for (int t = 0; nv && t < NT; t++) {
		jobs[t] = (job){.p = nv, .rows = 2 + t};
		pthread_create(&th[t], NULL, job_run, &jobs[t]);
	}
	for (int t = 0; nv && t < NT; t++) {
		pthread_join(th[t], NULL);
		if (jobs[t].st != FJ_OK)
			fprintf(stderr, "thread %d: %s: %s\n", t, fj_status_name(jobs[t].st), fj_context_error(ctx));
		EXPECT(jobs[t].ok);
	}
	fj_program_destroy(nv);
	fj_context_destroy(ctx);
}

/* ---- 5. the caller's stream, device-resident saved values ---- */

static int stream_a, stream_b; /* the emulator takes any non-NULL token */

static void test_emulated_stream(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	fj_program *nv = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_NVPTX, 0, &nv));
	EXPECT_OK(ctx, compile(ctx, infer_text, FJ_EXECUTOR_HOST, 0, &host));
	if (!nv || !host)
		goto done;
	enum { R = 3 }; /* runs queued before any result is read */
	float x[R][N * 8], w[8], dc[R][N * 8], ds[R][N], dxo[R][N * 8], dc2[R][N * 8];
	double dlit[R][1];
	for (int i = 0; i < 8; i++)
		w[i] = 0.2f * (float)i - 0.6f;
	fj_run_options ro;
	fj_run_options_init(&ro);
	fj_tensor dout[R][5];
	for (int r = 0; r < R; r++) {
		for (int i = 0; i < N * 8; i++)
			x[r][i] = (float)((i * 29 + r * 7) % 23) / 11.0f - 1.0f;
		/* all CUDA: queued on the stream (runs 0 and 2 on a, run 1 on b) */
		ro.stream = r == 1 ? (void *)&stream_b : (void *)&stream_a;
		fj_tensor din[2] = {tensor(x[r], FJ_DEVICE_CUDA, 2, N, 8), tensor(w, FJ_DEVICE_CUDA, 1, 8, 0)};
		fj_tensor o[5] = {tensor(dc[r], FJ_DEVICE_CUDA, 2, N, 8), tensor(ds[r], FJ_DEVICE_CUDA, 2, N, 1),
		                  tensor(dxo[r], FJ_DEVICE_CUDA, 2, N, 8), tensor(dc2[r], FJ_DEVICE_CUDA, 2, N, 8),
		                  tensor(NULL, FJ_DEVICE_CUDA, 0, 0, 0)};
		o[4].data = dlit[r];
		o[4].dtype = FJ_TYPE_F64;
		memcpy(dout[r], o, sizeof o);
		EXPECT_OK(ctx, fj_program_run_with(nv, &ro, din, 2, dout[r], 5));
	}
	for (int r = 0; r < R; r++) {
		fj_tensor in[2] = {tensor(x[r], FJ_DEVICE_HOST, 2, N, 8), tensor(w, FJ_DEVICE_HOST, 1, 8, 0)};
		fj_tensor ref[5];
		memset(ref, 0, sizeof ref);
		EXPECT_OK(ctx, fj_program_run(host, in, 2, ref, 5));
		for (int k = 0; k < 5; k++) {
			fj_tensor v = dout[r][k];
			v.device = FJ_DEVICE_HOST;
			EXPECT(near(&v, &ref[k]));
		}
		/* host tensors on a stream: uploaded and downloaded there, synchronised */
		fj_tensor got[5];
		memset(got, 0, sizeof got);
		ro.stream = &stream_a;
		EXPECT_OK(ctx, fj_program_run_with(nv, &ro, in, 2, got, 5));
		for (int k = 0; k < 5; k++)
			EXPECT(near(&got[k], &ref[k]) && got[k].device == FJ_DEVICE_HOST);
		release_all(got, 5);
		release_all(ref, 5);
	}
	/* a stream given to a host program is refused, naming the option */
	fj_tensor hin[2] = {tensor(x[0], FJ_DEVICE_HOST, 2, N, 8), tensor(w, FJ_DEVICE_HOST, 1, 8, 0)};
	fj_tensor hout[5];
	memset(hout, 0, sizeof hout);
	EXPECT(fj_program_run_with(host, &ro, hin, 2, hout, 5) == FJ_ERR_UNSUPPORTED);
	EXPECT(strstr(fj_context_error(ctx), "fj_run_options.stream") != NULL);
	release_all(hout, 5);
done:
	fj_program_destroy(nv);
	fj_program_destroy(host);
	fj_context_destroy(ctx);
}

/* Forward (saved values on the device when dev_saved) and backward of p on
 * a stream, all tensors CUDA ones; gradient into g (6 floats), outputs into
 * o0 (4) and o1 (24); *bytes: fj_saved_bytes. */
static void stream_train(fj_context *ctx, fj_program *p, int dev_saved, float *o0, float *o1, float *g,
                         size_t *bytes)
{
	static float x[24], w[6], t0[4], t1[24];
	for (int i = 0; i < 24; i++) {
		x[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
		t1[i] = (float)(i % 7) / 3.0f - 1.0f;
	}
	for (int i = 0; i < 6; i++)
		w[i] = 0.4f * (float)i - 0.9f;
	for (int i = 0; i < 4; i++)
		t0[i] = 0.5f + (float)i;
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.stream = &stream_a;
	ro.saved_on_device = dev_saved;
	fj_tensor in[2] = {tensor(x, FJ_DEVICE_CUDA, 2, 4, 6), tensor(w, FJ_DEVICE_CUDA, 1, 6, 0)};
	fj_tensor out[2] = {tensor(o0, FJ_DEVICE_CUDA, 1, 4, 0), tensor(o1, FJ_DEVICE_CUDA, 2, 4, 6)};
	fj_saved *saved = NULL;
	EXPECT_OK(ctx, fj_program_forward_with(p, &ro, in, 2, out, 2, &saved));
	if (!saved)
		return;
	*bytes = fj_saved_bytes(saved);
	for (size_t k = 0; k < fj_saved_count(saved); k++) {
		fj_value_info vi;
		fj_tensor v;
		EXPECT_OK(ctx, fj_saved_info(saved, k, &vi, &v));
		EXPECT(v.device == (dev_saved ? FJ_DEVICE_CUDA : FJ_DEVICE_HOST) && v.data != NULL);
		EXPECT(vi.bytes == (size_t)numel(&v) * fj_scalar_type_size(v.dtype));
	}
	/* the backward on another stream than the forward, then on the same */
	ro.stream = &stream_b;
	fj_tensor tan[2] = {tensor(t0, FJ_DEVICE_CUDA, 1, 4, 0), tensor(t1, FJ_DEVICE_CUDA, 2, 4, 6)};
	fj_tensor gr[1] = {tensor(g, FJ_DEVICE_CUDA, 1, 6, 0)};
	EXPECT_OK(ctx, fj_program_backward_with(p, &ro, saved, tan, 2, gr, 1));
	float g2[6] = {0};
	fj_tensor gr2[1] = {tensor(g2, FJ_DEVICE_HOST, 1, 6, 0)};
	ro.stream = &stream_a;
	fj_tensor htan[2] = {tensor(t0, FJ_DEVICE_HOST, 1, 4, 0), tensor(t1, FJ_DEVICE_HOST, 2, 4, 6)};
	EXPECT_OK(ctx, fj_program_backward_with(p, &ro, saved, htan, 2, gr2, 1));
	EXPECT(memcmp(g, g2, sizeof g2) == 0);
	fj_saved_destroy(saved);
}

static void test_emulated_saved_on_device(void)
{
	fj_context *ctx = new_ctx();
	EXPECT_OK(ctx, fj_context_set_option(ctx, "nvptx_device", "emulator"));
	fj_program *nv = NULL, *nv2 = NULL, *host = NULL;
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_NVPTX, 1, &nv));
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_NVPTX, 1, &nv2));
	EXPECT_OK(ctx, compile(ctx, train_text, FJ_EXECUTOR_HOST, 1, &host));
	if (!nv || !nv2 || !host)
		goto done;
	float ho0[4], ho1[24], hg[6], do0[4], do1[24], dg[6];
	size_t hbytes = 0, dbytes = 0;
	stream_train(ctx, nv, 0, ho0, ho1, hg, &hbytes);
	stream_train(ctx, nv, 1, do0, do1, dg, &dbytes);
	EXPECT(hbytes == dbytes && hbytes > 0);
	fj_tensor a = tensor(dg, FJ_DEVICE_HOST, 1, 6, 0), b = tensor(hg, FJ_DEVICE_HOST, 1, 6, 0);
	EXPECT(near(&a, &b));
	a = tensor(do1, FJ_DEVICE_HOST, 2, 4, 6);
	b = tensor(ho1, FJ_DEVICE_HOST, 2, 4, 6);
	EXPECT(near(&a, &b));
	/* saved values of another program are refused; a host program ignores saved_on_device */
	float x[24] = {0}, w[6] = {0}, t0[4] = {0}, t1[24] = {0};
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.saved_on_device = 1;
	fj_tensor in[2] = {tensor(x, FJ_DEVICE_HOST, 2, 4, 6), tensor(w, FJ_DEVICE_HOST, 1, 6, 0)};
	fj_tensor out[2], hout[2], gr[1];
	memset(out, 0, sizeof out);
	memset(hout, 0, sizeof hout);
	memset(gr, 0, sizeof gr);
	fj_saved *saved = NULL, *hsaved = NULL;
	EXPECT_OK(ctx, fj_program_forward_with(nv, &ro, in, 2, out, 2, &saved));
	EXPECT_OK(ctx, fj_program_forward_with(host, &ro, in, 2, hout, 2, &hsaved));
	fj_tensor tan[2] = {tensor(t0, FJ_DEVICE_HOST, 1, 4, 0), tensor(t1, FJ_DEVICE_HOST, 2, 4, 6)};
	EXPECT(fj_program_backward_with(nv2, &ro, saved, tan, 2, gr, 1) == FJ_ERR_INVALID);
	EXPECT(strstr(fj_context_error(ctx), "saved values of a forward run of this program") != NULL);
	fj_tensor v;
	if (hsaved) {
		EXPECT_OK(ctx, fj_saved_info(hsaved, 0, NULL, &v));
		EXPECT(v.device == FJ_DEVICE_HOST);
	}
	/* the bench refuses device-resident saved values */
	fj_bench_options bo;
	fj_bench_options_init(&bo);
	bo.backward = 1;
	bo.saved = saved;
	fj_bench_result br;
	fj_bench_result_init(&br);
	EXPECT(fj_program_bench(nv, &bo, tan, 2, &br) == FJ_ERR_UNSUPPORTED);
	release_all(out, 2);
	release_all(hout, 2);
	fj_saved_destroy(saved);
	fj_saved_destroy(hsaved);
done:
	fj_program_destroy(nv);
	fj_program_destroy(nv2);
	fj_program_destroy(host);
	fj_context_destroy(ctx);
}

int main(void)
{
	test_no_driver();
	test_emulated_inference();
	test_emulated_training();
	test_emulated_threads();
	test_emulated_stream();
	test_emulated_saved_on_device();
	if (fails) {
		fprintf(stderr, "fj-api-nvptx: %d failure(s)\n", fails);
		return 1;
	}
	fprintf(stderr, "fj-api-nvptx: all passed\n");
	return 0;
}
