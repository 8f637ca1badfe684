/* ir.h -- fusejit's graph IR: dtypes, symbolic sizes, values, nodes, graphs,
 * modules, attributes and the op table.
 *
 * Ownership: a context (fj_context) owns the allocator and the diagnostics. A
 * module owns its graphs, its symbol table and an arena for module-wide data;
 * each graph owns an arena from which its values, nodes, attributes and names
 * are allocated, all freed by one fj_graph_destroy.
 *
 * Values are 32-bit ids (fj_vid) into the graph's value array. Nodes are kept in
 * topological order in the graph's node array. A value is a graph parameter, a
 * node result, or a literal scalar (a weak-typed number, see IR.md §1).
 *
 * Sizes (fj_dim) are int64_t: a value >= 0 is a static size; a negative value
 * -(1+k) names entry k of the module's table of symbolic size expressions, each
 * a product coef * s1 * s2 * ... of symbols. Expressions are interned, so two
 * dims are equal exactly when their fj_dim values are equal.
 *
 * Sums, differences and floor division (IR.md §1: s0+1, s0-1, s0//2) keep
 * every expression a product: the symbol table holds, besides the symbols
 * bound at run time, derived symbols, each defined once by a canonical sum
 * (sorted (coef, product) terms plus a constant) or by floor(dim / c). s0+1
 * is then the product of one derived symbol, and (s0+1)*4 a product of it
 * and 4, so every consumer of products (the binder, codegen's kernel symbols,
 * partition's and recompute's costs, the C API's queries) works unchanged on
 * them; the binder computes a derived symbol's value from the symbols of its
 * definition, which always come earlier in the table (symval slots as any
 * other symbol's). Definitions are interned too, and cheap identities hold:
 * s0+1 == 1+s0, (s0+1)-1 == s0, s0+0 == s0, s0//1 == s0, (s0*4)//2 == s0*2,
 * (s0//2)//3 == s0//6, and a sum of static sizes folds to an integer.
 */
#ifndef FJ_IR_H
#define FJ_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fusejit/fusejit.h"

#define FJ_ASSERT(c) ((c) ? (void)0 : fj_assert_fail(#c, __FILE__, __LINE__))
#define FJ_UNREACHABLE() fj_assert_fail("unreachable", __FILE__, __LINE__)
_Noreturn void fj_assert_fail(const char *what, const char *file, int line);

#define FJ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define FJ_MAX_RANK 8
/* The reductions of each kind -- along the rows, and column sums -- that one
 * fusion.kernel may hold: what the code generators accept (codegen/region.h),
 * so the fuse pass never builds a kernel with more. */
#define FJ_MAX_KERNEL_REDUCTIONS 32

/* ---- context: allocator, diagnostics, interned strings (ir/context.c) ---- */

typedef struct fj_loc {
	const char *file; /* NULL when there is no file */
	uint32_t line, col;
} fj_loc;

void *fj_alloc(fj_context *ctx, size_t n);                 /* NULL on failure */
void *fj_realloc(fj_context *ctx, void *p, size_t osize, size_t nsize);
void fj_free(fj_context *ctx, void *p, size_t size);
char *fj_strdup(fj_context *ctx, const char *s);          /* free with fj_free(ctx, s, strlen(s)+1) */

/* Records an error (returns FJ_ERR_INVALID for convenience, or the status given
 * to fj_diag_status). Messages are formatted as with printf. */
fj_status fj_error(fj_context *ctx, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
fj_status fj_error_status(fj_context *ctx, fj_status st, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
fj_status fj_verror(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc,
                    const char *fmt, va_list ap);
void fj_warning(fj_context *ctx, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Number of errors recorded so far (never reset by clear). */
size_t fj_context_error_count(const fj_context *ctx);
/* Formats d as "file:line:col: error: message" into buf (truncating). */
void fj_format_diagnostic(const fj_diagnostic *d, char *buf, size_t size);

/* Settings (fusejit.h: fj_context_set_option), kept on the context. Their
 * defaults come from the environment when the context is created
 * (api/settings.c, the one file of the library that reads it); set options
 * before the context is shared between threads. Strings are the context's
 * (fj_alloc), NULL when unset. */
typedef struct fj_settings {
	int threads;              /* "threads": host pool threads; 0 = every CPU we may run on */
	int compile_jobs;         /* "compile_jobs": kernels compiled at once; 0 = one per core */
	char *cache_dir;          /* "cache_dir": the disk cache; NULL = none */
	uint64_t cache_max_bytes; /* "cache_max_mb", in bytes */
	uint64_t kernel_cache_bytes; /* "kernel_cache_mb": the in-memory kernel cache's cap, in bytes */
	char *nvptx_variants;     /* "nvptx_variants": forced GPU template variants (tests) */
	bool ptx_all_variants;    /* "ptx_all_variants": --emit=ptx writes every variant */
	char *libdevice;          /* "libdevice": libdevice's path, "none"; NULL = the default */
	int nvptx_math;           /* "nvptx_math": FJ_NVPTX_MATH_LIBDEVICE (default) or _APPROX */
	char *libcuda;            /* "libcuda": the driver library; NULL = libcuda.so.1 */
	char *nvptx_target;       /* "nvptx_target": NULL = the GPU's own architecture */
	char *nvptx_device;       /* "nvptx_device": NULL or "cuda", "emulator" */
	bool nvptx_sync;          /* "nvptx_sync": wait after each GPU launch, name a faulting kernel */
	char *cache_fault;        /* "cache_fault": a fault in the disk cache's writes (tests) */
	int host_target;          /* "host_target": FJ_HOST_TARGET_NATIVE or _AVX2 */
	int host_vector_bits;     /* "host_vector_bits": FJ_HOST_VECTOR_AUTO, _256 or _512 */
	int host_stream;          /* "host_stream": FJ_HOST_STREAM_AUTO, _ON or _OFF */
} fj_settings;

/* host_target: the host CPU's own features, or them without AVX-512 (the AVX2
 * code path, on an AVX-512 machine too). host_vector_bits: the preferred
 * vector width of the host's loops (auto: the widest the features have). */
enum { FJ_HOST_TARGET_NATIVE = 0, FJ_HOST_TARGET_AVX2 = 1 };
enum { FJ_HOST_VECTOR_AUTO = 0, FJ_HOST_VECTOR_256 = 1, FJ_HOST_VECTOR_512 = 2 };
/* host_stream: whether flat pointwise loops and the float matmul's epilogue
 * stream their large outputs with non-temporal stores (auto: on x86,
 * backend_host/jit.c). */
enum { FJ_HOST_STREAM_AUTO = 0, FJ_HOST_STREAM_ON = 1, FJ_HOST_STREAM_OFF = 2 };

/* nvptx_math: GPU math through libdevice (a kernel that needs it fails
 * clearly without it), or PTX approximations (f64 computed through f32). */
enum { FJ_NVPTX_MATH_LIBDEVICE = 0, FJ_NVPTX_MATH_APPROX = 1 };

/* The context's settings: read-only, and writable for api/settings.c. */
const fj_settings *fj_context_settings(const fj_context *ctx);
fj_settings *fj_context_settings_mut(fj_context *ctx);
/* A context with built-in settings only (no environment): fj_context_create
 * (api/settings.c) is this plus the environment's defaults. */
fj_context *fj_context_new(fj_alloc_fn alloc, void *alloc_ud);
/* A fresh context with ctx's allocator and a copy of its settings (worker
 * contexts that keep their own diagnostics); NULL when out of memory. */
fj_context *fj_context_new_like(const fj_context *ctx);

/* Backend state a context owns, created on first use by the box that needs
 * it and destroyed (in reverse slot order) with the context. */
typedef enum fj_ctx_slot {
	FJ_SLOT_THREAD_POOL,
	FJ_SLOT_HOST_JIT,
	FJ_SLOT_CUDA_DRIVER, /* backend_nvptx/cuda.c: before the kernel cache, which unloads modules */
	FJ_SLOT_CUDA,
	FJ_SLOT_KERNEL_CACHE,
	FJ_SLOT_COUNT
} fj_ctx_slot;
typedef fj_status (*fj_slot_create_fn)(fj_context *ctx, void **out);
typedef void (*fj_slot_destroy_fn)(fj_context *ctx, void *p);
/* The slot's object, created with `create` on first use (thread-safe: once). */
fj_status fj_context_slot(fj_context *ctx, fj_ctx_slot slot, fj_slot_create_fn create,
                          fj_slot_destroy_fn destroy, void **out);

/* ---- arena (ir/arena.c) ---- */

typedef struct fj_arena_block fj_arena_block;
typedef struct fj_arena {
	fj_context *ctx;
	fj_arena_block *head;
	size_t used, cap; /* of head */
	size_t total;     /* bytes obtained from the allocator */
} fj_arena;

void fj_arena_init(fj_arena *a, fj_context *ctx);
void fj_arena_free(fj_arena *a);
void *fj_arena_alloc(fj_arena *a, size_t n); /* 16-byte aligned, zeroed; NULL on failure */
char *fj_arena_strdup(fj_arena *a, const char *s);
char *fj_arena_strndup(fj_arena *a, const char *s, size_t n);
/* Grows an arena-allocated array: returns a copy of old (n elements of size
 * elem) with room for cap elements, or NULL. */
void *fj_arena_grow(fj_arena *a, void *old, size_t n, size_t cap, size_t elem);
char *fj_arena_printf(fj_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- dtypes ---- */

typedef enum fj_dtype {
#define DTYPE(E, name, size, npy, kind) FJ_DT_##E,
#include "dtypes.def"
	FJ_DT_COUNT
} fj_dtype;

const char *fj_dtype_name(fj_dtype dt);
int fj_dtype_size(fj_dtype dt);
const char *fj_dtype_npy(fj_dtype dt);
bool fj_dtype_from_name(const char *s, size_t n, fj_dtype *out);
bool fj_dtype_is_float(fj_dtype dt);
bool fj_dtype_is_int(fj_dtype dt);  /* signed or unsigned integer, not bool */
bool fj_dtype_is_bool(fj_dtype dt);
/* The exponent below which e^z is not a normal number of the float dtype
 * dt as computed (f16 and bf16 in f32): -87.33 (e^-87.33 is f32's smallest
 * normal 2^-126 rounded up by 0.3 %), -708.39 for f64 (2^-1022, 0.4 %).
 * Gradients that are multiples of such an e^z flush to 0 below it
 * (passes/vjp.c, decompose's gelu_backward; IR.md's autodiff row). */
double fj_dtype_exp_normal_lo(fj_dtype dt);
/* PyTorch's promoteTypes for two dtypes (f16 + bf16 -> f32, u8 + i8 -> i16). */
fj_dtype fj_dtype_promote(fj_dtype a, fj_dtype b);

/* ---- sizes ---- */

typedef int64_t fj_dim;
typedef struct fj_module fj_module;

/* A symbolic size expression: coef * syms[0] * ... * syms[nsyms-1], syms
 * sorted by symbol index (repeats allowed: N*N). */
typedef struct fj_symexpr {
	int64_t coef;
	uint32_t nsyms;
	uint32_t *syms; /* indexes into the module's symbol table */
} fj_symexpr;

/* What a symbol is: bound at run time (from an input dim or --dim), or
 * derived from other symbols by its definition. */
typedef enum fj_symkind { FJ_SYM_BOUND, FJ_SYM_SUM, FJ_SYM_FLOORDIV } fj_symkind;

/* One term coef * mono of a sum; mono is a symbolic product of coefficient 1. */
typedef struct fj_symterm {
	int64_t coef; /* never 0 */
	fj_dim mono;
} fj_symterm;

/* A derived symbol's definition. FJ_SYM_SUM: terms[0] + ... + c, the terms
 * sorted by mono (descending, that is in the order the monomials were
 * interned), at least one, with two or more terms or c != 0 (a single term
 * with no constant is that product itself). FJ_SYM_FLOORDIV: floor(of / c),
 * c >= 2, of symbolic and not a multiple of c. */
typedef struct fj_symdef {
	fj_symkind kind;
	uint32_t nterms;
	fj_symterm *terms;
	int64_t c;
	fj_dim of;
} fj_symdef;

static inline bool fj_dim_is_static(fj_dim d) { return d >= 0; }
/* The dim of symbol `name` (interned); FJ_ERR_* on allocation failure. */
fj_status fj_dim_symbol(fj_module *m, const char *name, size_t len, fj_dim *out);
/* a*b, exact a/b (fails when not exact or not representable), overflow-checked.
 * They return false on failure and leave *out untouched; allocation failures
 * mark the module (fj_module_oom). */
bool fj_dim_mul(fj_module *m, fj_dim a, fj_dim b, fj_dim *out);
bool fj_dim_div(fj_module *m, fj_dim a, fj_dim b, fj_dim *out);
/* a+b, a-b, floor(a/c) for a constant c >= 1: canonical where cheap (see
 * above). They fail as fj_dim_mul does, and also when a static result would
 * be negative (a-b with static a < b) or c < 1. A symbolic a-b is a size
 * only where it evaluates >= 0: the binder refuses a negative one at run time. */
bool fj_dim_add(fj_module *m, fj_dim a, fj_dim b, fj_dim *out);
bool fj_dim_sub(fj_module *m, fj_dim a, fj_dim b, fj_dim *out);
bool fj_dim_floordiv(fj_module *m, fj_dim a, int64_t c, fj_dim *out);
/* Whether a floor division occurs in d (in a derived symbol of d, at any depth). */
bool fj_dim_has_floordiv(const fj_module *m, fj_dim d);
/* a + c for an integer c of either sign. */
bool fj_dim_add_int(fj_module *m, fj_dim a, int64_t c, fj_dim *out);
/* Symbol sym's definition (kind FJ_SYM_BOUND for a bound symbol). */
const fj_symdef *fj_symbol_def(const fj_module *m, uint32_t sym);
static inline bool fj_symbol_is_derived(const fj_module *m, uint32_t sym)
{
	return fj_symbol_def(m, sym)->kind != FJ_SYM_BOUND;
}
/* The value of derived symbol s from val[k], the values of the symbols
 * before it (< 0: unknown; a definition only uses earlier symbols, so filling
 * the table in order computes them all). False when a symbol it uses is
 * unknown, on overflow, or when the value is negative (*neg set). */
bool fj_symbol_eval(const fj_module *m, uint32_t s, const int64_t *val, int64_t *out, bool *neg);
/* Product of n dims (1 for n == 0). */
bool fj_dim_product(fj_module *m, const fj_dim *d, int n, fj_dim *out);
const fj_symexpr *fj_dim_expr(const fj_module *m, fj_dim d); /* d < 0 */
const char *fj_symbol_name(const fj_module *m, uint32_t sym);
uint32_t fj_symbol_count(const fj_module *m);
/* Writes the dim as text: "4096", "N", "N*4096" (the coefficient last, as
 * written), "s0+1", "(s0+1)*4", "s0//2" (IR.md §1's canonical form; it parses
 * back to the same dim). */
int fj_dim_format(const fj_module *m, fj_dim d, char *buf, size_t size);
/* Writes a derived symbol's definition as text (its name): "s0+1", "s0//2". */
int fj_symdef_format(const fj_module *m, const fj_symdef *d, char *buf, size_t size);
/* Python's slice bounds on a dim of static size: a negative start or end
 * counts from the end (clamped at 0), both are clamped to size, and end is
 * raised to start. */
void fj_slice_clamp(int64_t size, int64_t *start, int64_t *end);

/* ---- types ---- */

typedef struct fj_type {
	fj_dtype dtype;
	uint8_t rank;
	bool weak;   /* a literal scalar's type: PyTorch's "wrapped number" */
	fj_dim *dims; /* rank entries, owned by the graph's arena (NULL if rank 0) */
} fj_type;

/* Same rank and dims (dtypes may differ). */
bool fj_type_same_dims(const fj_type *a, const fj_type *b);
bool fj_type_equal(const fj_type *a, const fj_type *b);
/* Writes the type as text, "f32[N,4096]" (the type must be valid). */
void fj_type_format(const fj_module *m, const fj_type *t, char *buf, size_t size);

/* ---- attributes ---- */

typedef enum fj_attr_kind {
	FJ_AK_ABSENT = 0, /* not written: the op table's default applies */
	FJ_AK_NONE,       /* written `none` */
	FJ_AK_BOOL,
	FJ_AK_INT,
	FJ_AK_FLOAT,
	FJ_AK_STR,
	FJ_AK_DTYPE,
	FJ_AK_DIM,  /* a symbolic size expression (static sizes are FJ_AK_INT) */
	FJ_AK_LIST
} fj_attr_kind;

typedef struct fj_attr {
	uint8_t kind;    /* fj_attr_kind */
	uint32_t n;      /* FJ_AK_LIST: number of items */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s; /* NUL-terminated; arena-owned */
		fj_dtype dt;
		fj_dim dim;
		struct fj_attr *items;
	} u;
} fj_attr;

/* The kinds an op's attribute accepts (the op table's attribute specs). */
typedef enum fj_attr_type {
	FJ_AT_BOOL,   /* bool */
	FJ_AT_INT,    /* int */
	FJ_AT_FLOAT,  /* float: an int literal is accepted and read as float */
	FJ_AT_NUM,    /* scalar: int, float or bool (fill values, alpha ...) */
	FJ_AT_STR,    /* str */
	FJ_AT_DTYPE,  /* dtype */
	FJ_AT_INTS,   /* ints: list of int */
	FJ_AT_DIMS,   /* dims: list of sizes (int or symbolic); a shape */
	FJ_AT_BOOLS,  /* bools: list of bool */
	FJ_AT_FLOATS  /* floats: list of float */
} fj_attr_type;

/* ---- the op table (ir/ops.def, ir/op.c) ---- */

typedef enum fj_op {
#define OP(E, name, operands, results, attrs, flags, infer) FJ_OP_##E,
#include "ops.def"
	FJ_OP_COUNT
} fj_op;

enum {
	FJ_OPF_POINTWISE = 1u << 0,
	FJ_OPF_REDUCTION = 1u << 1,
	FJ_OPF_LAYOUT = 1u << 2,
	FJ_OPF_OPAQUE = 1u << 3,
	FJ_OPF_RANDOM = 1u << 4,
	FJ_OPF_RECOMPUTABLE = 1u << 5,
	FJ_OPF_ATEN = 1u << 6,  /* set from the layer of the name, not in ops.def */
	FJ_OPF_PRIMS = 1u << 7,
	FJ_OPF_FUSION = 1u << 8,
	FJ_OPF_SOURCE = 1u << 9   /* no tensor operand read: full, iota, rand ... */
};

typedef struct fj_attr_spec {
	const char *name;
	fj_attr_type type;
	bool optional;    /* `none` accepted */
	bool required;    /* no default: must be written */
	fj_attr dflt;     /* the default when absent (kind FJ_AK_NONE for none) */
} fj_attr_spec;

typedef struct fj_operand_spec {
	const char *name;
	bool optional; /* `none` accepted */
	bool variadic; /* any number (last only): '*' zero or more, '+' one or more */
	bool nonempty; /* '+' */
} fj_operand_spec;

typedef struct fj_infer fj_infer;
typedef fj_status (*fj_infer_fn)(fj_infer *ic);

#define FJ_MAX_SPEC 12

typedef struct fj_opinfo {
	const char *name;   /* "aten.add" */
	uint32_t flags;     /* FJ_OPF_* */
	uint8_t noperands, nresults, nattrs;
	bool variadic_results; /* fusion.kernel: as many as its body yields */
	fj_operand_spec operands[FJ_MAX_SPEC];
	const char *results[FJ_MAX_SPEC];
	fj_attr_spec attrs[FJ_MAX_SPEC];
	fj_infer_fn infer;
	const char *infer_name;
} fj_opinfo;

/* The parsed op table (parsed once per context from ops.def's spec strings). */
const fj_opinfo *fj_op_info(const fj_context *ctx, fj_op op);
const char *fj_op_name(fj_op op);
bool fj_op_lookup(const char *name, size_t len, fj_op *out);
/* Index of the attribute spec named `name` in the op, or -1. */
int fj_op_attr_index(const fj_opinfo *oi, const char *name, size_t len);

/* ---- values, nodes, graphs, modules ---- */

typedef uint32_t fj_vid;
#define FJ_NOVAL UINT32_MAX  /* a `none` operand */
#define FJ_NONODE UINT32_MAX

typedef enum fj_value_kind { FJ_VK_PARAM, FJ_VK_RESULT, FJ_VK_LITERAL } fj_value_kind;

/* A literal scalar operand (IR.md §1). */
typedef struct fj_literal {
	enum { FJ_LIT_INT, FJ_LIT_FLOAT, FJ_LIT_BOOL } kind;
	int64_t i;
	double f;
	bool b;
} fj_literal;

/* The literal's value as a double (an int converted, a bool 0 or 1). */
double fj_literal_value(const fj_literal *l);

/* Tri-state annotation: not written, false, true. */
enum { FJ_TRI_UNSET = 0, FJ_TRI_FALSE = 1, FJ_TRI_TRUE = 2 };

typedef struct fj_value {
	fj_type type;
	const char *name;  /* without '%'; NULL for literals */
	uint8_t kind;      /* fj_value_kind */
	uint8_t recomputable; /* parameter annotation, FJ_TRI_* */
	bool nograd;       /* parameter annotation */
	uint32_t def;      /* FJ_VK_RESULT: defining node index; FJ_VK_PARAM: param index */
	uint32_t res;      /* FJ_VK_RESULT: result index in the node */
	fj_literal lit;    /* FJ_VK_LITERAL */
	fj_loc loc;
} fj_value;

typedef struct fj_graph fj_graph;

typedef struct fj_node {
	fj_op op;
	uint32_t nopnds, nres;
	fj_vid *opnds; /* FJ_NOVAL for `none` */
	fj_vid *res;
	fj_attr *attrs; /* one per attribute spec of the op, FJ_AK_ABSENT when not written */
	uint8_t recomputable; /* annotation, FJ_TRI_* */
	bool nograd;          /* annotation: stop-gradient, no gradient flows through its results */
	const char *schedule; /* annotation (fusion.kernel), NULL when absent */
	const char *kernel;   /* annotation (fusion.kernel), NULL when absent */
	fj_graph *body;       /* fusion.kernel: the region, NULL otherwise */
	fj_loc loc;
} fj_node;

struct fj_graph {
	fj_module *module;
	fj_graph *parent;   /* the graph holding the fusion.kernel of a body; NULL for a top-level graph */
	fj_arena arena;     /* a body allocates from its top-level graph's arena */
	const char *name;   /* without '@' */
	fj_value *values;
	uint32_t nvalues, cap_values;
	fj_node *nodes;
	uint32_t nnodes, cap_nodes;
	fj_vid *params;     /* for a body: its operands, under their outer names */
	uint32_t nparams, cap_params;
	fj_vid *results;    /* return (or yield) operands */
	uint32_t nresults;
	int64_t num_fwd_outputs; /* annotation, -1 when absent */
	fj_vid *name_tab;   /* open-addressed hash of named values, for lookup by name */
	uint32_t name_cap, name_count;
	uint32_t fresh;     /* counter for fj_graph_fresh_name */
	fj_loc loc;
};

struct fj_module {
	fj_context *ctx;
	fj_arena arena;     /* symbols, size expressions */
	const char *file;   /* the file the module was parsed from, or NULL */
	fj_graph **graphs;
	uint32_t ngraphs, cap_graphs;
	char **symbols;     /* a derived symbol's name is its definition's text */
	fj_symdef *defs;    /* per symbol */
	uint32_t nsymbols, cap_symbols;
	fj_symexpr *exprs;
	uint32_t nexprs, cap_exprs;
	bool oom;           /* an allocation failed somewhere below */
};

fj_module *fj_module_create(fj_context *ctx);
void fj_module_destroy(fj_module *m);
/* NULL when allocation fails or the name is taken (an error is recorded). */
fj_graph *fj_module_add_graph(fj_module *m, const char *name, fj_loc loc);
fj_graph *fj_module_find_graph(const fj_module *m, const char *name);
/* Removes graph i (destroying it) and keeps the order of the others. */
void fj_module_remove_graph(fj_module *m, uint32_t i);
/* Moves a graph created by fj_graph_create into the module at position i. */
fj_status fj_module_insert_graph(fj_module *m, uint32_t i, fj_graph *g);
/* A stand-alone graph of module m (not in its list). */
fj_graph *fj_graph_create(fj_module *m, const char *name);
void fj_graph_destroy(fj_graph *g);
/* A body graph for a fusion.kernel node of `parent`. */
fj_graph *fj_graph_create_body(fj_graph *parent);
static inline fj_context *fj_graph_ctx(const fj_graph *g) { return g->module->ctx; }

/* Adds a value; returns FJ_NOVAL on allocation failure (and marks the module). */
fj_vid fj_graph_add_param(fj_graph *g, const char *name, fj_type type, fj_loc loc);
fj_vid fj_graph_add_literal(fj_graph *g, fj_literal lit, fj_loc loc);
/* Appends a node with the given operands; its nres results get names (NULL:
 * generated later by the printer) and types (NULL: left for inference).
 * Returns the node index, or FJ_NONODE on allocation failure. */
uint32_t fj_graph_add_node(fj_graph *g, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                           uint32_t nres, const char *const *names, const fj_type *types,
                           fj_loc loc);
/* Copies a type into the graph's arena (dims included). */
bool fj_graph_copy_type(fj_graph *g, fj_type *dst, const fj_type *src);
fj_status fj_graph_set_results(fj_graph *g, const fj_vid *res, uint32_t n);
static inline fj_value *fj_val(const fj_graph *g, fj_vid v) { return &g->values[v]; }
/* The value named `name` in g (not its parents), or FJ_NOVAL. */
fj_vid fj_graph_find_value(const fj_graph *g, const char *name, size_t len);
/* A name not used in g (nor, for a body, in its parents): hint if free, else
 * hint followed by a number; a plain number when hint is NULL. Arena-owned;
 * NULL on allocation failure. */
const char *fj_graph_fresh_name(fj_graph *g, const char *hint);
/* Renames value v (registering the new name). */
fj_status fj_graph_rename_value(fj_graph *g, fj_vid v, const char *name);

/* Attributes (on the graph's arena). */
fj_attr fj_attr_int(int64_t i);
fj_attr fj_attr_float(double f);
fj_attr fj_attr_bool(bool b);
fj_attr fj_attr_dtype(fj_dtype dt);
fj_attr fj_attr_str(fj_graph *g, const char *s); /* kind ABSENT on allocation failure */
fj_attr fj_attr_list(fj_graph *g, const fj_attr *items, uint32_t n);
fj_attr fj_attr_ints(fj_graph *g, const int64_t *v, uint32_t n);
/* A size (an int when static, else the symbolic dim) and a shape (a list of
 * sizes), as shape-like attributes hold them. */
fj_attr fj_attr_size(fj_dim d);
fj_attr fj_attr_shape(fj_graph *g, const fj_dim *dims, int rank);
/* Sets attribute `name` of node n; FJ_ERR_INVALID when the op has no such attribute. */
fj_status fj_node_set_attr(fj_graph *g, uint32_t node, const char *name, fj_attr a);
/* The attribute value in effect: the written one, else the default. */
const fj_attr *fj_node_attr(const fj_context *ctx, const fj_node *n, const char *name);
/* The mask of dims a reduction node reduces over its operand of rank `rank`
 * (its "dims" list, or the "dim" of argmax/argmin); out-of-range dims are
 * left out. */
uint32_t fj_node_reduced_mask(const fj_context *ctx, const fj_node *n, int rank);

/* Reading attributes whose kind the verifier has checked. */
int64_t fj_attr_as_int(const fj_attr *a);
double fj_attr_as_float(const fj_attr *a);
bool fj_attr_is_none(const fj_attr *a);
bool fj_attr_equal(const fj_attr *a, const fj_attr *b);

/* ---- the attention pattern (ir/attention.c) ---- */

/* O = softmax(f(Q K)) V in prims, read back from its second matmul (the
 * shape matched is described in ir/attention.c). */
#define FJ_ATTN_MAX_NODES 64
typedef struct fj_attn {
	uint32_t mm1, mm2;   /* S = Q K and O = P V (node indexes) */
	uint32_t amax, sum;  /* the softmax's reductions */
	fj_vid s;            /* mm1's result */
	fj_vid x;            /* the softmax's operand: S through the score chain */
	fj_vid mx, e, l, p;  /* amax(X), exp(X - MX), sum(E), E / L */
	uint32_t sum2;       /* the logsumexp's sum beside it, or FJ_NONODE */
	fj_vid s2;           /* its result (row values computed from it and MX may leave) */
	uint32_t nodes[FJ_ATTN_MAX_NODES]; /* every node of the pattern, ascending */
	uint32_t nnodes;
} fj_attn;

/* Does node mm2 of g end an attention pattern whose values (but mm2's
 * result, and the row values of a logsumexp beside it) are used by its own
 * nodes only? live: per node, NULL when every node is (dead nodes' uses are
 * ignored); scratch: g->nnodes bytes. */
bool fj_attn_match(const fj_graph *g, uint32_t mm2, const bool *live, uint8_t *scratch, fj_attn *out);

/* The same pattern in a training forward that returns P besides (saves it
 * for the backward): P may be a result of g; nothing else changes. */
bool fj_attn_match_saved(const fj_graph *g, uint32_t mm2, uint8_t *scratch, fj_attn *out);

/* The backward of attention, with the weights recomputed (what
 * partition{attention=true} leaves in a training backward; what the bridge
 * writes for the scaled-dot-product backwards): second-stage matmuls
 * G = W_g V_g or W_g^T V_g (a transpose of the last two dims), each W_g
 * computed pointwise, in the space W of the first stage's results, from
 * first-stage matmuls F (the scores Q K^T, dP = dO V^T) and from values
 * computed outside, one of them exp(X - broadcast_in_dim(a row value)) (the
 * weights from the logsumexp); rank 2 or 3, f32. Every value but the G's is
 * used inside only. Matched from G0; ir/attention.c. */
#define FJ_ATTN_BW_MAX_F 2
#define FJ_ATTN_BW_MAX_G 4
typedef struct fj_attn_bw {
	uint32_t f[FJ_ATTN_BW_MAX_F], nf; /* first-stage matmuls (node indexes) */
	uint32_t g[FJ_ATTN_BW_MAX_G], ng; /* second-stage matmuls, g[0] = G0 */
	fj_vid gw[FJ_ATTN_BW_MAX_G];      /* W_g */
	bool gt[FJ_ATTN_BW_MAX_G];        /* G reads W_g transposed (sums over W's rows) */
	uint32_t nodes[FJ_ATTN_MAX_NODES]; /* every node of the pattern, ascending */
	uint32_t nnodes;
} fj_attn_bw;

/* Does second-stage matmul g0 start such a pattern? live, scratch: as
 * fj_attn_match's. */
bool fj_attn_bw_match(const fj_graph *g, uint32_t g0, const bool *live, uint8_t *scratch, fj_attn_bw *out);

/* Does `to` depend on the values `from` only through steps that carry a NaN
 * through (add, sub, mul, div, neg, exp, float conversions, layout) and
 * through where's values (never its condition), with at least one where?
 * Then `to` evaluated with every `from` bound to NaN, where it is not NaN,
 * is its value whatever they are (a causal mask's -inf scores, their 0
 * weights). scratch: 2 * g->nvalues bytes. */
bool fj_attn_drops_only(const fj_graph *g, const fj_vid *from, uint32_t nfrom, fj_vid to, uint8_t *scratch);

/* Does `to` depend on any of the values `from`? scratch: g->nvalues bytes. */
bool fj_attn_depends(const fj_graph *g, const fj_vid *from, uint32_t nfrom, fj_vid to, uint8_t *scratch);

/* ---- type inference (ir/infer.c) ---- */

struct fj_infer {
	fj_module *m;
	fj_graph *g;       /* types are allocated on g's arena */
	fj_op op;
	const fj_opinfo *info;
	fj_loc loc;
	uint32_t nin;
	const fj_type *const *in;     /* nin entries; NULL for a `none` operand */
	const fj_literal *const *lit; /* nin entries; the literal for weak scalar operands, else NULL */
	const fj_attr *attrs;         /* info->nattrs entries, defaults filled in */
	uint32_t nout;
	fj_type *out;                 /* nout entries to fill */
	const fj_graph *body;         /* fusion.kernel's body */
};

/* Checks node `node` of g against its op's spec, before inference: operand
 * count (variadic ones too), `none` only for optional operands, literal
 * scalars only where the op accepts them, result count, attribute kinds,
 * required attributes present, simple attribute ranges. Records an error at
 * the node's place and returns FJ_ERR_INVALID on the first problem. */
fj_status fj_check_node(fj_graph *g, uint32_t node);

/* Infers the result types of node `node` of g into out[0..nres) (dims on g's
 * arena); the node itself is not changed. Call fj_check_node first. Records
 * an error at the node's place and returns it on failure. */
fj_status fj_infer_node(fj_graph *g, uint32_t node, fj_type *out);
fj_status fj_infer_error(fj_infer *ic, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- printer and verifier (ir/print.c, ir/verify.c) ---- */

typedef struct fj_buf {
	fj_context *ctx;
	char *data;
	size_t len, cap;
	bool oom;
} fj_buf;

void fj_buf_init(fj_buf *b, fj_context *ctx);
void fj_buf_free(fj_buf *b);
void fj_buf_puts(fj_buf *b, const char *s);
void fj_buf_putn(fj_buf *b, const char *s, size_t n);
void fj_buf_printf(fj_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints a module / graph in the text format of IR.md §1. Returns FJ_ERR_NOMEM
 * when the buffer could not grow. */
fj_status fj_print_module(fj_buf *b, const fj_module *m);
fj_status fj_print_graph(fj_buf *b, const fj_graph *g);
/* Prints a float so that it parses back to the same bits. */
void fj_format_float(double f, char *buf, size_t size);

/* Checks SSA, arity, attribute kinds and ranges, inferred types and
 * annotations; records every problem found and returns FJ_ERR_INVALID if any. */
fj_status fj_verify_module(fj_module *m);
fj_status fj_verify_graph(fj_graph *g);

/* ---- copies in memory (ir/clone.c) ---- */

/* A copy of module m: every graph, in order, with m's symbol table and size
 * expressions as they are (every fj_dim keeps its value). The copy prints
 * exactly as m and keeps its places; it owns all it points to, so m may be
 * changed or destroyed afterwards. FJ_ERR_NOMEM (recorded) on failure. */
fj_status fj_module_clone(const fj_module *m, fj_module **out);
/* A new module holding a copy of top-level graph g alone (*gout), with all of
 * g's module's symbols, as fj_module_clone copies them. */
fj_status fj_graph_clone(const fj_graph *g, fj_module **out, fj_graph **gout);

#endif
