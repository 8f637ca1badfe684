/* compile_gpu.c -- a region to PTX: --emit=ptx of a module
 * (fj_nvptx_emit_module), and fj_nvptx_compile_region, which compiles a
 * region's variants in parallel (one LLVM module each, joined into one PTX
 * module) and keeps the result in the context's cache of compiled regions,
 * keyed by the region's structure. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_nvptx/nvptx_internal.h"
#include "backend_nvptx/region_gpu_internal.h"

fj_status fj_nvptx_emit_module(fj_context *ctx, const fj_module *m, const char *sm, bool llvm, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin(ctx, sm, &c);
	if (st != FJ_OK) {
		fj_nvptx_comp_end(&c);
		return st;
	}
	bool all = fj_context_settings(ctx)->ptx_all_variants;
	fj_cg cg;
	fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
	for (uint32_t gi = 0; gi < m->ngraphs && st == FJ_OK; gi++)
	for (uint32_t i = 0, nn = m->graphs[gi]->nnodes; i < nn && st == FJ_OK; i++) {
		const fj_graph *g = m->graphs[gi];
		const fj_node *n = &g->nodes[i];
		if (n->op != FJ_OP_FUSION_KERNEL) {
			st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
			                     "%s: the nvptx backend runs fused regions only (run the fuse and schedule "
			                     "passes first)",
			                     fj_op_name(n->op));
			break;
		}
		fj_rg_analysis a;
		st = fj_rg_analyze(ctx, g, i, &a);
		if (st != FJ_OK)
			break;
		st = fj_gpu_emit_region(&c, &cg, g, i, all ? -1 : 0, &a);
		fj_rg_analysis_free(&a);
	}
	fj_cg_dispose(&cg);
	if (st == FJ_OK)
		st = fj_nvptx_comp_optimise(&c);
	if (st == FJ_OK)
		st = llvm ? fj_nvptx_comp_llvm(&c, out) : fj_nvptx_comp_ptx(&c, out);
	fj_nvptx_comp_end(&c);
	return st;
}

/* ---- the cache of compiled regions ---- */

struct fj_nvptx_cache_entry {
	char *key;
	size_t keylen;
	uint64_t hash;
	fj_nvptx_kernel k;
};

void fj_nvptx_cache_free(fj_nvptx_state *s)
{
	for (uint32_t i = 0; i < s->cap; i++) {
		fj_nvptx_cache_entry *e = s->tab[i];
		if (!e)
			continue;
		free(e->key);
		free(e->k.ptx);
		if (e->k.cumod && s->cu && s->cu->init_status == FJ_OK)
			s->cu->api.cuModuleUnload(e->k.cumod);
		free(e);
	}
	free(s->tab);
	s->tab = NULL;
	s->cap = s->count = 0;
}

static fj_nvptx_cache_entry *cache_find(fj_nvptx_state *s, const char *key, size_t len, uint64_t h)
{
	if (!s->cap)
		return NULL;
	for (uint32_t i = (uint32_t)h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		fj_nvptx_cache_entry *e = s->tab[i];
		if (!e)
			return NULL;
		if (e->hash == h && e->keylen == len && memcmp(e->key, key, len) == 0)
			return e;
	}
}

static bool cache_insert(fj_nvptx_state *s, fj_nvptx_cache_entry *e)
{
	if ((s->count + 1) * 2 > s->cap) {
		uint32_t nc = s->cap ? s->cap * 2 : 64;
		fj_nvptx_cache_entry **nt = calloc(nc, sizeof *nt);
		if (!nt)
			return false;
		for (uint32_t i = 0; i < s->cap; i++) {
			if (!s->tab[i])
				continue;
			uint32_t j = (uint32_t)s->tab[i]->hash & (nc - 1);
			while (nt[j])
				j = (j + 1) & (nc - 1);
			nt[j] = s->tab[i];
		}
		free(s->tab);
		s->tab = nt;
		s->cap = nc;
	}
	uint32_t j = (uint32_t)e->hash & (s->cap - 1);
	while (s->tab[j])
		j = (j + 1) & (s->cap - 1);
	s->tab[j] = e;
	s->count++;
	return true;
}

/* The key: the target and the node's canonical key, which holds its body's
 * structure (fj_cg_node_key): identical regions under other kernel names
 * (the layers of a deep stack) share one compiled module, whose entries keep
 * the first one's names. */
static fj_status region_key(fj_context *ctx, const fj_graph *g, uint32_t node, const char *sm, fj_buf *b)
{
	fj_buf_printf(b, "%s|", sm);
	fj_cg_node_key(b, g, node);
	if (!b->oom)
		return FJ_OK;
	return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

/* ---- a region's variants compiled in parallel ----
 *
 * A region with several variants compiles each in its own compilation (LLVM
 * context, module, target machine; libdevice linked per module), up to one
 * thread per variant and per core (the calling thread takes its share),
 * variants handed out in order. Each module's local symbols get the suffix
 * _v<variant> (fj_nvptx_comp.sym_suffix), kernels keep their names, and the
 * PTX texts are joined in variant order into one module: the first whole,
 * the others without their header (comment block, .version, .target,
 * .address_size), each keeping its own forward declarations ahead of its
 * entries. The bytes do not depend on the thread count or timing.
 *
 * Diagnostics: with threads, every thread records into a private context
 * (fj_context's last error is per thread and the list is shared, so errors
 * recorded concurrently would come out in any order); once all have joined,
 * the calling thread replays onto ctx, in variant order, the diagnostics of
 * the variants up to the first failing one, whose status is returned.
 * Variants after a failed one are skipped. Serially (one core, a failed
 * thread start, compile_jobs 1), the calling thread records into ctx
 * directly and stops at the first failure: the same result. */

typedef struct pv_job {
	fj_status st;
	bool done;
	fj_buf ptx;
	fj_context *dctx;           /* where its diagnostics went */
	size_t d0, d1;              /* ... their range there */
} pv_job;

typedef struct pv_run {
	fj_nvptx_state *s;
	const char *sm;
	const fj_graph *g;
	uint32_t node;
	int nv;
	atomic_int next;            /* the next variant to hand out */
	atomic_int first_fail;      /* the lowest failed variant so far (nv: none) */
	pv_job job[FJ_NVPTX_MAX_VARIANTS];
} pv_run;

typedef struct pv_worker {
	pv_run *r;
	fj_context *dctx;
	pthread_t tid;
} pv_worker;

/* Compiles variant v alone (diagnostics into dctx) and appends its PTX to out. */
static fj_status pv_compile(pv_run *r, fj_context *dctx, int v, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin_state(dctx, r->s, r->sm, &c);
	snprintf(c.sym_suffix, sizeof c.sym_suffix, "_v%d", v);
	fj_rg_analysis a;
	bool analysed = false;
	if (st == FJ_OK) {
		st = fj_rg_analyze(dctx, r->g, r->node, &a);
		analysed = st == FJ_OK;
	}
	if (st == FJ_OK) {
		fj_cg cg;
		fj_cg_init(&cg, dctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
		st = fj_gpu_emit_region(&c, &cg, r->g, r->node, v, &a);
		fj_cg_dispose(&cg);
	}
	if (st == FJ_OK)
		st = fj_nvptx_comp_optimise(&c);
	if (st == FJ_OK)
		st = fj_nvptx_comp_ptx(&c, out);
	fj_nvptx_comp_end(&c);
	if (analysed)
		fj_rg_analysis_free(&a);
	return st;
}

static void pv_loop(pv_run *r, fj_context *dctx)
{
	for (;;) {
		int v = atomic_fetch_add(&r->next, 1);
		if (v >= r->nv)
			return;
		if (v > atomic_load(&r->first_fail))
			continue; /* an earlier variant failed: its diagnostic is the one */
		pv_job *j = &r->job[v];
		j->dctx = dctx;
		j->d0 = fj_context_diagnostic_count(dctx);
		j->st = pv_compile(r, dctx, v, &j->ptx);
		j->d1 = fj_context_diagnostic_count(dctx);
		j->done = true;
		if (j->st != FJ_OK) {
			int f = atomic_load(&r->first_fail);
			while (v < f && !atomic_compare_exchange_weak(&r->first_fail, &f, v))
				;
		}
	}
}

static void *pv_thread(void *p)
{
	pv_worker *w = p;
	pv_loop(w->r, w->dctx);
	return NULL;
}

static fj_status pv_record(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static fj_status pv_record(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	st = fj_verror(ctx, st, sev, loc, fmt, ap);
	va_end(ap);
	return st;
}

/* How many threads: the compile_jobs setting (>= 1) or the online cores, at most nv. */
static int pv_threads(const fj_context *ctx, int nv)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = fj_context_settings(ctx)->compile_jobs;
	if (jobs >= 1)
		n = jobs;
	if (n < 1)
		n = 1;
	return n < nv ? (int)n : nv;
}

/* The text after a PTX module's header: its leading comment and blank lines
 * and its .version, .target and .address_size lines. */
static size_t ptx_header_len(const char *p, size_t len)
{
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(p + i, '\n', len - i);
		size_t e = nl ? (size_t)(nl - p) + 1 : len;
		const char *l = p + i;
		size_t ll = e - i;
		while (ll && (*l == ' ' || *l == '\t')) {
			l++;
			ll--;
		}
		bool head = ll == 0 || *l == '\n' || *l == '\r' || (ll >= 2 && l[0] == '/' && l[1] == '/') ||
		            (ll >= 8 && strncmp(l, ".version", 8) == 0) || (ll >= 7 && strncmp(l, ".target", 7) == 0) ||
		            (ll >= 13 && strncmp(l, ".address_size", 13) == 0);
		if (!head)
			break;
		i = e;
	}
	return i;
}

/* Compiles the nv variants of region `node` (see above) and appends the
 * joined PTX to out. */
static fj_status pv_compile_region(fj_context *ctx, fj_nvptx_state *s, const char *sm, const fj_graph *g,
                                   uint32_t node, int nv, fj_buf *out)
{
	pv_run *r = calloc(1, sizeof *r);
	if (!r)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	r->s = s;
	r->sm = sm;
	r->g = g;
	r->node = node;
	r->nv = nv;
	atomic_init(&r->next, 0);
	atomic_init(&r->first_fail, nv);
	for (int v = 0; v < nv; v++)
		fj_buf_init(&r->job[v].ptx, ctx);
	pv_worker w[FJ_NVPTX_MAX_VARIANTS];
	int nthreads = pv_threads(ctx, nv), started = 0;
	/* the calling thread's private diagnostics, when there are threads */
	fj_context *own = nthreads > 1 ? fj_context_new_like(ctx) : NULL;
	if (own) {
		pthread_attr_t attr;
		bool attr_ok = pthread_attr_init(&attr) == 0;
		size_t stack = 0;
		if (attr_ok && pthread_attr_getstacksize(&attr, &stack) == 0 && stack < ((size_t)8 << 20))
			pthread_attr_setstacksize(&attr, (size_t)8 << 20); /* LLVM's codegen recurses */
		for (int t = 0; t < nthreads - 1; t++) {
			w[started].r = r;
			w[started].dctx = fj_context_new_like(ctx);
			if (!w[started].dctx)
				break;
			if (pthread_create(&w[started].tid, attr_ok ? &attr : NULL, pv_thread, &w[started]) != 0) {
				fj_context_destroy(w[started].dctx);
				break; /* fewer threads: the calling thread takes the rest */
			}
			started++;
		}
		if (attr_ok)
			pthread_attr_destroy(&attr);
	}
	pv_loop(r, own ? own : ctx);
	for (int t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	/* the first failing variant, in variant order */
	int fail = nv;
	for (int v = 0; v < nv && fail == nv; v++)
		if (r->job[v].done && r->job[v].st != FJ_OK)
			fail = v;
	fj_status st = fail < nv ? r->job[fail].st : FJ_OK;
	if (own) { /* replay the diagnostics of variants 0..fail onto ctx */
		for (int v = 0; v <= fail && v < nv; v++) {
			pv_job *j = &r->job[v];
			if (!j->done)
				continue;
			bool error = false;
			for (size_t i = j->d0; i < j->d1; i++) {
				const fj_diagnostic *d = fj_context_diagnostic(j->dctx, i);
				if (!d)
					break;
				error |= d->severity == FJ_SEV_ERROR;
				pv_record(ctx, j->st, d->severity, (fj_loc){d->file, d->line, d->col}, "%s", d->message);
			}
			if (j->st != FJ_OK && !error) /* not kept there (out of memory): its last error */
				fj_error_status(ctx, j->st, (fj_loc){0}, "%s", fj_context_error(j->dctx));
		}
	}
	for (int t = 0; t < started; t++)
		fj_context_destroy(w[t].dctx);
	fj_context_destroy(own);
	/* join the texts in variant order */
	for (int v = 0; v < nv && st == FJ_OK; v++) {
		const fj_buf *b = &r->job[v].ptx;
		size_t skip = v ? ptx_header_len(b->data, b->len) : 0;
		if (b->len > skip)
			fj_buf_putn(out, b->data + skip, b->len - skip);
	}
	if (st == FJ_OK && out->oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (int v = 0; v < nv; v++)
		fj_buf_free(&r->job[v].ptx);
	free(r);
	return st;
}

fj_status fj_nvptx_compile_region(fj_context *ctx, const fj_graph *g, uint32_t node, const char *sm,
                                  fj_nvptx_kernel **out, bool *hit)
{
	*out = NULL;
	if (hit)
		*hit = false;
	if (!sm)
		sm = FJ_NVPTX_DEFAULT_SM;
	fj_nvptx_state *s;
	fj_status st = fj_nvptx_state_get(ctx, &s);
	if (st != FJ_OK)
		return st;
	fj_buf key;
	fj_buf_init(&key, ctx);
	st = region_key(ctx, g, node, sm, &key);
	if (st != FJ_OK) {
		fj_buf_free(&key);
		return st;
	}
	uint64_t h = fj_hash64(key.data, key.len);
	pthread_mutex_lock(&s->lock);
	fj_nvptx_cache_entry *e = cache_find(s, key.data, key.len, h);
	pthread_mutex_unlock(&s->lock);
	if (e) {
		*out = &e->k;
		if (hit)
			*hit = true;
		fj_buf_free(&key);
		return FJ_OK;
	}
	/* compile (outside the lock: fresh LLVM contexts) */
	fj_rg_analysis a;
	bool analysed = false;
	int nv = 0;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	st = fj_nvptx_check_sm(ctx, sm);
	if (st == FJ_OK) {
		st = fj_rg_analyze(ctx, g, node, &a);
		analysed = st == FJ_OK;
	}
	if (st == FJ_OK)
		nv = fj_gpu_region_variants(&a, suffix);
	fj_buf ptx;
	fj_buf_init(&ptx, ctx);
	if (st == FJ_OK && nv > 1) {
		st = pv_compile_region(ctx, s, sm, g, node, nv, &ptx);
	} else if (st == FJ_OK) { /* one variant: one compilation, as fj_nvptx_emit_module */
		fj_nvptx_comp c;
		st = fj_nvptx_comp_begin_state(ctx, s, sm, &c);
		if (st == FJ_OK) {
			fj_cg cg;
			fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
			st = fj_gpu_emit_region(&c, &cg, g, node, -1, &a);
			fj_cg_dispose(&cg);
		}
		if (st == FJ_OK)
			st = fj_nvptx_comp_optimise(&c);
		if (st == FJ_OK)
			st = fj_nvptx_comp_ptx(&c, &ptx);
		fj_nvptx_comp_end(&c);
	}
	if (st == FJ_OK)
		fj_buf_putn(&ptx, "", 1); /* NUL-terminated for the driver */
	if (st == FJ_OK && ptx.oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	e = NULL;
	if (st == FJ_OK) {
		e = calloc(1, sizeof *e);
		if (e)
			e->key = malloc(key.len + 1);
		if (e && e->key)
			e->k.ptx = malloc(ptx.len);
		if (!e || !e->key || !e->k.ptx) {
			if (e) {
				free(e->key);
				free(e);
			}
			e = NULL;
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
	}
	if (st == FJ_OK) {
		memcpy(e->key, key.data, key.len);
		e->key[key.len] = 0;
		e->keylen = key.len;
		e->hash = h;
		memcpy(e->k.ptx, ptx.data, ptx.len);
		e->k.ptxlen = ptx.len - 1;
		const fj_node *n = &g->nodes[node];
		snprintf(e->k.name, sizeof e->k.name, "%s", n->kernel ? n->kernel : "fj_kernel");
		e->k.sched = a.sched;
		e->k.nvariants = nv;
		for (int v = 0; v < nv; v++)
			fj_gpu_entry_name(g, node, &a, v, e->k.entry[v]);
		e->k.nreds = a.nreds;
		e->k.nparams = n->nopnds + n->nres + 2;
		pthread_mutex_lock(&s->lock);
		fj_nvptx_cache_entry *other = cache_find(s, key.data, key.len, h);
		if (other) { /* compiled meanwhile by another thread */
			free(e->key);
			free(e->k.ptx);
			free(e);
			e = other;
		} else if (!cache_insert(s, e)) {
			free(e->key);
			free(e->k.ptx);
			free(e);
			e = NULL;
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
		pthread_mutex_unlock(&s->lock);
		if (e)
			*out = &e->k;
	}
	if (analysed)
		fj_rg_analysis_free(&a);
	fj_buf_free(&ptx);
	fj_buf_free(&key);
	return st;
}
