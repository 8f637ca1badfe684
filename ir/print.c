/* print.c -- the text printer (IR.md §1, §4, §5): print -> parse -> print is
 * the identity.
 *
 * The canonical style, used everywhere:
 *   - one statement per line, indented two spaces per nesting level (a
 *     fusion.kernel body is one level deeper than its node);
 *   - ", " between parameters, operands, results, result types and attributes;
 *   - no space inside brackets: types `f32[N,4096]`, `f32[]`, and attribute
 *     lists `dims=[0,1]`, `shape=[N,4096]` (as in IR.md §4's example);
 *   - result types always printed, after " : ";
 *   - declared attributes in the op table's order, left out when not written
 *     or fj_attr_equal to the spec's default (so an int 1 where the default is
 *     the float 1.0 is printed: the text keeps what was written), then the
 *     annotations in IR.md §3's order: recomputable, nograd, schedule, kernel,
 *     num_fwd_outputs; booleans as name=true / name=false, never bare
 *     (recomputable is tri-state and prints either way when set; nograd
 *     prints only when true, false being its absence);
 *   - floats as Python's repr does: the shortest digits that read back to the
 *     same bits, fixed notation for exponents in [-4, 16), else d.ddde±XX, and
 *     always with a '.' or an exponent (1.0, 0.1, 1e-05, 1e+300, -0.0, inf,
 *     -inf, nan), so they lex as FLOAT, never as INT;
 *   - strings quoted, escaping \" \\ \n \t;
 *   - graphs separated by one blank line; the text ends with a newline;
 *     fj_print_graph on a fusion.kernel body prints its statements and
 *     `yield` at indentation 0.
 * The printer never fails on a malformed graph (ids out of range print as
 * `%<invalid N>`), so it can be used to show what the verifier rejects. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ---- fj_buf ---- */

void fj_buf_init(fj_buf *b, fj_context *ctx)
{
	memset(b, 0, sizeof *b);
	b->ctx = ctx;
}

void fj_buf_free(fj_buf *b)
{
	if (b->data)
		fj_free(b->ctx, b->data, b->cap);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* Room for n more bytes and the NUL. */
static bool buf_reserve(fj_buf *b, size_t n)
{
	if (b->oom)
		return false;
	if (b->len + n + 1 <= b->cap)
		return true;
	size_t ncap = b->cap ? b->cap : 256;
	while (ncap < b->len + n + 1) {
		if (ncap > SIZE_MAX / 2) {
			b->oom = true;
			return false;
		}
		ncap *= 2;
	}
	char *nd = fj_realloc(b->ctx, b->data, b->cap, ncap);
	if (!nd) {
		b->oom = true;
		return false;
	}
	b->data = nd;
	b->cap = ncap;
	return true;
}

void fj_buf_putn(fj_buf *b, const char *s, size_t n)
{
	if (!buf_reserve(b, n))
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = 0;
}

void fj_buf_puts(fj_buf *b, const char *s) { fj_buf_putn(b, s, strlen(s)); }

void fj_buf_printf(fj_buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		fj_buf_putn(b, small, (size_t)n);
		return;
	}
	if (!buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* ---- floats ---- */

void fj_format_float(double f, char *buf, size_t size)
{
	if (size == 0)
		return;
	if (isnan(f)) {
		snprintf(buf, size, "%s", signbit(f) ? "-nan" : "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, size, "%s", f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0) {
		snprintf(buf, size, "%s", signbit(f) ? "-0.0" : "0.0");
		return;
	}
	/* The shortest %e that reads back to the same double. */
	char e[40];
	for (int prec = 0; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec, f);
		if (strtod(e, NULL) == f)
			break;
	}
	/* e = [-]D[.DDD]e±XX: collect the digits and the exponent. */
	const char *p = e;
	bool neg = *p == '-';
	if (neg)
		p++;
	char digits[24];
	int nd = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.' && nd < (int)sizeof digits - 1)
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	int exp = *p == 'e' ? atoi(p + 1) : 0;

	char out[64];
	size_t k = 0;
	if (neg)
		out[k++] = '-';
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			out[k++] = '0';
			out[k++] = '.';
			for (int i = 0; i < -exp - 1; i++)
				out[k++] = '0';
			for (int i = 0; i < nd; i++)
				out[k++] = digits[i];
		} else {
			for (int i = 0; i <= exp; i++)
				out[k++] = i < nd ? digits[i] : '0';
			out[k++] = '.';
			if (nd > exp + 1)
				for (int i = exp + 1; i < nd; i++)
					out[k++] = digits[i];
			else
				out[k++] = '0';
		}
		out[k] = 0;
	} else {
		out[k++] = digits[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int i = 1; i < nd; i++)
				out[k++] = digits[i];
		}
		snprintf(out + k, sizeof out - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
	snprintf(buf, size, "%s", out);
}

/* ---- pieces ---- */

static void put_float(fj_buf *b, double f)
{
	char s[64];
	fj_format_float(f, s, sizeof s);
	fj_buf_puts(b, s);
}

static void put_dim(fj_buf *b, const fj_module *m, fj_dim d)
{
	if (d < 0 && (uint64_t)(-(d + 1)) >= m->nexprs) {
		fj_buf_printf(b, "<invalid size %lld>", (long long)d);
		return;
	}
	char s[256];
	int n = fj_dim_format(m, d, s, sizeof s);
	if (n >= 0 && (size_t)n >= sizeof s) {
		char *big = fj_alloc(m->ctx, (size_t)n + 1);
		if (!big) {
			fj_buf_putn(b, s, sizeof s - 1);
			return;
		}
		fj_dim_format(m, d, big, (size_t)n + 1);
		fj_buf_puts(b, big);
		fj_free(m->ctx, big, (size_t)n + 1);
		return;
	}
	fj_buf_puts(b, s);
}

static void put_type(fj_buf *b, const fj_module *m, const fj_type *t)
{
	fj_buf_puts(b, fj_dtype_name(t->dtype));
	if (t->rank > FJ_MAX_RANK || (t->rank && !t->dims)) {
		fj_buf_printf(b, "[<invalid rank %d>]", t->rank);
		return;
	}
	fj_buf_putn(b, "[", 1);
	for (int i = 0; i < t->rank; i++) {
		if (i)
			fj_buf_putn(b, ",", 1);
		put_dim(b, m, t->dims[i]);
	}
	fj_buf_putn(b, "]", 1);
}

static void put_string(fj_buf *b, const char *s)
{
	fj_buf_putn(b, "\"", 1);
	for (const char *p = s; *p; p++) {
		switch (*p) {
		case '"': fj_buf_putn(b, "\\\"", 2); break;
		case '\\': fj_buf_putn(b, "\\\\", 2); break;
		case '\n': fj_buf_putn(b, "\\n", 2); break;
		case '\t': fj_buf_putn(b, "\\t", 2); break;
		default: fj_buf_putn(b, p, 1); break;
		}
	}
	fj_buf_putn(b, "\"", 1);
}

static void put_attr_value(fj_buf *b, const fj_module *m, const fj_attr *a, int depth)
{
	switch (a->kind) {
	case FJ_AK_ABSENT:
	case FJ_AK_NONE: fj_buf_puts(b, "none"); break;
	case FJ_AK_BOOL: fj_buf_puts(b, a->u.b ? "true" : "false"); break;
	case FJ_AK_INT: fj_buf_printf(b, "%lld", (long long)a->u.i); break;
	case FJ_AK_FLOAT: put_float(b, a->u.f); break;
	case FJ_AK_STR: put_string(b, a->u.s ? a->u.s : ""); break;
	case FJ_AK_DTYPE: fj_buf_puts(b, fj_dtype_name(a->u.dt)); break;
	case FJ_AK_DIM: put_dim(b, m, a->u.dim); break;
	case FJ_AK_LIST:
		fj_buf_putn(b, "[", 1);
		for (uint32_t i = 0; i < a->n && a->u.items; i++) {
			if (i)
				fj_buf_putn(b, ",", 1);
			if (depth < 16)
				put_attr_value(b, m, &a->u.items[i], depth + 1);
		}
		fj_buf_putn(b, "]", 1);
		break;
	default: fj_buf_printf(b, "<invalid attribute kind %d>", a->kind); break;
	}
}

/* Attribute lists: "{a=1, b=2}" opened lazily, so nothing prints when empty. */
typedef struct attr_list {
	fj_buf *b;
	int n;
} attr_list;

static void attr_begin(attr_list *al, const char *name)
{
	fj_buf_puts(al->b, al->n++ ? ", " : " {");
	fj_buf_puts(al->b, name);
	fj_buf_putn(al->b, "=", 1);
}

static void attr_end(attr_list *al)
{
	if (al->n)
		fj_buf_putn(al->b, "}", 1);
}

static void put_tri(attr_list *al, const char *name, uint8_t tri)
{
	if (tri == FJ_TRI_TRUE || tri == FJ_TRI_FALSE) {
		attr_begin(al, name);
		fj_buf_puts(al->b, tri == FJ_TRI_TRUE ? "true" : "false");
	}
}

static void put_value_name(fj_buf *b, const fj_value *v)
{
	fj_buf_putn(b, "%", 1);
	fj_buf_puts(b, v->name ? v->name : "<unnamed>");
}

static void put_operand(fj_buf *b, const fj_graph *g, fj_vid v)
{
	if (v == FJ_NOVAL) {
		fj_buf_puts(b, "none");
		return;
	}
	if (v >= g->nvalues) {
		fj_buf_printf(b, "%%<invalid %u>", v);
		return;
	}
	const fj_value *val = &g->values[v];
	if (val->kind != FJ_VK_LITERAL) {
		put_value_name(b, val);
		return;
	}
	switch (val->lit.kind) {
	case FJ_LIT_INT: fj_buf_printf(b, "%lld", (long long)val->lit.i); break;
	case FJ_LIT_FLOAT: put_float(b, val->lit.f); break;
	case FJ_LIT_BOOL: fj_buf_puts(b, val->lit.b ? "true" : "false"); break;
	default: fj_buf_puts(b, "<invalid literal>"); break;
	}
}

static void indent(fj_buf *b, int level)
{
	for (int i = 0; i < level; i++)
		fj_buf_putn(b, "  ", 2);
}

static void put_body(fj_buf *b, const fj_graph *g, int level);

static void put_node(fj_buf *b, const fj_graph *g, const fj_node *n, int level)
{
	const fj_module *m = g->module;
	const fj_context *ctx = m->ctx;
	indent(b, level);
	if ((n->nopnds && !n->opnds) || (n->nres && !n->res)) {
		fj_buf_printf(b, "<node without operand or result arrays: %s>\n",
		              (unsigned)n->op < FJ_OP_COUNT ? fj_op_name(n->op) : "?");
		return;
	}
	if (n->nres) {
		for (uint32_t i = 0; i < n->nres; i++) {
			if (i)
				fj_buf_puts(b, ", ");
			if (n->res[i] < g->nvalues)
				put_value_name(b, &g->values[n->res[i]]);
			else
				fj_buf_printf(b, "%%<invalid %u>", n->res[i]);
		}
		fj_buf_puts(b, " = ");
	}
	bool known = (unsigned)n->op < FJ_OP_COUNT;
	fj_buf_puts(b, known ? fj_op_name(n->op) : "<invalid op>");
	fj_buf_putn(b, "(", 1);
	for (uint32_t i = 0; i < n->nopnds; i++) {
		if (i)
			fj_buf_puts(b, ", ");
		put_operand(b, g, n->opnds[i]);
	}
	fj_buf_putn(b, ")", 1);

	attr_list al = {b, 0};
	if (known && n->attrs) {
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		for (int i = 0; i < oi->nattrs; i++) {
			const fj_attr *a = &n->attrs[i];
			if (a->kind == FJ_AK_ABSENT)
				continue;
			if (!oi->attrs[i].required && fj_attr_equal(a, &oi->attrs[i].dflt))
				continue;
			attr_begin(&al, oi->attrs[i].name);
			put_attr_value(b, m, a, 0);
		}
	}
	put_tri(&al, "recomputable", n->recomputable);
	if (n->nograd) {
		attr_begin(&al, "nograd");
		fj_buf_puts(b, "true");
	}
	if (n->schedule) {
		attr_begin(&al, "schedule");
		put_string(b, n->schedule);
	}
	if (n->kernel) {
		attr_begin(&al, "kernel");
		put_string(b, n->kernel);
	}
	attr_end(&al);

	if (n->nres) {
		fj_buf_puts(b, " : ");
		for (uint32_t i = 0; i < n->nres; i++) {
			if (i)
				fj_buf_puts(b, ", ");
			if (n->res[i] < g->nvalues)
				put_type(b, m, &g->values[n->res[i]].type);
			else
				fj_buf_puts(b, "<invalid>");
		}
	}
	if (n->body) {
		fj_buf_puts(b, " {\n");
		if (level < 64)
			put_body(b, n->body, level + 1);
		indent(b, level);
		fj_buf_putn(b, "}", 1);
	}
	fj_buf_putn(b, "\n", 1);
}

/* The statements of g at `level`, ending with return (top level) or yield. */
static void put_body(fj_buf *b, const fj_graph *g, int level)
{
	if ((g->nnodes && !g->nodes) || (g->nresults && !g->results)) {
		indent(b, level);
		fj_buf_puts(b, "<graph without node or result arrays>\n");
		return;
	}
	for (uint32_t i = 0; i < g->nnodes; i++)
		put_node(b, g, &g->nodes[i], level);
	indent(b, level);
	fj_buf_puts(b, g->parent ? "yield" : "return");
	for (uint32_t i = 0; i < g->nresults; i++) {
		fj_buf_puts(b, i ? ", " : " ");
		put_operand(b, g, g->results[i]);
	}
	fj_buf_putn(b, "\n", 1);
}

fj_status fj_print_graph(fj_buf *b, const fj_graph *g)
{
	const fj_module *m = g->module;
	if (g->parent) {
		/* A body on its own: its statements, as inside its kernel. */
		put_body(b, g, 0);
		return b->oom ? FJ_ERR_NOMEM : FJ_OK;
	}
	fj_buf_puts(b, "graph @");
	fj_buf_puts(b, g->name ? g->name : "<unnamed>");
	fj_buf_putn(b, "(", 1);
	for (uint32_t i = 0; i < g->nparams && g->params; i++) {
		if (i)
			fj_buf_puts(b, ", ");
		fj_vid v = g->params[i];
		if (v >= g->nvalues) {
			fj_buf_printf(b, "%%<invalid %u>", v);
			continue;
		}
		const fj_value *val = &g->values[v];
		put_value_name(b, val);
		fj_buf_puts(b, ": ");
		put_type(b, m, &val->type);
		attr_list al = {b, 0};
		put_tri(&al, "recomputable", val->recomputable);
		if (val->nograd) {
			attr_begin(&al, "nograd");
			fj_buf_puts(b, "true");
		}
		attr_end(&al);
	}
	fj_buf_putn(b, ")", 1);
	if (g->num_fwd_outputs >= 0)
		fj_buf_printf(b, " {num_fwd_outputs=%lld}", (long long)g->num_fwd_outputs);
	fj_buf_puts(b, " {\n");
	put_body(b, g, 1);
	fj_buf_puts(b, "}\n");
	return b->oom ? FJ_ERR_NOMEM : FJ_OK;
}

fj_status fj_print_module(fj_buf *b, const fj_module *m)
{
	for (uint32_t i = 0; i < m->ngraphs; i++) {
		if (i)
			fj_buf_putn(b, "\n", 1);
		fj_print_graph(b, m->graphs[i]);
	}
	return b->oom ? FJ_ERR_NOMEM : FJ_OK;
}
