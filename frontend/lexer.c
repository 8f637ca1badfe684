/* lexer.c -- the .fj tokenizer (IR.md §1).
 *
 * A hand-written scanner over a byte buffer with an explicit length, so NUL
 * bytes and any other bytes are just input. Malformed tokens (bad bytes,
 * `1.`, `.5`, unterminated strings, bad escapes, invalid UTF-8, integers that
 * do not fit in 64 bits) become FJ_TOK_ERROR tokens with a message and the
 * place of the offending byte. Columns count bytes from 1. O(n) overall, no
 * allocation, no recursion. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lexer.h"

void fj_lex_init(fj_lexer *lx, const char *src, size_t len)
{
	lx->src = src;
	lx->len = len;
	lx->pos = 0;
	lx->line = 1;
	lx->col = 1;
}

static int peekc(const fj_lexer *lx, size_t ahead)
{
	size_t i = lx->pos + ahead;
	return i < lx->len ? (unsigned char)lx->src[i] : -1;
}

static void advance(fj_lexer *lx)
{
	if (lx->pos >= lx->len)
		return;
	if (lx->src[lx->pos] == '\n') {
		lx->line++;
		lx->col = 1;
	} else {
		lx->col++;
	}
	lx->pos++;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_id_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_id_char(int c) { return is_id_start(c) || is_digit(c); }
static bool is_name_char(int c) { return is_id_char(c) || c == '.'; }

static void describe_byte(int c, char *buf, size_t size)
{
	if (c >= 0x21 && c < 0x7f)
		snprintf(buf, size, "character '%c'", c);
	else
		snprintf(buf, size, "byte 0x%02x", (unsigned)c & 0xff);
}

/* Makes tok an error at the lexer's current place; skips one byte. */
static void lex_error(fj_lexer *lx, fj_token *tok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void lex_error(fj_lexer *lx, fj_token *tok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tok->err, sizeof tok->err, fmt, ap);
	va_end(ap);
	tok->kind = FJ_TOK_ERROR;
	tok->eline = lx->line;
	tok->ecol = lx->col;
	advance(lx);
}

/* '//' at the current place is floor division (N//2, (N+1)//2), not a
 * comment: it follows a size's last byte and a digit follows it, with no
 * white space on either side (IR.md §1). */
static bool at_floordiv(const fj_lexer *lx)
{
	if (peekc(lx, 0) != '/' || peekc(lx, 1) != '/' || !is_digit(peekc(lx, 2)) || lx->pos == 0)
		return false;
	int b = (unsigned char)lx->src[lx->pos - 1];
	return is_id_char(b) || b == ')';
}

static void skip_space(fj_lexer *lx)
{
	for (;;) {
		int c = peekc(lx, 0);
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			advance(lx);
		} else if (c == '/' && peekc(lx, 1) == '/' && !at_floordiv(lx)) {
			while (lx->pos < lx->len && lx->src[lx->pos] != '\n')
				advance(lx);
		} else {
			return;
		}
	}
}

/* The length of a valid UTF-8 sequence at the current place (c >= 0x80), or 0. */
static int utf8_len(const fj_lexer *lx)
{
	int c = peekc(lx, 0), n;
	uint32_t cp, min;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = (uint32_t)c & 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = (uint32_t)c & 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = (uint32_t)c & 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	for (int k = 1; k < n; k++) {
		int d = peekc(lx, (size_t)k);
		if (d < 0x80 || d > 0xbf)
			return 0;
		cp = (cp << 6) | ((uint32_t)d & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static void lex_string(fj_lexer *lx, fj_token *tok)
{
	uint32_t line = lx->line, col = lx->col;
	advance(lx); /* '"' */
	size_t start = lx->pos;
	for (;;) {
		int c = peekc(lx, 0);
		if (c < 0 || c == '\n') {
			snprintf(tok->err, sizeof tok->err, "unterminated string (a string ends on its line with '\"')");
			tok->kind = FJ_TOK_ERROR;
			tok->eline = line;
			tok->ecol = col;
			return;
		}
		if (c == '"')
			break;
		if (c == '\\') {
			int e = peekc(lx, 1);
			if (e == '"' || e == '\\' || e == 'n' || e == 't') {
				advance(lx);
				advance(lx);
				continue;
			}
			if (e >= 0x21 && e < 0x7f)
				lex_error(lx, tok, "invalid escape '\\%c' in string (use \\\" \\\\ \\n \\t)", e);
			else
				lex_error(lx, tok, "invalid escape in string (use \\\" \\\\ \\n \\t)");
			return;
		}
		if (c < 0x20 || c == 0x7f) {
			lex_error(lx, tok, "control byte 0x%02x in string (use \\n or \\t)", (unsigned)c);
			return;
		}
		if (c >= 0x80) {
			int n = utf8_len(lx);
			if (!n) {
				lex_error(lx, tok, "invalid UTF-8 in string (byte 0x%02x)", (unsigned)c);
				return;
			}
			for (int k = 0; k < n; k++)
				advance(lx);
			continue;
		}
		advance(lx);
	}
	tok->kind = FJ_TOK_STRING;
	tok->p = lx->src + start;
	tok->n = lx->pos - start;
	advance(lx); /* '"' */
}

size_t fj_lex_string_value(const fj_token *tok, char *dst)
{
	size_t o = 0;
	for (size_t i = 0; i < tok->n; i++) {
		char c = tok->p[i];
		if (c == '\\' && i + 1 < tok->n) {
			char e = tok->p[++i];
			c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
		}
		dst[o++] = c;
	}
	dst[o] = 0;
	return o;
}

/* A number at the current place: ['-'] digits ['.' digits] [exp], or
 * '-inf' / '-nan'. */
static void lex_number(fj_lexer *lx, fj_token *tok)
{
	size_t start = lx->pos;
	bool neg = false, is_float = false;
	if (peekc(lx, 0) == '-') {
		neg = true;
		advance(lx);
		if (!is_digit(peekc(lx, 0))) { /* inf or nan, checked by the caller */
			for (int k = 0; k < 3; k++)
				advance(lx);
			tok->kind = FJ_TOK_FLOAT;
			tok->p = lx->src + start;
			tok->n = lx->pos - start;
			return;
		}
	}
	uint64_t v = 0;
	bool overflow = false;
	while (is_digit(peekc(lx, 0))) {
		unsigned d = (unsigned)(peekc(lx, 0) - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
		advance(lx);
	}
	if (peekc(lx, 0) == '.') {
		if (!is_digit(peekc(lx, 1))) {
			lex_error(lx, tok, "malformed number '%.*s.': a digit must follow the '.' (write %.*s.0)",
			          (int)(lx->pos - start > 40 ? 40 : lx->pos - start), lx->src + start,
			          (int)(lx->pos - start > 40 ? 40 : lx->pos - start), lx->src + start);
			return;
		}
		is_float = true;
		advance(lx);
		while (is_digit(peekc(lx, 0)))
			advance(lx);
	}
	if (peekc(lx, 0) == 'e' || peekc(lx, 0) == 'E') {
		size_t k = 1;
		if (peekc(lx, 1) == '+' || peekc(lx, 1) == '-')
			k = 2;
		if (!is_digit(peekc(lx, k))) {
			for (size_t j = 0; j < k; j++)
				advance(lx);
			lex_error(lx, tok, "malformed number: digits must follow the exponent");
			return;
		}
		is_float = true;
		for (size_t j = 0; j < k; j++)
			advance(lx);
		while (is_digit(peekc(lx, 0)))
			advance(lx);
	}
	if (is_name_char(peekc(lx, 0))) {
		char what[40];
		describe_byte(peekc(lx, 0), what, sizeof what);
		lex_error(lx, tok, "malformed number: unexpected %s after '%.*s'", what,
		          (int)(lx->pos - start > 40 ? 40 : lx->pos - start), lx->src + start);
		return;
	}
	tok->p = lx->src + start;
	tok->n = lx->pos - start;
	if (is_float) {
		tok->kind = FJ_TOK_FLOAT;
		return;
	}
	if (overflow || v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) {
		snprintf(tok->err, sizeof tok->err, "integer %.*s%s does not fit in 64 bits (sizes are 64-bit)",
		         (int)(tok->n > 40 ? 40 : tok->n), tok->p, tok->n > 40 ? "..." : "");
		tok->kind = FJ_TOK_ERROR;
		tok->eline = tok->line;
		tok->ecol = tok->col;
		return;
	}
	tok->kind = FJ_TOK_INT;
	tok->i = neg ? (int64_t)(0 - v) : (int64_t)v;
}

static bool word_at(const fj_lexer *lx, size_t ahead, const char *w)
{
	size_t n = strlen(w);
	for (size_t k = 0; k < n; k++)
		if (peekc(lx, ahead + k) != (unsigned char)w[k])
			return false;
	return !is_name_char(peekc(lx, ahead + n));
}

void fj_lex_next(fj_lexer *lx, fj_token *tok)
{
	skip_space(lx);
	tok->kind = FJ_TOK_EOF;
	tok->p = lx->src + lx->pos;
	tok->n = 0;
	tok->line = lx->line;
	tok->col = lx->col;
	tok->i = 0;
	tok->err[0] = 0;
	int c = peekc(lx, 0);
	if (c < 0)
		return;
	size_t start = lx->pos;
	static const struct {
		char c;
		fj_tok_kind k;
	} punct[] = {
		{'(', FJ_TOK_LPAREN}, {')', FJ_TOK_RPAREN}, {'{', FJ_TOK_LBRACE}, {'}', FJ_TOK_RBRACE},
		{'[', FJ_TOK_LBRACKET}, {']', FJ_TOK_RBRACKET}, {',', FJ_TOK_COMMA}, {':', FJ_TOK_COLON},
		{'=', FJ_TOK_EQUAL}, {'*', FJ_TOK_STAR}, {'+', FJ_TOK_PLUS},
	};
	for (size_t i = 0; i < sizeof punct / sizeof punct[0]; i++) {
		if (c == punct[i].c) {
			tok->kind = punct[i].k;
			tok->n = 1;
			advance(lx);
			return;
		}
	}
	if (c == '%' || c == '@') {
		advance(lx);
		if (!is_name_char(peekc(lx, 0))) {
			if (peekc(lx, 0) < 0 || peekc(lx, 0) == ' ' || peekc(lx, 0) == '\t' ||
			    peekc(lx, 0) == '\n' || peekc(lx, 0) == '\r')
				lex_error(lx, tok, "expected a name right after '%c'", c);
			else {
				char what[40];
				describe_byte(peekc(lx, 0), what, sizeof what);
				lex_error(lx, tok, "expected a name right after '%c', found %s", c, what);
			}
			return;
		}
		while (is_name_char(peekc(lx, 0)))
			advance(lx);
		tok->kind = c == '%' ? FJ_TOK_VALNAME : FJ_TOK_GRAPHNAME;
		tok->p = lx->src + start + 1;
		tok->n = lx->pos - start - 1;
		return;
	}
	if (is_digit(c) || (c == '-' && (is_digit(peekc(lx, 1)) || word_at(lx, 1, "inf") || word_at(lx, 1, "nan")))) {
		lex_number(lx, tok);
		return;
	}
	if (c == '-') {
		tok->kind = FJ_TOK_MINUS;
		tok->n = 1;
		advance(lx);
		return;
	}
	if (at_floordiv(lx)) {
		tok->kind = FJ_TOK_FLOORDIV;
		tok->n = 2;
		advance(lx);
		advance(lx);
		return;
	}
	if (c == '.' && is_digit(peekc(lx, 1))) {
		lex_error(lx, tok, "malformed number: a number cannot start with '.' (write 0.%c...)", peekc(lx, 1));
		return;
	}
	if (is_id_start(c)) {
		while (is_id_char(peekc(lx, 0)))
			advance(lx);
		tok->kind = FJ_TOK_ID;
		while (peekc(lx, 0) == '.') {
			if (!is_id_start(peekc(lx, 1))) {
				advance(lx);
				char what[40];
				if (peekc(lx, 0) < 0)
					snprintf(what, sizeof what, "end of file");
				else
					describe_byte(peekc(lx, 0), what, sizeof what);
				lex_error(lx, tok, "malformed op name: expected an identifier after '.', found %s", what);
				return;
			}
			advance(lx);
			while (is_id_char(peekc(lx, 0)))
				advance(lx);
			tok->kind = FJ_TOK_OPNAME;
		}
		tok->p = lx->src + start;
		tok->n = lx->pos - start;
		return;
	}
	if (c == '"') {
		lex_string(lx, tok);
		return;
	}
	char what[40];
	describe_byte(c, what, sizeof what);
	if (c == '/')
		lex_error(lx, tok, "unexpected %s (comments start with '//')", what);
	else
		lex_error(lx, tok, "unexpected %s", what);
}
