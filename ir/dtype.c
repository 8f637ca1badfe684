/* dtype.c -- dtype names, sizes and PyTorch's promotion table. */
#include <string.h>

#include "ir.h"

static const struct {
	const char *name;
	int size;
	const char *npy;
	char kind;
} dtypes[] = {
#define DTYPE(E, name, size, npy, kind) {name, size, npy, #kind[0]},
#include "dtypes.def"
};

const char *fj_dtype_name(fj_dtype dt) { return (unsigned)dt < FJ_DT_COUNT ? dtypes[dt].name : "?"; }
int fj_dtype_size(fj_dtype dt) { return dtypes[dt].size; }
const char *fj_dtype_npy(fj_dtype dt) { return dtypes[dt].npy; }
bool fj_dtype_is_float(fj_dtype dt) { return dtypes[dt].kind == 'F'; }
bool fj_dtype_is_int(fj_dtype dt) { return dtypes[dt].kind == 'I' || dtypes[dt].kind == 'U'; }
bool fj_dtype_is_bool(fj_dtype dt) { return dtypes[dt].kind == 'B'; }
double fj_dtype_exp_normal_lo(fj_dtype dt) { return dt == FJ_DT_F64 ? -708.39 : -87.33; }

bool fj_dtype_from_name(const char *s, size_t n, fj_dtype *out)
{
	for (int i = 0; i < FJ_DT_COUNT; i++) {
		if (strlen(dtypes[i].name) == n && memcmp(dtypes[i].name, s, n) == 0) {
			*out = (fj_dtype)i;
			return true;
		}
	}
	return false;
}

/* c10's promoteTypes, restricted to fusejit's dtypes. */
fj_dtype fj_dtype_promote(fj_dtype a, fj_dtype b)
{
	if (a == b)
		return a;
	if (a == FJ_DT_BOOL)
		return b;
	if (b == FJ_DT_BOOL)
		return a;
	bool fa = fj_dtype_is_float(a), fb = fj_dtype_is_float(b);
	if (fa && fb) {
		if ((a == FJ_DT_F16 && b == FJ_DT_BF16) || (a == FJ_DT_BF16 && b == FJ_DT_F16))
			return FJ_DT_F32;
		return dtypes[a].size >= dtypes[b].size ? a : b;
	}
	if (fa)
		return a;
	if (fb)
		return b;
	/* Both integers. u8 with a signed type: the signed type, but u8 + i8 -> i16. */
	if (a == FJ_DT_U8 || b == FJ_DT_U8) {
		fj_dtype s = a == FJ_DT_U8 ? b : a;
		return s == FJ_DT_I8 ? FJ_DT_I16 : s;
	}
	return dtypes[a].size >= dtypes[b].size ? a : b;
}
