/* dim.c -- symbolic sizes: interned products, derived symbols (sums,
 * differences, floor division), and their text (IR.md §1, ir.h).
 *
 * A symbolic size is a product coef * s1 * ... (fj_symexpr), interned in the
 * module's table. A sum or a floor division is a derived symbol: a symbol of
 * the table with a definition (fj_symdef), interned by its definition, whose
 * name is the definition's canonical text, so a derived symbol is a factor
 * like any other and every product keeps its meaning.
 *
 * Sums are built as linear forms (at most MAX_TERMS (coef, product) terms and
 * a constant): a product that is one derived sum times a coefficient is
 * expanded into its terms, equal products merge, zero terms vanish, and the
 * greatest common divisor of the coefficients and the constant is taken out
 * as a factor, so (s0+1)*2 and s0*2+2 are the same dim. The canonical text
 * prints positive terms first, each sorted by its text, then the negative
 * ones, then the constant (first when no term is positive: 5-s0); a derived
 * factor of a product prints in parentheses, except when it stands alone:
 * s0+1, s0//2, (s0+1)*4, (s0+1)//2, N*(s0//2).
 *
 * Cost: interning scans the tables (linear in their size), as products did;
 * the tables hold the few sizes of a model. No recursion. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h> /* qsort */
#include <string.h>

#include "ir.h"

#define MAX_SYMS 16
#define MAX_TERMS 8
#define TERM_TEXT 256

static fj_status intern_expr(fj_module *m, int64_t coef, const uint32_t *syms, uint32_t n, fj_dim *out)
{
	if (n == 0) {
		*out = coef;
		return FJ_OK;
	}
	if (coef == 0) {
		*out = 0;
		return FJ_OK;
	}
	for (uint32_t i = 0; i < m->nexprs; i++) {
		fj_symexpr *e = &m->exprs[i];
		if (e->coef == coef && e->nsyms == n && memcmp(e->syms, syms, n * sizeof *syms) == 0) {
			*out = -(fj_dim)i - 1;
			return FJ_OK;
		}
	}
	if (m->nexprs == m->cap_exprs) {
		uint32_t ncap = m->cap_exprs ? m->cap_exprs * 2 : 16;
		fj_symexpr *ne = fj_arena_grow(&m->arena, m->exprs, m->nexprs, ncap, sizeof *ne);
		if (!ne)
			goto oom;
		m->exprs = ne;
		m->cap_exprs = ncap;
	}
	uint32_t *s = fj_arena_alloc(&m->arena, n * sizeof *s);
	if (!s)
		goto oom;
	memcpy(s, syms, n * sizeof *s);
	m->exprs[m->nexprs] = (fj_symexpr){coef, n, s};
	*out = -(fj_dim)m->nexprs - 1;
	m->nexprs++;
	return FJ_OK;
oom:
	m->oom = true;
	return FJ_ERR_NOMEM;
}

/* Appends symbol `name` (len bytes) with definition def (its terms copied). */
static fj_status add_symbol(fj_module *m, const char *name, size_t len, const fj_symdef *def, uint32_t *out)
{
	if (m->nsymbols == m->cap_symbols) {
		uint32_t ncap = m->cap_symbols ? m->cap_symbols * 2 : 8;
		char **ns = fj_arena_grow(&m->arena, m->symbols, m->nsymbols, ncap, sizeof *ns);
		fj_symdef *nd = ns ? fj_arena_grow(&m->arena, m->defs, m->nsymbols, ncap, sizeof *nd) : NULL;
		if (!nd)
			goto oom;
		m->symbols = ns;
		m->defs = nd;
		m->cap_symbols = ncap;
	}
	char *copy = fj_arena_strndup(&m->arena, name, len);
	fj_symdef d = *def;
	if (d.nterms && (d.terms = fj_arena_alloc(&m->arena, d.nterms * sizeof *d.terms)))
		memcpy(d.terms, def->terms, d.nterms * sizeof *d.terms);
	if (!copy || (d.nterms && !d.terms))
		goto oom;
	m->symbols[m->nsymbols] = copy;
	m->defs[m->nsymbols] = d;
	*out = m->nsymbols++;
	return FJ_OK;
oom:
	m->oom = true;
	return FJ_ERR_NOMEM;
}

fj_status fj_dim_symbol(fj_module *m, const char *name, size_t len, fj_dim *out)
{
	uint32_t s;
	for (s = 0; s < m->nsymbols; s++)
		if (strncmp(m->symbols[s], name, len) == 0 && m->symbols[s][len] == 0)
			break;
	if (s == m->nsymbols) {
		static const fj_symdef bound = {FJ_SYM_BOUND, 0, NULL, 0, 0};
		fj_status st = add_symbol(m, name, len, &bound, &s);
		if (st != FJ_OK)
			return st;
	}
	return intern_expr(m, 1, &s, 1, out);
}

const fj_symexpr *fj_dim_expr(const fj_module *m, fj_dim d)
{
	FJ_ASSERT(d < 0 && (uint64_t)(-(d + 1)) < m->nexprs);
	return &m->exprs[-(d + 1)];
}

const char *fj_symbol_name(const fj_module *m, uint32_t sym) { return m->symbols[sym]; }
uint32_t fj_symbol_count(const fj_module *m) { return m->nsymbols; }
const fj_symdef *fj_symbol_def(const fj_module *m, uint32_t sym) { return &m->defs[sym]; }

static void split(const fj_module *m, fj_dim d, int64_t *coef, uint32_t *syms, uint32_t *n)
{
	if (d >= 0) {
		*coef = d;
		*n = 0;
		return;
	}
	const fj_symexpr *e = fj_dim_expr(m, d);
	*coef = e->coef;
	*n = e->nsyms;
	memcpy(syms, e->syms, e->nsyms * sizeof *syms);
}

bool fj_dim_mul(fj_module *m, fj_dim a, fj_dim b, fj_dim *out)
{
	int64_t ca, cb, c;
	uint32_t sa[MAX_SYMS], sb[MAX_SYMS], s[2 * MAX_SYMS], na, nb, n = 0, i = 0, j = 0;
	split(m, a, &ca, sa, &na);
	split(m, b, &cb, sb, &nb);
	if (__builtin_mul_overflow(ca, cb, &c))
		return false;
	if (c == 0) {
		*out = 0;
		return true;
	}
	if (na + nb > MAX_SYMS)
		return false;
	while (i < na || j < nb)
		s[n++] = (j >= nb || (i < na && sa[i] <= sb[j])) ? sa[i++] : sb[j++];
	return intern_expr(m, c, s, n, out) == FJ_OK;
}

bool fj_dim_div(fj_module *m, fj_dim a, fj_dim b, fj_dim *out)
{
	int64_t ca, cb;
	uint32_t sa[MAX_SYMS], sb[MAX_SYMS], s[MAX_SYMS], na, nb, n = 0, i = 0, j = 0;
	split(m, a, &ca, sa, &na);
	split(m, b, &cb, sb, &nb);
	if (cb == 0 || ca % cb != 0)
		return false;
	/* Every symbol of b must occur in a (multiset difference). */
	while (i < na) {
		if (j < nb && sa[i] == sb[j]) {
			i++;
			j++;
		} else if (j < nb && sb[j] < sa[i]) {
			return false;
		} else {
			s[n++] = sa[i++];
		}
	}
	if (j < nb)
		return false;
	return intern_expr(m, ca / cb, s, n, out) == FJ_OK;
}

bool fj_dim_product(fj_module *m, const fj_dim *d, int n, fj_dim *out)
{
	fj_dim p = 1;
	for (int i = 0; i < n; i++)
		if (!fj_dim_mul(m, p, d[i], &p))
			return false;
	*out = p;
	return true;
}

/* ---- derived symbols ---- */

/* The one symbol of d when d is that symbol alone (coefficient 1), else -1. */
static int64_t unit_symbol(const fj_module *m, fj_dim d)
{
	if (fj_dim_is_static(d))
		return -1;
	const fj_symexpr *e = fj_dim_expr(m, d);
	return e->coef == 1 && e->nsyms == 1 ? (int64_t)e->syms[0] : -1;
}

/* Interns a derived symbol with definition def; *out its dim. */
static bool intern_derived(fj_module *m, const fj_symdef *def, fj_dim *out)
{
	uint32_t s;
	for (s = 0; s < m->nsymbols; s++) {
		const fj_symdef *d = &m->defs[s];
		if (d->kind == def->kind && d->nterms == def->nterms && d->c == def->c && d->of == def->of &&
		    (!d->nterms || memcmp(d->terms, def->terms, d->nterms * sizeof *d->terms) == 0))
			break;
	}
	if (s == m->nsymbols) {
		int len = fj_symdef_format(m, def, NULL, 0);
		char *name = len > 0 ? fj_alloc(m->ctx, (size_t)len + 1) : NULL;
		if (!name) {
			m->oom = true;
			return false;
		}
		fj_symdef_format(m, def, name, (size_t)len + 1);
		fj_status st = add_symbol(m, name, (size_t)len, def, &s);
		fj_free(m->ctx, name, (size_t)len + 1);
		if (st != FJ_OK)
			return false;
	}
	return intern_expr(m, 1, &s, 1, out) == FJ_OK;
}

/* A linear form: terms (coef, product of coefficient 1) plus c. */
typedef struct lin {
	fj_symterm t[MAX_TERMS];
	uint32_t n;
	int64_t c;
} lin;

static bool lin_term(lin *l, int64_t coef, fj_dim mono)
{
	for (uint32_t k = 0; k < l->n; k++)
		if (l->t[k].mono == mono)
			return !__builtin_add_overflow(l->t[k].coef, coef, &l->t[k].coef);
	if (l->n == MAX_TERMS)
		return false;
	l->t[l->n++] = (fj_symterm){coef, mono};
	return true;
}

/* Adds sign * d to l. */
static bool lin_add(fj_module *m, lin *l, fj_dim d, int64_t sign)
{
	int64_t v;
	if (fj_dim_is_static(d))
		return !__builtin_mul_overflow(d, sign, &v) && !__builtin_add_overflow(l->c, v, &l->c);
	const fj_symexpr *e = fj_dim_expr(m, d);
	int64_t coef;
	if (__builtin_mul_overflow(e->coef, sign, &coef))
		return false;
	if (e->nsyms == 1 && m->defs[e->syms[0]].kind == FJ_SYM_SUM) {
		const fj_symdef *s = &m->defs[e->syms[0]];
		for (uint32_t k = 0; k < s->nterms; k++)
			if (__builtin_mul_overflow(s->terms[k].coef, coef, &v) || !lin_term(l, v, s->terms[k].mono))
				return false;
		return !__builtin_mul_overflow(s->c, coef, &v) && !__builtin_add_overflow(l->c, v, &l->c);
	}
	fj_dim mono;
	if (intern_expr(m, 1, e->syms, e->nsyms, &mono) != FJ_OK)
		return false;
	return lin_term(l, coef, mono);
}

static int64_t gcd64(int64_t a, int64_t b)
{
	a = a < 0 ? -a : a;
	b = b < 0 ? -b : b;
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static int cmp_term(const void *a, const void *b)
{
	fj_dim x = ((const fj_symterm *)a)->mono, y = ((const fj_symterm *)b)->mono;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The dim of linear form l (canonical, see the top). */
static bool lin_dim(fj_module *m, lin *l, fj_dim *out)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < l->n; k++)
		if (l->t[k].coef)
			l->t[n++] = l->t[k];
	l->n = n;
	if (n == 0) {
		if (l->c < 0)
			return false;
		*out = l->c;
		return true;
	}
	if (n == 1 && l->c == 0)
		return l->t[0].coef > 0 && fj_dim_mul(m, l->t[0].coef, l->t[0].mono, out);
	int64_t g = l->c;
	for (uint32_t k = 0; k < n; k++)
		g = gcd64(g, l->t[k].coef);
	for (uint32_t k = 0; k < n; k++)
		l->t[k].coef /= g;
	l->c /= g;
	qsort(l->t, n, sizeof *l->t, cmp_term);
	fj_symdef def = {FJ_SYM_SUM, n, l->t, l->c, 0};
	fj_dim s;
	return intern_derived(m, &def, &s) && fj_dim_mul(m, s, g, out);
}

bool fj_dim_add(fj_module *m, fj_dim a, fj_dim b, fj_dim *out)
{
	lin l = {.n = 0};
	return lin_add(m, &l, a, 1) && lin_add(m, &l, b, 1) && lin_dim(m, &l, out);
}

bool fj_dim_sub(fj_module *m, fj_dim a, fj_dim b, fj_dim *out)
{
	lin l = {.n = 0};
	return lin_add(m, &l, a, 1) && lin_add(m, &l, b, -1) && lin_dim(m, &l, out);
}

bool fj_dim_add_int(fj_module *m, fj_dim a, int64_t c, fj_dim *out)
{
	lin l = {.n = 0, .c = c};
	return lin_add(m, &l, a, 1) && lin_dim(m, &l, out);
}

bool fj_dim_floordiv(fj_module *m, fj_dim a, int64_t c, fj_dim *out)
{
	if (c < 1)
		return false;
	if (fj_dim_is_static(a)) {
		*out = a / c;
		return true;
	}
	const fj_symexpr *e = fj_dim_expr(m, a);
	int64_t g = gcd64(e->coef, c), coef = e->coef / g;
	c /= g;
	fj_dim x;
	if (intern_expr(m, coef, e->syms, e->nsyms, &x) != FJ_OK)
		return false;
	if (c == 1) {
		*out = x;
		return true;
	}
	int64_t s = unit_symbol(m, x);
	if (s >= 0 && m->defs[s].kind == FJ_SYM_FLOORDIV) { /* (x//c1)//c == x//(c1*c) */
		if (__builtin_mul_overflow(m->defs[s].c, c, &c))
			return false;
		x = m->defs[s].of;
	}
	fj_symdef def = {FJ_SYM_FLOORDIV, 0, NULL, c, x};
	return intern_derived(m, &def, out);
}

bool fj_dim_has_floordiv(const fj_module *m, fj_dim d)
{
	if (fj_dim_is_static(d))
		return false;
	/* a symbol's definition only names earlier symbols: one backward sweep */
	uint32_t n = m->nsymbols;
	uint8_t stack[64], *mark = n <= sizeof stack ? stack : fj_alloc(m->ctx, n);
	if (!mark)
		return true; /* the safe answer: checked at run time */
	memset(mark, 0, n <= sizeof stack ? sizeof stack : n);
	const fj_symexpr *e = fj_dim_expr(m, d);
	for (uint32_t k = 0; k < e->nsyms; k++)
		mark[e->syms[k]] = 1;
	bool found = false;
	for (uint32_t s = n; s-- > 0 && !found;) {
		if (!mark[s])
			continue;
		const fj_symdef *def = &m->defs[s];
		found = def->kind == FJ_SYM_FLOORDIV;
		for (uint32_t t = 0; t < def->nterms; t++) {
			const fj_symexpr *te = fj_dim_expr(m, def->terms[t].mono);
			for (uint32_t k = 0; k < te->nsyms; k++)
				mark[te->syms[k]] = 1;
		}
	}
	if (mark != stack)
		fj_free(m->ctx, mark, n);
	return found;
}

/* Evaluates product d from the symbols' values (false: unknown or overflow). */
static bool eval_mono(const fj_module *m, fj_dim d, const int64_t *val, int64_t *out)
{
	if (fj_dim_is_static(d)) {
		*out = d;
		return true;
	}
	const fj_symexpr *e = fj_dim_expr(m, d);
	int64_t v = e->coef;
	for (uint32_t k = 0; k < e->nsyms; k++)
		if (val[e->syms[k]] < 0 || __builtin_mul_overflow(v, val[e->syms[k]], &v))
			return false;
	*out = v;
	return true;
}

bool fj_symbol_eval(const fj_module *m, uint32_t s, const int64_t *val, int64_t *out, bool *neg)
{
	const fj_symdef *d = &m->defs[s];
	int64_t v, t;
	if (d->kind == FJ_SYM_FLOORDIV) {
		if (!eval_mono(m, d->of, val, &v))
			return false;
		*out = v / d->c;
		return true;
	}
	FJ_ASSERT(d->kind == FJ_SYM_SUM);
	v = d->c;
	for (uint32_t k = 0; k < d->nterms; k++)
		if (!eval_mono(m, d->terms[k].mono, val, &t) || __builtin_mul_overflow(t, d->terms[k].coef, &t) ||
		    __builtin_add_overflow(v, t, &v))
			return false;
	if (v < 0) {
		if (neg)
			*neg = true;
		return false;
	}
	*out = v;
	return true;
}

/* ---- text ---- */

/* Appends to buf (snprintf's rules); returns the new length. */
static size_t put(char *buf, size_t size, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t put(char *buf, size_t size, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf ? buf + (len < size ? len : size) : NULL, len < size ? size - len : 0, fmt, ap);
	va_end(ap);
	return len + (k > 0 ? (size_t)k : 0);
}

/* Product d times coef: factors in name order, a derived factor in
 * parentheses unless bare (alone, coefficient 1, and `alone_ok`). */
static size_t put_mono(const fj_module *m, fj_dim d, int64_t coef, bool alone_ok, char *buf, size_t size,
                       size_t len)
{
	if (fj_dim_is_static(d))
		return put(buf, size, len, "%lld", (long long)(d * coef));
	const fj_symexpr *e = fj_dim_expr(m, d);
	coef *= e->coef;
	/* Symbols print in name order, so the text does not depend on the order
	 * in which the module first met them. */
	uint32_t order[MAX_SYMS];
	for (uint32_t i = 0; i < e->nsyms; i++) {
		uint32_t j = i;
		for (; j > 0 && strcmp(m->symbols[order[j - 1]], m->symbols[e->syms[i]]) > 0; j--)
			order[j] = order[j - 1];
		order[j] = e->syms[i];
	}
	bool bare = alone_ok && e->nsyms == 1 && coef == 1;
	for (uint32_t i = 0; i < e->nsyms; i++) {
		bool paren = m->defs[order[i]].kind != FJ_SYM_BOUND && !bare;
		len = put(buf, size, len, "%s%s%s%s", i ? "*" : "", paren ? "(" : "", m->symbols[order[i]], paren ? ")" : "");
	}
	if (coef != 1)
		len = put(buf, size, len, "*%lld", (long long)coef);
	return len;
}

static int cmp_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int fj_symdef_format(const fj_module *m, const fj_symdef *d, char *buf, size_t size)
{
	size_t len = 0;
	if (buf && size)
		buf[0] = 0;
	if (d->kind == FJ_SYM_FLOORDIV) {
		len = put_mono(m, d->of, 1, false, buf, size, len);
		return (int)put(buf, size, len, "//%lld", (long long)d->c);
	}
	FJ_ASSERT(d->kind == FJ_SYM_SUM && d->nterms <= MAX_TERMS);
	char text[MAX_TERMS][TERM_TEXT], *pos[MAX_TERMS], *negs[MAX_TERMS];
	uint32_t np = 0, nn = 0;
	for (uint32_t k = 0; k < d->nterms; k++) {
		int64_t c = d->terms[k].coef;
		put_mono(m, d->terms[k].mono, c < 0 ? -c : c, true, text[k], TERM_TEXT, 0);
		if (c > 0)
			pos[np++] = text[k];
		else
			negs[nn++] = text[k];
	}
	qsort(pos, np, sizeof *pos, cmp_text);
	qsort(negs, nn, sizeof *negs, cmp_text);
	if (!np)
		len = put(buf, size, len, "%lld", (long long)d->c);
	for (uint32_t k = 0; k < np; k++)
		len = put(buf, size, len, "%s%s", k ? "+" : "", pos[k]);
	for (uint32_t k = 0; k < nn; k++)
		len = put(buf, size, len, "-%s", negs[k]);
	if (np && d->c)
		len = put(buf, size, len, "%+lld", (long long)d->c);
	return (int)len;
}

int fj_dim_format(const fj_module *m, fj_dim d, char *buf, size_t size)
{
	if (buf && size)
		buf[0] = 0;
	return (int)put_mono(m, d, 1, true, buf, size, 0);
}
