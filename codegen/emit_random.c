/* emit_random.c -- the reference executor's kernels for random ops:
 * prims.rand(seed, offset){shape, dtype} and aten.native_dropout(input, seed,
 * offset){p, train} -> (out, mask).
 *
 * THE STREAM (every executor must produce exactly these bits; the NVPTX
 * backend reuses this mapping):
 *
 *   Philox-4x32-10 (Salmon et al., SC'11; Random123's philox4x32, 10 rounds,
 *   multipliers 0xD2511F53 and 0xCD9E8D57, Weyl key increments 0x9E3779B9 and
 *   0xBB67AE85).
 *   key     k0 = low 32 bits of seed, k1 = high 32 bits of seed
 *           (seed: the value of the i64[] seed operand)
 *   counter c0 = low 32 bits of offset, c1 = high 32 bits of offset,
 *           c2 = low 32 bits of (i >> 2), c3 = high 32 bits of (i >> 2)
 *           (offset: the value of the i64[] offset operand; i: the element's
 *           row-major linear index in the result)
 *   word    r = output word (i & 3) of philox(counter, key)
 *   uniform u = (r >> (32 - b)) * 2^-b, exactly, with b = 24 for f32 and
 *           f64 (and for dropout's test), 11 for f16, 8 for bf16; so u is in
 *           [0, 1) and exactly representable in the result dtype.
 *
 *   native_dropout: element i is kept when u >= p (u with b = 24, compared
 *   in double precision; keeps with probability 1 - p: p = 0 keeps all, p = 1
 *   none); out = kept ? input * (1 / (1 - p)) : 0 (computed in f64, rounded
 *   once), mask = kept. train = false: out = input, mask all true.
 */
#include "codegen/emit_common.h"

static LLVMValueRef c32(fj_cg *cg, uint32_t v) { return LLVMConstInt(cg->t_i32, v, 0); }

/* (hi, lo) of the 64-bit product a * b (i32 values). */
static void mulhilo(fj_cg *cg, uint32_t a, LLVMValueRef b, LLVMValueRef *hi, LLVMValueRef *lo)
{
	LLVMValueRef p = LLVMBuildMul(cg->b, LLVMConstInt(cg->t_i64, a, 0), LLVMBuildZExt(cg->b, b, cg->t_i64, ""), "");
	*lo = LLVMBuildTrunc(cg->b, p, cg->t_i32, "");
	*hi = LLVMBuildTrunc(cg->b, LLVMBuildLShr(cg->b, p, LLVMConstInt(cg->t_i64, 32, 0), ""), cg->t_i32, "");
}

/* Philox-4x32-10 of counter c under key (k0, k1); c is replaced by the output. */
static void philox(fj_cg *cg, LLVMValueRef c[4], LLVMValueRef k0, LLVMValueRef k1)
{
	for (int round = 0; round < 10; round++) {
		if (round) {
			k0 = LLVMBuildAdd(cg->b, k0, c32(cg, 0x9E3779B9u), "");
			k1 = LLVMBuildAdd(cg->b, k1, c32(cg, 0xBB67AE85u), "");
		}
		LLVMValueRef hi0, lo0, hi1, lo1;
		mulhilo(cg, 0xD2511F53u, c[0], &hi0, &lo0);
		mulhilo(cg, 0xCD9E8D57u, c[2], &hi1, &lo1);
		LLVMValueRef n0 = LLVMBuildXor(cg->b, LLVMBuildXor(cg->b, hi1, c[1], ""), k0, "");
		LLVMValueRef n2 = LLVMBuildXor(cg->b, LLVMBuildXor(cg->b, hi0, c[3], ""), k1, "");
		c[0] = n0;
		c[1] = lo1;
		c[2] = n2;
		c[3] = lo0;
	}
}

static LLVMValueRef lo32(fj_cg *cg, LLVMValueRef v) { return LLVMBuildTrunc(cg->b, v, cg->t_i32, ""); }
static LLVMValueRef hi32(fj_cg *cg, LLVMValueRef v)
{
	return LLVMBuildTrunc(cg->b, LLVMBuildLShr(cg->b, v, fj_cg_i64(cg, 32), ""), cg->t_i32, "");
}

/* The 32-bit random word of element i (i64) for seed and offset (i64). */
static LLVMValueRef random_word(fj_cg *cg, LLVMValueRef seed, LLVMValueRef offset, LLVMValueRef i)
{
	LLVMValueRef blk = LLVMBuildLShr(cg->b, i, fj_cg_i64(cg, 2), "");
	LLVMValueRef c[4] = {lo32(cg, offset), hi32(cg, offset), lo32(cg, blk), hi32(cg, blk)};
	philox(cg, c, lo32(cg, seed), hi32(cg, seed));
	LLVMValueRef lane = LLVMBuildTrunc(cg->b, LLVMBuildAnd(cg->b, i, fj_cg_i64(cg, 3), ""), cg->t_i32, "");
	LLVMValueRef w = c[3];
	for (int q = 2; q >= 0; q--)
		w = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntEQ, lane, c32(cg, (uint32_t)q), ""), c[q], w, "");
	return w;
}

/* u = (r >> (32 - bits)) * 2^-bits as a double (exact). */
static LLVMValueRef uniform(fj_cg *cg, LLVMValueRef r, int bits)
{
	LLVMValueRef m = LLVMBuildLShr(cg->b, r, c32(cg, (uint32_t)(32 - bits)), "");
	LLVMValueRef f = LLVMBuildUIToFP(cg->b, m, cg->t_f64, "");
	return LLVMBuildFMul(cg->b, f, LLVMConstReal(cg->t_f64, 1.0 / (double)(1u << bits)), "");
}

static int uniform_bits(fj_dtype dt)
{
	return dt == FJ_DT_F16 ? 11 : dt == FJ_DT_BF16 ? 8 : 24;
}

/* The i64 value of a 0-d operand (a tensor or a literal). */
static LLVMValueRef scalar_i64(fj_cg *cg, const fj_cg_operand *op)
{
	if (op->none)
		return fj_cg_i64(cg, 0);
	if (op->literal)
		return fj_cg_literal(cg, &op->lit, FJ_DT_I64);
	return ec_load_as(cg, &op->t, fj_cg_i64(cg, 0), FJ_DT_I64);
}

static fj_status emit_rand(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *out = &k->out[0];
	k->par_out = 0;
	k->par_mask = out->rank ? (1u << out->rank) - 1 : 0;
	LLVMValueRef seed = scalar_i64(cg, &k->in[0]), offset = scalar_i64(cg, &k->in[1]);
	fj_cg_loop l;
	LLVMValueRef i = ec_for(cg, &l, k->lo, k->hi);
	LLVMValueRef u = uniform(cg, random_word(cg, seed, offset, i), uniform_bits(out->dtype));
	ec_store_from(cg, out, i, u, FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
	return cg->st;
}

static fj_status emit_dropout(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t, *out = &k->out[0], *mask = &k->out[1];
	double p = ec_attr_float(cg, k, "p", 0.5);
	bool train = ec_attr_bool(cg, k, "train", true);
	k->par_out = 0;
	k->par_mask = out->rank ? (1u << out->rank) - 1 : 0;
	LLVMValueRef seed = scalar_i64(cg, &k->in[1]), offset = scalar_i64(cg, &k->in[2]);
	fj_cg_loop l;
	LLVMValueRef i = ec_for(cg, &l, k->lo, k->hi);
	if (!train) {
		fj_cg_store(cg, out, i, fj_cg_load(cg, x, i));
		fj_cg_store(cg, mask, i, LLVMConstInt(cg->t_i1, 1, 0));
	} else {
		LLVMValueRef u = uniform(cg, random_word(cg, seed, offset, i), 24);
		LLVMValueRef keep = LLVMBuildFCmp(cg->b, LLVMRealOGE, u, LLVMConstReal(cg->t_f64, p), "");
		double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
		LLVMValueRef v = ec_fmul(cg, ec_load_as(cg, x, i, FJ_DT_F64), LLVMConstReal(cg->t_f64, scale));
		v = LLVMBuildSelect(cg->b, keep, v, LLVMConstReal(cg->t_f64, 0.0), "");
		ec_store_from(cg, out, i, v, FJ_DT_F64);
		fj_cg_store(cg, mask, i, keep);
	}
	fj_cg_loop_end(cg, &l);
	return cg->st;
}

fj_status fj_cg_emit_random(fj_cg *cg, fj_cg_kernel *k)
{
	switch (k->node->op) {
	case FJ_OP_PRIMS_RAND: return emit_rand(cg, k);
	case FJ_OP_ATEN_NATIVE_DROPOUT: return emit_dropout(cg, k);
	default:
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "%s is not a random op", fj_op_name(k->node->op));
	}
}
