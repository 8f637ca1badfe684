/* test_infer.c -- the op table and result-type inference: one or more cases
 * for every op (a coverage test fails when an op has none), the tricky
 * promotion and shape rules, and fj_check_node's diagnostics.
 *
 * A case is written in a small notation close to IR.md's text format:
 *   operands  "f32[2,N], 2.5, none, i64[N*4]"  (types, literal scalars, none)
 *   attrs     "dims=[1], keepdim=true, approximate=\"tanh\", shape=[N*64,-1]"
 *   expected  "f32[2,1], f32[2,1]"  or  "!substring of the error message" */
#include <ctype.h>
#include <stdio.h>

#include "test.h"

typedef struct icase {
	fj_op op;
	const char *in, *attrs, *out;
} icase;

#define C(op, in, attrs, out) {FJ_OP_##op, in, attrs, out}

static const icase cases[] = {
	/* ---- aten pointwise unary ---- */
	C(ATEN_ABS, "i32[3]", "", "i32[3]"),
	C(ATEN_NEG, "f16[2,N]", "", "f16[2,N]"),
	C(ATEN_NEG, "bool[2]", "", "!negation of a bool tensor"),
	C(ATEN_EXP, "f32[2,N]", "", "f32[2,N]"),
	C(ATEN_EXP, "i64[4]", "", "f32[4]"),
	C(ATEN_EXP2, "f16[3]", "", "f16[3]"),
	C(ATEN_EXPM1, "f64[3]", "", "f64[3]"),
	C(ATEN_LOG, "bool[3]", "", "f32[3]"),
	C(ATEN_LOG2, "f32[3]", "", "f32[3]"),
	C(ATEN_LOG10, "f32[3]", "", "f32[3]"),
	C(ATEN_LOG1P, "bf16[3]", "", "bf16[3]"),
	C(ATEN_SQRT, "i32[2,2]", "", "f32[2,2]"),
	C(ATEN_RSQRT, "f32[]", "", "f32[]"),
	C(ATEN_RECIPROCAL, "i64[5]", "", "f32[5]"),
	C(ATEN_SIN, "f32[3]", "", "f32[3]"),
	C(ATEN_COS, "f32[3]", "", "f32[3]"),
	C(ATEN_TAN, "f32[3]", "", "f32[3]"),
	C(ATEN_TANH, "f16[3]", "", "f16[3]"),
	C(ATEN_SINH, "f32[3]", "", "f32[3]"),
	C(ATEN_COSH, "f32[3]", "", "f32[3]"),
	C(ATEN_ASIN, "f32[3]", "", "f32[3]"),
	C(ATEN_ACOS, "f32[3]", "", "f32[3]"),
	C(ATEN_ATAN, "f32[3]", "", "f32[3]"),
	C(ATEN_ASINH, "f32[3]", "", "f32[3]"),
	C(ATEN_ACOSH, "f32[3]", "", "f32[3]"),
	C(ATEN_ATANH, "f32[3]", "", "f32[3]"),
	C(ATEN_SIGMOID, "i8[3]", "", "f32[3]"),
	C(ATEN_RELU, "i64[3]", "", "i64[3]"),
	C(ATEN_GELU, "bf16[N,8]", "approximate=\"tanh\"", "bf16[N,8]"),
	C(ATEN_GELU, "f32[3]", "approximate=\"fast\"", "!approximate must be"),
	C(ATEN_GELU, "i64[3]", "", "!expected a floating-point tensor, got i64"),
	C(ATEN_SILU, "f32[3]", "", "f32[3]"),
	C(ATEN_ERF, "f32[3]", "", "f32[3]"),
	C(ATEN_ERFC, "f32[3]", "", "f32[3]"),
	C(ATEN_FLOOR, "i64[3]", "", "i64[3]"),
	C(ATEN_CEIL, "f32[3]", "", "f32[3]"),
	C(ATEN_ROUND, "f32[3]", "decimals=2", "f32[3]"),
	C(ATEN_TRUNC, "f16[3]", "", "f16[3]"),
	C(ATEN_SIGN, "i32[3]", "", "i32[3]"),
	C(ATEN_LOGICAL_NOT, "f32[3]", "", "bool[3]"),
	C(ATEN_BITWISE_NOT, "i8[3]", "", "i8[3]"),
	C(ATEN_BITWISE_NOT, "f32[3]", "", "!only integer and bool"),
	C(ATEN_ISNAN, "f16[3]", "", "bool[3]"),
	C(ATEN_ISINF, "f32[3]", "", "bool[3]"),
	C(ATEN_LEAKY_RELU, "f32[3]", "negative_slope=0.2", "f32[3]"),
	C(ATEN_ELU, "f32[3]", "alpha=1.5", "f32[3]"),
	C(ATEN_SOFTPLUS, "f32[3]", "beta=2, threshold=10", "f32[3]"),
	C(ATEN_HARDSIGMOID, "f32[3]", "", "f32[3]"),
	C(ATEN_HARDSWISH, "f32[3]", "", "f32[3]"),
	C(ATEN_HARDTANH, "f32[3]", "min_val=0, max_val=6", "f32[3]"),

	/* ---- aten pointwise binary: broadcasting and promotion ---- */
	C(ATEN_ADD, "f32[2,3], f32[3]", "", "f32[2,3]"),
	C(ATEN_ADD, "f32[N,1], f32[1,M]", "alpha=2", "f32[N,M]"),
	C(ATEN_ADD, "f32[N], f32[4]", "", "f32[4]"),
	C(ATEN_ADD, "f32[2,3], f32[4]", "", "!shapes do not broadcast: size 3 against size 4"),
	C(ATEN_ADD, "i64[4], 2.5", "", "f32[4]"),
	C(ATEN_ADD, "bool[3], 2", "", "i64[3]"),
	C(ATEN_ADD, "u8[3], i8[3]", "", "i16[3]"),
	C(ATEN_ADD, "i32[3], 7", "", "i32[3]"),
	C(ATEN_ADD, "i32[3], i64[]", "", "i32[3]"),
	C(ATEN_ADD, "i64[3], f32[]", "", "f32[3]"),
	C(ATEN_ADD, "f32[3], f64[]", "", "f32[3]"),
	C(ATEN_ADD, "f16[3], bf16[3]", "", "f32[3]"),
	C(ATEN_ADD, "f32[], f64[]", "", "f64[]"),
	C(ATEN_ADD, "1, 2", "", "i64[]"),
	C(ATEN_ADD, "1, 2.0", "", "f32[]"),
	C(ATEN_ADD, "i64[3], i64[3]", "alpha=0.5", "!alpha must not be a floating-point"),
	C(ATEN_SUB, "1.0, f16[4]", "", "f16[4]"),
	C(ATEN_SUB, "bool[3], bool[3]", "", "!subtraction with a bool operand"),
	C(ATEN_MUL, "f16[2,N], 0.5", "", "f16[2,N]"),
	C(ATEN_MUL, "bool[2], true", "", "bool[2]"),
	C(ATEN_DIV, "i64[3], i64[3]", "", "f32[3]"),
	C(ATEN_DIV, "i64[3], 2", "rounding_mode=\"floor\"", "i64[3]"),
	C(ATEN_DIV, "f16[3], 2", "rounding_mode=\"trunc\"", "f16[3]"),
	C(ATEN_DIV, "f32[3], 2", "rounding_mode=\"up\"", "!rounding_mode must be"),
	C(ATEN_POW, "i64[3], 2.0", "", "f32[3]"),
	C(ATEN_POW, "2, f16[3]", "", "f16[3]"),
	C(ATEN_POW, "i32[3], 2", "", "i32[3]"),
	C(ATEN_MAXIMUM, "f32[3], f16[3]", "", "f32[3]"),
	C(ATEN_MINIMUM, "i8[2,1], i16[3]", "", "i16[2,3]"),
	C(ATEN_ATAN2, "i32[3], i32[3]", "", "f32[3]"),
	C(ATEN_FMOD, "f32[3], 2", "", "f32[3]"),
	C(ATEN_REMAINDER, "i64[3], 3", "", "i64[3]"),
	C(ATEN_EQ, "f32[3], 1", "", "bool[3]"),
	C(ATEN_NE, "f32[3], f32[2,1]", "", "bool[2,3]"),
	C(ATEN_LT, "i64[3], 2.5", "", "bool[3]"),
	C(ATEN_LE, "f32[3], f32[3]", "", "bool[3]"),
	C(ATEN_GT, "f32[3], f32[3]", "", "bool[3]"),
	C(ATEN_GE, "f32[3], f32[3]", "", "bool[3]"),
	C(ATEN_LOGICAL_AND, "f32[3], i64[3]", "", "bool[3]"),
	C(ATEN_LOGICAL_OR, "bool[3], bool[3]", "", "bool[3]"),
	C(ATEN_LOGICAL_XOR, "bool[3], 1", "", "bool[3]"),
	C(ATEN_BITWISE_AND, "i32[3], i64[3]", "", "i64[3]"),
	C(ATEN_BITWISE_OR, "bool[3], bool[3]", "", "bool[3]"),
	C(ATEN_BITWISE_XOR, "i32[3], 1.5", "", "!only integer and bool operands are supported, got f32"),
	C(ATEN_BITWISE_XOR, "u8[3], 1", "", "u8[3]"),

	/* ---- aten pointwise other ---- */
	C(ATEN_WHERE, "bool[2,1], f32[3], 0.0", "", "f32[2,3]"),
	C(ATEN_WHERE, "bool[3], 1, 0.5", "", "f32[3]"),
	C(ATEN_WHERE, "f32[3], f32[3], f32[3]", "", "!condition must be a bool tensor"),
	C(ATEN_CLAMP, "i64[3]", "min=0.5", "f32[3]"),
	C(ATEN_CLAMP, "i64[3]", "min=0, max=10", "i64[3]"),
	C(ATEN_CLAMP, "f16[3]", "min=-1.0, max=1.0", "f16[3]"),
	C(ATEN_CLAMP, "f32[3]", "", "!at least one of min and max"),
	C(ATEN_LERP, "f32[2,3], f32[3], 0.5", "", "f32[2,3]"),
	C(ATEN_LERP, "i64[3], i64[3], 1", "", "!expected floating-point operands"),
	C(ATEN_ADDCMUL, "f32[2,1], f32[3], f32[1,3]", "value=0.5", "f32[2,3]"),
	C(ATEN__TO_COPY, "f32[2,N]", "dtype=f16", "f16[2,N]"),
	C(ATEN__TO_COPY, "i32[2]", "", "i32[2]"),
	C(ATEN_MASKED_FILL, "f32[2,3], bool[3], 0.0", "", "f32[2,3]"),
	C(ATEN_MASKED_FILL, "f16[2,3], bool[2,3], f32[]", "", "f16[2,3]"),
	C(ATEN_MASKED_FILL, "f32[3], f32[3], 0.0", "", "!mask must be a bool tensor"),
	C(ATEN_MASKED_FILL, "f32[3], bool[3], f32[3]", "", "!value must be a 0-d tensor"),

	/* ---- aten reductions ---- */
	C(ATEN_SUM, "f32[2,3,4]", "dims=[1,-1], keepdim=true", "f32[2,1,1]"),
	C(ATEN_SUM, "f32[2,3,4]", "", "f32[]"),
	C(ATEN_SUM, "f32[2,3,4]", "dims=[]", "f32[]"),
	C(ATEN_SUM, "i32[3]", "", "i64[]"),
	C(ATEN_SUM, "bool[3,N]", "dims=[0]", "i64[N]"),
	C(ATEN_SUM, "f16[3]", "dtype=f32", "f32[]"),
	C(ATEN_SUM, "f32[2,3]", "dims=[1,-1]", "!appears more than once"),
	C(ATEN_SUM, "f32[2,3]", "dims=[2]", "!dim 2 is out of range for a tensor of rank 2"),
	C(ATEN_SUM, "f32[]", "dims=[0], keepdim=true", "f32[]"),
	C(ATEN_MEAN, "f16[4,N]", "dims=[0]", "f16[N]"),
	C(ATEN_MEAN, "i64[4]", "", "!could not infer the output dtype"),
	C(ATEN_MEAN, "i64[4]", "dtype=f32", "f32[]"),
	C(ATEN_AMAX, "i32[4,5]", "dims=[-1]", "i32[4]"),
	C(ATEN_AMIN, "f32[4,5]", "dims=[0], keepdim=true", "f32[1,5]"),
	C(ATEN_PROD, "i8[4]", "", "i64[]"),
	C(ATEN_LOGSUMEXP, "i64[4,5]", "dims=[1]", "f32[4]"),
	C(ATEN_VAR, "f32[4,5]", "dims=[1], correction=0", "f32[4]"),
	C(ATEN_VAR_MEAN, "f32[4,5]", "dims=[1], keepdim=true", "f32[4,1], f32[4,1]"),
	C(ATEN_VAR_MEAN, "i64[4,5]", "", "!must be a floating-point tensor"),
	C(ATEN_ARGMAX, "f32[3,4]", "dim=-1", "i64[3]"),
	C(ATEN_ARGMAX, "f32[3,4]", "", "i64[]"),
	C(ATEN_ARGMAX, "f32[3,4]", "keepdim=true", "i64[1,1]"),
	C(ATEN_ARGMIN, "f32[3,4]", "dim=0, keepdim=true", "i64[1,4]"),

	/* ---- aten normalization ---- */
	C(ATEN__SOFTMAX, "f16[2,N]", "dim=-1, half_to_float=true", "f32[2,N]"),
	C(ATEN__SOFTMAX, "f32[2,N]", "dim=2", "!out of range"),
	C(ATEN_SOFTMAX, "i64[2,3]", "dim=1, dtype=f32", "f32[2,3]"),
	C(ATEN_SOFTMAX, "i64[2,3]", "dim=1", "!expected a floating-point tensor"),
	C(ATEN__LOG_SOFTMAX, "f32[2,3]", "dim=1", "f32[2,3]"),
	C(ATEN_LOG_SOFTMAX, "bf16[2,3]", "dim=0", "bf16[2,3]"),
	C(ATEN_NATIVE_LAYER_NORM, "f32[N,8,16], f32[16], f32[16]", "normalized_shape=[16]",
	  "f32[N,8,16], f32[N,8,1], f32[N,8,1]"),
	C(ATEN_NATIVE_LAYER_NORM, "f16[N,8,16], none, none", "normalized_shape=[8,16], eps=1e-6",
	  "f16[N,8,16], f16[N,1,1], f16[N,1,1]"),
	C(ATEN_NATIVE_LAYER_NORM, "f32[N,8,16]", "normalized_shape=[8]", "!does not match the trailing sizes"),
	C(ATEN_NATIVE_LAYER_NORM, "f32[4,16], f32[8]", "normalized_shape=[16]", "!weight must have shape [16]"),
	C(ATEN_LAYER_NORM, "f32[4,16], f32[16], f32[16]", "normalized_shape=[16]", "f32[4,16]"),
	C(ATEN_RMS_NORM, "bf16[4,32], bf16[32]", "normalized_shape=[32]", "bf16[4,32]"),
	C(ATEN_RMS_NORM, "f32[4,32]", "normalized_shape=[32], eps=1e-6", "f32[4,32]"),
	C(ATEN_NATIVE_BATCH_NORM, "f32[N,3,8,8], f32[3], f32[3], f32[3], f32[3]",
	  "training=true, momentum=0.1, eps=1e-5", "f32[N,3,8,8], f32[3], f32[3]"),
	C(ATEN_NATIVE_BATCH_NORM, "f32[N,3,8,8], f32[3], f32[3], f32[3], f32[3]",
	  "training=false, momentum=0.1, eps=1e-5", "f32[N,3,8,8], f32[0], f32[0]"),
	C(ATEN_NATIVE_BATCH_NORM, "f32[N,3], f32[4]", "training=true, momentum=0.1, eps=1e-5",
	  "!weight must have shape [3]"),
	C(ATEN__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL, "f32[2,3,5], f32[3], f32[3], f32[3], f32[3]",
	  "training=true, momentum=0.1, eps=1e-5", "f32[2,3,5], f32[3], f32[3], f32[3], f32[3]"),

	/* ---- aten losses and backward ops ---- */
	C(ATEN_NLL_LOSS_FORWARD, "f32[N,10], i64[N], none", "", "f32[], f32[]"),
	C(ATEN_NLL_LOSS_FORWARD, "f32[N,10], i64[N], f32[10]", "reduction=0", "f32[N], f32[]"),
	C(ATEN_NLL_LOSS_FORWARD, "f32[10], i64[]", "reduction=0", "f32[], f32[]"),
	C(ATEN_NLL_LOSS_FORWARD, "f32[4,10], f32[4]", "", "!target must be an i64 or i32 tensor"),
	C(ATEN_NLL_LOSS_FORWARD, "f32[4,10], i64[4]", "reduction=3", "!reduction must be"),
	C(ATEN_NLL_LOSS_BACKWARD, "f32[], f32[N,10], i64[N], none, f32[]", "reduction=1, ignore_index=-100",
	  "f32[N,10]"),
	C(ATEN_THRESHOLD_BACKWARD, "f32[4], f32[4]", "threshold=0", "f32[4]"),
	C(ATEN_GELU_BACKWARD, "f32[4], f32[4]", "approximate=\"tanh\"", "f32[4]"),
	C(ATEN_SIGMOID_BACKWARD, "f16[4], f16[4]", "", "f16[4]"),
	C(ATEN_TANH_BACKWARD, "f32[4], f32[4]", "", "f32[4]"),
	C(ATEN_SILU_BACKWARD, "f32[4], f32[4]", "", "f32[4]"),
	C(ATEN_LEAKY_RELU_BACKWARD, "f32[4], f32[4]", "negative_slope=0.01, self_is_result=false", "f32[4]"),
	C(ATEN_HARDTANH_BACKWARD, "f32[4], f32[4]", "min_val=-1, max_val=1", "f32[4]"),
	C(ATEN__SOFTMAX_BACKWARD_DATA, "f32[2,8], f32[2,8]", "dim=1, input_dtype=f16", "f16[2,8]"),
	C(ATEN__LOG_SOFTMAX_BACKWARD_DATA, "f32[2,8], f32[2,8]", "dim=-1, input_dtype=f32", "f32[2,8]"),
	C(ATEN__LOG_SOFTMAX_BACKWARD_DATA, "f32[2,8], f32[2,4]", "dim=-1, input_dtype=f32", "!grad_output must have shape"),
	C(ATEN_NATIVE_LAYER_NORM_BACKWARD, "f32[N,16], f32[N,16], f32[N,1], f32[N,1], f32[16], f32[16]",
	  "normalized_shape=[16], output_mask=[true,true,true]", "f32[N,16], f32[16], f32[16]"),
	C(ATEN_NATIVE_LAYER_NORM_BACKWARD, "f32[N,16], f32[N,16], f32[N,1], f32[N,1], none, none",
	  "normalized_shape=[16], output_mask=[true,false,false]", "f32[N,16], f32[16], f32[16]"),
	C(ATEN_NATIVE_BATCH_NORM_BACKWARD, "f32[4,3,2], f32[4,3,2], f32[3], f32[3], f32[3], f32[3], f32[3]",
	  "train=true, eps=1e-5, output_mask=[true,true,true]", "f32[4,3,2], f32[3], f32[3]"),
	C(ATEN_EMBEDDING_DENSE_BACKWARD, "f32[B,S,64], i64[B,S]",
	  "num_weights=1000, padding_idx=-1, scale_grad_by_freq=false", "f32[1000,64]"),

	/* ---- aten shape ---- */
	C(ATEN_VIEW, "f32[N,4096]", "shape=[-1,64,64]", "f32[N,64,64]"),
	C(ATEN_VIEW, "f32[2,3,4]", "shape=[4,-1]", "f32[4,6]"),
	C(ATEN_RESHAPE, "f32[N,64,64]", "shape=[N*64,64]", "f32[N*64,64]"),
	C(ATEN_RESHAPE, "f32[N,4,8]", "shape=[N,-1]", "f32[N,32]"),
	C(ATEN_RESHAPE, "f32[N*4096]", "shape=[-1,4096]", "f32[N,4096]"),
	C(ATEN_RESHAPE, "f32[N,M]", "shape=[-1]", "f32[M*N]"),
	C(ATEN_RESHAPE, "f32[]", "shape=[1,1]", "f32[1,1]"),
	C(ATEN_RESHAPE, "f32[6]", "shape=[4,-1]", "!the -1 cannot be inferred"),
	C(ATEN_RESHAPE, "f32[6]", "shape=[4]", "!shape [4] is invalid for an input of 6 elements"),
	C(ATEN_RESHAPE, "f32[0,3]", "shape=[0,-1]", "!cannot infer the -1"),
	C(ATEN_RESHAPE, "f32[2,3]", "shape=[-1,-1]", "!only one size of the shape may be -1"),
	C(ATEN_RESHAPE, "f32[N,3]", "shape=[M,-1]", "!cannot be inferred"),
	C(ATEN__UNSAFE_VIEW, "f32[2,3]", "shape=[6]", "f32[6]"),
	C(ATEN__RESHAPE_ALIAS, "f32[2,3]", "shape=[3,2], stride=[2,1]", "f32[3,2]"),
	C(ATEN_PERMUTE, "f32[2,3,4]", "dims=[2,0,1]", "f32[4,2,3]"),
	C(ATEN_PERMUTE, "f32[2,3,4]", "dims=[-1,0,1]", "f32[4,2,3]"),
	C(ATEN_PERMUTE, "f32[2,3,4]", "dims=[0,0,1]", "!more than once"),
	C(ATEN_PERMUTE, "f32[2,3,4]", "dims=[0,1]", "!must list 3 dims"),
	C(ATEN_TRANSPOSE, "f32[2,3,N]", "dim0=0, dim1=-1", "f32[N,3,2]"),
	C(ATEN_T, "f32[2,3]", "", "f32[3,2]"),
	C(ATEN_T, "f32[5]", "", "f32[5]"),
	C(ATEN_T, "f32[2,3,4]", "", "!rank <= 2"),
	C(ATEN_EXPAND, "f32[3,1]", "size=[2,-1,4]", "f32[2,3,4]"),
	C(ATEN_EXPAND, "f32[N,1]", "size=[N,8]", "f32[N,8]"),
	C(ATEN_EXPAND, "f32[3]", "size=[2]", "!cannot expand"),
	C(ATEN_EXPAND, "f32[3]", "size=[-1,3]", "!-1 is not allowed for the new leading dim"),
	C(ATEN_UNSQUEEZE, "f32[2,3]", "dim=-1", "f32[2,3,1]"),
	C(ATEN_UNSQUEEZE, "f32[2,3]", "dim=0", "f32[1,2,3]"),
	C(ATEN_UNSQUEEZE, "f32[2,3]", "dim=3", "!out of range"),
	C(ATEN_SQUEEZE, "f32[1,3,1,N]", "", "f32[3,N]"),
	C(ATEN_SQUEEZE, "f32[1,3,1]", "dims=[0]", "f32[3,1]"),
	C(ATEN_SQUEEZE, "f32[1,3,1]", "dims=[1,-1]", "f32[1,3]"),
	C(ATEN_SLICE, "f32[10,4]", "dim=0, start=2, end=-1, step=3", "f32[3,4]"),
	C(ATEN_SLICE, "f32[10,4]", "start=-100, end=9223372036854775807", "f32[10,4]"),
	C(ATEN_SLICE, "f32[10,4]", "dim=1, start=5", "f32[10,0]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=1, start=2, end=6", "f32[N,4]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0", "f32[N,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, start=1", "f32[N-1,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, end=-1", "f32[N-1,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, step=2", "f32[(N+1)//2,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, start=-3", "f32[3,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, start=3, end=1", "f32[0,8]"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, start=-2, end=-5", "!has a negative length"),
	C(ATEN_SLICE, "f32[N,8]", "dim=0, end=N", "f32[N,8]"),
	C(ATEN_SLICE, "f32[10]", "step=0", "!step must be positive"),
	C(ATEN_CAT, "f32[2,3], f32[4,3]", "", "f32[6,3]"),
	C(ATEN_CAT, "f16[2,3], f32[2,1], f16[2,0]", "dim=-1", "f32[2,4]"),
	C(ATEN_CAT, "f32[N,3], f32[N,3]", "", "f32[N*2,3]"),
	C(ATEN_CAT, "f32[N,3], f32[2,3]", "", "f32[N+2,3]"),
	C(ATEN_CAT, "f32[N,3], f32[M,3], f32[N,3]", "", "f32[M+N*2,3]"),
	C(PRIMS_PAD, "f32[N,3]", "low=[1,0], high=[-3,0], value=0.0", "f32[N-2,3]"),
	C(ATEN_CAT, "f32[2,3], f32[2,4]", "", "!does not match operand 0"),
	C(ATEN_CAT, "f32[2,3], f32[3]", "", "!does not match operand 0"),
	C(ATEN_FLIP, "f32[2,3]", "dims=[0,-1]", "f32[2,3]"),
	C(ATEN_FLIP, "f32[2,3]", "dims=[1,-1]", "!more than once"),
	C(ATEN_CLONE, "i64[2,N]", "", "i64[2,N]"),
	C(ATEN_DETACH, "f32[2]", "", "f32[2]"),
	C(ATEN_ALIAS, "f32[2]", "", "f32[2]"),
	C(ATEN_FULL, "", "shape=[2,N], value=1.5", "f32[2,N]"),
	C(ATEN_FULL, "", "shape=[3], value=1", "i64[3]"),
	C(ATEN_FULL, "", "shape=[], value=true", "bool[]"),
	C(ATEN_FULL, "", "shape=[3], value=0, dtype=f16", "f16[3]"),
	C(ATEN_FULL, "", "shape=[4611686018427387904,4], value=0", "!overflows 64 bits"),
	C(ATEN_MUL, "f32[4294967296,1], f32[1,4294967296]", "", "!overflows 64 bits"),
	C(ATEN_RESHAPE, "f32[4294967296,N]", "shape=[-1]", "f32[N*4294967296]"),
	C(ATEN_ZEROS_LIKE, "i32[3]", "", "i32[3]"),
	C(ATEN_ONES_LIKE, "i32[3,N]", "dtype=f32", "f32[3,N]"),
	C(ATEN_FULL_LIKE, "i64[3]", "value=2.5", "i64[3]"),
	C(ATEN_NEW_ZEROS, "f16[2]", "shape=[3,4]", "f16[3,4]"),
	C(ATEN_NEW_ONES, "f16[2]", "shape=[N], dtype=i32", "i32[N]"),
	C(ATEN_NEW_FULL, "bf16[2]", "shape=[2], value=7", "bf16[2]"),
	C(ATEN_ARANGE, "", "end=10", "i64[10]"),
	C(ATEN_ARANGE, "", "start=0, end=1.0, step=0.25", "f32[4]"),
	C(ATEN_ARANGE, "", "start=10, end=0, step=-3", "i64[4]"),
	C(ATEN_ARANGE, "", "start=1, end=10, step=3", "i64[3]"),
	C(ATEN_ARANGE, "", "end=N", "i64[N]"),
	C(ATEN_ARANGE, "", "end=5, dtype=f16", "f16[5]"),
	C(ATEN_ARANGE, "", "end=5, step=0", "!step must be nonzero"),
	C(ATEN_ARANGE, "", "start=5, end=0", "!inconsistent with the step sign"),
	C(ATEN_CUMSUM, "i32[3,4]", "dim=1", "i64[3,4]"),
	C(ATEN_CUMSUM, "f16[3,4]", "dim=-1", "f16[3,4]"),
	C(ATEN_CUMSUM, "i32[3,4]", "dim=0, dtype=f32", "f32[3,4]"),

	/* ---- aten matrix ---- */
	C(ATEN_MM, "f32[2,3], f32[3,4]", "", "f32[2,4]"),
	C(ATEN_MM, "f32[2,3], f32[4,4]", "", "!cannot be multiplied"),
	C(ATEN_MM, "f32[2,3], f16[3,4]", "", "!the same dtype"),
	C(ATEN_BMM, "f32[B,2,3], f32[B,3,5]", "", "f32[B,2,5]"),
	C(ATEN_BMM, "f32[2,2,3], f32[4,3,5]", "", "!batch sizes"),
	C(ATEN_ADDMM, "f32[4], f32[2,3], f32[3,4]", "beta=0.5, alpha=2", "f32[2,4]"),
	C(ATEN_ADDMM, "f32[5], f32[2,3], f32[3,4]", "", "!shapes do not broadcast"),
	C(ATEN_MATMUL, "f32[3], f32[3]", "", "f32[]"),
	C(ATEN_MATMUL, "f32[3], f32[3,4]", "", "f32[4]"),
	C(ATEN_MATMUL, "f32[2,3], f32[3]", "", "f32[2]"),
	C(ATEN_MATMUL, "f32[2,3], f32[3,4]", "", "f32[2,4]"),
	C(ATEN_MATMUL, "f32[5,1,2,3], f32[4,3,6]", "", "f32[5,4,2,6]"),
	C(ATEN_MATMUL, "f32[3], f32[B,3,4]", "", "f32[B,4]"),
	C(ATEN_MATMUL, "f32[B,N,3], f32[3]", "", "f32[B,N]"),
	C(ATEN_MATMUL, "f32[B,N,K], f32[K,M]", "", "f32[B,N,M]"),
	C(ATEN_MATMUL, "f32[3], f32[4]", "", "!cannot be multiplied"),
	C(ATEN_MATMUL, "f32[], f32[4]", "", "!at least 1-d"),
	C(ATEN_LINEAR, "f32[N,1024], f32[4096,1024], f32[4096]", "", "f32[N,4096]"),
	C(ATEN_LINEAR, "f32[B,S,8], f32[4,8]", "", "f32[B,S,4]"),
	C(ATEN_LINEAR, "f32[B,8], f32[4,8], none", "", "f32[B,4]"),
	C(ATEN_LINEAR, "f32[B,8], f32[4,7]", "", "!input has 8 features but weight expects 7"),

	/* ---- aten indexing, random ---- */
	C(ATEN_EMBEDDING, "f32[100,64], i64[B,S]", "", "f32[B,S,64]"),
	C(ATEN_EMBEDDING, "f32[100,64], f32[B,S]", "", "!indices must be an i64 or i32 tensor, got f32"),
	C(ATEN_GATHER, "f32[4,5], i64[4,2]", "dim=1", "f32[4,2]"),
	C(ATEN_GATHER, "f32[4,5], i64[4]", "dim=1", "!index must have the rank of self"),
	C(ATEN_INDEX_SELECT, "f32[10,4], i32[3]", "dim=0", "f32[3,4]"),
	C(ATEN_INDEX_SELECT, "f32[10,4], i64[]", "dim=-1", "f32[10,1]"),
	C(ATEN_INDEX_SELECT, "f32[10,4], i64[2,2]", "dim=0", "!index must be 0-d or 1-d"),
	C(ATEN_SCATTER_ADD, "f32[4,5], i64[4,2], f32[4,2]", "dim=1", "f32[4,5]"),
	C(ATEN_INDEX_ADD, "f32[10,4], i64[3], f32[3,4]", "dim=0", "f32[10,4]"),
	C(ATEN_INDEX_ADD, "f32[10,4], i64[3], f32[2,4]", "dim=0", "!does not match self"),
	C(ATEN_NATIVE_DROPOUT, "f32[4,N], i64[], i64[]", "p=0.1", "f32[4,N], bool[4,N]"),
	C(ATEN_NATIVE_DROPOUT, "f32[4], i64[], i64[]", "p=1.5", "!p must be in [0, 1]"),
	C(ATEN_NATIVE_DROPOUT, "f32[4], i32[], i64[]", "p=0.5", "!seed must be an i64[] scalar"),

	/* ---- prims elementwise ---- */
	C(PRIMS_ABS, "i32[3]", "", "i32[3]"),
	C(PRIMS_NEG, "f32[3]", "", "f32[3]"),
	C(PRIMS_EXP, "f32[2,N]", "", "f32[2,N]"),
	C(PRIMS_EXP, "i32[3]", "", "!a must be a floating-point tensor, got i32"),
	C(PRIMS_EXP2, "f32[3]", "", "f32[3]"),
	C(PRIMS_EXPM1, "f32[3]", "", "f32[3]"),
	C(PRIMS_LOG, "f16[3]", "", "f16[3]"),
	C(PRIMS_LOG2, "f32[3]", "", "f32[3]"),
	C(PRIMS_LOG10, "f32[3]", "", "f32[3]"),
	C(PRIMS_LOG1P, "f32[3]", "", "f32[3]"),
	C(PRIMS_SQRT, "f32[3]", "", "f32[3]"),
	C(PRIMS_RSQRT, "f32[3]", "", "f32[3]"),
	C(PRIMS_RECIPROCAL, "f32[3]", "", "f32[3]"),
	C(PRIMS_SIN, "f32[3]", "", "f32[3]"),
	C(PRIMS_COS, "f32[3]", "", "f32[3]"),
	C(PRIMS_TAN, "f32[3]", "", "f32[3]"),
	C(PRIMS_TANH, "f32[3]", "", "f32[3]"),
	C(PRIMS_SINH, "f32[3]", "", "f32[3]"),
	C(PRIMS_COSH, "f32[3]", "", "f32[3]"),
	C(PRIMS_ASIN, "f32[3]", "", "f32[3]"),
	C(PRIMS_ACOS, "f32[3]", "", "f32[3]"),
	C(PRIMS_ATAN, "f32[3]", "", "f32[3]"),
	C(PRIMS_ASINH, "f32[3]", "", "f32[3]"),
	C(PRIMS_ACOSH, "f32[3]", "", "f32[3]"),
	C(PRIMS_ATANH, "f32[3]", "", "f32[3]"),
	C(PRIMS_ERF, "f32[3]", "", "f32[3]"),
	C(PRIMS_ERFC, "f32[3]", "", "f32[3]"),
	C(PRIMS_FLOOR, "f32[3]", "", "f32[3]"),
	C(PRIMS_CEIL, "f32[3]", "", "f32[3]"),
	C(PRIMS_ROUND, "f32[3]", "", "f32[3]"),
	C(PRIMS_TRUNC, "f32[3]", "", "f32[3]"),
	C(PRIMS_SIGN, "i64[3]", "", "i64[3]"),
	C(PRIMS_LOGICAL_NOT, "i64[3]", "", "bool[3]"),
	C(PRIMS_BITWISE_NOT, "i64[3]", "", "i64[3]"),
	C(PRIMS_BITWISE_NOT, "f32[3]", "", "!only integer and bool"),
	C(PRIMS_ISNAN, "f32[3]", "", "bool[3]"),
	C(PRIMS_ISINF, "f32[3]", "", "bool[3]"),
	C(PRIMS_ADD, "f32[2,3], f32[2,3]", "", "f32[2,3]"),
	C(PRIMS_ADD, "f32[2,3], f32[3]", "", "!identical shapes and dtypes"),
	C(PRIMS_ADD, "f32[3], f16[3]", "", "!identical shapes and dtypes"),
	C(PRIMS_SUB, "i32[3], i32[3]", "", "i32[3]"),
	C(PRIMS_MUL, "f32[N], f32[N]", "", "f32[N]"),
	C(PRIMS_DIV, "i32[3], i32[3]", "", "i32[3]"),
	C(PRIMS_POW, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_MAXIMUM, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_MINIMUM, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_ATAN2, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_ATAN2, "i32[3], i32[3]", "", "!floating-point"),
	C(PRIMS_FMOD, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_REMAINDER, "f32[3], f32[3]", "", "f32[3]"),
	C(PRIMS_EQ, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_NE, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_LT, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_LE, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_GT, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_GE, "f32[3], f32[3]", "", "bool[3]"),
	C(PRIMS_LOGICAL_AND, "bool[3], bool[3]", "", "bool[3]"),
	C(PRIMS_LOGICAL_OR, "bool[3], bool[3]", "", "bool[3]"),
	C(PRIMS_LOGICAL_XOR, "bool[3], bool[3]", "", "bool[3]"),
	C(PRIMS_BITWISE_AND, "i32[3], i32[3]", "", "i32[3]"),
	C(PRIMS_BITWISE_OR, "u8[3], u8[3]", "", "u8[3]"),
	C(PRIMS_BITWISE_XOR, "bool[3], bool[3]", "", "bool[3]"),
	C(PRIMS_WHERE, "bool[2], f32[2], f32[2]", "", "f32[2]"),
	C(PRIMS_WHERE, "bool[1], f32[2], f32[2]", "", "!pred must be a bool tensor of the operands' shape"),
	C(PRIMS_CONVERT_ELEMENT_TYPE, "f32[2,N]", "dtype=bf16", "bf16[2,N]"),

	/* ---- prims broadcast, reductions, layout ---- */
	C(PRIMS_BROADCAST_IN_DIM, "f32[N]", "shape=[N,4096], broadcast_dims=[0]", "f32[N,4096]"),
	C(PRIMS_BROADCAST_IN_DIM, "f32[1,3]", "shape=[2,5,3], broadcast_dims=[1,2]", "f32[2,5,3]"),
	C(PRIMS_BROADCAST_IN_DIM, "f32[4]", "shape=[4,3], broadcast_dims=[1]", "!does not broadcast"),
	C(PRIMS_SUM, "f32[2,3]", "dims=[1]", "f32[2]"),
	C(PRIMS_SUM, "i32[2,3]", "dims=[0,1]", "i32[]"),
	C(PRIMS_AMAX, "f32[N,4096]", "dims=[1]", "f32[N]"),
	C(PRIMS_AMIN, "f32[2,3]", "dims=[0]", "f32[3]"),
	C(PRIMS_PROD, "f32[2,3]", "dims=[]", "f32[2,3]"),
	C(PRIMS_VAR_MEAN, "f32[2,3]", "dims=[1], correction=1", "f32[2], f32[2]"),
	C(PRIMS_ARGMAX, "f32[2,3]", "dim=1", "i64[2]"),
	C(PRIMS_ARGMIN, "f32[2,3]", "dim=0", "i64[3]"),
	C(PRIMS_RESHAPE, "f32[N,4]", "shape=[N*4]", "f32[N*4]"),
	C(PRIMS_RESHAPE, "f32[N,4]", "shape=[-1]", "!negative size -1"),
	C(PRIMS_RESHAPE, "f32[6]", "shape=[2,2]", "!invalid for an input of 6 elements"),
	C(PRIMS_TRANSPOSE, "f32[2,3,N]", "perm=[2,0,1]", "f32[N,2,3]"),
	C(PRIMS_SQUEEZE, "f32[1,3]", "dims=[0]", "f32[3]"),
	C(PRIMS_SQUEEZE, "f32[1,3]", "dims=[1]", "!only dims of size 1 can be squeezed"),
	C(PRIMS_SLICE, "f32[10,N]", "start=[2,0], limit=[8,N], strides=[2,1]", "f32[3,N]"),
	C(PRIMS_SLICE, "f32[10]", "start=[2], limit=[12]", "!out of range"),
	C(PRIMS_CAT, "f32[2,3], f32[4,3]", "dim=0", "f32[6,3]"),
	C(PRIMS_CAT, "f32[2,3], f16[4,3]", "dim=0", "!the same dtype"),
	C(PRIMS_PAD, "f32[3,4]", "low=[1,0], high=[1,-1], value=0", "f32[5,3]"),
	C(PRIMS_REV, "f32[3,4]", "dims=[0]", "f32[3,4]"),
	C(PRIMS_CUMSUM, "i32[3,4]", "dim=0", "i32[3,4]"),
	C(PRIMS_FULL, "", "shape=[2,N], value=0, dtype=f32", "f32[2,N]"),
	C(PRIMS_IOTA, "", "length=5, dtype=i64", "i64[5]"),
	C(PRIMS_IOTA, "", "length=N, dtype=i32", "i32[N]"),
	C(PRIMS_RAND, "i64[], i64[]", "shape=[4,N], dtype=f32", "f32[4,N]"),
	C(PRIMS_RAND, "i64[], i64[]", "shape=[4], dtype=i32", "!floating-point dtype"),
	C(PRIMS_MATMUL, "f32[2,3], f32[3,4]", "", "f32[2,4]"),
	C(PRIMS_MATMUL, "bf16[B,2,3], bf16[B,3,4]", "", "bf16[B,2,4]"),
	C(PRIMS_MATMUL, "f32[3], f32[3]", "", "!2-d or batched 3-d"),
	C(PRIMS_TAKE, "f32[10,4], i64[2,3]", "dim=0", "f32[2,3,4]"),
	C(PRIMS_TAKE, "f32[10,4], i64[]", "dim=1", "f32[10]"),
	C(PRIMS_GATHER, "f32[4,5], i64[4,2]", "dim=1", "f32[4,2]"),
	C(PRIMS_SCATTER_ADD, "f32[4,5], i64[4,2], f32[4,2]", "dim=1", "f32[4,5]"),
	C(PRIMS_INDEX_ADD, "f32[10,4], i64[3], f32[3,4]", "dim=0", "f32[10,4]"),

	/* ---- fj_check_node ---- */
	C(ATEN_ADD, "f32[3], f32[3], f32[3]", "", "!aten.add: expected 2 operands, got 3"),
	C(ATEN_ADD, "f32[3]", "", "!aten.add: expected 2 operands, got 1"),
	C(ATEN_SUM, "f32[3]", "keepdim=1", "!aten.sum: attribute 'keepdim' expects a bool, got an int"),
	C(ATEN_SUM, "f32[3]", "keepdim=none", "!attribute 'keepdim' does not accept none"),
	C(ATEN_SUM, "f32[3]", "dims=[N]", "!attribute 'dims' expects a list of ints, got a symbolic size"),
	C(ATEN_SUM, "f32[3]", "dtype=none", "f32[]"),
	C(ATEN_ADD, "f32[3], f32[3]", "alpha=\"x\"", "!attribute 'alpha' expects a number, got a string"),
	C(ATEN_NATIVE_LAYER_NORM, "f32[4,8], none, none", "eps=1e-5", "!attribute 'normalized_shape' is required"),
	C(ATEN_NATIVE_LAYER_NORM, "f32[4,8]", "normalized_shape=[8], eps=1", "f32[4,8], f32[4,1], f32[4,1]"),
	C(ATEN_VIEW, "f32[4]", "shape=[-2,2]", "!attribute 'shape' has a negative size -2"),
	C(ATEN_FULL, "", "shape=[-1], value=0", "!attribute 'shape' has a negative size -1"),
	C(ATEN_MUL, "none, f32[3]", "", "!operand 0 ('self') is not optional"),
	C(PRIMS_ADD, "f32[], 1.0", "", "!a literal scalar may stand only for operands of pointwise aten ops"),
	C(ATEN_MM, "f32[2,3], 2", "", "!must be a tensor"),
	C(ATEN_CAT, "", "", "!aten.cat: expected at least 1 operands, got 0"),
	C(ATEN_LINEAR, "f32[2,3]", "", "!expected 2 to 3 operands, got 1"),
	C(PRIMS_FULL, "", "shape=[2], value=0", "!attribute 'dtype' is required"),
	C(PRIMS_CONVERT_ELEMENT_TYPE, "f32[2]", "dtype=\"f16\"", "!expects a dtype, got a string"),
	C(ATEN_NATIVE_LAYER_NORM_BACKWARD, "f32[4,8], f32[4,8], f32[4,1], f32[4,1]",
	  "normalized_shape=[8], output_mask=[true,1,true]", "!expects a list of bools, got an int at position 1"),
	C(ATEN_LEAKY_RELU, "f32[2]", "negative_slope=true", "f32[2]"),
	C(ATEN_SOFTPLUS, "f32[2]", "beta=[1]", "!expects a number, got a list"),
	C(ATEN_ARANGE, "", "end=N, step=2", "!a symbolic end needs start 0 and step 1"),
};

/* ---- the case notation ---- */

typedef struct rd {
	fj_module *m;
	fj_graph *g;
	const char *p;
	bool bad;
} rd;

static void ws(rd *r)
{
	while (*r->p == ' ')
		r->p++;
}

static bool eat(rd *r, char c)
{
	ws(r);
	if (*r->p != c)
		return false;
	r->p++;
	return true;
}

static size_t word(rd *r, const char **s)
{
	ws(r);
	*s = r->p;
	while (isalnum((unsigned char)*r->p) || *r->p == '_' || *r->p == '.' ||
	       ((*r->p == '-' || *r->p == '+') && (r->p == *s || r->p[-1] == 'e')))
		r->p++;
	return (size_t)(r->p - *s);
}

/* dim := term {'*' term} */
static fj_dim dim(rd *r)
{
	fj_dim d = 1;
	do {
		const char *s;
		size_t n = word(r, &s);
		fj_dim t;
		if (n && (isdigit((unsigned char)s[0]) || s[0] == '-'))
			t = strtoll(s, NULL, 10);
		else if (!n || fj_dim_symbol(r->m, s, n, &t) != FJ_OK)
			r->bad = true;
		if (!r->bad && !fj_dim_mul(r->m, d, t, &d))
			r->bad = true;
	} while (eat(r, '*'));
	return d;
}

static fj_type type(rd *r, const char *s, size_t n)
{
	fj_type t = {0};
	if (!fj_dtype_from_name(s, n, &t.dtype) || !eat(r, '[')) {
		r->bad = true;
		return t;
	}
	static fj_dim dims[FJ_MAX_RANK];
	if (!eat(r, ']')) {
		do
			dims[t.rank++] = dim(r);
		while (eat(r, ','));
		if (!eat(r, ']'))
			r->bad = true;
	}
	t.dims = dims;
	return t;
}

static fj_attr value(rd *r)
{
	ws(r);
	if (eat(r, '[')) {
		fj_attr items[16];
		uint32_t n = 0;
		if (!eat(r, ']')) {
			do
				items[n++] = value(r);
			while (eat(r, ',') && n < 16);
			if (!eat(r, ']'))
				r->bad = true;
		}
		return fj_attr_list(r->g, items, n);
	}
	if (eat(r, '"')) {
		char buf[64];
		size_t n = 0;
		while (*r->p && *r->p != '"' && n < sizeof buf - 1)
			buf[n++] = *r->p++;
		buf[n] = 0;
		if (!eat(r, '"'))
			r->bad = true;
		return fj_attr_str(r->g, buf);
	}
	const char *s;
	const char *save = r->p;
	size_t n = word(r, &s);
	fj_dtype dt;
	if (n == 4 && memcmp(s, "none", 4) == 0)
		return (fj_attr){.kind = FJ_AK_NONE};
	if ((n == 4 && memcmp(s, "true", 4) == 0) || (n == 5 && memcmp(s, "false", 5) == 0))
		return fj_attr_bool(s[0] == 't');
	if (fj_dtype_from_name(s, n, &dt))
		return fj_attr_dtype(dt);
	if (n && (isdigit((unsigned char)s[0]) || s[0] == '-') && *r->p != '*') {
		if (memchr(s, '.', n) || memchr(s, 'e', n))
			return fj_attr_float(strtod(s, NULL));
		return fj_attr_int(strtoll(s, NULL, 10));
	}
	r->p = save;
	fj_dim d = dim(r);
	return fj_dim_is_static(d) ? fj_attr_int(d) : (fj_attr){.kind = FJ_AK_DIM, .u.dim = d};
}

static void format_type(const fj_module *m, const fj_type *t, char *buf, size_t size)
{
	size_t len = (size_t)snprintf(buf, size, "%s[", fj_dtype_name(t->dtype));
	for (int k = 0; k < t->rank && len < size; k++) {
		if (k)
			len += (size_t)snprintf(buf + len, size - len, ",");
		if (len < size)
			len += (size_t)fj_dim_format(m, t->dims[k], buf + len, size - len);
	}
	if (len < size)
		snprintf(buf + len, size - len, "]");
}

static void strip_spaces(const char *s, char *out, size_t size)
{
	size_t n = 0;
	for (; *s && n + 1 < size; s++)
		if (*s != ' ')
			out[n++] = *s;
	out[n] = 0;
}

/* Runs one case in a fresh graph of m; returns NULL or a failure message. */
static const char *run_case(fj_module *m, const icase *c, int idx, char *msg, size_t size)
{
	fj_context *ctx = m->ctx;
	char gname[32];
	snprintf(gname, sizeof gname, "g%d", idx);
	fj_graph *g = fj_module_add_graph(m, gname, (fj_loc){0});
	ck_assert_ptr_nonnull(g);
	rd r = {m, g, c->in, false};
	fj_vid opnds[16];
	uint32_t nopnds = 0;
	ws(&r);
	while (*r.p) {
		const char *s;
		size_t n = word(&r, &s);
		if (n == 4 && memcmp(s, "none", 4) == 0) {
			opnds[nopnds] = FJ_NOVAL;
		} else if ((n == 4 && memcmp(s, "true", 4) == 0) || (n == 5 && memcmp(s, "false", 5) == 0)) {
			opnds[nopnds] = fj_graph_add_literal(g, (fj_literal){.kind = FJ_LIT_BOOL, .b = s[0] == 't'}, (fj_loc){0});
		} else if (n && (isdigit((unsigned char)s[0]) || s[0] == '-')) {
			bool fl = memchr(s, '.', n) != NULL;
			fj_literal lit = {.kind = fl ? FJ_LIT_FLOAT : FJ_LIT_INT};
			if (fl)
				lit.f = strtod(s, NULL);
			else
				lit.i = strtoll(s, NULL, 10);
			opnds[nopnds] = fj_graph_add_literal(g, lit, (fj_loc){0});
		} else {
			char pname[16];
			snprintf(pname, sizeof pname, "p%u", nopnds);
			fj_type t = type(&r, s, n);
			opnds[nopnds] = fj_graph_add_param(g, pname, t, (fj_loc){0});
		}
		nopnds++;
		if (!eat(&r, ','))
			break;
	}
	ck_assert_msg(!r.bad && !*r.p, "case %d: bad operands '%s'", idx, c->in);
	bool expect_err = c->out[0] == '!';
	char want[512];
	strip_spaces(c->out + expect_err, want, sizeof want);
	uint32_t nres = fj_op_info(ctx, c->op)->nresults;
	if (!expect_err) {
		nres = 1;
		int depth = 0;
		for (const char *q = want; *q; q++) {
			depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
			nres += *q == ',' && depth == 0;
		}
	}
	uint32_t node = fj_graph_add_node(g, c->op, opnds, nopnds, nres, NULL, NULL, (fj_loc){0});
	ck_assert_uint_ne(node, FJ_NONODE);
	r.p = c->attrs;
	ws(&r);
	while (*r.p) {
		const char *s;
		size_t n = word(&r, &s);
		char aname[32];
		snprintf(aname, sizeof aname, "%.*s", (int)n, s);
		fj_attr a = eat(&r, '=') ? value(&r) : fj_attr_bool(true);
		ck_assert_msg(fj_node_set_attr(g, node, aname, a) == FJ_OK, "case %d: %s", idx, fj_context_error(ctx));
		if (!eat(&r, ','))
			break;
	}
	ck_assert_msg(!r.bad && !*r.p, "case %d: bad attributes '%s'", idx, c->attrs);
	fj_type out[8];
	fj_status st = fj_check_node(g, node);
	if (st == FJ_OK)
		st = fj_infer_node(g, node, out);
	const char *opname = fj_op_name(c->op);
	if (expect_err) {
		if (st == FJ_OK) {
			snprintf(msg, size, "case %d (%s %s {%s}): expected an error '%s', got success", idx, opname,
			         c->in, c->attrs, want);
			return msg;
		}
		const char *e = fj_context_error(ctx);
		/* want has its spaces stripped; compare against a stripped message. */
		char got[1200];
		strip_spaces(e, got, sizeof got);
		if (!strstr(got, want) || !strstr(e, opname)) {
			snprintf(msg, size, "case %d (%s %s {%s}): expected an error with '%s', got '%s'", idx, opname,
			         c->in, c->attrs, c->out + 1, e);
			return msg;
		}
		return NULL;
	}
	if (st != FJ_OK) {
		snprintf(msg, size, "case %d (%s %s {%s}): unexpected error: %s", idx, opname, c->in, c->attrs,
		         fj_context_error(ctx));
		return msg;
	}
	char got[512] = "";
	size_t len = 0;
	for (uint32_t i = 0; i < nres; i++) {
		if (i)
			len += (size_t)snprintf(got + len, sizeof got - len, ",");
		format_type(m, &out[i], got + len, sizeof got - len);
		len = strlen(got);
		ck_assert(!out[i].weak);
	}
	if (strcmp(got, want) != 0) {
		snprintf(msg, size, "case %d (%s %s {%s}): expected %s, got %s", idx, opname, c->in, c->attrs, want, got);
		return msg;
	}
	return NULL;
}

START_TEST(test_infer_cases)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	char msg[2048];
	int failures = 0;
	for (size_t i = 0; i < FJ_ARRAY_LEN(cases); i++) {
		const char *f = run_case(m, &cases[i], (int)i, msg, sizeof msg);
		if (f) {
			fprintf(stderr, "%s\n", f);
			failures++;
		}
	}
	ck_assert_msg(failures == 0, "%d of %zu inference cases failed (see stderr)", failures, FJ_ARRAY_LEN(cases));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Every op has at least one successful inference case (fusion.kernel has its
 * own test below). */
START_TEST(test_infer_coverage)
{
	bool covered[FJ_OP_COUNT] = {false};
	for (size_t i = 0; i < FJ_ARRAY_LEN(cases); i++)
		if (cases[i].out[0] != '!')
			covered[cases[i].op] = true;
	covered[FJ_OP_FUSION_KERNEL] = true;
	int missing = 0;
	for (int op = 0; op < FJ_OP_COUNT; op++) {
		if (!covered[op]) {
			fprintf(stderr, "no inference case for %s\n", fj_op_name((fj_op)op));
			missing++;
		}
	}
	ck_assert_msg(missing == 0, "%d ops have no inference case", missing);
}
END_TEST

/* The op table: names, enum order, layers, flags and specs. */
START_TEST(test_op_table)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	int aten = 0, prims = 0;
	for (int op = 0; op < FJ_OP_COUNT; op++) {
		const fj_opinfo *oi = fj_op_info(ctx, (fj_op)op);
		fj_op back;
		ck_assert(fj_op_lookup(oi->name, strlen(oi->name), &back) && back == (fj_op)op);
		ck_assert_ptr_nonnull(oi->infer);
		aten += (oi->flags & FJ_OPF_ATEN) != 0;
		prims += (oi->flags & FJ_OPF_PRIMS) != 0;
		if (oi->flags & FJ_OPF_PRIMS) {
			/* opaque and random prims are never recomputable */
			if (oi->flags & (FJ_OPF_OPAQUE | FJ_OPF_RANDOM))
				ck_assert_msg(!(oi->flags & FJ_OPF_RECOMPUTABLE), "%s", oi->name);
			if (oi->flags & (FJ_OPF_POINTWISE | FJ_OPF_LAYOUT))
				ck_assert_msg(oi->flags & FJ_OPF_RECOMPUTABLE, "%s", oi->name);
		}
		for (int i = 0; i < oi->nattrs; i++) {
			ck_assert_msg(oi->attrs[i].required || oi->attrs[i].dflt.kind != FJ_AK_ABSENT, "%s", oi->name);
			if (oi->attrs[i].dflt.kind == FJ_AK_NONE && !oi->attrs[i].required)
				ck_assert_msg(oi->attrs[i].optional, "%s.%s: a none default needs '?'", oi->name, oi->attrs[i].name);
		}
	}
	ck_assert_int_ge(aten, 140);
	ck_assert_int_ge(prims, 80);
	fj_op op;
	ck_assert(fj_op_lookup("aten._softmax", 13, &op) && op == FJ_OP_ATEN__SOFTMAX);
	ck_assert(fj_op_lookup("prims.broadcast_in_dim", 22, &op) && op == FJ_OP_PRIMS_BROADCAST_IN_DIM);
	ck_assert(!fj_op_lookup("aten.add.Tensor", 15, &op));
	const fj_opinfo *oi = fj_op_info(ctx, FJ_OP_ATEN_VAR_MEAN);
	ck_assert_int_eq(oi->nresults, 2);
	ck_assert_str_eq(oi->results[0], "var");
	ck_assert(oi->flags & FJ_OPF_REDUCTION);
	oi = fj_op_info(ctx, FJ_OP_ATEN_GELU);
	ck_assert_str_eq(oi->attrs[0].dflt.u.s, "none");
	oi = fj_op_info(ctx, FJ_OP_ATEN_NLL_LOSS_FORWARD);
	ck_assert_int_eq(oi->attrs[1].dflt.u.i, -100);
	ck_assert(oi->operands[2].optional);
	oi = fj_op_info(ctx, FJ_OP_ATEN_NATIVE_LAYER_NORM);
	ck_assert_double_eq(oi->attrs[1].dflt.u.f, 1e-5);
	oi = fj_op_info(ctx, FJ_OP_PRIMS_RAND);
	ck_assert(oi->flags & FJ_OPF_RANDOM);
	ck_assert(oi->flags & FJ_OPF_SOURCE);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_fusion_kernel)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "main", (fj_loc){0});
	fj_dim n;
	ck_assert_int_eq(fj_dim_symbol(m, "N", 1, &n), FJ_OK);
	fj_dim d[2] = {n, 4096};
	fj_type t = {FJ_DT_F32, 2, false, d};
	fj_vid x = fj_graph_add_param(g, "x", t, (fj_loc){0});
	uint32_t k = fj_graph_add_node(g, FJ_OP_FUSION_KERNEL, &x, 1, 1, NULL, NULL, (fj_loc){0});
	fj_graph *body = fj_graph_create_body(g);
	ck_assert_ptr_nonnull(body);
	g->nodes[k].body = body;
	fj_vid bx = fj_graph_add_param(body, "x", t, (fj_loc){0});
	uint32_t e = fj_graph_add_node(body, FJ_OP_PRIMS_EXP, &bx, 1, 1, NULL, NULL, (fj_loc){0});
	fj_type out[2];
	ck_assert_int_eq(fj_check_node(body, e), FJ_OK);
	ck_assert_int_eq(fj_infer_node(body, e, out), FJ_OK);
	ck_assert(fj_graph_copy_type(body, &body->values[body->nodes[e].res[0]].type, &out[0]));
	ck_assert_int_eq(fj_graph_set_results(body, &body->nodes[e].res[0], 1), FJ_OK);
	ck_assert_int_eq(fj_check_node(g, k), FJ_OK);
	ck_assert_int_eq(fj_infer_node(g, k, out), FJ_OK);
	ck_assert(fj_type_equal(&out[0], &t));
	/* A kernel without a body, and a body yielding fewer values. */
	uint32_t k2 = fj_graph_add_node(g, FJ_OP_FUSION_KERNEL, &x, 1, 2, NULL, NULL, (fj_loc){0});
	ck_assert_int_ne(fj_infer_node(g, k2, out), FJ_OK);
	ck_assert(strstr(fj_context_error(ctx), "fusion.kernel: a fusion.kernel needs a body"));
	g->nodes[k2].body = body;
	ck_assert_int_ne(fj_infer_node(g, k2, out), FJ_OK);
	ck_assert(strstr(fj_context_error(ctx), "yields 1 values for 2 results"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Checks not reachable through the case notation: result counts, literal
 * scalars in non-pointwise ops, out-of-range values. */
START_TEST(test_check_node)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "main", (fj_loc){0});
	fj_dim d[1] = {4};
	fj_type t = {FJ_DT_F32, 1, false, d};
	fj_vid x = fj_graph_add_param(g, "x", t, (fj_loc){0});
	uint32_t n = fj_graph_add_node(g, FJ_OP_ATEN_VAR_MEAN, &x, 1, 1, NULL, NULL, (fj_loc){0});
	ck_assert_int_eq(fj_check_node(g, n), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "aten.var_mean: expected 2 results, got 1"));
	fj_vid bad[2] = {x, 12345};
	n = fj_graph_add_node(g, FJ_OP_ATEN_ADD, bad, 2, 1, NULL, NULL, (fj_loc){0});
	ck_assert_int_eq(fj_check_node(g, n), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "operand 1 is not a value of the graph"));
	/* The masked_fill value, where's operands and clamp's self may be literals. */
	fj_vid lit = fj_graph_add_literal(g, (fj_literal){.kind = FJ_LIT_FLOAT, .f = 1.0}, (fj_loc){0});
	fj_vid ops[3] = {x, x, lit};
	n = fj_graph_add_node(g, FJ_OP_ATEN_LERP, ops, 3, 1, NULL, NULL, (fj_loc){0});
	ck_assert_int_eq(fj_check_node(g, n), FJ_OK);
	n = fj_graph_add_node(g, FJ_OP_ATEN_SUM, &lit, 1, 1, NULL, NULL, (fj_loc){0});
	ck_assert_int_eq(fj_check_node(g, n), FJ_ERR_INVALID);
	ck_assert(strstr(fj_context_error(ctx), "aten.sum: operand 0 ('self') must be a tensor"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Inference and the check under a failing allocator: errors, never crashes or leaks. */
START_TEST(test_infer_alloc_failures)
{
	for (long fail = 1; fail < 400; fail += 7) {
		fj_test_alloc ta = {0, 0, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &ta);
		ck_assert_ptr_nonnull(ctx);
		ta.fail_at = ta.count + fail;
		fj_module *m = fj_module_create(ctx);
		if (m) {
			char msg[2048];
			fj_graph *g = fj_module_add_graph(m, "g", (fj_loc){0});
			if (g) {
				fj_dim d[2] = {8, 16};
				fj_type t = {FJ_DT_F32, 2, false, d};
				fj_vid x = fj_graph_add_param(g, "x", t, (fj_loc){0});
				if (x != FJ_NOVAL) {
					uint32_t n = fj_graph_add_node(g, FJ_OP_ATEN_MATMUL, (fj_vid[]){x, x}, 2, 1, NULL, NULL, (fj_loc){0});
					fj_type out[1];
					if (n != FJ_NONODE && fj_check_node(g, n) == FJ_OK)
						(void)fj_infer_node(g, n, out);
				}
			}
			(void)msg;
			fj_module_destroy(m);
		}
		fj_context_destroy(ctx);
		ck_assert_uint_eq(ta.live, 0);
	}
}
END_TEST

Suite *suite_infer(void)
{
	Suite *s = suite_create("infer");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_op_table);
	tcase_add_test(tc, test_infer_cases);
	tcase_add_test(tc, test_infer_coverage);
	tcase_add_test(tc, test_fusion_kernel);
	tcase_add_test(tc, test_check_node);
	tcase_add_test(tc, test_infer_alloc_failures);
	suite_add_tcase(s, tc);
	return s;
}
