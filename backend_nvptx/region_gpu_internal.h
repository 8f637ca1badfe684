/* region_gpu_internal.h -- what the GPU template files share (region_gpu*.c):
 * the kernel being emitted (gk), its entry points and loops, the
 * reduction state, the templates' sizes, each template's emitter, and the
 * variant table: one family of templates per file, each with its rows
 * {suffix, applies, emit} and its plan choice (choose). The templates are
 * described in region_gpu.c's opening comment. */
#ifndef FJ_NVPTX_REGION_GPU_INTERNAL_H
#define FJ_NVPTX_REGION_GPU_INTERNAL_H

#include <string.h>

#include <llvm-c/Core.h>

#include "backend_nvptx/nvptx.h"
#include "backend_nvptx/region_gpu.h"
#include "codegen/region.h"

#define TILE 16
#define MAXIO 240 /* operands, results: CUDA allows 4 KiB of parameters */
/* Launch bounds (.maxntid, .minnctapersm) at sm_90's 64K registers per SM
 * (tests/nvptx/budgets.tsv checks the registers ptxas uses): a block per
 * row keeps 2 resident blocks of 512 threads (MIN_BLOCKS: up to 64
 * registers), _reg8 of an inner reduction too (REG_MIN_BLOCKS), that of
 * persistent_inner_outer one block of 512 (up to 128). Entries of 256 threads
 * or fewer give no .minnctapersm: ptxas's own choice stays at 64 registers
 * or fewer (4+ blocks), which a bound of 2 blocks would loosen to 128. */
#define MIN_BLOCKS 2
#define ROW_BLOCK 512 /* a block per row (<name>, persistent_inner_outer's <name>): 64 registers */
#define REG_E 8       /* _reg8: positions per thread (region_gpu_reduce.c) */
#define REG_BLOCK 512 /* maxntid 512 */
/* Resident _reg8 blocks of an inner reduction's rows: 2 (.minnctapersm 2, at
 * most 64 registers). Measured on an H200 (tests/gpu/run.sh's rows, 8192 x
 * 4096): 1.3-1.6x faster than 1 block of up to 128 registers, even where
 * the 64 cost a small spill (f32 layer_norm's f64 accumulators: 40 bytes);
 * persistent_inner_outer's _reg8 keeps 1, where 64 spilled hundreds of bytes
 * and ran slower. */
#define REG_MIN_BLOCKS 2
#define COL_BLOCK 256 /* _col: at most 256 threads (region_gpu_reduce.c) */
/* tensor-core matmul tiles (region_gpu_matmul.c) */
#define MMA_BM 64
#define MMA_BN 64
#define MMA_BK 32
#define MMA_LD (MMA_BK + 8)
#define MMA_CLD (MMA_BN + 4)
#define MMA_THREADS 128

typedef LLVMValueRef V;

typedef struct gk {
	fj_nvptx_comp *c;
	fj_cg *cg;
	const fj_rg_analysis *a;
	const fj_graph *body;
	const fj_node *n;
	fj_cg_operand in[MAXIO];
	fj_cg_tensor out[MAXIO];
	uint32_t nin, nout;
	LLVMValueRef fn, statusp, status;
	bool want_ws;               /* the next entry takes the workspace parameter */
	LLVMValueRef wsp;           /* its workspace (split reductions), or NULL */
	V tid, ntid, ctaid, nctaid; /* i64 */
	fj_rg r;
	char prefix[96];
	unsigned nshared;
} gk;

#define B (k->cg->b)

static inline V i64c(gk *k, int64_t v) { return fj_cg_i64(k->cg, v); }
static inline V add(gk *k, V x, V y) { return LLVMBuildAdd(B, x, y, ""); }
static inline V mul(gk *k, V x, V y) { return LLVMBuildMul(B, x, y, ""); }
static inline V ult(gk *k, V x, V y) { return LLVMBuildICmp(B, LLVMIntULT, x, y, ""); }
static inline V slt(gk *k, V x, V y) { return LLVMBuildICmp(B, LLVMIntSLT, x, y, ""); }
static inline V sel(gk *k, V c, V x, V y) { return LLVMBuildSelect(B, c, x, y, ""); }
static inline V zx64(gk *k, V x) { return LLVMBuildZExt(B, x, k->cg->t_i64, ""); }

/* A grid-stride loop: for (i = start; i < hi; i += step). */
typedef struct gloop {
	LLVMBasicBlockRef head, body, exit;
	V phi, iv, step;
	LLVMBasicBlockRef pre;
	bool no_hoist; /* llvm.licm.disable (fj_gpu_gloop_no_hoist) */
} gloop;

/* ---- entries, loops and shapes (region_gpu.c) ---- */

/* Starts entry `name`: void(ptr operands..., ptr results..., ptr dims, ptr
 * status[, ptr workspace]) -- the workspace when k->want_ws. */
fj_status fj_gpu_entry_begin(gk *k, const char *suffix, unsigned maxntid, unsigned minblocks, unsigned align);
fj_status fj_gpu_entry_end(gk *k);
void fj_gpu_gloop_begin(gk *k, gloop *l, V start, V hi, V step, const char *name);
void fj_gpu_gloop_end(gk *k, gloop *l);
/* Keeps what the loop's body computes in the body (no LICM): a block's
 * loop over rows in _reg8, where hoisting the row-invariant addresses of
 * its 8 positions (8 x 64-bit pointers per tensor) out of a loop that
 * mostly runs once costs the registers that keep the row. */
void fj_gpu_gloop_no_hoist(gloop *l);
void fj_gpu_if_begin(gk *k, fj_cg_if *c, V cond);
void fj_gpu_if_end(gk *k, fj_cg_if *c);
/* Row-major linear index of idx over v's sizes. */
V fj_gpu_lin_of(gk *k, fj_vid v, const V *idx, int rank);
void fj_gpu_unravel(gk *k, fj_vid v, const int *which, int n, V lin, V *idx);
/* Stores every result at linear position `lin` of its own shape. */
void fj_gpu_store_all_lin(gk *k, V lin);
V fj_gpu_result_numel(gk *k);

/* ---- the variant table (region_gpu.c) ----
 *
 * A region belongs to one template family (the first whose `takes` accepts
 * it, in region_gpu.c's list), which owns, in its own file, its rows of the
 * table and its plan choice. A region's entries are the family's rows that
 * apply to it, in the rows' order (the main one first): a variant's index
 * (fj_nvptx_launch_step.variant, fj_nvptx_kernel.entry) is its place among
 * them, never written by hand. Adding a variant is a row and a line of its
 * family's choose. */

/* What a launch plan reads: the region, the bound sizes, the device. */
typedef struct fj_gpu_sizes {
	fj_context *ctx;
	const fj_rg_analysis *a;
	const struct fj_gpu_family *fam;
	const fj_nvptx_limits *lim;
	int64_t (*dimval)(void *ud, fj_dim d);
	void *ud;
	bool aligned16;    /* every pointer of the launch is 16-byte aligned */
	const char *force; /* the nvptx_variants setting (tests): "bpr", "tpr",
	                    * "reg", "col" or "split"; NULL when unset */
} fj_gpu_sizes;

typedef struct fj_gpu_variant {
	const char *suffix;                       /* the entry's name after the kernel's ("": the main one) */
	bool (*applies)(const fj_rg_analysis *a); /* whether a region has it (NULL: every region of the family) */
	fj_status (*emit)(gk *k);                 /* emits the entry, named kernel + suffix */
} fj_gpu_variant;

typedef struct fj_gpu_family {
	const char *name;
	bool (*takes)(const fj_rg_analysis *a); /* the regions of the family */
	const fj_gpu_variant *variants;         /* its rows */
	int nvariants;
	/* appends the launches of the bound sizes to plan (fj_gpu_launch), and
	 * sets may_fail and workspace */
	fj_status (*choose)(const fj_gpu_sizes *s, fj_nvptx_plan *plan);
} fj_gpu_family;

/* The families, one per file. */
extern const fj_gpu_family fj_gpu_pointwise_family; /* region_gpu_pointwise.c */
extern const fj_gpu_family fj_gpu_rows_family;      /* region_gpu_reduce.c (and _split) */
extern const fj_gpu_family fj_gpu_io_family;        /* region_gpu_inner_outer.c */
extern const fj_gpu_family fj_gpu_matmul_family;    /* region_gpu_matmul.c */
extern const fj_gpu_family fj_gpu_index_family;     /* region_gpu_index.c */

/* The family of a region. */
const fj_gpu_family *fj_gpu_family_of(const fj_rg_analysis *a);
/* Which entries a region has (the main one first): their suffixes. */
int fj_gpu_region_variants(const fj_rg_analysis *a, const char **suffix);

/* ---- launch plans (region_gpu_plan.c), for the families' choose ---- */

/* Appends a launch of the entry named by suffix (of s's region). */
fj_status fj_gpu_launch(const fj_gpu_sizes *s, fj_nvptx_plan *plan, const char *suffix, unsigned grid,
                        unsigned block, unsigned shared);
static inline bool fj_gpu_forced(const fj_gpu_sizes *s, const char *name)
{
	return s->force && strcmp(s->force, name) == 0;
}
static inline int64_t fj_gpu_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* The smallest power of two >= x, from 32 to BLOCK_MAX. */
unsigned fj_gpu_pow2_at_least(int64_t x);
/* Blocks of `block` threads over `items` (1 to 2^20). */
unsigned fj_gpu_grid_of(int64_t items, unsigned block);
/* The element count of t with the bound sizes. */
int64_t fj_gpu_numel(const fj_gpu_sizes *s, const fj_type *t);
/* Rows (kept dims) and positions per row (reduced dims, a->kmask) of t. */
void fj_gpu_rows_len(const fj_gpu_sizes *s, const fj_type *t, int64_t *rows, int64_t *len);
/* Whether a reduction op can fail at run time (amax/amin of nothing ...). */
bool fj_gpu_red_may_fail(fj_op op, bool arg);
/* Emits the entries of region `node` of g into cg's module: all variants
 * (variant < 0) or only that one (0: the main one). */
fj_status fj_gpu_emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                             const fj_rg_analysis *a);
/* The entry name of variant v. */
void fj_gpu_entry_name(const fj_graph *g, uint32_t node, const fj_rg_analysis *a, int v, char entry[112]);

/* ---- pointwise and transpose (region_gpu_pointwise.c) ---- */

fj_status fj_gpu_emit_pointwise(gk *k, bool vec);
/* The elements a thread handles per iteration in the vectorised pointwise
 * entry: 16 bytes of the narrowest tensor it reads or writes whole (4 f32,
 * 8 f16/bf16; 2 to 8). */
int fj_gpu_vec_width(const fj_rg_analysis *a);
bool fj_gpu_tileable(const fj_graph *body);
fj_status fj_gpu_emit_transpose(gk *k);

/* ---- take, gather, scatter, scan (region_gpu_index.c) ---- */

fj_status fj_gpu_emit_index(gk *k);
fj_status fj_gpu_emit_scatter(gk *k, bool add_phase);
fj_status fj_gpu_emit_scan(gk *k);

/* ---- reductions within a block (region_gpu_reduce.c) ---- */

typedef struct redctx {
	fj_vid dv;       /* a body value of shape D (the first reduction's operand) */
	int drank;
	int rdims[FJ_MAX_RANK], nr;
	int kdims[FJ_MAX_RANK], nk;
	V rows, len;     /* i64 */
	fj_rg_acc acc[FJ_RG_MAX_REDS];
	bool ordered;    /* an argmax/argmin: contiguous chunks per thread */
	int8_t space[MAXIO]; /* per result: 'D', 'R' or (persistent_inner_outer) 'C' */
} redctx;

/* The column partials a persistent_inner_outer row adds to: this block's
 * slice of `part`, through scratch accumulators oacc (one per outer
 * reduction). */
typedef struct iocols {
	fj_rg_acc *oacc;
	V part;
} iocols;

/* The block-wide state of a block-per-row kernel. */
typedef struct blockctx {
	V sh[FJ_RG_MAX_REDS][3];
	V lane, warp, nwarps, lane0, warp0, tid0;
} blockctx;

/* A row of a _reg8 entry: the thread's REG_E positions, whether each is in
 * the row, and their points of D (index and linear offset). */
typedef struct regrow {
	V jpos[REG_E], valid[REG_E];
	fj_rg_point pts[REG_E];
	V didx[REG_E][FJ_MAX_RANK], dlin[REG_E];
} regrow;

fj_status fj_gpu_red_begin(gk *k, redctx *rc, const char *suffix, unsigned maxntid, unsigned minblocks);
void fj_gpu_step_phase(gk *k, redctx *rc, int ph, const V *ridx, V j);
V fj_gpu_io_slot(gk *k, V part, V blk, int o, V len, V j);
void fj_gpu_row_out(gk *k, redctx *rc, const V *ridx, V row, V j0, V jend, V js, V is_first,
                    const iocols *cols);
void fj_gpu_write_row(gk *k, redctx *rc, const V *ridx, V row, V j0, V js, V is_first);
void fj_gpu_store_results(gk *k, int rank, const V *idx, V lin);
void fj_gpu_block_setup(gk *k, redctx *rc, blockctx *bc);
void fj_gpu_thread_positions(gk *k, const redctx *rc, V *j0, V *jend, V *js);
void fj_gpu_bpr_phases(gk *k, redctx *rc, blockctx *bc, const V *ridx, V j0, V jend, V js);
void fj_gpu_reg_row_reduce(gk *k, redctx *rc, blockctx *bc, const V *ridx, V tail, regrow *g);
void fj_gpu_reg_outputs(gk *k, const redctx *rc, const regrow *g, int e, V *vals);
void fj_gpu_col_setup(gk *k, redctx *rc, V sh[][3]);
void fj_gpu_col_merge_groups(gk *k, fj_rg_acc *acc, V sh[3], V tx, V ty0, V ny);
fj_status fj_gpu_emit_tpr(gk *k);
fj_status fj_gpu_emit_bpr(gk *k);
fj_status fj_gpu_emit_reg(gk *k);
fj_status fj_gpu_emit_col(gk *k);

/* ---- outer reductions split across blocks: _split (region_gpu_split.c) ---- */

bool fj_gpu_split_ok(const fj_rg_analysis *a);
/* The chunks of a split reduction over rows x len, or 0 when _split is not
 * the plan (fj_gpu_rows_family's choose). */
int64_t fj_gpu_split_chunks(const fj_gpu_sizes *s, bool is_inner, bool ordered, int64_t rows, int64_t len);
/* Bytes of counters before the partials (16-byte aligned). */
int64_t fj_gpu_split_counter_bytes(int64_t tiles);
fj_status fj_gpu_emit_split(gk *k);
/* __threadfence(): device-wide ordering of this thread's memory accesses. */
void fj_gpu_device_fence(gk *k);

/* ---- persistent_inner_outer (region_gpu_inner_outer.c) ---- */

/* persistent_inner_outer with outer reductions. */
bool fj_gpu_io_ok(const fj_rg_analysis *a);
/* The workspace of a grid of nb blocks (and of any smaller grid). */
int64_t fj_gpu_io_ws_bytes(int64_t nb, int64_t noreds, int64_t len);
fj_status fj_gpu_emit_io(gk *k, bool reg);

/* ---- matmul (region_gpu_matmul.c) ---- */

fj_status fj_gpu_emit_matmul(gk *k, const char *suffix);
bool fj_gpu_mma_ok(const fj_rg_analysis *a);
fj_status fj_gpu_emit_matmul_mma(gk *k);

#endif
