/* embed.c -- embedding fusejit through its public C API: parse a graph, build
 * another with the builder, compile both, run them on this program's own
 * buffers (one input strided, one output allocated by fusejit) and check the
 * results against plain C. Exits 0 when everything matches.
 *
 *   cc embed.c $(pkg-config --cflags --libs fusejit) && ./a.out */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusejit/fusejit.h>

#define CHECK(call)                                                                          \
	do {                                                                                 \
		fj_status st_ = (call);                                                      \
		if (st_ != FJ_OK) {                                                          \
			fprintf(stderr, "embed: %s failed: %s: %s\n", #call, fj_status_name(st_), \
			        fj_context_error(ctx));                                      \
			return 1;                                                            \
		}                                                                            \
	} while (0)

static const char graph_text[] =
	"graph @main(%x: f32[N,8], %b: f32[8]) {\n"
	"  %h = aten.add(%x, %b)\n"
	"  %g = aten.gelu(%h) {approximate=\"tanh\"}\n"
	"  %s = aten.sum(%g) {dims=[1]}\n"
	"  return %g, %s\n"
	"}\n";

static double gelu_tanh(double v)
{
	return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

int main(void)
{
	printf("fusejit %s (header %s)\n", fj_version(), FUSEJIT_VERSION);
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx)
		return 1;
	fj_context_set_cache(ctx, "off", 0); /* keep the user's cache out of an example run */

	/* 1. parse and compile */
	fj_module *m;
	CHECK(fj_module_parse(ctx, graph_text, strlen(graph_text), "embed.fj", &m));
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	fj_program *p;
	CHECK(fj_compile(ctx, m, &o, &p));
	fj_module_destroy(m); /* the program keeps its own copy */

	/* 2. inputs: x is the transpose of a [8,N] buffer (strided), b dense */
	enum { N = 5 };
	float xt[8][N], b[8];
	for (int j = 0; j < 8; j++) {
		b[j] = 0.1f * (float)j - 0.3f;
		for (int i = 0; i < N; i++)
			xt[j][i] = (float)sin(1.0 + i * 8 + j);
	}
	static const int64_t xstrides[2] = {1, N};
	fj_tensor in[2];
	memset(in, 0, sizeof in);
	in[0].data = xt;
	in[0].dtype = FJ_TYPE_F32;
	in[0].rank = 2;
	in[0].sizes[0] = N;
	in[0].sizes[1] = 8;
	in[0].strides = xstrides;
	in[1].data = b;
	in[1].dtype = FJ_TYPE_F32;
	in[1].rank = 1;
	in[1].sizes[0] = 8;

	/* 3. outputs: g into our buffer, s allocated by fusejit */
	float g[N][8];
	fj_tensor out[2];
	memset(out, 0, sizeof out);
	out[0].data = g;
	out[0].dtype = FJ_TYPE_F32;
	out[0].rank = 2;
	out[0].sizes[0] = N;
	out[0].sizes[1] = 8;
	CHECK(fj_program_run(p, in, 2, out, 2));

	/* 4. check */
	int bad = 0;
	const float *s = out[1].data;
	if (!(out[1].flags & FJ_TENSOR_OWNED) || out[1].rank != 1 || out[1].sizes[0] != N)
		bad++;
	for (int i = 0; i < N; i++) {
		double sum = 0;
		for (int j = 0; j < 8; j++) {
			double want = gelu_tanh((double)xt[j][i] + b[j]);
			sum += want;
			if (fabs(g[i][j] - want) > 1e-5)
				bad++;
		}
		if (fabs(s[i] - sum) > 1e-4)
			bad++;
	}
	fj_tensor_release(&out[1]);

	/* 5. the same kind of graph through the builder */
	fj_module *m2;
	CHECK(fj_module_new(ctx, &m2));
	fj_graph_builder *gb;
	CHECK(fj_build_begin(m2, "scale", &gb));
	fj_value_id x = fj_build_param(gb, "x", "f32[N]");
	fj_value_id y = fj_build_op1(gb, "aten.mul", (fj_value_id[]){x, fj_build_float(gb, 3.0)}, 2, NULL, 0);
	fj_attribute keep = {.name = "keepdim", .kind = FJ_ATTR_BOOL, .i = 1};
	fj_value_id mx = fj_build_op1(gb, "aten.amax", &y, 1, &keep, 1);
	CHECK(fj_build_end(gb, (fj_value_id[]){y, mx}, 2));
	fj_program *p2;
	CHECK(fj_compile(ctx, m2, NULL, &p2));
	float v[4] = {1, -2, 4, 0.5f};
	fj_tensor vin = {0}, vout[2];
	memset(vout, 0, sizeof vout);
	vin.data = v;
	vin.dtype = FJ_TYPE_F32;
	vin.rank = 1;
	vin.sizes[0] = 4;
	CHECK(fj_program_run(p2, &vin, 1, vout, 2));
	const float *yv = vout[0].data, *mv = vout[1].data;
	for (int i = 0; i < 4; i++)
		if (yv[i] != 3 * v[i])
			bad++;
	if (mv[0] != 12.0f)
		bad++;
	fj_tensor_release(&vout[0]);
	fj_tensor_release(&vout[1]);

	/* 6. an error comes back as a status and a message */
	float wrong[3] = {0};
	vin.data = wrong;
	vin.dtype = FJ_TYPE_F64;
	fj_status st = fj_program_run(p2, &vin, 1, vout, 2);
	printf("expected error: %s: %s\n", fj_status_name(st), fj_context_error(ctx));
	if (st == FJ_OK)
		bad++;

	fj_program_destroy(p2);
	fj_module_destroy(m2);
	fj_program_destroy(p);
	fj_context_destroy(ctx);
	printf("embed: %s\n", bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}
