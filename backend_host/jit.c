/* jit.c -- the host JIT: ORC LLJIT through the LLVM C API, one per context.
 *
 * Target: the host triple, CPU name and features, PIC, the JIT code model;
 * one target machine goes to the LLJIT builder, a second one drives
 * LLVMRunPasses("default<O3>") so that loops vectorize for the host.
 * Kernels call libm through a process-symbol generator on the main dylib.
 *
 * Cache: canonical node key (fj_cg_node_key) -> compiled kernel, in an
 * open-addressed hash table owned by the jit. The kernels missing in one
 * fj_host_compile_nodes call are emitted into ONE module, in a fresh LLVM
 * context, verified, optimised, compiled to an object file with the host
 * target machine (LLVMTargetMachineEmitToMemoryBuffer) and added to the JIT
 * as an object (LLVMOrcLLJITAddObjectFile): a graph costs one O3 run and one
 * machine-code generation. The object also goes to the disk cache
 * (cache/kcache.h, kind "host"), keyed by the LLVM version, the host triple,
 * CPU name and features and every kernel key of the module, in order; the
 * kernels' names derive from a hash of that key, so a cached object links
 * in any process. A later process finds the object on disk and compiles
 * nothing. A mutex serialises the whole compilation (the JIT and the cache).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "backend_host/host.h"
#include "cache/kcache.h"
#include "codegen/cg.h"

typedef struct cache_entry {
	char *key; /* NULL: empty slot */
	size_t keylen;
	uint64_t hash;
	fj_host_kernel k;
} cache_entry;

struct fj_host_jit {
	fj_context *ctx;
	pthread_mutex_t lock;
	LLVMOrcLLJITRef jit;
	LLVMTargetMachineRef tm; /* for the optimisation pipeline */
	char *triple, *cpu, *features;
	fj_cg_target target;     /* host_target with the vector width of these features */
	cache_entry *tab;
	uint32_t cap, count;
};

/* ---- process-global LLVM initialisation ---- */

static fj_status llvm_err(fj_context *ctx, LLVMErrorRef e, const char *what)
{
	char *m = LLVMGetErrorMessage(e); /* consumes e */
	fj_status st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: %s: %s", what, m);
	LLVMDisposeErrorMessage(m);
	return st;
}

/* ---- the host math hook: libm ---- */


static LLVMValueRef host_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	bool dbl = ty == cg->t_f64;
	unsigned nargs = (fn == FJ_MATH_POW || fn == FJ_MATH_ATAN2 || fn == FJ_MATH_FMOD) ? 2 : 1;
	const char *name = fj_cg_libm_name(fn, dbl);
	LLVMTypeRef ps[2] = {ty, ty};
	LLVMTypeRef fty = LLVMFunctionType(ty, ps, nargs, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	if (!f) {
		f = LLVMAddFunction(cg->mod, name, fty);
		const char *attrs[] = {"nounwind", "willreturn", "nosync", "nofree"};
		for (size_t i = 0; i < FJ_ARRAY_LEN(attrs); i++) {
			unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
			LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(cg->llctx, kind, 0));
		}
		/* memory(none): pure functions of their arguments (errno is not read). */
		unsigned mem = LLVMGetEnumAttributeKindForName("memory", 6);
		LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(cg->llctx, mem, 0));
	}
	LLVMValueRef call = LLVMBuildCall2(cg->b, fty, f, args, nargs, "");
	return call;
}

/* Inside fused regions: inline polynomials (they vectorize), libm where none exists. */
static LLVMValueRef host_region_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMValueRef v = fj_cg_poly_math(cg, fn, args);
	return v ? v : host_math(cg, fn, args);
}

/* vector_bits: set per JIT from its CPU features (vector_bits_of). */
static const fj_cg_target host_target = {.name = "host", .math = host_math, .region_math = host_region_math};

static int vector_bits_of(const char *features)
{
	if (features && strstr(features, "+avx512f"))
		return 512;
	if (features && strstr(features, "+avx2"))
		return 256;
	return 128;
}

/* ---- creation and destruction ---- */

static LLVMTargetMachineRef make_tm(fj_host_jit *j)
{
	LLVMTargetRef t;
	char *err = NULL;
	if (LLVMGetTargetFromTriple(j->triple, &t, &err)) {
		fj_error_status(j->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "host JIT: no target for %s: %s", j->triple,
		                err ? err : "?");
		LLVMDisposeMessage(err);
		return NULL;
	}
	return LLVMCreateTargetMachine(t, j->triple, j->cpu, j->features, LLVMCodeGenLevelAggressive, LLVMRelocPIC,
	                               LLVMCodeModelJITDefault);
}

static void jit_destroy(fj_context *ctx, void *p)
{
	fj_host_jit *j = p;
	if (!j)
		return;
	if (j->jit) {
		LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
		if (e)
			LLVMConsumeError(e);
	}
	if (j->tm)
		LLVMDisposeTargetMachine(j->tm);
	LLVMDisposeMessage(j->triple);
	LLVMDisposeMessage(j->cpu);
	LLVMDisposeMessage(j->features);
	for (uint32_t i = 0; i < j->cap; i++)
		if (j->tab[i].key)
			fj_free(ctx, j->tab[i].key, j->tab[i].keylen + 1);
	if (j->tab)
		fj_free(ctx, j->tab, j->cap * sizeof *j->tab);
	pthread_mutex_destroy(&j->lock);
	fj_free(ctx, j, sizeof *j);
}

static fj_status jit_create(fj_context *ctx, void **out)
{
	if (!fj_cg_native_init())
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "host JIT: LLVM has no native target");
	fj_host_jit *j = fj_alloc(ctx, sizeof *j);
	if (!j)
		return FJ_ERR_NOMEM;
	memset(j, 0, sizeof *j);
	j->ctx = ctx;
	pthread_mutex_init(&j->lock, NULL);
	j->triple = LLVMGetDefaultTargetTriple();
	j->cpu = LLVMGetHostCPUName();
	j->features = LLVMGetHostCPUFeatures();
	j->target = host_target;
	j->target.vector_bits = vector_bits_of(j->features);
	fj_status st = FJ_ERR_INTERNAL;
	LLVMTargetMachineRef jtm = make_tm(j);
	j->tm = make_tm(j);
	if (!jtm || !j->tm) {
		if (jtm)
			LLVMDisposeTargetMachine(jtm);
		goto fail;
	}
	LLVMOrcLLJITBuilderRef lb = LLVMOrcCreateLLJITBuilder();
	LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(lb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm));
	LLVMErrorRef e = LLVMOrcCreateLLJIT(&j->jit, lb);
	if (e) {
		j->jit = NULL;
		st = llvm_err(ctx, e, "creating the LLJIT");
		goto fail;
	}
	LLVMOrcDefinitionGeneratorRef gen;
	e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j->jit), NULL, NULL);
	if (e) {
		st = llvm_err(ctx, e, "creating the process symbol generator");
		goto fail;
	}
	LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j->jit), gen);
	*out = j;
	return FJ_OK;
fail:
	jit_destroy(ctx, j);
	return st;
}

fj_status fj_host_jit_get(fj_context *ctx, fj_host_jit **out)
{
	void *p = NULL;
	fj_status st = fj_context_slot(ctx, FJ_SLOT_HOST_JIT, jit_create, jit_destroy, &p);
	*out = p;
	return st;
}

/* ---- the kernel cache ---- */

static cache_entry *cache_find(fj_host_jit *j, const char *key, size_t len, uint64_t h)
{
	if (!j->cap)
		return NULL;
	for (uint32_t i = (uint32_t)h & (j->cap - 1);; i = (i + 1) & (j->cap - 1)) {
		cache_entry *c = &j->tab[i];
		if (!c->key)
			return NULL;
		if (c->hash == h && c->keylen == len && memcmp(c->key, key, len) == 0)
			return c;
	}
}

static fj_status cache_insert(fj_host_jit *j, const char *key, size_t len, uint64_t h, fj_host_kernel k)
{
	if ((j->count + 1) * 2 > j->cap) {
		uint32_t ncap = j->cap ? j->cap * 2 : 64;
		cache_entry *nt = fj_alloc(j->ctx, ncap * sizeof *nt);
		if (!nt)
			return FJ_ERR_NOMEM;
		memset(nt, 0, ncap * sizeof *nt);
		for (uint32_t i = 0; i < j->cap; i++) {
			if (!j->tab[i].key)
				continue;
			uint32_t s = (uint32_t)j->tab[i].hash & (ncap - 1);
			while (nt[s].key)
				s = (s + 1) & (ncap - 1);
			nt[s] = j->tab[i];
		}
		if (j->tab)
			fj_free(j->ctx, j->tab, j->cap * sizeof *j->tab);
		j->tab = nt;
		j->cap = ncap;
	}
	char *kc = fj_alloc(j->ctx, len + 1);
	if (!kc)
		return FJ_ERR_NOMEM;
	memcpy(kc, key, len);
	kc[len] = 0;
	uint32_t s = (uint32_t)h & (j->cap - 1);
	while (j->tab[s].key)
		s = (s + 1) & (j->cap - 1);
	j->tab[s] = (cache_entry){kc, len, h, k};
	j->count++;
	return FJ_OK;
}

/* ---- compilation ---- */

typedef struct pending {
	uint32_t node;     /* the first node with this key */
	size_t koff, klen; /* its key in the keys buffer */
	uint64_t hash;
	char name[48];     /* fj_h<object key hash>_k<index in the object> */
	fj_host_kernel k;
} pending;

/* A module for the host in a fresh context of tsc. */
static LLVMModuleRef new_module(fj_host_jit *j, LLVMContextRef llctx)
{
	LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("fj_kernels", llctx);
	LLVMSetTarget(mod, j->triple);
	LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(j->tm);
	LLVMSetModuleDataLayout(mod, dl);
	LLVMDisposeTargetData(dl);
	return mod;
}

static fj_status verify_and_optimise(fj_host_jit *j, LLVMModuleRef mod)
{
	char *msg = NULL;
	if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
		fj_status st = fj_error_status(j->ctx, FJ_ERR_INTERNAL, (fj_loc){0},
		                               "host JIT: invalid LLVM IR generated: %s", msg ? msg : "?");
		LLVMDisposeMessage(msg);
		return st;
	}
	LLVMDisposeMessage(msg);
	LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
	/* Vectorize, but do not interleave (unroll) vector loops: it halves the
	 * machine code and the compile time; these kernels are memory-bound. */
	LLVMPassBuilderOptionsSetLoopInterleaving(opts, 0);
	LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", j->tm, opts);
	LLVMDisposePassBuilderOptions(opts);
	if (e)
		return llvm_err(j->ctx, e, "running default<O3>");
	return FJ_OK;
}

/* The disk cache payload of an object: u32 count, then (u32 par_out, u32
 * par_mask) per kernel, then the object file. */
static fj_status add_object(fj_host_jit *j, const char *data, size_t len)
{
	LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len, "fj_kernels.o");
	LLVMErrorRef e = LLVMOrcLLJITAddObjectFile(j->jit, LLVMOrcLLJITGetMainJITDylib(j->jit), buf);
	return e ? llvm_err(j->ctx, e, "adding the kernels' object") : FJ_OK;
}

/* Makes pend[0..npend) available in the JIT: from the disk cache, or emitted,
 * optimised and compiled to an object (then stored in the disk cache). */
static fj_status build_objects(fj_host_jit *j, const fj_graph *g, const fj_buf *keys, pending *pend, uint32_t npend)
{
	fj_context *ctx = j->ctx;
	fj_buf okey;
	fj_buf_init(&okey, ctx);
	unsigned maj = 0, min = 0, pat = 0;
	LLVMGetVersion(&maj, &min, &pat);
	fj_buf_printf(&okey, "host-object 1\nllvm %u.%u.%u\n%s\n%s\n%s\n", maj, min, pat, j->triple, j->cpu,
	              j->features);
	for (uint32_t p = 0; p < npend; p++) {
		fj_buf_putn(&okey, keys->data + pend[p].koff, pend[p].klen);
		fj_buf_putn(&okey, "", 1);
	}
	if (okey.oom) {
		fj_buf_free(&okey);
		return FJ_ERR_NOMEM;
	}
	uint64_t oh = fj_kcache_hash(okey.data, okey.len, 0x686f7374);
	for (uint32_t p = 0; p < npend; p++)
		snprintf(pend[p].name, sizeof pend[p].name, "fj_h%016llx_k%u", (unsigned long long)oh, p);

	fj_status st = FJ_OK;
	void *cached = NULL;
	size_t clen = 0;
	if (fj_kcache_load(ctx, "host", okey.data, okey.len, &cached, &clen)) {
		const unsigned char *c = cached;
		uint32_t cnt = 0;
		if (clen >= 4)
			memcpy(&cnt, c, 4);
		size_t hdr = 4 + (size_t)cnt * 8;
		if (cnt == npend && clen > hdr) {
			for (uint32_t p = 0; p < npend; p++) {
				memcpy(&pend[p].k.par_out, c + 4 + 8 * p, 4);
				memcpy(&pend[p].k.par_mask, c + 8 + 8 * p, 4);
			}
			st = add_object(j, (const char *)c + hdr, clen - hdr);
			free(cached);
			fj_buf_free(&okey);
			if (st == FJ_OK)
				fj_kcache_count(ctx, FJ_KC_KERNELS_LOADED, npend);
			return st;
		}
		free(cached); /* verified but not ours: rebuild and overwrite */
	}

	LLVMContextRef llctx = LLVMContextCreate();
	LLVMModuleRef mod = new_module(j, llctx);
	fj_cg cg;
	fj_cg_init(&cg, ctx, &j->target, llctx, mod);
	for (uint32_t p = 0; p < npend && st == FJ_OK; p++)
		st = fj_cg_emit_node_kernel(&cg, g, pend[p].node, pend[p].name, &pend[p].k.par_out, &pend[p].k.par_mask);
	fj_cg_dispose(&cg);
	if (st == FJ_OK)
		st = verify_and_optimise(j, mod);
	LLVMMemoryBufferRef obj = NULL;
	if (st == FJ_OK) {
		char *err = NULL;
		if (LLVMTargetMachineEmitToMemoryBuffer(j->tm, mod, LLVMObjectFile, &err, &obj)) {
			st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: emitting the object: %s",
			                     err ? err : "?");
			obj = NULL;
		}
		LLVMDisposeMessage(err);
	}
	LLVMDisposeModule(mod);
	LLVMContextDispose(llctx);
	if (st == FJ_OK) {
		fj_kcache_count(ctx, FJ_KC_KERNELS_COMPILED, npend);
		const char *od = LLVMGetBufferStart(obj);
		size_t ol = LLVMGetBufferSize(obj);
		size_t hdr = 4 + (size_t)npend * 8;
		unsigned char *payload = malloc(hdr + ol);
		if (payload) {
			memcpy(payload, &npend, 4);
			for (uint32_t p = 0; p < npend; p++) {
				memcpy(payload + 4 + 8 * p, &pend[p].k.par_out, 4);
				memcpy(payload + 8 + 8 * p, &pend[p].k.par_mask, 4);
			}
			memcpy(payload + hdr, od, ol);
			fj_kcache_store(ctx, "host", okey.data, okey.len, payload, hdr + ol);
			free(payload);
		}
		LLVMErrorRef e = LLVMOrcLLJITAddObjectFile(j->jit, LLVMOrcLLJITGetMainJITDylib(j->jit), obj);
		if (e)
			st = llvm_err(ctx, e, "adding the kernels' object");
	} else if (obj) {
		LLVMDisposeMemoryBuffer(obj);
	}
	fj_buf_free(&okey);
	return st;
}

static fj_status compile_locked(fj_host_jit *j, const fj_graph *g, const uint32_t *nodes, uint32_t n,
                                fj_host_kernel *out, uint32_t *compiled)
{
	fj_context *ctx = j->ctx;
	fj_status st = FJ_OK;
	fj_buf keys;
	fj_buf_init(&keys, ctx);
	size_t *koff = fj_alloc(ctx, (n + 1) * sizeof *koff);
	int32_t *which = fj_alloc(ctx, (n + 1) * sizeof *which); /* pending index, or -1: cached */
	pending *pend = fj_alloc(ctx, (n + 1) * sizeof *pend);
	uint32_t npend = 0;
	if (!koff || !which || !pend) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	for (uint32_t i = 0; i < n; i++) {
		koff[i] = keys.len;
		fj_cg_node_key(&keys, g, nodes[i]);
	}
	koff[n] = keys.len;
	if (keys.oom) {
		st = FJ_ERR_NOMEM;
		goto done;
	}
	for (uint32_t i = 0; i < n; i++) {
		const char *key = keys.data + koff[i];
		size_t len = koff[i + 1] - koff[i];
		uint64_t h = fj_hash64(key, len);
		cache_entry *c = cache_find(j, key, len, h);
		which[i] = -1;
		if (c) {
			out[i] = c->k;
			fj_kcache_count(ctx, FJ_KC_MEMORY_HITS, 1);
			continue;
		}
		for (uint32_t p = 0; p < npend; p++)
			if (pend[p].hash == h && pend[p].klen == len && memcmp(keys.data + pend[p].koff, key, len) == 0) {
				which[i] = (int32_t)p;
				break;
			}
		if (which[i] >= 0)
			continue;
		if (!fj_cg_node_emitter(g->nodes[nodes[i]].op)) {
			st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[nodes[i]].loc, "%s: no host kernel for this op",
			                     fj_op_name(g->nodes[nodes[i]].op));
			goto done;
		}
		pending *p = &pend[npend];
		p->node = nodes[i];
		p->koff = koff[i];
		p->klen = len;
		p->hash = h;
		which[i] = (int32_t)npend++;
	}
	if (npend) {
		st = build_objects(j, g, &keys, pend, npend);
		if (st != FJ_OK)
			goto done;
		for (uint32_t p = 0; p < npend; p++) {
			LLVMOrcExecutorAddress addr = 0;
			LLVMErrorRef e = LLVMOrcLLJITLookup(j->jit, &addr, pend[p].name);
			if (e) {
				st = llvm_err(ctx, e, "looking up a kernel");
				goto done;
			}
			pend[p].k.fn = (fj_host_kernel_fn)(uintptr_t)addr;
			st = cache_insert(j, keys.data + pend[p].koff, pend[p].klen, pend[p].hash, pend[p].k);
			if (st != FJ_OK)
				goto done;
		}
		for (uint32_t i = 0; i < n; i++)
			if (which[i] >= 0)
				out[i] = pend[which[i]].k;
	}
	if (compiled)
		*compiled = npend;
done:
	if (koff)
		fj_free(ctx, koff, (n + 1) * sizeof *koff);
	if (which)
		fj_free(ctx, which, (n + 1) * sizeof *which);
	if (pend)
		fj_free(ctx, pend, (n + 1) * sizeof *pend);
	fj_buf_free(&keys);
	return st;
}

fj_status fj_host_compile_nodes(fj_context *ctx, const fj_graph *g, const uint32_t *nodes, uint32_t n,
                                fj_host_kernel *out, uint32_t *compiled)
{
	if (compiled)
		*compiled = 0;
	fj_host_jit *j;
	fj_status st = fj_host_jit_get(ctx, &j);
	if (st != FJ_OK)
		return st;
	pthread_mutex_lock(&j->lock);
	st = compile_locked(j, g, nodes, n, out, compiled);
	pthread_mutex_unlock(&j->lock);
	return st;
}

fj_status fj_host_emit_llvm(fj_context *ctx, const fj_graph *g, fj_buf *b)
{
	fj_host_jit *j;
	fj_status st = fj_host_jit_get(ctx, &j);
	if (st != FJ_OK)
		return st;
	pthread_mutex_lock(&j->lock);
	LLVMContextRef llctx = LLVMContextCreate();
	LLVMModuleRef mod = new_module(j, llctx);
	fj_cg cg;
	fj_cg_init(&cg, ctx, &j->target, llctx, mod);
	for (uint32_t i = 0; i < g->nnodes && st == FJ_OK; i++) {
		if (!fj_cg_node_emitter(g->nodes[i].op))
			continue;
		char name[96];
		snprintf(name, sizeof name, "fj_%s_n%u", g->name ? g->name : "graph", i);
		uint32_t po, pm;
		st = fj_cg_emit_node_kernel(&cg, g, i, name, &po, &pm);
	}
	fj_cg_dispose(&cg);
	if (st == FJ_OK)
		st = verify_and_optimise(j, mod);
	if (st == FJ_OK) {
		char *s = LLVMPrintModuleToString(mod);
		fj_buf_puts(b, s);
		LLVMDisposeMessage(s);
		if (b->oom)
			st = FJ_ERR_NOMEM;
	}
	LLVMDisposeModule(mod);
	LLVMContextDispose(llctx);
	pthread_mutex_unlock(&j->lock);
	return st;
}
