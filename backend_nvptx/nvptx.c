/* nvptx.c -- the NVPTX target: target whitelist, target machine, libdevice,
 * math hook, GPU intrinsics, O3 and PTX emission (nvptx.h).
 *
 * Process-global: LLVMInitializeNVPTX* once under pthread_once. Everything
 * else is per compilation (a fresh LLVM context with a diagnostic handler
 * counting errors: with a handler installed, emission "succeeds" even when it
 * produced bad PTX, so the count is the only signal) or per fj_context (the
 * libdevice bytes, read once, lazily).
 *
 * libdevice: the bitcode is parsed lazily (LLVMGetBitcodeModuleInContext2
 * over a non-owning buffer on the bytes), its triple and data layout are
 * replaced by ours, its definitions become linkonce_odr so that
 * LLVMLinkModules2 materialises only the functions the kernels call, and the
 * linked ones are internalized (so O3 inlines and drops them). NVVMReflect
 * runs inside default<O3> for the NVPTX target machine; __nvvm_reflect("
 * __CUDA_FTZ") reads the module flag nvvm-reflect-ftz (0: IEEE denormals).
 * Kernels are not fast-math, so libdevice's "unsafe-fp-math"="false" is
 * harmless here (were they, it would have to be set on the libdevice
 * definitions too: inlining ANDs it into the caller). __nv_fast_tanhf is
 * broken with LLVM 19 (an unknown intrinsic): __nv_tanhf is used.
 *
 * Joining modules (region_gpu.c): a compilation with a sym_suffix appends it
 * to every module-local symbol (before and after O3), and the PTX text has
 * the NVPTX backend's process-wide call-sequence numbers renumbered per
 * module, so that it does not depend on what else was compiled.
 *
 * Math (the nvptx_math setting): "libdevice", the default, calls libdevice's
 * __nv_* functions; a kernel that calls one when no libdevice could be read
 * fails to compile with one sentence naming the kernel, the function, the
 * dtype and the two ways out (link_libdevice): never a silent fallback.
 * "approx" opts into PTX approximations (ex2.approx, lg2.approx, sin/cos.approx
 * through llvm.nvvm.*) composed into every math function, libdevice unused;
 * doubles go through float. Accurate to ~1e-6 relative in f32, less in f64:
 * enough to run, not to pass the f64 goldens. llvm.exp and friends do not
 * lower on NVPTX (no libcall), so they are never used.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Error.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "backend_nvptx/nvptx.h"
#include "backend_nvptx/nvptx_internal.h"

#define TRIPLE "nvptx64-nvidia-cuda"
#define LIBDEVICE_DEFAULT "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc"

/* ---- targets ---- */

static const char *const sms[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};

bool fj_nvptx_sm_supported(const char *sm)
{
	for (size_t i = 0; sm && i < FJ_ARRAY_LEN(sms); i++)
		if (strcmp(sm, sms[i]) == 0)
			return true;
	return false;
}

fj_status fj_nvptx_check_sm(fj_context *ctx, const char *sm)
{
	if (fj_nvptx_sm_supported(sm))
		return FJ_OK;
	int major = 0;
	if (sm && sscanf(sm, "sm_%d", &major) == 1 && major >= 100)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "nvptx: target %s is not supported by LLVM 19's NVPTX backend (supported: "
		                       "sm_80, sm_86, sm_89, sm_90, sm_90a)",
		                       sm);
	return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
	                       "nvptx: unknown target '%s' (supported: sm_80, sm_86, sm_89, sm_90, sm_90a)",
	                       sm ? sm : "(null)");
}

const char *fj_nvptx_sm_for_cc(int major, int minor)
{
	if (major < 8)
		return NULL;
	if (major == 8)
		return minor >= 9 ? "sm_89" : minor >= 6 ? "sm_86" : "sm_80";
	return "sm_90"; /* sm_90 and newer (sm_100 runs sm_90 PTX through the driver's JIT) */
}

/* ---- process-global initialisation ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static LLVMTargetRef nvptx_target;

static void llvm_init(void)
{
	LLVMInitializeNVPTXTargetInfo();
	LLVMInitializeNVPTXTarget();
	LLVMInitializeNVPTXTargetMC();
	LLVMInitializeNVPTXAsmPrinter();
	char *err = NULL;
	if (LLVMGetTargetFromTriple(TRIPLE, &nvptx_target, &err))
		nvptx_target = NULL;
	LLVMDisposeMessage(err);
}

/* ---- per-context state ---- */

static void state_destroy(fj_context *ctx, void *p)
{
	fj_nvptx_state *s = p;
	if (!s)
		return;
	free(s->libdevice);
	pthread_mutex_destroy(&s->lock);
	fj_free(ctx, s, sizeof *s);
}

static fj_status state_create(fj_context *ctx, void **out)
{
	/* Runs under the context's lock: no diagnostics here. */
	fj_nvptx_state *s = fj_alloc(ctx, sizeof *s);
	if (!s)
		return FJ_ERR_NOMEM;
	memset(s, 0, sizeof *s);
	s->ctx = ctx;
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return FJ_OK;
}

fj_status fj_nvptx_state_get(fj_context *ctx, fj_nvptx_state **out)
{
	void *p = NULL;
	fj_status st = fj_context_slot(ctx, FJ_SLOT_CUDA, state_create, state_destroy, &p);
	*out = p;
	if (st == FJ_ERR_NOMEM)
		fj_error_status(ctx, st, (fj_loc){0}, "out of memory");
	return st;
}

const char *fj_nvptx_libdevice_path(fj_context *ctx)
{
	const char *e = fj_context_settings(ctx)->libdevice;
	if (e && *e) {
		if (strcmp(e, "none") == 0)
			return NULL;
		return access(e, R_OK) == 0 ? e : NULL;
	}
	return access(LIBDEVICE_DEFAULT, R_OK) == 0 ? LIBDEVICE_DEFAULT : NULL;
}

/* Reads libdevice once per context (under s->lock). */
static void libdevice_load(fj_nvptx_state *s)
{
	if (s->libdevice_tried)
		return;
	s->libdevice_tried = true;
	const char *path = fj_nvptx_libdevice_path(s->ctx);
	if (!path)
		return;
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		if (k == 0)
			break;
		n += k;
	}
	fclose(f);
	if (buf && n > 4) {
		s->libdevice = buf;
		s->libdevice_len = n;
	} else {
		free(buf);
	}
}

/* ---- diagnostics ---- */

static void diag_handler(LLVMDiagnosticInfoRef di, void *ud)
{
	fj_nvptx_comp *c = ud;
	if (LLVMGetDiagInfoSeverity(di) != LLVMDSError)
		return; /* warnings, remarks and notes are ignored */
	if (c->nerrors++ == 0) {
		char *d = LLVMGetDiagInfoDescription(di);
		snprintf(c->first_error, sizeof c->first_error, "%s", d ? d : "?");
		LLVMDisposeMessage(d);
	}
}

static fj_status llvm_err(fj_context *ctx, LLVMErrorRef e, const char *what)
{
	char *m = LLVMGetErrorMessage(e); /* consumes e */
	fj_status st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: %s: %s", what, m);
	LLVMDisposeErrorMessage(m);
	return st;
}

/* ---- compilations ---- */

fj_status fj_nvptx_comp_begin(fj_context *ctx, const char *sm, fj_nvptx_comp *c)
{
	memset(c, 0, sizeof *c);
	c->ctx = ctx;
	fj_nvptx_state *s;
	fj_status st = fj_nvptx_state_get(ctx, &s);
	if (st != FJ_OK)
		return st;
	return fj_nvptx_comp_begin_state(ctx, s, sm, c);
}

fj_status fj_nvptx_comp_begin_state(fj_context *ctx, fj_nvptx_state *s, const char *sm, fj_nvptx_comp *c)
{
	memset(c, 0, sizeof *c);
	c->ctx = ctx;
	c->state = s;
	if (!sm)
		sm = FJ_NVPTX_DEFAULT_SM;
	fj_status st = fj_nvptx_check_sm(ctx, sm);
	if (st != FJ_OK)
		return st;
	snprintf(c->sm, sizeof c->sm, "%s", sm);
	pthread_once(&init_once, llvm_init);
	if (!nvptx_target)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "nvptx: this LLVM has no NVPTX target");
	c->approx = fj_context_settings(ctx)->nvptx_math == FJ_NVPTX_MATH_APPROX;
	if (!c->approx) {
		pthread_mutex_lock(&s->lock);
		libdevice_load(s);
		c->libdevice = s->libdevice != NULL;
		pthread_mutex_unlock(&s->lock);
	}

	/* The lowest PTX version the target allows is LLVM's default for it
	 * (sm_80: 7.0, sm_86: 7.1, sm_89/sm_90: 7.8, sm_90a: 8.0): no features. */
	c->tm = LLVMCreateTargetMachine(nvptx_target, TRIPLE, c->sm, "", LLVMCodeGenLevelAggressive, LLVMRelocDefault,
	                                LLVMCodeModelDefault);
	if (!c->tm)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: cannot create a target machine for %s",
		                       c->sm);
	c->llctx = LLVMContextCreate();
	LLVMContextSetDiagnosticHandler(c->llctx, diag_handler, c);
	c->mod = LLVMModuleCreateWithNameInContext("fj_nvptx", c->llctx);
	LLVMSetTarget(c->mod, TRIPLE);
	LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(c->tm);
	LLVMSetModuleDataLayout(c->mod, dl);
	LLVMDisposeTargetData(dl);
	LLVMTypeRef i32 = LLVMInt32TypeInContext(c->llctx);
	LLVMAddModuleFlag(c->mod, LLVMModuleFlagBehaviorOverride, "nvvm-reflect-ftz", 16,
	                  LLVMValueAsMetadata(LLVMConstInt(i32, 0, 0)));
	return FJ_OK;
}

void fj_nvptx_comp_end(fj_nvptx_comp *c)
{
	if (c->mod)
		LLVMDisposeModule(c->mod);
	if (c->llctx)
		LLVMContextDispose(c->llctx);
	if (c->tm)
		LLVMDisposeTargetMachine(c->tm);
	c->mod = NULL;
	c->llctx = NULL;
	c->tm = NULL;
}

void fj_nvptx_mark_kernel(fj_nvptx_comp *c, LLVMValueRef f, unsigned maxntid, unsigned minblocks)
{
	LLVMSetFunctionCallConv(f, LLVMPTXKernelCallConv);
	LLVMTypeRef i32 = LLVMInt32TypeInContext(c->llctx);
	const char *key[2] = {"maxntidx", "minctasm"}; /* .maxntid, .minnctapersm */
	unsigned val[2] = {maxntid, minblocks};
	for (int i = 0; i < 2; i++) {
		if (!val[i])
			continue;
		LLVMMetadataRef md[3] = {
			LLVMValueAsMetadata(f),
			LLVMMDStringInContext2(c->llctx, key[i], strlen(key[i])),
			LLVMValueAsMetadata(LLVMConstInt(i32, val[i], 0)),
		};
		LLVMAddNamedMetadataOperand(c->mod, "nvvm.annotations",
		                            LLVMMetadataAsValue(c->llctx, LLVMMDNodeInContext2(c->llctx, md, 3)));
	}
}

static const char *const nv_names[FJ_MATH_COUNT][2];

/* The error of a kernel that calls libdevice's function f when there is no
 * libdevice: names the kernel, the function and its dtype, why libdevice is
 * missing and the two ways out. */
static fj_status no_libdevice(fj_nvptx_comp *c, LLVMValueRef f)
{
	size_t len;
	const char *nv = LLVMGetValueName2(f, &len), *math = nv + 5, *dt = "f32";
	for (int i = 0; i < FJ_MATH_COUNT; i++)
		if (nv_names[i][1] && strcmp(nv, nv_names[i][1]) == 0)
			dt = "f64";
		else if (nv_names[i][0] && strcmp(nv, nv_names[i][0]) == 0)
			math = nv_names[i][1] + 5;
	const char *kernel = "?";
	LLVMValueRef use = LLVMGetFirstUse(f) ? LLVMGetUser(LLVMGetFirstUse(f)) : NULL;
	if (use && LLVMIsAInstruction(use))
		kernel = LLVMGetValueName2(LLVMGetBasicBlockParent(LLVMGetInstructionParent(use)), &len);
	const char *set = fj_context_settings(c->ctx)->libdevice;
	char why[600];
	if (set && strcmp(set, "none") == 0)
		snprintf(why, sizeof why, "FUSEJIT_LIBDEVICE (the option libdevice) is none");
	else if (set && *set && access(set, R_OK) != 0)
		snprintf(why, sizeof why, "FUSEJIT_LIBDEVICE=%s is not a readable file", set);
	else if (!set || !*set)
		snprintf(why, sizeof why, "the CUDA toolkit's %s is not there", LIBDEVICE_DEFAULT);
	else
		snprintf(why, sizeof why, "%s could not be read", set);
	return fj_error_status(c->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
	                       "nvptx: kernel %s computes %s in %s, which needs libdevice, and %s: point "
	                       "FUSEJIT_LIBDEVICE (the option libdevice) at libdevice.10.bc (nvvm/libdevice/ in the "
	                       "CUDA toolkit), or opt into approximate math with FUSEJIT_NVPTX_MATH=approx (the "
	                       "option nvptx_math; f64 is then computed through f32)",
	                       kernel, math, dt, why);
}

/* Links the libdevice functions the module declares, then internalizes them. */
static fj_status link_libdevice(fj_nvptx_comp *c)
{
	LLVMValueRef any = NULL;
	for (LLVMValueRef f = LLVMGetFirstFunction(c->mod); f && !any; f = LLVMGetNextFunction(f)) {
		size_t len;
		const char *name = LLVMGetValueName2(f, &len);
		if (LLVMIsDeclaration(f) && len > 5 && strncmp(name, "__nv_", 5) == 0)
			any = f;
	}
	if (!any)
		return FJ_OK;
	if (!c->libdevice)
		return no_libdevice(c, any);
	fj_nvptx_state *s = c->state; /* libdevice was loaded by fj_nvptx_comp_begin */
	LLVMMemoryBufferRef mb =
		LLVMCreateMemoryBufferWithMemoryRange(s->libdevice, s->libdevice_len, "libdevice", 0);
	LLVMModuleRef lib = NULL;
	if (LLVMGetBitcodeModuleInContext2(c->llctx, mb, &lib)) /* takes mb */
		return fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: cannot read libdevice (%s)",
		                       fj_nvptx_libdevice_path(c->ctx) ? fj_nvptx_libdevice_path(c->ctx) : "?");
	LLVMSetTarget(lib, TRIPLE);
	LLVMSetDataLayout(lib, LLVMGetDataLayoutStr(c->mod));
	for (LLVMValueRef f = LLVMGetFirstFunction(lib); f; f = LLVMGetNextFunction(f))
		if (!LLVMIsDeclaration(f))
			LLVMSetLinkage(f, LLVMLinkOnceODRLinkage);
	for (LLVMValueRef gv = LLVMGetFirstGlobal(lib); gv; gv = LLVMGetNextGlobal(gv))
		if (!LLVMIsDeclaration(gv))
			LLVMSetLinkage(gv, LLVMLinkOnceODRLinkage);
	if (LLVMLinkModules2(c->mod, lib)) /* destroys lib */
		return fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: linking libdevice failed%s%s",
		                       c->nerrors ? ": " : "", c->first_error);
	for (LLVMValueRef f = LLVMGetFirstFunction(c->mod); f; f = LLVMGetNextFunction(f)) {
		if (LLVMIsDeclaration(f) || LLVMGetFunctionCallConv(f) == LLVMPTXKernelCallConv)
			continue;
		LLVMSetLinkage(f, LLVMInternalLinkage);
	}
	for (LLVMValueRef gv = LLVMGetFirstGlobal(c->mod); gv; gv = LLVMGetNextGlobal(gv))
		if (!LLVMIsDeclaration(gv) && LLVMGetLinkage(gv) == LLVMLinkOnceODRLinkage)
			LLVMSetLinkage(gv, LLVMInternalLinkage);
	return FJ_OK;
}

/* Appends c->sym_suffix to the names of the module's symbols that are not
 * kernels, declarations or LLVM's own (llvm.*): libdevice helpers kept as
 * .func, its tables (__cudart_i2opi_f ...), shared-memory arrays. Names
 * already ending with the suffix are kept, so that it can run again after
 * O3 for the symbols O3 created. Unnamed globals get a name (the printer
 * would call them __unnamed_<n> in every module). */
static void suffix_locals(fj_nvptx_comp *c)
{
	size_t sl = strlen(c->sym_suffix);
	if (!sl)
		return;
	char buf[512];
	for (int pass = 0; pass < 2; pass++) {
		LLVMValueRef v = pass ? LLVMGetFirstGlobal(c->mod) : LLVMGetFirstFunction(c->mod);
		for (; v; v = pass ? LLVMGetNextGlobal(v) : LLVMGetNextFunction(v)) {
			if (LLVMIsDeclaration(v) || LLVMGetLinkage(v) == LLVMAppendingLinkage)
				continue;
			if (!pass && LLVMGetFunctionCallConv(v) == LLVMPTXKernelCallConv)
				continue;
			size_t len;
			const char *name = LLVMGetValueName2(v, &len);
			if (len >= 5 && strncmp(name, "llvm.", 5) == 0)
				continue;
			if (len >= sl && memcmp(name + len - sl, c->sym_suffix, sl) == 0)
				continue;
			int n = snprintf(buf, sizeof buf, "%.*s%s", (int)(len < 400 ? len : 400), len ? name : "fj_anon",
			                 c->sym_suffix);
			LLVMSetValueName2(v, buf, (size_t)n);
		}
	}
}

fj_status fj_nvptx_comp_optimise(fj_nvptx_comp *c)
{
	char *msg = NULL;
	if (LLVMVerifyModule(c->mod, LLVMReturnStatusAction, &msg)) {
		fj_status st = fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0},
		                               "nvptx: invalid LLVM IR generated: %s", msg ? msg : "?");
		LLVMDisposeMessage(msg);
		return st;
	}
	LLVMDisposeMessage(msg);
	fj_status st = link_libdevice(c);
	if (st != FJ_OK)
		return st;
	suffix_locals(c);
	LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
	LLVMErrorRef e = LLVMRunPasses(c->mod, "default<O3>", c->tm, opts);
	LLVMDisposePassBuilderOptions(opts);
	if (e)
		return llvm_err(c->ctx, e, "running default<O3>");
	suffix_locals(c);
	if (c->nerrors)
		return fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: LLVM: %s", c->first_error);
	return FJ_OK;
}

/* NVPTX numbers call sequences with a process-wide counter (the comments
 * "{ // callseq N, 0" / "} // callseq N", and the prototype_N names of
 * indirect calls), so the text would depend on what was compiled before and
 * on other threads compiling at the same time. Appends p to out with those
 * numbers renumbered per module, 0, 1, ... in order of first appearance. */
static void put_renumbered(fj_buf *out, const char *p, size_t n)
{
	static const char *const pre[] = {"callseq ", "prototype_"};
	unsigned long *seen = NULL;
	size_t nseen = 0, cap = 0, last = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 'c' && p[i] != 'p')
			continue;
		bool proto = p[i] == 'p';
		const char *w = pre[proto];
		size_t wl = strlen(w), j = i + wl;
		if (j >= n || memcmp(p + i, w, wl) != 0 || p[j] < '0' || p[j] > '9')
			continue;
		/* "// callseq N"; prototype_N as a whole name followed by " :" or ";" */
		if (!proto ? i < 3 || memcmp(p + i - 3, "// ", 3) != 0
		           : i > 0 && (p[i - 1] == '_' || p[i - 1] == '$' || (p[i - 1] >= '0' && p[i - 1] <= '9') ||
		                       ((p[i - 1] | 32) >= 'a' && (p[i - 1] | 32) <= 'z')))
			continue;
		unsigned long num = 0;
		while (j < n && p[j] >= '0' && p[j] <= '9' && num < 100000000ul)
			num = num * 10 + (unsigned long)(p[j++] - '0');
		if (proto && (j >= n || (p[j] != ' ' && p[j] != ';')))
			continue;
		size_t k = 0;
		while (k < nseen && seen[k] != num)
			k++;
		if (k == nseen) {
			if (nseen == cap) {
				size_t nc = cap ? cap * 2 : 64;
				unsigned long *ns = realloc(seen, nc * sizeof *ns);
				if (!ns)
					break; /* the rest as it is */
				seen = ns;
				cap = nc;
			}
			seen[nseen++] = num;
		}
		fj_buf_putn(out, p + last, i + wl - last);
		fj_buf_printf(out, "%zu", k);
		last = j;
		i = j - 1;
	}
	fj_buf_putn(out, p + last, n - last);
	free(seen);
}

/* Kernel `name` (len bytes) of mod, or NULL. */
static LLVMValueRef kernel_named(LLVMModuleRef mod, const char *name, size_t len)
{
	char fname[256];
	if (len >= sizeof fname)
		return NULL;
	memcpy(fname, name, len);
	fname[len] = 0;
	return LLVMGetNamedFunction(mod, fname);
}

/* The alignment LLVM knows for parameter i of f (0: none, or not a pointer). */
static unsigned param_align(LLVMValueRef f, unsigned i)
{
	if (!f || i >= LLVMCountParams(f) || LLVMGetTypeKind(LLVMTypeOf(LLVMGetParam(f, i))) != LLVMPointerTypeKind)
		return 0;
	unsigned kind = LLVMGetEnumAttributeKindForName("align", 5);
	LLVMAttributeRef at = LLVMGetEnumAttributeAtIndex(f, i + 1, kind);
	return at ? (unsigned)LLVMGetEnumAttributeValue(at) : 0;
}

/* LLVM declares a kernel's pointer parameters as plain .u64 for the CUDA
 * driver interface. Each one becomes `.param .u64 .ptr .global .align N`
 * (PTX ISA, kernel parameter attributes) with the alignment the code
 * assumes, so that a driver, or a reader, can check the arguments against
 * it. Writes the rewritten text of p to out. */
static void put_param_attrs(fj_buf *out, LLVMModuleRef mod, const char *p, size_t n)
{
	static const char entry[] = ".entry ", param[] = "\t.param .u64 ";
	const char *name = NULL;
	size_t namelen = 0, i = 0;
	LLVMValueRef f = NULL; /* the entry whose parameter list this is */
	while (i < n) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t e = nl ? (size_t)(nl - p) + 1 : n, len = e - i;
		const char *q = p + i, *ent = len > sizeof entry ? memmem(q, len, entry, sizeof entry - 1) : NULL;
		if (ent) {
			name = ent + sizeof entry - 1;
			namelen = strcspn(name, "(\n");
			f = kernel_named(mod, name, namelen);
		}
		const char *u = len > sizeof param && memcmp(q, param, sizeof param - 1) == 0 ? q + sizeof param - 1 : NULL;
		const char *pi = u && name ? memmem(u, len - (size_t)(u - q), "_param_", 7) : NULL;
		unsigned al = 0;
		if (pi && (size_t)(pi - u) == namelen && memcmp(u, name, namelen) == 0)
			al = param_align(f, (unsigned)strtoul(pi + 7, NULL, 10));
		if (al) {
			fj_buf_putn(out, q, sizeof param - 1);
			fj_buf_printf(out, ".ptr .global .align %u ", al);
			fj_buf_putn(out, u, e - (size_t)(u - p));
		} else {
			fj_buf_putn(out, q, len);
		}
		if (len && q[0] == ')') {
			name = NULL;
			f = NULL;
		}
		i = e;
	}
}

fj_status fj_nvptx_comp_ptx(fj_nvptx_comp *c, fj_buf *out)
{
	LLVMMemoryBufferRef mb = NULL;
	char *err = NULL;
	unsigned before = c->nerrors;
	if (LLVMTargetMachineEmitToMemoryBuffer(c->tm, c->mod, LLVMAssemblyFile, &err, &mb)) {
		fj_status st = fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: PTX emission failed: %s",
		                               err ? err : "?");
		LLVMDisposeMessage(err);
		return st;
	}
	LLVMDisposeMessage(err);
	if (c->nerrors != before) {
		LLVMDisposeMemoryBuffer(mb);
		return fj_error_status(c->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: PTX emission failed: %s",
		                       c->first_error);
	}
	fj_buf ptx;
	fj_buf_init(&ptx, c->ctx);
	put_param_attrs(&ptx, c->mod, LLVMGetBufferStart(mb), LLVMGetBufferSize(mb));
	LLVMDisposeMemoryBuffer(mb);
	if (ptx.oom) {
		fj_buf_free(&ptx);
		return fj_error_status(c->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	put_renumbered(out, ptx.data, ptx.len);
	fj_buf_free(&ptx);
	return out->oom ? FJ_ERR_NOMEM : FJ_OK;
}

fj_status fj_nvptx_comp_llvm(fj_nvptx_comp *c, fj_buf *out)
{
	char *s = LLVMPrintModuleToString(c->mod);
	fj_buf_puts(out, s);
	LLVMDisposeMessage(s);
	return out->oom ? FJ_ERR_NOMEM : FJ_OK;
}

/* ---- intrinsics ---- */

static LLVMValueRef call_intrin(fj_cg *cg, const char *name, LLVMTypeRef ret, LLVMValueRef *args,
                                unsigned nargs)
{
	LLVMTypeRef ps[4];
	for (unsigned i = 0; i < nargs; i++)
		ps[i] = LLVMTypeOf(args[i]);
	LLVMTypeRef fty = LLVMFunctionType(ret, ps, nargs, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	if (!f)
		f = LLVMAddFunction(cg->mod, name, fty);
	return LLVMBuildCall2(cg->b, fty, f, args, nargs, "");
}

LLVMValueRef fj_nvptx_sreg(fj_cg *cg, fj_nvptx_sreg_id r)
{
	static const char *const names[] = {
		[FJ_SREG_TID_X] = "llvm.nvvm.read.ptx.sreg.tid.x",
		[FJ_SREG_NTID_X] = "llvm.nvvm.read.ptx.sreg.ntid.x",
		[FJ_SREG_CTAID_X] = "llvm.nvvm.read.ptx.sreg.ctaid.x",
		[FJ_SREG_NCTAID_X] = "llvm.nvvm.read.ptx.sreg.nctaid.x",
	};
	return call_intrin(cg, names[r], cg->t_i32, NULL, 0);
}

void fj_nvptx_barrier(fj_cg *cg)
{
	call_intrin(cg, "llvm.nvvm.barrier0", cg->t_void, NULL, 0);
}

LLVMValueRef fj_nvptx_shfl_xor(fj_cg *cg, LLVMValueRef v, int lanemask)
{
	LLVMTypeRef ty = LLVMTypeOf(v);
	LLVMValueRef m1 = fj_cg_i32(cg, -1), off = fj_cg_i32(cg, lanemask), c31 = fj_cg_i32(cg, 31);
	if (ty == cg->t_f32 || ty == cg->t_i32) {
		LLVMValueRef a[4] = {m1, v, off, c31};
		return call_intrin(cg, ty == cg->t_f32 ? "llvm.nvvm.shfl.sync.bfly.f32" : "llvm.nvvm.shfl.sync.bfly.i32",
		                   ty, a, 4);
	}
	/* 64-bit (and other) values: as i64 split in two i32 halves */
	unsigned bits = LLVMGetTypeKind(ty) == LLVMIntegerTypeKind ? LLVMGetIntTypeWidth(ty) : 64;
	LLVMValueRef x = v;
	if (ty == cg->t_f64)
		x = LLVMBuildBitCast(cg->b, v, cg->t_i64, "");
	else if (ty == cg->t_i1 || bits < 32)
		x = LLVMBuildZExt(cg->b, v, cg->t_i32, "");
	if (LLVMTypeOf(x) == cg->t_i32) {
		LLVMValueRef a[4] = {m1, x, off, c31};
		LLVMValueRef r = call_intrin(cg, "llvm.nvvm.shfl.sync.bfly.i32", cg->t_i32, a, 4);
		return LLVMBuildTrunc(cg->b, r, ty, "");
	}
	LLVMValueRef lo = LLVMBuildTrunc(cg->b, x, cg->t_i32, "");
	LLVMValueRef hi = LLVMBuildTrunc(cg->b, LLVMBuildLShr(cg->b, x, LLVMConstInt(cg->t_i64, 32, 0), ""), cg->t_i32, "");
	LLVMValueRef a1[4] = {m1, lo, off, c31}, a2[4] = {m1, hi, off, c31};
	lo = call_intrin(cg, "llvm.nvvm.shfl.sync.bfly.i32", cg->t_i32, a1, 4);
	hi = call_intrin(cg, "llvm.nvvm.shfl.sync.bfly.i32", cg->t_i32, a2, 4);
	LLVMValueRef r = LLVMBuildOr(cg->b, LLVMBuildZExt(cg->b, lo, cg->t_i64, ""),
	                             LLVMBuildShl(cg->b, LLVMBuildZExt(cg->b, hi, cg->t_i64, ""),
	                                          LLVMConstInt(cg->t_i64, 32, 0), ""), "");
	return ty == cg->t_f64 ? LLVMBuildBitCast(cg->b, r, ty, "") : r;
}

LLVMValueRef fj_nvptx_shared(fj_cg *cg, LLVMTypeRef ty, unsigned n, const char *name)
{
	LLVMTypeRef aty = LLVMArrayType2(ty, n);
	LLVMValueRef gv = LLVMAddGlobalInAddressSpace(cg->mod, aty, name, 3);
	LLVMSetLinkage(gv, LLVMInternalLinkage);
	LLVMSetInitializer(gv, LLVMGetUndef(aty));
	LLVMSetAlignment(gv, 16);
	/* a generic pointer to it (NVPTX folds the cast into ld/st.shared) */
	return LLVMBuildAddrSpaceCast(cg->b, gv, cg->t_ptr, name);
}

/* ---- the math hook ---- */

static const char *const nv_names[FJ_MATH_COUNT][2] = {
	[FJ_MATH_EXP] = {"__nv_expf", "__nv_exp"}, [FJ_MATH_EXP2] = {"__nv_exp2f", "__nv_exp2"},
	[FJ_MATH_EXPM1] = {"__nv_expm1f", "__nv_expm1"}, [FJ_MATH_LOG] = {"__nv_logf", "__nv_log"},
	[FJ_MATH_LOG2] = {"__nv_log2f", "__nv_log2"}, [FJ_MATH_LOG10] = {"__nv_log10f", "__nv_log10"},
	[FJ_MATH_LOG1P] = {"__nv_log1pf", "__nv_log1p"}, [FJ_MATH_SIN] = {"__nv_sinf", "__nv_sin"},
	[FJ_MATH_COS] = {"__nv_cosf", "__nv_cos"}, [FJ_MATH_TAN] = {"__nv_tanf", "__nv_tan"},
	[FJ_MATH_TANH] = {"__nv_tanhf", "__nv_tanh"}, [FJ_MATH_SINH] = {"__nv_sinhf", "__nv_sinh"},
	[FJ_MATH_COSH] = {"__nv_coshf", "__nv_cosh"}, [FJ_MATH_ASIN] = {"__nv_asinf", "__nv_asin"},
	[FJ_MATH_ACOS] = {"__nv_acosf", "__nv_acos"}, [FJ_MATH_ATAN] = {"__nv_atanf", "__nv_atan"},
	[FJ_MATH_ASINH] = {"__nv_asinhf", "__nv_asinh"}, [FJ_MATH_ACOSH] = {"__nv_acoshf", "__nv_acosh"},
	[FJ_MATH_ATANH] = {"__nv_atanhf", "__nv_atanh"}, [FJ_MATH_ERF] = {"__nv_erff", "__nv_erf"},
	[FJ_MATH_ERFC] = {"__nv_erfcf", "__nv_erfc"}, [FJ_MATH_POW] = {"__nv_powf", "__nv_pow"},
	[FJ_MATH_ATAN2] = {"__nv_atan2f", "__nv_atan2"}, [FJ_MATH_FMOD] = {"__nv_fmodf", "__nv_fmod"},
};

static unsigned math_arity(fj_cg_math fn)
{
	return fn == FJ_MATH_POW || fn == FJ_MATH_ATAN2 || fn == FJ_MATH_FMOD ? 2 : 1;
}

static LLVMValueRef libdevice_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	bool dbl = ty == cg->t_f64;
	unsigned nargs = math_arity(fn);
	const char *name = nv_names[fn][dbl];
	LLVMTypeRef ps[2] = {ty, ty};
	LLVMTypeRef fty = LLVMFunctionType(ty, ps, nargs, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	if (!f)
		f = LLVMAddFunction(cg->mod, name, fty);
	return LLVMBuildCall2(cg->b, fty, f, args, nargs, "");
}

/* Fallback: composed from PTX approximations, in float. */
static LLVMValueRef fx(fj_cg *cg, const char *intrin, LLVMValueRef x)
{
	return call_intrin(cg, intrin, cg->t_f32, &x, 1);
}
static LLVMValueRef fc(fj_cg *cg, double v) { return LLVMConstReal(cg->t_f32, v); }
static LLVMValueRef fmul(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(cg->b, a, b, ""); }
static LLVMValueRef fadd(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(cg->b, a, b, ""); }
static LLVMValueRef fsub(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(cg->b, a, b, ""); }
static LLVMValueRef fdiv(fj_cg *cg, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(cg->b, a, b, ""); }
static LLVMValueRef fb_exp(fj_cg *cg, LLVMValueRef x)
{
	return fx(cg, "llvm.nvvm.ex2.approx.f", fmul(cg, x, fc(cg, 1.4426950408889634)));
}
static LLVMValueRef fb_log(fj_cg *cg, LLVMValueRef x)
{
	return fmul(cg, fx(cg, "llvm.nvvm.lg2.approx.f", x), fc(cg, 0.6931471805599453));
}
static LLVMValueRef fb_sqrt(fj_cg *cg, LLVMValueRef x) { return fx(cg, "llvm.sqrt.f32", x); }
static LLVMValueRef fb_atan(fj_cg *cg, LLVMValueRef x)
{
	/* atan(x) = sign * (pi/2 - atan(1/|x|)) for |x| > 1; minimax on [0,1] */
	LLVMValueRef ax = fx(cg, "llvm.fabs.f32", x);
	LLVMValueRef big = LLVMBuildFCmp(cg->b, LLVMRealOGT, ax, fc(cg, 1), "");
	LLVMValueRef t = LLVMBuildSelect(cg->b, big, fdiv(cg, fc(cg, 1), ax), ax, "");
	LLVMValueRef t2 = fmul(cg, t, t);
	static const double c[] = {-0.0040540580, 0.0218612288, -0.0559098861, 0.0964200441,
	                           -0.1390853351, 0.1994653599, -0.3332985605, 0.9999993329};
	LLVMValueRef p = fc(cg, c[0]);
	for (int i = 1; i < 8; i++)
		p = fadd(cg, fmul(cg, p, t2), fc(cg, c[i]));
	p = fmul(cg, p, t);
	p = LLVMBuildSelect(cg->b, big, fsub(cg, fc(cg, 1.5707963267948966), p), p, "");
	LLVMValueRef neg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fc(cg, 0), "");
	return LLVMBuildSelect(cg->b, neg, LLVMBuildFNeg(cg->b, p, ""), p, "");
}
static LLVMValueRef fb_erf(fj_cg *cg, LLVMValueRef x)
{
	/* Abramowitz-Stegun 7.1.26 refined: erf(x) = 1 - t*exp(-x^2 + poly(t)) */
	LLVMValueRef ax = fx(cg, "llvm.fabs.f32", x);
	LLVMValueRef t = fdiv(cg, fc(cg, 1), fadd(cg, fc(cg, 1), fmul(cg, fc(cg, 0.5), ax)));
	static const double c[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
	                           -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
	LLVMValueRef p = fc(cg, c[0]);
	for (int i = 1; i < 10; i++)
		p = fadd(cg, fmul(cg, p, t), fc(cg, c[i]));
	LLVMValueRef e = fmul(cg, t, fb_exp(cg, fadd(cg, LLVMBuildFNeg(cg->b, fmul(cg, ax, ax), ""), p)));
	LLVMValueRef r = fsub(cg, fc(cg, 1), e);
	LLVMValueRef neg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fc(cg, 0), "");
	return LLVMBuildSelect(cg->b, neg, LLVMBuildFNeg(cg->b, r, ""), r, "");
}

static LLVMValueRef fallback_f32(fj_cg *cg, fj_cg_math fn, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef one = fc(cg, 1);
	switch (fn) {
	case FJ_MATH_EXP: return fb_exp(cg, x);
	case FJ_MATH_EXP2: return fx(cg, "llvm.nvvm.ex2.approx.f", x);
	case FJ_MATH_EXPM1: return fsub(cg, fb_exp(cg, x), one);
	case FJ_MATH_LOG: return fb_log(cg, x);
	case FJ_MATH_LOG2: return fx(cg, "llvm.nvvm.lg2.approx.f", x);
	case FJ_MATH_LOG10: return fmul(cg, fx(cg, "llvm.nvvm.lg2.approx.f", x), fc(cg, 0.30102999566398120));
	case FJ_MATH_LOG1P: return fb_log(cg, fadd(cg, one, x));
	case FJ_MATH_SIN: return fx(cg, "llvm.nvvm.sin.approx.f", x);
	case FJ_MATH_COS: return fx(cg, "llvm.nvvm.cos.approx.f", x);
	case FJ_MATH_TAN:
		return fdiv(cg, fx(cg, "llvm.nvvm.sin.approx.f", x), fx(cg, "llvm.nvvm.cos.approx.f", x));
	case FJ_MATH_TANH: {
		/* 1 - 2/(exp(2x)+1): saturates correctly at +-inf */
		LLVMValueRef e = fb_exp(cg, fmul(cg, x, fc(cg, 2)));
		return fsub(cg, one, fdiv(cg, fc(cg, 2), fadd(cg, e, one)));
	}
	case FJ_MATH_SINH: case FJ_MATH_COSH: {
		LLVMValueRef e = fb_exp(cg, x), ie = fdiv(cg, one, e);
		LLVMValueRef r = fn == FJ_MATH_SINH ? fsub(cg, e, ie) : fadd(cg, e, ie);
		return fmul(cg, r, fc(cg, 0.5));
	}
	case FJ_MATH_ATAN: return fb_atan(cg, x);
	case FJ_MATH_ASIN: case FJ_MATH_ACOS: {
		/* asin(x) = atan(x / sqrt(1-x^2)); acos = pi/2 - asin */
		LLVMValueRef s = fb_sqrt(cg, fsub(cg, one, fmul(cg, x, x)));
		LLVMValueRef as = fb_atan(cg, fdiv(cg, x, s));
		return fn == FJ_MATH_ASIN ? as : fsub(cg, fc(cg, 1.5707963267948966), as);
	}
	case FJ_MATH_ASINH: return fb_log(cg, fadd(cg, x, fb_sqrt(cg, fadd(cg, fmul(cg, x, x), one))));
	case FJ_MATH_ACOSH: return fb_log(cg, fadd(cg, x, fb_sqrt(cg, fsub(cg, fmul(cg, x, x), one))));
	case FJ_MATH_ATANH:
		return fmul(cg, fc(cg, 0.5), fb_log(cg, fdiv(cg, fadd(cg, one, x), fsub(cg, one, x))));
	case FJ_MATH_ERF: return fb_erf(cg, x);
	case FJ_MATH_ERFC: return fsub(cg, one, fb_erf(cg, x));
	case FJ_MATH_POW: {
		/* exp2(y*log2|x|), with the sign of x for odd integer y; NaN for x<0, non-integer y */
		LLVMValueRef ax = fx(cg, "llvm.fabs.f32", x);
		LLVMValueRef r = fx(cg, "llvm.nvvm.ex2.approx.f", fmul(cg, y, fx(cg, "llvm.nvvm.lg2.approx.f", ax)));
		LLVMValueRef yi = fx(cg, "llvm.trunc.f32", y);
		LLVMValueRef isint = LLVMBuildFCmp(cg->b, LLVMRealOEQ, yi, y, "");
		LLVMValueRef half = fmul(cg, yi, fc(cg, 0.5));
		LLVMValueRef odd = LLVMBuildFCmp(cg->b, LLVMRealONE, fx(cg, "llvm.trunc.f32", half), half, "");
		LLVMValueRef neg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fc(cg, 0), "");
		LLVMValueRef negr = LLVMBuildSelect(cg->b, odd, LLVMBuildFNeg(cg->b, r, ""), r, "");
		negr = LLVMBuildSelect(cg->b, isint, negr, LLVMConstReal(cg->t_f32, 0.0 / 0.0), "");
		r = LLVMBuildSelect(cg->b, neg, negr, r, "");
		LLVMValueRef y0 = LLVMBuildFCmp(cg->b, LLVMRealOEQ, y, fc(cg, 0), "");
		return LLVMBuildSelect(cg->b, y0, one, r, "");
	}
	case FJ_MATH_ATAN2: {
		LLVMValueRef a = fb_atan(cg, fdiv(cg, x, y));
		LLVMValueRef pi = fc(cg, 3.14159265358979323846);
		LLVMValueRef yneg = LLVMBuildFCmp(cg->b, LLVMRealOLT, y, fc(cg, 0), "");
		LLVMValueRef xneg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fc(cg, 0), "");
		LLVMValueRef adj = LLVMBuildSelect(cg->b, xneg, fsub(cg, a, pi), fadd(cg, a, pi), "");
		return LLVMBuildSelect(cg->b, yneg, adj, a, "");
	}
	case FJ_MATH_FMOD: return LLVMBuildFRem(cg->b, x, y, "");
	default: return x;
	}
}

static LLVMValueRef fallback_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	bool dbl = ty == cg->t_f64;
	if (fn == FJ_MATH_FMOD)
		return LLVMBuildFRem(cg->b, args[0], args[1], "");
	LLVMValueRef x = dbl ? LLVMBuildFPTrunc(cg->b, args[0], cg->t_f32, "") : args[0];
	LLVMValueRef y = NULL;
	if (math_arity(fn) == 2)
		y = dbl ? LLVMBuildFPTrunc(cg->b, args[1], cg->t_f32, "") : args[1];
	LLVMValueRef r = fallback_f32(cg, fn, x, y);
	return dbl ? LLVMBuildFPExt(cg->b, r, cg->t_f64, "") : r;
}

/* ---- the GPU hooks of fj_cg_target ---- */

static LLVMValueRef hook_tid(fj_cg *cg, int axis)
{
	static const char *const n[] = {"llvm.nvvm.read.ptx.sreg.tid.x", "llvm.nvvm.read.ptx.sreg.tid.y",
	                                "llvm.nvvm.read.ptx.sreg.tid.z"};
	return call_intrin(cg, n[axis % 3], cg->t_i32, NULL, 0);
}
static LLVMValueRef hook_ctaid(fj_cg *cg, int axis)
{
	static const char *const n[] = {"llvm.nvvm.read.ptx.sreg.ctaid.x", "llvm.nvvm.read.ptx.sreg.ctaid.y",
	                                "llvm.nvvm.read.ptx.sreg.ctaid.z"};
	return call_intrin(cg, n[axis % 3], cg->t_i32, NULL, 0);
}
static LLVMValueRef hook_ntid(fj_cg *cg, int axis)
{
	static const char *const n[] = {"llvm.nvvm.read.ptx.sreg.ntid.x", "llvm.nvvm.read.ptx.sreg.ntid.y",
	                                "llvm.nvvm.read.ptx.sreg.ntid.z"};
	return call_intrin(cg, n[axis % 3], cg->t_i32, NULL, 0);
}
static LLVMValueRef hook_nctaid(fj_cg *cg, int axis)
{
	static const char *const n[] = {"llvm.nvvm.read.ptx.sreg.nctaid.x", "llvm.nvvm.read.ptx.sreg.nctaid.y",
	                                "llvm.nvvm.read.ptx.sreg.nctaid.z"};
	return call_intrin(cg, n[axis % 3], cg->t_i32, NULL, 0);
}
static LLVMValueRef hook_shared(fj_cg *cg, LLVMTypeRef elem, uint64_t n, const char *name)
{
	return fj_nvptx_shared(cg, elem, (unsigned)n, name);
}

/* mma.sync m16n8k16 through the NVVM intrinsic (sm_80+): f16 operands are
 * <2 x half> registers and the intrinsic is named by its accumulator types
 * (.f32.f32); bf16 operands are i32 registers, named by the input type. */
static void hook_mma(fj_cg *cg, bool bf16, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef c[4],
                     LLVMValueRef d[4])
{
	LLVMTypeRef h2 = LLVMVectorType(LLVMHalfTypeInContext(cg->llctx), 2);
	LLVMTypeRef opty = bf16 ? cg->t_i32 : h2;
	LLVMTypeRef ps[10], f4[4] = {cg->t_f32, cg->t_f32, cg->t_f32, cg->t_f32};
	LLVMValueRef args[10];
	for (int i = 0; i < 6; i++) {
		LLVMValueRef x = i < 4 ? a[i] : b[i - 4];
		ps[i] = opty;
		args[i] = bf16 ? x : LLVMBuildBitCast(cg->b, x, h2, "");
	}
	for (int i = 0; i < 4; i++) {
		ps[6 + i] = cg->t_f32;
		args[6 + i] = c[i];
	}
	const char *name = bf16 ? "llvm.nvvm.mma.m16n8k16.row.col.bf16" : "llvm.nvvm.mma.m16n8k16.row.col.f32.f32";
	LLVMTypeRef ret = LLVMStructTypeInContext(cg->llctx, f4, 4, 0);
	LLVMTypeRef fty = LLVMFunctionType(ret, ps, 10, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	if (!f)
		f = LLVMAddFunction(cg->mod, name, fty);
	LLVMValueRef r = LLVMBuildCall2(cg->b, fty, f, args, 10, "mma");
	for (unsigned i = 0; i < 4; i++)
		d[i] = LLVMBuildExtractValue(cg->b, r, i, "");
}

#define GPU_HOOKS                                                                                       \
	.thread_idx = hook_tid, .block_idx = hook_ctaid, .block_dim = hook_ntid, .grid_dim = hook_nctaid, \
	.barrier = fj_nvptx_barrier, .shuffle_xor = fj_nvptx_shfl_xor, .shared_array = hook_shared,       \
	.mma_m16n8k16 = hook_mma, .warp_size = 32, .vector_bits = 128

static const fj_cg_target target_libdevice = {
	.name = "nvptx", .math = libdevice_math, .region_math = libdevice_math, GPU_HOOKS};
static const fj_cg_target target_fallback = {
	.name = "nvptx", .math = fallback_math, .region_math = fallback_math, GPU_HOOKS};

const fj_cg_target *fj_nvptx_cg_target(const fj_nvptx_comp *c)
{
	return c->approx ? &target_fallback : &target_libdevice;
}

const char *fj_nvptx_math_mode(fj_context *ctx)
{
	return fj_context_settings(ctx)->nvptx_math == FJ_NVPTX_MATH_APPROX ? "approx" : "libdevice";
}
