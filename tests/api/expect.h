/* expect.h -- the checks of the C API test programs (tests/api/,
 * tests/driver/): a failed check prints its place and counts in `fails`; the
 * program exits nonzero when any failed. Also their two small helpers: a
 * graph's text compiled, an f32 tensor of rank 0 to 2 described. Include
 * once per program, after <stdio.h>, <string.h> and fusejit.h. */
#ifndef FJ_TESTS_API_EXPECT_H
#define FJ_TESTS_API_EXPECT_H

static int fails;
#define EXPECT(c)                                                                 \
	do {                                                                      \
		if (!(c)) {                                                       \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c); \
			fails++;                                                  \
		}                                                                 \
	} while (0)
#define EXPECT_OK(ctx, call)                                                                          \
	do {                                                                                          \
		fj_status st_ = (call);                                                               \
		if (st_ != FJ_OK) {                                                                   \
			fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, fj_status_name(st_), \
			        fj_context_error(ctx));                                               \
			fails++;                                                                      \
		}                                                                                     \
	} while (0)

/* Compiles graph text (named `file` in diagnostics) for executor ex
 * (training: a forward and backward; pipeline NULL: the executor's). */
static inline fj_status compile_text(fj_context *ctx, const char *text, const char *file, fj_executor ex, int training,
                                     const char *pipeline, fj_program **p)
{
	fj_module *m = NULL;
	fj_status st = fj_module_parse(ctx, text, strlen(text), file, &m);
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = ex;
	o.training = training;
	o.pipeline = pipeline;
	if (st == FJ_OK)
		st = fj_compile(ctx, m, &o, p);
	fj_module_destroy(m);
	return st;
}

/* An f32 tensor over data on device dev: sizes d0 (rank >= 1), d1 (rank 2). */
static inline fj_tensor f32_tensor(void *data, fj_device dev, int rank, int64_t d0, int64_t d1)
{
	fj_tensor t;
	memset(&t, 0, sizeof t);
	t.data = data;
	t.dtype = FJ_TYPE_F32;
	t.rank = rank;
	t.sizes[0] = d0;
	t.sizes[1] = d1;
	t.device = dev;
	return t;
}

#endif
