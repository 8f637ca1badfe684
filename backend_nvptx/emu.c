/* emu.c -- the host emulator of GPU kernels (emu.h).
 *
 * Each prepared region is emitted by region_gpu.c with the emulated target
 * hooks below into a fresh module for the host, its entries renamed
 * (emu<k>_<entry>) and given a wrapper `void wrap(const u64 *args)`, then
 * optimised (default<O2>) and added to one LLJIT. The hooks call back into
 * this file through function addresses baked into the IR as constants, and
 * read the current thread's block and thread index from thread-local state
 * (the one piece of mutable static state: it only lives during a launch). */
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

#include "backend_nvptx/emu.h"
#include "backend_nvptx/region_gpu.h"
#include "codegen/region.h"

typedef void (*wrap_fn)(const uint64_t *args);

typedef struct emu_kernel {
	fj_nvptx_emu *emu;
	int nvariants, sched;
	wrap_fn wrap[FJ_NVPTX_MAX_VARIANTS];
} emu_kernel;

struct fj_nvptx_emu {
	fj_context *ctx;
	pthread_mutex_t lock;     /* the JIT and the kernel list */
	pthread_mutex_t run_lock; /* one caller between enter and leave: the kernels' shared memory is global */
	LLVMOrcLLJITRef jit;
	LLVMTargetMachineRef tm;
	char *triple, *cpu, *features;
	emu_kernel **kern;
	uint32_t nkern, cap;
};

/* ---- the block being run ---- */

typedef struct emu_block {
	unsigned ntid, nctaid, ctaid;
	pthread_barrier_t bar;
	pthread_barrier_t wbar[32];
	int64_t slot[1024];
	uint32_t mma_a[1024][4], mma_b[1024][2]; /* per thread: its mma fragments */
	wrap_fn fn;
	const uint64_t *args;
} emu_block;

static _Thread_local emu_block *tl_blk;
static _Thread_local unsigned tl_tid;

static int32_t emu_tid(void) { return (int32_t)tl_tid; }
static int32_t emu_ntid(void) { return (int32_t)tl_blk->ntid; }
static int32_t emu_ctaid(void) { return (int32_t)tl_blk->ctaid; }
static int32_t emu_nctaid(void) { return (int32_t)tl_blk->nctaid; }
static void emu_bar(void) { pthread_barrier_wait(&tl_blk->bar); }
static int64_t emu_shfl(int64_t v, int32_t mask)
{
	emu_block *b = tl_blk;
	unsigned w = tl_tid / 32;
	b->slot[tl_tid] = v;
	pthread_barrier_wait(&b->wbar[w]);
	int64_t r = b->slot[tl_tid ^ (unsigned)mask];
	pthread_barrier_wait(&b->wbar[w]);
	return r;
}

static float bf16_float(uint32_t h)
{
	uint32_t u = (h & 0xffff) << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static float f16_float(uint32_t h)
{
	uint32_t sign = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
	float f;
	if (e == 0)
		f = (float)m * 0x1p-24f; /* subnormal */
	else if (e == 31)
		f = m ? __builtin_nanf("") : __builtin_inff();
	else
		f = (float)(m | 1024) * __builtin_ldexpf(1.0f, (int)e - 25);
	return sign ? -f : f;
}

/* Element (r, k) of the warp's A (16x16) and (k, n) of its B (16x8), read
 * from the lanes' deposited fragments (the PTX ISA layout of m16n8k16, cg.h). */
static float mma_elem_a(const emu_block *b, unsigned base, bool bf16, unsigned r, unsigned k)
{
	unsigned lane = (r % 8) * 4 + (k % 8) / 2, reg = (r >= 8) + 2 * (k >= 8);
	uint32_t bits = b->mma_a[base + lane][reg] >> (16 * (k & 1));
	return bf16 ? bf16_float(bits) : f16_float(bits & 0xffff);
}

static float mma_elem_b(const emu_block *b, unsigned base, bool bf16, unsigned k, unsigned n)
{
	unsigned lane = n * 4 + (k % 8) / 2, reg = k >= 8;
	uint32_t bits = b->mma_b[base + lane][reg] >> (16 * (k & 1));
	return bf16 ? bf16_float(bits) : f16_float(bits & 0xffff);
}

/* mma.sync m16n8k16 in software: every lane deposits its fragments, a warp
 * barrier, each lane computes its four outputs from the whole warp's A and B
 * (products of f16/bf16 are exact in double; the sum is rounded to f32 once,
 * where tensor cores round a little more), and a second barrier so that no
 * lane overwrites its fragments before the others have read them. */
static void emu_mma(int32_t bf16, const uint32_t *a, const uint32_t *bfrag, float *cd)
{
	emu_block *b = tl_blk;
	unsigned w = tl_tid / 32, base = w * 32, lane = tl_tid % 32;
	memcpy(b->mma_a[tl_tid], a, sizeof b->mma_a[0]);
	memcpy(b->mma_b[tl_tid], bfrag, sizeof b->mma_b[0]);
	pthread_barrier_wait(&b->wbar[w]);
	unsigned g = lane / 4, t = lane % 4;
	for (unsigned i = 0; i < 4; i++) {
		unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
		double sum = cd[i];
		for (unsigned k = 0; k < 16; k++)
			sum += (double)mma_elem_a(b, base, bf16, row, k) * mma_elem_b(b, base, bf16, k, col);
		cd[i] = (float)sum;
	}
	pthread_barrier_wait(&b->wbar[w]);
}

/* ---- hooks ---- */

static LLVMValueRef call_addr(fj_cg *cg, void *fn, LLVMTypeRef ret, LLVMTypeRef *ps, LLVMValueRef *args,
                              unsigned n)
{
	LLVMTypeRef fty = LLVMFunctionType(ret, ps, n, 0);
	LLVMValueRef addr = LLVMConstInt(cg->t_i64, (unsigned long long)(uintptr_t)fn, 0);
	LLVMValueRef f = LLVMConstIntToPtr(addr, cg->t_ptr);
	return LLVMBuildCall2(cg->b, fty, f, args, n, "");
}

static LLVMValueRef h_tid(fj_cg *cg, int axis) { (void)axis; return call_addr(cg, (void *)emu_tid, cg->t_i32, NULL, NULL, 0); }
static LLVMValueRef h_ntid(fj_cg *cg, int axis) { (void)axis; return call_addr(cg, (void *)emu_ntid, cg->t_i32, NULL, NULL, 0); }
static LLVMValueRef h_ctaid(fj_cg *cg, int axis) { (void)axis; return call_addr(cg, (void *)emu_ctaid, cg->t_i32, NULL, NULL, 0); }
static LLVMValueRef h_nctaid(fj_cg *cg, int axis) { (void)axis; return call_addr(cg, (void *)emu_nctaid, cg->t_i32, NULL, NULL, 0); }
static void h_bar(fj_cg *cg) { call_addr(cg, (void *)emu_bar, cg->t_void, NULL, NULL, 0); }

static LLVMValueRef h_shfl(fj_cg *cg, LLVMValueRef v, int mask)
{
	LLVMTypeRef ty = LLVMTypeOf(v);
	LLVMValueRef x;
	if (ty == cg->t_f64)
		x = LLVMBuildBitCast(cg->b, v, cg->t_i64, "");
	else if (ty == cg->t_f32)
		x = LLVMBuildZExt(cg->b, LLVMBuildBitCast(cg->b, v, cg->t_i32, ""), cg->t_i64, "");
	else if (ty == cg->t_i64)
		x = v;
	else
		x = LLVMBuildZExt(cg->b, v, cg->t_i64, "");
	LLVMTypeRef ps[2] = {cg->t_i64, cg->t_i32};
	LLVMValueRef a[2] = {x, fj_cg_i32(cg, mask)};
	LLVMValueRef r = call_addr(cg, (void *)emu_shfl, cg->t_i64, ps, a, 2);
	if (ty == cg->t_f64)
		return LLVMBuildBitCast(cg->b, r, ty, "");
	if (ty == cg->t_f32)
		return LLVMBuildBitCast(cg->b, LLVMBuildTrunc(cg->b, r, cg->t_i32, ""), ty, "");
	if (ty == cg->t_i64)
		return r;
	return LLVMBuildTrunc(cg->b, r, ty, "");
}

/* The fragments go through stack arrays to emu_mma (an i32 flag, A, B, C/D). */
static void h_mma(fj_cg *cg, bool bf16, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef c[4], LLVMValueRef d[4])
{
	LLVMTypeRef a4 = LLVMArrayType2(cg->t_i32, 4), b2 = LLVMArrayType2(cg->t_i32, 2);
	LLVMTypeRef c4 = LLVMArrayType2(cg->t_f32, 4);
	LLVMValueRef pa = fj_cg_var(cg, a4, NULL, "mma_a"), pb = fj_cg_var(cg, b2, NULL, "mma_b");
	LLVMValueRef pc = fj_cg_var(cg, c4, NULL, "mma_cd");
	for (int i = 0; i < 4; i++) {
		LLVMValueRef ix = fj_cg_i64(cg, i);
		LLVMBuildStore(cg->b, a[i], LLVMBuildInBoundsGEP2(cg->b, cg->t_i32, pa, &ix, 1, ""));
		LLVMBuildStore(cg->b, c[i], LLVMBuildInBoundsGEP2(cg->b, cg->t_f32, pc, &ix, 1, ""));
		if (i < 2)
			LLVMBuildStore(cg->b, b[i], LLVMBuildInBoundsGEP2(cg->b, cg->t_i32, pb, &ix, 1, ""));
	}
	LLVMTypeRef ps[4] = {cg->t_i32, cg->t_ptr, cg->t_ptr, cg->t_ptr};
	LLVMValueRef args[4] = {fj_cg_i32(cg, bf16), pa, pb, pc};
	call_addr(cg, (void *)emu_mma, cg->t_void, ps, args, 4);
	for (int i = 0; i < 4; i++) {
		LLVMValueRef ix = fj_cg_i64(cg, i);
		d[i] = LLVMBuildLoad2(cg->b, cg->t_f32, LLVMBuildInBoundsGEP2(cg->b, cg->t_f32, pc, &ix, 1, ""), "");
	}
}

static LLVMValueRef h_shared(fj_cg *cg, LLVMTypeRef elem, uint64_t n, const char *name)
{
	LLVMTypeRef aty = LLVMArrayType2(elem, n);
	LLVMValueRef gv = LLVMAddGlobal(cg->mod, aty, name);
	LLVMSetLinkage(gv, LLVMInternalLinkage);
	LLVMSetInitializer(gv, LLVMConstNull(aty));
	LLVMSetAlignment(gv, 16);
	return gv;
}


static LLVMValueRef h_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	unsigned n = fn == FJ_MATH_POW || fn == FJ_MATH_ATAN2 || fn == FJ_MATH_FMOD ? 2 : 1;
	const char *name = fj_cg_libm_name(fn, ty == cg->t_f64);
	LLVMTypeRef ps[2] = {ty, ty};
	LLVMTypeRef fty = LLVMFunctionType(ty, ps, n, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	if (!f)
		f = LLVMAddFunction(cg->mod, name, fty);
	return LLVMBuildCall2(cg->b, fty, f, args, n, "");
}

static const fj_cg_target emu_target = {
	.name = "nvptx-emu", .math = h_math, .region_math = h_math, .thread_idx = h_tid, .block_idx = h_ctaid,
	.block_dim = h_ntid, .grid_dim = h_nctaid, .barrier = h_bar, .shuffle_xor = h_shfl, .shared_array = h_shared,
	.mma_m16n8k16 = h_mma, .warp_size = 32, .vector_bits = 0,
};

/* ---- the JIT ---- */

static fj_status llvm_err(fj_context *ctx, LLVMErrorRef e, const char *what)
{
	char *m = LLVMGetErrorMessage(e);
	fj_status st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx emulator: %s: %s", what, m);
	LLVMDisposeErrorMessage(m);
	return st;
}

static LLVMTargetMachineRef make_tm(fj_nvptx_emu *e)
{
	LLVMTargetRef t;
	char *err = NULL;
	if (LLVMGetTargetFromTriple(e->triple, &t, &err)) {
		LLVMDisposeMessage(err);
		return NULL;
	}
	return LLVMCreateTargetMachine(t, e->triple, e->cpu, e->features, LLVMCodeGenLevelDefault, LLVMRelocPIC,
	                               LLVMCodeModelJITDefault);
}

void fj_nvptx_emu_destroy(fj_nvptx_emu *e)
{
	if (!e)
		return;
	if (e->jit) {
		LLVMErrorRef err = LLVMOrcDisposeLLJIT(e->jit);
		if (err)
			LLVMConsumeError(err);
	}
	if (e->tm)
		LLVMDisposeTargetMachine(e->tm);
	LLVMDisposeMessage(e->triple);
	LLVMDisposeMessage(e->cpu);
	LLVMDisposeMessage(e->features);
	for (uint32_t i = 0; i < e->nkern; i++)
		free(e->kern[i]);
	free(e->kern);
	pthread_mutex_destroy(&e->lock);
	pthread_mutex_destroy(&e->run_lock);
	free(e);
}

fj_status fj_nvptx_emu_create(fj_context *ctx, fj_nvptx_emu **out)
{
	*out = NULL;
	if (!fj_cg_native_init())
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "nvptx emulator: no native target");
	fj_nvptx_emu *e = calloc(1, sizeof *e);
	if (!e)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	e->ctx = ctx;
	pthread_mutex_init(&e->lock, NULL);
	pthread_mutex_init(&e->run_lock, NULL);
	e->triple = LLVMGetDefaultTargetTriple();
	e->cpu = LLVMGetHostCPUName();
	e->features = LLVMGetHostCPUFeatures();
	LLVMTargetMachineRef jtm = make_tm(e);
	e->tm = make_tm(e);
	fj_status st = FJ_ERR_INTERNAL;
	if (!jtm || !e->tm) {
		if (jtm)
			LLVMDisposeTargetMachine(jtm);
		fj_nvptx_emu_destroy(e);
		return fj_error_status(ctx, st, (fj_loc){0}, "nvptx emulator: no host target machine");
	}
	LLVMOrcLLJITBuilderRef lb = LLVMOrcCreateLLJITBuilder();
	LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(lb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm));
	LLVMErrorRef err = LLVMOrcCreateLLJIT(&e->jit, lb);
	if (err) {
		e->jit = NULL;
		st = llvm_err(ctx, err, "creating the LLJIT");
		fj_nvptx_emu_destroy(e);
		return st;
	}
	LLVMOrcDefinitionGeneratorRef gen;
	err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(e->jit), NULL, NULL);
	if (err) {
		st = llvm_err(ctx, err, "creating the process symbol generator");
		fj_nvptx_emu_destroy(e);
		return st;
	}
	LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(e->jit), gen);
	*out = e;
	return FJ_OK;
}

/* ---- the device ---- */

static fj_status d_alloc(void *ud, size_t n, uint64_t *p)
{
	fj_nvptx_emu *e = ud;
	size_t sz = (n + 255) & ~(size_t)255;
	if (!sz)
		sz = 256;
	void *m = aligned_alloc(256, sz);
	if (!m)
		return fj_error_status(e->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	memset(m, 0, sz);
	*p = (uint64_t)(uintptr_t)m;
	return FJ_OK;
}
static void d_release(void *ud, uint64_t p) { (void)ud; free((void *)(uintptr_t)p); }
static fj_status d_htod(void *ud, uint64_t d, const void *s, size_t n)
{
	(void)ud;
	if (n)
		memcpy((void *)(uintptr_t)d, s, n);
	return FJ_OK;
}
static fj_status d_dtoh(void *ud, void *d, uint64_t s, size_t n)
{
	(void)ud;
	if (n)
		memcpy(d, (const void *)(uintptr_t)s, n);
	return FJ_OK;
}
static fj_status d_memset0(void *ud, uint64_t d, size_t n)
{
	(void)ud;
	memset((void *)(uintptr_t)d, 0, n);
	return FJ_OK;
}
static fj_status d_sync(void *ud) { (void)ud; return FJ_OK; }
/* a caller's stream is a token: every call has finished when it returns */
static void d_set_stream(void *ud, void *stream) { (void)ud; (void)stream; }

static fj_status prepare_locked(fj_nvptx_emu *e, const fj_graph *g, uint32_t node, emu_kernel **out)
{
	fj_context *ctx = e->ctx;
	uint32_t id = e->nkern;
	LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
	LLVMContextRef llctx = LLVMOrcThreadSafeContextGetContext(tsc);
	LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("fj_emu", llctx);
	LLVMSetTarget(mod, e->triple);
	LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(e->tm);
	LLVMSetModuleDataLayout(mod, dl);
	LLVMDisposeTargetData(dl);
	fj_cg cg;
	fj_cg_init(&cg, ctx, &emu_target, llctx, mod);
	int nv = 0;
	char entries[FJ_NVPTX_MAX_VARIANTS][112];
	fj_status st = fj_nvptx_emit_region(NULL, &cg, g, node, &nv, entries);
	char wname[FJ_NVPTX_MAX_VARIANTS][140];
	for (int v = 0; st == FJ_OK && v < nv; v++) {
		LLVMValueRef f = LLVMGetNamedFunction(mod, entries[v]);
		if (!f) {
			st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx emulator: no entry %s", entries[v]);
			break;
		}
		char nm[256];
		snprintf(nm, sizeof nm, "emu%u_%.120s", id, entries[v]);
		LLVMSetValueName2(f, nm, strlen(nm));
		LLVMSetLinkage(f, LLVMInternalLinkage);
		snprintf(wname[v], sizeof wname[v], "emu%u_wrap%d", id, v);
		LLVMValueRef w = LLVMAddFunction(mod, wname[v], LLVMFunctionType(cg.t_void, &cg.t_ptr, 1, 0));
		LLVMPositionBuilderAtEnd(cg.b, LLVMAppendBasicBlockInContext(llctx, w, "entry"));
		unsigned np = LLVMCountParams(f);
		LLVMValueRef a[np ? np : 1];
		for (unsigned i = 0; i < np; i++) {
			LLVMValueRef ix = fj_cg_i64(&cg, i);
			LLVMValueRef pp = LLVMBuildGEP2(cg.b, cg.t_i64, LLVMGetParam(w, 0), &ix, 1, "");
			a[i] = LLVMBuildLoad2(cg.b, cg.t_ptr, pp, "");
		}
		LLVMBuildCall2(cg.b, LLVMGlobalGetValueType(f), f, a, np, "");
		LLVMBuildRetVoid(cg.b);
	}
	fj_cg_dispose(&cg);
	if (st == FJ_OK) {
		char *msg = NULL;
		if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg))
			st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx emulator: invalid IR: %s",
			                     msg ? msg : "?");
		LLVMDisposeMessage(msg);
	}
	if (st == FJ_OK) {
		LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
		LLVMErrorRef err = LLVMRunPasses(mod, "default<O1>", e->tm, opts);
		LLVMDisposePassBuilderOptions(opts);
		if (err)
			st = llvm_err(ctx, err, "optimising");
	}
	if (st != FJ_OK) {
		LLVMDisposeModule(mod);
		LLVMOrcDisposeThreadSafeContext(tsc);
		return st;
	}
	LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
	LLVMOrcDisposeThreadSafeContext(tsc);
	LLVMErrorRef err = LLVMOrcLLJITAddLLVMIRModule(e->jit, LLVMOrcLLJITGetMainJITDylib(e->jit), tsm);
	if (err)
		return llvm_err(ctx, err, "adding a module");
	emu_kernel *k = calloc(1, sizeof *k);
	if (!k)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	k->emu = e;
	k->nvariants = nv;
	fj_rg_analysis a;
	if (fj_rg_analyze(ctx, g, node, &a) == FJ_OK) {
		k->sched = a.sched;
		fj_rg_analysis_free(&a);
	}
	for (int v = 0; v < nv; v++) {
		LLVMOrcExecutorAddress addr = 0;
		err = LLVMOrcLLJITLookup(e->jit, &addr, wname[v]);
		if (err) {
			free(k);
			return llvm_err(ctx, err, "looking up a kernel");
		}
		k->wrap[v] = (wrap_fn)(uintptr_t)addr;
	}
	if (e->nkern == e->cap) {
		uint32_t nc = e->cap ? e->cap * 2 : 16;
		emu_kernel **nk = realloc(e->kern, nc * sizeof *nk);
		if (!nk) {
			free(k);
			return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
		e->kern = nk;
		e->cap = nc;
	}
	e->kern[e->nkern++] = k;
	*out = k;
	return FJ_OK;
}

fj_status fj_nvptx_emu_prepare(fj_nvptx_emu *e, const fj_graph *g, uint32_t node, void **kern, int *nvariants)
{
	emu_kernel *k = NULL;
	pthread_mutex_lock(&e->lock);
	fj_status st = prepare_locked(e, g, node, &k);
	pthread_mutex_unlock(&e->lock);
	*kern = k;
	*nvariants = k ? k->nvariants : 0;
	return st;
}

static fj_status d_prepare(void *ud, const fj_graph *g, uint32_t node, void **kern, bool *hit)
{
	int nv;
	*hit = false;
	return fj_nvptx_emu_prepare(ud, g, node, kern, &nv);
}

static void *thread_main(void *arg)
{
	emu_block *b = ((void **)arg)[0];
	tl_blk = b;
	tl_tid = (unsigned)(uintptr_t)((void **)arg)[1];
	b->fn(b->args);
	return NULL;
}

/* The geometry the emulator runs a launch at (scaled down: see emu.h).
 * A split reduction (variant 4 of a 5-variant reduction region) keeps up to
 * 5 blocks: several chunks per tile, and an uneven grid;
 * persistent_inner_outer up to 7: its two-level merge groups
 * ceil(sqrt(blocks)) blocks, so 7 blocks form groups of 3, 3 and 1 (several
 * groups, a full one before a partial last one), 3 blocks (3 rows) 2 and 1.
 * The blocks run one after the other: the merges (the last block of a
 * group, of all groups, does the work) never wait on another block. */
static void scaled_geometry(const emu_kernel *k, int variant, unsigned *grid, unsigned *block)
{
	bool split = k->nvariants == 5 && variant == 4 && k->sched != FJ_RG_MATMUL;
	unsigned most = k->sched == FJ_RG_PERSISTENT_INNER_OUTER ? 7u : split ? 5u : 2u;
	if (k->sched != FJ_RG_MATMUL && !(k->sched == FJ_RG_TRANSPOSE && variant == 0 && *block == 256)) {
		if (*block > 64)
			*block = 64;
		if (*grid > most)
			*grid = most;
	} else if (*grid > 4) {
		*grid = 4;
	}
}

/* The block run at position i of a launch of `grid` blocks in `order`
 * (FJCUDA_ORDER_*): perm holds a seeded shuffle (Fisher-Yates over a
 * 64-bit LCG) when order is FJCUDA_ORDER_SHUFFLE. */
static void block_order(unsigned *perm, unsigned grid, int order, unsigned seed)
{
	for (unsigned i = 0; i < grid; i++)
		perm[i] = order == FJCUDA_ORDER_REVERSE ? grid - 1 - i : i;
	if (order != FJCUDA_ORDER_SHUFFLE)
		return;
	uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
	for (unsigned i = grid; i > 1; i--) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		unsigned j = (unsigned)((x >> 33) % i);
		unsigned t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
}

/* Runs `grid` blocks of `block` threads of variant `variant`, in `order`. */
static fj_status run_blocks(fj_nvptx_emu *e, emu_kernel *k, int variant, unsigned grid, unsigned block,
                            const uint64_t *args, int order, unsigned seed)
{
	if (block == 0 || block % 32 || block > 1024)
		return fj_error_status(e->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx emulator: block size %u", block);
	if (variant < 0 || variant >= k->nvariants)
		return fj_error_status(e->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx emulator: no variant %d", variant);
	emu_block *b = calloc(1, sizeof *b);
	pthread_t *th = calloc(block, sizeof *th);
	void **targ = calloc((size_t)block * 2, sizeof *targ);
	unsigned *perm = calloc(grid ? grid : 1, sizeof *perm);
	if (!b || !th || !targ || !perm) {
		free(b);
		free(th);
		free(targ);
		free(perm);
		return fj_error_status(e->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	block_order(perm, grid, order, seed);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1 << 20);
	fj_status st = FJ_OK;
	for (unsigned c = 0; c < grid && st == FJ_OK; c++) {
		b->ntid = block;
		b->nctaid = grid;
		b->ctaid = perm[c];
		b->fn = k->wrap[variant];
		b->args = args;
		pthread_barrier_init(&b->bar, NULL, block);
		for (unsigned w = 0; w < block / 32; w++)
			pthread_barrier_init(&b->wbar[w], NULL, 32);
		unsigned started = 0;
		for (unsigned t = 0; t < block; t++) {
			targ[2 * t] = b;
			targ[2 * t + 1] = (void *)(uintptr_t)t;
			if (pthread_create(&th[t], &attr, thread_main, &targ[2 * t]) != 0) {
				st = fj_error_status(e->ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "nvptx emulator: cannot start threads");
				break;
			}
			started++;
		}
		for (unsigned t = 0; t < started; t++)
			pthread_join(th[t], NULL);
		pthread_barrier_destroy(&b->bar);
		for (unsigned w = 0; w < block / 32; w++)
			pthread_barrier_destroy(&b->wbar[w]);
	}
	pthread_attr_destroy(&attr);
	free(b);
	free(th);
	free(targ);
	free(perm);
	return st;
}

static fj_status d_launch(void *ud, void *kern, int variant, unsigned grid, unsigned block, unsigned shared,
                          const uint64_t *args, uint32_t nargs)
{
	emu_kernel *k = kern;
	(void)shared;
	(void)nargs;
	scaled_geometry(k, variant, &grid, &block);
	return run_blocks(ud, k, variant, grid, block, args, FJCUDA_ORDER_FORWARD, 0);
}

fj_status fj_nvptx_emu_run(fj_nvptx_emu *e, void *kern, int variant, unsigned grid, unsigned block,
                           const uint64_t *args, int order_mode, unsigned seed)
{
	emu_kernel *k = kern;
	if ((uint64_t)grid * block > FJ_NVPTX_EMU_REAL_THREADS || block > 1024)
		scaled_geometry(k, variant, &grid, &block);
	pthread_mutex_lock(&e->run_lock);
	fj_status st = run_blocks(e, k, variant, grid, block, args, order_mode, seed);
	pthread_mutex_unlock(&e->run_lock);
	return st;
}

int fj_nvptx_emu_hook_run(void *ud, int variant, unsigned grid, unsigned block, unsigned shared,
                          const uint64_t *args, unsigned nargs, int order_mode, unsigned seed)
{
	emu_kernel *k = ud;
	(void)shared;
	(void)nargs;
	return fj_nvptx_emu_run(k->emu, k, variant, grid, block, args, order_mode, seed) == FJ_OK ? 0 : 1;
}

static fj_status d_enter(void *ud)
{
	fj_nvptx_emu *e = ud;
	pthread_mutex_lock(&e->run_lock);
	return FJ_OK;
}

static void d_leave(void *ud)
{
	fj_nvptx_emu *e = ud;
	pthread_mutex_unlock(&e->run_lock);
}

fj_nvptx_device fj_nvptx_emu_device(fj_nvptx_emu *e)
{
	return (fj_nvptx_device){
		.ud = e, .name = "host emulator", .target = "emu", .emulated = true,
		.limits = {.sm_count = 132, .regs_per_sm = 65536}, /* an H100's, so that plans are the same everywhere */
		.alloc = d_alloc,
		.release = d_release, .htod = d_htod, .dtoh = d_dtoh, .memset0 = d_memset0, .sync = d_sync,
		.prepare = d_prepare, .launch = d_launch, .set_stream = d_set_stream, .enter = d_enter, .leave = d_leave,
	};
}
