/* lexer.h -- tokens of the .fj text format (IR.md §1).
 *
 * The lexer reads any bytes without crashing: a malformed token becomes an
 * FJ_TOK_ERROR token that carries its message and the place of the bad byte,
 * and the parser reports it when it reaches it (so peeking is free of side
 * effects). The lexer never allocates. */
#ifndef FJ_LEXER_H
#define FJ_LEXER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum fj_tok_kind {
	FJ_TOK_EOF,
	FJ_TOK_ERROR,
	FJ_TOK_ID,        /* [A-Za-z_][A-Za-z0-9_]* (keywords and dtypes included) */
	FJ_TOK_OPNAME,    /* ID '.' ID {'.' ID} */
	FJ_TOK_VALNAME,   /* %NAME; text without the '%' */
	FJ_TOK_GRAPHNAME, /* @NAME; text without the '@' */
	FJ_TOK_INT,       /* ['-'] [0-9]+, value in .i */
	FJ_TOK_FLOAT,     /* ['-'] FLOAT, or '-inf' / '-nan'; converted by the parser */
	FJ_TOK_STRING,    /* text between the quotes, escapes still in (validated) */
	FJ_TOK_LPAREN,
	FJ_TOK_RPAREN,
	FJ_TOK_LBRACE,
	FJ_TOK_RBRACE,
	FJ_TOK_LBRACKET,
	FJ_TOK_RBRACKET,
	FJ_TOK_COMMA,
	FJ_TOK_COLON,
	FJ_TOK_EQUAL,
	FJ_TOK_STAR,
	FJ_TOK_PLUS,
	FJ_TOK_MINUS,     /* a '-' that does not start a number */
	FJ_TOK_FLOORDIV   /* '//' right after a size and right before a digit: N//2 */
} fj_tok_kind;

typedef struct fj_token {
	fj_tok_kind kind;
	const char *p; /* the token's text (see above) */
	size_t n;
	uint32_t line, col; /* where the token starts (1-based; col counts bytes) */
	int64_t i;          /* FJ_TOK_INT */
	/* FJ_TOK_ERROR: the message and the place of the offending byte. */
	uint32_t eline, ecol;
	char err[160];
} fj_token;

typedef struct fj_lexer {
	const char *src;
	size_t len, pos;
	uint32_t line, col;
} fj_lexer;

void fj_lex_init(fj_lexer *lx, const char *src, size_t len);
/* The next token; at the end of the input, FJ_TOK_EOF forever. After an
 * FJ_TOK_ERROR token the lexer has skipped at least one byte. */
void fj_lex_next(fj_lexer *lx, fj_token *tok);
/* Decodes the escapes of a (validated) FJ_TOK_STRING into dst, which must
 * hold tok->n + 1 bytes; returns the decoded length (dst is NUL-terminated). */
size_t fj_lex_string_value(const fj_token *tok, char *dst);

#endif
