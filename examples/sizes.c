/* sizes.c -- sizing a run before it runs, with the public C API: the output
 * sizes a set of input shapes gives (fj_program_sizes), outputs allocated by
 * the caller to fit, a size no input fixes given as a dim (fj_run_options),
 * what was compiled (fj_program_stats_get), and the result checked against
 * its f64 reference (fj_reference_f64, fj_check_error). Exits 0 when every
 * step works and the result is within tolerance.
 *
 *   cc sizes.c $(pkg-config --cflags --libs fusejit) && ./a.out */
#include <stdio.h>
#include <stdlib.h>

#include <fusejit/fusejit.h>

#define CHECK(call)                                                                          \
	do {                                                                                 \
		fj_status st_ = (call);                                                      \
		if (st_ != FJ_OK) {                                                          \
			fprintf(stderr, "sizes: %s failed: %s: %s\n", #call, fj_status_name(st_), \
			        fj_context_error(ctx));                                      \
			return 1;                                                            \
		}                                                                            \
	} while (0)

/* R (the repeat count) appears in no input: it is given as a dim. */
static const char graph_text[] =
	"graph @main(%x: f32[N,8]) {\n"
	"  %e = aten.exp(%x)\n"
	"  %s = aten.sum(%e) {dims=[1]}\n"
	"  %r = prims.full() {shape=[R], value=0.5, dtype=f32}\n"
	"  return %s, %r\n"
	"}\n";

int main(void)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m;
	CHECK(fj_module_parse(ctx, graph_text, sizeof graph_text - 1, "sizes.fj", &m));
	fj_program *p;
	CHECK(fj_compile(ctx, m, NULL, &p));
	fj_program_stats stats;
	fj_program_stats_init(&stats);
	CHECK(fj_program_stats_get(p, &stats));
	printf("compiled %u kernels for %s\n", stats.compiled,
	       fj_program_executor(p) == FJ_EXECUTOR_NVPTX ? "nvptx" : "host");

	/* the input's shape alone (no data yet) and the dim R = 3 */
	float x[5 * 8];
	fj_tensor in;
	fj_tensor_init(&in);
	in.dtype = FJ_TYPE_F32;
	in.rank = 2;
	in.sizes[0] = 5;
	in.sizes[1] = 8;
	const char *names[] = {"R"};
	int64_t values[] = {3};
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.dim_names = names;
	ro.dim_values = values;
	ro.ndims = 1;
	const fj_tensor *given[] = {&in};
	fj_value_info out_info[2];
	CHECK(fj_program_sizes(p, &ro, given, 1, NULL, out_info, NULL));

	/* outputs allocated here, to the sizes the query gave */
	fj_tensor out[2];
	for (int k = 0; k < 2; k++) {
		fj_tensor_init(&out[k]);
		out[k].dtype = out_info[k].dtype;
		out[k].rank = out_info[k].rank;
		for (int d = 0; d < out_info[k].rank; d++)
			out[k].sizes[d] = out_info[k].sizes[d];
		out[k].data = malloc(out_info[k].bytes ? out_info[k].bytes : 1);
		printf("output %s: %s, %zu bytes\n", out_info[k].name, out_info[k].type, out_info[k].bytes);
	}
	for (int i = 0; i < 5 * 8; i++)
		x[i] = (float)(i % 7) / 7.0f - 0.5f;
	in.data = x;
	CHECK(fj_program_run_with(p, &ro, &in, 1, out, 2));

	/* against the graph computed in f64 */
	fj_reference_options opts;
	fj_reference_options_init(&opts);
	opts.run = &ro;
	fj_reference *ref;
	CHECK(fj_reference_f64(ctx, m, &opts, &in, 1, NULL, 0, &ref));
	int ok = 1;
	for (size_t k = 0; k < 2; k++) {
		fj_tensor r;
		double scale, tol;
		int placed;
		CHECK(fj_reference_value(ref, k, out[k].dtype, &r, &scale, &tol));
		double err = fj_check_error(FJ_CHECK_F64, &out[k], &r, scale, &placed);
		printf("output %zu vs f64: err %.3g (tolerance %g)\n", k, err, tol);
		ok &= placed && err <= tol;
	}
	fj_reference_destroy(ref);
	for (int k = 0; k < 2; k++)
		free(out[k].data);
	fj_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	return ok ? 0 : 1;
}
