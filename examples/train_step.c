/* train_step.c -- forward and backward through fusejit's public C API.
 *
 * Compiles a small loss with `training` on (fusejit differentiates it and
 * partitions the joint graph into a forward and a backward with its min-cut
 * partitioner), runs the forward (keeping the saved values), lists them,
 * runs the backward with a tangent, checks the gradient against the one
 * computed here by hand, and takes a few SGD steps. Exits 0 on success. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <fusejit/fusejit.h>

#define CHECK(call)                                                                               \
	do {                                                                                      \
		fj_status st_ = (call);                                                           \
		if (st_ != FJ_OK) {                                                               \
			fprintf(stderr, "train_step: %s failed: %s: %s\n", #call, fj_status_name(st_), \
			        fj_context_error(ctx));                                           \
			return 1;                                                                 \
		}                                                                                 \
	} while (0)

/* loss = sum(tanh(x * w + b)^2) / B, x: [B, F] data (no gradient), w, b: [F] */
static const char text[] =
	"graph @loss(%x: f32[B,4] {nograd}, %w: f32[4], %b: f32[4]) {\n"
	"  %h = aten.mul(%x, %w)\n"
	"  %z = aten.add(%h, %b)\n"
	"  %t = aten.tanh(%z)\n"
	"  %q = aten.mul(%t, %t)\n"
	"  %l = aten.mean(%q) {dims=[0]}\n"
	"  %s = aten.sum(%l)\n"
	"  return %s\n"
	"}\n";

enum { B = 6, F = 4 };

static void tensor(fj_tensor *t, void *data, int rank, int64_t d0, int64_t d1)
{
	memset(t, 0, sizeof *t);
	t->data = data;
	t->dtype = FJ_TYPE_F32;
	t->rank = rank;
	t->sizes[0] = d0;
	t->sizes[1] = d1;
}

int main(void)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx)
		return 1;
	fj_context_set_cache(ctx, "off", 0);
	fj_module *m;
	CHECK(fj_module_parse(ctx, text, strlen(text), "train_step.fj", &m));
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	o.training = 1;
	fj_program *p;
	CHECK(fj_compile(ctx, m, &o, &p));
	fj_module_destroy(m);

	printf("inputs %zu, outputs %zu, saved %zu, tangents %zu, gradients %zu\n", fj_program_count(p, FJ_ROLE_INPUT),
	       fj_program_count(p, FJ_ROLE_OUTPUT), fj_program_count(p, FJ_ROLE_SAVED),
	       fj_program_count(p, FJ_ROLE_TANGENT), fj_program_count(p, FJ_ROLE_GRADIENT));
	if (fj_program_count(p, FJ_ROLE_GRADIENT) != 2 || fj_program_count(p, FJ_ROLE_TANGENT) != 1)
		return 1;

	float x[B][F], w[F], b[F];
	for (int i = 0; i < B; i++)
		for (int j = 0; j < F; j++)
			x[i][j] = (float)cos(0.7 * i + 1.3 * j);
	for (int j = 0; j < F; j++) {
		w[j] = 0.5f - 0.2f * (float)j;
		b[j] = 0.05f * (float)j;
	}
	int bad = 0;
	double prev = INFINITY;
	for (int step = 0; step < 5; step++) {
		fj_tensor in[3], out[1], tan[1], grads[2];
		tensor(&in[0], x, 2, B, F);
		tensor(&in[1], w, 1, F, 0);
		tensor(&in[2], b, 1, F, 0);
		float loss = 0, one = 1.0f, gw[F], gb[F];
		tensor(&out[0], &loss, 0, 0, 0);
		fj_saved *saved;
		CHECK(fj_program_forward(p, in, 3, out, 1, &saved));
		if (step == 0) {
			for (size_t k = 0; k < fj_saved_count(saved); k++) {
				fj_value_info vi;
				CHECK(fj_saved_info(saved, k, &vi, NULL));
				printf("  saved %%%s: %s, %zu bytes\n", vi.name, vi.type, vi.bytes);
			}
			printf("  saved in all: %zu bytes\n", fj_saved_bytes(saved));
		}
		tensor(&tan[0], &one, 0, 0, 0);
		tensor(&grads[0], gw, 1, F, 0);
		tensor(&grads[1], gb, 1, F, 0);
		CHECK(fj_program_backward(p, saved, tan, 1, grads, 2));
		fj_saved_destroy(saved);

		/* by hand: dl/dz = 2 t (1 - t^2) / B */
		double want_l = 0, want_gw[F] = {0}, want_gb[F] = {0};
		for (int i = 0; i < B; i++)
			for (int j = 0; j < F; j++) {
				double t = tanh((double)x[i][j] * w[j] + b[j]);
				want_l += t * t / B;
				double dz = 2 * t * (1 - t * t) / B;
				want_gw[j] += dz * x[i][j];
				want_gb[j] += dz;
			}
		if (fabs(loss - want_l) > 1e-5)
			bad++;
		for (int j = 0; j < F; j++)
			if (fabs(gw[j] - want_gw[j]) > 1e-5 || fabs(gb[j] - want_gb[j]) > 1e-5)
				bad++;
		printf("step %d: loss %.6f (by hand %.6f)\n", step, loss, want_l);
		if (loss > prev + 1e-7)
			bad++;
		prev = loss;
		for (int j = 0; j < F; j++) {
			w[j] -= 0.5f * gw[j];
			b[j] -= 0.5f * gb[j];
		}
	}
	fj_program_destroy(p);
	fj_context_destroy(ctx);
	printf("train_step: %s\n", bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}
