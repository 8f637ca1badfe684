/* parser.c -- the .fj parser: text (IR.md §1) -> fj_module.
 *
 * Recursive descent over the tokens of lexer.c with one token of lookahead
 * (two more after a graph's ')', for the `{` rule of IR.md §1). The module is
 * built through the IR API as the text is read; each node goes through
 * fj_check_node and fj_infer_node as soon as it is complete, so a value's
 * type is known before its first use, and a written result type is compared
 * with the inferred one.
 *
 * Invariants: the first error stops the parse (one message, located in the
 * file); on failure the half-built module is destroyed, so nothing leaks.
 * Temporary arrays live in the current top-level graph's arena (at most a
 * constant factor of the graph's own size). Recursion is bounded: attribute
 * lists and fusion.kernel bodies nest at most MAX_DEPTH deep.
 * Complexity: O(n) in the text, plus the IR's hash lookups. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/lexer.h"

#define MAX_DEPTH 32 /* nesting of attribute lists and fusion.kernel bodies */

/* Attribute slots: a declared attribute's spec index, or an annotation. */
enum { SLOT_RECOMPUTABLE = FJ_MAX_SPEC, SLOT_NOGRAD, SLOT_SCHEDULE, SLOT_KERNEL, SLOT_NUM_FWD, SLOT_COUNT };
enum owner { OWNER_NODE, OWNER_PARAM, OWNER_GRAPH };

typedef struct parser {
	fj_context *ctx;
	fj_module *m;
	const char *file; /* the module's copy */
	fj_lexer lx;
	fj_token tok;
	int depth;
} parser;

typedef struct pattr {
	int slot;
	fj_attr val;
	fj_loc loc, vloc; /* of the name, of the value */
} pattr;

typedef struct pname {
	const char *p;
	size_t n;
	fj_loc loc;
	uint32_t index;
} pname;

/* Bounded name for messages: printf("%.*s", NAMEF(p, n)). */
#define NAMEF(s, n) (int)((n) > 64 ? 64 : (n)), (s)

static const char *const keywords[] = {"graph", "return", "yield", "true", "false", "none", "inf", "nan"};

/* ---- tokens and diagnostics ---- */

static fj_loc loc_at(const parser *p, uint32_t line, uint32_t col) { return (fj_loc){p->file, line, col}; }
static fj_loc tok_loc(const parser *p) { return loc_at(p, p->tok.line, p->tok.col); }
static void next(parser *p) { fj_lex_next(&p->lx, &p->tok); }
static bool at(const parser *p, fj_tok_kind k) { return p->tok.kind == k; }

static bool tok_is(const fj_token *t, const char *w)
{
	size_t n = strlen(w);
	return t->kind == FJ_TOK_ID && t->n == n && memcmp(t->p, w, n) == 0;
}

static bool at_word(const parser *p, const char *w) { return tok_is(&p->tok, w); }

static bool accept(parser *p, fj_tok_kind k)
{
	if (p->tok.kind != k)
		return false;
	next(p);
	return true;
}

static bool is_reserved(const char *s, size_t n)
{
	for (size_t i = 0; i < FJ_ARRAY_LEN(keywords); i++)
		if (strlen(keywords[i]) == n && memcmp(keywords[i], s, n) == 0)
			return true;
	fj_dtype dt;
	return fj_dtype_from_name(s, n, &dt);
}

static fj_status error_at(parser *p, fj_status st, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static fj_status error_at(parser *p, fj_status st, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fj_verror(p->ctx, st, FJ_SEV_ERROR, loc, fmt, ap);
	va_end(ap);
	return st;
}

static fj_status oom(parser *p) { return error_at(p, FJ_ERR_NOMEM, tok_loc(p), "out of memory"); }

static void describe(const fj_token *t, char *buf, size_t size)
{
	switch (t->kind) {
	case FJ_TOK_EOF: snprintf(buf, size, "end of file"); break;
	case FJ_TOK_ID:
	case FJ_TOK_OPNAME: snprintf(buf, size, "'%.*s'", NAMEF(t->p, t->n)); break;
	case FJ_TOK_VALNAME: snprintf(buf, size, "'%%%.*s'", NAMEF(t->p, t->n)); break;
	case FJ_TOK_GRAPHNAME: snprintf(buf, size, "'@%.*s'", NAMEF(t->p, t->n)); break;
	case FJ_TOK_INT:
	case FJ_TOK_FLOAT: snprintf(buf, size, "number %.*s", NAMEF(t->p, t->n)); break;
	case FJ_TOK_STRING: snprintf(buf, size, "a string"); break;
	case FJ_TOK_ERROR: snprintf(buf, size, "an invalid token"); break;
	default: snprintf(buf, size, "'%c'", t->n ? t->p[0] : '?'); break;
	}
}

/* Reports the current token as unexpected (or the lexer's error, when it is one). */
static fj_status unexpected(parser *p, const char *what)
{
	if (p->tok.kind == FJ_TOK_ERROR)
		return error_at(p, FJ_ERR_PARSE, loc_at(p, p->tok.eline, p->tok.ecol), "%s", p->tok.err);
	if (p->tok.kind == FJ_TOK_PLUS || p->tok.kind == FJ_TOK_MINUS) /* only sizes have them */
		return error_at(p, FJ_ERR_PARSE, tok_loc(p), "unexpected character '%c'", p->tok.p[0]);
	char found[96];
	describe(&p->tok, found, sizeof found);
	return error_at(p, FJ_ERR_PARSE, tok_loc(p), "expected %s, found %s", what, found);
}

static fj_status expect(parser *p, fj_tok_kind k, const char *what)
{
	return accept(p, k) ? FJ_OK : unexpected(p, what);
}

/* ---- helpers on the graph being built ---- */

static fj_arena *arena_of(fj_graph *g)
{
	while (g->parent)
		g = g->parent;
	return &g->arena;
}

/* Makes room for one more element of an arena array. */
static bool grow(fj_graph *g, void **arr, uint32_t n, uint32_t *cap, size_t elem)
{
	if (n < *cap)
		return true;
	if (*cap > UINT32_MAX / 4)
		return false;
	uint32_t ncap = *cap ? *cap * 2 : 8;
	void *na = fj_arena_grow(arena_of(g), *arr, n, ncap, elem);
	if (!na)
		return false;
	*arr = na;
	*cap = ncap;
	return true;
}

static fj_status lookup(parser *p, fj_graph *g, const fj_token *t, fj_vid *out)
{
	fj_vid v = fj_graph_find_value(g, t->p, t->n);
	fj_loc loc = loc_at(p, t->line, t->col);
	if (v != FJ_NOVAL) {
		*out = v;
		return FJ_OK;
	}
	for (fj_graph *o = g->parent; o; o = o->parent)
		if (fj_graph_find_value(o, t->p, t->n) != FJ_NOVAL)
			return error_at(p, FJ_ERR_INVALID, loc,
			                "%%%.*s is defined outside this fusion.kernel body and is not one of the "
			                "kernel's operands",
			                NAMEF(t->p, t->n));
	return error_at(p, FJ_ERR_INVALID, loc, "use of undefined value %%%.*s", NAMEF(t->p, t->n));
}

/* A name about to be defined must be new in g and, for a body, in the graphs
 * around it. */
static fj_status check_new_name(parser *p, fj_graph *g, const fj_token *t)
{
	fj_loc loc = loc_at(p, t->line, t->col);
	fj_vid v = fj_graph_find_value(g, t->p, t->n);
	if (v != FJ_NOVAL) {
		fj_loc first = g->values[v].loc;
		return error_at(p, FJ_ERR_INVALID, loc, "redefinition of %%%.*s (first defined at %u:%u)",
		                NAMEF(t->p, t->n), first.line, first.col);
	}
	for (fj_graph *o = g->parent; o; o = o->parent)
		if (fj_graph_find_value(o, t->p, t->n) != FJ_NOVAL)
			return error_at(p, FJ_ERR_INVALID, loc,
			                "a fusion.kernel body may not redefine %%%.*s, a name of the enclosing graph",
			                NAMEF(t->p, t->n));
	return FJ_OK;
}

/* ---- numbers, sizes, types ---- */

static fj_status float_value(parser *p, const fj_token *t, double *out)
{
	char stack[128], *buf = stack;
	if (t->n >= sizeof stack) {
		buf = fj_alloc(p->ctx, t->n + 1);
		if (!buf)
			return oom(p);
	}
	memcpy(buf, t->p, t->n);
	buf[t->n] = 0;
	errno = 0;
	char *end;
	double d = strtod(buf, &end);
	bool bad = *end != 0, range = errno == ERANGE && isinf(d);
	if (buf != stack)
		fj_free(p->ctx, buf, t->n + 1);
	fj_loc loc = loc_at(p, t->line, t->col);
	if (bad)
		return error_at(p, FJ_ERR_PARSE, loc, "malformed number %.*s", NAMEF(t->p, t->n));
	if (range)
		return error_at(p, FJ_ERR_PARSE, loc, "number %.*s is out of the range of a 64-bit float",
		                NAMEF(t->p, t->n));
	*out = d;
	return FJ_OK;
}

/* dim := sum; sum := prod {('+'|'-') prod}; prod := atom {'*' atom | '//' INT};
 * atom := INT | ID | '(' sum ')'. A '-' glued to a digit is lexed as a negative
 * INT (s0-1): after a prod it is a subtraction. Each step goes through the
 * IR's interning (fj_dim_add ...), so the result is canonical; a size that is
 * negative whatever the symbols are is an error at the dim's start. */
static fj_status parse_sum(parser *p, fj_dim *out);

static fj_status dim_fail(parser *p, fj_loc start, const char *what)
{
	if (p->m->oom)
		return oom(p);
	return error_at(p, FJ_ERR_INVALID, start, "%s", what);
}

/* *out := the atom at the token (nsyms counts the symbols of the dim). */
static fj_status parse_atom(parser *p, fj_dim *out, int *nsyms)
{
	fj_status st;
	if (at(p, FJ_TOK_INT)) {
		if (p->tok.i < 0)
			return error_at(p, FJ_ERR_INVALID, tok_loc(p), "a size cannot be negative");
		*out = p->tok.i;
	} else if (at(p, FJ_TOK_ID)) {
		if (is_reserved(p->tok.p, p->tok.n))
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "'%.*s' is reserved and cannot be a symbolic size",
			                NAMEF(p->tok.p, p->tok.n));
		if (++*nsyms > 16)
			return error_at(p, FJ_ERR_INVALID, tok_loc(p), "a size has at most 16 symbols");
		if (fj_dim_symbol(p->m, p->tok.p, p->tok.n, out) != FJ_OK)
			return oom(p);
	} else if (at(p, FJ_TOK_LPAREN)) {
		if (p->depth >= MAX_DEPTH)
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "sizes are nested too deeply (at most %d levels)",
			                MAX_DEPTH);
		p->depth++;
		next(p);
		if ((st = parse_sum(p, out)))
			return st;
		p->depth--;
		return expect(p, FJ_TOK_RPAREN, "')' or an operator of a size");
	} else {
		return unexpected(p, "a size (an integer or a symbol)");
	}
	next(p);
	return FJ_OK;
}

/* prod, its first atom already in *out (first: true) or at the token */
static fj_status parse_prod(parser *p, bool first, fj_dim *out, int *nsyms)
{
	fj_loc start = tok_loc(p);
	fj_status st;
	if (!first && (st = parse_atom(p, out, nsyms)))
		return st;
	for (;;) {
		fj_dim t;
		if (accept(p, FJ_TOK_STAR)) {
			if ((st = parse_atom(p, &t, nsyms)))
				return st;
			if (!fj_dim_mul(p->m, *out, t, out))
				return dim_fail(p, start, "size overflows (sizes are 64-bit)");
		} else if (at(p, FJ_TOK_FLOORDIV)) {
			next(p);
			if (!at(p, FJ_TOK_INT) || p->tok.i < 1)
				return unexpected(p, "a positive integer after '//'");
			if (!fj_dim_floordiv(p->m, *out, p->tok.i, out))
				return dim_fail(p, start, "size overflows (sizes are 64-bit)");
			next(p);
		} else {
			return FJ_OK;
		}
	}
}

static fj_status parse_sum(parser *p, fj_dim *out)
{
	fj_loc start = tok_loc(p);
	int nsyms = 0;
	fj_status st = parse_prod(p, false, out, &nsyms);
	while (st == FJ_OK) {
		fj_dim t;
		bool minus;
		if (at(p, FJ_TOK_PLUS) || at(p, FJ_TOK_MINUS)) {
			minus = at(p, FJ_TOK_MINUS);
			next(p);
			st = parse_prod(p, false, &t, &nsyms);
		} else if (at(p, FJ_TOK_INT) && p->tok.i < 0 && p->tok.i != INT64_MIN) { /* s0-1 */
			minus = true;
			t = -p->tok.i;
			next(p);
			st = parse_prod(p, true, &t, &nsyms);
		} else {
			break;
		}
		if (st == FJ_OK && !(minus ? fj_dim_sub : fj_dim_add)(p->m, *out, t, out))
			st = dim_fail(p, start, "size is negative or overflows (sizes are 64-bit and >= 0)");
	}
	return st;
}

static fj_status parse_dim(parser *p, fj_dim *out) { return parse_sum(p, out); }

/* type := DTYPE '[' [dim {',' dim}] ']'; dims has FJ_MAX_RANK entries. */
static fj_status parse_type(parser *p, fj_type *t, fj_dim *dims)
{
	fj_status st;
	if (!at(p, FJ_TOK_ID))
		return unexpected(p, "a type such as f32[N,4]");
	fj_dtype dt;
	if (!fj_dtype_from_name(p->tok.p, p->tok.n, &dt))
		return error_at(p, FJ_ERR_PARSE, tok_loc(p), "unknown dtype '%.*s'", NAMEF(p->tok.p, p->tok.n));
	next(p);
	if ((st = expect(p, FJ_TOK_LBRACKET, "'[' after the dtype")))
		return st;
	int rank = 0;
	if (!at(p, FJ_TOK_RBRACKET)) {
		do {
			if (rank == FJ_MAX_RANK)
				return error_at(p, FJ_ERR_INVALID, tok_loc(p), "a type has at most %d dims", FJ_MAX_RANK);
			if ((st = parse_dim(p, &dims[rank])))
				return st;
			rank++;
		} while (accept(p, FJ_TOK_COMMA));
	}
	if ((st = expect(p, FJ_TOK_RBRACKET, "',' or ']'")))
		return st;
	memset(t, 0, sizeof *t);
	t->dtype = dt;
	t->rank = (uint8_t)rank;
	t->dims = rank ? dims : NULL;
	return FJ_OK;
}

/* ---- attributes ---- */

/* value := NUMBER | STRING | true | false | none | DTYPE | dim | '[' [value {',' value}] ']' */
static fj_status parse_value(parser *p, fj_graph *g, fj_attr *out)
{
	fj_status st;
	memset(out, 0, sizeof *out);
	switch (p->tok.kind) {
	case FJ_TOK_LBRACKET: {
		if (p->depth >= MAX_DEPTH)
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "lists are nested too deeply (at most %d levels)",
			                MAX_DEPTH);
		p->depth++;
		next(p);
		fj_attr *items = NULL;
		uint32_t n = 0, cap = 0;
		if (!at(p, FJ_TOK_RBRACKET)) {
			do {
				if (!grow(g, (void **)&items, n, &cap, sizeof *items))
					return oom(p);
				if ((st = parse_value(p, g, &items[n])))
					return st;
				n++;
			} while (accept(p, FJ_TOK_COMMA));
		}
		if ((st = expect(p, FJ_TOK_RBRACKET, "',' or ']'")))
			return st;
		p->depth--;
		if (!items && !(items = fj_arena_alloc(arena_of(g), sizeof *items)))
			return oom(p);
		out->kind = FJ_AK_LIST;
		out->n = n;
		out->u.items = items;
		return FJ_OK;
	}
	case FJ_TOK_INT:
		if (p->tok.i < 0) {
			*out = fj_attr_int(p->tok.i);
			next(p);
			if (at(p, FJ_TOK_STAR))
				return error_at(p, FJ_ERR_INVALID, tok_loc(p), "a size cannot be negative");
			return FJ_OK;
		}
		break;
	case FJ_TOK_FLOAT: {
		double d;
		if ((st = float_value(p, &p->tok, &d)))
			return st;
		*out = fj_attr_float(d);
		next(p);
		return FJ_OK;
	}
	case FJ_TOK_STRING: {
		char *s = fj_arena_alloc(arena_of(g), p->tok.n + 1);
		if (!s)
			return oom(p);
		fj_lex_string_value(&p->tok, s);
		out->kind = FJ_AK_STR;
		out->u.s = s;
		next(p);
		return FJ_OK;
	}
	case FJ_TOK_ID: {
		fj_dtype dt;
		if (at_word(p, "true") || at_word(p, "false"))
			*out = fj_attr_bool(at_word(p, "true"));
		else if (at_word(p, "none"))
			out->kind = FJ_AK_NONE;
		else if (at_word(p, "inf"))
			*out = fj_attr_float(INFINITY);
		else if (at_word(p, "nan"))
			*out = fj_attr_float(NAN);
		else if (fj_dtype_from_name(p->tok.p, p->tok.n, &dt))
			*out = fj_attr_dtype(dt);
		else
			break; /* a symbolic size (reserved words are refused there) */
		next(p);
		return FJ_OK;
	}
	case FJ_TOK_LPAREN:
		break; /* a size: (N+1)*2 */
	default:
		return unexpected(p, "an attribute value");
	}
	fj_dim d;
	if ((st = parse_dim(p, &d)))
		return st;
	if (fj_dim_is_static(d))
		*out = fj_attr_int(d);
	else
		*out = (fj_attr){.kind = FJ_AK_DIM, .u.dim = d};
	return FJ_OK;
}

static const char *slot_name(const fj_opinfo *oi, int slot)
{
	static const char *const ann[] = {"recomputable", "nograd", "schedule", "kernel", "num_fwd_outputs"};
	return slot < FJ_MAX_SPEC ? oi->attrs[slot].name : ann[slot - FJ_MAX_SPEC];
}

/* The slot of attribute `name` on an owner, or -1. */
static int attr_slot(enum owner owner, const fj_opinfo *oi, fj_op op, const char *s, size_t n)
{
#define IS(w) (n == strlen(w) && memcmp(s, w, n) == 0)
	if (owner == OWNER_NODE) {
		int i = fj_op_attr_index(oi, s, n);
		if (i >= 0)
			return i;
		if (IS("recomputable"))
			return SLOT_RECOMPUTABLE;
		if (IS("nograd"))
			return SLOT_NOGRAD;
		if (op == FJ_OP_FUSION_KERNEL && IS("schedule"))
			return SLOT_SCHEDULE;
		if (op == FJ_OP_FUSION_KERNEL && IS("kernel"))
			return SLOT_KERNEL;
	} else if (owner == OWNER_PARAM) {
		if (IS("recomputable"))
			return SLOT_RECOMPUTABLE;
		if (IS("nograd"))
			return SLOT_NOGRAD;
	} else if (IS("num_fwd_outputs")) {
		return SLOT_NUM_FWD;
	}
	return -1;
#undef IS
}

/* attrs := '{' attr {',' attr} '}'; attr := ID ['=' value]. Each name is
 * checked against the owner as it is read; out has SLOT_COUNT entries. */
static fj_status parse_attrs(parser *p, fj_graph *g, enum owner owner, const fj_opinfo *oi, fj_op op,
                             pattr *out, uint32_t *nout)
{
	fj_status st;
	uint32_t seen = 0, n = 0;
	next(p); /* '{' */
	do {
		if (!at(p, FJ_TOK_ID))
			return unexpected(p, "an attribute name");
		const char *s = p->tok.p;
		size_t len = p->tok.n;
		fj_loc loc = tok_loc(p);
		if (is_reserved(s, len))
			return error_at(p, FJ_ERR_PARSE, loc, "'%.*s' is reserved and cannot be an attribute name",
			                NAMEF(s, len));
		int slot = attr_slot(owner, oi, op, s, len);
		if (slot < 0) {
			if (owner == OWNER_NODE)
				return error_at(p, FJ_ERR_INVALID, loc, "%s has no attribute '%.*s'", oi->name, NAMEF(s, len));
			if (owner == OWNER_PARAM)
				return error_at(p, FJ_ERR_INVALID, loc,
				                "unknown parameter attribute '%.*s' (a parameter takes nograd and recomputable)",
				                NAMEF(s, len));
			return error_at(p, FJ_ERR_INVALID, loc,
			                "unknown graph attribute '%.*s' (a graph takes num_fwd_outputs)", NAMEF(s, len));
		}
		if (seen & (1u << slot))
			return error_at(p, FJ_ERR_INVALID, loc, "attribute '%.*s' appears twice", NAMEF(s, len));
		seen |= 1u << slot;
		next(p);
		pattr *a = &out[n++];
		a->slot = slot;
		a->loc = loc;
		a->vloc = loc;
		if (accept(p, FJ_TOK_EQUAL)) {
			a->vloc = tok_loc(p);
			if ((st = parse_value(p, g, &a->val)))
				return st;
		} else {
			a->val = fj_attr_bool(true);
		}
		/* Annotations have fixed kinds; declared attributes are checked by
		 * fj_check_node against the op table. */
		int want = slot == SLOT_RECOMPUTABLE || slot == SLOT_NOGRAD ? FJ_AK_BOOL
		           : slot == SLOT_SCHEDULE || slot == SLOT_KERNEL   ? FJ_AK_STR
		           : slot == SLOT_NUM_FWD                           ? FJ_AK_INT
		                                                            : -1;
		if (want >= 0 && a->val.kind != want)
			return error_at(p, FJ_ERR_INVALID, a->vloc, "annotation '%s' takes %s", slot_name(oi, slot),
			                want == FJ_AK_BOOL ? "true or false" : want == FJ_AK_STR ? "a string" : "an integer");
		if (slot == SLOT_NUM_FWD && a->val.u.i < 0)
			return error_at(p, FJ_ERR_INVALID, a->vloc, "num_fwd_outputs cannot be negative");
	} while (accept(p, FJ_TOK_COMMA));
	*nout = n;
	return expect(p, FJ_TOK_RBRACE, "',' or '}'");
}

/* ---- statements ---- */

static fj_status parse_stmts(parser *p, fj_graph *g);

/* operand := '%' NAME | NUMBER | true | false | none (FJ_NOVAL) */
static fj_status parse_operand(parser *p, fj_graph *g, fj_vid *out, fj_loc *where)
{
	fj_status st;
	fj_literal lit;
	memset(&lit, 0, sizeof lit);
	*where = tok_loc(p);
	switch (p->tok.kind) {
	case FJ_TOK_VALNAME:
		if ((st = lookup(p, g, &p->tok, out)))
			return st;
		next(p);
		return FJ_OK;
	case FJ_TOK_INT:
		lit.kind = FJ_LIT_INT;
		lit.i = p->tok.i;
		break;
	case FJ_TOK_FLOAT:
		lit.kind = FJ_LIT_FLOAT;
		if ((st = float_value(p, &p->tok, &lit.f)))
			return st;
		break;
	case FJ_TOK_ID:
		if (at_word(p, "none")) {
			*out = FJ_NOVAL;
			next(p);
			return FJ_OK;
		} else if (at_word(p, "true") || at_word(p, "false")) {
			lit.kind = FJ_LIT_BOOL;
			lit.b = at_word(p, "true");
		} else if (at_word(p, "inf") || at_word(p, "nan")) {
			lit.kind = FJ_LIT_FLOAT;
			lit.f = at_word(p, "inf") ? INFINITY : NAN;
		} else {
			return unexpected(p, "an operand (%name, a number, true, false or none)");
		}
		break;
	default:
		return unexpected(p, "an operand (%name, a number, true, false or none)");
	}
	fj_vid v = fj_graph_add_literal(g, lit, *where);
	if (v == FJ_NOVAL)
		return oom(p);
	*out = v;
	next(p);
	return FJ_OK;
}

static int cmp_pname(const void *a, const void *b)
{
	const pname *x = a, *y = b;
	size_t n = x->n < y->n ? x->n : y->n;
	int c = memcmp(x->p, y->p, n);
	if (c)
		return c;
	if (x->n != y->n)
		return x->n < y->n ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* The first result name that repeats an earlier one in the same statement,
 * or -1 (sorting: a statement may have many results). */
static int64_t repeated_name(fj_graph *g, const pname *res, uint32_t n, bool *oom_out)
{
	*oom_out = false;
	if (n < 2)
		return -1;
	pname *s = fj_arena_alloc(arena_of(g), n * sizeof *s);
	if (!s) {
		*oom_out = true;
		return -1;
	}
	memcpy(s, res, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp_pname);
	int64_t first = -1;
	for (uint32_t i = 1; i < n; i++)
		if (s[i].n == s[i - 1].n && memcmp(s[i].p, s[i - 1].p, s[i].n) == 0 &&
		    (first < 0 || s[i].index < (uint64_t)first))
			first = s[i].index;
	return first;
}

/* The body of fusion.kernel node idx: its operands become its parameters
 * under their outer names; the current token is its '{'. */
static fj_status parse_kernel_body(parser *p, fj_graph *g, uint32_t idx, const fj_loc *olocs)
{
	if (p->depth >= MAX_DEPTH)
		return error_at(p, FJ_ERR_PARSE, tok_loc(p), "fusion.kernel bodies are nested too deeply (at most %d levels)",
		                MAX_DEPTH);
	fj_graph *body = fj_graph_create_body(g);
	if (!body)
		return oom(p);
	body->loc = tok_loc(p);
	for (uint32_t i = 0; i < g->nodes[idx].nopnds; i++) {
		fj_vid v = g->nodes[idx].opnds[i];
		if (v == FJ_NOVAL)
			return error_at(p, FJ_ERR_INVALID, olocs[i], "a fusion.kernel operand cannot be none");
		const fj_value *val = &g->values[v];
		if (val->kind == FJ_VK_LITERAL)
			return error_at(p, FJ_ERR_INVALID, olocs[i], "a fusion.kernel operand must be a named value");
		if (fj_graph_find_value(body, val->name, strlen(val->name)) != FJ_NOVAL)
			return error_at(p, FJ_ERR_INVALID, olocs[i], "%%%s is passed to fusion.kernel twice", val->name);
		if (fj_graph_add_param(body, val->name, val->type, olocs[i]) == FJ_NOVAL)
			return oom(p);
	}
	g->nodes[idx].body = body;
	next(p); /* '{' */
	p->depth++;
	fj_status st = parse_stmts(p, body);
	p->depth--;
	return st;
}

/* stmt := res {',' res} '=' OPNAME '(' [operand {',' operand}] ')' [attrs] [':' type {',' type} [body]] */
static fj_status parse_node(parser *p, fj_graph *g)
{
	fj_status st;
	fj_arena *arena = arena_of(g);
	pname *res = NULL;
	uint32_t nres = 0, cap = 0;
	for (;;) {
		if (!at(p, FJ_TOK_VALNAME))
			return unexpected(p, "a result name (%name)");
		if ((st = check_new_name(p, g, &p->tok)))
			return st;
		if (nres == UINT32_MAX / 2 || !grow(g, (void **)&res, nres, &cap, sizeof *res))
			return oom(p);
		res[nres] = (pname){p->tok.p, p->tok.n, tok_loc(p), nres};
		nres++;
		next(p);
		if (!accept(p, FJ_TOK_COMMA))
			break;
	}
	if ((st = expect(p, FJ_TOK_EQUAL, "',' or '='")))
		return st;
	if (!at(p, FJ_TOK_OPNAME)) {
		if (at(p, FJ_TOK_ID))
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "expected an op name such as aten.add, found '%.*s'",
			                NAMEF(p->tok.p, p->tok.n));
		return unexpected(p, "an op name such as aten.add");
	}
	fj_op op;
	if (!fj_op_lookup(p->tok.p, p->tok.n, &op))
		return error_at(p, FJ_ERR_INVALID, tok_loc(p), "unknown op '%.*s'", NAMEF(p->tok.p, p->tok.n));
	const fj_opinfo *oi = fj_op_info(p->ctx, op);
	if (!oi->variadic_results && nres != oi->nresults)
		return error_at(p, FJ_ERR_INVALID, res[0].loc, "%s has %u result%s, but %u name%s given", oi->name,
		                (unsigned)oi->nresults, oi->nresults == 1 ? "" : "s", nres, nres == 1 ? " is" : "s are");
	bool dup_oom;
	int64_t dup = repeated_name(g, res, nres, &dup_oom);
	if (dup_oom)
		return oom(p);
	if (dup >= 0)
		return error_at(p, FJ_ERR_INVALID, res[dup].loc, "%%%.*s is defined twice in this statement",
		                NAMEF(res[dup].p, res[dup].n));
	next(p);

	/* operands */
	if ((st = expect(p, FJ_TOK_LPAREN, "'(' after the op name")))
		return st;
	fj_vid *opnds = NULL;
	fj_loc *olocs = NULL;
	uint32_t nopnds = 0, ocap = 0, lcap = 0;
	if (!at(p, FJ_TOK_RPAREN)) {
		do {
			if (nopnds == UINT32_MAX / 2 || !grow(g, (void **)&opnds, nopnds, &ocap, sizeof *opnds) ||
			    !grow(g, (void **)&olocs, nopnds, &lcap, sizeof *olocs))
				return oom(p);
			if ((st = parse_operand(p, g, &opnds[nopnds], &olocs[nopnds])))
				return st;
			nopnds++;
		} while (accept(p, FJ_TOK_COMMA));
	}
	if ((st = expect(p, FJ_TOK_RPAREN, "',' or ')'")))
		return st;

	/* attributes */
	pattr attrs[SLOT_COUNT];
	uint32_t nattrs = 0;
	if (at(p, FJ_TOK_LBRACE) && (st = parse_attrs(p, g, OWNER_NODE, oi, op, attrs, &nattrs)))
		return st;

	/* result types */
	fj_type *types = NULL;
	fj_loc *tlocs = NULL;
	uint32_t ntypes = 0, tcap = 0, tlcap = 0;
	if (accept(p, FJ_TOK_COLON)) {
		do {
			fj_dim dims[FJ_MAX_RANK];
			if (ntypes == UINT32_MAX / 2 || !grow(g, (void **)&types, ntypes, &tcap, sizeof *types) ||
			    !grow(g, (void **)&tlocs, ntypes, &tlcap, sizeof *tlocs))
				return oom(p);
			tlocs[ntypes] = tok_loc(p);
			if ((st = parse_type(p, &types[ntypes], dims)))
				return st;
			fj_type *t = &types[ntypes];
			if (t->rank) {
				if (!(t->dims = fj_arena_alloc(arena, t->rank * sizeof *t->dims)))
					return oom(p);
				memcpy(t->dims, dims, t->rank * sizeof *dims);
			}
			ntypes++;
		} while (accept(p, FJ_TOK_COMMA));
		if (ntypes > nres)
			return error_at(p, FJ_ERR_INVALID, tlocs[nres], "%u result types are written for %u result%s",
			                ntypes, nres, nres == 1 ? "" : "s");
		if (ntypes < nres)
			return error_at(p, FJ_ERR_INVALID, tlocs[0],
			                "%u result type%s written for %u results (write all of them or none)", ntypes,
			                ntypes == 1 ? " is" : "s are", nres);
	}
	bool has_body = at(p, FJ_TOK_LBRACE);
	if (has_body && op != FJ_OP_FUSION_KERNEL)
		return error_at(p, FJ_ERR_PARSE, tok_loc(p), "%s", ntypes ? "only fusion.kernel has a body"
		                : "unexpected '{': attributes are written once, and a body comes after the result types");
	if (has_body && !ntypes)
		return error_at(p, FJ_ERR_PARSE, tok_loc(p),
		                "a fusion.kernel body comes after the result types (write ': type, ...' before '{')");
	if (op == FJ_OP_FUSION_KERNEL && !has_body)
		return unexpected(p, ntypes ? "'{' to open the fusion.kernel body" : "': ' and the result types of fusion.kernel, then its body");

	/* the node */
	const char **names = fj_arena_alloc(arena, (nres ? nres : 1) * sizeof *names);
	if (!names)
		return oom(p);
	for (uint32_t i = 0; i < nres; i++)
		if (!(names[i] = fj_arena_strndup(arena, res[i].p, res[i].n)))
			return oom(p);
	uint32_t idx = fj_graph_add_node(g, op, opnds, nopnds, nres, names, NULL, res[0].loc);
	if (idx == FJ_NONODE)
		return oom(p);
	for (uint32_t i = 0; i < nres; i++)
		g->values[g->nodes[idx].res[i]].loc = res[i].loc;
	for (uint32_t i = 0; i < nattrs; i++) {
		fj_node *n = &g->nodes[idx];
		const pattr *a = &attrs[i];
		switch (a->slot) {
		case SLOT_RECOMPUTABLE: n->recomputable = a->val.u.b ? FJ_TRI_TRUE : FJ_TRI_FALSE; break;
		case SLOT_NOGRAD: n->nograd = a->val.u.b; break;
		case SLOT_SCHEDULE: n->schedule = a->val.u.s; break;
		case SLOT_KERNEL: n->kernel = a->val.u.s; break;
		default: n->attrs[a->slot] = a->val; break;
		}
	}
	if (has_body && (st = parse_kernel_body(p, g, idx, olocs)))
		return st;

	/* check, infer, compare */
	size_t nerr = fj_context_error_count(p->ctx);
	fj_type *out = fj_arena_alloc(arena, (nres ? nres : 1) * sizeof *out);
	if (!out)
		return oom(p);
	st = fj_check_node(g, idx);
	if (st == FJ_OK)
		st = fj_infer_node(g, idx, out);
	if (st == FJ_OK && p->m->oom)
		st = FJ_ERR_NOMEM;
	if (st != FJ_OK) {
		if (fj_context_error_count(p->ctx) == nerr) {
			if (st == FJ_ERR_NOMEM)
				return oom(p);
			return error_at(p, st, res[0].loc, "%s: invalid node", oi->name);
		}
		return st;
	}
	for (uint32_t i = 0; i < ntypes; i++) {
		if (!fj_type_equal(&types[i], &out[i])) {
			char w[256], inf[256];
			fj_type_format(p->m, &types[i], w, sizeof w);
			fj_type_format(p->m, &out[i], inf, sizeof inf);
			return error_at(p, FJ_ERR_INVALID, tlocs[i], "result type %s of %%%.*s does not match the inferred type %s",
			                w, NAMEF(res[i].p, res[i].n), inf);
		}
	}
	for (uint32_t i = 0; i < nres; i++)
		g->values[g->nodes[idx].res[i]].type = out[i];
	return FJ_OK;
}

/* 'return' / 'yield' [operand {',' operand}], then the '}' that ends the body. */
static fj_status parse_terminator(parser *p, fj_graph *g, const char *word)
{
	fj_status st;
	next(p);
	fj_vid *vals = NULL;
	uint32_t n = 0, cap = 0;
	if (!at(p, FJ_TOK_RBRACE)) {
		do {
			fj_loc loc;
			if (n == UINT32_MAX / 2 || !grow(g, (void **)&vals, n, &cap, sizeof *vals))
				return oom(p);
			if ((st = parse_operand(p, g, &vals[n], &loc)))
				return st;
			if (vals[n] == FJ_NOVAL)
				return error_at(p, FJ_ERR_INVALID, loc, "none cannot be %s", word[0] == 'r' ? "returned" : "yielded");
			n++;
		} while (accept(p, FJ_TOK_COMMA));
	}
	if (fj_graph_set_results(g, vals, n) != FJ_OK)
		return oom(p);
	if (!at(p, FJ_TOK_RBRACE)) {
		char what[80];
		snprintf(what, sizeof what, "',' or '}' ('%s' ends the %s)", word,
		         g->parent ? "fusion.kernel body" : "graph");
		return unexpected(p, what);
	}
	next(p);
	return FJ_OK;
}

/* body := '{' stmt* '}' (the '{' already read), ending with return (a graph)
 * or yield (a fusion.kernel body). */
static fj_status parse_stmts(parser *p, fj_graph *g)
{
	fj_status st;
	fj_loc open = g->loc;
	for (;;) {
		if (at(p, FJ_TOK_VALNAME)) {
			if ((st = parse_node(p, g)))
				return st;
			continue;
		}
		if (at_word(p, "return")) {
			if (g->parent)
				return error_at(p, FJ_ERR_PARSE, tok_loc(p),
				                "'return' inside a fusion.kernel body (a body ends with 'yield')");
			return parse_terminator(p, g, "return");
		}
		if (at_word(p, "yield")) {
			if (!g->parent)
				return error_at(p, FJ_ERR_PARSE, tok_loc(p),
				                "'yield' outside a fusion.kernel body (a graph ends with 'return')");
			return parse_terminator(p, g, "yield");
		}
		if (at(p, FJ_TOK_RBRACE) && g->parent)
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "missing 'yield' at the end of the fusion.kernel body");
		if (at(p, FJ_TOK_RBRACE))
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "missing 'return' at the end of graph @%.*s",
			                NAMEF(g->name, strlen(g->name)));
		if (at(p, FJ_TOK_EOF))
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "unexpected end of file in %s (opened at %u:%u)",
			                g->parent ? "a fusion.kernel body" : "a graph body", open.line, open.col);
		return unexpected(p, g->parent ? "a statement or 'yield'" : "a statement or 'return'");
	}
}

/* param := '%' NAME ':' type [attrs] */
static fj_status parse_param(parser *p, fj_graph *g)
{
	fj_status st;
	if (!at(p, FJ_TOK_VALNAME))
		return unexpected(p, "a parameter (%name: type)");
	if ((st = check_new_name(p, g, &p->tok)))
		return st;
	fj_loc loc = tok_loc(p);
	char *name = fj_arena_strndup(arena_of(g), p->tok.p, p->tok.n);
	if (!name)
		return oom(p);
	next(p);
	if ((st = expect(p, FJ_TOK_COLON, "':' and the parameter's type")))
		return st;
	fj_dim dims[FJ_MAX_RANK];
	fj_type t;
	if ((st = parse_type(p, &t, dims)))
		return st;
	fj_vid v = fj_graph_add_param(g, name, t, loc);
	if (v == FJ_NOVAL)
		return oom(p);
	if (at(p, FJ_TOK_LBRACE)) {
		pattr attrs[SLOT_COUNT];
		uint32_t n = 0;
		if ((st = parse_attrs(p, g, OWNER_PARAM, NULL, FJ_OP_COUNT, attrs, &n)))
			return st;
		for (uint32_t i = 0; i < n; i++) {
			if (attrs[i].slot == SLOT_NOGRAD)
				g->values[v].nograd = attrs[i].val.u.b;
			else
				g->values[v].recomputable = attrs[i].val.u.b ? FJ_TRI_TRUE : FJ_TRI_FALSE;
		}
	}
	return FJ_OK;
}

/* After a graph's ')', '{' opens its attributes when the next token is an ID
 * followed by '=', ',' or '}' (IR.md §1); otherwise it opens the body. */
static bool graph_attrs_follow(const parser *p)
{
	if (!at(p, FJ_TOK_LBRACE))
		return false;
	fj_lexer lx = p->lx;
	fj_token a, b;
	fj_lex_next(&lx, &a);
	if (a.kind != FJ_TOK_ID || is_reserved(a.p, a.n))
		return false;
	fj_lex_next(&lx, &b);
	return b.kind == FJ_TOK_EQUAL || b.kind == FJ_TOK_COMMA || b.kind == FJ_TOK_RBRACE;
}

/* graph := 'graph' '@' NAME '(' [param {',' param}] ')' [attrs] body */
static fj_status parse_graph(parser *p)
{
	fj_status st;
	fj_loc gloc = tok_loc(p);
	next(p);
	if (!at(p, FJ_TOK_GRAPHNAME))
		return unexpected(p, "a graph name (@name)");
	char *name = fj_arena_strndup(&p->m->arena, p->tok.p, p->tok.n);
	if (!name)
		return oom(p);
	if (fj_module_find_graph(p->m, name))
		return error_at(p, FJ_ERR_INVALID, tok_loc(p), "graph @%.*s is defined twice", NAMEF(name, strlen(name)));
	fj_graph *g = fj_module_add_graph(p->m, name, gloc);
	if (!g)
		return oom(p);
	next(p);
	if ((st = expect(p, FJ_TOK_LPAREN, "'(' after the graph name")))
		return st;
	if (!at(p, FJ_TOK_RPAREN)) {
		do {
			if ((st = parse_param(p, g)))
				return st;
		} while (accept(p, FJ_TOK_COMMA));
	}
	if ((st = expect(p, FJ_TOK_RPAREN, "',' or ')'")))
		return st;
	if (graph_attrs_follow(p)) {
		pattr attrs[SLOT_COUNT];
		uint32_t n = 0;
		if ((st = parse_attrs(p, g, OWNER_GRAPH, NULL, FJ_OP_COUNT, attrs, &n)))
			return st;
		for (uint32_t i = 0; i < n; i++)
			g->num_fwd_outputs = attrs[i].val.u.i;
	}
	if ((st = expect(p, FJ_TOK_LBRACE, "'{' to open the graph body")))
		return st;
	return parse_stmts(p, g);
}

static fj_status parse_module(parser *p)
{
	fj_status st;
	for (;;) {
		if (at(p, FJ_TOK_EOF))
			return FJ_OK;
		if (at_word(p, "graph")) {
			if ((st = parse_graph(p)))
				return st;
			continue;
		}
		if (at_word(p, "return") || at_word(p, "yield"))
			return error_at(p, FJ_ERR_PARSE, tok_loc(p), "'%.*s' outside a graph", NAMEF(p->tok.p, p->tok.n));
		return unexpected(p, "'graph'");
	}
}

fj_status fj_parse_module(fj_context *ctx, const char *text, size_t len, const char *file, fj_module **out)
{
	*out = NULL;
	if (!file)
		file = "<input>";
	if (!text)
		len = 0;
	fj_module *m = fj_module_create(ctx);
	if (!m)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){file, 0, 0}, "out of memory");
	parser p;
	memset(&p, 0, sizeof p);
	p.ctx = ctx;
	p.m = m;
	p.file = fj_arena_strdup(&m->arena, file);
	if (!p.file) {
		fj_module_destroy(m);
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){file, 0, 0}, "out of memory");
	}
	m->file = p.file;
	fj_lex_init(&p.lx, text ? text : "", len);
	next(&p);
	fj_status st = parse_module(&p);
	if (st == FJ_OK && m->oom)
		st = oom(&p);
	if (st != FJ_OK) {
		fj_module_destroy(m);
		return st;
	}
	*out = m;
	return FJ_OK;
}

fj_status fj_parse_file(fj_context *ctx, const char *path, fj_module **out)
{
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f)
		return fj_error_status(ctx, FJ_ERR_IO, (fj_loc){0}, "cannot open '%s': %s", path, strerror(errno));
	char *buf = NULL;
	size_t len = 0, cap = 0;
	fj_status st = FJ_OK;
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *nb = ncap > cap ? fj_realloc(ctx, buf, cap, ncap) : NULL;
			if (!nb) {
				st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory reading '%s'", path);
				break;
			}
			buf = nb;
			cap = ncap;
		}
		size_t k = fread(buf + len, 1, cap - len, f);
		len += k;
		if (k == 0) {
			if (ferror(f))
				st = fj_error_status(ctx, FJ_ERR_IO, (fj_loc){0}, "cannot read '%s': %s", path, strerror(errno));
			break;
		}
	}
	fclose(f);
	if (st == FJ_OK)
		st = fj_parse_module(ctx, buf, len, path, out);
	fj_free(ctx, buf, cap);
	return st;
}
