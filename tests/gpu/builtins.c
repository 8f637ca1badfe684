/* builtins.c -- half-precision conversion builtins for the GPU kit's static
 * fusejit-run (scripts/build-gpu.sh).
 *
 * Host kernels JIT'd by LLVM call compiler builtins for conversions the CPU
 * has no instruction for (double -> half: __truncdfhf2), found at run time
 * with dlsym. A normal build gets them from libgcc_s; the kit links libgcc
 * statically, whose copies are hidden, so it exports these instead. They are
 * correctly rounded (to nearest even), NaN stays NaN, and use only integer
 * operations (no recursion into the builtins themselves). */
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default"), used))

static uint16_t d2h(double x)
{
	uint64_t b;
	memcpy(&b, &x, 8);
	uint16_t sign = (uint16_t)((b >> 48) & 0x8000);
	int exp = (int)((b >> 52) & 0x7ff);
	uint64_t man = b & 0xfffffffffffffULL;
	if (exp == 0x7ff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (uint16_t)(man >> 42) : 0));
	int e = exp - 1023 + 15;
	uint64_t full, rem, halfway;
	uint32_t m;
	if (e >= 1) {
		m = (uint32_t)(man >> 42);
		rem = man & ((1ULL << 42) - 1);
		halfway = 1ULL << 41;
		if (rem > halfway || (rem == halfway && (m & 1)))
			m++;
		if (m == 1024) {
			m = 0;
			e++;
		}
		if (e >= 31)
			return (uint16_t)(sign | 0x7c00);
		return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)m);
	}
	if (exp == 0)
		return sign; /* double subnormals are far below half's range */
	full = man | (1ULL << 52);
	int s = 1051 - exp; /* value = full * 2^(exp-1075); half's unit is 2^-24 */
	if (s >= 64)
		return sign;
	m = (uint32_t)(full >> s);
	rem = full & ((1ULL << s) - 1);
	halfway = 1ULL << (s - 1);
	if (rem > halfway || (rem == halfway && (m & 1)))
		m++;
	return (uint16_t)(sign | (uint16_t)m); /* m == 1024 is the smallest normal */
}

static float h2f(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, f;
	if (exp == 0x1f) {
		f = sign | 0x7f800000 | (man << 13);
	} else if (exp) {
		f = sign | ((exp + 112) << 23) | (man << 13);
	} else if (!man) {
		f = sign;
	} else { /* subnormal: normalise */
		int e = -1;
		do {
			man <<= 1;
			e++;
		} while (!(man & 0x400));
		f = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
	}
	float r;
	memcpy(&r, &f, 4);
	return r;
}

EXPORT _Float16 __truncdfhf2(double x)
{
	uint16_t b = d2h(x);
	_Float16 r;
	memcpy(&r, &b, 2);
	return r;
}

EXPORT _Float16 __truncsfhf2(float x)
{
	uint16_t b = d2h((double)x); /* exact widening, then one rounding */
	_Float16 r;
	memcpy(&r, &b, 2);
	return r;
}

EXPORT float __extendhfsf2(_Float16 h)
{
	uint16_t b;
	memcpy(&b, &h, 2);
	return h2f(b);
}

EXPORT double __extendhfdf2(_Float16 h)
{
	uint16_t b;
	memcpy(&b, &h, 2);
	return (double)h2f(b);
}
