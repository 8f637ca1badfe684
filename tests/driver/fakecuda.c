/* fakecuda.c -- libfjcuda.so, a stand-in libcuda.so.1 for tests (tests/driver,
 * docs/TESTING.md). Loaded through FUSEJIT_LIBCUDA, it implements the driver
 * calls fusejit makes (by their versioned names: cuMemAlloc_v2 ...) and
 * enforces the driver's documented contract, so that fusejit's CUDA path
 * (backend_nvptx/cuda.c, device.c, runtime/program_nvptx.c) runs in CI on
 * machines with no GPU. It links nothing of fusejit or LLVM.
 *
 * Set-up: cuInit first (else CUDA_ERROR_NOT_INITIALIZED); a thread-local
 * context stack (calls that need a context return CUDA_ERROR_INVALID_CONTEXT
 * without one); one device, "fjcuda stand-in", sm_90 with 132 SMs, 64 K
 * registers and 228 KiB of shared memory per SM, 48 KiB per block by default
 * and 227 KiB with the opt-in attribute.
 *
 * Memory: device memory is host memory (aligned to 256), between two guard
 * regions of canary bytes, checked at every synchronisation, at free and at
 * exit (an overwritten guard is CUDA_ERROR_ILLEGAL_ADDRESS at the next
 * synchronisation). New memory holds 0xff bytes (NaN as floats): reads of
 * memory never written show. Double frees and frees of unknown pointers are
 * CUDA_ERROR_INVALID_VALUE; allocations still live when their context is
 * destroyed (cuDevicePrimaryCtxRelease_v2 to zero, cuCtxDestroy_v2) are
 * leaks, printed and counted (fjcuda_leaks).
 *
 * Modules: the PTX text is parsed for .version, .target, each .entry's
 * parameters (size; .ptr with its .align) and .maxntid/.reqntid; registers
 * and static shared memory per entry come from `ptxas -v` (FJCUDA_PTXAS: a
 * path, or 0 for none; default /usr/local/cuda/bin/ptxas where it exists),
 * run once per PTX text per process. Unparsable PTX or a ptxas error is
 * CUDA_ERROR_INVALID_PTX with the JIT error log filled (options 5 and 6).
 *
 * Launches: grid and block limits, .maxntid/.reqntid, registers x threads
 * (per warp, in units of 256 registers) at most 65536
 * (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), shared memory over 48 KiB only with
 * the opt-in (cuFuncSetAttribute 8), at most 227 KiB. Exactly the entry's
 * parameter count is read from kernelParams. A .ptr argument must be 0 or
 * lie inside a live allocation and be a multiple of its .align: a violation
 * is not returned by cuLaunchKernel but at the next synchronisation
 * (CUDA_ERROR_ILLEGAL_ADDRESS / CUDA_ERROR_MISALIGNED_ADDRESS), sticky as
 * on hardware: every later call in that context returns it. fjcuda_last_fault
 * describes it (the entry, the parameter, the pointer).
 *
 * Streams: work is deferred. Each stream is a FIFO of operations (copies
 * with the host data captured at call time, memsets, launches, event
 * records, waits), executed only when something synchronises
 * (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, synchronous
 * copies, cuMemFree_v2) or depends on them (cuStreamWaitEvent runs the
 * other stream up to the event when reached). The legacy stream (0,
 * CU_STREAM_LEGACY) orders against blocking streams, never against
 * CU_STREAM_NON_BLOCKING ones. cuMemcpyHtoD_v2 synchronises the legacy
 * stream, captures the data and leaves the copy queued on the legacy stream
 * (the DMA "may not have completed" on return); cuMemcpyDtoH_v2 runs the
 * legacy stream up to its copy; cuMemcpyDtoHAsync_v2 (pageable memory)
 * returns once its copy completed.
 *
 * Execution: a PTX interpreter is out of scope. Kernels run through
 * functions their user binds to the entries (fjcuda_bind_entry,
 * backend_nvptx/fjcuda_hook.h; fusejit binds its host emulator); launching
 * an entry no one bound is CUDA_ERROR_NOT_SUPPORTED. Blocks run in the order
 * FJCUDA_ORDER names: forward, reverse (the default) or shuffle:SEED.
 *
 * One mutex serialises every call; bound kernels run under it. */
#include "tests/driver/fakecuda.h"

/* ---- global state (one process-wide driver, under fjc_lock) ---- */

pthread_mutex_t fjc_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_init;
static uint64_t g_seq;
fake_ctx *fjc_ctxs;
static fake_ctx *g_primary;
static alloc *g_allocs;
static event *g_events;
static uint64_t g_live_bytes;
static int g_leaks, g_bad_frees;
static unsigned g_launches;
static int g_order = FJCUDA_ORDER_REVERSE;
static unsigned g_seed;
char fjc_ptxas[1024];
static int g_last_fault;
static char g_fault_msg[512];

static _Thread_local fake_ctx *tl_stack[16];
static _Thread_local int tl_depth;

CUresult fjc_leave(CUresult r)
{
	pthread_mutex_unlock(&fjc_lock);
	return r;
}

void fjc_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("fjcuda: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool ctx_live(const fake_ctx *c)
{
	for (fake_ctx *x = fjc_ctxs; x; x = x->next)
		if (x == c)
			return x->alive;
	return false;
}

static fake_ctx *current(void) { return tl_depth ? tl_stack[tl_depth - 1] : NULL; }

/* The current context, or an error: not initialised, none current, or its
 * sticky error. */
CUresult fjc_need_ctx(fake_ctx **out)
{
	*out = NULL;
	if (!g_init)
		return E_NOT_INITIALIZED;
	fake_ctx *c = current();
	if (!c || !ctx_live(c))
		return E_INVALID_CONTEXT;
	*out = c;
	return c->sticky;
}

static void set_fault(fake_ctx *c, int code, const char *msg)
{
	if (c->sticky)
		return;
	c->sticky = code;
	g_last_fault = code;
	snprintf(g_fault_msg, sizeof g_fault_msg, "%s", msg);
	fjc_note("%s", msg);
}

/* ---- memory ---- */

static alloc *find_alloc(uint64_t p, size_t n)
{
	for (alloc *a = g_allocs; a; a = a->next)
		if (p >= a->p && p < a->p + a->size && n <= a->p + a->size - p)
			return a;
	return NULL;
}

/* The first corrupted guard byte's offset from the user pointer, or 0 when intact. */
static long guard_damage(const alloc *a)
{
	for (size_t i = 0; i < GUARD; i++)
		if (a->base[i] != GUARD_BYTE)
			return (long)i - GUARD;
	for (size_t i = GUARD + a->size; i < a->span; i++)
		if (a->base[i] != GUARD_BYTE)
			return (long)(i - GUARD);
	return 0;
}

static void check_guards(fake_ctx *c)
{
	for (alloc *a = g_allocs; a; a = a->next) {
		long off;
		if (a->reported || (off = guard_damage(a)) == 0)
			continue;
		a->reported = true;
		char msg[384];
		snprintf(msg, sizeof msg,
		         "CUDA_ERROR_ILLEGAL_ADDRESS (700): the guard of allocation 0x%llx (%zu bytes) was overwritten at "
		         "offset %ld",
		         (unsigned long long)a->p, a->size, off);
		set_fault(a->ctx ? a->ctx : c, E_ILLEGAL_ADDRESS, msg);
	}
}

static void free_alloc(alloc *a)
{
	alloc **pp = &g_allocs;
	while (*pp != a)
		pp = &(*pp)->next;
	*pp = a->next;
	g_live_bytes -= a->size;
	free(a->base);
	free(a);
}

/* ---- streams and their operations ---- */

static void exec_op(fake_ctx *c, op *o);

static void free_op(op *o)
{
	if (o->kind == OP_HTOD)
		free(o->host);
	if (o->kind == OP_RECORD && --o->ev->refs == 0 && o->ev->dead)
		free(o->ev);
	free(o->args);
	free(o);
}

/* Runs stream s's operations up to sequence number limit, each after what
 * it depends on: a legacy-stream operation after the earlier work of every
 * blocking stream, a blocking stream's after the legacy stream's earlier
 * work, a wait after the recorded stream's work up to the event. Limits
 * strictly decrease along the recursion, so it ends. */
static void run_until(stream *s, uint64_t limit)
{
	fake_ctx *c = s->ctx;
	while (s->head && s->head->seq <= limit) {
		op *o = s->head;
		if (s->legacy) {
			for (stream *b = c->streams; b; b = b->next)
				if (!(b->flags & 1))
					run_until(b, o->seq - 1);
		} else if (!(s->flags & 1)) {
			run_until(&c->legacy, o->seq - 1);
		}
		if (o->kind == OP_WAIT && o->ws)
			run_until(o->ws, o->wseq);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		exec_op(c, o);
		free_op(o);
	}
}

void fjc_run_all(fake_ctx *c)
{
	run_until(&c->legacy, g_seq);
	for (stream *b = c->streams; b; b = b->next)
		run_until(b, g_seq);
}

static op *new_op(int kind)
{
	op *o = calloc(1, sizeof *o);
	if (o) {
		o->kind = kind;
		o->seq = ++g_seq;
	}
	return o;
}

static void push(stream *s, op *o)
{
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
}

/* The stream a handle names in context c (0 and CU_STREAM_LEGACY: the
 * legacy stream), or NULL. */
static stream *get_stream(fake_ctx *c, void *h)
{
	if (h == NULL || h == (void *)1)
		return &c->legacy;
	for (stream *s = c->streams; s; s = s->next)
		if (s == h)
			return s;
	return NULL;
}

static void exec_launch(fake_ctx *c, op *o)
{
	if (o->fault) {
		char msg[480];
		snprintf(msg, sizeof msg, "%s (%d): %s", o->fault == E_MISALIGNED_ADDRESS ? "CUDA_ERROR_MISALIGNED_ADDRESS"
		                                                                          : "CUDA_ERROR_ILLEGAL_ADDRESS",
		         o->fault, o->fault_msg);
		set_fault(c, o->fault, msg);
		return;
	}
	entry *f = o->f;
	g_launches++;
	unsigned seed = g_seed ^ (g_launches * 0x9e3779b9u);
	int r = f->run(f->ud, f->variant, o->grid, o->block, o->shared, o->args, (unsigned)f->nparams, g_order, seed);
	if (r != 0) {
		char msg[384];
		snprintf(msg, sizeof msg, "CUDA_ERROR_LAUNCH_FAILED (719): kernel '%s' failed (its run function returned %d)",
		         f->name, r);
		set_fault(c, E_LAUNCH_FAILED, msg);
	}
}

static void exec_op(fake_ctx *c, op *o)
{
	if (c->sticky)
		return; /* a faulted context runs nothing more */
	switch (o->kind) {
	case OP_HTOD:
		memcpy((void *)(uintptr_t)o->dst, o->host, o->n);
		break;
	case OP_DTOH:
		memcpy(o->host, (const void *)(uintptr_t)o->src, o->n);
		break;
	case OP_DTOD:
		memmove((void *)(uintptr_t)o->dst, (const void *)(uintptr_t)o->src, o->n);
		break;
	case OP_MEMSET:
		memset((void *)(uintptr_t)o->dst, o->val, o->n);
		break;
	case OP_LAUNCH:
		exec_launch(c, o);
		break;
	case OP_RECORD:
		if (o->ev->gen == o->gen && !o->ev->dead) {
			o->ev->state = 2;
			o->ev->t_ms = now_ms();
		}
		break;
	case OP_WAIT:
		break;
	}
}

/* After work ran: guards checked, the context's sticky error returned. */
static CUresult synced(fake_ctx *c)
{
	check_guards(c);
	return c->sticky;
}

/* ---- contexts ---- */

static fake_ctx *ctx_new(bool primary)
{
	fake_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->primary = primary;
	c->alive = true;
	c->legacy.ctx = c;
	c->legacy.legacy = true;
	c->next = fjc_ctxs;
	fjc_ctxs = c;
	return c;
}

void fjc_free_module(module *m)
{
	free(m->e);
	free(m);
}

/* Destroys what context c holds: its work runs, live allocations are leaks
 * (printed, and counted unless c faulted), modules, streams and events go. */
static void ctx_teardown(fake_ctx *c, const char *why)
{
	fjc_run_all(c);
	check_guards(c);
	int leaks = 0;
	size_t bytes = 0;
	for (alloc *a = g_allocs, *nx; a; a = nx) {
		nx = a->next;
		if (a->ctx != c)
			continue;
		leaks++;
		bytes += a->size;
		free_alloc(a);
	}
	if (leaks) {
		fjc_note("%s: %d allocation%s (%zu bytes) never freed%s", why, leaks, leaks == 1 ? "" : "s", bytes,
		     c->sticky ? " (the context had faulted: not counted as leaks)" : "");
		if (!c->sticky)
			g_leaks += leaks;
	}
	while (c->mods) {
		module *m = c->mods;
		c->mods = m->next;
		fjc_free_module(m);
	}
	while (c->streams) {
		stream *s = c->streams;
		c->streams = s->next;
		free(s);
	}
	for (event **pp = &g_events; *pp;) {
		event *e = *pp;
		if (e->ctx == c) {
			*pp = e->next;
			free(e);
		} else {
			pp = &e->next;
		}
	}
	c->alive = false;
	c->sticky = 0;
	/* unbinds it from this thread (other threads' stacks see it dead) */
	for (int i = 0; i < tl_depth; i++)
		if (tl_stack[i] == c)
			tl_stack[i] = NULL;
}

/* ---- the API: initialisation, device ---- */

static void read_env(void)
{
	const char *o = getenv("FJCUDA_ORDER");
	if (o && strcmp(o, "forward") == 0)
		g_order = FJCUDA_ORDER_FORWARD;
	else if (o && strncmp(o, "shuffle:", 8) == 0) {
		g_order = FJCUDA_ORDER_SHUFFLE;
		g_seed = (unsigned)strtoul(o + 8, NULL, 10);
	} else if (o && *o && strcmp(o, "reverse") != 0)
		fjc_note("FJCUDA_ORDER=%s: expected forward, reverse or shuffle:SEED; running in reverse", o);
	const char *p = getenv("FJCUDA_PTXAS");
	const char *dflt = "/usr/local/cuda/bin/ptxas";
	if (p && strcmp(p, "0") == 0)
		fjc_ptxas[0] = 0;
	else if (p && *p)
		snprintf(fjc_ptxas, sizeof fjc_ptxas, "%s", p);
	else if (access(dflt, X_OK) == 0)
		snprintf(fjc_ptxas, sizeof fjc_ptxas, "%s", dflt);
}

API CUresult cuInit(unsigned flags)
{
	if (flags != 0)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&fjc_lock);
	if (!g_init)
		read_env();
	g_init = true;
	return fjc_leave(OK);
}

API CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return E_INVALID_VALUE;
	*v = 13000;
	return OK;
}

API CUresult cuDeviceGetCount(int *n)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (!n)
		return E_INVALID_VALUE;
	*n = 1;
	return OK;
}

API CUresult cuDeviceGet(int *d, int ordinal)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (!d)
		return E_INVALID_VALUE;
	if (ordinal != 0)
		return E_INVALID_DEVICE;
	*d = 0;
	return OK;
}

API CUresult cuDeviceGetName(char *name, int len, int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	if (!name || len <= 0)
		return E_INVALID_VALUE;
	snprintf(name, (size_t)len, "fjcuda stand-in");
	return OK;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	if (!bytes)
		return E_INVALID_VALUE;
	*bytes = (size_t)TOTAL_MEM;
	return OK;
}

/* The attributes a caller may ask, by their CUdevice_attribute numbers. */
static const struct {
	int attr, value;
} dev_attrs[] = {
	{1, 1024},         /* MAX_THREADS_PER_BLOCK */
	{2, 1024},         /* MAX_BLOCK_DIM_X */
	{3, 1024},         /* MAX_BLOCK_DIM_Y */
	{4, 64},           /* MAX_BLOCK_DIM_Z */
	{5, 2147483647},   /* MAX_GRID_DIM_X */
	{6, 65535},        /* MAX_GRID_DIM_Y */
	{7, 65535},        /* MAX_GRID_DIM_Z */
	{8, SMEM_PER_BLOCK}, /* MAX_SHARED_MEMORY_PER_BLOCK */
	{9, 65536},        /* TOTAL_CONSTANT_MEMORY */
	{10, 32},          /* WARP_SIZE */
	{12, 65536},       /* MAX_REGISTERS_PER_BLOCK */
	{13, 1980000},     /* CLOCK_RATE (kHz) */
	{15, 1},           /* GPU_OVERLAP */
	{16, SM_COUNT},    /* MULTIPROCESSOR_COUNT */
	{17, 0},           /* KERNEL_EXEC_TIMEOUT */
	{18, 0},           /* INTEGRATED */
	{19, 1},           /* CAN_MAP_HOST_MEMORY */
	{20, 0},           /* COMPUTE_MODE: default */
	{31, 1},           /* CONCURRENT_KERNELS */
	{32, 1},           /* ECC_ENABLED */
	{36, 3201000},     /* MEMORY_CLOCK_RATE (kHz) */
	{37, 6144},        /* GLOBAL_MEMORY_BUS_WIDTH */
	{38, 60 << 20},    /* L2_CACHE_SIZE */
	{39, 2048},        /* MAX_THREADS_PER_MULTIPROCESSOR */
	{40, 3},           /* ASYNC_ENGINE_COUNT */
	{41, 1},           /* UNIFIED_ADDRESSING */
	{75, 9},           /* COMPUTE_CAPABILITY_MAJOR */
	{76, 0},           /* COMPUTE_CAPABILITY_MINOR */
	{81, SMEM_PER_SM}, /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
	{82, REGS_PER_SM}, /* MAX_REGISTERS_PER_MULTIPROCESSOR */
	{97, SMEM_PER_BLOCK_OPTIN}, /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
	{106, 32},         /* MAX_BLOCKS_PER_MULTIPROCESSOR */
	{111, 1024},       /* RESERVED_SHARED_MEMORY_PER_BLOCK */
};

API CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	if (!v)
		return E_INVALID_VALUE;
	for (size_t i = 0; i < sizeof dev_attrs / sizeof *dev_attrs; i++)
		if (dev_attrs[i].attr == attr) {
			*v = dev_attrs[i].value;
			return OK;
		}
	fjc_note("cuDeviceGetAttribute: attribute %d is not modelled by the stand-in", attr);
	return E_INVALID_VALUE;
}

/* ---- contexts ---- */

API CUresult cuDevicePrimaryCtxRetain(void **pctx, int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	if (!pctx)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&fjc_lock);
	if (!g_primary && !(g_primary = ctx_new(true)))
		return fjc_leave(E_OUT_OF_MEMORY);
	g_primary->alive = true;
	g_primary->refs++;
	*pctx = g_primary;
	return fjc_leave(OK);
}

API CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	pthread_mutex_lock(&fjc_lock);
	if (!g_primary || g_primary->refs <= 0)
		return fjc_leave(E_INVALID_CONTEXT);
	if (--g_primary->refs == 0)
		ctx_teardown(g_primary, "cuDevicePrimaryCtxRelease_v2: the primary context is destroyed");
	return fjc_leave(OK);
}

API CUresult cuCtxCreate_v2(void **pctx, unsigned flags, int dev)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (dev != 0)
		return E_INVALID_DEVICE;
	if (!pctx)
		return E_INVALID_VALUE;
	(void)flags;
	pthread_mutex_lock(&fjc_lock);
	fake_ctx *c = ctx_new(false);
	if (!c)
		return fjc_leave(E_OUT_OF_MEMORY);
	if (tl_depth == (int)(sizeof tl_stack / sizeof *tl_stack))
		return fjc_leave(E_INVALID_VALUE);
	tl_stack[tl_depth++] = c; /* made current (pushed), as the driver does */
	*pctx = c;
	return fjc_leave(OK);
}

API CUresult cuCtxDestroy_v2(void *h)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&fjc_lock);
	fake_ctx *c = h;
	if (!ctx_live(c) || c->primary)
		return fjc_leave(E_INVALID_CONTEXT);
	ctx_teardown(c, "cuCtxDestroy_v2");
	if (tl_depth && tl_stack[tl_depth - 1] == NULL)
		tl_depth--; /* it was current: popped */
	return fjc_leave(OK);
}

API CUresult cuCtxSetCurrent(void *h)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&fjc_lock);
	if (h && !ctx_live(h))
		return fjc_leave(E_INVALID_CONTEXT);
	if (!h) {
		if (tl_depth)
			tl_depth--;
	} else if (tl_depth) {
		tl_stack[tl_depth - 1] = h;
	} else {
		tl_stack[tl_depth++] = h;
	}
	return fjc_leave(OK);
}

API CUresult cuCtxGetCurrent(void **pctx)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (!pctx)
		return E_INVALID_VALUE;
	*pctx = current();
	return OK;
}

API CUresult cuCtxPushCurrent_v2(void *h)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	pthread_mutex_lock(&fjc_lock);
	if (!ctx_live(h))
		return fjc_leave(E_INVALID_CONTEXT);
	if (tl_depth == (int)(sizeof tl_stack / sizeof *tl_stack))
		return fjc_leave(E_INVALID_VALUE);
	tl_stack[tl_depth++] = h;
	return fjc_leave(OK);
}

API CUresult cuCtxPopCurrent_v2(void **pctx)
{
	if (!g_init)
		return E_NOT_INITIALIZED;
	if (!tl_depth)
		return E_INVALID_CONTEXT;
	fake_ctx *c = tl_stack[--tl_depth];
	if (pctx)
		*pctx = c;
	return OK;
}

API CUresult cuCtxGetDevice(int *dev)
{
	fake_ctx *c;
	pthread_mutex_lock(&fjc_lock);
	CUresult r = fjc_need_ctx(&c);
	if (c && dev)
		*dev = 0;
	return fjc_leave(c ? OK : r);
}

API CUresult cuCtxSynchronize(void)
{
	FJC_ENTER(c, r);
	fjc_run_all(c);
	return fjc_leave(synced(c));
}

/* ---- memory ---- */

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	FJC_ENTER(c, r);
	if (!dptr || size == 0)
		return fjc_leave(E_INVALID_VALUE);
	if (size > TOTAL_MEM - g_live_bytes)
		return fjc_leave(E_OUT_OF_MEMORY);
	size_t span = GUARD + ((size + 255) & ~(size_t)255) + GUARD;
	alloc *a = calloc(1, sizeof *a);
	unsigned char *base = a ? aligned_alloc(256, span) : NULL;
	if (!base) {
		free(a);
		return fjc_leave(E_OUT_OF_MEMORY);
	}
	memset(base, GUARD_BYTE, span);
	memset(base + GUARD, FILL_BYTE, size);
	*a = (alloc){.base = base, .p = (uint64_t)(uintptr_t)(base + GUARD), .size = size, .span = span, .ctx = c,
	             .next = g_allocs};
	g_allocs = a;
	g_live_bytes += size;
	*dptr = a->p;
	return fjc_leave(OK);
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	FJC_ENTER(c, r);
	fjc_run_all(c); /* cuMemFree synchronises */
	if ((r = synced(c)) != OK)
		return fjc_leave(r);
	alloc *a = NULL;
	for (alloc *x = g_allocs; x; x = x->next)
		if (x->p == p)
			a = x;
	if (!a) {
		g_bad_frees++;
		fjc_note("cuMemFree_v2(0x%llx): not a live allocation (freed twice, or never allocated)", (unsigned long long)p);
		return fjc_leave(E_INVALID_VALUE);
	}
	free_alloc(a);
	return fjc_leave(OK);
}

API CUresult cuMemGetInfo_v2(size_t *freeb, size_t *total)
{
	FJC_ENTER(c, r);
	if (!freeb || !total)
		return fjc_leave(E_INVALID_VALUE);
	*total = (size_t)TOTAL_MEM;
	*freeb = (size_t)(TOTAL_MEM - g_live_bytes);
	return fjc_leave(OK);
}

/* A copy's device range: inside one live allocation. */
static CUresult check_range(const char *call, uint64_t p, size_t n)
{
	if (find_alloc(p, n ? n : 1))
		return OK;
	fjc_note("%s: device range 0x%llx + %zu lies outside every live allocation", call, (unsigned long long)p, n);
	return E_INVALID_VALUE;
}

static CUresult queue_htod(stream *s, CUdeviceptr dst, const void *src, size_t n)
{
	op *o = new_op(OP_HTOD);
	void *copy = o ? malloc(n) : NULL;
	if (!copy) {
		free(o);
		return E_OUT_OF_MEMORY;
	}
	memcpy(copy, src, n); /* staged now: the caller may reuse src on return */
	o->dst = dst;
	o->host = copy;
	o->n = n;
	push(s, o);
	return OK;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	FJC_ENTER(c, r);
	if (!n)
		return fjc_leave(OK);
	if (!src || (r = check_range("cuMemcpyHtoD_v2", dst, n)) != OK)
		return fjc_leave(r ? r : E_INVALID_VALUE);
	/* pageable memory: a legacy-stream synchronisation, then the data is
	 * staged and the DMA stays queued on the legacy stream */
	uint64_t now = g_seq;
	run_until(&c->legacy, now);
	for (stream *b = c->streams; b; b = b->next)
		if (!(b->flags & 1))
			run_until(b, now);
	if ((r = synced(c)) != OK)
		return fjc_leave(r);
	return fjc_leave(queue_htod(&c->legacy, dst, src, n));
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *hs)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, hs);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	if (!n)
		return fjc_leave(OK);
	if (!src || (r = check_range("cuMemcpyHtoDAsync_v2", dst, n)) != OK)
		return fjc_leave(r ? r : E_INVALID_VALUE);
	return fjc_leave(queue_htod(s, dst, src, n));
}

/* A device-to-host copy queued on s; returns once it completed. */
static CUresult dtoh_on(fake_ctx *c, stream *s, void *dst, CUdeviceptr src, size_t n, const char *call)
{
	CUresult r;
	if (n && (!dst || (r = check_range(call, src, n)) != OK))
		return dst ? r : E_INVALID_VALUE;
	op *o = new_op(OP_DTOH);
	if (!o)
		return E_OUT_OF_MEMORY;
	o->host = dst;
	o->src = src;
	o->n = n;
	push(s, o);
	run_until(s, o->seq);
	return synced(c);
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	FJC_ENTER(c, r);
	return fjc_leave(dtoh_on(c, &c->legacy, dst, src, n, "cuMemcpyDtoH_v2"));
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *hs)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, hs);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	/* pageable destination: returns once the copy completed */
	return fjc_leave(dtoh_on(c, s, dst, src, n, "cuMemcpyDtoHAsync_v2"));
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hs)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, hs);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	if (!n)
		return fjc_leave(OK);
	if ((r = check_range("cuMemcpyDtoDAsync_v2", dst, n)) != OK ||
	    (r = check_range("cuMemcpyDtoDAsync_v2", src, n)) != OK)
		return fjc_leave(r);
	op *o = new_op(OP_DTOD);
	if (!o)
		return fjc_leave(E_OUT_OF_MEMORY);
	o->dst = dst;
	o->src = src;
	o->n = n;
	push(s, o);
	return fjc_leave(OK);
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *hs)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, hs);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	if (!n)
		return fjc_leave(OK);
	if ((r = check_range("cuMemsetD8Async", dst, n)) != OK)
		return fjc_leave(r);
	op *o = new_op(OP_MEMSET);
	if (!o)
		return fjc_leave(E_OUT_OF_MEMORY);
	o->dst = dst;
	o->val = v;
	o->n = n;
	push(s, o);
	return fjc_leave(OK);
}

/* ---- streams and events ---- */

API CUresult cuStreamCreate(void **ph, unsigned flags)
{
	FJC_ENTER(c, r);
	if (!ph || flags > 1)
		return fjc_leave(E_INVALID_VALUE);
	stream *s = calloc(1, sizeof *s);
	if (!s)
		return fjc_leave(E_OUT_OF_MEMORY);
	s->ctx = c;
	s->flags = flags;
	s->next = c->streams;
	c->streams = s;
	*ph = s;
	return fjc_leave(OK);
}

API CUresult cuStreamDestroy_v2(void *h)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, h);
	if (!s || s->legacy)
		return fjc_leave(E_INVALID_HANDLE);
	/* its work completes (the driver frees it once done); waits on it are met */
	run_until(s, g_seq);
	for (stream *o = c->streams; o; o = o->next)
		for (op *x = o->head; x; x = x->next)
			if (x->kind == OP_WAIT && x->ws == s)
				x->ws = NULL;
	for (op *x = c->legacy.head; x; x = x->next)
		if (x->kind == OP_WAIT && x->ws == s)
			x->ws = NULL;
	for (event *e = g_events; e; e = e->next)
		if (e->rec_stream == s)
			e->rec_stream = NULL;
	stream **pp = &c->streams;
	while (*pp != s)
		pp = &(*pp)->next;
	*pp = s->next;
	free(s);
	return fjc_leave(OK);
}

API CUresult cuStreamSynchronize(void *h)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, h);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	run_until(s, g_seq);
	return fjc_leave(synced(c));
}

API CUresult cuStreamQuery(void *h)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, h);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	/* pending work: not ready now, done by the next query (progress) */
	bool pending = s->head != NULL;
	run_until(s, g_seq);
	r = synced(c);
	return fjc_leave(r ? r : pending ? E_NOT_READY : OK);
}

static event *get_event(fake_ctx *c, void *h)
{
	for (event *e = g_events; e; e = e->next)
		if (e == h && !e->dead)
			return e->ctx == c ? e : NULL;
	return NULL;
}

API CUresult cuEventCreate(void **ph, unsigned flags)
{
	FJC_ENTER(c, r);
	if (!ph || (flags & ~7u))
		return fjc_leave(E_INVALID_VALUE);
	event *e = calloc(1, sizeof *e);
	if (!e)
		return fjc_leave(E_OUT_OF_MEMORY);
	e->ctx = c;
	e->flags = flags;
	e->next = g_events;
	g_events = e;
	*ph = e;
	return fjc_leave(OK);
}

API CUresult cuEventRecord(void *h, void *hs)
{
	FJC_ENTER(c, r);
	event *e = get_event(c, h);
	stream *s = get_stream(c, hs);
	if (!e || !s)
		return fjc_leave(E_INVALID_HANDLE);
	op *o = new_op(OP_RECORD);
	if (!o)
		return fjc_leave(E_OUT_OF_MEMORY);
	o->ev = e;
	o->gen = ++e->gen;
	e->refs++;
	e->state = 1;
	e->rec_stream = s;
	e->rec_seq = o->seq;
	push(s, o);
	return fjc_leave(OK);
}

API CUresult cuEventQuery(void *h)
{
	FJC_ENTER(c, r);
	event *e = get_event(c, h);
	if (!e)
		return fjc_leave(E_INVALID_HANDLE);
	bool pending = e->state == 1;
	if (pending && e->rec_stream)
		run_until(e->rec_stream, e->rec_seq); /* done by the next query */
	r = synced(c);
	return fjc_leave(r ? r : pending ? E_NOT_READY : OK);
}

API CUresult cuEventSynchronize(void *h)
{
	FJC_ENTER(c, r);
	event *e = get_event(c, h);
	if (!e)
		return fjc_leave(E_INVALID_HANDLE);
	if (e->state == 1 && e->rec_stream)
		run_until(e->rec_stream, e->rec_seq);
	return fjc_leave(synced(c));
}

API CUresult cuEventElapsedTime_v2(float *ms, void *h0, void *h1)
{
	FJC_ENTER(c, r);
	event *a = get_event(c, h0), *b = get_event(c, h1);
	if (!ms || !a || !b)
		return fjc_leave(!ms ? E_INVALID_VALUE : E_INVALID_HANDLE);
	if (a->state == 0 || b->state == 0 || (a->flags & 2) || (b->flags & 2))
		return fjc_leave(E_INVALID_HANDLE); /* never recorded, or CU_EVENT_DISABLE_TIMING */
	if (a->state != 2 || b->state != 2)
		return fjc_leave(E_NOT_READY);
	*ms = (float)(b->t_ms - a->t_ms);
	return fjc_leave(OK);
}

API CUresult cuEventElapsedTime(float *ms, void *h0, void *h1) { return cuEventElapsedTime_v2(ms, h0, h1); }

API CUresult cuEventDestroy_v2(void *h)
{
	FJC_ENTER(c, r);
	event *e = get_event(c, h);
	if (!e)
		return fjc_leave(E_INVALID_HANDLE);
	event **pp = &g_events;
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	e->dead = true;
	if (e->refs == 0)
		free(e); /* else freed by its last queued record */
	return fjc_leave(OK);
}

API CUresult cuStreamWaitEvent(void *hs, void *h, unsigned flags)
{
	FJC_ENTER(c, r);
	stream *s = get_stream(c, hs);
	event *e = get_event(c, h);
	if (!s || !e)
		return fjc_leave(E_INVALID_HANDLE);
	if (flags != 0)
		return fjc_leave(E_INVALID_VALUE);
	if (e->state != 1 || !e->rec_stream)
		return fjc_leave(OK); /* never recorded, or complete: nothing to wait for */
	op *o = new_op(OP_WAIT);
	if (!o)
		return fjc_leave(E_OUT_OF_MEMORY);
	o->ws = e->rec_stream;
	o->wseq = e->rec_seq;
	push(s, o);
	return fjc_leave(OK);
}

/* ---- launches ---- */

/* The launch's limits, checked now (returned by cuLaunchKernel). */
static CUresult check_launch(const entry *f, const unsigned g[3], const unsigned b[3], unsigned shared)
{
	if (!g[0] || !g[1] || !g[2] || g[0] > 2147483647u || g[1] > 65535 || g[2] > 65535)
		return E_INVALID_VALUE;
	uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
	if (!threads || b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > 1024)
		return E_INVALID_VALUE;
	if (f->has_max && threads > (uint64_t)f->maxntid[0] * f->maxntid[1] * f->maxntid[2]) {
		fjc_note("cuLaunchKernel: '%s': %llu threads per block, over its .maxntid %u", f->name,
		     (unsigned long long)threads, f->maxntid[0] * f->maxntid[1] * f->maxntid[2]);
		return E_INVALID_VALUE;
	}
	if (f->has_req && (b[0] != f->reqntid[0] || b[1] != f->reqntid[1] || b[2] != f->reqntid[2])) {
		fjc_note("cuLaunchKernel: '%s': block %ux%ux%u, not its .reqntid %ux%ux%u", f->name, b[0], b[1], b[2],
		     f->reqntid[0], f->reqntid[1], f->reqntid[2]);
		return E_INVALID_VALUE;
	}
	if (f->regs > 0) {
		uint64_t per_warp = ((uint64_t)f->regs * 32 + 255) / 256 * 256, warps = (threads + 31) / 32;
		if (per_warp * warps > REGS_PER_SM) {
			fjc_note("cuLaunchKernel: '%s': %d registers x %llu threads need %llu registers, over %d", f->name, f->regs,
			     (unsigned long long)threads, (unsigned long long)(per_warp * warps), REGS_PER_SM);
			return E_LAUNCH_OUT_OF_RESOURCES;
		}
	}
	unsigned smem = f->smem > 0 ? (unsigned)f->smem : 0;
	if (smem + shared > SMEM_PER_BLOCK_OPTIN || shared > (unsigned)fjc_dyn_limit(f)) {
		fjc_note("cuLaunchKernel: '%s': %u bytes of dynamic shared memory (+%u static) over its limit of %d%s", f->name,
		     shared, smem, fjc_dyn_limit(f), f->max_dyn < 0 ? " (no opt-in with cuFuncSetAttribute)" : "");
		return E_INVALID_VALUE;
	}
	return OK;
}

/* Reads the arguments (exactly the entry's parameter count) and checks its
 * .ptr ones: a violation is recorded on the operation, for the next
 * synchronisation. */
static void read_args(const entry *f, void **params, op *o)
{
	for (int i = 0; i < f->nparams; i++) {
		uint64_t v = 0;
		memcpy(&v, params[i], f->psize[i]);
		o->args[i] = v;
		if (!f->isptr[i] || v == 0 || o->fault)
			continue;
		if (!find_alloc(v, 1)) {
			o->fault = E_ILLEGAL_ADDRESS;
			snprintf(o->fault_msg, sizeof o->fault_msg,
			         "kernel '%s' parameter %d = 0x%llx lies outside every live allocation", f->name, i,
			         (unsigned long long)v);
		} else if (v % f->palign[i]) {
			o->fault = E_MISALIGNED_ADDRESS;
			snprintf(o->fault_msg, sizeof o->fault_msg,
			         "kernel '%s' parameter %d = 0x%llx is not a multiple of its .align %u", f->name, i,
			         (unsigned long long)v, f->palign[i]);
		}
	}
}

API CUresult cuLaunchKernel(void *h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, void *hs, void **params, void **extra)
{
	FJC_ENTER(c, r);
	entry *f = fjc_get_function(h);
	if (!f || f->mod->ctx != c)
		return fjc_leave(E_INVALID_HANDLE);
	stream *s = get_stream(c, hs);
	if (!s)
		return fjc_leave(E_INVALID_HANDLE);
	unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	if ((r = check_launch(f, g, b, shared)) != OK)
		return fjc_leave(r);
	if (extra) {
		fjc_note("cuLaunchKernel: '%s': the extra argument is not supported by the stand-in", f->name);
		return fjc_leave(E_NOT_SUPPORTED);
	}
	if (f->nparams && !params)
		return fjc_leave(E_INVALID_VALUE);
	if (!f->run) {
		fjc_note("cuLaunchKernel: entry '%s' has no kernel bound (fjcuda_bind_entry): the stand-in runs bound entries "
		     "only", f->name);
		return fjc_leave(E_NOT_SUPPORTED);
	}
	op *o = new_op(OP_LAUNCH);
	if (o)
		o->args = calloc((size_t)f->nparams + 1, sizeof *o->args);
	if (!o || !o->args) {
		free(o);
		return fjc_leave(E_OUT_OF_MEMORY);
	}
	o->f = f;
	o->grid = gx * gy * gz;
	o->block = bx * by * bz;
	o->shared = shared;
	read_args(f, params, o);
	push(s, o);
	return fjc_leave(OK);
}

/* ---- errors ---- */

static const struct {
	int code;
	const char *name, *text;
} err_names[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

API CUresult cuGetErrorName(CUresult e, const char **s)
{
	if (!s)
		return E_INVALID_VALUE;
	for (size_t i = 0; i < sizeof err_names / sizeof *err_names; i++)
		if (err_names[i].code == e) {
			*s = err_names[i].name;
			return OK;
		}
	*s = NULL;
	return E_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult e, const char **s)
{
	if (!s)
		return E_INVALID_VALUE;
	for (size_t i = 0; i < sizeof err_names / sizeof *err_names; i++)
		if (err_names[i].code == e) {
			*s = err_names[i].text;
			return OK;
		}
	*s = NULL;
	return E_INVALID_VALUE;
}

/* ---- the test-only hook and queries ---- */

API int fjcuda_bind_entry(void *h, const char *name, fjcuda_run_fn run, void *ud, int variant)
{
	pthread_mutex_lock(&fjc_lock);
	module *m = fjc_get_module(h);
	if (!m)
		return fjc_leave(E_INVALID_HANDLE);
	if (!name || !run)
		return fjc_leave(E_INVALID_VALUE);
	for (int i = 0; i < m->n; i++)
		if (strcmp(m->e[i].name, name) == 0) {
			m->e[i].run = run;
			m->e[i].ud = ud;
			m->e[i].variant = variant;
			return fjc_leave(OK);
		}
	return fjc_leave(E_NOT_FOUND);
}

/* The last fault (700, 716, 719; 0: none) and its description. */
API int fjcuda_last_fault(char *buf, size_t n)
{
	pthread_mutex_lock(&fjc_lock);
	if (buf && n)
		snprintf(buf, n, "%s", g_fault_msg);
	return fjc_leave(g_last_fault);
}

/* Allocations reported leaked so far (contexts destroyed with live memory). */
API int fjcuda_leaks(void)
{
	pthread_mutex_lock(&fjc_lock);
	return fjc_leave(g_leaks);
}

/* Frees of pointers that were not live allocations, so far. */
API int fjcuda_bad_frees(void)
{
	pthread_mutex_lock(&fjc_lock);
	return fjc_leave(g_bad_frees);
}

/* Launches executed so far (their kernels ran). */
API unsigned fjcuda_launches(void)
{
	pthread_mutex_lock(&fjc_lock);
	unsigned n = g_launches;
	pthread_mutex_unlock(&fjc_lock);
	return n;
}

/* At exit: guards checked and allocations still live printed (not freed:
 * other destructors may still use them). */
__attribute__((destructor)) static void at_exit(void)
{
	if (pthread_mutex_trylock(&fjc_lock) != 0)
		return; /* exiting while a call runs: nothing to check safely */
	for (alloc *a = g_allocs; a; a = a->next) {
		long off = a->reported ? 0 : guard_damage(a);
		if (off)
			fjc_note("at exit: the guard of allocation 0x%llx (%zu bytes) was overwritten at offset %ld",
			     (unsigned long long)a->p, a->size, off);
	}
	int n = 0;
	size_t bytes = 0;
	for (alloc *a = g_allocs; a; a = a->next, n++)
		bytes += a->size;
	if (n)
		fjc_note("at exit: %d allocation%s (%zu bytes) never freed", n, n == 1 ? "" : "s", bytes);
	pthread_mutex_unlock(&fjc_lock);
}
