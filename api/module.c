/* module.c -- the public API's version, modules (parse, print, pipelines),
 * graph builder and cache settings (include/fusejit/fusejit.h).
 *
 * Thin: each entry point checks its arguments (an error, never a crash, on
 * NULL or out-of-range input) and calls the frontend, the pass manager or
 * ir/build.h. The builder wraps an fj_builder (sticky status) over a graph
 * appended to the caller's module; types and shapes given as text ("f32[N,64]")
 * are read by a small parser of IR.md §1's `type` and `dim` rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "build.h"
#include "cache/kcache.h"
#include "frontend/frontend.h"
#include "passes/pass.h"

const char *fj_version(void) { return FUSEJIT_VERSION; }
int fj_version_number(void) { return FUSEJIT_VERSION_NUMBER; }

fj_status fj_api_arg_error(fj_context *ctx, const char *fn, const char *what)
{
	if (!ctx)
		return FJ_ERR_INVALID;
	return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s: %s", fn, what);
}

/* ---- modules ---- */

fj_status fj_module_parse(fj_context *ctx, const char *text, size_t len, const char *name, fj_module **out)
{
	if (out)
		*out = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!out || (!text && len))
		return fj_api_arg_error(ctx, "fj_module_parse", "text and out may not be NULL");
	fj_module *m = NULL;
	fj_status st = fj_parse_module(ctx, text ? text : "", len, name, &m);
	if (st == FJ_OK && (st = fj_verify_module(m)) != FJ_OK) {
		fj_module_destroy(m);
		m = NULL;
	}
	*out = m;
	return st;
}

fj_status fj_module_parse_file(fj_context *ctx, const char *path, fj_module **out)
{
	if (out)
		*out = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!path || !out)
		return fj_api_arg_error(ctx, "fj_module_parse_file", "path and out may not be NULL");
	fj_module *m = NULL;
	fj_status st = fj_parse_file(ctx, path, &m);
	if (st == FJ_OK && (st = fj_verify_module(m)) != FJ_OK) {
		fj_module_destroy(m);
		m = NULL;
	}
	*out = m;
	return st;
}

fj_status fj_module_new(fj_context *ctx, fj_module **out)
{
	if (out)
		*out = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!out)
		return fj_api_arg_error(ctx, "fj_module_new", "out may not be NULL");
	*out = fj_module_create(ctx);
	return *out ? FJ_OK : fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

fj_status fj_module_print(fj_context *ctx, const fj_module *m, char **text, size_t *len)
{
	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!m || !text)
		return fj_api_arg_error(ctx, "fj_module_print", "m and text may not be NULL");
	fj_buf b;
	fj_buf_init(&b, ctx);
	fj_status st = fj_print_module(&b, m);
	char *s = st == FJ_OK ? fj_alloc(ctx, b.len + 1) : NULL;
	if (!s) {
		fj_buf_free(&b);
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory printing a module");
	}
	if (b.len)
		memcpy(s, b.data, b.len);
	s[b.len] = 0;
	if (len)
		*len = b.len;
	fj_buf_free(&b);
	*text = s;
	return FJ_OK;
}

void fj_string_free(fj_context *ctx, char *s)
{
	if (ctx && s)
		fj_free(ctx, s, strlen(s) + 1);
}

fj_status fj_module_run_pipeline(fj_context *ctx, fj_module *m, const char *pipeline)
{
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!m || !pipeline)
		return fj_api_arg_error(ctx, "fj_module_run_pipeline", "m and pipeline may not be NULL");
	if (m->ctx != ctx)
		return fj_api_arg_error(ctx, "fj_module_run_pipeline", "the module belongs to another context");
	fj_pipeline_opts o = {0};
	o.verify_each = true;
	return fj_run_pipeline(m, pipeline, &o);
}

size_t fj_module_graph_count(const fj_module *m) { return m ? m->ngraphs : 0; }

const char *fj_module_graph_name(const fj_module *m, size_t i)
{
	return m && i < m->ngraphs ? m->graphs[i]->name : NULL;
}

fj_status fj_op_schema(fj_context *ctx, const char *op, char **text)
{
	if (text)
		*text = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!op || !text)
		return fj_api_arg_error(ctx, "fj_op_schema", "op and text may not be NULL");
	fj_op o;
	if (!fj_op_lookup(op, strlen(op), &o))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "unknown op '%s'", op);
	const fj_opinfo *oi = fj_op_info(ctx, o);
	fj_buf b;
	fj_buf_init(&b, ctx);
	fj_buf_puts(&b, "operands:");
	for (int i = 0; i < oi->noperands; i++)
		fj_buf_printf(&b, " %s%s", oi->operands[i].name,
		              oi->operands[i].variadic ? (oi->operands[i].nonempty ? "+" : "*")
		              : oi->operands[i].optional ? "?"
		                                         : "");
	fj_buf_puts(&b, "\nresults:");
	for (int i = 0; i < oi->nresults; i++)
		fj_buf_printf(&b, " %s", oi->results[i]);
	fj_buf_puts(&b, "\nattributes:");
	for (int i = 0; i < oi->nattrs; i++)
		fj_buf_printf(&b, " %s", oi->attrs[i].name);
	fj_buf_puts(&b, "\n");
	char *s = b.oom ? NULL : fj_alloc(ctx, b.len + 1);
	if (s) {
		memcpy(s, b.data, b.len);
		s[b.len] = 0;
	}
	fj_buf_free(&b);
	*text = s;
	return s ? FJ_OK : fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

/* ---- scalar types ---- */

const char *fj_scalar_type_name(fj_scalar_type t)
{
	return (unsigned)t < FJ_DT_COUNT ? fj_dtype_name((fj_dtype)t) : NULL;
}

size_t fj_scalar_type_size(fj_scalar_type t)
{
	return (unsigned)t < FJ_DT_COUNT ? (size_t)fj_dtype_size((fj_dtype)t) : 0;
}

/* ---- types and shapes as text ---- */

static const char *skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	return s;
}

static bool is_id_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_id_char(char c) { return is_id_start(c) || (c >= '0' && c <= '9'); }

fj_status fj_api_parse_dims(fj_context *ctx, fj_module *m, const char *s, bool *minus1, fj_dim *dims,
                            int *rank, const char **end)
{
	bool allow_neg = minus1 != NULL;
	int r = 0;
	s = skip_ws(s);
	bool bracket = *s == '[';
	if (bracket)
		s = skip_ws(s + 1);
	if ((bracket && *s == ']') || (!bracket && !*s)) {
		*rank = 0;
		*end = bracket ? s + 1 : s;
		return FJ_OK;
	}
	for (;;) {
		if (r == FJ_MAX_RANK)
			return fj_error(ctx, (fj_loc){0}, "more than %d sizes in '%s'", FJ_MAX_RANK, s);
		fj_dim d = 1;
		bool first = true, neg = false;
		for (;;) {
			s = skip_ws(s);
			fj_dim f;
			if (*s == '-' || (*s >= '0' && *s <= '9')) {
				char *e;
				long long v = strtoll(s, &e, 10);
				if (e == s || v < -1 || (v < 0 && !allow_neg))
					return fj_error(ctx, (fj_loc){0}, "invalid size at '%s'", s);
				if (v < 0) {
					neg = true;
					v = 1;
				}
				f = v;
				s = e;
			} else if (is_id_start(*s)) {
				const char *b = s;
				while (is_id_char(*s))
					s++;
				fj_status st = fj_dim_symbol(m, b, (size_t)(s - b), &f);
				if (st != FJ_OK)
					return st;
			} else {
				return fj_error(ctx, (fj_loc){0}, "expected a size at '%s'", s);
			}
			if (neg && !first)
				return fj_error(ctx, (fj_loc){0}, "-1 cannot be part of a product");
			if (first)
				d = f;
			else if (!fj_dim_mul(m, d, f, &d))
				return fj_error(ctx, (fj_loc){0}, "size product overflows");
			first = false;
			s = skip_ws(s);
			if (*s != '*')
				break;
			s++;
		}
		if (neg && !first && *skip_ws(s) == '*')
			return fj_error(ctx, (fj_loc){0}, "-1 cannot be part of a product");
		if (minus1)
			minus1[r] = neg;
		dims[r++] = d;
		s = skip_ws(s);
		if (*s == ',') {
			s++;
			continue;
		}
		break;
	}
	if (bracket) {
		if (*s != ']')
			return fj_error(ctx, (fj_loc){0}, "expected ']' at '%s'", s);
		s++;
	}
	*rank = r;
	*end = s;
	return FJ_OK;
}

/* ---- the builder ---- */

struct fj_graph_builder {
	fj_builder b;
	fj_module *m;
	fj_graph *g;
};

fj_status fj_build_begin(fj_module *m, const char *name, fj_graph_builder **out)
{
	if (out)
		*out = NULL;
	if (!m)
		return FJ_ERR_INVALID;
	fj_context *ctx = m->ctx;
	if (!out || !name || !*name)
		return fj_api_arg_error(ctx, "fj_build_begin", "a graph name and out are needed");
	if (name[0] == '@')
		name++;
	fj_graph_builder *b = fj_alloc(ctx, sizeof *b);
	if (!b)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	fj_graph *g = fj_module_add_graph(m, name, (fj_loc){0});
	if (!g) {
		fj_free(ctx, b, sizeof *b);
		return m->oom ? FJ_ERR_NOMEM : FJ_ERR_INVALID;
	}
	b->m = m;
	b->g = g;
	fj_builder_init(&b->b, g, (fj_loc){0});
	*out = b;
	return FJ_OK;
}

fj_status fj_build_status(const fj_graph_builder *b) { return b ? b->b.status : FJ_ERR_INVALID; }

fj_value_id fj_build_param(fj_graph_builder *b, const char *name, const char *type)
{
	if (!b || b->b.status)
		return FJ_NO_VALUE;
	if (!name || !type) {
		fj_b_fail(&b->b, FJ_ERR_INVALID, "fj_build_param: a name and a type are needed");
		return FJ_NO_VALUE;
	}
	if (name[0] == '%')
		name++;
	const char *s = skip_ws(type);
	const char *e = s;
	while (is_id_char(*e))
		e++;
	fj_dtype dt;
	if (!fj_dtype_from_name(s, (size_t)(e - s), &dt)) {
		fj_b_fail(&b->b, FJ_ERR_INVALID, "fj_build_param: '%s' is not a type (expected e.g. f32[N,64])", type);
		return FJ_NO_VALUE;
	}
	fj_dim dims[FJ_MAX_RANK];
	int rank = 0;
	const char *end;
	if (*skip_ws(e) != '[') {
		fj_b_fail(&b->b, FJ_ERR_INVALID, "fj_build_param: '%s' is not a type (expected e.g. f32[N,64])", type);
		return FJ_NO_VALUE;
	}
	fj_status st = fj_api_parse_dims(b->m->ctx, b->m, e, NULL, dims, &rank, &end);
	if (st == FJ_OK && *skip_ws(end))
		st = fj_error(b->m->ctx, (fj_loc){0}, "fj_build_param: trailing text in type '%s'", type);
	if (st != FJ_OK) {
		b->b.status = st;
		return FJ_NO_VALUE;
	}
	fj_type t = {.dtype = dt, .rank = (uint8_t)rank, .dims = dims};
	return fj_b_param(&b->b, name, t);
}

fj_value_id fj_build_float(fj_graph_builder *b, double v) { return b ? fj_b_float(&b->b, v) : FJ_NO_VALUE; }
fj_value_id fj_build_int(fj_graph_builder *b, int64_t v) { return b ? fj_b_int(&b->b, v) : FJ_NO_VALUE; }
fj_value_id fj_build_bool(fj_graph_builder *b, int v) { return b ? fj_b_bool(&b->b, v != 0) : FJ_NO_VALUE; }

/* The most entries of a list attribute (fusejit.h, fj_attribute). */
#define FJ_ATTR_LIST_MAX (1 << 24)

static bool convert_attr(fj_graph_builder *b, const fj_attribute *a, fj_attr *out)
{
	fj_graph *g = b->g;
	fj_attr items[64];
	fj_attr *it = items;
	switch (a->kind) {
	case FJ_ATTR_INT: *out = fj_attr_int(a->i); return true;
	case FJ_ATTR_FLOAT: *out = fj_attr_float(a->f); return true;
	case FJ_ATTR_BOOL: *out = fj_attr_bool(a->i != 0); return true;
	case FJ_ATTR_DTYPE:
		if ((unsigned)a->dtype >= FJ_DT_COUNT)
			break;
		*out = fj_attr_dtype((fj_dtype)a->dtype);
		return true;
	case FJ_ATTR_NONE: *out = (fj_attr){.kind = FJ_AK_NONE}; return true;
	case FJ_ATTR_STRING:
		if (!a->s)
			break;
		*out = fj_attr_str(g, a->s);
		return true;
	case FJ_ATTR_INTS:
	case FJ_ATTR_FLOATS:
	case FJ_ATTR_BOOLS: {
		const void *src = a->kind == FJ_ATTR_FLOATS ? (const void *)a->floats : (const void *)a->ints;
		if (a->n && !src)
			break;
		if (a->n > FJ_ATTR_LIST_MAX) { /* a count that is no array's: refused before any allocation */
			fj_b_fail(&b->b, FJ_ERR_INVALID, "attribute '%s': a list of %zu entries (at most %d)",
			          a->name ? a->name : "?", a->n, FJ_ATTR_LIST_MAX);
			return false;
		}
		if (a->n > FJ_ARRAY_LEN(items) && !(it = fj_alloc(g->module->ctx, a->n * sizeof *it)))
			break;
		for (size_t k = 0; k < a->n; k++)
			it[k] = a->kind == FJ_ATTR_FLOATS ? fj_attr_float(a->floats[k])
			        : a->kind == FJ_ATTR_BOOLS ? fj_attr_bool(a->ints[k] != 0)
			                                   : fj_attr_int(a->ints[k]);
		*out = fj_attr_list(g, it, (uint32_t)a->n);
		if (it != items)
			fj_free(g->module->ctx, it, a->n * sizeof *it);
		return true;
	}
	case FJ_ATTR_SHAPE: {
		if (!a->s)
			break;
		fj_dim dims[FJ_MAX_RANK];
		bool m1[FJ_MAX_RANK];
		int rank;
		const char *end;
		if (fj_api_parse_dims(g->module->ctx, b->m, a->s, m1, dims, &rank, &end) != FJ_OK || *skip_ws(end)) {
			b->b.status = FJ_ERR_INVALID;
			return false;
		}
		for (int k = 0; k < rank; k++)
			items[k] = m1[k] ? fj_attr_int(-1) : fj_attr_size(dims[k]);
		*out = fj_attr_list(g, items, (uint32_t)rank);
		return true;
	}
	}
	fj_b_fail(&b->b, FJ_ERR_INVALID, "attribute '%s': invalid kind or value", a->name ? a->name : "?");
	return false;
}

fj_status fj_build_op(fj_graph_builder *b, const char *op, const fj_value_id *operands, size_t noperands,
                      const fj_attribute *attrs, size_t nattrs, fj_value_id *results, size_t nresults)
{
	if (!b)
		return FJ_ERR_INVALID;
	for (size_t k = 0; results && k < nresults; k++)
		results[k] = FJ_NO_VALUE;
	if (b->b.status)
		return b->b.status;
	fj_op o;
	if (!op || !fj_op_lookup(op, strlen(op), &o))
		return fj_b_fail(&b->b, FJ_ERR_INVALID, "unknown op '%s'", op ? op : "(null)");
	if ((noperands && !operands) || (nattrs && !attrs) || nattrs > 64)
		return fj_b_fail(&b->b, FJ_ERR_INVALID, "%s: invalid operand or attribute arrays", op);
	for (size_t k = 0; k < noperands; k++)
		if (operands[k] != FJ_NO_VALUE && operands[k] >= b->g->nvalues)
			return fj_b_fail(&b->b, FJ_ERR_INVALID, "%s: operand %zu is not a value of graph @%s", op, k,
			                 b->g->name);
	fj_named_attr na[64];
	for (size_t k = 0; k < nattrs; k++) {
		if (!attrs[k].name)
			return fj_b_fail(&b->b, FJ_ERR_INVALID, "%s: attribute %zu has no name", op, k);
		na[k].name = attrs[k].name;
		if (!convert_attr(b, &attrs[k], &na[k].value))
			return b->b.status ? b->b.status : FJ_ERR_INVALID;
	}
	fj_vid res[FJ_MAX_SPEC];
	const fj_opinfo *oi = fj_op_info(b->m->ctx, o);
	size_t want = oi->variadic_results ? nresults : oi->nresults;
	if (want > FJ_MAX_SPEC)
		return fj_b_fail(&b->b, FJ_ERR_INVALID, "%s: too many results", op);
	fj_b_op(&b->b, o, operands, (uint32_t)noperands, na, (uint32_t)nattrs, res, (uint32_t)want);
	if (b->b.status)
		return b->b.status;
	if (nresults != want)
		return fj_b_fail(&b->b, FJ_ERR_INVALID, "%s has %zu results, not %zu", op, want, nresults);
	for (size_t k = 0; results && k < nresults; k++)
		results[k] = res[k];
	return FJ_OK;
}

fj_value_id fj_build_op1(fj_graph_builder *b, const char *op, const fj_value_id *operands, size_t noperands,
                         const fj_attribute *attrs, size_t nattrs)
{
	fj_value_id r = FJ_NO_VALUE;
	if (fj_build_op(b, op, operands, noperands, attrs, nattrs, &r, 1) != FJ_OK)
		return FJ_NO_VALUE;
	return r;
}

static void remove_graph(fj_graph_builder *b)
{
	for (uint32_t i = 0; i < b->m->ngraphs; i++)
		if (b->m->graphs[i] == b->g) {
			fj_module_remove_graph(b->m, i);
			break;
		}
}

fj_status fj_build_end(fj_graph_builder *b, const fj_value_id *results, size_t nresults)
{
	if (!b)
		return FJ_ERR_INVALID;
	fj_context *ctx = b->m->ctx;
	fj_status st = b->b.status;
	if (st == FJ_OK && nresults && !results)
		st = fj_b_fail(&b->b, FJ_ERR_INVALID, "fj_build_end: results may not be NULL");
	for (size_t k = 0; st == FJ_OK && k < nresults; k++)
		if (results[k] >= b->g->nvalues)
			st = fj_b_fail(&b->b, FJ_ERR_INVALID, "fj_build_end: result %zu is not a value of graph @%s", k,
			               b->g->name);
	if (st == FJ_OK)
		st = fj_b_return(&b->b, results, (uint32_t)nresults);
	if (st == FJ_OK)
		st = fj_verify_graph(b->g);
	if (st != FJ_OK)
		remove_graph(b);
	fj_free(ctx, b, sizeof *b);
	return st;
}

void fj_build_abort(fj_graph_builder *b)
{
	if (!b)
		return;
	remove_graph(b);
	fj_free(b->m->ctx, b, sizeof *b);
}

/* ---- the kernel cache ---- */

fj_status fj_context_set_cache(fj_context *ctx, const char *dir, uint64_t max_bytes)
{
	if (!ctx)
		return FJ_ERR_INVALID;
	fj_status st = fj_context_set_option(ctx, "cache_dir", dir);
	if (st != FJ_OK)
		return st;
	if (max_bytes) {
		char mb[32];
		snprintf(mb, sizeof mb, "%llu", (unsigned long long)((max_bytes + (1u << 20) - 1) >> 20));
		st = fj_context_set_option(ctx, "cache_max_mb", mb);
	} else {
		st = fj_context_set_option(ctx, "cache_max_mb", NULL);
	}
	if (st != FJ_OK)
		return st;
	return fj_kcache_configure(ctx, NULL, max_bytes);
}

void fj_context_cache_stats(fj_context *ctx, fj_cache_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof *out);
	if (!ctx)
		return;
	uint64_t c[FJ_KC_COUNT];
	fj_kcache_counters(ctx, c);
	out->kernels_compiled = c[FJ_KC_KERNELS_COMPILED];
	out->kernels_loaded = c[FJ_KC_KERNELS_LOADED];
	out->memory_hits = c[FJ_KC_MEMORY_HITS];
	out->disk_hits = c[FJ_KC_DISK_HITS];
	out->disk_misses = c[FJ_KC_DISK_MISSES];
	out->disk_corrupt = c[FJ_KC_DISK_CORRUPT];
	out->disk_stores = c[FJ_KC_DISK_STORES];
	out->disk_evictions = c[FJ_KC_DISK_EVICTIONS];
}
