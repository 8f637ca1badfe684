/* test_cache.c -- the kernel cache's flow (cache/kcache.h): memory, disk and
 * parallel compilation, with a compile function that needs no LLVM. */
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "cache/kcache.h"
#include "test.h"

typedef struct fake {
	atomic_int calls;
	int fail_at; /* request index whose compile fails (-1: none) */
	const fj_kc_request *req;
} fake;

/* A payload: "compiled:" + the key. Request fail_at records two diagnostics
 * and fails; every request records a warning first. */
static fj_status fake_compile(void *arg, fj_context *dctx, uint32_t i, void **data, size_t *len)
{
	fake *f = arg;
	atomic_fetch_add(&f->calls, 1);
	usleep(1000 * (i % 3)); /* let the threads finish out of order */
	fj_warning(dctx, (fj_loc){"k.fj", i + 1, 1}, "compiling %u", i);
	if ((int)i == f->fail_at) {
		fj_error(dctx, (fj_loc){"k.fj", i + 1, 2}, "kernel %u does not compile", i);
		return FJ_ERR_INVALID;
	}
	const fj_kc_request *r = &f->req[i];
	char *p = malloc(9 + r->keylen);
	memcpy(p, "compiled:", 9);
	memcpy(p + 9, r->key, r->keylen);
	*data = p;
	*len = 9 + r->keylen;
	return FJ_OK;
}

static fj_context *cache_ctx(const char *dir, int jobs)
{
	fj_context *ctx = fj_context_new(NULL, NULL);
	fj_context_settings_mut(ctx)->compile_jobs = jobs;
	ck_assert_int_eq(fj_kcache_configure(ctx, dir, 0), FJ_OK);
	return ctx;
}

static void make_reqs(fj_kc_request *req, const char *const *keys, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		req[i] = (fj_kc_request){keys[i], strlen(keys[i]), NULL};
}

static const char *const keys[] = {"a", "b", "a", "c", "b", "d", "e", "a"};
#define NKEYS 8u

START_TEST(test_cache_memory_and_duplicates)
{
	fj_context *ctx = cache_ctx("off", _i ? 4 : 1);
	fj_kc_request req[NKEYS];
	make_reqs(req, keys, NKEYS);
	fake f = {.fail_at = -1, .req = req};
	uint32_t fresh = 0;
	ck_assert_int_eq(fj_kcache_get(ctx, "test", "t1", req, NKEYS, fake_compile, &f, &fresh), FJ_OK);
	ck_assert_int_eq(atomic_load(&f.calls), 5); /* a b c d e, once each */
	ck_assert_uint_eq(fresh, 5);
	for (uint32_t i = 0; i < NKEYS; i++) {
		ck_assert_ptr_nonnull(req[i].entry);
		ck_assert_uint_eq(req[i].entry->len, 9 + strlen(keys[i]));
		ck_assert(memcmp((char *)req[i].entry->data + 9, keys[i], strlen(keys[i])) == 0);
	}
	ck_assert_ptr_eq(req[0].entry, req[2].entry);
	ck_assert_ptr_eq(req[0].entry, req[7].entry);
	ck_assert_ptr_ne(req[0].entry, req[1].entry);
	uint64_t c[FJ_KC_COUNT];
	fj_kcache_counters(ctx, c);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], 5);
	ck_assert_uint_eq(c[FJ_KC_MEMORY_HITS], 0);
	/* again: all from memory, the same entries */
	fj_kc_entry *first = req[3].entry;
	make_reqs(req, keys, NKEYS);
	ck_assert_int_eq(fj_kcache_get(ctx, "test", "t1", req, NKEYS, fake_compile, &f, &fresh), FJ_OK);
	ck_assert_uint_eq(fresh, 0);
	ck_assert_int_eq(atomic_load(&f.calls), 5);
	ck_assert_ptr_eq(req[3].entry, first);
	fj_kcache_counters(ctx, c);
	ck_assert_uint_eq(c[FJ_KC_MEMORY_HITS], NKEYS);
	/* another kind does not share */
	ck_assert_ptr_null(fj_kcache_find(ctx, "other", "a", 1));
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_cache_diagnostics_in_order)
{
	/* job 3 fails: the diagnostics of jobs 0..3 come out in job order, the
	 * status is job 3's, and nothing enters memory, whatever the threads */
	fj_context *ctx = cache_ctx("off", _i ? 4 : 1);
	const char *const k[] = {"k0", "k1", "k2", "k3", "k4", "k5"};
	fj_kc_request req[6];
	make_reqs(req, k, 6);
	fake f = {.fail_at = 3, .req = req};
	ck_assert_int_eq(fj_kcache_get(ctx, "test", "t", req, 6, fake_compile, &f, NULL), FJ_ERR_INVALID);
	ck_assert_uint_eq(fj_context_diagnostic_count(ctx), 5);
	for (uint32_t d = 0; d < 4; d++) {
		const fj_diagnostic *dg = fj_context_diagnostic(ctx, d);
		ck_assert_uint_eq(dg->line, d + 1);
		ck_assert_int_eq(dg->severity, FJ_SEV_WARNING);
	}
	const fj_diagnostic *e = fj_context_diagnostic(ctx, 4);
	ck_assert_int_eq(e->severity, FJ_SEV_ERROR);
	ck_assert_str_eq(e->message, "kernel 3 does not compile");
	for (int i = 0; i < 6; i++)
		ck_assert_ptr_null(req[i].entry);
	ck_assert_ptr_null(fj_kcache_find(ctx, "test", "k0", 2));
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_cache_disk_batch)
{
	char dir[] = "/tmp/fj-unit-cache.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	fj_kc_request req[NKEYS];
	uint64_t c[FJ_KC_COUNT];
	for (int round = 0; round < 3; round++) {
		/* 0: compiled and stored; 1: loaded; 2: another target compiles */
		fj_context *ctx = cache_ctx(dir, 2);
		make_reqs(req, keys, NKEYS);
		fake f = {.fail_at = -1, .req = req};
		uint32_t fresh = 0;
		ck_assert_int_eq(fj_kcache_get(ctx, "test", round == 2 ? "t2" : "t1", req, NKEYS, fake_compile, &f, &fresh),
		                 FJ_OK);
		ck_assert_uint_eq(fresh, 5);
		fj_kcache_counters(ctx, c);
		ck_assert_int_eq(atomic_load(&f.calls), round == 1 ? 0 : 5);
		ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], round == 1 ? 0 : 5);
		ck_assert_uint_eq(c[FJ_KC_KERNELS_LOADED], round == 1 ? 5 : 0);
		ck_assert_uint_eq(c[FJ_KC_DISK_STORES], round == 1 ? 0 : 1);
		for (uint32_t i = 0; i < NKEYS; i++)
			ck_assert(memcmp((char *)req[i].entry->data + 9, keys[i], strlen(keys[i])) == 0);
		fj_context_destroy(ctx);
	}
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static int freed;
static void value_free(fj_context *ctx, void *v)
{
	(void)ctx;
	freed++;
	free(v);
}

START_TEST(test_cache_insert_race_and_values)
{
	fj_context *ctx = cache_ctx("off", 1);
	fj_kc_entry *a = fj_kcache_insert(ctx, "test", "x", 1, strdup("one"), 4);
	fj_kc_entry *b = fj_kcache_insert(ctx, "test", "x", 1, strdup("two"), 4); /* lost the race */
	ck_assert_ptr_eq(a, b);
	ck_assert_str_eq(a->data, "one");
	a->value = malloc(8);
	a->value_free = value_free;
	freed = 0;
	fj_context_destroy(ctx);
	ck_assert_int_eq(freed, 1);
}
END_TEST

Suite *suite_cache(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("flow");
	tcase_add_loop_test(tc, test_cache_memory_and_duplicates, 0, 2);
	tcase_add_loop_test(tc, test_cache_diagnostics_in_order, 0, 2);
	tcase_add_test(tc, test_cache_disk_batch);
	tcase_add_test(tc, test_cache_insert_race_and_values);
	suite_add_tcase(s, tc);
	return s;
}
