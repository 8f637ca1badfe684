/* passmgr.c -- the pass manager: registry, pipeline parser, instrumentation.
 *
 * The registry is passes.def (LLVM's PassRegistry.def). The pipeline grammar
 * (IR.md §4):
 *   pipeline := [pass {',' pass}]
 *   pass     := NAME ['{' [option {',' option}] '}']
 *   option   := KEY ['=' value]            a bare KEY means KEY=true
 *   value    := WORD | '"' chars '"'        WORD: [A-Za-z0-9_.+-]+; escapes \" \\
 * Blanks around tokens are ignored. Errors name the column in the string.
 *
 * A pass's options come from its spec string, "key: TYPE = default; ...", TYPE
 * one of bool, int, str or a list of words a|b|c. Specs are static, so they are
 * parsed on demand (a handful of options at most).
 *
 * Running: each pass gets an fj_pass_run; after it the manager checks for
 * allocation failure, verifies (verify-each), dumps (print-after), counts
 * (stats) and times (time-passes). Output goes only where the options say.
 */
#include <ctype.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "passes/pass.h"

/* ---- registry ---- */

static const fj_pass_info registry[] = {
#define PASS(name, run, options, description) {#name, run, options, description},
#include "passes.def"
};

size_t fj_pass_count(void) { return FJ_ARRAY_LEN(registry); }

const fj_pass_info *fj_pass_at(size_t i) { return i < FJ_ARRAY_LEN(registry) ? &registry[i] : NULL; }

const fj_pass_info *fj_pass_lookup(const char *name, size_t len)
{
	for (size_t i = 0; i < FJ_ARRAY_LEN(registry); i++)
		if (strncmp(registry[i].name, name, len) == 0 && registry[i].name[len] == 0)
			return &registry[i];
	return NULL;
}

const char *fj_named_pipeline(const char *name)
{
	if (strcmp(name, "default") == 0)
		return "verify,decompose,canonicalize,fuse,schedule";
	if (strcmp(name, "train") == 0)
		return "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition,fuse,schedule";
	return NULL;
}

/* ---- option specs ---- */

#define MAX_OPTS 8

typedef struct opt_spec {
	const char *name, *type, *dflt; /* slices of the spec string */
	size_t name_len, type_len, dflt_len;
	fj_pass_opt_kind kind;
} opt_spec;

static const char *trim(const char *p, const char *end, size_t *len)
{
	while (p < end && *p == ' ')
		p++;
	while (end > p && end[-1] == ' ')
		end--;
	*len = (size_t)(end - p);
	return p;
}

static bool slice_is(const char *s, size_t n, const char *word)
{
	return strlen(word) == n && strncmp(s, word, n) == 0;
}

/* Splits a spec into its options; a malformed spec is a bug in passes.def. */
static size_t parse_spec(const char *spec, opt_spec *out)
{
	size_t n = 0;
	const char *p = spec;
	while (*p) {
		const char *end = strchr(p, ';');
		if (!end)
			end = p + strlen(p);
		const char *colon = memchr(p, ':', (size_t)(end - p));
		const char *eq = colon ? memchr(colon, '=', (size_t)(end - colon)) : NULL;
		FJ_ASSERT(colon && eq && n < MAX_OPTS);
		opt_spec *o = &out[n++];
		o->name = trim(p, colon, &o->name_len);
		o->type = trim(colon + 1, eq, &o->type_len);
		o->dflt = trim(eq + 1, end, &o->dflt_len);
		if (slice_is(o->type, o->type_len, "bool"))
			o->kind = FJ_POPT_BOOL;
		else if (slice_is(o->type, o->type_len, "int"))
			o->kind = FJ_POPT_INT;
		else if (slice_is(o->type, o->type_len, "str"))
			o->kind = FJ_POPT_STR;
		else
			o->kind = FJ_POPT_ENUM;
		p = *end ? end + 1 : end;
	}
	return n;
}

/* Is s[0..n) one of the words of "a|b|c"? */
static bool enum_has(const opt_spec *o, const char *s, size_t n)
{
	const char *p = o->type, *end = o->type + o->type_len;
	while (p <= end) {
		const char *bar = memchr(p, '|', (size_t)(end - p));
		if (!bar)
			bar = end;
		size_t wl;
		const char *w = trim(p, bar, &wl);
		if (wl == n && strncmp(w, s, n) == 0)
			return true;
		p = bar + 1;
	}
	return false;
}

/* ---- parsed pipelines ---- */

typedef struct pl_entry {
	const fj_pass_info *pass;
	const char *text;
	fj_pass_optval *opts;
	size_t nopts;
} pl_entry;

struct fj_pipeline {
	fj_context *ctx;
	fj_arena arena;
	pl_entry *entries;
	size_t n, cap;
};

typedef struct pl_parser {
	fj_pipeline *pl;
	const char *text, *p;
	fj_status st;
} pl_parser;

static fj_status pl_error(pl_parser *ps, const char *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static fj_status pl_error(pl_parser *ps, const char *at, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (ps->st == FJ_OK)
		ps->st = fj_error_status(ps->pl->ctx, FJ_ERR_PARSE, (fj_loc){0},
		                         "in pipeline '%s' at column %d: %s", ps->text,
		                         (int)(at - ps->text) + 1, msg);
	return ps->st;
}

static fj_status pl_nomem(pl_parser *ps)
{
	if (ps->st == FJ_OK)
		ps->st = fj_error_status(ps->pl->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	return ps->st;
}

static void skip_blank(pl_parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n')
		ps->p++;
}

static bool is_word_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '+' || c == '-';
}

static bool is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }

static bool is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* A value: a bare word or a quoted string, copied (unescaped) to the arena. */
static const char *pl_value(pl_parser *ps)
{
	const char *start = ps->p;
	if (*ps->p == '"') {
		fj_buf b;
		fj_buf_init(&b, ps->pl->ctx);
		ps->p++;
		while (*ps->p != '"') {
			if (!*ps->p) {
				fj_buf_free(&b);
				pl_error(ps, start, "unterminated string");
				return NULL;
			}
			if (*ps->p == '\\' && (ps->p[1] == '"' || ps->p[1] == '\\'))
				ps->p++;
			fj_buf_putn(&b, ps->p, 1);
			ps->p++;
		}
		ps->p++;
		const char *s = b.oom ? NULL : fj_arena_strndup(&ps->pl->arena, b.data ? b.data : "", b.len);
		fj_buf_free(&b);
		if (!s)
			pl_nomem(ps);
		return s;
	}
	while (is_word_char(*ps->p))
		ps->p++;
	if (ps->p == start) {
		if (*start)
			pl_error(ps, start, "expected a value, found '%c'", *start);
		else
			pl_error(ps, start, "expected a value at the end");
		return NULL;
	}
	const char *s = fj_arena_strndup(&ps->pl->arena, start, (size_t)(ps->p - start));
	if (!s)
		pl_nomem(ps);
	return s;
}

/* Checks a value against its option's type and stores it. */
static void pl_set_option(pl_parser *ps, const opt_spec *o, fj_pass_optval *v, const char *val,
                          const char *at, const char *pass)
{
	size_t n = strlen(val);
	switch (o->kind) {
	case FJ_POPT_BOOL:
		if (strcmp(val, "true") == 0)
			v->b = true;
		else if (strcmp(val, "false") == 0)
			v->b = false;
		else
			pl_error(ps, at, "option '%s' of pass '%s' takes true or false, not '%s'",
			         v->name, pass, val);
		break;
	case FJ_POPT_INT: {
		const char *q = val + (*val == '-');
		bool ok = *q != 0;
		for (; *q; q++)
			ok = ok && isdigit((unsigned char)*q);
		long long i = 0;
		if (ok && sscanf(val, "%lld", &i) == 1)
			v->i = i;
		else
			pl_error(ps, at, "option '%s' of pass '%s' takes an integer, not '%s'", v->name, pass, val);
		break;
	}
	case FJ_POPT_STR:
		v->s = val;
		break;
	case FJ_POPT_ENUM:
		if (enum_has(o, val, n))
			v->s = val;
		else
			pl_error(ps, at, "option '%s' of pass '%s' takes %.*s, not '%s'", v->name, pass,
			         (int)o->type_len, o->type, val);
		break;
	}
}

static void pl_defaults(pl_parser *ps, const opt_spec *specs, size_t n, fj_pass_optval *vals)
{
	for (size_t i = 0; i < n && ps->st == FJ_OK; i++) {
		const opt_spec *o = &specs[i];
		fj_pass_optval *v = &vals[i];
		v->name = fj_arena_strndup(&ps->pl->arena, o->name, o->name_len);
		const char *d = fj_arena_strndup(&ps->pl->arena, o->dflt, o->dflt_len);
		if (!v->name || !d) {
			pl_nomem(ps);
			return;
		}
		v->kind = (uint8_t)o->kind;
		if (o->dflt_len >= 2 && d[0] == '"') /* a quoted default */
			d = fj_arena_strndup(&ps->pl->arena, o->dflt + 1, o->dflt_len - 2);
		if (!d) {
			pl_nomem(ps);
			return;
		}
		pl_set_option(ps, o, v, d, ps->p, "?");
		FJ_ASSERT(ps->st == FJ_OK || ps->st == FJ_ERR_NOMEM); /* passes.def is well-formed */
	}
}

static void pl_pass(pl_parser *ps)
{
	skip_blank(ps);
	const char *start = ps->p;
	if (!is_ident_start(*ps->p)) {
		if (*ps->p)
			pl_error(ps, start, "expected a pass name, found '%c'", *ps->p);
		else
			pl_error(ps, start, "expected a pass name at the end");
		return;
	}
	while (is_ident_char(*ps->p))
		ps->p++;
	size_t name_len = (size_t)(ps->p - start);
	const fj_pass_info *pass = fj_pass_lookup(start, name_len);
	if (!pass) {
		pl_error(ps, start, "unknown pass '%.*s'", (int)name_len, start);
		return;
	}
	opt_spec specs[MAX_OPTS];
	size_t nspecs = parse_spec(pass->options, specs);
	fj_pass_optval *vals = fj_arena_alloc(&ps->pl->arena, (nspecs ? nspecs : 1) * sizeof *vals);
	if (!vals) {
		pl_nomem(ps);
		return;
	}
	pl_defaults(ps, specs, nspecs, vals);
	const char *end = ps->p;
	skip_blank(ps);
	if (*ps->p == '{') {
		ps->p++;
		skip_blank(ps);
		if (*ps->p == '}') {
			ps->p++;
		} else {
			for (;;) {
				skip_blank(ps);
				const char *kstart = ps->p;
				if (!is_ident_start(*ps->p)) {
					pl_error(ps, kstart, "expected an option name of pass '%s'", pass->name);
					return;
				}
				while (is_ident_char(*ps->p))
					ps->p++;
				size_t klen = (size_t)(ps->p - kstart);
				size_t k = 0;
				while (k < nspecs &&
				       !(specs[k].name_len == klen && strncmp(specs[k].name, kstart, klen) == 0))
					k++;
				if (k == nspecs) {
					if (nspecs == 0)
						pl_error(ps, kstart, "pass '%s' has no option '%.*s' (it takes none)",
						         pass->name, (int)klen, kstart);
					else
						pl_error(ps, kstart, "pass '%s' has no option '%.*s' (options: %s)",
						         pass->name, (int)klen, kstart, pass->options);
					return;
				}
				if (vals[k].given) {
					pl_error(ps, kstart, "option '%.*s' of pass '%s' is given twice", (int)klen,
					         kstart, pass->name);
					return;
				}
				vals[k].given = true;
				skip_blank(ps);
				const char *val = "true", *vat = ps->p;
				if (*ps->p == '=') {
					ps->p++;
					skip_blank(ps);
					vat = ps->p;
					val = pl_value(ps);
					if (!val)
						return;
				}
				pl_set_option(ps, &specs[k], &vals[k], val, vat, pass->name);
				if (ps->st)
					return;
				skip_blank(ps);
				if (*ps->p == ',') {
					ps->p++;
					continue;
				}
				if (*ps->p == '}') {
					ps->p++;
					break;
				}
				if (*ps->p)
					pl_error(ps, ps->p, "expected ',' or '}' in the options of pass '%s', found '%c'",
					         pass->name, *ps->p);
				else
					pl_error(ps, ps->p, "missing '}' after the options of pass '%s'", pass->name);
				return;
			}
		}
		end = ps->p;
	}
	if (ps->pl->n == ps->pl->cap) {
		size_t ncap = ps->pl->cap ? ps->pl->cap * 2 : 8;
		pl_entry *ne = fj_arena_grow(&ps->pl->arena, ps->pl->entries, ps->pl->n, ncap, sizeof *ne);
		if (!ne) {
			pl_nomem(ps);
			return;
		}
		ps->pl->entries = ne;
		ps->pl->cap = ncap;
	}
	pl_entry *e = &ps->pl->entries[ps->pl->n];
	e->pass = pass;
	e->opts = vals;
	e->nopts = nspecs;
	e->text = fj_arena_strndup(&ps->pl->arena, start, (size_t)(end - start));
	if (!e->text) {
		pl_nomem(ps);
		return;
	}
	ps->pl->n++;
}

fj_status fj_parse_pipeline(fj_context *ctx, const char *text, fj_pipeline **out)
{
	*out = NULL;
	fj_pipeline *pl = fj_alloc(ctx, sizeof *pl);
	if (!pl)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	memset(pl, 0, sizeof *pl);
	pl->ctx = ctx;
	fj_arena_init(&pl->arena, ctx);
	pl_parser ps = {pl, text, text, FJ_OK};
	skip_blank(&ps);
	if (*ps.p) {
		for (;;) {
			pl_pass(&ps);
			if (ps.st)
				break;
			skip_blank(&ps);
			if (!*ps.p)
				break;
			if (*ps.p != ',') {
				pl_error(&ps, ps.p, "expected ',' between passes, found '%c'", *ps.p);
				break;
			}
			ps.p++;
		}
	}
	if (ps.st) {
		fj_pipeline_free(pl);
		return ps.st;
	}
	*out = pl;
	return FJ_OK;
}

void fj_pipeline_free(fj_pipeline *p)
{
	if (!p)
		return;
	fj_arena_free(&p->arena);
	fj_free(p->ctx, p, sizeof *p);
}

size_t fj_pipeline_length(const fj_pipeline *p) { return p->n; }

const fj_pass_info *fj_pipeline_pass(const fj_pipeline *p, size_t i)
{
	FJ_ASSERT(i < p->n);
	return p->entries[i].pass;
}

const char *fj_pipeline_pass_text(const fj_pipeline *p, size_t i)
{
	FJ_ASSERT(i < p->n);
	return p->entries[i].text;
}

const fj_pass_optval *fj_pipeline_pass_options(const fj_pipeline *p, size_t i, size_t *n)
{
	FJ_ASSERT(i < p->n);
	*n = p->entries[i].nopts;
	return p->entries[i].opts;
}

fj_status fj_pipeline_check_available(const fj_pipeline *p)
{
	for (size_t i = 0; i < p->n; i++)
		if (!p->entries[i].pass->run)
			return fj_error_status(p->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
			                       "pass '%s' is not yet available in this build",
			                       p->entries[i].pass->name);
	return FJ_OK;
}

/* ---- options as a pass reads them ---- */

static const fj_pass_optval *find_opt(const fj_pass_run *r, const char *name)
{
	for (size_t i = 0; i < r->nopts; i++)
		if (strcmp(r->opts[i].name, name) == 0)
			return &r->opts[i];
	FJ_UNREACHABLE(); /* the pass asked for an option its spec lacks */
}

bool fj_pass_opt_bool(const fj_pass_run *r, const char *name) { return find_opt(r, name)->b; }
int64_t fj_pass_opt_int(const fj_pass_run *r, const char *name) { return find_opt(r, name)->i; }
const char *fj_pass_opt_str(const fj_pass_run *r, const char *name) { return find_opt(r, name)->s; }

void fj_pass_stat(fj_pass_run *r, const char *fmt, ...)
{
	if (!r->stats)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fj_buf_puts(r->stats, line);
	fj_buf_puts(r->stats, "\n");
}

/* ---- running ---- */

static void emit(const fj_pipeline_opts *o, const char *text, size_t len)
{
	if (!len)
		return;
	if (o->write)
		o->write(o->write_ud, text, len);
	else if (o->out) {
		fwrite(text, 1, len, o->out);
		fflush(o->out);
	}
}

static bool wants_dump(const fj_pipeline_opts *o, const pl_entry *e)
{
	if (o->print_after_all)
		return true;
	for (size_t i = 0; i < o->nprint_after; i++)
		if (strcmp(o->print_after[i], e->pass->name) == 0 || strcmp(o->print_after[i], e->text) == 0)
			return true;
	return false;
}

static void count_graph(const fj_graph *g, size_t *nodes)
{
	for (uint32_t i = 0; i < g->nnodes; i++) {
		(*nodes)++;
		if (g->nodes[i].body)
			count_graph(g->nodes[i].body, nodes);
	}
}

static size_t count_nodes(const fj_module *m)
{
	size_t n = 0;
	for (uint32_t i = 0; i < m->ngraphs; i++)
		count_graph(m->graphs[i], &n);
	return n;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void time_report(fj_buf *b, const fj_pipeline *p, const double *secs)
{
	double total = 0;
	for (size_t i = 0; i < p->n; i++)
		total += secs[i];
	fj_buf_puts(b, "===-------------------------------------------------------------------------===\n"
	               "                      ... Pass execution timing report ...\n"
	               "===-------------------------------------------------------------------------===\n");
	fj_buf_printf(b, "  Total Execution Time: %.4f seconds\n\n", total);
	fj_buf_puts(b, "  ----Wall Time----  ----Name----\n");
	for (size_t i = 0; i < p->n; i++)
		fj_buf_printf(b, "  %8.4f (%5.1f%%)  %s\n", secs[i], total > 0 ? 100.0 * secs[i] / total : 0.0,
		              p->entries[i].text);
	fj_buf_printf(b, "  %8.4f (100.0%%)  Total\n", total);
}

fj_status fj_run_parsed_pipeline(fj_module *m, const fj_pipeline *p, const fj_pipeline_opts *o)
{
	static const fj_pipeline_opts none;
	fj_context *ctx = m->ctx;
	if (!o)
		o = &none;
	fj_status st = fj_pipeline_check_available(p);
	if (st)
		return st;
	double *secs = NULL;
	if (o->time_passes) {
		secs = fj_alloc(ctx, (p->n ? p->n : 1) * sizeof *secs);
		if (!secs)
			return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		memset(secs, 0, (p->n ? p->n : 1) * sizeof *secs);
	}
	fj_buf out, own; /* own: the pass's statistics lines */
	fj_buf_init(&out, ctx);
	fj_buf_init(&own, ctx);
	for (size_t i = 0; i < p->n && st == FJ_OK; i++) {
		const pl_entry *e = &p->entries[i];
		fj_pass_run r = {m, e->pass, e->text, e->opts, e->nopts, o->stats ? &own : NULL};
		size_t graphs0 = m->ngraphs, nodes0 = o->stats ? count_nodes(m) : 0;
		size_t errors0 = fj_context_error_count(ctx);
		double t0 = secs ? now_s() : 0;
		own.len = 0;
		st = e->pass->run(&r);
		if (secs)
			secs[i] = now_s() - t0;
		if (st == FJ_OK && m->oom)
			st = FJ_ERR_NOMEM;
		if (st != FJ_OK) {
			if (st == FJ_ERR_NOMEM)
				fj_error_status(ctx, st, (fj_loc){0}, "out of memory in pass '%s'", e->text);
			else if (fj_context_error_count(ctx) == errors0)
				fj_error_status(ctx, st, (fj_loc){0}, "pass '%s' failed", e->text);
			break;
		}
		if (o->stats) {
			out.len = 0;
			fj_buf_printf(&out, "pass %s: %zu graphs, %zu nodes -> %zu graphs, %zu nodes\n", e->text,
			              graphs0, nodes0, (size_t)m->ngraphs, count_nodes(m));
			if (own.len)
				fj_buf_putn(&out, own.data, own.len);
			emit(o, out.data, out.len);
		}
		if (o->verify_each && e->pass->run != fj_pass_verify) {
			st = fj_verify_module(m);
			if (st) {
				fj_error_status(ctx, st, (fj_loc){0}, "the IR is invalid after pass '%s'", e->text);
				break;
			}
		}
		if (wants_dump(o, e)) {
			out.len = 0;
			fj_buf_printf(&out, "// -----// IR after %s //----- //\n", e->text);
			st = fj_print_module(&out, m);
			if (st == FJ_OK && out.oom)
				st = FJ_ERR_NOMEM;
			if (st) {
				fj_error_status(ctx, st, (fj_loc){0}, "out of memory printing the IR after '%s'", e->text);
				break;
			}
			emit(o, out.data, out.len);
			out.len = 0;
		}
	}
	if (st == FJ_OK && secs) {
		out.len = 0;
		time_report(&out, p, secs);
		emit(o, out.data, out.len);
	}
	if (secs)
		fj_free(ctx, secs, (p->n ? p->n : 1) * sizeof *secs);
	fj_buf_free(&own);
	fj_buf_free(&out);
	return st;
}

fj_status fj_run_pipeline(fj_module *m, const char *pipeline, const fj_pipeline_opts *o)
{
	fj_pipeline *p;
	fj_status st = fj_parse_pipeline(m->ctx, pipeline, &p);
	if (st)
		return st;
	st = fj_run_parsed_pipeline(m, p, o);
	fj_pipeline_free(p);
	return st;
}
