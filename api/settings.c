/* settings.c -- the context's settings (fj_context_set_option) and their
 * documented defaults from the environment: the one file of the library that
 * reads it. Every other box reads fj_context_settings(ctx).
 *
 * Each option is one row of `options`: its name, its environment variable,
 * its kind and where it lives in fj_settings. An option's default is the
 * environment's value when the context is created (an invalid one is ignored
 * with a warning on the context), else the built-in one. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef enum opt_kind {
	OPT_COUNT,  /* a non-negative int (0: automatic) */
	OPT_BOOL,   /* 0/1, true/false, on/off, yes/no */
	OPT_STRING, /* any text; "" unsets */
	OPT_MB,     /* a positive count of MiB, kept in bytes */
	OPT_DIR,    /* the cache directory: "off" or "" = none */
	OPT_CHOICE  /* one of `choices` (the first is the default), kept as its index */
} opt_kind;

typedef struct option {
	const char *name, *env;
	opt_kind kind;
	size_t offset;
	const char *const *choices; /* OPT_CHOICE: the values, NULL-terminated */
	const char *expected;       /* OPT_CHOICE: what a value must be */
} option;

static const char *const nvptx_math_choices[] = {[FJ_NVPTX_MATH_LIBDEVICE] = "libdevice",
                                                 [FJ_NVPTX_MATH_APPROX] = "approx", NULL};

static const char *const host_target_choices[] = {[FJ_HOST_TARGET_NATIVE] = "native",
                                                  [FJ_HOST_TARGET_AVX2] = "avx2", NULL};
static const char *const host_vector_choices[] = {[FJ_HOST_VECTOR_AUTO] = "auto", [FJ_HOST_VECTOR_256] = "256",
                                                  [FJ_HOST_VECTOR_512] = "512", NULL};
static const char *const host_stream_choices[] = {[FJ_HOST_STREAM_AUTO] = "auto", [FJ_HOST_STREAM_ON] = "on",
                                                  [FJ_HOST_STREAM_OFF] = "off", NULL};

#define AT(field) offsetof(fj_settings, field), NULL, NULL
#define AT_CHOICE(field, choices, expected) offsetof(fj_settings, field), choices, expected
static const option options[] = {
	{"threads", "FUSEJIT_THREADS", OPT_COUNT, AT(threads)},
	{"compile_jobs", "FUSEJIT_NVPTX_JOBS", OPT_COUNT, AT(compile_jobs)},
	{"cache_dir", "FUSEJIT_CACHE_DIR", OPT_DIR, AT(cache_dir)},
	{"cache_max_mb", "FUSEJIT_CACHE_MAX_MB", OPT_MB, AT(cache_max_bytes)},
	{"kernel_cache_mb", "FUSEJIT_KERNEL_CACHE_MB", OPT_MB, AT(kernel_cache_bytes)},
	{"nvptx_variants", "FUSEJIT_NVPTX_VARIANTS", OPT_STRING, AT(nvptx_variants)},
	{"ptx_all_variants", "FUSEJIT_PTX_ALL_VARIANTS", OPT_BOOL, AT(ptx_all_variants)},
	{"libdevice", "FUSEJIT_LIBDEVICE", OPT_STRING, AT(libdevice)},
	{"nvptx_math", "FUSEJIT_NVPTX_MATH", OPT_CHOICE, AT_CHOICE(nvptx_math, nvptx_math_choices, "libdevice or approx")},
	{"libcuda", "FUSEJIT_LIBCUDA", OPT_STRING, AT(libcuda)},
	{"nvptx_target", "FUSEJIT_NVPTX_TARGET", OPT_STRING, AT(nvptx_target)},
	{"nvptx_device", "FUSEJIT_NVPTX_DEVICE", OPT_STRING, AT(nvptx_device)},
	{"nvptx_sync", "FUSEJIT_NVPTX_SYNC", OPT_BOOL, AT(nvptx_sync)},
	{"cache_fault", "FUSEJIT_CACHE_FAULT", OPT_STRING, AT(cache_fault)}, /* a testing aid (kcache.h) */
	{"host_target", "FUSEJIT_HOST_TARGET", OPT_CHOICE, AT_CHOICE(host_target, host_target_choices, "native or avx2")},
	{"host_vector_bits", "FUSEJIT_HOST_VECTOR_BITS", OPT_CHOICE,
	 AT_CHOICE(host_vector_bits, host_vector_choices, "auto, 256 or 512")},
	{"host_stream", "FUSEJIT_HOST_STREAM", OPT_CHOICE, AT_CHOICE(host_stream, host_stream_choices, "auto, on or off")},
};
#undef AT
#undef AT_CHOICE

#define KC_DEFAULT_MB 256

static const option *find(const char *name)
{
	for (size_t i = 0; i < FJ_ARRAY_LEN(options); i++)
		if (strcmp(options[i].name, name) == 0)
			return &options[i];
	return NULL;
}

/* The default disk cache: $XDG_CACHE_HOME/fusejit, else ~/.cache/fusejit. */
static void home_cache_dir(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	buf[0] = 0;
	if (xdg && *xdg)
		snprintf(buf, size, "%s/fusejit", xdg);
	else if (home && *home)
		snprintf(buf, size, "%s/.cache/fusejit", home);
}

static bool parse_count(const char *v, int64_t max, int64_t *out)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < 0 || n > max)
		return false;
	*out = n;
	return true;
}

static bool parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"1", "true", "on", "yes"}, *const no[] = {"0", "false", "off", "no", ""};
	for (size_t i = 0; i < FJ_ARRAY_LEN(yes); i++)
		if (strcmp(v, yes[i]) == 0)
			return *out = true, true;
	for (size_t i = 0; i < FJ_ARRAY_LEN(no); i++)
		if (strcmp(v, no[i]) == 0)
			return *out = false, true;
	return false;
}

static fj_status set_string(fj_context *ctx, char **field, const char *v)
{
	char *d = NULL;
	if (v && *v && !(d = fj_strdup(ctx, v)))
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	if (*field)
		fj_free(ctx, *field, strlen(*field) + 1);
	*field = d;
	return FJ_OK;
}

/* Sets option o to v (NULL: its built-in default). A bad value leaves the
 * setting alone and returns FJ_ERR_INVALID with *expected saying what a value
 * must be (nothing is recorded on the context). */
static fj_status set(fj_context *ctx, const option *o, const char *v, const char **expected)
{
	char *field = (char *)fj_context_settings_mut(ctx) + o->offset;
	int64_t n = 0;
	bool b = false;
	switch (o->kind) {
	case OPT_COUNT:
		*expected = "a non-negative integer";
		if (v && !parse_count(v, 1 << 16, &n))
			return FJ_ERR_INVALID;
		*(int *)field = (int)n;
		return FJ_OK;
	case OPT_BOOL:
		*expected = "a boolean (0/1, true/false, on/off)";
		if (v && !parse_bool(v, &b))
			return FJ_ERR_INVALID;
		*(bool *)field = b;
		return FJ_OK;
	case OPT_MB:
		*expected = "a positive number of MiB";
		n = KC_DEFAULT_MB;
		if (v && (!parse_count(v, INT64_MAX >> 20, &n) || n == 0))
			return FJ_ERR_INVALID;
		*(uint64_t *)field = (uint64_t)n << 20;
		return FJ_OK;
	case OPT_STRING:
		return set_string(ctx, (char **)field, v);
	case OPT_CHOICE:
		*expected = o->expected;
		for (int i = 0; o->choices[i]; i++)
			if (!v || strcmp(v, o->choices[i]) == 0)
				return *(int *)field = i, FJ_OK;
		return FJ_ERR_INVALID;
	case OPT_DIR: {
		char buf[4096];
		if (!v)
			home_cache_dir(buf, sizeof buf);
		else
			snprintf(buf, sizeof buf, "%s", strcmp(v, "off") == 0 ? "" : v);
		return set_string(ctx, (char **)field, buf);
	}
	}
	return FJ_ERR_INTERNAL;
}

/* Sets o from its environment variable, or to its built-in default; a bad
 * value there is a warning. */
static void set_from_env(fj_context *ctx, const option *o)
{
	const char *v = getenv(o->env), *expected = "";
	if (v && o->kind != OPT_DIR && o->kind != OPT_STRING && !*v)
		v = NULL;
	if (set(ctx, o, v, &expected) != FJ_ERR_INVALID)
		return;
	fj_warning(ctx, (fj_loc){0}, "%s: '%s' is not %s; the default is used", o->env, v, expected);
	set(ctx, o, NULL, &expected);
}

fj_context *fj_context_create(fj_alloc_fn alloc, void *alloc_ud)
{
	fj_context *ctx = fj_context_new(alloc, alloc_ud);
	if (!ctx)
		return NULL;
	for (size_t i = 0; i < FJ_ARRAY_LEN(options); i++)
		set_from_env(ctx, &options[i]);
	return ctx;
}

fj_status fj_context_set_option(fj_context *ctx, const char *name, const char *value)
{
	if (!ctx)
		return FJ_ERR_INVALID;
	const option *o = name ? find(name) : NULL;
	if (!o) {
		char list[512] = "";
		for (size_t i = 0; i < FJ_ARRAY_LEN(options); i++)
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", options[i].name);
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "fj_context_set_option: unknown option '%s' (options: %s)", name ? name : "(null)",
		                       list);
	}
	if (!value) {
		set_from_env(ctx, o);
		return FJ_OK;
	}
	const char *expected = "";
	fj_status st = set(ctx, o, value, &expected);
	if (st == FJ_ERR_INVALID)
		return fj_error_status(ctx, st, (fj_loc){0}, "fj_context_set_option: %s: '%s' is not %s", name, value,
		                       expected);
	return st;
}
