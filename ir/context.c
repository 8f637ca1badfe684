/* context.c -- the fj_context: allocator, diagnostics, the parsed op table,
 * and the slots where backends keep their per-context state.
 *
 * Every diagnostic is kept on the context (and handed to the callback when one
 * is installed), so that tools can print them all and embedders can read the
 * last error back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"

/* The calling thread's most recent error, per context (fj_context_error):
 * with several threads on one context, each reads back its own. */
static _Thread_local struct {
	const fj_context *ctx;
	char msg[sizeof ((fj_context *)0)->last_error];
} tl_error;


_Noreturn void fj_assert_fail(const char *what, const char *file, int line)
{
	fprintf(stderr, "fusejit: internal error: %s:%d: assertion failed: %s\n", file, line, what);
	abort();
}

static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	(void)osize;
	if (nsize == 0) {
		free(ptr);
		return NULL;
	}
	return realloc(ptr, nsize);
}

const char *fj_status_name(fj_status s)
{
	static const char *const names[] = {
		"FJ_OK", "FJ_ERR_PARSE", "FJ_ERR_INVALID", "FJ_ERR_NOMEM", "FJ_ERR_IO",
		"FJ_ERR_UNSUPPORTED", "FJ_ERR_RUNTIME", "FJ_ERR_DRIVER", "FJ_ERR_INTERNAL",
	};
	if ((unsigned)s < FJ_ARRAY_LEN(names))
		return names[s];
	return "FJ_ERR_UNKNOWN";
}

fj_context *fj_context_new(fj_alloc_fn alloc, void *alloc_ud)
{
	if (!alloc)
		alloc = default_alloc;
	fj_context *ctx = alloc(alloc_ud, NULL, 0, sizeof *ctx);
	if (!ctx)
		return NULL;
	memset(ctx, 0, sizeof *ctx);
	ctx->alloc = alloc;
	ctx->alloc_ud = alloc_ud;
	ctx->settings.cache_max_bytes = (uint64_t)256 << 20;
	ctx->settings.kernel_cache_bytes = (uint64_t)256 << 20;
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&ctx->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (fj_op_table_init(ctx) != FJ_OK) {
		fj_context_destroy(ctx);
		return NULL;
	}
	return ctx;
}

fj_context *fj_context_new_like(const fj_context *ctx)
{
	fj_context *c = fj_context_new(ctx->alloc, ctx->alloc_ud);
	if (!c)
		return NULL;
	const fj_settings *from = &ctx->settings;
	fj_settings *to = &c->settings;
	*to = *from;
	char **strs[] = {&to->cache_dir, &to->nvptx_variants, &to->libdevice, &to->libcuda, &to->nvptx_target,
	                 &to->nvptx_device, &to->cache_fault};
	bool ok = true; /* after a failure, the rest are NULL: c must not free ctx's strings */
	for (size_t i = 0; i < FJ_ARRAY_LEN(strs); i++) {
		if (!*strs[i])
			continue;
		*strs[i] = ok ? fj_strdup(c, *strs[i]) : NULL;
		ok = *strs[i] != NULL;
	}
	if (!ok) {
		fj_context_destroy(c);
		return NULL;
	}
	return c;
}

void fj_context_destroy(fj_context *ctx)
{
	if (!ctx)
		return;
	for (int i = FJ_SLOT_COUNT - 1; i >= 0; i--)
		if (ctx->slots[i].p)
			ctx->slots[i].destroy(ctx, ctx->slots[i].p);
	fj_context_clear_diagnostics(ctx);
	if (tl_error.ctx == ctx)
		tl_error.ctx = NULL;
	pthread_mutex_destroy(&ctx->lock);
	fj_op_table_free(ctx);
	fj_settings *st = &ctx->settings;
	char **strs[] = {&st->cache_dir, &st->nvptx_variants, &st->libdevice, &st->libcuda, &st->nvptx_target,
	                 &st->nvptx_device, &st->cache_fault};
	for (size_t i = 0; i < FJ_ARRAY_LEN(strs); i++)
		if (*strs[i])
			fj_free(ctx, *strs[i], strlen(*strs[i]) + 1);
	ctx->alloc(ctx->alloc_ud, ctx, sizeof *ctx, 0);
}

const fj_settings *fj_context_settings(const fj_context *ctx) { return &ctx->settings; }
fj_settings *fj_context_settings_mut(fj_context *ctx) { return &ctx->settings; }

void *fj_alloc(fj_context *ctx, size_t n)
{
	if (n == 0)
		n = 1;
	return ctx->alloc(ctx->alloc_ud, NULL, 0, n);
}

void *fj_realloc(fj_context *ctx, void *p, size_t osize, size_t nsize)
{
	if (nsize == 0)
		nsize = 1;
	return ctx->alloc(ctx->alloc_ud, p, osize, nsize);
}

void fj_free(fj_context *ctx, void *p, size_t size)
{
	if (p)
		ctx->alloc(ctx->alloc_ud, p, size, 0);
}

char *fj_strdup(fj_context *ctx, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = fj_alloc(ctx, n);
	if (d)
		memcpy(d, s, n);
	return d;
}

void fj_context_set_diag_handler(fj_context *ctx, fj_diag_fn fn, void *ud)
{
	ctx->diag_fn = fn;
	ctx->diag_ud = ud;
}

void fj_context_set_parallel_runner(fj_context *ctx, fj_parallel_runner run)
{
	ctx->runner = run;
	ctx->runner_pid = (long)getpid();
}

size_t fj_context_diagnostic_count(const fj_context *ctx) { return ctx->ndiags; }

const fj_diagnostic *fj_context_diagnostic(const fj_context *ctx, size_t i)
{
	return i < ctx->ndiags ? &ctx->diags[i] : NULL;
}

/* Under the lock: other threads may be recording errors (api.tsan_stress). */
size_t fj_context_error_count(const fj_context *ctx)
{
	pthread_mutex_t *lock = (pthread_mutex_t *)&ctx->lock;
	pthread_mutex_lock(lock);
	size_t n = ctx->nerrors;
	pthread_mutex_unlock(lock);
	return n;
}

void fj_context_clear_diagnostics(fj_context *ctx)
{
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->ndiags; i++) {
		fj_diagnostic *d = &ctx->diags[i];
		if (d->file)
			fj_free(ctx, (char *)d->file, strlen(d->file) + 1);
		fj_free(ctx, (char *)d->message, strlen(d->message) + 1);
	}
	fj_free(ctx, ctx->diags, ctx->cap_diags * sizeof *ctx->diags);
	ctx->diags = NULL;
	ctx->ndiags = ctx->cap_diags = 0;
	ctx->last_error[0] = 0;
	if (tl_error.ctx == ctx)
		tl_error.msg[0] = 0;
	pthread_mutex_unlock(&ctx->lock);
}

static const char *severity_name(fj_severity s)
{
	return s == FJ_SEV_ERROR ? "error" : s == FJ_SEV_WARNING ? "warning" : "note";
}

void fj_format_diagnostic(const fj_diagnostic *d, char *buf, size_t size)
{
	if (d->file && d->line)
		snprintf(buf, size, "%s:%u:%u: %s: %s", d->file, d->line, d->col,
		         severity_name(d->severity), d->message);
	else if (d->file)
		snprintf(buf, size, "%s: %s: %s", d->file, severity_name(d->severity), d->message);
	else
		snprintf(buf, size, "%s: %s", severity_name(d->severity), d->message);
}

/* Diagnostics are kept while memory allows; when it does not, the callback
 * and last_error still see them (last_error is a fixed buffer). */
fj_status fj_verror(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc,
                    const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	fj_diagnostic d = {sev, loc.file, loc.line, loc.col, msg};
	pthread_mutex_lock(&ctx->lock);
	if (sev == FJ_SEV_ERROR) {
		ctx->nerrors++;
		fj_format_diagnostic(&d, ctx->last_error, sizeof ctx->last_error);
		tl_error.ctx = ctx;
		memcpy(tl_error.msg, ctx->last_error, sizeof tl_error.msg);
	}
	if (ctx->diag_fn)
		ctx->diag_fn(ctx->diag_ud, &d);
	if (ctx->ndiags == ctx->cap_diags && ctx->ndiags < FJ_MAX_DIAGS) {
		size_t ncap = ctx->cap_diags ? ctx->cap_diags * 2 : 8;
		fj_diagnostic *nd = fj_realloc(ctx, ctx->diags, ctx->cap_diags * sizeof *nd, ncap * sizeof *nd);
		if (nd) {
			ctx->diags = nd;
			ctx->cap_diags = ncap;
		}
	}
	if (ctx->ndiags < ctx->cap_diags) {
		fj_diagnostic *kd = &ctx->diags[ctx->ndiags];
		*kd = d;
		kd->file = loc.file ? fj_strdup(ctx, loc.file) : NULL;
		kd->message = fj_strdup(ctx, msg);
		if ((loc.file && !kd->file) || !kd->message) {
			if (kd->file)
				fj_free(ctx, (char *)kd->file, strlen(kd->file) + 1);
			if (kd->message)
				fj_free(ctx, (char *)kd->message, strlen(kd->message) + 1);
		} else {
			ctx->ndiags++;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return st;
}

fj_status fj_error(fj_context *ctx, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fj_status st = fj_verror(ctx, FJ_ERR_INVALID, FJ_SEV_ERROR, loc, fmt, ap);
	va_end(ap);
	return st;
}

fj_status fj_error_status(fj_context *ctx, fj_status st, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fj_verror(ctx, st, FJ_SEV_ERROR, loc, fmt, ap);
	va_end(ap);
	return st;
}

void fj_warning(fj_context *ctx, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fj_verror(ctx, FJ_OK, FJ_SEV_WARNING, loc, fmt, ap);
	va_end(ap);
}

const char *fj_context_error(const fj_context *ctx)
{
	return tl_error.ctx == ctx ? tl_error.msg : ctx->last_error;
}

fj_status fj_context_slot(fj_context *ctx, fj_ctx_slot slot, fj_slot_create_fn create,
                          fj_slot_destroy_fn destroy, void **out)
{
	fj_status st = FJ_OK;
	pthread_mutex_lock(&ctx->lock);
	if (!ctx->slots[slot].p) {
		void *p = NULL;
		st = create(ctx, &p);
		if (st == FJ_OK) {
			ctx->slots[slot].p = p;
			ctx->slots[slot].destroy = destroy;
		}
	}
	*out = ctx->slots[slot].p;
	pthread_mutex_unlock(&ctx->lock);
	return st;
}
