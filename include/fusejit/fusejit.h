/* fusejit.h -- the public C API of fusejit, a fusion JIT for tensor graphs.
 *
 * Everything a program embedding fusejit may call is declared here; the rest of
 * the library is hidden (-fvisibility=hidden). This header is plain C99 and
 * compiles as C++.
 *
 * Errors are values: every fallible call returns an fj_status (FJ_OK is 0)
 * and records a diagnostic on its context, readable with fj_context_error().
 * The library never exits or aborts on bad input.
 *
 * ABI policy (how this header grows without breaking callers built against
 * an older one):
 * - Every struct the caller passes in or fills for the library (fj_tensor,
 *   fj_compile_options, fj_run_options, fj_bench_options, fj_program_stats,
 *   fj_reference_options ...) carries a uint32_t struct_size, set to the
 *   caller's sizeof by its versioned *_init function (fj_tensor_init,
 *   fj_compile_options_init ...). Initialise with it, then set fields.
 * - New fields are only ever added at the end of a struct; none is removed,
 *   reordered or retyped. Functions are only added, never changed.
 * - The library reads (and, for structs it fills, writes) only the fields the
 *   caller's struct_size covers; fields beyond it take their defaults.
 * - fj_tensor is the one exception kept for older callers: its struct_size
 *   sits in what was padding, and 0 there (a zero-initialised descriptor, as
 *   callers wrote before fj_tensor_init existed) means the layout of version
 *   0.1, which every later library accepts. When fj_tensor grows, arrays of
 *   it will be strided by their first element's struct_size (0: sizeof the
 *   0.1 layout); today every valid struct_size is 0 or that size.
 * - A struct_size larger than the library's own struct (a newer header on
 *   an older library) is read up to the library's size.
 * - Structs the library returns by value or owns (fj_value_info,
 *   fj_diagnostic, fj_cache_stats) keep their layout within a major version.
 */
#ifndef FUSEJIT_FUSEJIT_H
#define FUSEJIT_FUSEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSEJIT_VERSION_MAJOR 0
#define FUSEJIT_VERSION_MINOR 1
#define FUSEJIT_VERSION_PATCH 0
#define FUSEJIT_VERSION "0.1.0"

#if defined(FJ_BUILDING_LIBRARY) && defined(__GNUC__)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

typedef enum fj_status {
	FJ_OK = 0,
	FJ_ERR_PARSE,       /* malformed text */
	FJ_ERR_INVALID,     /* well-formed but wrong: types, shapes, attributes */
	FJ_ERR_NOMEM,       /* an allocation failed */
	FJ_ERR_IO,          /* a file could not be read or written */
	FJ_ERR_UNSUPPORTED, /* valid, but not available in this build or here */
	FJ_ERR_RUNTIME,     /* a run failed: bad inputs, index out of range ... */
	FJ_ERR_DRIVER,      /* the CUDA driver or a GPU is missing or failed */
	FJ_ERR_INTERNAL     /* a broken invariant inside fusejit: a bug */
} fj_status;

/* The name of a status, e.g. "FJ_ERR_PARSE". */
FJ_API const char *fj_status_name(fj_status s);

/* A context owns the allocator, the diagnostics, the interned strings, the
 * kernel cache and the CUDA driver (opened on first use). */
typedef struct fj_context fj_context;

/* An allocator in the style of Lua's lua_Alloc: with nsize == 0 it frees ptr
 * (which may be NULL) and returns NULL; otherwise it returns a block of nsize
 * bytes holding the first min(osize, nsize) bytes of ptr (a new block when ptr
 * is NULL), or NULL on failure, leaving ptr untouched. */
typedef void *(*fj_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

typedef enum fj_severity { FJ_SEV_ERROR, FJ_SEV_WARNING, FJ_SEV_NOTE } fj_severity;

/* A diagnostic. file is NULL when there is no file; line and col count from
 * 1 and are 0 when unknown. */
typedef struct fj_diagnostic {
	fj_severity severity;
	const char *file;
	uint32_t line, col;
	const char *message;
} fj_diagnostic;

/* Called for each diagnostic as it is recorded (the strings live until the
 * call returns). */
typedef void (*fj_diag_fn)(void *ud, const fj_diagnostic *d);

/* Creates a context. alloc may be NULL (malloc/realloc/free). Returns NULL
 * only when the first allocation fails. */
FJ_API fj_context *fj_context_create(fj_alloc_fn alloc, void *alloc_ud);
FJ_API void fj_context_destroy(fj_context *ctx);
/* Installs a callback for diagnostics (NULL removes it). Diagnostics are also
 * kept on the context until fj_context_clear_diagnostics(). */
FJ_API void fj_context_set_diag_handler(fj_context *ctx, fj_diag_fn fn, void *ud);
FJ_API size_t fj_context_diagnostic_count(const fj_context *ctx);
FJ_API const fj_diagnostic *fj_context_diagnostic(const fj_context *ctx, size_t i);
FJ_API void fj_context_clear_diagnostics(fj_context *ctx);
/* The message of the most recent error, formatted as "file:line:col: error: msg"
 * (or "error: msg" without a place); "" when there is none. */
FJ_API const char *fj_context_error(const fj_context *ctx);

/* ======================================================================
 * Settings
 *
 * Options of a context, set by name (value as text). Each one's default is
 * its environment variable's value when the context is created (an invalid
 * value there is ignored with a warning diagnostic), else the built-in
 * default. Set options before compiling, and before the context is shared
 * between threads.
 *
 *   option            environment              meaning (built-in default)
 *   threads           FUSEJIT_THREADS          host executor's thread pool size, read when the
 *                                              pool starts (0: every CPU the process may use)
 *   compile_jobs      FUSEJIT_NVPTX_JOBS       kernels compiled at once (0: one per core)
 *   cache_dir         FUSEJIT_CACHE_DIR        the disk cache's directory; "off" or "": none
 *                                              ($XDG_CACHE_HOME/fusejit, else ~/.cache/fusejit)
 *   cache_max_mb      FUSEJIT_CACHE_MAX_MB     the disk cache's cap in MiB (256)
 *   kernel_cache_mb   FUSEJIT_KERNEL_CACHE_MB  the in-memory kernel cache's cap in MiB (256): the
 *                                              least recently used kernels no live program uses
 *                                              are evicted past it (their code freed)
 *   libdevice         FUSEJIT_LIBDEVICE        libdevice's path, "none" for no libdevice
 *                                              (the CUDA toolkit's, where installed)
 *   nvptx_math        FUSEJIT_NVPTX_MATH       nvptx: "libdevice" (the default: math through
 *                                              libdevice; a kernel that needs it fails to compile
 *                                              without it, FJ_ERR_UNSUPPORTED, saying so) or
 *                                              "approx" (PTX approximations, f64 through f32)
 *   libcuda           FUSEJIT_LIBCUDA          the CUDA driver library to dlopen (libcuda.so.1)
 *   nvptx_target      FUSEJIT_NVPTX_TARGET     nvptx: the target when fj_compile_options.target
 *                                              is NULL (the GPU's own)
 *   nvptx_device      FUSEJIT_NVPTX_DEVICE     nvptx: "cuda" (the driver) or "emulator" (a host
 *                                              emulator of the GPU kernels, for tests)
 *   nvptx_sync        FUSEJIT_NVPTX_SYNC       debugging aid: wait for each GPU kernel as it is
 *                                              launched, so a fault names its kernel (0: a fault
 *                                              surfaces at the next synchronisation, naming the
 *                                              kernels launched since the previous one)
 *   nvptx_variants    FUSEJIT_NVPTX_VARIANTS   testing aid: forces GPU template variants
 *   ptx_all_variants  FUSEJIT_PTX_ALL_VARIANTS PTX emission writes every variant (0)
 *   cache_fault       FUSEJIT_CACHE_FAULT      testing aid: a fault in the disk cache's writes,
 *                                              "kill-after-write:N" (SIGKILL once N bytes of an
 *                                              entry are written, or before its rename) or
 *                                              "enospc[-after-write:N]" (stores fail with ENOSPC
 *                                              after N bytes, or before the rename); unset: none
 *   host_target       FUSEJIT_HOST_TARGET      host: "native" (this CPU's features) or "avx2" (them
 *                                              without AVX-512: the AVX2 code path on any x86 CPU
 *                                              with AVX2 and FMA); fixed at the context's first
 *                                              host compile
 *   host_vector_bits  FUSEJIT_HOST_VECTOR_BITS host: the vector width loops prefer, "auto" (the
 *                                              widest the target has: 512 with AVX-512), "256"
 *                                              or "512"; fixed at the first host compile
 *   host_stream       FUSEJIT_HOST_STREAM      host: whether pointwise kernels split among
 *                                              threads write outputs of 32 MiB or more, and
 *                                              float matmuls' epilogues outputs of 2 MiB or
 *                                              more, with non-temporal stores, "auto" (on
 *                                              x86, off elsewhere), "on" or "off"; fixed at
 *                                              the first host compile
 * ====================================================================== */

/* Sets option name to value (NULL: back to its default). FJ_ERR_INVALID for
 * an unknown option or a bad value (the message names both). */
FJ_API fj_status fj_context_set_option(fj_context *ctx, const char *name, const char *value);

/* Host parallelism on the embedder's threads. By default the host executor
 * runs its kernels on a pool of threads of its own (option threads). A runner
 * replaces that pool: it calls body(arg) once on each of nthreads threads, the
 * calling thread one of them, and returns when every call has returned; flags
 * is 0. GOMP_parallel, of the OpenMP runtime a process already uses (libgomp;
 * LLVM's libomp and Intel's libiomp5 export it too), is such a runner: with
 * it, fusejit's kernels and that runtime's share one team of threads instead
 * of two teams contending for the cores (an OpenMP worker spin-waits for a
 * while after each of its parallel regions). The PyTorch bridge installs
 * PyTorch's. NULL: back to fusejit's own pool. Set it before the context runs
 * programs. A kernel started inside a body runs on its calling thread alone;
 * a forked child runs every kernel on its calling thread, as with the pool. */
typedef void (*fj_parallel_runner)(void (*body)(void *), void *arg, unsigned nthreads, unsigned flags);
FJ_API void fj_context_set_parallel_runner(fj_context *ctx, fj_parallel_runner run);

/* ======================================================================
 * Version
 * ====================================================================== */

/* FUSEJIT_VERSION_NUMBER is major * 10000 + minor * 100 + patch. */
#define FUSEJIT_VERSION_NUMBER (FUSEJIT_VERSION_MAJOR * 10000 + FUSEJIT_VERSION_MINOR * 100 + FUSEJIT_VERSION_PATCH)
/* The library's version string, e.g. "0.1.0" (compare with FUSEJIT_VERSION to
 * detect a header/library mismatch). */
FJ_API const char *fj_version(void);
/* The library's FUSEJIT_VERSION_NUMBER. */
FJ_API int fj_version_number(void);

/* ======================================================================
 * Thread safety (the rules)
 *
 * - One context may be used from many threads at once: parsing, building
 *   (each builder by one thread at a time), compiling and running all take
 *   the locks they need. Kernels compiled by one thread are shared with all
 *   the others through the context's kernel cache.
 * - A module is read-only to fj_compile: several threads may compile from one
 *   module at once. Modifying a module (fj_build_*, fj_module_run_pipeline,
 *   fj_module_destroy) while another thread reads it is a race.
 * - A program may be run by many threads at once (fj_program_run,
 *   fj_program_forward, fj_program_backward): each run takes its own
 *   execution state (buffers, bound sizes) from a pool in the program.
 *   The GPU work of nvptx programs is queued per context under one lock,
 *   on fusejit's own stream (synchronised before each run returns) or on
 *   the stream a run names (fj_run_options.stream: that run may return
 *   before its work is done); each run makes the primary context current
 *   on its thread. Runs of one program on several streams at once are safe:
 *   each takes its own buffers, and a pooled program's next run waits for
 *   its previous one's queued work.
 *   fj_program_destroy must not overlap any run of that program.
 * - A saved-values object (fj_saved) belongs to one thread at a time (the
 *   backward records on it where its device-resident values were last used).
 * - fj_context_error() returns the calling thread's most recent error on the
 *   context. The diagnostics list (fj_context_diagnostic*) is shared by all
 *   threads: read it only when no other thread is recording; with several
 *   threads, prefer the callback (fj_context_set_diag_handler), which is
 *   called under the context's lock, one diagnostic at a time.
 * - fj_context_destroy must be the last call on a context, after every
 *   other thread is done with it and its modules and programs.
 * ====================================================================== */

/* ======================================================================
 * Modules: parse text, print, run pass pipelines
 * ====================================================================== */

/* A module of graphs (IR.md). Owned by the caller; destroy it with
 * fj_module_destroy. A module must not outlive its context. */
typedef struct fj_module fj_module;

/* Parses text[0..len) in the .fj format (IR.md §1) and verifies it. name
 * names the input in diagnostics (NULL: "<input>"). On failure *out is NULL
 * and the error (file:line:col: error: ...) is on the context. */
FJ_API fj_status fj_module_parse(fj_context *ctx, const char *text, size_t len, const char *name,
                                 fj_module **out);
/* The same for a file (FJ_ERR_IO when it cannot be read). */
FJ_API fj_status fj_module_parse_file(fj_context *ctx, const char *path, fj_module **out);
/* An empty module, to fill with the builder. */
FJ_API fj_status fj_module_new(fj_context *ctx, fj_module **out);
FJ_API void fj_module_destroy(fj_module *m);
/* Prints the module as .fj text into a new NUL-terminated string (*len may be
 * NULL); free it with fj_string_free. */
FJ_API fj_status fj_module_print(fj_context *ctx, const fj_module *m, char **text, size_t *len);
FJ_API void fj_string_free(fj_context *ctx, char *s);
/* Runs a pass pipeline (IR.md §4: "decompose,canonicalize,partition{mode=mincut}")
 * on the module in place, verifying after each pass. */
FJ_API fj_status fj_module_run_pipeline(fj_context *ctx, fj_module *m, const char *pipeline);
/* The number of graphs and the name of graph i (without '@'); NULL when out
 * of range. */
FJ_API size_t fj_module_graph_count(const fj_module *m);
FJ_API const char *fj_module_graph_name(const fj_module *m, size_t i);

/* An op's signature from the op table (for bridges that translate other
 * IRs), as three lines into a new string (free with fj_string_free):
 *   operands: NAME[?|*|+] ...
 *   results: NAME ...
 *   attributes: NAME ...
 * FJ_ERR_INVALID for an unknown op. */
FJ_API fj_status fj_op_schema(fj_context *ctx, const char *op, char **text);

/* ======================================================================
 * Element types and tensors
 * ====================================================================== */

typedef enum fj_scalar_type {
	FJ_TYPE_F64 = 0,
	FJ_TYPE_F32 = 1,
	FJ_TYPE_F16 = 2,
	FJ_TYPE_BF16 = 3, /* bit pattern: 16-bit */
	FJ_TYPE_I64 = 4,
	FJ_TYPE_I32 = 5,
	FJ_TYPE_I16 = 6,
	FJ_TYPE_I8 = 7,
	FJ_TYPE_U8 = 8,
	FJ_TYPE_BOOL = 9 /* one byte, 0 or 1 */
} fj_scalar_type;

/* "f32", "bf16" ... (NULL for an invalid type) and the size in bytes (0). */
FJ_API const char *fj_scalar_type_name(fj_scalar_type t);
FJ_API size_t fj_scalar_type_size(fj_scalar_type t);

#define FJ_MAX_DIMS 8

typedef enum fj_device { FJ_DEVICE_HOST = 0, FJ_DEVICE_CUDA = 1 } fj_device;

/* Flags of an fj_tensor. */
#define FJ_TENSOR_OWNED 1u /* data was allocated by fusejit: release with fj_tensor_release */

/* A tensor descriptor: the caller's memory, described. Initialise it with
 * fj_tensor_init (or zero-initialise it: struct_size 0 is accepted), then
 * fill in what the call needs.
 *
 * Inputs: data, dtype, rank, sizes, strides (in elements; NULL = dense
 * row-major; any strides, negative and zero ones included, are accepted, and
 * copied to a dense buffer before the run) and device.
 *
 * Devices: FJ_DEVICE_HOST (the default) for any executor. FJ_DEVICE_CUDA
 * (data a CUdeviceptr on device_index 0, in the CUDA driver's primary
 * context, e.g. a PyTorch CUDA tensor's data_ptr()) for nvptx programs
 * only: the kernels read and write the caller's device memory in place, with
 * no copy to or from the host (a returned input or literal, or a value
 * returned twice, is copied on the device). Strided or misaligned CUDA
 * tensors are staged: copied into a dense device buffer before the run
 * (inputs) and out of one after it (outputs), element by element on the
 * device's side of the driver (slower than dense ones, which are used in
 * place). Other device indexes and CUDA tensors given to a host or aten
 * program are refused with FJ_ERR_UNSUPPORTED (the error names the tensor).
 * Host tensors given to an nvptx program are uploaded before the run and
 * downloaded after it. fusejit launches on its own stream and synchronises
 * it before the run returns (the results are then in place); work the caller
 * queued on other streams that writes the inputs must be complete before the
 * run (e.g. cuStreamSynchronize). Or the run queues everything on the
 * caller's stream (fj_run_options.stream), ordered after that stream's
 * earlier work, and may return before it is done. Inputs and outputs must not overlap.
 *
 * Outputs: either preallocated by the caller (data != NULL, with dtype, rank,
 * sizes, device and optionally strides as for inputs: the run checks them and
 * writes into them), or left with data == NULL: the run then allocates the
 * output in host memory (64-byte aligned, whatever the executor and device:
 * device is set to FJ_DEVICE_HOST; preallocate CUDA outputs to keep results
 * on the GPU), fills in data, dtype, rank and sizes, sets FJ_TENSOR_OWNED in
 * flags, and the caller releases it with fj_tensor_release. An owned output
 * passed again to a run of the same shape is reused. */
typedef struct fj_tensor {
	void *data;
	fj_scalar_type dtype;
	int32_t rank;
	int64_t sizes[FJ_MAX_DIMS];
	const int64_t *strides;
	fj_device device;
	int32_t device_index;
	uint32_t flags;
	uint32_t struct_size; /* sizeof(fj_tensor), set by fj_tensor_init; 0: the 0.1 layout (same fields) */
} fj_tensor;

/* Zeroes t and sets its struct_size: a host tensor of rank 0, no data. */
FJ_API void fj_tensor_init(fj_tensor *t);

/* Frees an output fusejit allocated (FJ_TENSOR_OWNED, always host memory)
 * and clears data and flags; does nothing for the caller's own memory. */
FJ_API void fj_tensor_release(fj_tensor *t);

/* ======================================================================
 * The graph builder (a graph built by calls instead of text)
 *
 *   fj_graph_builder *b;
 *   fj_build_begin(m, "main", &b);
 *   fj_value_id x = fj_build_param(b, "x", "f32[N,64]");
 *   fj_value_id y = fj_build_op1(b, "aten.mul", (fj_value_id[]){x, fj_build_float(b, 2.0)}, 2, NULL, 0);
 *   fj_status st = fj_build_end(b, &y, 1);   // verifies; frees b
 *
 * Errors are sticky: after the first failing call every call does nothing
 * and returns FJ_NO_VALUE; fj_build_end then returns the first error (and
 * removes the unfinished graph). Ops, attribute names and defaults are those
 * of IR.md §3.
 * ====================================================================== */

typedef struct fj_graph_builder fj_graph_builder;
typedef uint32_t fj_value_id;
#define FJ_NO_VALUE UINT32_MAX /* also: a `none` operand */

typedef enum fj_attribute_kind {
	FJ_ATTR_INT,     /* i */
	FJ_ATTR_FLOAT,   /* f */
	FJ_ATTR_BOOL,    /* i (0 or 1) */
	FJ_ATTR_STRING,  /* s */
	FJ_ATTR_DTYPE,   /* dtype */
	FJ_ATTR_NONE,    /* `none` */
	FJ_ATTR_INTS,    /* ints[0..n) */
	FJ_ATTR_FLOATS,  /* floats[0..n) */
	FJ_ATTR_BOOLS,   /* ints[0..n), each 0 or 1 */
	FJ_ATTR_SHAPE    /* s: sizes as text, symbols allowed: "N,64" or "[N*2, -1]" */
} fj_attribute_kind;

typedef struct fj_attribute {
	const char *name;
	fj_attribute_kind kind;
	int64_t i;
	double f;
	const char *s;
	fj_scalar_type dtype;
	const int64_t *ints;
	const double *floats;
	size_t n;         /* list entries: at most 2^24 (more is refused, FJ_ERR_INVALID) */
} fj_attribute;

/* Starts graph @name in m. */
FJ_API fj_status fj_build_begin(fj_module *m, const char *name, fj_graph_builder **out);
/* A parameter %name of a type written as in the text format: "f32[N,64]",
 * "i64[]". */
FJ_API fj_value_id fj_build_param(fj_graph_builder *b, const char *name, const char *type);
/* Literal scalar operands (weak-typed, IR.md §1). */
FJ_API fj_value_id fj_build_float(fj_graph_builder *b, double v);
FJ_API fj_value_id fj_build_int(fj_graph_builder *b, int64_t v);
FJ_API fj_value_id fj_build_bool(fj_graph_builder *b, int v);
/* Appends op (e.g. "aten.add", "prims.sum") with its operands (FJ_NO_VALUE
 * for `none`) and attributes; its nresults results (the op's count) go to
 * results (may be NULL). */
FJ_API fj_status fj_build_op(fj_graph_builder *b, const char *op, const fj_value_id *operands, size_t noperands,
                             const fj_attribute *attrs, size_t nattrs, fj_value_id *results, size_t nresults);
/* The same for an op with one result: returns it, or FJ_NO_VALUE. */
FJ_API fj_value_id fj_build_op1(fj_graph_builder *b, const char *op, const fj_value_id *operands,
                                size_t noperands, const fj_attribute *attrs, size_t nattrs);
/* The first error so far (FJ_OK when none). */
FJ_API fj_status fj_build_status(const fj_graph_builder *b);
/* Sets the graph's results, verifies it and frees the builder (always). On
 * failure the graph is removed from the module. */
FJ_API fj_status fj_build_end(fj_graph_builder *b, const fj_value_id *results, size_t nresults);
/* Abandons the graph (removed from the module) and frees the builder. */
FJ_API void fj_build_abort(fj_graph_builder *b);

/* ======================================================================
 * Compiling
 * ====================================================================== */

/* Executors. nvptx loads the CUDA driver (libcuda.so.1, or $FUSEJIT_LIBCUDA)
 * with dlopen on first use and runs on device 0's primary context; without a
 * driver or a GPU, fj_compile fails with FJ_ERR_DRIVER and one sentence
 * ("the nvptx executor needs a CUDA driver and a GPU: no CUDA driver:
 * libcuda.so.1 not found (...)"). Inference and training programs alike.
 *
 * Testing aid: with FUSEJIT_NVPTX_DEVICE=emulator in the environment when
 * fj_compile runs, nvptx programs run on a host emulator of the GPU kernels
 * instead of the driver (slow: one OS thread per GPU thread; "device"
 * addresses are host addresses, so host buffers may be passed as
 * FJ_DEVICE_CUDA tensors). It is not a GPU: auto never picks nvptx because of
 * it. FUSEJIT_NVPTX_DEVICE=cuda or unset: the driver. */
typedef enum fj_executor {
	FJ_EXECUTOR_AUTO = 0, /* nvptx when a CUDA driver and a GPU are usable, else host */
	FJ_EXECUTOR_HOST,     /* fused host code on all cores (FUSEJIT_THREADS overrides) */
	FJ_EXECUTOR_ATEN,     /* the reference: one kernel per op, one thread */
	FJ_EXECUTOR_NVPTX     /* fused PTX through the CUDA driver */
} fj_executor;

/* Compile options. Initialise with fj_compile_options_init, then set fields. */
typedef struct fj_compile_options {
	uint32_t struct_size;  /* sizeof(fj_compile_options), set by _init */
	fj_executor executor;
	const char *graph;     /* the graph to compile ("main" or "@main"); NULL: @main, else the first */
	const char *pipeline;  /* a pass pipeline (IR.md §4); NULL: the executor's default */
	const char *target;    /* nvptx: NULL (the GPU's own architecture, or FUSEJIT_NVPTX_TARGET's);
	                          else "sm_80", "sm_86", "sm_89", "sm_90" or "sm_90a", which must be
	                          that one (FJ_ERR_UNSUPPORTED otherwise); ignored by other executors */
	int training;          /* nonzero: autodiff + partition; run with fj_program_forward/_backward */
	int threads;           /* host executor: run on at most this many threads (at most the
	                          context's pool: all cores, or FUSEJIT_THREADS); 0: all of them */
} fj_compile_options;

FJ_API void fj_compile_options_init(fj_compile_options *o);

/* A compiled program. */
typedef struct fj_program fj_program;

/* Compiles a graph of m (which is not modified, and may be destroyed
 * afterwards: the program keeps its own copy). o may be NULL (defaults).
 * Kernels already compiled in this context, or found in the disk cache, are
 * not compiled again. */
FJ_API fj_status fj_compile(fj_context *ctx, const fj_module *m, const fj_compile_options *o, fj_program **out);
FJ_API void fj_program_destroy(fj_program *p);
/* The executor actually used (auto resolved). */
FJ_API fj_executor fj_program_executor(const fj_program *p);

/* What a program takes and returns. sizes[k] is -1 where the size is
 * symbolic; type is the text of the type ("f32[N,64]"); bytes is 0 when a
 * size is symbolic. The strings live as long as the program (or the
 * fj_saved). */
typedef struct fj_value_info {
	const char *name;
	const char *type;
	fj_scalar_type dtype;
	int32_t rank;
	int64_t sizes[FJ_MAX_DIMS];
	size_t bytes;
} fj_value_info;

typedef enum fj_value_role {
	FJ_ROLE_INPUT,    /* parameters of the graph */
	FJ_ROLE_OUTPUT,   /* its results (training: the forward's outputs) */
	FJ_ROLE_SAVED,    /* training: the values the forward saves for the backward */
	FJ_ROLE_TANGENT,  /* training: the backward's inputs besides the saved values,
	                     one per floating-point output (named tangent_<k>) */
	FJ_ROLE_GRADIENT  /* training: the backward's outputs, named after their parameter */
} fj_value_role;

FJ_API size_t fj_program_count(const fj_program *p, fj_value_role role);
FJ_API fj_status fj_program_info(const fj_program *p, fj_value_role role, size_t i, fj_value_info *out);

/* ======================================================================
 * Running
 * ====================================================================== */

/* Runs the program: inputs[0..ninputs) (one per parameter, in order),
 * outputs[0..noutputs) (one per result). Symbolic sizes are bound from the
 * inputs. For a training program this runs the forward only and discards the
 * saved values. */
FJ_API fj_status fj_program_run(fj_program *p, const fj_tensor *inputs, size_t ninputs, fj_tensor *outputs,
                                size_t noutputs);

/* Values saved by a forward run for the backward. */
typedef struct fj_saved fj_saved;

/* Training programs: runs the forward, writes its outputs and returns the
 * saved values in *saved (destroy with fj_saved_destroy). */
FJ_API fj_status fj_program_forward(fj_program *p, const fj_tensor *inputs, size_t ninputs, fj_tensor *outputs,
                                    size_t noutputs, fj_saved **saved);
/* Runs the backward on the saved values of a forward run of p and the
 * tangents (one per FJ_ROLE_TANGENT, in order), writing the gradients (one
 * per FJ_ROLE_GRADIENT). saved is not consumed: the backward may run again.
 * Symbolic sizes the forward bound hold for the backward too (its own inputs
 * may not fix them: the gradient of a sum takes a 0-d tangent). */
FJ_API fj_status fj_program_backward(fj_program *p, const fj_saved *saved, const fj_tensor *tangents,
                                     size_t ntangents, fj_tensor *grads, size_t ngrads);
FJ_API size_t fj_saved_count(const fj_saved *s);
/* Saved value i: its name, concrete shape and bytes, and (view may be NULL)
 * a read-only view of its data (flags 0: not the caller's to release). Saved
 * values are in host memory for every executor (nvptx: downloaded by the
 * forward, uploaded again by the backward), except after an nvptx forward
 * with fj_run_options.saved_on_device: they are then in device memory (the
 * view is FJ_DEVICE_CUDA, device_index 0; on the emulator device addresses
 * are host addresses), read in place by the backward, and freed by
 * fj_saved_destroy; fj_saved_bytes counts them the same way. */
FJ_API fj_status fj_saved_info(const fj_saved *s, size_t i, fj_value_info *info, fj_tensor *view);
FJ_API size_t fj_saved_bytes(const fj_saved *s);
/* Frees the saved values (device ones once the work queued on them is done). */
FJ_API void fj_saved_destroy(fj_saved *s);

/* ======================================================================
 * Runs with options: sizes no input fixes, where inputs came from
 * ====================================================================== */

/* Options of a run. Initialise with fj_run_options_init, then set fields. */
typedef struct fj_run_options {
	uint32_t struct_size;          /* sizeof(fj_run_options), set by _init */
	const char *const *dim_names;  /* the sizes of symbols no input fixes: */
	const int64_t *dim_values;     /*   symbol dim_names[k] is dim_values[k] */
	size_t ndims;                  /*   (an unknown name or a negative size is an error) */
	const char *const *origins;    /* NULL, or one entry per tensor the call takes (inputs;
	                                  the backward: tangents), each NULL or where that tensor
	                                  came from ("x.npy"): shape errors then read
	                                  "input %x (from x.npy): ..." */
	void *stream;                  /* nvptx: a CUstream of device 0's primary context (a
	                                  CU_STREAM_LEGACY or per-thread handle too) that the run
	                                  queues all its work on (see "Runs on the caller's
	                                  stream" below); NULL: fusejit's own stream, synchronised
	                                  before the call returns. Host and aten programs refuse a
	                                  stream (FJ_ERR_UNSUPPORTED). */
	int saved_on_device;           /* forward on nvptx: nonzero keeps the saved values in device
	                                  memory until fj_saved_destroy (no download, and no
	                                  upload by the backward); fj_saved_info's view is then
	                                  an FJ_DEVICE_CUDA tensor. Ignored by host and aten,
	                                  whose saved values are in host memory. */
	int saved_in_place;            /* forward on host or aten: nonzero lets a saved value that
	                                  is one of the forward's inputs (a dense host tensor of
	                                  the graph's dtype) or one of its outputs (written in
	                                  place in host memory: the caller's dense tensor, or
	                                  one fusejit allocates for the caller) be that tensor's
	                                  memory itself, not a copy: fj_saved_info's view then
	                                  points at it. The caller keeps such a tensor alive and
	                                  unchanged until its last backward on these saved
	                                  values (fj_saved_destroy does not touch it), as
	                                  PyTorch's autograd saves inputs and outputs. 0: every
	                                  saved value is fusejit's own copy. Ignored by nvptx.
	                                  fj_program_bench honours it too: a forward bench then
	                                  neither copies such tensors nor counts them twice. */
} fj_run_options;

FJ_API void fj_run_options_init(fj_run_options *o);

/* Runs on the caller's stream (fj_run_options.stream, nvptx programs):
 * - Every copy and launch of the run (uploads of host inputs, launches,
 *   device-to-device copies, downloads into host outputs) is queued on the
 *   stream, after the work the caller queued there before the call.
 * - When every input and output (and, for a forward with saved_on_device,
 *   every saved value; for a backward, the saved values) is a dense CUDA
 *   tensor, the call returns without waiting: the results are ready when
 *   the stream reaches them, as for any kernel queued there. Exception: a
 *   graph whose kernels can report a run-time error (an index out of
 *   range, argmax of an empty dim ...) waits for the stream to read their
 *   error flags.
 * - With any host tensor involved (or a strided or misaligned CUDA tensor,
 *   which is staged), the call synchronises the stream before returning
 *   (and, for staged CUDA inputs, before reading them): host buffers may
 *   then be reused at once.
 * - Device memory fusejit keeps (a program's buffers, saved values) is
 *   recycled by its caching allocator only once the work queued on it is
 *   done: a run of a program on another stream first waits, on the device,
 *   for the program's work still queued on the previous one; a shape change
 *   (new buffers), fj_program_destroy and fj_saved_destroy wait on the host
 *   for it. A backward on another stream than its forward waits, on the
 *   device, for the forward's saved values.
 * - The caller keeps the stream alive until the queued work is done, and
 *   orders its own later reads of the outputs on that stream (or syncs it).
 * On the emulator (nvptx_device=emulator) a stream is any non-NULL token
 * and every call runs synchronously. */

/* fj_program_run, fj_program_forward and fj_program_backward with options
 * (o may be NULL: the plain calls). */
FJ_API fj_status fj_program_run_with(fj_program *p, const fj_run_options *o, const fj_tensor *inputs,
                                     size_t ninputs, fj_tensor *outputs, size_t noutputs);
FJ_API fj_status fj_program_forward_with(fj_program *p, const fj_run_options *o, const fj_tensor *inputs,
                                         size_t ninputs, fj_tensor *outputs, size_t noutputs, fj_saved **saved);
/* fj_program_backward_with ignores o->saved_on_device (saved tells where they are). */
FJ_API fj_status fj_program_backward_with(fj_program *p, const fj_run_options *o, const fj_saved *saved,
                                          const fj_tensor *tangents, size_t ntangents, fj_tensor *grads,
                                          size_t ngrads);

/* ======================================================================
 * Queries: sizes before a run, what a graph takes, what was compiled
 * ====================================================================== */

/* Binds the program's symbolic sizes as a run (the forward, for training)
 * with these inputs would, checking every shape, without running anything.
 * inputs[k] (ninputs = fj_program_count(p, FJ_ROLE_INPUT)) is input k's
 * descriptor, of which only dtype, rank and sizes are read (data may be
 * NULL), or NULL when it is not known: its sizes then come from the other
 * inputs and o's dims. Fills each array that is not NULL:
 *   in_info[count(FJ_ROLE_INPUT)], out_info[count(FJ_ROLE_OUTPUT)]: as
 *     fj_program_info, with the concrete sizes and bytes;
 *   index_bounds[count(FJ_ROLE_INPUT)]: for an integer input the graph (as
 *     written, before any pass) uses directly as an index (the index,
 *     indices or target operand of a gather, an embedding, a loss ...), the
 *     size of the dim it indexes: valid values lie in [0, bound); else -1.
 * Errors are the ones a run would report for these shapes (an unbound
 * symbol names it and --dim, as fusejit-run spells it). */
FJ_API fj_status fj_program_sizes(fj_program *p, const fj_run_options *o, const fj_tensor *const *inputs,
                                  size_t ninputs, fj_value_info *in_info, fj_value_info *out_info,
                                  int64_t *index_bounds);

/* What graph `graph` of m ("main" or "@main"; NULL: @main, else the first)
 * takes (FJ_ROLE_INPUT) and returns (FJ_ROLE_OUTPUT) as written, before any
 * pass: fj_program_info's fields, except that type is NULL and that a
 * returned literal has the name "" (a value returned twice has the same
 * name twice). The count is 0 for an unknown graph or another role. */
FJ_API size_t fj_module_value_count(const fj_module *m, const char *graph, fj_value_role role);
FJ_API fj_status fj_module_value_info(const fj_module *m, const char *graph, fj_value_role role, size_t i,
                                      fj_value_info *out);

/* What fj_compile made of a program. Initialise with fj_program_stats_init;
 * fj_program_stats fills the fields struct_size covers. */
typedef struct fj_program_stats {
	uint32_t struct_size;      /* sizeof(fj_program_stats), set by _init */
	uint32_t compiled;         /* kernels fj_compile generated for the graph (training: the
	                              forward), found in no cache */
	uint32_t kernels;          /* nvptx: fused kernels the graph (training: the forward) launches */
	uint32_t kernels_backward; /* nvptx, training: those of the backward */
	int threads;               /* host: the threads a run uses; aten: 1; nvptx: 0 */
	const char *device;        /* nvptx: the device's name ("emulator" on the emulator); else NULL */
	const char *target;        /* nvptx: the architecture compiled for ("sm_90"); else NULL */
} fj_program_stats;

FJ_API void fj_program_stats_init(fj_program_stats *s);
FJ_API fj_status fj_program_stats_get(const fj_program *p, fj_program_stats *out);

/* ======================================================================
 * Benchmarks (fusejit-run --bench)
 * ====================================================================== */

typedef struct fj_bench_options {
	uint32_t struct_size;       /* sizeof(fj_bench_options), set by _init */
	int reps;                   /* host, aten: timed runs: 0 = as many as fit in about 0.5 s
	                               (5 to 1000); else exactly this many (at most 1000);
	                               nvptx: the device benchmark picks its own */
	int backward;               /* training: time the backward; inputs are then the tangents */
	const fj_saved *saved;      /* backward: the saved values of a forward run of p */
	const fj_run_options *run;  /* dims and origins (may be NULL) */
} fj_bench_options;

typedef struct fj_bench_result {
	uint32_t struct_size; /* sizeof(fj_bench_result), set by _init */
	double median_ms;     /* host, aten: the median wall-clock time of a run after a warm-up
	                         (up to 3 runs, 200 ms); nvptx: of the launches alone, timed with
	                         CUDA events on the device */
	double copy_ms;       /* the same-run baseline, the median of as many copies of bytes/2:
	                         host: a memcpy split over the host executor's threads; nvptx: a
	                         device-to-device copy */
	int reps;             /* timed runs */
	size_t bytes;         /* bytes of the inputs and outputs of one run */
} fj_bench_result;

FJ_API void fj_bench_options_init(fj_bench_options *o);
FJ_API void fj_bench_result_init(fj_bench_result *r);
/* Times runs of p on inputs (host tensors, as a run takes them; the outputs
 * are fusejit's and discarded).
 * nvptx on the emulator: FJ_ERR_UNSUPPORTED (no CUDA events). The run
 * options' stream is not used (the benchmark times fusejit's own), and
 * device-resident saved values are refused (FJ_ERR_UNSUPPORTED). */
FJ_API fj_status fj_program_bench(fj_program *p, const fj_bench_options *o, const fj_tensor *inputs,
                                  size_t ninputs, fj_bench_result *out);

/* ======================================================================
 * Checking results (fusejit-run --check=aten and --check=f64, IR.md §5)
 * ====================================================================== */

typedef enum fj_check {
	FJ_CHECK_ATEN = 0, /* against the aten executor: relative L2 error */
	FJ_CHECK_F64 = 1   /* against the graph computed in f64 (fj_reference_f64) */
} fj_check;

/* The tolerance of a dtype: aten: f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12;
 * f64: f32 1e-5, f16 1e-2, bf16 5e-2, f64 1e-12; integers and bools 0
 * (exact). */
FJ_API double fj_check_tolerance(fj_check c, fj_scalar_type t);
/* The error of out against ref (dense host tensors of one shape): aten:
 * ||out - ref|| / ||ref|| (||out - ref|| when ||ref|| is 0); f64:
 * ||out - rnd(ref)|| / (||ref|| + scale), rnd rounding to out's dtype. NaN
 * and inf are left out of the norms and must sit at the same places: else
 * *placed (may be NULL) is 0 and the error +inf. */
FJ_API double fj_check_error(fj_check c, const fj_tensor *out, const fj_tensor *ref, double scale, int *placed);

/* Element i (row-major) of a dense host tensor as a double (bool: 0 or 1;
 * bf16 and f16 converted exactly), and its store (floats rounded to nearest
 * even, integers truncated). */
FJ_API double fj_tensor_get_f64(const fj_tensor *t, int64_t i);
FJ_API void fj_tensor_set_f64(fj_tensor *t, int64_t i, double v);

/* The f64 reference of a graph: the graph with every float value computed
 * in f64 on aten, on the same inputs (float ones converted exactly), and
 * twice more with every float result perturbed by a relative 2^-20 (seeds 1
 * and 2): a value's scale is the largest ||perturbed - ref|| / 2^-20, the
 * error its roundings explain. */
typedef struct fj_reference_options {
	uint32_t struct_size;      /* sizeof(fj_reference_options), set by _init */
	const char *graph;         /* as fj_compile_options.graph */
	int training;              /* nonzero: the forward's outputs, then the gradients, through
	                              fj_compile's training pipeline */
	const fj_run_options *run; /* dims (may be NULL) */
} fj_reference_options;

typedef struct fj_reference fj_reference;

FJ_API void fj_reference_options_init(fj_reference_options *o);
/* inputs: one per parameter of the graph; training: tangents, one per
 * FJ_ROLE_TANGENT of a training program of the same graph, in order; all
 * dense host tensors (fusejit-run passes the same inputs as its run). The
 * graphs run on aten as they are, without a copy; o's dims bind sizes no
 * input fixes. */
FJ_API fj_status fj_reference_f64(fj_context *ctx, const fj_module *m, const fj_reference_options *o,
                                  const fj_tensor *inputs, size_t ninputs, const fj_tensor *tangents,
                                  size_t ntangents, fj_reference **out);
/* Outputs, then (training) gradients. */
FJ_API size_t fj_reference_count(const fj_reference *r);
/* Value i's reference (ref, may be NULL: a read-only host view, f64 for
 * float values), its scale, and the tolerance a float result of dtype dt is
 * held to: the largest of dt's and those of the roundings its value went
 * through in the graph as compiled (an f64 output of f32 math: f32's); 0
 * for integers and bools. */
FJ_API fj_status fj_reference_value(const fj_reference *r, size_t i, fj_scalar_type dt, fj_tensor *ref,
                                    double *scale, double *tolerance);
FJ_API void fj_reference_destroy(fj_reference *r);

/* ======================================================================
 * The kernel cache
 *
 * In memory: per context, keyed by each kernel's key (what it computes, its
 * dtypes and ranks, schedule and target); a kernel is compiled once per
 * context. On disk: host object code (and PTX), in FUSEJIT_CACHE_DIR,
 * default $XDG_CACHE_HOME/fusejit, else ~/.cache/fusejit; FUSEJIT_CACHE_DIR=off
 * disables it. Entries are keyed by the kernels' keys, the fusejit and LLVM
 * versions and the host CPU, written atomically, verified on read (a
 * corrupt entry is rebuilt), and capped at FUSEJIT_CACHE_MAX_MB (default
 * 256) with least-recently-used eviction.
 * ====================================================================== */

/* Overrides the environment for this context: dir NULL = the environment's
 * choice, "off" = no disk cache; max_bytes 0 = FUSEJIT_CACHE_MAX_MB. Call it
 * before compiling. */
FJ_API fj_status fj_context_set_cache(fj_context *ctx, const char *dir, uint64_t max_bytes);

typedef struct fj_cache_stats {
	uint64_t kernels_compiled; /* kernels LLVM generated in this context */
	uint64_t kernels_loaded;   /* kernels loaded from the disk cache */
	uint64_t memory_hits;      /* kernels found in the in-memory cache */
	uint64_t disk_hits, disk_misses, disk_corrupt, disk_stores, disk_evictions;
} fj_cache_stats;

FJ_API void fj_context_cache_stats(fj_context *ctx, fj_cache_stats *out);

#ifdef __cplusplus
}
#endif
#endif
