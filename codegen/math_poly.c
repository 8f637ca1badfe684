/* math_poly.c -- inline polynomial math for f32 (cg.h fj_cg_poly_math): the
 * host's fused regions use these instead of libm calls, so that loops
 * vectorize (LLVM_NOTES.md: a libm call per element stops the vectoriser).
 *
 * Every function is straight-line IR (selects, no branches, no calls) on
 * float or <N x float> values, with IEEE special cases (NaN, +-inf, 0,
 * overflow, underflow to 0 / denormals) handled by selects. Max errors over
 * wide ranges, measured against double precision (tests/unit/test_region.c
 * reports them):
 *   exp, exp2   Cody-Waite reduction by ln2 (n from a shifter sum), a degree-6
 *               polynomial, scaled by 2^n in two steps (denormal results), one
 *               vscalefps with AVX-512 (fj_cg_poly_scalef) -- ~1 ulp; exp of an
 *               argument <= 0 (fj_cg_poly_exp_nonpos) the same bits in fewer ops,
 *               and so is c + exp for |c| >= 1 (fj_cg_poly_exp_addend)
 *   expm1       Cephes expm1f polynomial on [-0.5, 0.5], exp(x) - 1 outside -- ~1.5 ulp
 *   log, log2, log10   Cephes logf (mantissa in [sqrt(1/2), sqrt(2)), degree-9) -- ~1 ulp
 *   log1p       log(1 + x) * x / ((1 + x) - 1) (Goldberg's trick) -- ~2 ulp
 *   sin, cos, tan      Cody-Waite reduction by pi/2 (3 float parts, exact FMAs; |x| < ~1e6),
 *               Cephes sinf/cosf polynomials on [-pi/4, pi/4] -- ~1.5 ulp
 *   tanh        rational [13/6] fit on [-8, 8] (Eigen's), x itself below 4e-4 -- ~7 ulp
 *   erf, erfc   Taylor series (8 terms) for |x| < 0.5; else erfc by Numerical
 *               Recipes' Chebyshev fit times exp(-x^2) (erfc: two exps, -x^2 exact;
 *               erf: one, the error diluted by 1 - erfc) -- erf ~3.5 ulp, erfc ~8 ulp
 *               up to x = 9
 * Others (sinh, cosh, asin ... pow, atan2, fmod) and every f64 function
 * return NULL: the target's libm is used.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg.h"

typedef LLVMValueRef V;

typedef struct pm {
	fj_cg *cg;
	LLVMTypeRef ty;   /* float or <N x float> */
	LLVMTypeRef ity;  /* i32 or <N x i32> */
} pm;

#define B (p->cg->b)

static V cst(pm *p, double f)
{
	V c = LLVMConstReal(p->cg->t_f32, (double)(float)f);
	if (LLVMGetTypeKind(p->ty) == LLVMVectorTypeKind) {
		unsigned n = LLVMGetVectorSize(p->ty);
		V el[64];
		for (unsigned i = 0; i < n && i < 64; i++)
			el[i] = c;
		return LLVMConstVector(el, n);
	}
	return c;
}

static V icst(pm *p, int32_t v)
{
	V c = LLVMConstInt(p->cg->t_i32, (unsigned long long)(int64_t)v, 1);
	if (LLVMGetTypeKind(p->ity) == LLVMVectorTypeKind) {
		unsigned n = LLVMGetVectorSize(p->ity);
		V el[64];
		for (unsigned i = 0; i < n && i < 64; i++)
			el[i] = c;
		return LLVMConstVector(el, n);
	}
	return c;
}

static V intr(pm *p, const char *name, V *args, unsigned n) { return fj_cg_intrinsic(p->cg, name, args, n); }
static V intr1(pm *p, const char *name, V x) { return intr(p, name, &x, 1); }

static V add(pm *p, V a, V b) { return LLVMBuildFAdd(B, a, b, ""); }
static V sub(pm *p, V a, V b) { return LLVMBuildFSub(B, a, b, ""); }
static V mul(pm *p, V a, V b) { return LLVMBuildFMul(B, a, b, ""); }
static V fdv(pm *p, V a, V b) { return LLVMBuildFDiv(B, a, b, ""); }
static V fma3(pm *p, V a, V b, V c)
{
	V args[3] = {a, b, c};
	return intr(p, "llvm.fmuladd", args, 3);
}
static V fcmp(pm *p, LLVMRealPredicate pr, V a, V b) { return LLVMBuildFCmp(B, pr, a, b, ""); }
static V sel(pm *p, V c, V a, V b) { return LLVMBuildSelect(B, c, a, b, ""); }
static V fabs_(pm *p, V x) { return intr1(p, "llvm.fabs", x); }
static V isnan_(pm *p, V x) { return fcmp(p, LLVMRealUNO, x, x); }

/* c[0] * x^(n-1) + ... + c[n-1] by Estrin's scheme: P = H(x) x^k + L(x),
 * k the largest power of two below n, both halves alike; pw[i] holds
 * x^(2^i). */
static V estrin(pm *p, const double *c, int n, const V *pw)
{
	if (n == 1)
		return cst(p, c[0]);
	int k = 1, i = 0;
	while (2 * k < n) {
		k *= 2;
		i++;
	}
	V lo = estrin(p, c + (n - k), k, pw);
	return fma3(p, estrin(p, c, n - k, pw), pw[i], lo);
}

/* c[0] * x^(n-1) + ... + c[n-1] (n <= 16): Horner's rule below 8
 * coefficients, Estrin's scheme from 8 on. Horner's dependent chain is n - 1
 * multiply-adds long, Estrin's ~2 log2(n) steps for log2(n) multiplies more
 * (the powers); the long chains bound the host loops even with four vector
 * iterations interleaved (FJ_CG_INTERLEAVE): llvm-mca on Zen 3 puts log's
 * loop (9 coefficients) at 64 cycles per four vectors instead of 72, erf
 * gelu's at 125 instead of 160, while the short polynomials (exp's 5, tanh's
 * 7 and 4) lose by Estrin's extra multiplies. Max errors stay as the header
 * says (erf ~3.5 ulp). */
static V poly(pm *p, V x, const double *c, int n)
{
	if (n < 8) {
		V r = cst(p, c[0]);
		for (int i = 1; i < n; i++)
			r = fma3(p, r, x, cst(p, c[i]));
		return r;
	}
	V pw[4] = {x};
	for (int i = 1; i < 4 && (1 << i) < n; i++)
		pw[i] = mul(p, pw[i - 1], pw[i - 1]);
	return estrin(p, c, n, pw);
}

/* The shifter 1.5 * 2^23: for |v| < 2^22, v + SHIFTER rounds v to an integer
 * (ties to even) held in the low bits of the sum's significand. */
#define SHIFTER 12582912.0
#define SHIFTER_BITS 0x4B400000

/* x * 2^n for x in [0.5, 2) (or NaN) and n in [-151, 129], given by its
 * shifter sum t = n + SHIFTER: two normal factors 2^h and 2^(n - h), h =
 * floor(n / 2) (both exponents in [-76, 65]): x * 2^h is exact, and the one
 * rounding by 2^(n - h) makes denormal results round once and large ones
 * overflow to inf. t's bits shifted left by 23 are n << 23 (SHIFTER_BITS
 * << 23 wraps to 0), so the factors come from t with integer ops alone: 8
 * ops, where clamping n to the normal exponents took 10. A NaN x stays NaN
 * whatever t holds. */
static V scale2(pm *p, V x, V t)
{
	V nb = LLVMBuildShl(B, LLVMBuildBitCast(B, t, p->ity, ""), icst(p, 23), "");    /* n << 23 */
	V hb = LLVMBuildShl(B, LLVMBuildAShr(B, nb, icst(p, 24), ""), icst(p, 23), ""); /* h << 23 */
	V s1 = LLVMBuildBitCast(B, LLVMBuildAdd(B, hb, icst(p, 0x3f800000), ""), p->ty, "");
	V s2 = LLVMBuildBitCast(B, LLVMBuildAdd(B, LLVMBuildSub(B, nb, hb, ""), icst(p, 0x3f800000), ""), p->ty, "");
	return mul(p, mul(p, x, s1), s2);
}

/* ---- scale2 by vscalefps (AVX-512) ----
 * After optimisation, scale2's vectorised form is, with nb = t << 23 (the
 * integer of t shifted left by 23) and C = 0x3f800000:
 *   hb = (nb >>a 1) & 0xff800000,  s1 = bits(hb + C),  s2 = bits((nb + C) - hb),
 *   r  = (x * s1) * s2
 * With AVX-512 that is vscalefps(x, n), n = nb >>a 23 as a float: x 2^n
 * rounded once, denormal, 0 or inf where it must be (MXCSR's rounding and
 * flush-to-zero, as the two multiplies), NaN for a NaN x: the same bits in
 * four ops instead of eight. Zen 4, [8192,4096] f32, best of 3-5
 * alternating runs: tanh gelu forward 11.3 -> 10.1 ms on 1 thread (6.3 ->
 * 5.5 on 2), its training 31.2 -> 28.5 (17.2 -> 15.9); silu forward 9.2 ->
 * 9.0, its training 23.2 -> 22.2. The pattern is scale2's alone (no other
 * code makes it), and n is within [-151, 129] there, where s1 and s2 are
 * normal. */

static bool op_is(LLVMValueRef v, LLVMOpcode op)
{
	return v && LLVMIsAInstruction(v) && LLVMGetInstructionOpcode(v) == op;
}

static bool splat_i32(LLVMValueRef v, int32_t want)
{
	LLVMTypeRef ty = LLVMTypeOf(v);
	if (!LLVMIsConstant(v) || LLVMGetTypeKind(ty) != LLVMVectorTypeKind)
		return false;
	for (unsigned i = 0; i < LLVMGetVectorSize(ty); i++) {
		LLVMValueRef e = LLVMGetAggregateElement(v, i);
		if (!e || !LLVMIsAConstantInt(e) || LLVMConstIntGetSExtValue(e) != want)
			return false;
	}
	return true;
}

/* v = bitcast(a) from an integer vector: a, else NULL */
static LLVMValueRef bits_of(LLVMValueRef v)
{
	return op_is(v, LLVMBitCast) ? LLVMGetOperand(v, 0) : NULL;
}

/* v = a + c, c a splat of want: a, else NULL */
static LLVMValueRef add_splat(LLVMValueRef v, int32_t want)
{
	return op_is(v, LLVMAdd) && splat_i32(LLVMGetOperand(v, 1), want) ? LLVMGetOperand(v, 0) : NULL;
}

/* s2's bits (nb + C) - hb with hb = (nb >>a 1) & 0xff800000, nb = X << 23:
 * sets *hb, returns nb; else NULL */
static LLVMValueRef s2_nb(LLVMValueRef v, LLVMValueRef *hb)
{
	if (!op_is(v, LLVMSub))
		return NULL;
	LLVMValueRef nb = add_splat(LLVMGetOperand(v, 0), 0x3f800000), h = LLVMGetOperand(v, 1);
	if (!nb || !op_is(nb, LLVMShl) || !splat_i32(LLVMGetOperand(nb, 1), 23) || !op_is(h, LLVMAnd) ||
	    !splat_i32(LLVMGetOperand(h, 1), (int32_t)0xff800000))
		return NULL;
	LLVMValueRef a = LLVMGetOperand(h, 0);
	if (!op_is(a, LLVMAShr) || LLVMGetOperand(a, 0) != nb || !splat_i32(LLVMGetOperand(a, 1), 1))
		return NULL;
	*hb = h;
	return nb;
}

/* r = (x * s1) * s2, either way round: sets *x, returns nb; else NULL */
static LLVMValueRef scale2_match(LLVMValueRef r, LLVMValueRef *x)
{
	for (int k = 0; k < 2; k++) {
		LLVMValueRef hb, nb = s2_nb(bits_of(LLVMGetOperand(r, k)), &hb);
		LLVMValueRef m = LLVMGetOperand(r, 1 - k);
		if (!nb || !op_is(m, LLVMFMul))
			continue;
		for (int j = 0; j < 2; j++)
			if (add_splat(bits_of(LLVMGetOperand(m, j)), 0x3f800000) == hb) {
				*x = LLVMGetOperand(m, 1 - j);
				return nb;
			}
	}
	return NULL;
}

void fj_cg_poly_scalef(LLVMModuleRef mod, bool vl)
{
	LLVMContextRef llctx = LLVMGetModuleContext(mod);
	LLVMBuilderRef b = LLVMCreateBuilderInContext(llctx);
	LLVMTypeRef i32 = LLVMInt32TypeInContext(llctx);
	for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
		for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
			for (LLVMValueRef i = LLVMGetFirstInstruction(bb), next; i; i = next) {
				next = LLVMGetNextInstruction(i);
				LLVMTypeRef ty = LLVMTypeOf(i);
				if (!op_is(i, LLVMFMul) || LLVMGetTypeKind(ty) != LLVMVectorTypeKind ||
				    LLVMGetElementType(ty) != LLVMFloatTypeInContext(llctx))
					continue;
				unsigned w = LLVMGetVectorSize(ty);
				if (w != 16 && !(vl && (w == 8 || w == 4)))
					continue;
				LLVMValueRef x, nb = scale2_match(i, &x);
				if (!nb)
					continue;
				char name[48];
				snprintf(name, sizeof name, "llvm.x86.avx512.mask.scalef.ps.%u", w * 32);
				unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
				LLVMValueRef fn = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
				LLVMPositionBuilderBefore(b, i);
				LLVMValueRef k23[16];
				for (unsigned e = 0; e < w; e++)
					k23[e] = LLVMConstInt(i32, 23, 0);
				LLVMValueRef n = LLVMBuildSIToFP(b, LLVMBuildAShr(b, nb, LLVMConstVector(k23, w), ""), ty, "");
				LLVMTypeRef mty = LLVMIntTypeInContext(llctx, w == 16 ? 16 : 8);
				LLVMValueRef args[5] = {x, n, LLVMConstNull(ty), LLVMConstAllOnes(mty),
				                        LLVMConstInt(i32, 4, 0) /* the current rounding */};
				LLVMValueRef s = LLVMBuildCall2(b, LLVMIntrinsicGetType(llctx, id, NULL, 0), fn, args, w == 16 ? 5 : 4, "");
				LLVMReplaceAllUsesWith(i, s);
				LLVMInstructionEraseFromParent(i);
			}
	LLVMDisposeBuilder(b);
}

/* e^r for |r| <= ln2/2 (+ rounding): 1 + r + r^2 P(r), P of degree 4
 * fitted here (iteratively reweighted least squares towards minimax
 * relative error): its own error is below 0.03 ulp, one FMA less than the
 * degree-5 P of Cephes' expf. Evaluated as 1 + r (1 + r P(r)): six FMAs,
 * where r + r^2 P(r), then + 1, took a multiply and an add more. Times
 * `scale`, a power of 2 that keeps every step normal: every coefficient
 * scaled, so the same roundings give exactly scale e^r. */
static V exp_core_scaled(pm *p, V r, double scale)
{
	static const double c[] = {1.3814534778e-3, 8.3687459663e-3, 4.1668390920e-2, 1.6666520391e-1,
	                           4.9999993431e-1};
	double sc[5];
	for (int i = 0; i < 5; i++)
		sc[i] = c[i] * scale;
	V q = fma3(p, poly(p, r, sc, 5), r, cst(p, scale));
	return fma3(p, q, r, cst(p, scale));
}

static V exp_core(pm *p, V r)
{
	return exp_core_scaled(p, r, 1.0);
}

static V clampf(pm *p, V x, double lo, double hi)
{
	x = sel(p, fcmp(p, LLVMRealOLT, x, cst(p, lo)), cst(p, lo), x);
	return sel(p, fcmp(p, LLVMRealOGT, x, cst(p, hi)), cst(p, hi), x);
}

/* n = round(x / ln2) through the shifter (the rounded value and its integer
 * from one sum), r = x - n ln2 in two Cody-Waite steps, e^r * 2^n. NaN
 * propagates through r: no select for it. */
static V exp_reduce(pm *p, V xc, double shifter, V *t)
{
	*t = fma3(p, xc, cst(p, 1.44269504088896341), cst(p, shifter));
	V n = sub(p, *t, cst(p, shifter));
	V r = fma3(p, n, cst(p, -0.693359375), xc);
	return fma3(p, n, cst(p, 2.12194440e-4), r);
}

static V p_exp(pm *p, V x)
{
	V t, r = exp_reduce(p, clampf(p, x, -104.0, 89.0), SHIFTER, &t);
	return scale2(p, exp_core(p, r), t);
}

/* e^xc for an xc whose n = round(xc / ln2) keeps n + bias within [1, 254]:
 * the shifter SHIFTER + bias makes t's bits shifted left by 23 the bits of
 * 2^(n + bias - 127), and the polynomial times 2^(127 - bias) (exact) times
 * that rounds once to P 2^n. */
static V exp_shifted(pm *p, V xc, int bias)
{
	V t, r = exp_reduce(p, xc, SHIFTER + bias, &t);
	V s = LLVMBuildBitCast(B, LLVMBuildShl(B, LLVMBuildBitCast(B, t, p->ity, ""), icst(p, 23), ""), p->ty, "");
	return mul(p, exp_core_scaled(p, r, ldexp(1.0, 127 - bias)), s);
}

/* exp(x) for x <= 0 or NaN, bit for bit p_exp's there (softmax's x - max,
 * the hottest exp; no upper clamp, and 1 integer op where scale2 takes 8).
 * It holds up to x = 70 (n <= 102), a margin that erfc_big's arguments
 * use. With n in [-150, 0] (x clamped at -104 as in p_exp), the shifter
 * SHIFTER + 152 gives the same n (round(x / ln2) is never a tie: log2(e)'s
 * odd 24-bit significand would have to divide 2k + 1 <= 301), and its bits
 * shifted left by 23 are (n + 152) << 23, the bits of 2^(n + 25), a normal
 * number (exp_shifted, bias 152). The polynomial scaled by 2^-25 (exact) times
 * it rounds once to P 2^n, as scale2's second factor does (one multiply,
 * not two). A NaN x makes P NaN, so the product stays NaN whatever the
 * factor's bits. */
static V p_exp_nonpos(pm *p, V x)
{
	return exp_shifted(p, sel(p, fcmp(p, LLVMRealOLT, x, cst(p, -104.0)), cst(p, -104.0), x), 152);
}

/* fn(x) for an f32 x (scalar or vector), else NULL */
static LLVMValueRef f32_only(fj_cg *cg, LLVMValueRef x, V (*fn)(pm *, V))
{
	LLVMTypeRef ty = LLVMTypeOf(x);
	bool vec = LLVMGetTypeKind(ty) == LLVMVectorTypeKind;
	if ((vec ? LLVMGetElementType(ty) : ty) != cg->t_f32)
		return NULL;
	pm p = {cg, ty, vec ? LLVMVectorType(cg->t_i32, LLVMGetVectorSize(ty)) : cg->t_i32};
	return fn(&p, x);
}

LLVMValueRef fj_cg_poly_exp_nonpos(fj_cg *cg, LLVMValueRef x) { return f32_only(cg, x, p_exp_nonpos); }

/* exp(x) where only c + exp(x) is used, |c| >= 1 (sigmoid's, silu's and the
 * tanh gelu's 1 + exp(z): region_eval.c, exp_uses). With x clamped to
 * [-86, 89], n stays within [-124, 128], so 2^(n - 1) is a normal number
 * made by one shift (exp_shifted, bias 126). Times 2P it rounds once to P
 * 2^n, as scale2's second factor does: p_exp's bits (inf from x = 88.72
 * on). Below -86 it gives e^-86 < 2^-124 instead of e^x: c + either rounds
 * to c. One integer op where scale2 takes eight with AVX2 (four with
 * vscalefps). */
static V p_exp_addend(pm *p, V x) { return exp_shifted(p, clampf(p, x, -86.0, 89.0), 126); }

LLVMValueRef fj_cg_poly_exp_addend(fj_cg *cg, LLVMValueRef x) { return f32_only(cg, x, p_exp_addend); }

static V p_exp2(pm *p, V x)
{
	V xc = clampf(p, x, -151.0, 129.0);
	V t = add(p, xc, cst(p, SHIFTER));
	V r = mul(p, sub(p, xc, sub(p, t, cst(p, SHIFTER))), cst(p, M_LN2));
	return scale2(p, exp_core(p, r), t);
}

static V p_expm1(pm *p, V x)
{
	static const double c[] = {1.9618793909E-4, 1.3973993058E-3, 8.3334519073E-3,
	                           4.1665858527E-2, 1.6666665459E-1, 5.0000001201E-1};
	V z = mul(p, x, x);
	V small = fma3(p, poly(p, x, c, 6), z, x);
	V big = sub(p, p_exp(p, x), cst(p, 1.0));
	V issmall = fcmp(p, LLVMRealOLE, fabs_(p, x), cst(p, 0.5));
	return sel(p, issmall, small, big);
}

static V p_log(pm *p, V x)
{
	/* denormals: scale by 2^23 */
	V tiny = fcmp(p, LLVMRealOLT, x, cst(p, 1.17549435e-38));
	V xs = sel(p, tiny, mul(p, x, cst(p, 8388608.0)), x);
	V eadj = sel(p, tiny, cst(p, -23.0), cst(p, 0.0));
	V bits = LLVMBuildBitCast(B, xs, p->ity, "");
	V e = LLVMBuildSub(B, LLVMBuildAnd(B, LLVMBuildLShr(B, bits, icst(p, 23), ""), icst(p, 0xff), ""), icst(p, 126), "");
	V m = LLVMBuildBitCast(B, LLVMBuildOr(B, LLVMBuildAnd(B, bits, icst(p, 0x007fffff), ""), icst(p, 0x3f000000), ""),
	                       p->ty, "");
	V ef = add(p, LLVMBuildSIToFP(B, e, p->ty, ""), eadj);
	V lt = fcmp(p, LLVMRealOLT, m, cst(p, 0.707106781186547524));
	ef = sel(p, lt, sub(p, ef, cst(p, 1.0)), ef);
	m = sel(p, lt, sub(p, add(p, m, m), cst(p, 1.0)), sub(p, m, cst(p, 1.0)));
	static const double c[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
	                           -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
	V z = mul(p, m, m);
	V y = mul(p, mul(p, poly(p, m, c, 9), m), z);
	y = fma3(p, ef, cst(p, -2.12194440e-4), y);
	y = fma3(p, z, cst(p, -0.5), y);
	V r = add(p, m, y);
	r = fma3(p, ef, cst(p, 0.693359375), r);
	/* special cases */
	V inf = cst(p, INFINITY);
	r = sel(p, fcmp(p, LLVMRealOEQ, x, inf), inf, r);
	r = sel(p, fcmp(p, LLVMRealOEQ, x, cst(p, 0.0)), cst(p, -INFINITY), r);
	r = sel(p, fcmp(p, LLVMRealULT, x, cst(p, 0.0)), cst(p, NAN), r); /* negative or NaN */
	return r;
}

static V p_log1p(pm *p, V x)
{
	V u = add(p, x, cst(p, 1.0));
	V lu = p_log(p, u);
	V d = sub(p, u, cst(p, 1.0));
	V r = fdv(p, mul(p, lu, x), d);
	r = sel(p, fcmp(p, LLVMRealOEQ, d, cst(p, 0.0)), x, r);
	V inf = cst(p, INFINITY);
	r = sel(p, fcmp(p, LLVMRealOEQ, u, inf), lu, r);
	r = sel(p, fcmp(p, LLVMRealOEQ, u, cst(p, 0.0)), lu, r);
	return sel(p, isnan_(p, x), x, r);
}

/* tanh: a [13/6] rational minimax fit on [-7.9988, 7.9988] (x clamped; Eigen's
 * float tanh): 13 fmas and one division, max 7 ulp (3.9e-7 relative). */
static V p_tanh(pm *p, V x)
{
	static const double a[] = {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
	                           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
	                           4.89352455891786e-03};
	static const double b[] = {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
	                           4.89352518554385e-03};
	V xc = clampf(p, x, -7.99881172180175781, 7.99881172180175781);
	V x2 = mul(p, xc, xc);
	V num = mul(p, poly(p, x2, a, 7), xc);
	V den = poly(p, x2, b, 4);
	V t = fdv(p, num, den);
	t = sel(p, fcmp(p, LLVMRealOLT, fabs_(p, x), cst(p, 0.0004)), x, t);
	return sel(p, isnan_(p, x), x, t);
}

/* sin and cos of x: Cody-Waite reduction by pi/2 in three float parts with
 * exact fused multiply-adds (accurate for |x| up to ~1e6), quadrant q. */
static void sincos_core(pm *p, V x, V *s, V *c, V *q)
{
	V j = intr1(p, "llvm.roundeven", mul(p, x, cst(p, 0.63661977236758134)));
	V nj = LLVMBuildFNeg(B, j, "");
	V a1[3] = {nj, cst(p, 1.57079637050628662109375), x};
	V r = intr(p, "llvm.fma", a1, 3);
	V a2[3] = {nj, cst(p, -4.37113882867379942e-08), r};
	r = intr(p, "llvm.fma", a2, 3);
	V a3[3] = {nj, cst(p, -1.7151245100058819e-15), r};
	r = intr(p, "llvm.fma", a3, 3);
	/* q = j mod 4 in [0, 4) (exact for |j| < 2^24) */
	V fl = intr1(p, "llvm.floor", mul(p, j, cst(p, 0.25)));
	*q = sub(p, j, mul(p, fl, cst(p, 4.0)));
	static const double sc[] = {-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1};
	static const double cc[] = {2.443315711809948E-005, -1.388731625493765E-003, 4.166664568298827E-002};
	V z = mul(p, r, r);
	*s = fma3(p, mul(p, poly(p, z, sc, 3), z), r, r);
	*c = add(p, fma3(p, z, cst(p, -0.5), mul(p, mul(p, poly(p, z, cc, 3), z), z)), cst(p, 1.0));
}

static V quadrant(pm *p, V q, V v0, V v1, V v2, V v3)
{
	V r = sel(p, fcmp(p, LLVMRealOEQ, q, cst(p, 2.0)), v2, v3);
	r = sel(p, fcmp(p, LLVMRealOEQ, q, cst(p, 1.0)), v1, r);
	return sel(p, fcmp(p, LLVMRealOEQ, q, cst(p, 0.0)), v0, r);
}

static V finite_or_nan(pm *p, V x, V y)
{
	V fin = fcmp(p, LLVMRealOLT, fabs_(p, x), cst(p, INFINITY));
	return sel(p, fin, y, cst(p, NAN));
}

static V p_sin(pm *p, V x)
{
	V s, c, q;
	sincos_core(p, x, &s, &c, &q);
	V ns = LLVMBuildFNeg(B, s, ""), nc = LLVMBuildFNeg(B, c, "");
	return finite_or_nan(p, x, quadrant(p, q, s, c, ns, nc));
}

static V p_cos(pm *p, V x)
{
	V s, c, q;
	sincos_core(p, x, &s, &c, &q);
	V ns = LLVMBuildFNeg(B, s, ""), nc = LLVMBuildFNeg(B, c, "");
	return finite_or_nan(p, x, quadrant(p, q, c, ns, nc, s));
}

static V p_tan(pm *p, V x)
{
	V s, c, q;
	sincos_core(p, x, &s, &c, &q);
	V odd = LLVMBuildOr(B, fcmp(p, LLVMRealOEQ, q, cst(p, 1.0)), fcmp(p, LLVMRealOEQ, q, cst(p, 3.0)), "");
	V t = sel(p, odd, LLVMBuildFNeg(B, fdv(p, c, s), ""), fdv(p, s, c));
	return finite_or_nan(p, x, t);
}

/* erf(|x|) for |x| < 0.5: Taylor series in x^2. */
static V erf_small(pm *p, V ax)
{
	double c[8];
	double f = 1.0;
	for (int n = 0; n < 8; n++) {
		if (n)
			f *= n;
		c[7 - n] = 2.0 / sqrt(M_PI) * ((n & 1) ? -1.0 : 1.0) / (f * (2 * n + 1));
	}
	return mul(p, poly(p, mul(p, ax, ax), c, 8), ax);
}

/* erfc(|x|) (Numerical Recipes' erfcc, relative error < 1.2e-7) for erfc
 * itself (exact: exp(-x^2) and exp(poly) apart, -x^2's rounding corrected),
 * or, for erf (!exact), with one exp of the rounded sum -x^2 + poly: its
 * relative error (|x^2| eps) multiplies erfc(|x|) <= 0.48, which 1 - erfc
 * then dwarfs (erf stays within its bound; one exp less). */
static V erfc_big(pm *p, V ax, bool exact)
{
	static const double c[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
	                           -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
	V t = fdv(p, cst(p, 1.0), fma3(p, ax, cst(p, 0.5), cst(p, 1.0)));
	V hi = mul(p, ax, ax);
	V r;
	if (exact) {
		V args[3] = {ax, ax, LLVMBuildFNeg(B, hi, "")};
		V lo = intr(p, "llvm.fma", args, 3); /* ax*ax - hi, exactly */
		/* exp(-hi) and exp(poly) apart: -hi is exact, a sum would round */
		V e = mul(p, p_exp_nonpos(p, LLVMBuildFNeg(B, hi, "")), p_exp(p, poly(p, t, c, 10)));
		r = mul(p, mul(p, t, e), sub(p, cst(p, 1.0), lo));
	} else {
		/* poly - x^2 = log(erfc(|x|) / t) + fit and rounding errors: a few 1e-7 at most (x = 0) */
		r = mul(p, t, p_exp_nonpos(p, sub(p, poly(p, t, c, 10), hi)));
	}
	return sel(p, fcmp(p, LLVMRealOGT, ax, cst(p, 10.5)), cst(p, 0.0), r);
}

static V p_erf(pm *p, V x)
{
	V ax = fabs_(p, x);
	/* erf(x) rounds to +-1 from |x| = 4 (erfc(4) < 2^-25): erfc's argument
	 * stops at 5, where its exp is still normal. Past 9.3 it would reach
	 * denormals, and every operation on one takes a microcode assist on
	 * Intel: exact gelu on real activations (|h| up to ~15) ran its
	 * backward 2x slower on Sapphire Rapids. A NaN |x| gives 5: selected
	 * away below. */
	V axc = intr(p, "llvm.minnum", (V[]){ax, cst(p, 5.0)}, 2);
	V big = sub(p, cst(p, 1.0), erfc_big(p, axc, false));
	V r = sel(p, fcmp(p, LLVMRealOLT, ax, cst(p, 0.5)), erf_small(p, ax), big);
	r = intr(p, "llvm.copysign", (V[]){r, x}, 2);
	return sel(p, isnan_(p, x), x, r);
}

static V p_erfc(pm *p, V x)
{
	V ax = fabs_(p, x);
	V ec = erfc_big(p, ax, true);
	V pos = sel(p, fcmp(p, LLVMRealOLT, x, cst(p, 0.0)), sub(p, cst(p, 2.0), ec), ec);
	V small = sub(p, cst(p, 1.0), intr(p, "llvm.copysign", (V[]){erf_small(p, ax), x}, 2));
	V r = sel(p, fcmp(p, LLVMRealOLT, ax, cst(p, 0.5)), small, pos);
	return sel(p, isnan_(p, x), x, r);
}

LLVMValueRef fj_cg_poly_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	LLVMTypeRef el = LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMGetElementType(ty) : ty;
	if (el != cg->t_f32)
		return NULL;
	pm p = {cg, ty, LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMVectorType(cg->t_i32, LLVMGetVectorSize(ty))
	                                                          : cg->t_i32};
	V x = args[0];
	switch (fn) {
	case FJ_MATH_EXP: return p_exp(&p, x);
	case FJ_MATH_EXP2: return p_exp2(&p, x);
	case FJ_MATH_EXPM1: return p_expm1(&p, x);
	case FJ_MATH_LOG: return p_log(&p, x);
	case FJ_MATH_LOG2: return mul(&p, p_log(&p, x), cst(&p, M_LOG2E));
	case FJ_MATH_LOG10: return mul(&p, p_log(&p, x), cst(&p, M_LOG10E));
	case FJ_MATH_LOG1P: return p_log1p(&p, x);
	case FJ_MATH_SIN: return p_sin(&p, x);
	case FJ_MATH_COS: return p_cos(&p, x);
	case FJ_MATH_TAN: return p_tan(&p, x);
	case FJ_MATH_TANH: return p_tanh(&p, x);
	case FJ_MATH_ERF: return p_erf(&p, x);
	case FJ_MATH_ERFC: return p_erfc(&p, x);
	default: return NULL;
	}
}
