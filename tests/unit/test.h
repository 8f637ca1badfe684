/* test.h -- shared helpers for fusejit's unit tests (check, fork mode). */
#ifndef FJ_TEST_H
#define FJ_TEST_H

#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define SUITE(name) Suite *suite_##name(void);
#include "suites.def"

/* A context whose allocator fails the n-th allocation (counting from 1) and
 * every one after it, when fail_at > 0. */
typedef struct fj_test_alloc {
	long count, fail_at;
	size_t live;
} fj_test_alloc;
void *fj_test_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize);

/* A parallel runner of fj_parallel_runner's documented contract: body on
 * nthreads threads (16 at most), the caller one of them, back when all have
 * returned. It counts its calls, the bodies it started and the most threads
 * one call asked for. */
extern atomic_int fj_test_runner_calls, fj_test_runner_threads, fj_test_runner_most;
void fj_test_runner(void (*body)(void *), void *arg, unsigned nthreads, unsigned flags);

/* The directory of tests/ (FJ_TEST_DATA), for data files. */
const char *fj_test_data_dir(void);

/* Records that the calling test skipped (part of) its checks and why: the
 * line goes to stderr and to the runner's skip log, and a suite that skipped
 * anything (and failed nothing) exits 77, which CTest reports as a skip.
 * The caller returns (or goes on without the checks it cannot make). */
void fj_test_skip(const char *test, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
