/* cg.h -- the shared code generator: IR nodes/regions -> LLVM IR through the
 * LLVM C API, parameterised by target hooks (host now, NVPTX later).
 *
 * A code-generation session (fj_cg) owns one LLVM module in its own LLVM
 * context (each compilation gets a fresh context: LLVM contexts are not
 * thread-safe). Kernels are functions of that module; a backend then
 * optimises and compiles the module as a whole (one O3 + codegen run for all
 * the kernels of a graph).
 *
 * Host kernel ABI (the `aten` executor and the per-op `host` executor):
 *
 *   int32_t kernel(void *const *ptrs, const int64_t *dims, int64_t lo, int64_t hi);
 *
 *   ptrs  the node's operands' data, then its results' data (NULL for `none`
 *         and literal operands). Every tensor is dense and row-major.
 *   dims  the sizes of every operand (rank entries each; literals and `none`
 *         have rank 0), then of every result, concatenated; for a
 *         fusion.kernel, then the values of its extra symbols (region.h:
 *         sizes its body uses that no operand or result has), one each.
 *   lo,hi the part [lo, hi) of the kernel's parallel index space to run (see
 *         fj_cg_kernel.par_*); the aten executor runs [0, extent) at once,
 *         the host executor splits it over threads.
 *   returns 0, or an FJ_KERR_* code (an index out of range ...).
 *
 * Values inside emitters are "compute" values: floats as float/double (f16 and
 * bf16 computed as float and rounded once on store), integers as iN (u8 is i8
 * with unsigned semantics, tracked by the dtype the caller passes), bool as i1.
 */
#ifndef FJ_CG_H
#define FJ_CG_H

#include <llvm-c/Core.h>

#include "ir.h"

/* Error codes kernels return. */
enum {
	FJ_KERR_OK = 0,
	FJ_KERR_INDEX = 1,  /* an index out of range */
	FJ_KERR_VALUE = 2   /* an invalid value (e.g. a negative count) */
};

typedef struct fj_cg fj_cg;

/* Math functions that targets provide (host: libm or inline polynomials;
 * NVPTX: libdevice). Argument and result types are float or double. */
typedef enum fj_cg_math {
	FJ_MATH_EXP, FJ_MATH_EXP2, FJ_MATH_EXPM1, FJ_MATH_LOG, FJ_MATH_LOG2, FJ_MATH_LOG10,
	FJ_MATH_LOG1P, FJ_MATH_SIN, FJ_MATH_COS, FJ_MATH_TAN, FJ_MATH_TANH, FJ_MATH_SINH,
	FJ_MATH_COSH, FJ_MATH_ASIN, FJ_MATH_ACOS, FJ_MATH_ATAN, FJ_MATH_ASINH, FJ_MATH_ACOSH,
	FJ_MATH_ATANH, FJ_MATH_ERF, FJ_MATH_ERFC, FJ_MATH_POW, FJ_MATH_ATAN2, FJ_MATH_FMOD,
	FJ_MATH_COUNT
} fj_cg_math;

/* Target hooks. */
typedef struct fj_cg_target {
	const char *name; /* "host", "nvptx" */
	/* Emits math function fn on args (1 or 2) of type float or double. */
	LLVMValueRef (*math)(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args);
	/* ---- added for the region code generator (codegen/region.h); every
	 * field may be NULL / 0 (the host leaves the GPU ones NULL) ---- */
	/* Math inside fused regions (host: inline polynomials that vectorize,
	 * fj_cg_poly_math); NULL: `math`. */
	LLVMValueRef (*region_math)(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args);
	/* e^x inside fused regions for an x known to be <= 0 or NaN (a value
	 * minus its row's max), bit for bit region_math's exp there, cheaper;
	 * NULL, or a NULL result (a type it has no such form for): region_math's
	 * exp (fj_cg_exp_nonpos). */
	LLVMValueRef (*region_exp_nonpos)(fj_cg *cg, LLVMValueRef x);
	/* e^x inside fused regions where only c + e^x is used, |c| >= 1: bit
	 * for bit region_math's exp for x >= -86, cheaper, and e^-86 below (c +
	 * e^x rounds to c either way); NULL, or a NULL result: the caller's
	 * general exp (fj_cg_exp_addend). */
	LLVMValueRef (*region_exp_addend)(fj_cg *cg, LLVMValueRef x);
	/* GPU: i32 thread index, block index, block size, grid size on axis 0..2. */
	LLVMValueRef (*thread_idx)(fj_cg *cg, int axis);
	LLVMValueRef (*block_idx)(fj_cg *cg, int axis);
	LLVMValueRef (*block_dim)(fj_cg *cg, int axis);
	LLVMValueRef (*grid_dim)(fj_cg *cg, int axis);
	/* GPU: a barrier of the thread block (__syncthreads). */
	void (*barrier)(fj_cg *cg);
	/* GPU: butterfly shuffle within a warp: v from lane (lane ^ mask); v is
	 * i32, i64, f32 or f64. */
	LLVMValueRef (*shuffle_xor)(fj_cg *cg, LLVMValueRef v, int mask);
	/* GPU: a block-shared array of n elements of type elem (its pointer). */
	LLVMValueRef (*shared_array)(fj_cg *cg, LLVMTypeRef elem, uint64_t n, const char *name);
	/* GPU tensor cores: one warp-wide D = A * B + C of shape m16n8k16 (PTX
	 * mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}), A 16x16 row-major, B
	 * 16x8 column-major, f32 accumulation. Each lane passes its fragments in
	 * the PTX ISA layout (g = lane / 4, t = lane % 4): a[0..3] (i32, two
	 * f16/bf16 each, the lower column in the low half) = A[g][2t..],
	 * A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]; b[0..1] (i32) = B[2t..][g],
	 * B[2t+8..][g]; c[0..3] and d[0..3] (f32) = C[g][2t], C[g][2t+1],
	 * C[g+8][2t], C[g+8][2t+1]. All 32 lanes of the warp must call it
	 * together. bf16: the operands are bf16, else f16. NULL: no tensor cores. */
	void (*mma_m16n8k16)(fj_cg *cg, bool bf16, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef c[4],
	                     LLVMValueRef d[4]);
	int warp_size;      /* GPU: 32; host: 0 */
	int vector_bits;    /* host: the preferred vector register width (256 for AVX2); 0: unknown */
	/* host: stream large outputs with non-temporal stores: those of flat
	 * pointwise loops (region_host_pointwise.c: stream_split) and of the
	 * float matmul's epilogue (region_matmul.c: nt_plan) */
	bool stream;
	/* host x86: run the float matmul micro-kernels with MXCSR's DAZ and FTZ
	 * set (region_matmul.c: flush_begin) */
	bool matmul_flush;
	/* host: the float matmul's K block and its C tile in micro-panels
	 * (MC / MR, NC / NR) for vector_bits; 0: region_matmul.c's defaults */
	int matmul_kc, matmul_mc_panels, matmul_nc_panels;
	/* host: the N-tile width of a float matmul whose A is contiguous along
	 * M (region_matmul.c: plan, APANEL_NC); 0: region_matmul.c's default */
	int matmul_apanel_nc;
	/* host: the float matmul prefetches the next B micro-panel of a panel
	 * larger than L2 (region_matmul.c: prefetch_b) */
	bool matmul_prefetch_b;
} fj_cg_target;

struct fj_cg {
	fj_context *ctx;
	const fj_cg_target *target;
	LLVMContextRef llctx;
	LLVMModuleRef mod;
	LLVMBuilderRef b;
	LLVMTypeRef t_void, t_i1, t_i8, t_i16, t_i32, t_i64, t_f16, t_f32, t_f64, t_ptr;
	LLVMValueRef fn;          /* the function being emitted */
	LLVMBasicBlockRef entry;  /* its entry block (allocas go here) */
	bool stream;              /* the kernel streams its outputs (fj_cg_mark_stream) */
	fj_status st;             /* sticky: the first error */
};

/* Starts a session on module `mod` of context `llctx` (both owned by the
 * caller, typically a backend that created them for its target). */
void fj_cg_init(fj_cg *cg, fj_context *ctx, const fj_cg_target *t, LLVMContextRef llctx,
                LLVMModuleRef mod);
void fj_cg_dispose(fj_cg *cg); /* the builder only */
/* Records an error (once) and returns it. */
fj_status fj_cg_error(fj_cg *cg, fj_status st, const fj_node *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- types and constants ---- */
LLVMTypeRef fj_cg_storage_type(fj_cg *cg, fj_dtype dt); /* bf16 -> i16, bool -> i8 */
LLVMTypeRef fj_cg_compute_type(fj_cg *cg, fj_dtype dt); /* f16/bf16 -> float, bool -> i1 */
/* The dtype arithmetic on dt is done in: f16/bf16 -> f32, others unchanged. */
fj_dtype fj_cg_compute_dtype(fj_dtype dt);
LLVMValueRef fj_cg_i64(fj_cg *cg, int64_t v);
LLVMValueRef fj_cg_i32(fj_cg *cg, int32_t v);
/* A constant of dtype dt's compute type with value f (floats) or i (ints, bool). */
LLVMValueRef fj_cg_const(fj_cg *cg, fj_dtype dt, double f, int64_t i);
/* A call of intrinsic `name` (llvm.maximum, llvm.fma ...) overloaded on the
 * type of args[0]. */
LLVMValueRef fj_cg_intrinsic(fj_cg *cg, const char *name, LLVMValueRef *args, unsigned nargs);
/* A literal scalar converted to dtype `to`'s compute type (PyTorch rules). */
LLVMValueRef fj_cg_literal(fj_cg *cg, const fj_literal *lit, fj_dtype to);
/* The scalar an int, bool or float attribute holds (a full's or pad's
 * `value`), as a literal. */
fj_literal fj_cg_attr_literal(const fj_attr *a);
/* Converts a compute value from dtype `from` to dtype `to` (PyTorch/C
 * semantics: float->int truncates, saturating; anything->bool is != 0). */
LLVMValueRef fj_cg_convert(fj_cg *cg, LLVMValueRef v, fj_dtype from, fj_dtype to);

/* ---- tensors ---- */
typedef struct fj_cg_tensor {
	LLVMValueRef ptr;                   /* base pointer */
	fj_dtype dtype;
	int rank;
	LLVMValueRef dim[FJ_MAX_RANK];      /* i64 sizes */
	LLVMValueRef stride[FJ_MAX_RANK];   /* i64 element strides (row-major dense) */
	LLVMValueRef numel;                 /* i64 */
	bool stream;                        /* fj_cg_store's stores are streamed (fj_cg_stream_stores) */
} fj_cg_tensor;

/* Loads element `offset` (i64, in elements) as a compute value. */
LLVMValueRef fj_cg_load(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset);
/* Stores compute value v (of t's dtype's compute type) at `offset`, rounding
 * f16/bf16 to nearest even. */
void fj_cg_store(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset, LLVMValueRef v);
/* A stored element (of fj_cg_storage_type) as its compute value, and back
 * (f16/bf16 rounded to nearest even): what fj_cg_load / fj_cg_store do
 * around the memory access, for templates that load or store vectors. */
LLVMValueRef fj_cg_from_storage(fj_cg *cg, fj_dtype dt, LLVMValueRef v);
LLVMValueRef fj_cg_to_storage(fj_cg *cg, fj_dtype dt, LLVMValueRef v);
/* Where fj_cg_prefetch puts a line (llvm.prefetch's locality). */
typedef enum { FJ_CG_PREFETCH_L2 = 2, FJ_CG_PREFETCH_L1 = 3 } fj_cg_prefetch_level;
/* A hint: fetch the cache line of t's element at `offset` for reading (any
 * offset, even past t: a prefetch never faults) into cache level `level`. */
void fj_cg_prefetch(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef offset, fj_cg_prefetch_level level);
/* Tells LLVM that base + bytes (i64) is `align`-byte aligned (llvm.assume's
 * "align" bundle, on base itself: LLVM's alignment-from-assumptions pass
 * looks at the accesses through the pointer named there); the vector
 * accesses it dominates at base + bytes + multiples of `align` get that
 * alignment after vectorisation. */
void fj_cg_assume_aligned(fj_cg *cg, LLVMValueRef base, LLVMValueRef bytes, int64_t align);
/* Marks the kernel being emitted as streaming (fj_cg_emit_node_kernel
 * gives its function attribute FJ_CG_STREAM): after optimisation,
 * fj_cg_stream_stores makes every vector store of it that is aligned to its
 * size non-temporal, so a kernel marks itself only when all such stores are
 * to the outputs it streams. A plain store to a line not in cache
 * first reads it (read for ownership), so a kernel that reads x and writes
 * y moves 3 bytes for every 2 it needs; a non-temporal store does not. The
 * loop vectoriser cannot do this itself: it leaves a loop with
 * !nontemporal scalar stores unvectorised unless it can prove their vector
 * alignment (LLVM 19), which the scalar loop cannot show. The kernel must
 * fence after its streamed stores (they are weakly ordered). */
#define FJ_CG_STREAM "fj-stream"
/* Marks one store for fj_cg_stream_stores, in any kernel: made
 * non-temporal after optimisation where the vector store it becomes is
 * aligned to its size (fj_cg_assume_aligned), and so is every other
 * tagged store of its basic block. A line written partly by non-temporal
 * and partly by plain stores ran 7x slower than one written plainly (an
 * f16 row kernel, Emerald Rapids), and the optimiser may leave one
 * vector store of an unrolled group at its element alignment. Nor may
 * another block (a remainder loop) write part of a line that a streamed
 * block writes: the row kernels tag only 4-byte elements in loops of a
 * constant trip count, whole lines a vector iteration. The mark is
 * a TBAA access tag under a root of its own, which only ever tells alias
 * analysis "may alias"; the loop vectoriser carries it to the vector
 * store. */
void fj_cg_tag_stream(fj_cg *cg, LLVMValueRef store);
/* Marks store instruction `store` !nontemporal. */
void fj_cg_set_nontemporal(LLVMValueRef store);
/* Copies `bytes` bytes (an i64 >= 0) from src, a 64-byte aligned buffer, to
 * dst at any address (a row buffer streamed out): the 64-byte lines of dst
 * that the copy fills whole with non-temporal stores, the bytes in the
 * partial lines at either end, which it shares with its neighbours, with
 * memcpy (plain stores: a line is then never written by a non-temporal and
 * a plain store at once, whichever thread writes the neighbour). The caller
 * fences before its kernel returns. */
void fj_cg_stream_copy(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef bytes);
/* The same for `lines` whole 64-byte lines (an i64), src and dst both
 * 64-byte aligned: no partial lines, no memcpy (a call in the matmul's tile
 * loop cost it 1.6 %: Emerald Rapids, the weight gradients, one thread,
 * alternating runs). */
void fj_cg_stream_lines(fj_cg *cg, LLVMValueRef dst, LLVMValueRef src, LLVMValueRef lines);
void fj_cg_mark_stream(fj_cg *cg);
/* Makes the aligned vector stores of mod's kernels marked by
 * fj_cg_mark_stream, and those tagged by fj_cg_tag_stream (as it says),
 * non-temporal. */
void fj_cg_stream_stores(LLVMModuleRef mod);
/* sum(idx[k] * stride[k]) over t's rank. */
LLVMValueRef fj_cg_offset(fj_cg *cg, const fj_cg_tensor *t, const LLVMValueRef *idx);
/* Offset in t of the element that broadcasts (NumPy rules, aligned right) to
 * index idx of a tensor of rank `rank`; size-1 dims of t read index 0. */
LLVMValueRef fj_cg_bcast_offset(fj_cg *cg, const fj_cg_tensor *t, const LLVMValueRef *idx, int rank);
/* Splits a linear index over dims[0..n) (row-major) into idx[0..n). */
void fj_cg_unravel(fj_cg *cg, LLVMValueRef linear, const LLVMValueRef *dims, int n, LLVMValueRef *idx);

/* ---- control flow ---- */
typedef struct fj_cg_loop {
	LLVMValueRef iv;   /* i64 induction variable, valid in the body */
	LLVMValueRef phi;
	LLVMValueRef hi, step;
	LLVMBasicBlockRef head, body, latch, exit;
} fj_cg_loop;

/* for (iv = lo; iv < hi; iv += 1) { ... }: begin leaves the builder in the
 * body; end closes it and leaves the builder after the loop. */
void fj_cg_loop_begin(fj_cg *cg, fj_cg_loop *l, LLVMValueRef lo, LLVMValueRef hi, const char *name);
void fj_cg_loop_end(fj_cg *cg, fj_cg_loop *l);
/* A loop property !{name} (value NULL) or !{name, value}, for fj_cg_loop_md. */
LLVMMetadataRef fj_cg_loop_prop(fj_cg *cg, const char *name, LLVMValueRef value);
/* Sets the !llvm.loop of br (a loop's latch branch) to a distinct loop id
 * holding props[0..n), n < 8. */
void fj_cg_loop_md(fj_cg *cg, LLVMValueRef br, const LLVMMetadataRef *props, unsigned n);
/* Hints for LLVM's loop vectoriser on a closed loop: a vector width (< 2:
 * its cost model's choice) and an interleave count (< 2: its choice; else
 * that many vector iterations side by side, and no unrolling after). */
void fj_cg_loop_hints(fj_cg *cg, fj_cg_loop *l, int width, int interleave);
/* Marks loop l "do not vectorise" (llvm.loop.vectorize.enable false): strided
 * stores, which would become scatters. */
void fj_cg_loop_no_vectorize(fj_cg *cg, fj_cg_loop *l);
/* Unrolls closed loop l `count` times (llvm.loop.unroll.count). */
void fj_cg_loop_unroll(fj_cg *cg, fj_cg_loop *l, int count);

/* The interleave of the host loops that evaluate a region per element
 * (stores, row reductions; a matmul's epilogue takes two, region_matmul.c):
 * four independent copies of the vector body side by side. The polynomial
 * math is a long dependent chain (tanh, exp: ~20 steps of 3-4 cycles); with
 * one copy, an out-of-order core's window fills with steps waiting on their
 * operands and the units idle (llvm-mca on Zen 3: the chain benchmark's loop 73% bound by
 * register dependencies, 1.3 instructions a cycle). Reductions get as many
 * partial accumulators. */
enum { FJ_CG_INTERLEAVE = 4 };

/* if (cond) { ... } [else { ... }] */
typedef struct fj_cg_if {
	LLVMBasicBlockRef then_bb, else_bb, join_bb;
} fj_cg_if;
void fj_cg_if_begin(fj_cg *cg, fj_cg_if *c, LLVMValueRef cond);
void fj_cg_if_else(fj_cg *cg, fj_cg_if *c);
void fj_cg_if_end(fj_cg *cg, fj_cg_if *c);
/* A mutable local (an alloca in the entry block; SROA makes it a register). */
LLVMValueRef fj_cg_var(fj_cg *cg, LLVMTypeRef ty, LLVMValueRef init, const char *name);
LLVMValueRef fj_cg_get(fj_cg *cg, LLVMValueRef var, LLVMTypeRef ty);
void fj_cg_set(fj_cg *cg, LLVMValueRef var, LLVMValueRef v);

/* ---- element loops over a kernel's result (defined after fj_cg_kernel) ---- */
struct fj_cg_kernel;
/* Called for each element of the result: idx[0..rank) its index. */
typedef void (*fj_cg_elem_fn)(fj_cg *cg, struct fj_cg_kernel *k, void *ud, const LLVMValueRef *idx);
/* Emits the loop nest over result `out` of kernel k and calls body for each
 * element. The parallel space (k->par_out/par_mask, set here) is the result's
 * leading dims (rank >= 2; the last dim is the inner, vectorisable loop), its
 * only dim (rank 1), or nothing (rank 0). */
void fj_cg_for_each(fj_cg *cg, struct fj_cg_kernel *k, uint32_t out, fj_cg_elem_fn body, void *ud);

/* ---- scalar math ---- */
/* The scalar computation of a pointwise op (aten.* pointwise ops, prims.*
 * elementwise ops and the pointwise *_backward ops) on compute values args
 * (one per tensor operand, already converted to dtype `dt`, the op's
 * computation dtype), reading the node's attributes. Returns the result as a
 * compute value of the node's result dtype. Keyed by op in a table; NULL
 * when the op has no scalar lowering. */
typedef LLVMValueRef (*fj_cg_scalar_fn)(fj_cg *cg, const fj_graph *g, const fj_node *n,
                                        LLVMValueRef *args, fj_dtype dt);
fj_cg_scalar_fn fj_cg_scalar_lowering(fj_op op);
/* The dtype a pointwise node computes in (its promoted operand dtype in
 * compute form, e.g. f32 for f16 inputs; f32 for int inputs of float ops). */
fj_dtype fj_cg_pointwise_dtype(const fj_graph *g, const fj_node *n);
/* Math through the target hook, for float/double values. */
LLVMValueRef fj_cg_math1(fj_cg *cg, fj_cg_math fn, LLVMValueRef x);
LLVMValueRef fj_cg_math2(fj_cg *cg, fj_cg_math fn, LLVMValueRef x, LLVMValueRef y);
/* e^x for an x that is <= 0 or NaN at every point (fj_cg_target's
 * region_exp_nonpos, else FJ_MATH_EXP). */
LLVMValueRef fj_cg_exp_nonpos(fj_cg *cg, LLVMValueRef x);
/* e^x where only c + e^x is used, |c| >= 1 (fj_cg_target's region_exp_addend),
 * or NULL: the target has no such form for x's type. */
LLVMValueRef fj_cg_exp_addend(fj_cg *cg, LLVMValueRef x);
/* The libm name of math function fn ("expf" or "exp" when dbl), for the
 * targets that JIT for the host (the host backend and the NVPTX emulator). */
const char *fj_cg_libm_name(fj_cg_math fn, bool dbl);
/* LLVM's native target and asm printer, initialised once per process (under
 * pthread_once, shared by every host-JIT user); false when LLVM lacks them. */
bool fj_cg_native_init(void);
/* Inline polynomial math (codegen/math_poly.c) for float (f32) arguments,
 * scalar or vector, a few ulp, no calls (so loops vectorize); NULL when no
 * polynomial exists for fn or the type (f64 is left to the target's libm). */
LLVMValueRef fj_cg_poly_math(fj_cg *cg, fj_cg_math fn, LLVMValueRef *args);
/* Its exp for an x known to be <= 0 or NaN (fj_cg_target's
 * region_exp_nonpos); NULL unless x is f32. */
LLVMValueRef fj_cg_poly_exp_nonpos(fj_cg *cg, LLVMValueRef x);
/* Its exp where only c + e^x is used, |c| >= 1 (fj_cg_target's
 * region_exp_addend); NULL unless x is f32. */
LLVMValueRef fj_cg_poly_exp_addend(fj_cg *cg, LLVMValueRef x);
/* After optimisation, for a host with AVX-512: the polynomial exp's
 * vectorised scaling by 2^n (two multiplies by powers of 2 made with
 * integer ops) becomes one vscalefps, the same bits; on 8- and 4-float
 * vectors too when vl (AVX512VL). */
void fj_cg_poly_scalef(LLVMModuleRef mod, bool vl);

/* ---- kernels ---- */
typedef struct fj_cg_operand {
	bool none;               /* `none` */
	bool literal;            /* a literal scalar: lit is set, t.rank == 0, t.ptr NULL */
	fj_literal lit;
	fj_cg_tensor t;
} fj_cg_operand;

/* One per-node kernel being emitted. The emitter reads in/out and lo/hi and
 * sets the parallel index space: extent = product of the sizes of result
 * par_out at the dims in par_mask (mask 0: extent 1, one call does it all).
 * Calls for disjoint parts of [0, extent) must write disjoint outputs. */
typedef struct fj_cg_kernel {
	const fj_graph *g;
	const fj_node *node;
	uint32_t nin, nout;
	fj_cg_operand *in;
	fj_cg_tensor *out;
	LLVMValueRef lo, hi;      /* i64 */
	LLVMValueRef status;      /* i32 variable the kernel returns (FJ_KERR_*) */
	uint32_t par_out;
	uint32_t par_mask;        /* dims, and FJ_CG_PAR_PER_THREAD */
} fj_cg_kernel;

/* par_mask flag: one call per thread. A call of the kernel sets up state it
 * reuses across its range (the packed GEMM's B panel and buffers): more,
 * smaller calls would set it up again (the runtime otherwise cuts the space
 * into 4 chunks per thread for balance). */
#define FJ_CG_PAR_PER_THREAD (1u << 31)

/* ---- the kernel ABI (codegen/kernel_abi.c): views, dims, parameter
 * attributes, shared by the host kernels, the host region kernels and the
 * GPU entries ---- */

/* Adds enum attribute `name` (value val: bytes for "align", else 0) at
 * attribute index idx of function f (LLVMAttributeFunctionIndex, or
 * parameter i + 1). */
void fj_cg_add_attr(fj_cg *cg, LLVMValueRef f, int idx, const char *name, uint64_t val);
/* base[i] of type ty (an argument array: an 8-aligned load named name). */
LLVMValueRef fj_cg_load_at(fj_cg *cg, LLVMTypeRef ty, LLVMValueRef base, int64_t i, const char *name);
/* A dense row-major view of `rank` sizes read from dims[*di...] (*di
 * advances past them). */
void fj_cg_make_view(fj_cg *cg, fj_cg_tensor *t, LLVMValueRef ptr, fj_dtype dt, int rank, LLVMValueRef dims,
                     int64_t *di);
/* The data pointer of node operand i (i >= nopnds: result i - nopnds). */
typedef LLVMValueRef (*fj_cg_ptr_fn)(fj_cg *cg, void *ud, uint32_t i);
/* An fj_cg_ptr_fn: parameter i of function fn (the pointers as parameters). */
LLVMValueRef fj_cg_param_ptr(fj_cg *cg, void *fn, uint32_t i);
/* The views of node n's operands (in: `none` and literal operands marked,
 * the others viewed) and results (out), their sizes read from dims[*di...]
 * in ABI order; ptr_of is asked for each viewed operand's and result's
 * pointer, in that order. */
void fj_cg_node_views(fj_cg *cg, const fj_graph *g, const fj_node *n, LLVMValueRef dims, fj_cg_ptr_fn ptr_of,
                      void *ud, fj_cg_operand *in, fj_cg_tensor *out, int64_t *di);

typedef fj_status (*fj_cg_emit_fn)(fj_cg *cg, fj_cg_kernel *k);
/* The per-node kernel emitter of an op (the reference executor's lowering),
 * or NULL. Keyed by op in one table (codegen/kernel.c). */
fj_cg_emit_fn fj_cg_node_emitter(fj_op op);

/* Emits the kernel of node `node` of g as function `name` with the host
 * kernel ABI into cg's module. Fills par_out/par_mask. */
fj_status fj_cg_emit_node_kernel(fj_cg *cg, const fj_graph *g, uint32_t node, const char *name,
                                 uint32_t *par_out, uint32_t *par_mask);
/* A canonical description of everything a node's kernel depends on (op,
 * attributes, literal values, operand and result dtypes and ranks; not the
 * sizes, which are run-time arguments), for the kernel cache. Appended to b. */
void fj_cg_node_key(fj_buf *b, const fj_graph *g, uint32_t node);
uint64_t fj_hash64(const void *data, size_t n);

#endif
