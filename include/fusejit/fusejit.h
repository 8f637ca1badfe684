/* fusejit.h -- the public C API of fusejit, a fusion JIT for tensor graphs.
 *
 * Everything a program embedding fusejit may call is declared here; the rest of
 * the library is hidden (-fvisibility=hidden). This header is plain C99 and
 * compiles as C++.
 *
 * Errors are values: every fallible call returns an fj_status (FJ_OK is 0)
 * and records a diagnostic on its context, readable with fj_context_error().
 * The library never exits or aborts on bad input.
 */
#ifndef FUSEJIT_FUSEJIT_H
#define FUSEJIT_FUSEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSEJIT_VERSION_MAJOR 0
#define FUSEJIT_VERSION_MINOR 1
#define FUSEJIT_VERSION_PATCH 0
#define FUSEJIT_VERSION "0.1.0"

#if defined(FJ_BUILDING_LIBRARY) && defined(__GNUC__)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

typedef enum fj_status {
	FJ_OK = 0,
	FJ_ERR_PARSE,       /* malformed text */
	FJ_ERR_INVALID,     /* well-formed but wrong: types, shapes, attributes */
	FJ_ERR_NOMEM,       /* an allocation failed */
	FJ_ERR_IO,          /* a file could not be read or written */
	FJ_ERR_UNSUPPORTED, /* valid, but not available in this build or here */
	FJ_ERR_RUNTIME,     /* a run failed: bad inputs, index out of range ... */
	FJ_ERR_DRIVER,      /* the CUDA driver or a GPU is missing or failed */
	FJ_ERR_INTERNAL     /* a broken invariant inside fusejit: a bug */
} fj_status;

/* The name of a status, e.g. "FJ_ERR_PARSE". */
FJ_API const char *fj_status_name(fj_status s);

/* A context owns the allocator, the diagnostics, the interned strings and
 * (later) the kernel cache and the CUDA driver. */
typedef struct fj_context fj_context;

/* An allocator in the style of Lua's lua_Alloc: with nsize == 0 it frees ptr
 * (which may be NULL) and returns NULL; otherwise it returns a block of nsize
 * bytes holding the first min(osize, nsize) bytes of ptr (a new block when ptr
 * is NULL), or NULL on failure, leaving ptr untouched. */
typedef void *(*fj_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

typedef enum fj_severity { FJ_SEV_ERROR, FJ_SEV_WARNING, FJ_SEV_NOTE } fj_severity;

/* A diagnostic. file is NULL when there is no file; line and col count from
 * 1 and are 0 when unknown. */
typedef struct fj_diagnostic {
	fj_severity severity;
	const char *file;
	uint32_t line, col;
	const char *message;
} fj_diagnostic;

/* Called for each diagnostic as it is recorded (the strings live until the
 * call returns). */
typedef void (*fj_diag_fn)(void *ud, const fj_diagnostic *d);

/* Creates a context. alloc may be NULL (malloc/realloc/free). Returns NULL
 * only when the first allocation fails. */
FJ_API fj_context *fj_context_create(fj_alloc_fn alloc, void *alloc_ud);
FJ_API void fj_context_destroy(fj_context *ctx);
/* Installs a callback for diagnostics (NULL removes it). Diagnostics are also
 * kept on the context until fj_context_clear_diagnostics(). */
FJ_API void fj_context_set_diag_handler(fj_context *ctx, fj_diag_fn fn, void *ud);
FJ_API size_t fj_context_diagnostic_count(const fj_context *ctx);
FJ_API const fj_diagnostic *fj_context_diagnostic(const fj_context *ctx, size_t i);
FJ_API void fj_context_clear_diagnostics(fj_context *ctx);
/* The message of the most recent error, formatted as "file:line:col: error: msg"
 * (or "error: msg" without a place); "" when there is none. */
FJ_API const char *fj_context_error(const fj_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
