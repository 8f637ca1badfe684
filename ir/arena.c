/* arena.c -- bump allocation in growing blocks, freed in one call.
 * Each graph owns one; allocation failure returns NULL and callers report
 * FJ_ERR_NOMEM. Blocks double in size up to 1 MiB; large requests get a block
 * of their own. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

struct fj_arena_block {
	fj_arena_block *next;
	size_t size; /* bytes of data[] */
	_Alignas(16) unsigned char data[];
};

void fj_arena_init(fj_arena *a, fj_context *ctx)
{
	memset(a, 0, sizeof *a);
	a->ctx = ctx;
}

void fj_arena_free(fj_arena *a)
{
	fj_arena_block *b = a->head;
	while (b) {
		fj_arena_block *next = b->next;
		fj_free(a->ctx, b, sizeof *b + b->size);
		b = next;
	}
	a->head = NULL;
	a->used = a->cap = a->total = 0;
}

void *fj_arena_alloc(fj_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (!a->head || a->cap - a->used < n) {
		size_t size = a->head ? a->head->size * 2 : 1024;
		if (size > (1u << 20))
			size = 1u << 20;
		if (size < n)
			size = n;
		if (size > SIZE_MAX / 2)
			return NULL;
		fj_arena_block *b = fj_alloc(a->ctx, sizeof *b + size);
		if (!b)
			return NULL;
		b->size = size;
		a->total += size;
		if (a->head && n > a->cap - a->used && size == n && a->cap - a->used > 256) {
			/* A big request: keep filling the current block afterwards. */
			b->next = a->head->next;
			a->head->next = b;
			memset(b->data, 0, n);
			return b->data;
		}
		b->next = a->head;
		a->head = b;
		a->used = 0;
		a->cap = size;
	}
	void *p = a->head->data + a->used;
	a->used += n;
	memset(p, 0, n);
	return p;
}

char *fj_arena_strndup(fj_arena *a, const char *s, size_t n)
{
	char *d = fj_arena_alloc(a, n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

char *fj_arena_strdup(fj_arena *a, const char *s) { return fj_arena_strndup(a, s, strlen(s)); }

void *fj_arena_grow(fj_arena *a, void *old, size_t n, size_t cap, size_t elem)
{
	if (cap && elem > SIZE_MAX / cap)
		return NULL;
	void *p = fj_arena_alloc(a, cap * elem);
	if (p && n)
		memcpy(p, old, n * elem);
	return p;
}

char *fj_arena_printf(fj_arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *d = n >= 0 ? fj_arena_alloc(a, (size_t)n + 1) : NULL;
	if (d)
		vsnprintf(d, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return d;
}
