/* kcompile.c -- the kernel cache's flow (kcache.h fj_kcache_get): memory,
 * then disk, then the caller's compile function on several threads.
 *
 * A batch is the kernels one call asks for (a graph's regions, a module's
 * kernels). Its hits in memory cost one hash lookup each; its distinct
 * misses (duplicates in the batch are compiled once) form one disk entry,
 * keyed by the kind, the target description and the missing keys in order,
 * so a process that asks for the same batch again loads it in one read.
 * What is still missing is compiled by fj_kcache_parallel: jobs handed out
 * in order to up to compile_jobs threads, each with its own diagnostics
 * context, replayed onto the caller's in job order once all have joined,
 * so that diagnostics and status do not depend on the timing.
 *
 * Two threads that miss the same key at once both compile it; the first to
 * enter it in memory wins and the other's payload is dropped
 * (fj_kcache_insert), so everyone uses one entry. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/kcache.h"

/* ---- parallel jobs ---- */

int fj_kcache_jobs(fj_context *ctx)
{
	int n = fj_context_settings(ctx)->compile_jobs;
	if (n >= 1)
		return n;
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	return c < 1 ? 1 : c > 256 ? 256 : (int)c;
}

typedef struct job_state {
	fj_status st;
	bool done;
	fj_context *dctx; /* where its diagnostics went */
	size_t d0, d1;    /* ... their range there */
} job_state;

typedef struct prun {
	fj_kc_job_fn job;
	void *arg;
	uint32_t n;
	atomic_uint next;       /* the next job to hand out */
	atomic_uint first_fail; /* the lowest failed job so far (n: none) */
	job_state *js;
} prun;

typedef struct pworker {
	prun *r;
	fj_context *dctx;
	pthread_t tid;
} pworker;

static void run_jobs(prun *r, fj_context *dctx)
{
	for (;;) {
		uint32_t i = atomic_fetch_add(&r->next, 1);
		if (i >= r->n)
			return;
		if (i > atomic_load(&r->first_fail))
			continue; /* an earlier job failed: its diagnostic is the one */
		job_state *j = &r->js[i];
		j->dctx = dctx;
		j->d0 = fj_context_diagnostic_count(dctx);
		j->st = r->job(r->arg, dctx, i);
		j->d1 = fj_context_diagnostic_count(dctx);
		j->done = true;
		if (j->st != FJ_OK) {
			unsigned f = atomic_load(&r->first_fail);
			while (i < f && !atomic_compare_exchange_weak(&r->first_fail, &f, i))
				;
		}
	}
}

static void *worker_main(void *p)
{
	pworker *w = p;
	run_jobs(w->r, w->dctx);
	return NULL;
}

static fj_status replay(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static fj_status replay(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	st = fj_verror(ctx, st, sev, loc, fmt, ap);
	va_end(ap);
	return st;
}

/* Starts up to nthreads - 1 workers (each with its own context); returns how many started. */
static int start_workers(fj_context *ctx, prun *r, pworker *w, int nthreads)
{
	pthread_attr_t attr;
	bool attr_ok = pthread_attr_init(&attr) == 0;
	size_t stack = 0; /* LLVM's passes recurse: at least 8 MiB, as a main thread has */
	if (attr_ok && pthread_attr_getstacksize(&attr, &stack) == 0 && stack < ((size_t)8 << 20))
		pthread_attr_setstacksize(&attr, (size_t)8 << 20);
	int started = 0;
	for (int t = 0; t < nthreads - 1; t++) {
		w[started].r = r;
		w[started].dctx = fj_context_new_like(ctx);
		if (!w[started].dctx)
			break;
		if (pthread_create(&w[started].tid, attr_ok ? &attr : NULL, worker_main, &w[started]) != 0) {
			fj_context_destroy(w[started].dctx);
			break;
		}
		started++;
	}
	if (attr_ok)
		pthread_attr_destroy(&attr);
	return started;
}

fj_status fj_kcache_parallel(fj_context *ctx, uint32_t n, int threads, fj_kc_job_fn job, void *arg)
{
	if (threads <= 0)
		threads = fj_kcache_jobs(ctx);
	if ((uint32_t)threads > n)
		threads = (int)n;
	if (threads <= 1) { /* serially, into ctx, up to the first failure */
		for (uint32_t i = 0; i < n; i++) {
			fj_status st = job(arg, ctx, i);
			if (st != FJ_OK)
				return st;
		}
		return FJ_OK;
	}
	prun r = {.job = job, .arg = arg, .n = n};
	atomic_init(&r.next, 0);
	atomic_init(&r.first_fail, n);
	r.js = calloc(n, sizeof *r.js);
	pworker *w = calloc((size_t)threads, sizeof *w);
	fj_context *own = r.js && w ? fj_context_new_like(ctx) : NULL;
	if (!own) {
		free(r.js);
		free(w);
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory starting the compile jobs");
	}
	int started = start_workers(ctx, &r, w, threads);
	run_jobs(&r, own);
	for (int t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	uint32_t fail = n;
	for (uint32_t i = 0; i < n && fail == n; i++)
		if (r.js[i].done && r.js[i].st != FJ_OK)
			fail = i;
	fj_status st = fail < n ? r.js[fail].st : FJ_OK;
	for (uint32_t i = 0; i <= fail && i < n; i++) { /* replay jobs 0..fail onto ctx */
		job_state *j = &r.js[i];
		if (!j->done)
			continue;
		bool error = false;
		for (size_t d = j->d0; d < j->d1; d++) {
			const fj_diagnostic *dg = fj_context_diagnostic(j->dctx, d);
			if (!dg)
				break;
			error |= dg->severity == FJ_SEV_ERROR;
			replay(ctx, j->st, dg->severity, (fj_loc){dg->file, dg->line, dg->col}, "%s", dg->message);
		}
		if (j->st != FJ_OK && !error) /* not kept there (out of memory): its last error */
			fj_error_status(ctx, j->st, (fj_loc){0}, "%s", fj_context_error(j->dctx));
	}
	for (int t = 0; t < started; t++)
		fj_context_destroy(w[t].dctx);
	fj_context_destroy(own);
	free(w);
	free(r.js);
	return st;
}

/* ---- the flow ---- */

typedef struct batch {
	fj_kc_compile_fn compile;
	void *arg;
	const uint32_t *miss; /* request index of each distinct miss */
	void **data;
	size_t *len;
} batch;

static fj_status compile_job(void *arg, fj_context *dctx, uint32_t i)
{
	batch *b = arg;
	return b->compile(b->arg, dctx, b->miss[i], &b->data[i], &b->len[i]);
}

/* The disk payload of a batch: u32 count | u64 length x count | payloads. */
static void store_batch(fj_context *ctx, const char *kind, const fj_buf *bkey, uint32_t nmiss, void **data,
                        const size_t *len)
{
	size_t total = 4 + 8 * (size_t)nmiss;
	for (uint32_t m = 0; m < nmiss; m++)
		total += len[m];
	unsigned char *p = malloc(total);
	if (!p) {
		fj_kcache_count(ctx, FJ_KC_STORE_ERRORS, 1);
		return;
	}
	memcpy(p, &nmiss, 4);
	size_t off = 4 + 8 * (size_t)nmiss;
	for (uint32_t m = 0; m < nmiss; m++) {
		uint64_t l = len[m];
		memcpy(p + 4 + 8 * (size_t)m, &l, 8);
		memcpy(p + off, data[m], len[m]);
		off += len[m];
	}
	fj_kcache_store(ctx, kind, bkey->data, bkey->len, p, total);
	free(p);
}

/* Splits a verified batch payload into nmiss malloc'd payloads; false when it
 * does not hold nmiss of them (then nothing is kept). */
static bool split_batch(const unsigned char *p, size_t plen, uint32_t nmiss, void **data, size_t *len)
{
	uint32_t cnt = 0;
	if (plen < 4 || (memcpy(&cnt, p, 4), cnt != nmiss) || plen < 4 + 8 * (size_t)nmiss)
		return false;
	size_t off = 4 + 8 * (size_t)nmiss;
	for (uint32_t m = 0; m < nmiss; m++) {
		uint64_t l;
		memcpy(&l, p + 4 + 8 * (size_t)m, 8);
		if (l > plen - off)
			return false;
		len[m] = (size_t)l;
		off += len[m];
	}
	if (off != plen)
		return false;
	off = 4 + 8 * (size_t)nmiss;
	for (uint32_t m = 0; m < nmiss; m++) {
		data[m] = malloc(len[m] ? len[m] : 1);
		if (!data[m]) {
			for (uint32_t k = 0; k < m; k++)
				free(data[k]);
			return false;
		}
		memcpy(data[m], p + off, len[m]);
		off += len[m];
	}
	return true;
}

/* The distinct misses of req[0..n): which[i] = the miss index of request i,
 * or -1 for a memory hit (entry set); returns their count. */
static uint32_t find_misses(fj_context *ctx, const char *kind, fj_kc_request *req, uint32_t n, uint32_t *miss,
                            uint64_t *mhash, int32_t *which)
{
	uint32_t nmiss = 0;
	for (uint32_t i = 0; i < n; i++) {
		req[i].entry = fj_kcache_find(ctx, kind, req[i].key, req[i].keylen);
		which[i] = -1;
		if (req[i].entry) {
			fj_kcache_count(ctx, FJ_KC_MEMORY_HITS, 1);
			continue;
		}
		uint64_t h = fj_kcache_hash(req[i].key, req[i].keylen, 0x6d697373);
		for (uint32_t m = 0; m < nmiss && which[i] < 0; m++) {
			const fj_kc_request *o = &req[miss[m]];
			if (mhash[m] == h && o->keylen == req[i].keylen && memcmp(o->key, req[i].key, o->keylen) == 0)
				which[i] = (int32_t)m;
		}
		if (which[i] < 0) {
			mhash[nmiss] = h;
			miss[nmiss] = i;
			which[i] = (int32_t)nmiss++;
		}
	}
	return nmiss;
}

fj_status fj_kcache_get(fj_context *ctx, const char *kind, const char *target, fj_kc_request *req, uint32_t n,
                        fj_kc_compile_fn compile, void *arg, uint32_t *fresh)
{
	if (fresh)
		*fresh = 0;
	uint32_t *miss = malloc((n + 1) * sizeof *miss);
	uint64_t *mhash = malloc((n + 1) * sizeof *mhash);
	int32_t *which = malloc((n + 1) * sizeof *which);
	void **data = calloc(n + 1, sizeof *data);
	size_t *len = calloc(n + 1, sizeof *len);
	fj_buf bkey;
	fj_buf_init(&bkey, ctx);
	fj_status st = FJ_OK;
	uint32_t nmiss = 0, m = 0;
	bool found = false; /* req's entries were looked up (and hold references) */
	if (!miss || !mhash || !which || !data || !len) {
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		goto done;
	}
	nmiss = find_misses(ctx, kind, req, n, miss, mhash, which);
	found = true;
	if (!nmiss)
		goto done;
	fj_buf_printf(&bkey, "%s batch 1\n%s\n", kind, target);
	for (m = 0; m < nmiss; m++) {
		fj_buf_putn(&bkey, req[miss[m]].key, req[miss[m]].keylen);
		fj_buf_putn(&bkey, "", 1);
	}
	if (bkey.oom) {
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		goto done;
	}
	void *cached = NULL;
	size_t clen = 0;
	bool loaded = fj_kcache_load(ctx, kind, bkey.data, bkey.len, &cached, &clen) &&
	              split_batch(cached, clen, nmiss, data, len);
	free(cached); /* a verified entry that is not ours is rebuilt and overwritten */
	if (loaded) {
		fj_kcache_count(ctx, FJ_KC_KERNELS_LOADED, nmiss);
	} else {
		batch b = {compile, arg, miss, data, len};
		st = fj_kcache_parallel(ctx, nmiss, 0, compile_job, &b);
		if (st != FJ_OK)
			goto done;
		fj_kcache_count(ctx, FJ_KC_KERNELS_COMPILED, nmiss);
		store_batch(ctx, kind, &bkey, nmiss, data, len);
	}
	for (m = 0; m < nmiss; m++) {
		fj_kc_request *r = &req[miss[m]];
		r->entry = fj_kcache_insert(ctx, kind, r->key, r->keylen, data[m], len[m]);
		data[m] = NULL; /* taken */
		if (!r->entry) {
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
			goto done;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		if (which[i] >= 0 && miss[which[i]] != i) { /* a duplicate: one more reference */
			req[i].entry = req[miss[which[i]]].entry;
			fj_kcache_retain(ctx, req[i].entry);
		}
	if (fresh)
		*fresh = nmiss;
done:
	if (data)
		for (uint32_t k = 0; k < nmiss; k++)
			free(data[k]);
	if (st != FJ_OK && found)
		for (uint32_t i = 0; i < n; i++) {
			fj_kcache_release(ctx, req[i].entry);
			req[i].entry = NULL;
		}
	fj_buf_free(&bkey);
	free(miss);
	free(mhash);
	free(which);
	free(data);
	free(len);
	return st;
}
