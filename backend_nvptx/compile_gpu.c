/* compile_gpu.c -- regions to PTX through the kernel cache (cache/kcache.h):
 *
 *   fj_nvptx_compile_region  a region for the runtime: its variants
 *                            compiled in parallel, one LLVM module each,
 *                            joined into one PTX module; kind "ptx".
 *   fj_nvptx_emit_module     --emit=ptx of a module: one compilation per
 *                            distinct kernel (kind "ptx-emit"), the PTX of
 *                            every fusion.kernel written in order under its
 *                            own entry names.
 *
 * Keys are structural: the target (SM, LLVM version, libdevice), the mode,
 * and the node's canonical key (fj_cg_node_key: ops, types, attributes,
 * schedule), never a kernel name. Identical regions under other names (the
 * layers of a deep stack) compile once per context and, through the disk,
 * once per machine.
 *
 * Names in a cached kernel's PTX: its entries carry the names of the node
 * that compiled it first. The runtime keeps them (fj_nvptx_kernel.entry
 * says which they are); --emit=ptx renames them to each node's names
 * (rename_ptx). Module-local symbols (helper functions, shared arrays) carry
 * a suffix made of the key's hash (fj_nvptx_comp.sym_suffix), so the
 * kernels of one module never clash; a kernel written a second time gets
 * its suffix extended by the copy's number. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend_nvptx/cuda.h"
#include "backend_nvptx/nvptx_internal.h"
#include "backend_nvptx/region_gpu_internal.h"
#include "cache/kcache.h"

/* ---- keys ---- */

/* What a kernel's PTX depends on besides its key: the LLVM version and the
 * libdevice in use (its path, size and time: a toolkit upgrade changes it). */
static void describe_target(fj_context *ctx, const char *sm, fj_buf *b)
{
	unsigned maj = 0, min = 0, pat = 0;
	LLVMGetVersion(&maj, &min, &pat);
	const char *ld = fj_nvptx_libdevice_path(ctx);
	struct stat sb;
	if (!ld || stat(ld, &sb) != 0)
		memset(&sb, 0, sizeof sb);
	fj_buf_printf(b, "nvptx %s\nllvm %u.%u.%u\nlibdevice %s %lld %lld", sm, maj, min, pat, ld ? ld : "none",
	              (long long)sb.st_size, (long long)sb.st_mtime);
}

/* A kernel's key: the mode, the target's short form (SM, the math:
 * libdevice or approximations), then the node's canonical key. */
static void kernel_key(fj_context *ctx, const char *mode, const char *sm, const fj_graph *g, uint32_t node,
                       fj_buf *b)
{
	fj_buf_printf(b, "%s|%s|%s\n", mode, sm, fj_nvptx_math_mode(ctx));
	fj_cg_node_key(b, g, node);
}

/* ---- one compilation: variant v (-1: every variant) of a region ---- */

static fj_status compile_ptx(fj_context *dctx, fj_nvptx_state *s, const char *sm, const char *suffix,
                             const fj_graph *g, uint32_t node, int v, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin_state(dctx, s, sm, &c);
	snprintf(c.sym_suffix, sizeof c.sym_suffix, "%s", suffix);
	fj_rg_analysis a;
	bool analysed = false;
	if (st == FJ_OK) {
		st = fj_gpu_analyze(dctx, g, node, &a);
		analysed = st == FJ_OK;
	}
	if (st == FJ_OK) {
		fj_cg cg;
		fj_cg_init(&cg, dctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
		st = fj_gpu_emit_region(&c, &cg, g, node, v, &a);
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

/* ---- a region's variants compiled in parallel ----
 *
 * A region with several variants compiles each in its own compilation (LLVM
 * context, module, target machine; libdevice linked per module) through
 * fj_kcache_parallel (up to compile_jobs threads; diagnostics replayed in
 * variant order). Each module's local symbols get the suffix _v<variant>,
 * kernels keep their names, and the PTX texts are joined in variant order
 * into one module: the first whole, the others without their header, each
 * keeping its own forward declarations ahead of its entries. The bytes do
 * not depend on the thread count or timing. */

typedef struct pv_run {
	fj_nvptx_state *s;
	const char *sm;
	const fj_graph *g;
	uint32_t node;
	fj_buf ptx[FJ_NVPTX_MAX_VARIANTS];
} pv_run;

static fj_status pv_job(void *arg, fj_context *dctx, uint32_t v)
{
	pv_run *r = arg;
	char suffix[16];
	snprintf(suffix, sizeof suffix, "_v%u", v);
	return compile_ptx(dctx, r->s, r->sm, suffix, r->g, r->node, (int)v, &r->ptx[v]);
}

static fj_status pv_compile_region(fj_context *ctx, fj_nvptx_state *s, const char *sm, const fj_graph *g,
                                   uint32_t node, int nv, fj_buf *out)
{
	pv_run *r = calloc(1, sizeof *r);
	if (!r)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	*r = (pv_run){.s = s, .sm = sm, .g = g, .node = node};
	for (int v = 0; v < nv; v++)
		fj_buf_init(&r->ptx[v], ctx);
	fj_status st = fj_kcache_parallel(ctx, (uint32_t)nv, 0, pv_job, r);
	for (int v = 0; v < nv && st == FJ_OK; v++) {
		const fj_buf *b = &r->ptx[v];
		size_t skip = v ? ptx_header_len(b->data, b->len) : 0;
		if (b->len > skip)
			fj_buf_putn(out, b->data + skip, b->len - skip);
	}
	if (st == FJ_OK && out->oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (int v = 0; v < nv; v++)
		fj_buf_free(&r->ptx[v]);
	free(r);
	return st;
}

/* ---- regions for the runtime (kind "ptx") ---- */

/* A region's payload: this header, then its PTX (NUL-terminated). Entries
 * from another build are never read (the disk key holds the build), so the
 * header is the struct's bytes. */
typedef struct region_head {
	char name[96];
	int32_t sched, nvariants, nreds;
	uint32_t nparams;
	char entry[FJ_NVPTX_MAX_VARIANTS][112];
} region_head;

typedef struct region_req {
	fj_nvptx_state *s;
	const char *sm;
	const fj_graph *g;
	uint32_t node;
} region_req;

static fj_status region_compile(void *arg, fj_context *dctx, uint32_t i, void **data, size_t *len)
{
	(void)i;
	region_req *q = arg;
	fj_rg_analysis a;
	fj_status st = fj_nvptx_check_sm(dctx, q->sm);
	if (st == FJ_OK)
		st = fj_gpu_analyze(dctx, q->g, q->node, &a);
	if (st != FJ_OK)
		return st;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	int nv = fj_gpu_region_variants(&a, suffix);
	region_head h;
	memset(&h, 0, sizeof h);
	const fj_node *n = &q->g->nodes[q->node];
	snprintf(h.name, sizeof h.name, "%s", n->kernel ? n->kernel : "fj_kernel");
	h.sched = a.sched;
	h.nvariants = nv;
	h.nreds = a.nreds;
	h.nparams = n->nopnds + n->nres + 2;
	for (int v = 0; v < nv; v++)
		fj_gpu_entry_name(q->g, q->node, &a, v, h.entry[v]);
	fj_rg_analysis_free(&a);
	fj_buf ptx;
	fj_buf_init(&ptx, dctx);
	fj_buf_putn(&ptx, (const char *)&h, sizeof h);
	if (nv > 1) /* one compilation per variant, in parallel */
		st = pv_compile_region(dctx, q->s, q->sm, q->g, q->node, nv, &ptx);
	else
		st = compile_ptx(dctx, q->s, q->sm, "", q->g, q->node, -1, &ptx);
	fj_buf_putn(&ptx, "", 1); /* NUL-terminated for the driver */
	if (st == FJ_OK && ptx.oom)
		st = fj_error_status(dctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (st == FJ_OK && !(*data = malloc(ptx.len)))
		st = fj_error_status(dctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (st == FJ_OK) {
		memcpy(*data, ptx.data, ptx.len);
		*len = ptx.len;
	}
	fj_buf_free(&ptx);
	return st;
}

/* value_free of a region's entry: unloads its module in the driver's
 * context, made current for it (the driver outlives the cache: slots are
 * destroyed in reverse order). */
static void kernel_free(fj_context *ctx, void *value)
{
	fj_nvptx_kernel *k = value;
	fj_cu_module_unload(ctx, k->cumod);
	free(k);
}

/* The kernel of entry e, decoded once (under s->lock). */
static fj_nvptx_kernel *region_value(fj_context *ctx, fj_nvptx_state *s, fj_kc_entry *e)
{
	pthread_mutex_lock(&s->lock);
	if (!e->value && e->len > sizeof(region_head)) {
		fj_nvptx_kernel *k = calloc(1, sizeof *k);
		if (k) {
			region_head h;
			memcpy(&h, e->data, sizeof h);
			memcpy(k->name, h.name, sizeof k->name);
			k->sched = h.sched;
			k->nvariants = h.nvariants;
			k->nreds = h.nreds;
			k->nparams = h.nparams;
			memcpy(k->entry, h.entry, sizeof k->entry);
			k->ptx = (char *)e->data + sizeof h; /* the entry keeps its payload */
			k->ptxlen = e->len - sizeof h - 1;
			e->value_free = kernel_free;
			e->value = k;
		}
	}
	fj_nvptx_kernel *k = e->value;
	pthread_mutex_unlock(&s->lock);
	if (!k)
		fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	return k;
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
	fj_buf key, target;
	fj_buf_init(&key, ctx);
	fj_buf_init(&target, ctx);
	kernel_key(ctx, "region", sm, g, node, &key);
	describe_target(ctx, sm, &target);
	if (key.oom || target.oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	region_req q = {s, sm, g, node};
	fj_kc_request req = {key.data, key.len, NULL};
	uint32_t fresh = 0;
	if (st == FJ_OK)
		st = fj_kcache_get(ctx, "ptx", target.data, &req, 1, region_compile, &q, &fresh);
	if (st == FJ_OK) {
		/* The reference fj_kcache_get took is never dropped: nvptx programs
		 * keep bare kernel pointers, so their entries stay for the context's
		 * life (never evicted) and the CUDA modules stay loaded. */
		*out = region_value(ctx, s, req.entry);
		st = *out ? FJ_OK : FJ_ERR_NOMEM;
		if (hit)
			*hit = fresh == 0;
	}
	fj_buf_free(&key);
	fj_buf_free(&target);
	return st;
}

/* ---- --emit=ptx (kind "ptx-emit") ---- */

/* A kernel's payload: this header, then its PTX module. */
typedef struct emit_head {
	char kernel[96];                          /* the name its entries start with */
	int32_t nentries;
	char entry[FJ_NVPTX_MAX_VARIANTS][112];   /* in the order of the text */
	char suffix[16];                          /* of its module-local symbols */
} emit_head;

typedef struct emit_batch {
	fj_nvptx_state *s;
	const char *sm;
	bool all;                  /* every variant (ptx_all_variants), else the main one */
	const fj_graph **g;        /* per request */
	uint32_t *node;
	fj_kc_request *req;
} emit_batch;

static fj_status emit_compile(void *arg, fj_context *dctx, uint32_t i, void **data, size_t *len)
{
	emit_batch *b = arg;
	const fj_graph *g = b->g[i];
	uint32_t node = b->node[i];
	emit_head h;
	memset(&h, 0, sizeof h);
	const fj_node *n = &g->nodes[node];
	snprintf(h.kernel, sizeof h.kernel, "%s", n->kernel ? n->kernel : "fj_kernel");
	snprintf(h.suffix, sizeof h.suffix, "_h%012llx",
	         (unsigned long long)(fj_kcache_hash(b->req[i].key, b->req[i].keylen, 0x707478) >> 16));
	fj_rg_analysis a;
	fj_status st = fj_gpu_analyze(dctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	const char *sfx[FJ_NVPTX_MAX_VARIANTS];
	int nv = fj_gpu_region_variants(&a, sfx);
	h.nentries = b->all ? nv : 1;
	for (int v = 0; v < h.nentries; v++)
		fj_gpu_entry_name(g, node, &a, v, h.entry[v]);
	fj_rg_analysis_free(&a);
	fj_buf ptx;
	fj_buf_init(&ptx, dctx);
	fj_buf_putn(&ptx, (const char *)&h, sizeof h);
	st = compile_ptx(dctx, b->s, b->sm, h.suffix, g, node, b->all ? -1 : 0, &ptx);
	if (st == FJ_OK && (ptx.oom || !(*data = malloc(ptx.len))))
		st = fj_error_status(dctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (st == FJ_OK) {
		memcpy(*data, ptx.data, ptx.len);
		*len = ptx.len;
	}
	fj_buf_free(&ptx);
	return st;
}

static bool ident_char(char c)
{
	return c == '_' || c == '$' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
}

/* Appends p[0..n) to out with h's entry names renamed to the node kernel's
 * (an identifier equal to an entry, or an entry followed by "_param_") and,
 * for copy > 0, h's suffix extended with _<copy> wherever it occurs. */
static void rename_ptx(fj_buf *out, const char *p, size_t n, const emit_head *h, const char *kernel, unsigned copy)
{
	size_t kl = strlen(h->kernel), sl = strlen(h->suffix), i = 0;
	while (i < n) {
		if (!ident_char(p[i])) {
			size_t j = i;
			while (j < n && !ident_char(p[j]))
				j++;
			fj_buf_putn(out, p + i, j - i);
			i = j;
			continue;
		}
		size_t j = i;
		while (j < n && ident_char(p[j]))
			j++;
		const char *t = p + i;
		size_t tl = j - i;
		bool done = false;
		for (int e = 0; e < h->nentries && !done; e++) {
			size_t el = strlen(h->entry[e]);
			if (tl < el || memcmp(t, h->entry[e], el) != 0 ||
			    (tl != el && (tl - el < 7 || memcmp(t + el, "_param_", 7) != 0)))
				continue;
			fj_buf_puts(out, kernel);
			fj_buf_putn(out, t + kl, tl - kl); /* the variant's suffix, _param_<i> */
			done = true;
		}
		for (size_t k = 0; !done && copy && sl && k + sl <= tl; k++) {
			if (memcmp(t + k, h->suffix, sl) != 0)
				continue;
			fj_buf_putn(out, t, k + sl);
			fj_buf_printf(out, "_%u", copy);
			fj_buf_putn(out, t + k + sl, tl - k - sl);
			done = true;
		}
		if (!done)
			fj_buf_putn(out, t, tl);
		i = j;
	}
}

/* The fusion.kernel nodes of m, in order (an error for any other op). */
static fj_status emit_nodes(fj_context *ctx, const fj_module *m, emit_batch *b, uint32_t *n)
{
	uint32_t total = 0;
	for (uint32_t gi = 0; gi < m->ngraphs; gi++)
		total += m->graphs[gi]->nnodes;
	b->g = calloc(total + 1, sizeof *b->g);
	b->node = calloc(total + 1, sizeof *b->node);
	b->req = calloc(total + 1, sizeof *b->req);
	if (!b->g || !b->node || !b->req)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	*n = 0;
	for (uint32_t gi = 0; gi < m->ngraphs; gi++)
		for (uint32_t i = 0; i < m->graphs[gi]->nnodes; i++) {
			const fj_node *nd = &m->graphs[gi]->nodes[i];
			if (nd->op != FJ_OP_FUSION_KERNEL)
				return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, nd->loc,
				                       "%s: the nvptx backend runs fused regions only (run the fuse and "
				                       "schedule passes first)",
				                       fj_op_name(nd->op));
			b->g[*n] = m->graphs[gi];
			b->node[(*n)++] = i;
		}
	return FJ_OK;
}

/* Writes the PTX of every kernel of b, in order, each under its own names. */
static fj_status emit_join(fj_context *ctx, const emit_batch *b, uint32_t n, fj_buf *out)
{
	unsigned *copies = calloc(n + 1, sizeof *copies); /* per request: its copy number */
	if (!copies)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = i; k-- > 0;)
			if (b->req[k].entry == b->req[i].entry) {
				copies[i] = copies[k] + 1;
				break;
			}
	for (uint32_t i = 0; i < n; i++) {
		const fj_kc_entry *e = b->req[i].entry;
		emit_head h;
		memcpy(&h, e->data, sizeof h);
		const char *p = (const char *)e->data + sizeof h;
		size_t len = e->len - sizeof h;
		size_t skip = ptx_header_len(p, len);
		if (i == 0)
			fj_buf_putn(out, p, skip);
		const fj_node *nd = &b->g[i]->nodes[b->node[i]];
		rename_ptx(out, p + skip, len - skip, &h, nd->kernel ? nd->kernel : "fj_kernel", copies[i]);
	}
	free(copies);
	return out->oom ? fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory") : FJ_OK;
}

/* Every kernel of b in one module, as LLVM IR (--emit=llvm-nvptx) or PTX (a
 * module without kernels). */
static fj_status emit_one_module(fj_context *ctx, const emit_batch *b, uint32_t n, bool llvm, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin(ctx, b->sm, &c);
	if (st != FJ_OK) {
		fj_nvptx_comp_end(&c);
		return st;
	}
	fj_cg cg;
	fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
	for (uint32_t i = 0; i < n && st == FJ_OK; i++) {
		fj_rg_analysis a;
		st = fj_gpu_analyze(ctx, b->g[i], b->node[i], &a);
		if (st != FJ_OK)
			break;
		st = fj_gpu_emit_region(&c, &cg, b->g[i], b->node[i], b->all ? -1 : 0, &a);
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

fj_status fj_nvptx_emit_module(fj_context *ctx, const fj_module *m, const char *sm, bool llvm, fj_buf *out)
{
	if (!sm)
		sm = FJ_NVPTX_DEFAULT_SM;
	bool all = fj_context_settings(ctx)->ptx_all_variants;
	emit_batch b = {.sm = sm, .all = all};
	uint32_t n = 0;
	fj_status st = fj_nvptx_check_sm(ctx, sm);
	if (st == FJ_OK)
		st = fj_nvptx_state_get(ctx, &b.s);
	if (st == FJ_OK)
		st = emit_nodes(ctx, m, &b, &n);
	if (st == FJ_OK && (llvm || n == 0))
		st = emit_one_module(ctx, &b, n, llvm, out);
	else if (st == FJ_OK) {
		fj_buf keys, target;
		fj_buf_init(&keys, ctx);
		fj_buf_init(&target, ctx);
		size_t *koff = calloc(n + 1, sizeof *koff);
		for (uint32_t i = 0; i < n && koff; i++) {
			koff[i] = keys.len;
			kernel_key(ctx, all ? "emit-all" : "emit", sm, b.g[i], b.node[i], &keys);
		}
		describe_target(ctx, sm, &target);
		if (!koff || keys.oom || target.oom)
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		else
			koff[n] = keys.len;
		for (uint32_t i = 0; i < n && st == FJ_OK; i++)
			b.req[i] = (fj_kc_request){keys.data + koff[i], koff[i + 1] - koff[i], NULL};
		if (st == FJ_OK)
			st = fj_kcache_get(ctx, "ptx-emit", target.data, b.req, n, emit_compile, &b, NULL);
		if (st == FJ_OK)
			st = emit_join(ctx, &b, n, out);
		for (uint32_t i = 0; i < n && b.req; i++) /* joined into out: the entries may go */
			fj_kcache_release(ctx, b.req[i].entry);
		free(koff);
		fj_buf_free(&keys);
		fj_buf_free(&target);
	}
	free(b.g);
	free(b.node);
	free(b.req);
	return st;
}
