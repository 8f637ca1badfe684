/* region.h -- the shared region code generator: one fusion.kernel (a body
 * graph of prims with a {schedule=...}) -> one kernel, for every target.
 *
 * Design. Code generation of a region is split in three layers:
 *
 *   1. ANALYSIS (fj_rg_analyze; target-independent, no LLVM): the region's
 *      schedule, its iteration space and, per body value, in which space it
 *      lives:
 *        D    the domain: the shape of the operand of the region's reductions
 *             (all of them reduce the same dims K of a D-shaped operand, fuse's
 *             rule L2), or, without reductions, the shape of result 0 (for
 *             matmul/take/gather/scatter/scan: of the opaque op's result);
 *        R    D without the dims K (the reduced space; "rows");
 *      every value is classified: an input (a region operand), a literal,
 *      FULL (computed at points of its own shape from the inputs only; D-shaped
 *      values and "inline" values of other shapes, e.g. a broadcast weight or
 *      a slice of an input, are both FULL: they are computed where used),
 *      ROW (depends on a reduction result: valid only at the current point
 *      of R, e.g. rstd), REDUCTION (a result of a reduction node) or OPAQUE
 *      (the result of the region's matmul/take/gather/scatter/cumsum node).
 *      The analysis also finds, for every symbolic size used in the body,
 *      where it can be read at run time (an operand's or a result's dim, or
 *      else, an extra entry of the kernel's dims array).
 *
 *   2. EVALUATOR (fj_rg_eval; target-independent LLVM IR): the scalar value
 *      of any body value at a point (a multi-index over the value's shape, or
 *      its row-major linear index, or both). Elementwise prims go through
 *      fj_cg_scalar_lowering; layout prims are index maps (broadcast_in_dim,
 *      reshape: linear index kept, common leading/trailing dims passed
 *      through; transpose; squeeze; slice; rev; pad and cat: clamped reads and
 *      a select, so no read is ever out of bounds); sources (full, iota, rand:
 *      Philox-4x32-10 exactly as codegen/emit_random.c); region operands are
 *      loads. Results are memoised per (value, point) in scopes (push before
 *      a loop body or branch, pop after), so shared subexpressions are
 *      emitted once per point. Values the template computes itself --
 *      reduction results, the current matmul accumulator, ... -- are bound
 *      with fj_rg_bind and returned as they are, whatever the point (the
 *      template guarantees that the point is the current row / element).
 *      The evaluator creates NO control flow: it can be called anywhere.
 *
 *   3. TEMPLATES (per target): loop nests for each schedule that call the
 *      evaluator. The host templates are in codegen/region_host.c
 *      (fj_cg_emit_region_host, the host kernel ABI of cg.h). A GPU backend
 *      writes its own templates on the same analysis and evaluator, using the
 *      target hooks of fj_cg_target (thread ids, barriers, shuffles, shared
 *      memory); the accumulator helpers below (fj_rg_acc_*) give every
 *      reduction kind's identity, step, merge (for shuffles / shared-memory
 *      trees) and finish (var from Welford's M2, mean, argmax index ...).
 *
 * Operands and results: body->params[i] is node operand i (the same value,
 * under its outer name); body->results[j] is node result j. A literal
 * operand of the fusion.kernel is read as a literal.
 *
 * Numerics: f16/bf16 values are computed in f32 and rounded to their dtype
 * where a body value has that dtype (as if stored); float reductions
 * accumulate in f64 (sum, prod, mean/var through Welford in f64), integers
 * in i64, as the reference executor does.
 * (The host's row templates sum f32 data in f32 over blocks of 512
 * elements, each block added to the f64 state: fj_rg_acc with acc_dt F32
 * works for sum and var_mean -- its identity, shift and steps follow
 * acc_dt; added in region-5.)
 *
 * Stability: this header is shared with the NVPTX backend. Additions only;
 * changes are noted here. (Extra symbols, fj_rg_begin_dims: a region may
 * use a size that none of its operands and results has; the kernel ABIs
 * pass it at the end of the dims array.)
 */
#ifndef FJ_REGION_H
#define FJ_REGION_H

#include "codegen/cg.h"

/* The generator's version: part of every fusion.kernel's kernel key (and so
 * of its disk-cache entry); bump it when the generated code changes. */
#define FJ_RG_VERSION "region-17" /* region-7: persistent_inner_outer; region-8: result spaces, row cache per point;
                                   * region-9: the region plan's column-slot layout on the host;
                                   * region-10: PTX pointer parameters declare .ptr .global .align;
                                   * region-11: the attention schedule (host flash attention);
                                   * region-12: the attention_bw schedule;
                                   * region-13: the host's persistent_inner_outer rows in pairs;
                                   * region-14: attention_bw without the first stage where a mask drops it;
                                   * region-15: host matmul 6 x 4 at KC 512 with AVX-512, B packed k by k;
                                   * region-16: host matmul reads a row-major A in place (a_direct);
                                   * region-17: GPU _reg8 rows at 2 blocks per SM, host pack_a_panels
                                   * k loop scalar */

/* ---- schedules (IR.md §4) ---- */
typedef enum fj_rg_schedule {
	FJ_RG_POINTWISE,
	FJ_RG_REDUCTION_INNER,
	FJ_RG_REDUCTION_OUTER,
	FJ_RG_PERSISTENT_INNER,
	FJ_RG_PERSISTENT_OUTER,
	FJ_RG_TRANSPOSE,
	FJ_RG_SCAN,
	FJ_RG_MATMUL,
	FJ_RG_TAKE,
	FJ_RG_GATHER,
	FJ_RG_SCATTER,
	FJ_RG_PERSISTENT_INNER_OUTER, /* persistent_inner plus column sums (outer reductions) */
	FJ_RG_ATTENTION, /* softmax(f(Q K)) V (ir/attention.c): the host's flash kernel */
	FJ_RG_ATTENTION_BW, /* its backward, weights recomputed (fj_attn_bw_match): the host's kernel */
	FJ_RG_SCHED_COUNT
} fj_rg_schedule;

/* The schedule named s ("pointwise" ...); false when unknown. */
bool fj_rg_schedule_from_name(const char *s, fj_rg_schedule *out);
const char *fj_rg_schedule_name(fj_rg_schedule s);

/* ---- analysis ---- */

typedef enum fj_rg_class {
	FJ_RG_INPUT,     /* a body parameter: region operand `index` */
	FJ_RG_LITERAL,   /* a literal scalar */
	FJ_RG_FULL,      /* computed from inputs only, at any point of its shape */
	FJ_RG_ROW,       /* depends on a reduction result: at the current row only */
	FJ_RG_REDUCTION, /* a result of a reduction node (bound by the template) */
	FJ_RG_OPAQUE,    /* the result of the opaque / scan node (template) */
	FJ_RG_COL        /* persistent_inner_outer: depends on an outer reduction's
	                  * result: at the current column only (after the merge) */
} fj_rg_class;

/* Where a template stores a result (fj_rg_value.space): at the points of D
 * (every region without reductions), at the rows R (a value of R's element
 * count: a reduction's result, or an order-preserving reshape of one; its
 * element at R-linear index i is row i's), or, persistent_inner_outer, at
 * the columns C. Decided once by the analysis for every template. */
typedef enum fj_rg_space { FJ_RG_SPACE_D, FJ_RG_SPACE_R, FJ_RG_SPACE_C } fj_rg_space;

typedef struct fj_rg_value {
	uint8_t cls;        /* fj_rg_class */
	bool in_d;          /* has the shape of D (dims equal) */
	bool in_r;          /* has the shape of R (dims equal) */
	bool in_c;          /* persistent_inner_outer: has the shape of C (the K dims of D) */
	uint8_t space;      /* a yielded value: fj_rg_space (FJ_RG_SPACE_D for the others) */
	int32_t index;      /* FJ_RG_INPUT: operand index; else -1 */
	int32_t result;     /* the first node result it is yielded as, or -1 */
	uint32_t node;      /* defining node (body index), FJ_NONODE for params/literals */
	uint32_t nuses;     /* uses inside the body (yields included) */
} fj_rg_value;

/* Where a symbol's value is read at run time: dim `dim` of operand `index`
 * (is_result false) or of result `index`. That dim's size expression is
 * coef * sym * (other symbols); the value is the run-time size divided by
 * coef and by the other symbols, which earlier entries bind. */
typedef struct fj_rg_symsrc {
	uint32_t sym;
	bool is_result;
	uint32_t index;
	int dim;
} fj_rg_symsrc;

#define FJ_RG_MAX_REDS FJ_MAX_KERNEL_REDUCTIONS

typedef struct fj_rg_analysis {
	fj_context *ctx;
	const fj_graph *g;      /* the graph holding the fusion.kernel */
	const fj_node *node;    /* the fusion.kernel */
	const fj_graph *body;
	fj_rg_schedule sched;
	fj_rg_value *vals;      /* per body value (body->nvalues) */
	/* iteration space */
	const fj_type *dom;     /* D (a body value's type) */
	fj_vid dom_v;           /* a body value of type D (for sizes and linear indexes over D) */
	uint32_t kmask;         /* the reduced dims K of D (0 without reductions) */
	int rrank;              /* rank of R = rank of D - popcount(kmask) */
	uint32_t reds[FJ_RG_MAX_REDS]; /* reduction nodes, in body order */
	int nreds;
	uint8_t red_phase[FJ_RG_MAX_REDS]; /* 0: operand independent of reductions; k: after phase k-1 */
	int nphases;
	uint32_t opaque;        /* the matmul / take / gather / scatter / cumsum node, or FJ_NONODE
	                         * (attention: the second matmul, O = P V; D is O's shape) */
	bool has_row_d;         /* a ROW-dependent value of D's shape exists (persistent) */
	/* persistent_inner_outer: the outer reductions, prims.sum over the dims
	 * of D not in K (okmask = ~kmask), each kept apart from reds (which hold
	 * the inner ones). Their results and the values computed from them live
	 * in C = D without okmask (the "columns": a row's positions); their
	 * operands may be ROW values (the gradient of a bias added before a
	 * normalization). Nothing but C-shaped pointwise values and results
	 * depends on them (class FJ_RG_COL). */
	uint32_t oreds[FJ_RG_MAX_REDS];
	int noreds;
	uint32_t okmask;
	/* symbols read at run time */
	fj_rg_symsrc *syms;
	uint32_t nsyms;
	/* the extra symbols: those the body uses that no operand's or result's
	 * dim gives (e.g. N in the VJP of var over a dim of size N: a region of
	 * 0-d values that counts prims.full [N,16]); the kernel reads them from
	 * its dims array after the operands' and results' sizes, one i64 each,
	 * in this order (by name; fj_rg_extra_syms) */
	uint32_t *xsyms;
	uint32_t nxsyms;
	/* ---- the region plan: the schedule's decisions, which the host and
	 * the GPU templates both read (with red_phase/nphases: the phases, and
	 * vals[].space: where each result is stored) ---- */
	bool inner;             /* reductions along rows, K holding D's innermost dim (the
	                         * schedule's reduction_inner, persistent_inner,
	                         * persistent_inner_outer; and a region that reduces every
	                         * dim); else across rows (reduction_outer, persistent_outer) */
	bool ordered;           /* an argmax/argmin: a partial visits its positions in order */
} fj_rg_analysis;

/* Analyses fusion.kernel `node` of g. Errors (FJ_ERR_UNSUPPORTED: a region
 * shape the generator does not handle, naming why) are recorded on ctx. */
fj_status fj_rg_analyze(fj_context *ctx, const fj_graph *g, uint32_t node, fj_rg_analysis *a);
void fj_rg_analysis_free(fj_rg_analysis *a);

/* persistent_inner_outer: is body value v stored with the columns (C) --
 * an outer reduction's result, a value computed from one, or a value of the
 * inputs that has C's shape and not D's or R's? False in other regions. */
bool fj_rg_col_value(const fj_rg_analysis *a, fj_vid v);

/* The extra symbols of fusion.kernel `node` of g (fj_rg_analysis.xsyms),
 * for the runtimes that fill the kernel's dims array: syms has room for
 * fj_symbol_count(g->module) entries; *n gets their number (0 for any other
 * node). Needs no schedule. */
fj_status fj_rg_extra_syms(fj_context *ctx, const fj_graph *g, uint32_t node, uint32_t *syms, uint32_t *n);

/* ---- evaluator ---- */

/* A point of a value's shape: idx[0..rank) (NULL when not known yet) and/or
 * the row-major linear index `lin` (NULL when not known yet); at least one
 * of them is set (rank 0: neither is needed). */
typedef struct fj_rg_point {
	int rank;
	bool has_idx;
	LLVMValueRef idx[FJ_MAX_RANK];
	LLVMValueRef lin;
} fj_rg_point;

typedef struct fj_rg_memo {
	fj_vid v;
	fj_rg_point p;
	LLVMValueRef val;
} fj_rg_memo;

typedef struct fj_rg {
	fj_cg *cg;
	const fj_rg_analysis *a;
	const fj_graph *body;
	/* region operands and results (views as in fj_cg_kernel) */
	uint32_t nin, nout;
	const fj_cg_operand *in;  /* nin */
	const fj_cg_tensor *out;  /* nout */
	LLVMValueRef status;      /* i32 variable (FJ_KERR_*), may be NULL: errors ignored */
	/* per module symbol: its i64 value (NULL: not used) */
	LLVMValueRef *symval;
	uint32_t nsymval;
	/* per body value */
	LLVMValueRef *bound;      /* fj_rg_bind */
	LLVMValueRef (*vdim)[FJ_MAX_RANK]; /* sizes, built on demand (in the entry block) */
	LLVMValueRef *inptr;      /* per operand: a pointer safe to read at offset 0 even when empty */
	/* memo stack */
	fj_rg_memo *memo;
	uint32_t nmemo, cap_memo;
	uint32_t scope[64];
	int nscope;
	fj_status st;
	/* softmax's divisions by the row sum are made by reciprocal (see
	 * fj_rg_recip_sum) */
	bool recip;
	/* this exp node, of an argument known <= 0, is fj_cg_exp_nonpos
	 * (region_host_inner.c: exp_input) */
	const fj_node *exp_nonpos;
} fj_rg;

/* Starts evaluating region a in the function being emitted by cg. The caller
 * gives the operand views (in: nin = node operands) and result views (out),
 * built in the function's entry block, and the status variable (or NULL).
 * Binds the symbols from the views (fj_rg_analysis.syms), in the current
 * block, which must dominate every later use (the kernel's entry). */
fj_status fj_rg_begin(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                      const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status);
/* fj_rg_begin for a kernel whose dims array (i64 *, `dims`) holds the
 * values of the extra symbols (a->xsyms) from entry `xat` on: the entries
 * after its operands' and results' sizes. fj_rg_begin fails on a region
 * with extra symbols. */
fj_status fj_rg_begin_dims(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                           const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status, LLVMValueRef dims,
                           int64_t xat);
void fj_rg_end(fj_rg *r);

/* Size d of body value v (i64), and the product of its sizes. */
LLVMValueRef fj_rg_dim(fj_rg *r, fj_vid v, int d);
LLVMValueRef fj_rg_numel(fj_rg *r, fj_vid v);

/* Points. */
void fj_rg_point_idx(fj_rg_point *p, int rank, const LLVMValueRef *idx);   /* from a multi-index */
void fj_rg_point_lin(fj_rg_point *p, int rank, LLVMValueRef lin);          /* from a linear index */
/* Fills p->idx (unravel over v's sizes) / p->lin (row-major) when missing. */
void fj_rg_need_idx(fj_rg *r, fj_vid v, fj_rg_point *p);
void fj_rg_need_lin(fj_rg *r, fj_vid v, fj_rg_point *p);

/* The compute value of body value v at point p (of v's shape); its type is
 * fj_cg_compute_type(v's dtype). */
LLVMValueRef fj_rg_eval(fj_rg *r, fj_vid v, fj_rg_point *p);
/* v as its compute value converted to dtype `to`. */
LLVMValueRef fj_rg_eval_as(fj_rg *r, fj_vid v, fj_rg_point *p, fj_dtype to);
/* Softmax's division e / broadcast_in_dim(sum(e)), e = exp(x -
 * broadcast_in_dim(amax(x))), in f32, can go by reciprocal: while r->recip
 * is set, it is e * (1/s) corrected by one FMA residual (Markstein), which
 * is e / s rounded to nearest when every e of the row is at least
 * FJ_RG_RECIP_MIN (s is in [1, 2^39], so the quotients are normal). Is
 * reduction node `red` the sum of such a division (whose row the caller
 * then checks, fj_rg_recip_max)? */
bool fj_rg_recip_sum(fj_rg *r, const fj_node *red);
#define FJ_RG_RECIP_MIN 0x1p-60f
/* The row max (amax node) that shifts the exps that such a sum adds, or
 * NULL. Every e is at least FJ_RG_RECIP_MIN when x - m >= FJ_RG_RECIP_SHIFT
 * for the row's smallest x: exp(-41) = 1.56e-18, 2^-60 = 8.7e-19, room for
 * the exp's few ulp and the rounding of x - m. */
const fj_node *fj_rg_recip_max(fj_rg *r, const fj_node *red);
#define FJ_RG_RECIP_SHIFT -41.0
/* May amax node `red` skip NaNs? When every use of it is softmax's shift
 * x - m, whose every use in turn is exp(x - m) summed over the same dims,
 * or an arithmetic op of x - m or exp(x - m) with that sum (through unary
 * ops): a NaN in the row then makes the sum NaN, and every output that m
 * reaches with it (region_eval.c). */
bool fj_rg_max_skips_nan(fj_rg *r, const fj_node *red);

/* Memo scopes: entries created after a push are dropped by the matching pop.
 * Push when entering a loop body or a branch, pop when leaving it. */
void fj_rg_scope_push(fj_rg *r);
void fj_rg_scope_pop(fj_rg *r);

/* Binds value v to `val` (a compute value of v's dtype) until unbound or
 * rebound: fj_rg_eval(v, any point) returns it. NULL unbinds. */
void fj_rg_bind(fj_rg *r, fj_vid v, LLVMValueRef val);

/* Binds value v to `val` at point p alone (a memo entry of the current
 * scope): fj_rg_eval(v, p) returns it, v at any other point is computed.
 * For a value a template keeps per point (a row cached in a buffer). */
void fj_rg_bind_at(fj_rg *r, fj_vid v, const fj_rg_point *p, LLVMValueRef val);

/* Records an index error when cond (i1) is true (status |= FJ_KERR_INDEX). */
void fj_rg_fail_if(fj_rg *r, LLVMValueRef cond, int code);

/* Stores the value of body value `v` at point p into tensor t at `offset`
 * (converting v's dtype to t's). */
void fj_rg_store(fj_rg *r, const fj_cg_tensor *t, LLVMValueRef offset, fj_vid v, fj_rg_point *p);

/* ---- reductions: accumulators ---- */

typedef enum fj_rg_redkind {
	FJ_RG_RED_SUM, FJ_RG_RED_PROD, FJ_RG_RED_MAX, FJ_RG_RED_MIN,
	FJ_RG_RED_VAR_MEAN, FJ_RG_RED_ARGMAX, FJ_RG_RED_ARGMIN
} fj_rg_redkind;

/* The state of one reduction, as up to 3 values: sum/prod/max/min: {acc};
 * var_mean: {S1, S2} = {sum (x - K), sum (x - K)^2} in f64, the data
 * shifted by K (`shift`: a sample of the same reduction, e.g. its first
 * element, set with fj_rg_acc_set_shift; 0 when not set): one pass, it
 * vectorizes, partials with the same K merge by addition, and with K a
 * sample the f64 sums lose nothing (the Welford/shifted-data algorithm of
 * Chan, Golub & LeVeque; mean = K + S1/n, M2 = S2 - S1^2/n);
 * argmax/argmin: {value, index (i64)}. Held in variables (allocas) for
 * loops; fj_rg_acc_load gives a snapshot. */
typedef struct fj_rg_acc {
	uint32_t node;           /* the reduction node (body index) */
	fj_rg_redkind kind;
	fj_dtype in_dt;          /* the operand's dtype */
	fj_dtype acc_dt;         /* f64 / i64 / the operand's (max/min/arg*) compute dtype */
	int n;                   /* number of state values */
	LLVMTypeRef ty[3];
	LLVMValueRef var[3];     /* variables (fj_cg_var) */
	LLVMValueRef shift;      /* var_mean: K (f64), NULL: 0 */
} fj_rg_acc;

/* Creates the variables of reduction node `node` and stores its identity. */
void fj_rg_acc_init(fj_rg *r, uint32_t node, fj_rg_acc *acc);
/* Re-stores the identity (a new row). */
void fj_rg_acc_reset(fj_rg *r, fj_rg_acc *acc);
/* var_mean: sets the shift K from x (the operand's compute value at some
 * point of the current reduction); no effect for other kinds. */
void fj_rg_acc_set_shift(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x);
/* Accumulates x (the operand's compute value) at position `pos` (i64: the
 * linear index within the reduced dims, for argmax/argmin; NULL otherwise). */
void fj_rg_acc_step(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x, LLVMValueRef pos);
/* The current state as values, and merging another state given as values
 * (a partial of another thread / lane; the other must come from LATER
 * positions for argmax/argmin ties to pick the first). */
void fj_rg_acc_load(fj_rg *r, const fj_rg_acc *acc, LLVMValueRef vals[3]);
void fj_rg_acc_merge(fj_rg *r, fj_rg_acc *acc, LLVMValueRef other[3]);
/* Computes the reduction's results from the state (count: i64 number of
 * reduced elements) and binds them (fj_rg_bind). Sets FJ_KERR_VALUE for an
 * empty amax/amin/argmax/argmin (status). */
void fj_rg_acc_finish(fj_rg *r, fj_rg_acc *acc, LLVMValueRef count);

/* ---- persistent_inner_outer's column slots: one protocol for every
 * target (codegen/region_acc.c) ----
 * The rows are shared among S slots (a host thread's share of the rows, a
 * GPU block). Slot s keeps, for outer reduction o (sum, prod, amax, amin:
 * one state value, 8 bytes, f64 or i64) and column c of the C columns, its
 * state at element (s * noreds + o) * C + c of the slots' area
 * (fj_rg_col_slot). Each slot counts itself done on a counter after a
 * fence; the last one merges the states of every slot in slot order
 * s = 0, 1, ... (a GPU grid merges groups of consecutive slots first, still
 * in order), so the bits depend on S alone, then finishes the reductions
 * (fj_rg_col_finish) and stores the column-shaped results at each column
 * (fj_rg_col_store). The area's place in the workspace and the counters
 * are the target's (the host's header, FJ_RG_HOST_SLOT_*; the GPU's
 * counters, backend_nvptx/region_gpu_split.c). */

/* &state (as type ty) of outer reduction o at column col of slot `slot`
 * (i64) in `area`, C = ncols. */
LLVMValueRef fj_rg_col_slot(fj_rg *r, LLVMValueRef area, LLVMTypeRef ty, LLVMValueRef slot, int o,
                            LLVMValueRef ncols, LLVMValueRef col);
/* After the merge: finishes every outer reduction (oacc, one per a->oreds
 * entry; rows: the number of rows summed) and binds its result. */
void fj_rg_col_finish(fj_rg *r, fj_rg_acc *oacc, LLVMValueRef rows);
/* Stores every column-shaped result (space C) at column col (its linear
 * index over C), evaluated at kidx (the column's index over D's K dims)
 * where it has C's shape, when kidx is given, else at col. */
void fj_rg_col_store(fj_rg *r, LLVMValueRef col, const LLVMValueRef *kidx);

/* ---- the host templates (codegen/region_host.c) ---- */

/* persistent_inner_outer on the host: the kernel's parallel space [lo, hi)
 * is S "slots" of rows, S >= 1 chosen by the runtime and passed as the last
 * entry of dims (after the extra symbols); ptrs[operands + results] is a
 * workspace of FJ_RG_HOST_SLOT_HEADER + S * nsums * C * FJ_RG_HOST_SLOT_BYTES
 * bytes (C: the element count of the columns, result col_result's), 8-byte
 * aligned, whose first i64 the runtime zeroes before each call.
 * fj_rg_host_slots gives nsums (0: the node needs none of this) and
 * col_result. */
#define FJ_RG_HOST_SLOT_HEADER 64
#define FJ_RG_HOST_SLOT_BYTES 12 /* per column sum and column: f64 + an f32 block sum */
fj_status fj_rg_host_slots(fj_context *ctx, const fj_graph *g, uint32_t node, uint32_t *nsums,
                           uint32_t *col_result);

/* The per-node emitter of fusion.kernel for the host kernel ABI (cg.h):
 * ptrs = region operands then results; [lo, hi) of the parallel space it
 * sets in k->par_out / par_mask. Registered in codegen/kernel.c. */
fj_status fj_cg_emit_region_host(fj_cg *cg, fj_cg_kernel *k);

#endif
