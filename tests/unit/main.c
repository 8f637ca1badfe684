/* main.c -- runs the unit suites: all of them, or the one named by argv[1]
 * (CTest registers one test per suite). Fork mode, so a crash fails a test. */
#include <stdio.h>

#include "test.h"

void *fj_test_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize)
{
	fj_test_alloc *a = ud;
	if (nsize == 0) {
		if (ptr)
			a->live -= osize;
		free(ptr);
		return NULL;
	}
	a->count++;
	if (a->fail_at > 0 && a->count >= a->fail_at)
		return NULL;
	void *p = realloc(ptr, nsize);
	if (p)
		a->live += nsize - (ptr ? osize : 0);
	return p;
}

const char *fj_test_data_dir(void)
{
	const char *d = getenv("FJ_TEST_DATA");
	return d ? d : "tests";
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		Suite *(*make)(void);
	} suites[] = {
#define SUITE(name) {#name, suite_##name},
#include "suites.def"
	};
	SRunner *sr = NULL;
	for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
		if (argc > 1 && strcmp(argv[1], suites[i].name) != 0)
			continue;
		if (!sr)
			sr = srunner_create(suites[i].make());
		else
			srunner_add_suite(sr, suites[i].make());
	}
	if (!sr) {
		fprintf(stderr, "fj-unit: no suite named '%s'\n", argc > 1 ? argv[1] : "");
		return 1;
	}
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
