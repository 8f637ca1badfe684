/* jit.c -- the host JIT: ORC LLJIT through the LLVM C API, one per context.
 *
 * Target: the host triple, CPU name and features, PIC, the JIT code model;
 * with the setting host_target=avx2 the features lose every AVX-512 one (the
 * AVX2 code path, measurable on an AVX-512 machine). Every kernel function
 * gets "prefer-vector-width" = the width of setting host_vector_bits (auto:
 * the widest the features have): LLVM's own tuning prefers 256-bit vectors
 * on some AVX-512 CPUs (Intel's) and 512 on others (AMD Zen 4); fixing it
 * makes the loops' width the same on every AVX-512 server (512 measured
 * faster on Zen 4, 2 threads, [8192,4096] f32: gelu 17.8 vs 23.3 ms, softmax
 * 17.9 vs 24.7, layer_norm 15.4 vs 17.2; on Sapphire Rapids the compute-
 * bound 10-op chain 76 vs 109 ms forward, 255 vs 297 training, best of 3,
 * the memory-bound rows tied within that machine's noise; "256" keeps
 * Intel's tuning where 512-bit code would lower the clock). Both settings are
 * read when the context's JIT is made (its first host compile) and are part
 * of the kernels' cache tag;
 * one target machine goes to the LLJIT builder, one drives
 * fj_host_emit_llvm's LLVMRunPasses("default<O3>") (loops vectorize for the
 * host), and each compilation makes its own (they run on several threads).
 * Kernels call libm through a process-symbol generator on the main dylib.
 *
 * Kernels come through the kernel cache (cache/kcache.h, kind "host"),
 * keyed by the target's tag and the node's canonical key (fj_cg_node_key:
 * its structure, never its name): identical kernels compile once per
 * context, and once per machine through the disk. The kernels a call misses
 * compile in parallel (fj_kcache_parallel, setting compile_jobs), each
 * alone in a module, in a fresh LLVM context with its own target machine:
 * verified, optimised, compiled to an object file
 * (LLVMTargetMachineEmitToMemoryBuffer). The cache entry's payload is that
 * object; the first caller adds it to the JIT (LLVMOrcLLJITAddObjectFileWithRT,
 * under its own resource tracker) under the JIT's mutex and keeps the
 * kernel's address on the entry. A kernel's symbol is a hash of its key, so
 * a cached object links in any process and no two objects define one symbol.
 * Programs hold references on their kernels' entries (fj_host_kernel.entry,
 * dropped by fj_host_release_kernels); when the cache evicts an entry nobody
 * holds, kernel_free removes its resource tracker: the code, its symbols
 * and its unwind registration leave the JIT.
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

struct fj_host_jit {
	fj_context *ctx;
	pthread_mutex_t lock;    /* the JIT: adding objects, looking up symbols */
	LLVMOrcLLJITRef jit;
	LLVMTargetMachineRef tm; /* for fj_host_emit_llvm's pipeline (under lock) */
	char *triple, *cpu, *features;
	char *target_desc;       /* LLVM version, triple, CPU, features (malloc) */
	char tag[40];            /* "host <128-bit hash of target_desc>": in every key */
	fj_cg_target target;     /* host_target with the vector width of these features */
	int host_target, host_vector_bits, host_stream; /* the settings the JIT was made with */
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
static const fj_cg_target host_target = {
	.name = "host", .math = host_math, .region_math = host_region_math, .region_exp_nonpos = fj_cg_poly_exp_nonpos,
	.region_exp_addend = fj_cg_poly_exp_addend};

static int vector_bits_of(const char *features)
{
	if (features && strstr(features, "+avx512f"))
		return 512;
	if (features && strstr(features, "+avx2"))
		return 256;
	return 128;
}

/* features ("+a,-b,..."), with every "+avx512...", "+avx10..." (AVX10 holds
 * AVX-512's instructions) and "+evex512" turned into "-...": in place (the
 * same length). */
static void drop_avx512(char *features)
{
	for (char *p = features; p && *p;) {
		char *end = strchr(p, ',');
		if (*p == '+' && (strncmp(p + 1, "avx512", 6) == 0 || strncmp(p + 1, "avx10", 5) == 0 ||
		                  strncmp(p + 1, "evex512", 7) == 0))
			*p = '-';
		p = end ? end + 1 : NULL;
	}
}

/* An AMD core by LLVM's name for the host CPU (znver4, bdver2 ...). */
static bool amd_cpu(const char *cpu)
{
	return strncmp(cpu, "znver", 5) == 0 || strncmp(cpu, "bdver", 5) == 0 || strncmp(cpu, "btver", 5) == 0 ||
	       strncmp(cpu, "amdfam", 6) == 0;
}

static bool x86_cpu(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return true;
#else
	return false;
#endif
}

/* The JIT's target from the context's settings: its features and vector
 * width. FJ_ERR_UNSUPPORTED where this CPU lacks what they ask. */
static fj_status choose_target(fj_host_jit *j, fj_context *ctx)
{
	const fj_settings *s = fj_context_settings(ctx);
	j->host_target = s->host_target;
	j->host_vector_bits = s->host_vector_bits;
	j->host_stream = s->host_stream;
	if (s->host_target == FJ_HOST_TARGET_AVX2) {
		if (!strstr(j->features, "+avx2") || !strstr(j->features, "+fma"))
			return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
			                       "host_target=avx2: this CPU (%s) has no AVX2 and FMA", j->cpu);
		drop_avx512(j->features);
	}
	int have = vector_bits_of(j->features);
	int want = s->host_vector_bits == FJ_HOST_VECTOR_256 ? 256 : s->host_vector_bits == FJ_HOST_VECTOR_512 ? 512 : have;
	if (want > have)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "host_vector_bits=%d: the host target (%s%s) has %d-bit vectors", want, j->cpu,
		                       s->host_target == FJ_HOST_TARGET_AVX2 ? ", host_target=avx2" : "", have);
	j->target.vector_bits = want;
	/* Streaming a flat pointwise loop's and the matmul epilogue's large
	 * outputs (measured in region_host_pointwise.c and region_matmul.c):
	 * x86. On the Intel Xeon behind the H200
	 * gelu and silu ran at 0.6 of memcpy with plain stores, near the 2/3
	 * that a read for ownership of every output line allows, while the row
	 * kernels, which stream, reached 0.84-1.09. */
	j->target.stream = s->host_stream == FJ_HOST_STREAM_AUTO ? x86_cpu() : s->host_stream == FJ_HOST_STREAM_ON;
	j->target.matmul_flush = x86_cpu();
	/* The matmul's blocking on Intel cores: region_matmul.c's defaults (AVX-512:
	 * KC 512, C tiles of 8 x 8 micro-panels; AVX2: KC 256, 8 x 8) were tuned
	 * on Zen 4. AVX-512: a K block of 128 keeps the B micro-panel (128 x 64
	 * floats, 32 KiB) in a 48 KiB L1, and tiles of 32 x 4 micro-panels (192
	 * x 256) read it for 32 micro-kernels. Intel Xeon (Sapphire Rapids, whose
	 * VM reports itself as rocketlake), bench/matmul, fraction of the FMA
	 * peak on 1 and 2 threads: 1024^3 63 -> 72 % and 65 -> 71 %, 1024 x 3072
	 * x 768 61 -> 69 % and 65 -> 67 %, the linear 1024 x 768 x 3072 (A W^T)
	 * 64 -> 68 % and 64 -> 68 %, the weight gradient 3072 x 1024 x 768 62 ->
	 * 69 % and 64 -> 66 %. The micro-kernel alone (B in L1) reaches 86-89 %
	 * there. AVX2: tiles twice as wide (8 x 16 micro-panels, 48 x 256), half
	 * the passes over each A block; same CPU, one thread, the two builds
	 * alternating in one process (~70-150 pairs, median of the pairs' speed
	 * ratios): 1024^3 +1.2 %, 1024 x 768 x 3072 +2.9 %, 1024 x 3072 x 768
	 * -0.5 %, the linear +2.3 %, the weight gradient +0.4 %. And twice as
	 * tall (16 x 16, 96 x 256): each B panel, K x 256, is read once per 96
	 * rows instead of 48, from L3 where K is 3072 (3 MiB); Intel Xeon
	 * (Emerald Rapids), bench/matmul, two runs of each alternating, of the
	 * FMA peak on one thread: 1024 x 3072 x 768 84-85 -> 86 %, the weight
	 * gradients 768 x 1024 x 3072 83-84 -> 85-86 % and 3072 x 1024 x 768 83-84
	 * -> 86-87 %, the other four shapes within a point. */
	if (x86_cpu() && !amd_cpu(j->cpu) && want >= 256) {
		j->target.matmul_kc = want == 512 ? 128 : 256;
		j->target.matmul_mc_panels = want == 512 ? 32 : 16;
		j->target.matmul_nc_panels = want == 512 ? 4 : 16;
		j->target.matmul_prefetch_b = true; /* measured on Intel only (region_matmul.c) */
	}
	/* AVX2 on AMD: N-tiles of 384 columns, not 768, for an A contiguous
	 * along M (the weight gradients): the K block of B's panel, 256 x 768
	 * floats (768 KiB), filled most of Zen 4's 1 MiB L2 beside the C tile.
	 * AMD EPYC (Zen 4), fj-bench-ab against 768, median speed ratio of
	 * 80-150 pairs: 768 x 1024 x 3072 (A = G^T) 1.019 on one thread and
	 * 1.027 on two, 3072 x 1024 x 768 1.004 and 1.044; 512: 1.009, 1.008,
	 * 0.998, 1.037; 256 against 384: 1.022, 1.010, 0.998, 0.964. AVX-512
	 * keeps 768 (its K block of 512): 384 read 0.965-0.994. */
	if (x86_cpu() && amd_cpu(j->cpu) && want == 256)
		j->target.matmul_apanel_nc = 384;
	return FJ_OK;
}

/* Every function defined in mod prefers the JIT's vector width. */
static void set_vector_width(const fj_host_jit *j, LLVMModuleRef mod)
{
	char bits[16];
	snprintf(bits, sizeof bits, "%d", j->target.vector_bits);
	LLVMContextRef llctx = LLVMGetModuleContext(mod);
	for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
		if (!LLVMIsDeclaration(f))
			LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
			                        LLVMCreateStringAttribute(llctx, "prefer-vector-width", 19, bits,
			                                                  (unsigned)strlen(bits)));
}

/* ---- creation and destruction ---- */

/* A host target machine (diagnostics into ctx): one per compilation, so
 * that compilations may run on several threads at once. */
static LLVMTargetMachineRef make_tm(fj_host_jit *j, fj_context *ctx)
{
	LLVMTargetRef t;
	char *err = NULL;
	if (LLVMGetTargetFromTriple(j->triple, &t, &err)) {
		fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "host JIT: no target for %s: %s", j->triple,
		                err ? err : "?");
		LLVMDisposeMessage(err);
		return NULL;
	}
	LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, j->triple, j->cpu, j->features, LLVMCodeGenLevelAggressive,
	                                                  LLVMRelocPIC, LLVMCodeModelJITDefault);
	if (!tm)
		fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: no target machine for %s (%s)", j->triple,
		                j->cpu);
	return tm;
}

/* What the host's kernels depend on besides their keys, and its tag. */
static bool describe_target(fj_host_jit *j)
{
	unsigned maj = 0, min = 0, pat = 0;
	LLVMGetVersion(&maj, &min, &pat);
	fj_buf b;
	fj_buf_init(&b, j->ctx);
	/* "stream pointwise": host_stream on (the text predates the matmul's streaming) */
	fj_buf_printf(&b, "host-object 2\nllvm %u.%u.%u\n%s\n%s\n%s\nvector %d%s", maj, min, pat, j->triple, j->cpu,
	              j->features, j->target.vector_bits, j->target.stream ? "\nstream pointwise" : "");
	j->target_desc = b.oom ? NULL : strdup(b.data);
	if (j->target_desc)
		snprintf(j->tag, sizeof j->tag, "host %016llx%016llx",
		         (unsigned long long)fj_kcache_hash(b.data, b.len, 1),
		         (unsigned long long)fj_kcache_hash(b.data, b.len, 2));
	fj_buf_free(&b);
	return j->target_desc != NULL;
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
	free(j->target_desc);
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
	fj_status st = choose_target(j, ctx);
	if (st != FJ_OK)
		goto fail;
	st = FJ_ERR_INTERNAL;
	if (!describe_target(j)) {
		st = FJ_ERR_NOMEM;
		goto fail;
	}
	LLVMTargetMachineRef jtm = make_tm(j, ctx);
	j->tm = make_tm(j, ctx);
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
	const fj_settings *s = fj_context_settings(ctx);
	fj_host_jit *j = p;
	if (st == FJ_OK && (s->host_target != j->host_target || s->host_vector_bits != j->host_vector_bits ||
	                    s->host_stream != j->host_stream))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "host_target / host_vector_bits / host_stream changed after this context's first host "
		                       "compile: set them before it (or in a new context)");
	return st;
}

/* ---- compilation through the kernel cache ---- */

/* A module for the host in a fresh context. */
static LLVMModuleRef new_module(fj_host_jit *j, LLVMContextRef llctx, LLVMTargetMachineRef tm)
{
	LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("fj_kernels", llctx);
	LLVMSetTarget(mod, j->triple);
	LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
	LLVMSetModuleDataLayout(mod, dl);
	LLVMDisposeTargetData(dl);
	return mod;
}

/* Verifies mod, gives its functions the JIT's vector width and optimises it. */
static fj_status verify_and_optimise(const fj_host_jit *j, fj_context *ctx, LLVMTargetMachineRef tm,
                                     LLVMModuleRef mod)
{
	char *msg = NULL;
	if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
		fj_status st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: invalid LLVM IR generated: %s",
		                               msg ? msg : "?");
		LLVMDisposeMessage(msg);
		return st;
	}
	LLVMDisposeMessage(msg);
	set_vector_width(j, mod);
	LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
	/* Vectorize, but do not interleave (unroll) vector loops: it halves the
	 * machine code and the compile time; these kernels are memory-bound. */
	LLVMPassBuilderOptionsSetLoopInterleaving(opts, 0);
	LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, opts);
	LLVMDisposePassBuilderOptions(opts);
	if (e)
		return llvm_err(ctx, e, "running default<O3>");
	fj_cg_stream_stores(mod);
	if (strstr(j->features, "+avx512f"))
		fj_cg_poly_scalef(mod, strstr(j->features, "+avx512vl") != NULL);
	return FJ_OK;
}

/* One call's kernels: the nodes, their keys and symbol names. */
typedef struct host_batch {
	fj_host_jit *j;
	const fj_graph *g;
	const uint32_t *nodes;
	fj_kc_request *req;
	char (*name)[40]; /* fj_h<128-bit hash of the key>, per request */
} host_batch;

/* The payload of a kernel: u32 par_out | u32 par_mask | the object file. */
#define HOST_PAYLOAD_HEAD 8

/* fj_kc_compile_fn: node nodes[i] alone in a module, in a fresh LLVM context
 * with its own target machine (any thread), optimised and compiled. */
static fj_status compile_one(void *arg, fj_context *dctx, uint32_t i, void **data, size_t *len)
{
	host_batch *b = arg;
	fj_host_jit *j = b->j;
	LLVMTargetMachineRef tm = make_tm(j, dctx);
	if (!tm)
		return FJ_ERR_INTERNAL;
	LLVMContextRef llctx = LLVMContextCreate();
	LLVMModuleRef mod = new_module(j, llctx, tm);
	fj_cg cg;
	fj_cg_init(&cg, dctx, &j->target, llctx, mod);
	uint32_t po = 0, pm = 0;
	fj_status st = fj_cg_emit_node_kernel(&cg, b->g, b->nodes[i], b->name[i], &po, &pm);
	fj_cg_dispose(&cg);
	if (st == FJ_OK)
		st = verify_and_optimise(j, dctx, tm, mod);
	LLVMMemoryBufferRef obj = NULL;
	char *err = NULL;
	if (st == FJ_OK && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &err, &obj)) {
		st = fj_error_status(dctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: emitting the object: %s",
		                     err ? err : "?");
		obj = NULL;
	}
	LLVMDisposeMessage(err);
	LLVMDisposeModule(mod);
	LLVMContextDispose(llctx);
	LLVMDisposeTargetMachine(tm);
	if (st != FJ_OK)
		return st;
	size_t ol = LLVMGetBufferSize(obj);
	unsigned char *p = malloc(HOST_PAYLOAD_HEAD + ol);
	if (p) {
		memcpy(p, &po, 4);
		memcpy(p + 4, &pm, 4);
		memcpy(p + HOST_PAYLOAD_HEAD, LLVMGetBufferStart(obj), ol);
		*data = p;
		*len = HOST_PAYLOAD_HEAD + ol;
	}
	LLVMDisposeMemoryBuffer(obj);
	return p ? FJ_OK : fj_error_status(dctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

/* An entry's value: the kernel, and what frees its code. */
typedef struct host_value {
	fj_host_kernel k;
	fj_host_jit *j;
	LLVMOrcResourceTrackerRef rt;
} host_value;

/* Takes the code rt tracks out of the JIT and releases rt (under the JIT's
 * mutex). A failure has nobody to be reported to (an eviction, the
 * context's end, or the cleanup of a failed add): consumed. */
static void drop_tracker(LLVMOrcResourceTrackerRef rt)
{
	LLVMErrorRef e = LLVMOrcResourceTrackerRemove(rt);
	LLVMOrcReleaseResourceTracker(rt);
	if (e)
		LLVMConsumeError(e);
}

static void kernel_free(fj_context *ctx, void *value)
{
	host_value *v = value;
	fj_host_jit *j = v->j;
	pthread_mutex_lock(&j->lock);
	drop_tracker(v->rt);
	/* the removed symbols' names, unless another kernel still uses them */
	LLVMOrcSymbolStringPoolClearDeadEntries(LLVMOrcExecutionSessionGetSymbolStringPool(
		LLVMOrcLLJITGetExecutionSession(j->jit)));
	pthread_mutex_unlock(&j->lock);
	(void)ctx;
	free(v);
}

void fj_host_release_kernels(fj_context *ctx, fj_host_kernel *kernels, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		fj_kcache_release(ctx, kernels[i].entry);
		kernels[i] = (fj_host_kernel){0};
	}
}

/* Makes the kernel of entry e (symbol name) callable: its object goes into
 * the JIT once (the first caller, under j->lock); the payload is dropped. */
static fj_status materialise(fj_host_jit *j, fj_kc_entry *e, const char *name)
{
	if (e->value)
		return FJ_OK;
	fj_context *ctx = j->ctx;
	if (!e->data || e->len < HOST_PAYLOAD_HEAD)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "host JIT: a cached kernel has no object");
	host_value *v = calloc(1, sizeof *v);
	if (!v)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	const unsigned char *p = e->data;
	memcpy(&v->k.par_out, p, 4);
	memcpy(&v->k.par_mask, p + 4, 4);
	v->j = j;
	LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(
		(const char *)p + HOST_PAYLOAD_HEAD, e->len - HOST_PAYLOAD_HEAD, "fj_kernel.o");
	LLVMOrcJITDylibRef dylib = LLVMOrcLLJITGetMainJITDylib(j->jit);
	v->rt = LLVMOrcJITDylibCreateResourceTracker(dylib);
	LLVMErrorRef err = LLVMOrcLLJITAddObjectFileWithRT(j->jit, v->rt, buf);
	LLVMOrcExecutorAddress addr = 0;
	if (!err)
		err = LLVMOrcLLJITLookup(j->jit, &addr, name);
	if (err) {
		drop_tracker(v->rt);
		free(v);
		return llvm_err(ctx, err, "adding a kernel's object");
	}
	v->k.fn = (fj_host_kernel_fn)(uintptr_t)addr;
	e->value_free = kernel_free;
	e->value = v;
	free(e->data);
	e->data = NULL;
	e->len = 0;
	return FJ_OK;
}

/* The keys of nodes[0..n) into keys (offsets koff[0..n]): the target's tag,
 * then the node's canonical key (fj_cg_node_key); and their symbol names. */
static fj_status make_keys(fj_host_jit *j, const fj_graph *g, const uint32_t *nodes, uint32_t n, fj_buf *keys,
                           size_t *koff, host_batch *b)
{
	fj_context *ctx = j->ctx;
	for (uint32_t i = 0; i < n; i++) {
		koff[i] = keys->len;
		fj_buf_printf(keys, "%s\n", j->tag);
		fj_cg_node_key(keys, g, nodes[i]);
	}
	koff[n] = keys->len;
	if (keys->oom)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		const fj_op op = g->nodes[nodes[i]].op;
		if (!fj_cg_node_emitter(op))
			return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[nodes[i]].loc,
			                       "%s: no host kernel for this op", fj_op_name(op));
		b->req[i] = (fj_kc_request){keys->data + koff[i], koff[i + 1] - koff[i], NULL};
		uint64_t h0 = fj_kcache_hash(b->req[i].key, b->req[i].keylen, 0x686f7374);
		uint64_t h1 = fj_kcache_hash(b->req[i].key, b->req[i].keylen, 0x6b65726e);
		snprintf(b->name[i], sizeof b->name[i], "fj_h%016llx%016llx", (unsigned long long)h0,
		         (unsigned long long)h1);
	}
	return FJ_OK;
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
	fj_buf keys;
	fj_buf_init(&keys, ctx);
	size_t *koff = malloc((n + 1) * sizeof *koff);
	host_batch b = {j, g, nodes, calloc(n + 1, sizeof *b.req), calloc(n + 1, sizeof *b.name)};
	if (!koff || !b.req || !b.name)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (st == FJ_OK)
		st = make_keys(j, g, nodes, n, &keys, koff, &b);
	if (st == FJ_OK)
		st = fj_kcache_get(ctx, "host", j->target_desc, b.req, n, compile_one, &b, compiled);
	if (st == FJ_OK) {
		uint32_t done = 0; /* out[0..done) hold their entries' references */
		pthread_mutex_lock(&j->lock);
		for (; done < n && (st = materialise(j, b.req[done].entry, b.name[done])) == FJ_OK; done++) {
			out[done] = ((const host_value *)b.req[done].entry->value)->k;
			out[done].entry = b.req[done].entry; /* its reference, now out[done]'s */
			b.req[done].entry = NULL;
		}
		pthread_mutex_unlock(&j->lock);
		if (st != FJ_OK) { /* every reference back; out[done..n) were never written: cleared */
			fj_host_release_kernels(ctx, out, done);
			for (uint32_t i = done; i < n; i++) {
				fj_kcache_release(ctx, b.req[i].entry);
				out[i] = (fj_host_kernel){0};
			}
		}
	}
	fj_buf_free(&keys);
	free(koff);
	free(b.req);
	free(b.name);
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
	LLVMModuleRef mod = new_module(j, llctx, j->tm);
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
		st = verify_and_optimise(j, ctx, j->tm, mod);
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
