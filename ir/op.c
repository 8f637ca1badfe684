/* op.c -- the op table: ops.def's rows, their spec strings parsed once per
 * context into fj_opinfo.
 *
 * Spec grammar (checked by the unit tests, so a typo in ops.def fails CI):
 *   operands := "" | operand {',' operand}      operand := NAME ['?' | '*' | '+']
 *   results  := "*" | NAME {',' NAME}
 *   attrs    := "" | attr {';' attr}            attr := NAME ':' TYPE ['?'] ['=' DEFAULT]
 *   TYPE     := bool | int | float | num | str | dtype | ints | dims | bools | floats
 *   DEFAULT  := INT | FLOAT | true | false | none | "string" | DTYPE | '[' [item {',' item}] ']'
 * An attribute without a default is required. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"

#define PW FJ_OPF_POINTWISE
#define RED FJ_OPF_REDUCTION
#define LAY FJ_OPF_LAYOUT
#define OPQ FJ_OPF_OPAQUE
#define RND FJ_OPF_RANDOM
#define RC FJ_OPF_RECOMPUTABLE
#define SRC FJ_OPF_SOURCE

#define OP(E, name, operands, results, attrs, flags, infer) fj_status fj_infer_##infer(fj_infer *ic);
#include "ops.def"

static const struct op_row {
	const char *name, *operands, *results, *attrs;
	uint32_t flags;
	fj_infer_fn infer;
	const char *infer_name;
} rows[] = {
#define OP(E, name, operands, results, attrs, flags, infer) \
	{name, operands, results, attrs, flags, fj_infer_##infer, #infer},
#include "ops.def"
};

const char *fj_op_name(fj_op op) { return (unsigned)op < FJ_OP_COUNT ? rows[op].name : "?"; }

bool fj_op_lookup(const char *name, size_t len, fj_op *out)
{
	/* Linear: the parser calls this once per node; ~300 short compares. */
	for (int i = 0; i < FJ_OP_COUNT; i++) {
		if (strncmp(rows[i].name, name, len) == 0 && rows[i].name[len] == 0) {
			*out = (fj_op)i;
			return true;
		}
	}
	return false;
}

const fj_opinfo *fj_op_info(const fj_context *ctx, fj_op op)
{
	FJ_ASSERT((unsigned)op < FJ_OP_COUNT);
	return &ctx->ops[op];
}

int fj_op_attr_index(const fj_opinfo *oi, const char *name, size_t len)
{
	for (int i = 0; i < oi->nattrs; i++)
		if (strncmp(oi->attrs[i].name, name, len) == 0 && oi->attrs[i].name[len] == 0)
			return i;
	return -1;
}

/* ---- spec parsing ---- */

typedef struct spec {
	fj_arena *a;
	const char *p;
	bool bad, oom;
} spec;

static void skip_ws(spec *s)
{
	while (*s->p == ' ')
		s->p++;
}

static const char *spec_name(spec *s)
{
	skip_ws(s);
	const char *b = s->p;
	while (isalnum((unsigned char)*s->p) || *s->p == '_')
		s->p++;
	if (s->p == b) {
		s->bad = true;
		return "";
	}
	const char *n = fj_arena_strndup(s->a, b, (size_t)(s->p - b));
	if (!n)
		s->oom = true;
	return n ? n : "";
}

static bool spec_eat(spec *s, char c)
{
	skip_ws(s);
	if (*s->p == c) {
		s->p++;
		return true;
	}
	return false;
}

static fj_attr spec_value(spec *s)
{
	fj_attr a = {.kind = FJ_AK_NONE};
	skip_ws(s);
	if (*s->p == '[') {
		s->p++;
		fj_attr items[FJ_MAX_RANK];
		uint32_t n = 0;
		if (!spec_eat(s, ']')) {
			do {
				if (n == FJ_MAX_RANK) {
					s->bad = true;
					return a;
				}
				items[n++] = spec_value(s);
			} while (spec_eat(s, ','));
			if (!spec_eat(s, ']'))
				s->bad = true;
		}
		a.kind = FJ_AK_LIST;
		a.n = n;
		a.u.items = fj_arena_alloc(s->a, (n ? n : 1) * sizeof *items);
		if (!a.u.items)
			s->oom = true;
		else if (n)
			memcpy(a.u.items, items, n * sizeof *items);
		return a;
	}
	if (*s->p == '"') {
		const char *b = ++s->p;
		while (*s->p && *s->p != '"')
			s->p++;
		if (*s->p != '"') {
			s->bad = true;
			return a;
		}
		a.kind = FJ_AK_STR;
		a.u.s = fj_arena_strndup(s->a, b, (size_t)(s->p - b));
		if (!a.u.s)
			s->oom = true;
		s->p++;
		return a;
	}
	const char *b = s->p;
	while (*s->p && *s->p != ';' && *s->p != ',' && *s->p != ']' && *s->p != ' ')
		s->p++;
	size_t n = (size_t)(s->p - b);
	char buf[64];
	if (n == 0 || n >= sizeof buf) {
		s->bad = true;
		return a;
	}
	memcpy(buf, b, n);
	buf[n] = 0;
	fj_dtype dt;
	char *end;
	if (strcmp(buf, "none") == 0) {
		a.kind = FJ_AK_NONE;
	} else if (strcmp(buf, "true") == 0 || strcmp(buf, "false") == 0) {
		a = fj_attr_bool(buf[0] == 't');
	} else if (fj_dtype_from_name(buf, n, &dt)) {
		a = fj_attr_dtype(dt);
	} else if (strpbrk(buf, ".eEin")) {
		a = fj_attr_float(strtod(buf, &end));
		if (*end)
			s->bad = true;
	} else {
		a = fj_attr_int(strtoll(buf, &end, 10));
		if (*end)
			s->bad = true;
	}
	return a;
}

static const struct {
	const char *name;
	fj_attr_type type;
} attr_types[] = {
	{"bool", FJ_AT_BOOL}, {"int", FJ_AT_INT}, {"float", FJ_AT_FLOAT}, {"num", FJ_AT_NUM},
	{"str", FJ_AT_STR}, {"dtype", FJ_AT_DTYPE}, {"ints", FJ_AT_INTS}, {"dims", FJ_AT_DIMS},
	{"bools", FJ_AT_BOOLS}, {"floats", FJ_AT_FLOATS},
};

/* Returns 0, or -1 for a malformed row, or -2 when memory ran out. */
static int parse_row(fj_arena *a, const struct op_row *r, fj_opinfo *oi)
{
	spec s = {a, r->operands, false, false};
	memset(oi, 0, sizeof *oi);
	oi->name = r->name;
	oi->flags = r->flags;
	if (strncmp(r->name, "aten.", 5) == 0)
		oi->flags |= FJ_OPF_ATEN;
	else if (strncmp(r->name, "prims.", 6) == 0)
		oi->flags |= FJ_OPF_PRIMS;
	else if (strncmp(r->name, "fusion.", 7) == 0)
		oi->flags |= FJ_OPF_FUSION;
	else
		return -1;
	oi->infer = r->infer;
	oi->infer_name = r->infer_name;
	skip_ws(&s);
	while (*s.p) {
		if (oi->noperands == FJ_MAX_SPEC)
			return -1;
		fj_operand_spec *o = &oi->operands[oi->noperands++];
		o->name = spec_name(&s);
		if (spec_eat(&s, '?'))
			o->optional = true;
		else if (spec_eat(&s, '*'))
			o->variadic = true;
		else if (spec_eat(&s, '+'))
			o->variadic = o->nonempty = true;
		if (o->variadic && *s.p)
			return -1;
		if (!spec_eat(&s, ',') && (skip_ws(&s), *s.p))
			return -1;
	}
	s.p = r->results;
	if (spec_eat(&s, '*')) {
		oi->variadic_results = true;
	} else {
		do {
			if (oi->nresults == FJ_MAX_SPEC)
				return -1;
			oi->results[oi->nresults++] = spec_name(&s);
		} while (spec_eat(&s, ','));
	}
	skip_ws(&s);
	if (*s.p)
		return -1;
	s.p = r->attrs;
	skip_ws(&s);
	while (*s.p) {
		if (oi->nattrs == FJ_MAX_SPEC)
			return -1;
		fj_attr_spec *at = &oi->attrs[oi->nattrs++];
		at->name = spec_name(&s);
		if (!spec_eat(&s, ':'))
			return -1;
		skip_ws(&s);
		const char *tb = s.p;
		while (isalpha((unsigned char)*s.p))
			s.p++;
		size_t tn = (size_t)(s.p - tb);
		size_t k;
		for (k = 0; k < FJ_ARRAY_LEN(attr_types); k++)
			if (strlen(attr_types[k].name) == tn && memcmp(attr_types[k].name, tb, tn) == 0)
				break;
		if (k == FJ_ARRAY_LEN(attr_types))
			return -1;
		at->type = attr_types[k].type;
		at->optional = spec_eat(&s, '?');
		if (spec_eat(&s, '='))
			at->dflt = spec_value(&s);
		else
			at->required = true;
		if (!spec_eat(&s, ';') && (skip_ws(&s), *s.p))
			return -1;
	}
	return s.oom ? -2 : s.bad ? -1 : 0;
}

fj_status fj_op_table_init(fj_context *ctx)
{
	fj_arena_init(&ctx->op_arena, ctx);
	ctx->ops = fj_arena_alloc(&ctx->op_arena, FJ_OP_COUNT * sizeof *ctx->ops);
	if (!ctx->ops)
		return FJ_ERR_NOMEM;
	for (int i = 0; i < FJ_OP_COUNT; i++) {
		int rc = parse_row(&ctx->op_arena, &rows[i], &ctx->ops[i]);
		if (rc == -2)
			return FJ_ERR_NOMEM;
		/* A typo in ops.def is a bug in fusejit, caught by every test. */
		if (rc < 0)
			fj_assert_fail(rows[i].name, "ir/ops.def: malformed spec", 0);
	}
	return FJ_OK;
}

void fj_op_table_free(fj_context *ctx)
{
	fj_arena_free(&ctx->op_arena);
	ctx->ops = NULL;
}
