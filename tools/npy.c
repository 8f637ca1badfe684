/* npy.c -- reading and writing .npy files (npy.h), for the tools: on the
 * public header alone.
 *
 * Format (numpy.lib.format): the magic "\x93NUMPY", a major and minor version
 * byte (1.0, 2.0, 3.0), a little-endian header length (u16 for 1.0, u32
 * after), then the header: a Python dict literal with exactly the keys
 * 'descr', 'fortran_order' and 'shape', padded with spaces and ended by '\n';
 * then the raw data. The header is parsed by a small recursive-descent reader
 * of that literal, which refuses anything else. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define NPY_MAX_HEADER (1u << 20)

static fj_status npy_err(npy_error *err, fj_status st, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static fj_status npy_err(npy_error *err, fj_status st, const char *name, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (err)
		snprintf(err->msg, sizeof err->msg, "%s: %s", name, msg);
	return st;
}

bool npy_dtype_from_descr(const char *d, fj_scalar_type *out, const char **what)
{
	static const struct {
		const char *descr;
		fj_scalar_type dt;
	} tab[] = {
		{"<f8", FJ_TYPE_F64}, {"<f4", FJ_TYPE_F32}, {"<f2", FJ_TYPE_F16}, {"<u2", FJ_TYPE_BF16},
		{"<i8", FJ_TYPE_I64}, {"<i4", FJ_TYPE_I32}, {"<i2", FJ_TYPE_I16}, {"|i1", FJ_TYPE_I8},
		{"|u1", FJ_TYPE_U8},  {"|b1", FJ_TYPE_BOOL},
		/* equivalent spellings NumPy accepts */
		{"<i1", FJ_TYPE_I8}, {"<u1", FJ_TYPE_U8}, {"<b1", FJ_TYPE_BOOL}, {"=i1", FJ_TYPE_I8},
		{"=u1", FJ_TYPE_U8}, {"=b1", FJ_TYPE_BOOL}, {"=f8", FJ_TYPE_F64}, {"=f4", FJ_TYPE_F32},
		{"=f2", FJ_TYPE_F16}, {"=u2", FJ_TYPE_BF16}, {"=i8", FJ_TYPE_I64}, {"=i4", FJ_TYPE_I32},
		{"=i2", FJ_TYPE_I16},
	};
	for (size_t i = 0; i < ARRAY_LEN(tab); i++)
		if (strcmp(d, tab[i].descr) == 0) {
			*out = tab[i].dt;
			return true;
		}
	if (what) {
		if (strchr(d, 'O'))
			*what = "object arrays (pickled data) are not supported";
		else if (d[0] == '>' && d[1] && d[2] != '1')
			*what = "big-endian data is not supported";
		else if (d[0] == '|' && d[1] == 'V')
			*what = "void/structured dtypes are not supported";
		else
			*what = "unsupported dtype";
	}
	return false;
}

const char *npy_descr(fj_scalar_type dt)
{
	static const char *const d[] = {
		[FJ_TYPE_F64] = "<f8", [FJ_TYPE_F32] = "<f4", [FJ_TYPE_F16] = "<f2", [FJ_TYPE_BF16] = "<u2",
		[FJ_TYPE_I64] = "<i8", [FJ_TYPE_I32] = "<i4", [FJ_TYPE_I16] = "<i2", [FJ_TYPE_I8] = "|i1",
		[FJ_TYPE_U8] = "|u1",  [FJ_TYPE_BOOL] = "|b1",
	};
	return (unsigned)dt < ARRAY_LEN(d) ? d[dt] : "?";
}

bool npy_bytes(fj_scalar_type dt, const int64_t *sizes, int rank, size_t *out)
{
	size_t n = fj_scalar_type_size(dt);
	for (int i = 0; i < rank; i++) {
		if (sizes[i] < 0 || (sizes[i] && n > SIZE_MAX / (size_t)sizes[i]) || sizes[i] > INT64_MAX / 2)
			return false;
		n *= (size_t)sizes[i];
	}
	*out = n;
	return true;
}

bool npy_alloc(fj_tensor *t, fj_scalar_type dt, int rank, const int64_t *sizes)
{
	size_t n;
	memset(t, 0, sizeof *t);
	if (rank < 0 || rank > FJ_MAX_DIMS || !npy_bytes(dt, sizes, rank, &n))
		return false;
	size_t cap = (n + 63) / 64 * 64;
	t->data = aligned_alloc(64, cap ? cap : 64);
	if (!t->data)
		return false;
	memset(t->data, 0, cap ? cap : 64);
	t->struct_size = sizeof *t;
	t->dtype = dt;
	t->rank = rank;
	memcpy(t->sizes, sizes, (size_t)rank * sizeof *sizes);
	return true;
}

void npy_free(fj_tensor *t)
{
	if (t && !(t->flags & FJ_TENSOR_OWNED))
		free(t->data);
	else if (t)
		fj_tensor_release(t);
	if (t)
		t->data = NULL;
}

/* ---- the header: a Python dict literal ---- */

typedef struct hdr_parser {
	const char *s, *end;
	const char *err;
} hdr_parser;

typedef struct npy_header {
	char descr[32];
	bool fortran;
	int rank;
	int64_t dims[FJ_MAX_DIMS];
	bool has_descr, has_fortran, has_shape;
	bool structured;
	bool too_many_dims;
	bool size_overflow;
} npy_header;

static void hp_ws(hdr_parser *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
		p->s++;
}

static bool hp_char(hdr_parser *p, char c)
{
	hp_ws(p);
	if (p->s < p->end && *p->s == c) {
		p->s++;
		return true;
	}
	return false;
}

/* A quoted string into buf (no escapes: the keys and descrs never have them). */
static bool hp_string(hdr_parser *p, char *buf, size_t size)
{
	hp_ws(p);
	if (p->s >= p->end || (*p->s != '\'' && *p->s != '"'))
		return false;
	char q = *p->s++;
	size_t n = 0;
	while (p->s < p->end && *p->s != q) {
		if (*p->s == '\\' || (unsigned char)*p->s < 0x20 || n + 1 >= size)
			return false;
		buf[n++] = *p->s++;
	}
	if (p->s >= p->end)
		return false;
	p->s++;
	buf[n] = 0;
	return true;
}

static bool hp_word(hdr_parser *p, const char *w)
{
	hp_ws(p);
	size_t n = strlen(w);
	if ((size_t)(p->end - p->s) >= n && memcmp(p->s, w, n) == 0) {
		const char *after = p->s + n;
		if (after < p->end && (((*after | 32) >= 'a' && (*after | 32) <= 'z') || *after == '_' ||
		                       (*after >= '0' && *after <= '9')))
			return false;
		p->s = after;
		return true;
	}
	return false;
}

static bool hp_int(hdr_parser *p, int64_t *out, bool *overflow)
{
	hp_ws(p);
	if (p->s >= p->end || *p->s < '0' || *p->s > '9')
		return false;
	uint64_t v = 0;
	while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
		unsigned dgt = (unsigned)(*p->s++ - '0');
		if (v > ((uint64_t)INT64_MAX - dgt) / 10)
			*overflow = true;
		else
			v = v * 10 + dgt;
	}
	if (p->s < p->end && (*p->s == 'L' || *p->s == 'l'))
		p->s++; /* Python 2 long */
	*out = (int64_t)v;
	return true;
}

/* Skips a balanced [...] or (...) (a structured descr). */
static bool hp_skip_list(hdr_parser *p)
{
	int depth = 0;
	char q = 0;
	for (; p->s < p->end; p->s++) {
		char c = *p->s;
		if (q) {
			if (c == q)
				q = 0;
			continue;
		}
		if (c == '\'' || c == '"')
			q = c;
		else if (c == '[' || c == '(')
			depth++;
		else if (c == ']' || c == ')') {
			if (--depth == 0) {
				p->s++;
				return true;
			}
		}
	}
	return false;
}

static bool parse_header(const char *text, size_t len, npy_header *h, const char **why)
{
	hdr_parser p = {text, text + len, NULL};
	memset(h, 0, sizeof *h);
	*why = "malformed header";
	if (!hp_char(&p, '{'))
		return false;
	for (;;) {
		if (hp_char(&p, '}'))
			break;
		char key[32];
		if (!hp_string(&p, key, sizeof key) || !hp_char(&p, ':'))
			return false;
		if (strcmp(key, "descr") == 0 && !h->has_descr) {
			h->has_descr = true;
			hp_ws(&p);
			if (p.s < p.end && *p.s == '[') {
				h->structured = true;
				if (!hp_skip_list(&p))
					return false;
			} else if (!hp_string(&p, h->descr, sizeof h->descr)) {
				return false;
			}
		} else if (strcmp(key, "fortran_order") == 0 && !h->has_fortran) {
			h->has_fortran = true;
			if (hp_word(&p, "True"))
				h->fortran = true;
			else if (!hp_word(&p, "False"))
				return false;
		} else if (strcmp(key, "shape") == 0 && !h->has_shape) {
			h->has_shape = true;
			if (!hp_char(&p, '('))
				return false;
			int r = 0;
			for (;;) {
				if (hp_char(&p, ')'))
					break;
				int64_t v;
				if (!hp_int(&p, &v, &h->size_overflow))
					return false;
				if (r < FJ_MAX_DIMS)
					h->dims[r] = v;
				else
					h->too_many_dims = true;
				r++;
				if (r > 64)
					return false;
				if (hp_char(&p, ','))
					continue;
				if (!hp_char(&p, ')'))
					return false;
				break;
			}
			/* (3) is not a tuple; (3,) is */
			h->rank = r;
		} else {
			*why = "malformed header (an unknown or repeated key)";
			return false;
		}
		if (hp_char(&p, ','))
			continue;
		if (!hp_char(&p, '}'))
			return false;
		break;
	}
	hp_ws(&p);
	if (p.s != p.end) {
		*why = "malformed header (garbage after the dict)";
		return false;
	}
	if (!h->has_descr || !h->has_fortran || !h->has_shape) {
		*why = "malformed header (a key of 'descr', 'fortran_order', 'shape' is missing)";
		return false;
	}
	return true;
}

/* ---- reading ---- */

typedef struct npy_src {
	FILE *f;
	const unsigned char *mem;
	size_t len, pos;
	size_t total; /* the size of the file / buffer */
} npy_src;

static bool src_read(npy_src *s, void *dst, size_t n)
{
	if (s->f)
		return fread(dst, 1, n, s->f) == n;
	if (s->len - s->pos < n)
		return false;
	memcpy(dst, s->mem + s->pos, n);
	s->pos += n;
	return true;
}

static fj_status read_npy(npy_error *err, const char *name, npy_src *s, fj_tensor *t)
{
	memset(t, 0, sizeof *t);
	unsigned char pre[12];
	if (s->total < 10 || !src_read(s, pre, 10))
		return npy_err(err, FJ_ERR_INVALID, name, "not a .npy file (too short for the header)");
	if (memcmp(pre, "\x93NUMPY", 6) != 0)
		return npy_err(err, FJ_ERR_INVALID, name, "not a .npy file (bad magic string)");
	unsigned major = pre[6], minor = pre[7];
	if ((major != 1 && major != 2 && major != 3) || minor != 0)
		return npy_err(err, FJ_ERR_INVALID, name, "unsupported .npy format version %u.%u", major, minor);
	size_t hlen, pos;
	if (major == 1) {
		hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
		pos = 10;
	} else {
		if (s->total < 12 || !src_read(s, pre + 10, 2))
			return npy_err(err, FJ_ERR_INVALID, name, "truncated .npy header");
		hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
		pos = 12;
	}
	if (hlen > NPY_MAX_HEADER)
		return npy_err(err, FJ_ERR_INVALID, name, "malformed header (header length %zu is too large)", hlen);
	if (s->total - pos < hlen)
		return npy_err(err, FJ_ERR_INVALID, name, "truncated .npy header");
	char *text = malloc(hlen + 1);
	if (!text)
		return npy_err(err, FJ_ERR_NOMEM, name, "out of memory reading the header");
	if (!src_read(s, text, hlen)) {
		free(text);
		return npy_err(err, FJ_ERR_IO, name, "read error in the header");
	}
	text[hlen] = 0;
	npy_header h;
	const char *why;
	bool ok = parse_header(text, hlen, &h, &why);
	free(text);
	if (!ok)
		return npy_err(err, FJ_ERR_INVALID, name, "%s", why);
	if (h.structured)
		return npy_err(err, FJ_ERR_INVALID, name, "structured arrays are not supported");
	fj_scalar_type dt;
	const char *what = NULL;
	if (!npy_dtype_from_descr(h.descr, &dt, &what))
		return npy_err(err, FJ_ERR_INVALID, name, "%s ('%s')", what, h.descr);
	if (h.fortran)
		return npy_err(err, FJ_ERR_INVALID, name,
		               "Fortran-order arrays are not supported (save a C-contiguous array)");
	if (h.too_many_dims)
		return npy_err(err, FJ_ERR_INVALID, name, "rank %d is above the maximum of %d", h.rank, FJ_MAX_DIMS);
	size_t nbytes;
	if (h.size_overflow || !npy_bytes(dt, h.dims, h.rank, &nbytes))
		return npy_err(err, FJ_ERR_INVALID, name, "the shape's size overflows");
	size_t have = s->total - pos - hlen;
	if (have < nbytes)
		return npy_err(err, FJ_ERR_INVALID, name, "truncated data: %zu bytes, expected %zu", have, nbytes);
	if (have > nbytes)
		return npy_err(err, FJ_ERR_INVALID, name, "%zu bytes of unexpected data after the array", have - nbytes);
	if (!npy_alloc(t, dt, h.rank, h.dims))
		return npy_err(err, FJ_ERR_NOMEM, name, "out of memory for %zu bytes of data", nbytes);
	if (nbytes && !src_read(s, t->data, nbytes)) {
		npy_free(t);
		return npy_err(err, FJ_ERR_IO, name, "read error in the data");
	}
	return FJ_OK;
}

fj_status npy_read(npy_error *err, const char *path, fj_tensor *t)
{
	memset(t, 0, sizeof *t);
	FILE *f = fopen(path, "rb");
	if (!f)
		return npy_err(err, FJ_ERR_IO, path, "cannot open: %s", strerror(errno));
	struct stat sb;
	if (fstat(fileno(f), &sb) != 0) {
		int e = errno;
		fclose(f);
		return npy_err(err, FJ_ERR_IO, path, "cannot read: %s", strerror(e));
	}
	if (!S_ISREG(sb.st_mode)) {
		fclose(f);
		return npy_err(err, FJ_ERR_IO, path, "cannot read: %s",
		               S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
	}
	npy_src s = {f, NULL, 0, 0, (size_t)sb.st_size};
	fj_status st = read_npy(err, path, &s, t);
	fclose(f);
	return st;
}

fj_status npy_read_mem(npy_error *err, const char *name, const void *data, size_t len, fj_tensor *t)
{
	npy_src s = {NULL, data, len, 0, len};
	return read_npy(err, name, &s, t);
}

/* ---- writing ---- */

static size_t make_header(const fj_tensor *t, char *buf, size_t size)
{
	char shape[FJ_MAX_DIMS * 24 + 8];
	size_t k = 0;
	shape[k++] = '(';
	for (int i = 0; i < t->rank; i++)
		k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "", (long long)t->sizes[i]);
	if (t->rank == 1)
		shape[k++] = ',';
	shape[k++] = ')';
	shape[k] = 0;
	int n = snprintf(buf + 10, size - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
	                 npy_descr(t->dtype), shape);
	size_t total = 10 + (size_t)n + 1; /* + '\n' */
	size_t padded = (total + 63) / 64 * 64;
	memset(buf + 10 + n, ' ', padded - total);
	buf[padded - 1] = '\n';
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	size_t hlen = padded - 10;
	buf[8] = (char)(hlen & 0xff);
	buf[9] = (char)(hlen >> 8);
	return padded;
}

fj_status npy_write_temp(npy_error *err, const char *path, const fj_tensor *t, char **tmp)
{
	*tmp = NULL;
	size_t plen = strlen(path);
	char *name = malloc(plen + 16);
	if (!name)
		return npy_err(err, FJ_ERR_NOMEM, path, "out of memory");
	memcpy(name, path, plen);
	memcpy(name + plen, ".tmp.XXXXXX", 12);
	int fd = mkstemp(name);
	if (fd < 0) {
		int e = errno;
		free(name);
		return npy_err(err, FJ_ERR_IO, path, "cannot create: %s", strerror(e));
	}
	mode_t um = umask(0);
	umask(um);
	(void)fchmod(fd, 0666 & ~um);
	FILE *f = fdopen(fd, "wb");
	if (!f) {
		int e = errno;
		close(fd);
		unlink(name);
		free(name);
		return npy_err(err, FJ_ERR_IO, path, "cannot write: %s", strerror(e));
	}
	char hdr[512];
	size_t hn = make_header(t, hdr, sizeof hdr);
	bool ok = fwrite(hdr, 1, hn, f) == hn;
	size_t nbytes = 0;
	npy_bytes(t->dtype, t->sizes, t->rank, &nbytes);
	if (ok && nbytes)
		ok = fwrite(t->data, 1, nbytes, f) == nbytes;
	int e = errno;
	if (fclose(f) != 0 && ok) {
		ok = false;
		e = errno;
	}
	if (!ok) {
		unlink(name);
		free(name);
		return npy_err(err, FJ_ERR_IO, path, "cannot write: %s", strerror(e));
	}
	*tmp = name;
	return FJ_OK;
}

fj_status npy_commit(npy_error *err, char *tmp, const char *path)
{
	fj_status st = FJ_OK;
	if (rename(tmp, path) != 0) {
		st = npy_err(err, FJ_ERR_IO, path, "cannot write: %s", strerror(errno));
		unlink(tmp);
	}
	free(tmp);
	return st;
}

void npy_discard(char *tmp)
{
	if (tmp)
		unlink(tmp);
	free(tmp);
}

fj_status npy_write(npy_error *err, const char *path, const fj_tensor *t)
{
	char *tmp;
	fj_status st = npy_write_temp(err, path, t, &tmp);
	if (st != FJ_OK)
		return st;
	return npy_commit(err, tmp, path);
}
