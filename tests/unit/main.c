/* main.c -- runs the unit suites: all of them, or the one named by argv[1]
 * (CTest registers one test per suite). Fork mode, so a crash fails a test.
 * Exits 1 when a test failed or none ran, else 77 when a test skipped
 * (fj_test_skip; CTest's SKIP_RETURN_CODE), else 0. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "test.h"

atomic_int fj_test_runner_calls, fj_test_runner_threads, fj_test_runner_most;

typedef struct runner_thread {
	void (*body)(void *);
	void *arg;
} runner_thread;

static void *runner_main(void *v)
{
	runner_thread *t = v;
	t->body(t->arg);
	return NULL;
}

void fj_test_runner(void (*body)(void *), void *arg, unsigned nthreads, unsigned flags)
{
	ck_assert_uint_eq(flags, 0);
	ck_assert_uint_le(nthreads, 16);
	atomic_fetch_add(&fj_test_runner_calls, 1);
	atomic_fetch_add(&fj_test_runner_threads, (int)nthreads);
	int most = atomic_load(&fj_test_runner_most);
	while ((int)nthreads > most && !atomic_compare_exchange_weak(&fj_test_runner_most, &most, (int)nthreads))
		;
	pthread_t tid[16];
	runner_thread t = {body, arg};
	for (unsigned i = 1; i < nthreads; i++)
		ck_assert_int_eq(pthread_create(&tid[i], NULL, runner_main, &t), 0);
	body(arg);
	for (unsigned i = 1; i < nthreads; i++)
		pthread_join(tid[i], NULL);
}

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

/* The skip log: a temporary file opened before the tests fork, so every
 * child appends to the same open file (one test runs at a time). */
static int skip_fd = -1;

void fj_test_skip(const char *test, const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "%s: skipped: ", test);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof line)
		n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof line - 1)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	fwrite(line, 1, (size_t)n, stderr);
	if (skip_fd < 0 || write(skip_fd, line, (size_t)n) != (ssize_t)n) {
		fprintf(stderr, "fj-unit: cannot record the skip\n");
		abort();
	}
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
	FILE *log = tmpfile();
	if (!log) {
		perror("fj-unit: tmpfile");
		return 1;
	}
	skip_fd = fileno(log);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	/* check's CK_RUN_CASE or CK_INCLUDE_TAGS can select no test: a failure */
	if (srunner_ntests_run(sr) == 0) {
		fprintf(stderr, "fj-unit: no test ran (CK_RUN_CASE, CK_INCLUDE_TAGS?)\n");
		failed = 1;
	}
	srunner_free(sr);
	/* the skips again, after check's summary, so CTest's output shows why */
	char buf[4096];
	size_t got, skipped = 0;
	rewind(log);
	while ((got = fread(buf, 1, sizeof buf, log)) > 0) {
		if (skipped == 0)
			fprintf(stderr, "fj-unit: skipped checks (exit 77 unless a test failed):\n");
		for (size_t i = 0; i < got; i++)
			skipped += buf[i] == '\n';
		fwrite(buf, 1, got, stderr);
	}
	fclose(log);
	if (failed)
		return 1;
	return skipped ? 77 : 0;
}
