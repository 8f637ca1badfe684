/* expect.h -- the checks of the C API test programs (tests/api/): a failed
 * check prints its place and counts in `fails`; the program exits nonzero
 * when any failed. Include once per program, after <stdio.h> and fusejit.h. */
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

#endif
