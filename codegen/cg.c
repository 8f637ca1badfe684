/* cg.c -- the core of the shared code generator (cg.h): LLVM types and
 * constants per dtype, PyTorch conversion semantics, loads and stores of every
 * storage format, index arithmetic, loops, conditionals and local variables.
 *
 * Conventions. Compute values: floats as float/double (f16 and bf16 are
 * computed as float), integers as iN (u8 is i8 whose dtype says "unsigned"),
 * bool as i1. Storage: f16 as LLVM half, bf16 as i16 bits, bool as i8.
 * Conversions that C leaves undefined are defined here so that no poison or
 * UB reaches the IR:
 *   float -> i32/i64:     llvm.fptosi.sat (saturating; NaN -> 0);
 *   float -> i8/i16/u8:   llvm.fptosi.sat to i32, then truncate (wraps like
 *                          x86's cvttss2si + truncation that PyTorch compiles to);
 *   anything -> bool:     != 0 (NaN -> true);
 *   float -> f16/bf16:    rounded to nearest even at once (the value stays in
 *                          compute form, float, so the store rounds idempotently).
 * Index arithmetic is i64 with nsw flags; sizes are run-time values.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>

#include "codegen/cg.h"

void fj_cg_init(fj_cg *cg, fj_context *ctx, const fj_cg_target *t, LLVMContextRef llctx,
                LLVMModuleRef mod)
{
	memset(cg, 0, sizeof *cg);
	cg->ctx = ctx;
	cg->target = t;
	cg->llctx = llctx;
	cg->mod = mod;
	cg->b = LLVMCreateBuilderInContext(llctx);
	cg->t_void = LLVMVoidTypeInContext(llctx);
	cg->t_i1 = LLVMInt1TypeInContext(llctx);
	cg->t_i8 = LLVMInt8TypeInContext(llctx);
	cg->t_i16 = LLVMInt16TypeInContext(llctx);
	cg->t_i32 = LLVMInt32TypeInContext(llctx);
	cg->t_i64 = LLVMInt64TypeInContext(llctx);
	cg->t_f16 = LLVMHalfTypeInContext(llctx);
	cg->t_f32 = LLVMFloatTypeInContext(llctx);
	cg->t_f64 = LLVMDoubleTypeInContext(llctx);
	cg->t_ptr = LLVMPointerTypeInContext(llctx, 0);
	cg->st = FJ_OK;
}

void fj_cg_dispose(fj_cg *cg)
{
	if (cg->b)
		LLVMDisposeBuilder(cg->b);
	cg->b = NULL;
}

fj_status fj_cg_error(fj_cg *cg, fj_status st, const fj_node *n, const char *fmt, ...)
{
	if (cg->st != FJ_OK)
		return cg->st;
	cg->st = st;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fj_loc loc = n ? n->loc : (fj_loc){0};
	if (n)
		fj_error_status(cg->ctx, st, loc, "%s: %s", fj_op_name(n->op), msg);
	else
		fj_error_status(cg->ctx, st, loc, "%s", msg);
	return st;
}

/* ---- types and constants ---- */

LLVMTypeRef fj_cg_storage_type(fj_cg *cg, fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F64: return cg->t_f64;
	case FJ_DT_F32: return cg->t_f32;
	case FJ_DT_F16: return cg->t_f16;
	case FJ_DT_BF16: return cg->t_i16;
	case FJ_DT_I64: return cg->t_i64;
	case FJ_DT_I32: return cg->t_i32;
	case FJ_DT_I16: return cg->t_i16;
	case FJ_DT_I8: case FJ_DT_U8: case FJ_DT_BOOL: return cg->t_i8;
	default: FJ_UNREACHABLE();
	}
}

LLVMTypeRef fj_cg_compute_type(fj_cg *cg, fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F16: case FJ_DT_BF16: return cg->t_f32;
	case FJ_DT_BOOL: return cg->t_i1;
	default: return fj_cg_storage_type(cg, dt);
	}
}

fj_dtype fj_cg_compute_dtype(fj_dtype dt)
{
	return dt == FJ_DT_F16 || dt == FJ_DT_BF16 ? FJ_DT_F32 : dt;
}

LLVMValueRef fj_cg_i64(fj_cg *cg, int64_t v) { return LLVMConstInt(cg->t_i64, (unsigned long long)v, 1); }
LLVMValueRef fj_cg_i32(fj_cg *cg, int32_t v) { return LLVMConstInt(cg->t_i32, (unsigned long long)(int64_t)v, 1); }

LLVMValueRef fj_cg_const(fj_cg *cg, fj_dtype dt, double f, int64_t i)
{
	LLVMTypeRef ty = fj_cg_compute_type(cg, dt);
	if (fj_dtype_is_float(dt))
		return LLVMConstReal(ty, dt == FJ_DT_F64 ? f : (double)(float)f);
	if (dt == FJ_DT_BOOL)
		return LLVMConstInt(ty, i != 0, 0);
	unsigned w = LLVMGetIntTypeWidth(ty);
	if (w < 64) { /* wrap to the width, as a signed value */
		uint64_t m = (UINT64_C(1) << w) - 1, u = (uint64_t)i & m;
		if (u >> (w - 1))
			u |= ~m;
		i = (int64_t)u;
	}
	return LLVMConstInt(ty, (unsigned long long)i, 1);
}

/* C double -> int64 with the kernels' semantics (NaN -> 0, saturating). */
static int64_t sat_i64(double f)
{
	if (f != f)
		return 0;
	if (f >= 9223372036854775807.0)
		return INT64_MAX;
	if (f <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t)f;
}

static int64_t sat_i32(double f)
{
	if (f != f)
		return 0;
	if (f >= 2147483647.0)
		return INT32_MAX;
	if (f <= -2147483648.0)
		return INT32_MIN;
	return (int64_t)f;
}

/* Rounds a float to bf16 precision (nearest even, NaN kept quiet). */
static float round_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if (x != x)
		u = (u | 0x00400000u) & 0xffff0000u;
	else
		u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

fj_literal fj_cg_attr_literal(const fj_attr *a)
{
	fj_literal l = {0};
	if (a->kind == FJ_AK_BOOL) {
		l.kind = FJ_LIT_BOOL;
		l.b = a->u.b;
	} else if (a->kind == FJ_AK_INT) {
		l.kind = FJ_LIT_INT;
		l.i = a->u.i;
	} else {
		l.kind = FJ_LIT_FLOAT;
		l.f = fj_attr_as_float(a);
	}
	return l;
}

LLVMValueRef fj_cg_literal(fj_cg *cg, const fj_literal *lit, fj_dtype to)
{
	if (fj_dtype_is_float(to)) {
		double f = fj_literal_value(lit);
		if (to == FJ_DT_BF16)
			f = (double)round_bf16((float)f);
		LLVMValueRef c = fj_cg_const(cg, to, f, 0);
		if (to == FJ_DT_F16) /* folded by the builder */
			c = LLVMBuildFPExt(cg->b, LLVMBuildFPTrunc(cg->b, c, cg->t_f16, ""), cg->t_f32, "");
		return c;
	}
	if (to == FJ_DT_BOOL) {
		bool b = lit->kind == FJ_LIT_FLOAT ? lit->f != 0 : lit->kind == FJ_LIT_INT ? lit->i != 0 : lit->b;
		return fj_cg_const(cg, to, 0, b);
	}
	int64_t i;
	if (lit->kind == FJ_LIT_FLOAT)
		i = (to == FJ_DT_I64) ? sat_i64(lit->f) : sat_i32(lit->f);
	else
		i = lit->kind == FJ_LIT_INT ? lit->i : lit->b;
	return fj_cg_const(cg, to, 0, i);
}

static LLVMValueRef call_intrinsic(fj_cg *cg, const char *name, LLVMTypeRef *tys, size_t ntys,
                                   LLVMValueRef *args, unsigned nargs)
{
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	FJ_ASSERT(id != 0);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, tys, ntys);
	LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, tys, ntys);
	return LLVMBuildCall2(cg->b, fty, f, args, nargs, "");
}

LLVMValueRef fj_cg_intrinsic(fj_cg *cg, const char *name, LLVMValueRef *args, unsigned nargs)
{
	LLVMTypeRef ty = LLVMTypeOf(args[0]);
	return call_intrinsic(cg, name, &ty, 1, args, nargs);
}

/* float -> bf16 -> float: round to nearest even by integer ops, NaN kept quiet. */
static LLVMValueRef bf16_bits(fj_cg *cg, LLVMValueRef f32v)
{
	LLVMBuilderRef b = cg->b;
	LLVMValueRef u = LLVMBuildBitCast(b, f32v, cg->t_i32, "");
	LLVMValueRef c16 = LLVMConstInt(cg->t_i32, 16, 0);
	LLVMValueRef lsb = LLVMBuildAnd(b, LLVMBuildLShr(b, u, c16, ""), LLVMConstInt(cg->t_i32, 1, 0), "");
	LLVMValueRef r = LLVMBuildAdd(b, u, LLVMBuildAdd(b, lsb, LLVMConstInt(cg->t_i32, 0x7fff, 0), ""), "");
	LLVMValueRef q = LLVMBuildOr(b, u, LLVMConstInt(cg->t_i32, 0x00400000, 0), "");
	LLVMValueRef nan = LLVMBuildFCmp(b, LLVMRealUNO, f32v, f32v, "");
	LLVMValueRef bits = LLVMBuildSelect(b, nan, q, r, "");
	return LLVMBuildTrunc(b, LLVMBuildLShr(b, bits, c16, ""), cg->t_i16, "");
}

static LLVMValueRef bf16_to_f32(fj_cg *cg, LLVMValueRef bits16)
{
	LLVMValueRef u = LLVMBuildZExt(cg->b, bits16, cg->t_i32, "");
	u = LLVMBuildShl(cg->b, u, LLVMConstInt(cg->t_i32, 16, 0), "");
	return LLVMBuildBitCast(cg->b, u, cg->t_f32, "");
}

/* Rounds compute value v (float) to the precision of dt (f16 / bf16). */
static LLVMValueRef round_to(fj_cg *cg, LLVMValueRef v, fj_dtype dt)
{
	if (dt == FJ_DT_F16) {
		LLVMValueRef h = LLVMBuildFPTrunc(cg->b, v, cg->t_f16, "");
		return LLVMBuildFPExt(cg->b, h, cg->t_f32, "");
	}
	return bf16_to_f32(cg, bf16_bits(cg, v));
}

static bool is_unsigned(fj_dtype dt) { return dt == FJ_DT_U8 || dt == FJ_DT_BOOL; }

LLVMValueRef fj_cg_convert(fj_cg *cg, LLVMValueRef v, fj_dtype from, fj_dtype to)
{
	LLVMBuilderRef b = cg->b;
	if (from == to)
		return v;
	LLVMTypeRef tt = fj_cg_compute_type(cg, to);
	if (to == FJ_DT_BOOL) {
		if (fj_dtype_is_float(from))
			return LLVMBuildFCmp(b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
		return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
	}
	if (fj_dtype_is_float(to)) {
		LLVMValueRef r;
		if (fj_dtype_is_float(from)) {
			fj_dtype cf = fj_cg_compute_dtype(from);
			if (from == FJ_DT_F64 && to == FJ_DT_F16) {
				/* One rounding, double -> half. */
				LLVMValueRef h = LLVMBuildFPTrunc(b, v, cg->t_f16, "");
				return LLVMBuildFPExt(b, h, cg->t_f32, "");
			}
			if (cf == FJ_DT_F64 && to != FJ_DT_F64)
				r = LLVMBuildFPTrunc(b, v, cg->t_f32, "");
			else if (cf == FJ_DT_F32 && to == FJ_DT_F64)
				r = LLVMBuildFPExt(b, v, cg->t_f64, "");
			else
				r = v;
		} else if (is_unsigned(from)) {
			r = LLVMBuildUIToFP(b, v, fj_cg_compute_type(cg, fj_cg_compute_dtype(to)), "");
		} else {
			r = LLVMBuildSIToFP(b, v, fj_cg_compute_type(cg, fj_cg_compute_dtype(to)), "");
		}
		if (to == FJ_DT_F16 || to == FJ_DT_BF16)
			r = round_to(cg, r, to);
		return r;
	}
	/* to: an integer type */
	if (fj_dtype_is_float(from)) {
		if (to == FJ_DT_I64 || to == FJ_DT_I32) {
			LLVMTypeRef tys[2] = {tt, LLVMTypeOf(v)};
			return call_intrinsic(cg, "llvm.fptosi.sat", tys, 2, &v, 1);
		}
		LLVMTypeRef tys[2] = {cg->t_i32, LLVMTypeOf(v)};
		LLVMValueRef w = call_intrinsic(cg, "llvm.fptosi.sat", tys, 2, &v, 1);
		return LLVMBuildTrunc(b, w, tt, "");
	}
	unsigned fw = LLVMGetIntTypeWidth(LLVMTypeOf(v)), tw = LLVMGetIntTypeWidth(tt);
	if (fw == tw)
		return v; /* i8 <-> u8: the same bits */
	if (fw > tw)
		return LLVMBuildTrunc(b, v, tt, "");
	return is_unsigned(from) ? LLVMBuildZExt(b, v, tt, "") : LLVMBuildSExt(b, v, tt, "");
}

/* ---- tensors ---- */

static LLVMValueRef elem_ptr(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset)
{
	LLVMTypeRef st = fj_cg_storage_type(cg, t->dtype);
	return LLVMBuildInBoundsGEP2(cg->b, st, t->ptr, &offset, 1, "");
}

LLVMValueRef fj_cg_from_storage(fj_cg *cg, fj_dtype dt, LLVMValueRef v)
{
	switch (dt) {
	case FJ_DT_F16: return LLVMBuildFPExt(cg->b, v, cg->t_f32, "");
	case FJ_DT_BF16: return bf16_to_f32(cg, v);
	case FJ_DT_BOOL: return LLVMBuildICmp(cg->b, LLVMIntNE, v, LLVMConstInt(cg->t_i8, 0, 0), "");
	default: return v;
	}
}

LLVMValueRef fj_cg_to_storage(fj_cg *cg, fj_dtype dt, LLVMValueRef v)
{
	switch (dt) {
	case FJ_DT_F16: return LLVMBuildFPTrunc(cg->b, v, cg->t_f16, "");
	case FJ_DT_BF16: return bf16_bits(cg, v);
	case FJ_DT_BOOL: return LLVMBuildZExt(cg->b, v, cg->t_i8, "");
	default: return v;
	}
}

LLVMValueRef fj_cg_load(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset)
{
	LLVMTypeRef st = fj_cg_storage_type(cg, t->dtype);
	LLVMValueRef v = LLVMBuildLoad2(cg->b, st, elem_ptr(cg, t, offset), "");
	LLVMSetAlignment(v, (unsigned)fj_dtype_size(t->dtype));
	return fj_cg_from_storage(cg, t->dtype, v);
}

void fj_cg_store(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset, LLVMValueRef v)
{
	v = fj_cg_to_storage(cg, t->dtype, v);
	LLVMValueRef s = LLVMBuildStore(cg->b, v, elem_ptr(cg, t, offset));
	LLVMSetAlignment(s, (unsigned)fj_dtype_size(t->dtype));
	if (t->stream)
		fj_cg_tag_stream(cg, s);
}

void fj_cg_prefetch(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset, fj_cg_prefetch_level level)
{
	LLVMTypeRef pty = LLVMPointerTypeInContext(cg->llctx, 0);
	unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", 13);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, &pty, 1);
	/* any offset (a plain GEP: a prefetch past the tensor never faults);
	 * read, `level` as the locality, data cache */
	LLVMValueRef at = LLVMBuildGEP2(cg->b, fj_cg_storage_type(cg, t->dtype), t->ptr, &offset, 1, "");
	LLVMValueRef args[4] = {at, LLVMConstInt(cg->t_i32, 0, 0), LLVMConstInt(cg->t_i32, (unsigned)level, 0),
	                        LLVMConstInt(cg->t_i32, 1, 0)};
	LLVMBuildCall2(cg->b, LLVMIntrinsicGetType(cg->llctx, id, &pty, 1), f, args, 4, "");
}

void fj_cg_assume_aligned(fj_cg *cg, LLVMValueRef base, LLVMValueRef bytes, int64_t align)
{
	unsigned id = LLVMLookupIntrinsicID("llvm.assume", 11);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, NULL, 0);
	/* "align"(p, a, off): p - off is a-aligned */
	LLVMValueRef ops[3] = {base, fj_cg_i64(cg, align), LLVMBuildNeg(cg->b, bytes, "")};
	LLVMOperandBundleRef ob = LLVMCreateOperandBundle("align", 5, ops, 3);
	LLVMValueRef yes = LLVMConstInt(cg->t_i1, 1, 0);
	LLVMBuildCallWithOperandBundles(cg->b, LLVMIntrinsicGetType(cg->llctx, id, NULL, 0), f, &yes, 1, &ob, 1, "");
	LLVMDisposeOperandBundle(ob);
}

void fj_cg_mark_stream(fj_cg *cg) { cg->stream = true; }

void fj_cg_set_nontemporal(LLVMValueRef store)
{
	LLVMContextRef llctx = LLVMGetTypeContext(LLVMTypeOf(store));
	LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(llctx), 1, 0));
	LLVMSetMetadata(store, LLVMGetMDKindIDInContext(llctx, "nontemporal", 11),
	                LLVMMetadataAsValue(llctx, LLVMMDNodeInContext2(llctx, &one, 1)));
}

static unsigned tbaa_kind(LLVMContextRef llctx) { return LLVMGetMDKindIDInContext(llctx, "tbaa", 4); }

/* The access tag fj_cg_tag_stream puts on a store: uniqued by the context,
 * so the same node each time. */
static LLVMValueRef stream_tag(LLVMContextRef llctx)
{
	static const char root_name[] = "fusejit streamed stores", type_name[] = "fj.stream";
	LLVMMetadataRef name = LLVMMDStringInContext2(llctx, root_name, sizeof root_name - 1);
	LLVMMetadataRef root = LLVMMDNodeInContext2(llctx, &name, 1);
	LLVMMetadataRef zero = LLVMValueAsMetadata(LLVMConstInt(LLVMInt64TypeInContext(llctx), 0, 0));
	LLVMMetadataRef ty[3] = {LLVMMDStringInContext2(llctx, type_name, sizeof type_name - 1), root, zero};
	LLVMMetadataRef type = LLVMMDNodeInContext2(llctx, ty, 3);
	LLVMMetadataRef tag[3] = {type, type, zero};
	return LLVMMetadataAsValue(llctx, LLVMMDNodeInContext2(llctx, tag, 3));
}

void fj_cg_tag_stream(fj_cg *cg, LLVMValueRef store)
{
	LLVMSetMetadata(store, tbaa_kind(cg->llctx), stream_tag(cg->llctx));
}

/* lines 64-byte lines from src (src_align-byte aligned) to 64-byte aligned
 * dst, non-temporal */
static void nt_lines(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef lines, unsigned src_align)
{
	LLVMTypeRef vty = LLVMVectorType(cg->t_i32, 16);
	fj_cg_loop l;
	fj_cg_loop_begin(cg, &l, fj_cg_i64(cg, 0), lines, "nt");
	LLVMValueRef v = LLVMBuildLoad2(cg->b, vty, LLVMBuildInBoundsGEP2(cg->b, vty, src, &l.iv, 1, ""), "");
	LLVMSetAlignment(v, src_align);
	LLVMValueRef st = LLVMBuildStore(cg->b, v, LLVMBuildInBoundsGEP2(cg->b, vty, dst, &l.iv, 1, ""));
	LLVMSetAlignment(st, 64);
	fj_cg_set_nontemporal(st);
	fj_cg_loop_end(cg, &l);
}

void fj_cg_stream_lines(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef lines)
{
	nt_lines(cg, dst, src, lines, 64);
}

/* memcpy(dst, src, n) where n (an i64) is not 0 */
static void copy_some(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef n)
{
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, LLVMBuildICmp(cg->b, LLVMIntNE, n, fj_cg_i64(cg, 0), ""));
	LLVMBuildMemCpy(cg->b, dst, 1, src, 1, n);
	fj_cg_if_end(cg, &c);
}

void fj_cg_stream_copy(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef bytes)
{
	LLVMBuilderRef b = cg->b;
	/* head: the bytes up to dst's first line boundary (all of them if fewer) */
	LLVMValueRef addr = LLVMBuildPtrToInt(b, dst, cg->t_i64, "");
	LLVMValueRef head = LLVMBuildAnd(b, LLVMBuildNeg(b, addr, ""), fj_cg_i64(cg, 63), "");
	head = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, head, bytes, ""), head, bytes, "");
	LLVMValueRef rest = LLVMBuildNUWSub(b, bytes, head, "");
	LLVMValueRef lines = LLVMBuildLShr(b, rest, fj_cg_i64(cg, 6), "");
	LLVMValueRef body = LLVMBuildShl(b, lines, fj_cg_i64(cg, 6), "");
	copy_some(cg, dst, src, head);
	LLVMValueRef d1 = LLVMBuildInBoundsGEP2(b, cg->t_i8, dst, &head, 1, "");
	LLVMValueRef s1 = LLVMBuildInBoundsGEP2(b, cg->t_i8, src, &head, 1, "");
	nt_lines(cg, d1, s1, lines, 1); /* src + head: line-aligned only where dst is */
	copy_some(cg, LLVMBuildInBoundsGEP2(b, cg->t_i8, d1, &body, 1, ""),
	          LLVMBuildInBoundsGEP2(b, cg->t_i8, s1, &body, 1, ""), LLVMBuildNUWSub(b, rest, body, ""));
}

/* Whether store i can be non-temporal: a vector store aligned to its size. */
static bool ntable(LLVMTargetDataRef dl, LLVMValueRef i)
{
	LLVMTypeRef ty = LLVMTypeOf(LLVMGetOperand(i, 0));
	return LLVMGetTypeKind(ty) == LLVMVectorTypeKind && LLVMGetAlignment(i) >= LLVMStoreSizeOfType(dl, ty);
}

void fj_cg_stream_stores(LLVMModuleRef mod)
{
	LLVMTargetDataRef dl = LLVMGetModuleDataLayout(mod);
	LLVMContextRef llctx = LLVMGetModuleContext(mod);
	LLVMValueRef tag = stream_tag(llctx);
	unsigned kind = tbaa_kind(llctx);
	for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
		bool all = LLVMGetStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, FJ_CG_STREAM,
		                                         (unsigned)strlen(FJ_CG_STREAM)) != NULL;
		for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
			/* tagged stores stream only where all of the block's can: a
			 * line written partly streamed and partly plain is far slower
			 * than one written plainly (fj_cg_tag_stream) */
			bool tagged = true;
			for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i))
				if (LLVMIsAStoreInst(i) && LLVMGetMetadata(i, kind) == tag)
					tagged &= ntable(dl, i);
			for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i)) {
				if (!LLVMIsAStoreInst(i) || !ntable(dl, i))
					continue;
				if (LLVMGetMetadata(i, kind) == tag ? tagged : all)
					fj_cg_set_nontemporal(i);
			}
		}
	}
}

LLVMValueRef fj_cg_offset(fj_cg *cg, const fj_cg_tensor *t, const LLVMValueRef *idx)
{
	LLVMValueRef off = fj_cg_i64(cg, 0);
	for (int k = 0; k < t->rank; k++) {
		LLVMValueRef term = LLVMBuildNSWMul(cg->b, idx[k], t->stride[k], "");
		off = k == 0 ? term : LLVMBuildNSWAdd(cg->b, off, term, "");
	}
	return off;
}

LLVMValueRef fj_cg_bcast_offset(fj_cg *cg, const fj_cg_tensor *t, const LLVMValueRef *idx, int rank)
{
	LLVMValueRef off = fj_cg_i64(cg, 0);
	LLVMValueRef one = fj_cg_i64(cg, 1), zero = fj_cg_i64(cg, 0);
	for (int k = 0; k < t->rank; k++) {
		int j = rank - t->rank + k;
		FJ_ASSERT(j >= 0);
		LLVMValueRef is1 = LLVMBuildICmp(cg->b, LLVMIntEQ, t->dim[k], one, "");
		LLVMValueRef stride = LLVMBuildSelect(cg->b, is1, zero, t->stride[k], "");
		LLVMValueRef term = LLVMBuildNSWMul(cg->b, idx[j], stride, "");
		off = k == 0 ? term : LLVMBuildNSWAdd(cg->b, off, term, "");
	}
	return off;
}

void fj_cg_unravel(fj_cg *cg, LLVMValueRef linear, const LLVMValueRef *dims, int n, LLVMValueRef *idx)
{
	if (n == 0)
		return;
	for (int k = n - 1; k > 0; k--) {
		LLVMValueRef q = LLVMBuildUDiv(cg->b, linear, dims[k], "");
		idx[k] = LLVMBuildNSWSub(cg->b, linear, LLVMBuildNSWMul(cg->b, q, dims[k], ""), "");
		linear = q;
	}
	idx[0] = linear;
}

/* ---- control flow ---- */

void fj_cg_loop_begin(fj_cg *cg, fj_cg_loop *l, LLVMValueRef lo, LLVMValueRef hi, const char *name)
{
	LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
	l->head = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, name ? name : "loop");
	l->body = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "body");
	l->latch = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "latch");
	l->exit = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "exit");
	l->hi = hi;
	l->step = fj_cg_i64(cg, 1);
	LLVMBuildBr(cg->b, l->head);
	LLVMPositionBuilderAtEnd(cg->b, l->head);
	l->phi = LLVMBuildPhi(cg->b, cg->t_i64, "i");
	LLVMAddIncoming(l->phi, &lo, &pre, 1);
	l->iv = l->phi;
	LLVMValueRef c = LLVMBuildICmp(cg->b, LLVMIntSLT, l->phi, hi, "");
	LLVMBuildCondBr(cg->b, c, l->body, l->exit);
	LLVMPositionBuilderAtEnd(cg->b, l->body);
}

void fj_cg_loop_end(fj_cg *cg, fj_cg_loop *l)
{
	LLVMBuildBr(cg->b, l->latch);
	LLVMPositionBuilderAtEnd(cg->b, l->latch);
	LLVMValueRef next = LLVMBuildNSWAdd(cg->b, l->phi, l->step, "");
	LLVMBuildBr(cg->b, l->head);
	LLVMAddIncoming(l->phi, &next, &l->latch, 1);
	/* Keep blocks in a readable order: the exit after everything so far. */
	LLVMMoveBasicBlockAfter(l->exit, l->latch);
	LLVMPositionBuilderAtEnd(cg->b, l->exit);
}

LLVMMetadataRef fj_cg_loop_prop(fj_cg *cg, const char *name, LLVMValueRef value)
{
	LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(cg->llctx, name, strlen(name)),
	                          value ? LLVMValueAsMetadata(value) : NULL};
	return LLVMMDNodeInContext2(cg->llctx, ops, value ? 2 : 1);
}

void fj_cg_loop_md(fj_cg *cg, LLVMValueRef br, const LLVMMetadataRef *props, unsigned n)
{
	LLVMMetadataRef ops[8];
	FJ_ASSERT(n < 8);
	ops[0] = LLVMTemporaryMDNode(cg->llctx, NULL, 0);
	for (unsigned i = 0; i < n; i++)
		ops[1 + i] = props[i];
	LLVMMetadataRef node = LLVMMDNodeInContext2(cg->llctx, ops, 1 + n);
	LLVMMetadataReplaceAllUsesWith(ops[0], node); /* the id refers to itself */
	unsigned kind = LLVMGetMDKindIDInContext(cg->llctx, "llvm.loop", 9);
	LLVMSetMetadata(br, kind, LLVMMetadataAsValue(cg->llctx, node));
}

void fj_cg_loop_hints(fj_cg *cg, fj_cg_loop *l, int width, int interleave)
{
	LLVMValueRef br = LLVMGetBasicBlockTerminator(l->latch);
	if (!br || (width < 2 && interleave < 2))
		return;
	LLVMMetadataRef props[4];
	unsigned n = 0;
	if (width >= 2) {
		props[n++] = fj_cg_loop_prop(cg, "llvm.loop.vectorize.width", fj_cg_i32(cg, width));
		props[n++] = fj_cg_loop_prop(cg, "llvm.loop.vectorize.enable", LLVMConstInt(cg->t_i1, 1, 0));
	}
	if (interleave >= 2) {
		/* independent copies of the body (FJ_CG_INTERLEAVE): reductions get
		 * partial accumulators for their loop-carried chain (NaN-propagating
		 * max is ~4 ops deep), every loop overlapping chains of math */
		props[n++] = fj_cg_loop_prop(cg, "llvm.loop.interleave.count", fj_cg_i32(cg, interleave));
		/* and not fully unrolled afterwards (a static row length): the
		 * unrolled reassociable sum is rebuilt as one serial chain */
		props[n++] = fj_cg_loop_prop(cg, "llvm.loop.unroll.disable", NULL);
	}
	fj_cg_loop_md(cg, br, props, n);
}

void fj_cg_loop_unroll(fj_cg *cg, fj_cg_loop *l, int count)
{
	LLVMValueRef br = LLVMGetBasicBlockTerminator(l->latch);
	LLVMMetadataRef p = fj_cg_loop_prop(cg, "llvm.loop.unroll.count", fj_cg_i32(cg, count));
	if (br)
		fj_cg_loop_md(cg, br, &p, 1);
}

void fj_cg_loop_no_vectorize(fj_cg *cg, fj_cg_loop *l)
{
	LLVMValueRef br = LLVMGetBasicBlockTerminator(l->latch);
	LLVMMetadataRef off = fj_cg_loop_prop(cg, "llvm.loop.vectorize.enable", LLVMConstInt(cg->t_i1, 0, 0));
	if (br)
		fj_cg_loop_md(cg, br, &off, 1);
}

void fj_cg_if_begin(fj_cg *cg, fj_cg_if *c, LLVMValueRef cond)
{
	c->then_bb = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "then");
	c->else_bb = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "else");
	c->join_bb = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "join");
	LLVMBuildCondBr(cg->b, cond, c->then_bb, c->else_bb);
	LLVMPositionBuilderAtEnd(cg->b, c->then_bb);
}

void fj_cg_if_else(fj_cg *cg, fj_cg_if *c)
{
	if (!LLVMGetBasicBlockTerminator(LLVMGetInsertBlock(cg->b)))
		LLVMBuildBr(cg->b, c->join_bb);
	LLVMMoveBasicBlockAfter(c->else_bb, LLVMGetInsertBlock(cg->b));
	LLVMPositionBuilderAtEnd(cg->b, c->else_bb);
}

void fj_cg_if_end(fj_cg *cg, fj_cg_if *c)
{
	LLVMBasicBlockRef cur = LLVMGetInsertBlock(cg->b);
	if (!LLVMGetBasicBlockTerminator(cur))
		LLVMBuildBr(cg->b, c->join_bb);
	if (!LLVMGetBasicBlockTerminator(c->else_bb)) {
		/* No else part: the else block just joins. */
		LLVMPositionBuilderAtEnd(cg->b, c->else_bb);
		LLVMBuildBr(cg->b, c->join_bb);
		cur = c->else_bb;
	}
	LLVMMoveBasicBlockAfter(c->join_bb, cur);
	LLVMPositionBuilderAtEnd(cg->b, c->join_bb);
}

LLVMValueRef fj_cg_var(fj_cg *cg, LLVMTypeRef ty, LLVMValueRef init, const char *name)
{
	LLVMBuilderRef eb = LLVMCreateBuilderInContext(cg->llctx);
	LLVMValueRef first = LLVMGetFirstInstruction(cg->entry);
	if (first)
		LLVMPositionBuilderBefore(eb, first);
	else
		LLVMPositionBuilderAtEnd(eb, cg->entry);
	LLVMValueRef a = LLVMBuildAlloca(eb, ty, name ? name : "");
	LLVMDisposeBuilder(eb);
	if (init)
		LLVMBuildStore(cg->b, init, a);
	return a;
}

LLVMValueRef fj_cg_get(fj_cg *cg, LLVMValueRef var, LLVMTypeRef ty)
{
	return LLVMBuildLoad2(cg->b, ty, var, "");
}

void fj_cg_set(fj_cg *cg, LLVMValueRef var, LLVMValueRef v)
{
	LLVMBuildStore(cg->b, v, var);
}

/* ---- math through the target ---- */

LLVMValueRef fj_cg_math1(fj_cg *cg, fj_cg_math fn, LLVMValueRef x)
{
	LLVMValueRef args[2] = {x, NULL};
	return cg->target->math(cg, fn, args);
}

LLVMValueRef fj_cg_math2(fj_cg *cg, fj_cg_math fn, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef args[2] = {x, y};
	return cg->target->math(cg, fn, args);
}

LLVMValueRef fj_cg_exp_nonpos(fj_cg *cg, LLVMValueRef x)
{
	LLVMValueRef v = cg->target->region_exp_nonpos ? cg->target->region_exp_nonpos(cg, x) : NULL;
	return v ? v : fj_cg_math1(cg, FJ_MATH_EXP, x);
}

LLVMValueRef fj_cg_exp_addend(fj_cg *cg, LLVMValueRef x)
{
	return cg->target->region_exp_addend ? cg->target->region_exp_addend(cg, x) : NULL;
}

/* ---- host libm and LLVM's native target ---- */

static const char *const libm_names[FJ_MATH_COUNT][2] = {
	[FJ_MATH_EXP] = {"expf", "exp"}, [FJ_MATH_EXP2] = {"exp2f", "exp2"},
	[FJ_MATH_EXPM1] = {"expm1f", "expm1"}, [FJ_MATH_LOG] = {"logf", "log"},
	[FJ_MATH_LOG2] = {"log2f", "log2"}, [FJ_MATH_LOG10] = {"log10f", "log10"},
	[FJ_MATH_LOG1P] = {"log1pf", "log1p"}, [FJ_MATH_SIN] = {"sinf", "sin"},
	[FJ_MATH_COS] = {"cosf", "cos"}, [FJ_MATH_TAN] = {"tanf", "tan"},
	[FJ_MATH_TANH] = {"tanhf", "tanh"}, [FJ_MATH_SINH] = {"sinhf", "sinh"},
	[FJ_MATH_COSH] = {"coshf", "cosh"}, [FJ_MATH_ASIN] = {"asinf", "asin"},
	[FJ_MATH_ACOS] = {"acosf", "acos"}, [FJ_MATH_ATAN] = {"atanf", "atan"},
	[FJ_MATH_ASINH] = {"asinhf", "asinh"}, [FJ_MATH_ACOSH] = {"acoshf", "acosh"},
	[FJ_MATH_ATANH] = {"atanhf", "atanh"}, [FJ_MATH_ERF] = {"erff", "erf"},
	[FJ_MATH_ERFC] = {"erfcf", "erfc"}, [FJ_MATH_POW] = {"powf", "pow"},
	[FJ_MATH_ATAN2] = {"atan2f", "atan2"}, [FJ_MATH_FMOD] = {"fmodf", "fmod"},
};

const char *fj_cg_libm_name(fj_cg_math fn, bool dbl)
{
	return libm_names[fn][dbl];
}

static pthread_once_t native_once = PTHREAD_ONCE_INIT;
static bool native_ok;

static void native_init(void)
{
	native_ok = !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter();
}

bool fj_cg_native_init(void)
{
	pthread_once(&native_once, native_init);
	return native_ok;
}

/* ---- element loops ---- */

void fj_cg_for_each(fj_cg *cg, fj_cg_kernel *k, uint32_t out, fj_cg_elem_fn body, void *ud)
{
	const fj_cg_tensor *o = &k->out[out];
	int r = o->rank;
	LLVMValueRef idx[FJ_MAX_RANK];
	k->par_out = out;
	if (r == 0) {
		k->par_mask = 0;
		/* extent 1: run only when the range holds index 0 */
		fj_cg_if c;
		LLVMValueRef has = LLVMBuildICmp(cg->b, LLVMIntSLT, k->lo, k->hi, "");
		fj_cg_if_begin(cg, &c, has);
		body(cg, k, ud, idx);
		fj_cg_if_end(cg, &c);
		return;
	}
	if (r == 1) {
		k->par_mask = 1;
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, k->lo, k->hi, "i");
		idx[0] = l.iv;
		body(cg, k, ud, idx);
		fj_cg_loop_end(cg, &l);
		return;
	}
	k->par_mask = (1u << (r - 1)) - 1;
	fj_cg_loop lp, li;
	fj_cg_loop_begin(cg, &lp, k->lo, k->hi, "rows");
	fj_cg_unravel(cg, lp.iv, o->dim, r - 1, idx);
	fj_cg_loop_begin(cg, &li, fj_cg_i64(cg, 0), o->dim[r - 1], "cols");
	idx[r - 1] = li.iv;
	body(cg, k, ud, idx);
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_end(cg, &lp);
}
