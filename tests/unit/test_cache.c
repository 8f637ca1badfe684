/* test_cache.c -- the kernel cache (cache/kcache.h): its flow (memory, disk
 * and parallel compilation) with a compile function that needs no LLVM;
 * then PTX and host kernels through it: keys by structure (identical
 * regions under other names compile once), PTX on disk across contexts,
 * corrupt entries rebuilt, threads sharing one kernel. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "backend_host/host.h"
#include "backend_nvptx/nvptx_api.h"
#include "backend_nvptx/region_gpu.h"
#include "cache/kcache.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
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

/* The memory cap (kernel_cache_mb): the least recently used entries nobody
 * holds go once the charges pass it; held ones never do. */
START_TEST(test_cache_memory_cap)
{
	fj_context *ctx = cache_ctx("off", 1);
	fj_context_settings_mut(ctx)->kernel_cache_bytes = (uint64_t)1 << 20;
	enum { N = 200, HELD = 5, PAYLOAD = 16384 };
	fj_kc_entry *held[HELD];
	char key[32];
	freed = 0;
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "k%d", i);
		fj_kc_entry *e = fj_kcache_insert(ctx, "test", key, strlen(key), calloc(1, PAYLOAD), PAYLOAD);
		ck_assert_ptr_nonnull(e);
		e->value = malloc(8);
		e->value_free = value_free;
		if (i < HELD)
			held[i] = e;
		else
			fj_kcache_release(ctx, e);
	}
	uint64_t c[FJ_KC_COUNT];
	fj_kcache_counters(ctx, c);
	ck_assert_int_gt(freed, N / 2); /* 1 MiB holds fewer than 64 of these */
	ck_assert_uint_eq(c[FJ_KC_MEMORY_EVICTIONS], (uint64_t)freed);
	int present = 0;
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "k%d", i);
		fj_kc_entry *e = fj_kcache_find(ctx, "test", key, strlen(key));
		if (i < HELD)
			ck_assert_ptr_eq(e, held[i]); /* held: never evicted */
		if (i == HELD || i == N / 2)
			ck_assert_ptr_null(e); /* old and free: evicted */
		if (i == N - 1)
			ck_assert_ptr_nonnull(e); /* the newest stays */
		present += e != NULL;
		fj_kcache_release(ctx, e);
	}
	ck_assert_int_eq(present + freed, N);
	ck_assert_int_le(present, HELD + 64);
	for (int i = 0; i < HELD; i++)
		fj_kcache_release(ctx, held[i]);
	int before = freed;
	fj_context_destroy(ctx);
	ck_assert_int_eq(freed, N); /* the rest with the context */
	ck_assert_int_lt(before, N);
}
END_TEST

/* ---- PTX and host kernels through the cache ---- */

/* Three layers of the same structure (a matmul region each, fj_main_k0..2;
 * the first differs in order: CSE moves the constants the later ones share
 * ahead), then a region that differs (a softmax-like row). */
static const char layers_src[] = "graph @main(%x: f32[N,64], %w1: f32[64,64], %c1: f32[64], %w2: f32[64,64],"
                                 " %c2: f32[64], %w3: f32[64,64], %c3: f32[64]) {\n"
                                 "  %h1 = aten.linear(%x, %w1, %c1)\n"
                                 "  %a1 = aten.gelu(%h1) {approximate=\"tanh\"}\n"
                                 "  %h2 = aten.linear(%a1, %w2, %c2)\n"
                                 "  %a2 = aten.gelu(%h2) {approximate=\"tanh\"}\n"
                                 "  %h3 = aten.linear(%a2, %w3, %c3)\n"
                                 "  %a3 = aten.gelu(%h3) {approximate=\"tanh\"}\n"
                                 "  %s = aten.sum(%a3) {dims=[1], keepdim=true}\n"
                                 "  %d = aten.div(%a3, %s)\n"
                                 "  return %d\n"
                                 "}\n";

static fj_context *ptx_ctx(const char *dir, fj_module **m)
{
	fj_context *ctx = fj_context_new(NULL, NULL);
	ck_assert_int_eq(fj_kcache_configure(ctx, dir, 0), FJ_OK);
	ck_assert_int_eq(fj_parse_module(ctx, layers_src, strlen(layers_src), "layers.fj", m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(*m, fj_named_pipeline("default"), NULL), FJ_OK);
	return ctx;
}

/* The fusion.kernel nodes' region keys: how many distinct. */
static uint32_t distinct_kernels(const fj_graph *g)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		bool seen = false;
		fj_buf a;
		fj_buf_init(&a, fj_graph_ctx(g));
		fj_cg_node_key(&a, g, i);
		for (uint32_t k = 0; k < i && !seen; k++) {
			fj_buf b;
			fj_buf_init(&b, fj_graph_ctx(g));
			fj_cg_node_key(&b, g, k);
			seen = a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
			fj_buf_free(&b);
		}
		fj_buf_free(&a);
		n += !seen;
	}
	return n;
}

START_TEST(test_cache_emit_ptx_shares)
{
	fj_module *m;
	fj_context *ctx = ptx_ctx("off", &m);
	fj_graph *g = fj_module_find_graph(m, "main");
	uint32_t nd = distinct_kernels(g);
	ck_assert_uint_eq(g->nnodes, 4);
	ck_assert_uint_lt(nd, g->nnodes); /* layers' regions share a key */
	fj_buf out;
	fj_buf_init(&out, ctx);
	ck_assert_int_eq(fj_nvptx_emit_module(ctx, m, "sm_80", false, &out), FJ_OK);
	uint64_t c[FJ_KC_COUNT];
	fj_kcache_counters(ctx, c);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], nd);
	/* every node's entry, under its own name, once; one header */
	for (uint32_t i = 0; i < g->nnodes; i++) {
		char e[128];
		snprintf(e, sizeof e, ".entry %s(", g->nodes[i].kernel);
		const char *at = strstr(out.data, e);
		ck_assert_msg(at != NULL, "%s missing", e);
		ck_assert_ptr_null(strstr(at + 1, e));
		snprintf(e, sizeof e, "%s_param_0", g->nodes[i].kernel);
		ck_assert_ptr_nonnull(strstr(out.data, e));
	}
	ck_assert_ptr_null(strstr(strstr(out.data, ".version") + 1, ".version"));
	/* again: all from memory, the same text */
	fj_buf again;
	fj_buf_init(&again, ctx);
	ck_assert_int_eq(fj_nvptx_emit_module(ctx, m, "sm_80", false, &again), FJ_OK);
	fj_kcache_counters(ctx, c);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], nd);
	ck_assert_uint_eq(c[FJ_KC_MEMORY_HITS], g->nnodes);
	ck_assert_uint_eq(again.len, out.len);
	ck_assert(memcmp(again.data, out.data, out.len) == 0);
	fj_buf_free(&again);
	fj_buf_free(&out);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

static int for_entries(const char *dir, void (*f)(const char *path))
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t l = strlen(de->d_name);
		if (l < 5 || strcmp(de->d_name + l - 4, ".fjc") != 0)
			continue;
		char p[1200];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		f(p);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static void flip(const char *path)
{
	FILE *f = fopen(path, "r+b");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, n / 2, SEEK_SET);
	int c = fgetc(f);
	fseek(f, n / 2, SEEK_SET);
	fputc(c ^ 0x5a, f);
	fclose(f);
}

static void nothing(const char *path) { (void)path; }

/* The region PTX of every node of a fresh context on dir; its counters. */
static void regions_on_disk(const char *dir, uint64_t c[FJ_KC_COUNT], char **ptx0)
{
	fj_module *m;
	fj_context *ctx = ptx_ctx(dir, &m);
	fj_graph *g = fj_module_find_graph(m, "main");
	for (uint32_t i = 0; i < g->nnodes; i++) {
		fj_nvptx_kernel *k = NULL;
		bool hit = true;
		ck_assert_int_eq(fj_nvptx_compile_region(ctx, g, i, "sm_80", &k, &hit), FJ_OK);
		ck_assert_ptr_nonnull(strstr(k->ptx, ".entry "));
		if (i == 0)
			*ptx0 = strdup(k->ptx);
	}
	fj_kcache_counters(ctx, c);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}

START_TEST(test_cache_ptx_on_disk)
{
	char dir[] = "/tmp/fj-unit-ptx.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	uint64_t c[FJ_KC_COUNT];
	char *first = NULL, *later = NULL;
	regions_on_disk(dir, c, &first); /* cold: compiled and stored */
	ck_assert_uint_gt(c[FJ_KC_KERNELS_COMPILED], 0);
	ck_assert_uint_eq(c[FJ_KC_DISK_STORES], c[FJ_KC_KERNELS_COMPILED]);
	ck_assert_uint_gt(c[FJ_KC_MEMORY_HITS], 0); /* the second layer's regions */
	int entries = for_entries(dir, nothing);
	ck_assert_int_eq(entries, (int)c[FJ_KC_DISK_STORES]);
	regions_on_disk(dir, c, &later); /* a second context: everything from the disk */
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], 0);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_LOADED], (uint64_t)entries);
	ck_assert_str_eq(first, later);
	free(later);
	for_entries(dir, flip); /* corrupt: detected, rebuilt, stored again */
	regions_on_disk(dir, c, &later);
	ck_assert_uint_eq(c[FJ_KC_DISK_CORRUPT], (uint64_t)entries);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], (uint64_t)entries);
	ck_assert_str_eq(first, later);
	free(later);
	regions_on_disk(dir, c, &later);
	ck_assert_uint_eq(c[FJ_KC_KERNELS_COMPILED], 0);
	free(later);
	free(first);
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

typedef struct racer {
	fj_context *ctx;
	fj_graph *g;
	fj_nvptx_kernel *k[16];
	fj_host_kernel h[16];
	fj_status st;
} racer;

static void *race(void *p)
{
	racer *r = p;
	uint32_t nodes[16];
	for (uint32_t i = 0; i < r->g->nnodes; i++) {
		nodes[i] = i;
		if (r->st == FJ_OK)
			r->st = fj_nvptx_compile_region(r->ctx, r->g, i, "sm_80", &r->k[i], NULL);
	}
	if (r->st == FJ_OK)
		r->st = fj_host_compile_nodes(r->ctx, r->g, nodes, r->g->nnodes, r->h, NULL);
	return NULL;
}

START_TEST(test_cache_threads_share)
{
	/* threads compiling the same regions at once get one kernel each */
	fj_module *m;
	fj_context *ctx = ptx_ctx("off", &m);
	fj_graph *g = fj_module_find_graph(m, "main");
	ck_assert_uint_le(g->nnodes, 16);
	racer r[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		memset(&r[i], 0, sizeof r[i]);
		r[i].ctx = ctx;
		r[i].g = g;
		ck_assert_int_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(r[i].st, FJ_OK);
		for (uint32_t n = 0; n < g->nnodes; n++) {
			ck_assert_ptr_eq(r[i].k[n], r[0].k[n]);
			ck_assert_ptr_eq(r[i].h[n].fn, r[0].h[n].fn);
		}
	}
	/* structure, not names: the layers' identical regions share */
	uint32_t nd = distinct_kernels(g);
	int shared = 0;
	for (uint32_t n = 0; n < g->nnodes; n++)
		for (uint32_t k = 0; k < n; k++)
			shared += r[0].k[n] == r[0].k[k] && r[0].h[n].fn == r[0].h[k].fn;
	ck_assert_int_eq(shared, (int)(g->nnodes - nd));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
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
	tcase_add_test(tc, test_cache_memory_cap);
	suite_add_tcase(s, tc);
	TCase *tk = tcase_create("kernels");
	tcase_set_timeout(tk, 300);
	tcase_add_test(tk, test_cache_emit_ptx_shares);
	tcase_add_test(tk, test_cache_ptx_on_disk);
	tcase_add_test(tk, test_cache_threads_share);
	suite_add_tcase(s, tk);
	return s;
}
