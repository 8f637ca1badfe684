/* device.c -- the CUDA driver as a GPU device (device.h), the choice of
 * device from the context's settings, and the backend's lock.
 *
 * The CUDA device's ud is the context's driver (fj_cu, cuda.h); its kernels
 * are the context's compiled regions (region_gpu.h), whose CUDA module is
 * loaded on first use under the backend's lock. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/cuda.h"
#include "backend_nvptx/device.h"
#include "backend_nvptx/emu.h"
#include "backend_nvptx/nvptx_internal.h"

/* ---- the backend's lock ---- */

fj_status fj_nvptx_enter(fj_context *ctx)
{
	fj_nvptx_state *s;
	fj_status st = fj_nvptx_state_get(ctx, &s);
	if (st == FJ_OK)
		pthread_mutex_lock(&s->lock);
	return st;
}

void fj_nvptx_leave(fj_context *ctx)
{
	fj_nvptx_state *s;
	if (fj_nvptx_state_get(ctx, &s) == FJ_OK)
		pthread_mutex_unlock(&s->lock);
}

/* ---- the CUDA device ---- */

static fj_status cu_alloc(void *ud, size_t n, uint64_t *p) { return fj_cu_alloc(ud, n, p); }
static void cu_release(void *ud, uint64_t p) { fj_cu_release(ud, p); }
static fj_status cu_htod(void *ud, uint64_t d, const void *s, size_t n) { return fj_cu_htod(ud, d, s, n); }
static fj_status cu_dtoh(void *ud, void *d, uint64_t s, size_t n) { return fj_cu_dtoh(ud, d, s, n); }
static fj_status cu_dtod(void *ud, uint64_t d, uint64_t s, size_t n) { return fj_cu_dtod(ud, d, s, n); }
static fj_status cu_memset0(void *ud, uint64_t d, size_t n) { return fj_cu_memset0(ud, d, n); }
static fj_status cu_sync(void *ud) { return fj_cu_sync(ud); }
static fj_status cu_event_create(void *ud, void **ev) { return fj_cu_event_create(ud, ev); }
static fj_status cu_event_record(void *ud, void *ev) { return fj_cu_event_record(ud, ev); }
static void cu_event_destroy(void *ud, void *ev) { fj_cu_event_destroy(ud, ev); }
static void cu_set_stream(void *ud, void *stream) { fj_cu_set_stream(ud, stream); }
static fj_status cu_event_sync(void *ud, void *ev) { return fj_cu_event_sync(ud, ev); }
static fj_status cu_stream_wait(void *ud, void *ev) { return fj_cu_stream_wait(ud, ev); }

static fj_status cu_event_elapsed(void *ud, void *e0, void *e1, float *ms)
{
	return fj_cu_event_elapsed(ud, e0, e1, ms);
}

/* The target the context's kernels are compiled for: the settings'
 * nvptx_target, else the GPU's own architecture (NULL: not supported). */
static const char *cu_target(const fj_cu *cu)
{
	const char *t = fj_context_settings(cu->ctx)->nvptx_target;
	return t && *t ? t : fj_nvptx_sm_for_cc(cu->cc_major, cu->cc_minor);
}

static void emu_free(void *e) { fj_nvptx_emu_destroy(e); }

/* Test-only (fjcuda_hook.h): under the stand-in driver of tests/driver,
 * which alone exports FJCUDA_BIND_SYMBOL, each variant's entry of the new
 * module mod runs region `node` of g on a host emulator owned by cu. A real
 * driver lacks the symbol: nothing happens. */
static fj_status bind_emulated(fj_cu *cu, const fj_nvptx_kernel *k, void *mod, const fj_graph *g, uint32_t node)
{
	fjcuda_bind_fn bind;
	*(void **)&bind = dlsym(cu->lib, FJCUDA_BIND_SYMBOL);
	if (!bind)
		return FJ_OK;
	fj_status st = FJ_OK;
	if (!cu->emu) {
		fj_nvptx_emu *e = NULL;
		st = fj_nvptx_emu_create(cu->ctx, &e);
		cu->emu = e;
		cu->emu_free = emu_free;
	}
	void *ek = NULL;
	int nv = 0;
	if (st == FJ_OK)
		st = fj_nvptx_emu_prepare(cu->emu, g, node, &ek, &nv);
	if (st == FJ_OK && nv != k->nvariants)
		st = fj_error_status(cu->ctx, FJ_ERR_INTERNAL, (fj_loc){0},
		                     "nvptx: the emulator's region has %d variants, the PTX %d", nv, k->nvariants);
	for (int v = 0; st == FJ_OK && v < k->nvariants; v++)
		st = fj_cu_check(cu->ctx, bind(mod, k->entry[v], fj_nvptx_emu_hook_run, ek, v), FJCUDA_BIND_SYMBOL,
		                 __FILE__, __LINE__);
	return st;
}

/* Loads k's CUDA module and entries once (under the backend's lock). */
static fj_status load_module(fj_cu *cu, fj_nvptx_kernel *k, const fj_graph *g, uint32_t node)
{
	fj_status st = fj_nvptx_enter(cu->ctx);
	if (st != FJ_OK)
		return st;
	if (!k->cumod && (st = fj_cu_push(cu)) == FJ_OK) {
		void *mod = NULL;
		st = fj_cu_module_load(cu, k->ptx, &mod);
		for (int v = 0; st == FJ_OK && v < k->nvariants; v++)
			st = fj_cu_function(cu, mod, k->entry[v], &k->fn[v]);
		if (st == FJ_OK)
			st = bind_emulated(cu, k, mod, g, node);
		if (st == FJ_OK)
			k->cumod = mod;
		else if (mod)
			cu->api.cuModuleUnload(mod);
		fj_cu_pop(cu);
	}
	fj_nvptx_leave(cu->ctx);
	return st;
}

static fj_status cu_prepare(void *ud, const fj_graph *g, uint32_t node, void **kern, bool *hit)
{
	fj_cu *cu = ud;
	fj_nvptx_kernel *k = NULL;
	fj_status st = fj_nvptx_compile_region(cu->ctx, g, node, cu_target(cu), &k, hit);
	if (st == FJ_OK)
		st = load_module(cu, k, g, node);
	*kern = k;
	return st;
}

static fj_status cu_launch(void *ud, void *kern, int variant, unsigned grid, unsigned block, unsigned shared,
                           const uint64_t *args, uint32_t nargs)
{
	fj_nvptx_kernel *k = kern;
	void *params[nargs ? nargs : 1];
	for (uint32_t j = 0; j < nargs; j++)
		params[j] = (void *)&args[j];
	return fj_cu_launch(ud, k->fn[variant], k->entry[variant], grid, block, shared, params);
}

/* Takes the lock and makes the primary context current on this thread;
 * leave restores the caller's current context. */
static fj_status cu_enter(void *ud)
{
	fj_cu *cu = ud, *again;
	fj_status st = fj_cu_get(cu->ctx, &again);
	if (st == FJ_OK)
		st = fj_nvptx_enter(cu->ctx);
	if (st != FJ_OK)
		return st;
	if ((st = fj_cu_push(cu)) != FJ_OK)
		fj_nvptx_leave(cu->ctx);
	return st;
}

static void cu_leave(void *ud)
{
	fj_cu *cu = ud;
	fj_cu_set_stream(cu, NULL);
	fj_cu_pop(cu);
	fj_nvptx_leave(cu->ctx);
}

fj_status fj_nvptx_cuda_device(fj_context *ctx, fj_nvptx_device *out)
{
	memset(out, 0, sizeof *out);
	fj_cu *cu;
	fj_status st = fj_cu_get(ctx, &cu);
	if (st != FJ_OK)
		return st;
	const char *forced = fj_context_settings(ctx)->nvptx_target;
	const char *sm = cu_target(cu);
	if (!sm)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "nvptx: GPU %s (sm_%d%d) is not supported",
		                       cu->name, cu->cc_major, cu->cc_minor);
	if (forced && *forced && (st = fj_nvptx_check_sm(ctx, forced)) != FJ_OK)
		return st;
	*out = (fj_nvptx_device){
		.ud = cu, .name = cu->name, .target = sm,
		.limits = {.sm_count = (unsigned)cu->sm_count, .regs_per_sm = (unsigned)cu->regs_per_sm},
		.alloc = cu_alloc, .release = cu_release, .htod = cu_htod,
		.dtoh = cu_dtoh, .dtod = cu_dtod, .memset0 = cu_memset0, .sync = cu_sync, .prepare = cu_prepare,
		.launch = cu_launch, .event_create = cu_event_create, .event_record = cu_event_record,
		.event_elapsed = cu_event_elapsed, .event_destroy = cu_event_destroy, .set_stream = cu_set_stream,
		.event_sync = cu_event_sync, .stream_wait = cu_stream_wait, .enter = cu_enter, .leave = cu_leave,
	};
	return FJ_OK;
}

/* ---- choosing and opening a device ---- */

fj_status fj_nvptx_device_kind(fj_context *ctx, bool *emulated)
{
	const char *d = fj_context_settings(ctx)->nvptx_device;
	*emulated = d && strcmp(d, "emulator") == 0;
	if (*emulated || !d || !*d || strcmp(d, "cuda") == 0)
		return FJ_OK;
	return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
	                       "FUSEJIT_NVPTX_DEVICE=%s: expected cuda (the default) or emulator", d);
}

bool fj_nvptx_cuda_usable(fj_context *ctx) { return fj_cu_usable(ctx); }

/* Records why the nvptx executor cannot run here, as the driver's own
 * sentence ("no CUDA driver: libcuda.so.1 not found (...)") behind the
 * executor's name, and returns its status (FJ_ERR_DRIVER). The driver is
 * opened again on a scratch context: fj_cu_usable records nothing. */
static fj_status no_cuda(fj_context *ctx)
{
	fj_context *scratch = fj_context_create(NULL, NULL);
	fj_cu *cu = NULL;
	if (scratch)
		fj_cu_open(scratch, fj_context_settings(ctx)->libcuda, &cu);
	bool failed = cu && cu->init_status != FJ_OK;
	fj_status st = fj_error_status(ctx, failed ? cu->init_status : FJ_ERR_DRIVER, (fj_loc){0},
	                               "the nvptx executor needs a CUDA driver and a GPU: %s",
	                               failed ? cu->init_error : "the CUDA driver could not be opened");
	fj_cu_driver_free(cu);
	fj_context_destroy(scratch);
	return st;
}

static void emu_close(void *ud) { fj_nvptx_emu_destroy(ud); }

fj_status fj_nvptx_device_open(fj_context *ctx, fj_nvptx_device *out)
{
	memset(out, 0, sizeof *out);
	bool emulated;
	fj_status st = fj_nvptx_device_kind(ctx, &emulated);
	if (st != FJ_OK)
		return st;
	if (!emulated) {
		if (!fj_cu_usable(ctx))
			return no_cuda(ctx);
		return fj_nvptx_cuda_device(ctx, out);
	}
	fj_nvptx_emu *e;
	st = fj_nvptx_emu_create(ctx, &e);
	if (st != FJ_OK)
		return st;
	*out = fj_nvptx_emu_device(e);
	out->close = emu_close;
	return FJ_OK;
}

void fj_nvptx_device_close(fj_nvptx_device *d)
{
	if (d && d->close)
		d->close(d->ud);
	if (d)
		memset(d, 0, sizeof *d);
}

fj_status fj_nvptx_device_copy(fj_context *ctx, const fj_nvptx_device *d, uint64_t dst, uint64_t src, size_t n)
{
	if (!n || dst == src)
		return FJ_OK;
	if (d->dtod)
		return d->dtod(d->ud, dst, src, n);
	void *tmp = malloc(n);
	if (!tmp)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	fj_status st = d->dtoh(d->ud, tmp, src, n);
	if (st == FJ_OK)
		st = d->htod(d->ud, dst, tmp, n);
	free(tmp);
	return st;
}
