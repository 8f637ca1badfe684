/* api.h -- shared by the public API implementation files in api/. */
#ifndef FJ_API_INTERNAL_H
#define FJ_API_INTERNAL_H

#include "ir.h"
#include "runtime/executor.h"

/* Records "fn: what" as FJ_ERR_INVALID on ctx (when ctx is not NULL). */
fj_status fj_api_arg_error(fj_context *ctx, const char *fn, const char *what);
/* Parses sizes written as in the text format ("N,64", "[N*2, 64]") into
 * dims[0..*rank) of module m; *end is where parsing stopped. With minus1 not
 * NULL, a size may be -1 (minus1[k] is then true and dims[k] 1). */
fj_status fj_api_parse_dims(fj_context *ctx, fj_module *m, const char *s, bool *minus1, fj_dim *dims, int *rank,
                            const char **end);

/* ---- option structs (api/options.c; the ABI policy of fusejit.h) ---- */

/* The run options o (NULL: defaults) with every field o's struct_size does
 * not cover at its default. FJ_ERR_INVALID when o was not initialised. */
fj_status fj_api_run_options(fj_context *ctx, const fj_run_options *o, fj_run_options *out);
/* Copies the first min(src_size, size) bytes of src over dst (which holds
 * the defaults); false when src_size is too small to be an initialised
 * struct (less than its struct_size field). */
bool fj_api_copy_in(void *dst, size_t size, const void *src, uint32_t src_size);
/* Writes the fields of src (size bytes, starting with its struct_size) that
 * the caller's dst covers (dst's struct_size), keeping dst's struct_size. */
void fj_api_copy_out(void *dst, const void *src, size_t size);

/* A dense host fj_tensor seen as a runtime tensor (api/check.c). */
fj_rt_tensor fj_api_rt_view(const fj_tensor *t);

/* ---- tensors copied through a dense buffer (api/staging.c) ---- */

/* Copies n elements of es bytes between strided tensor t (host memory) and
 * the dense buffer dense (to_dense: gather; else scatter). */
void fj_api_strided_copy(const fj_tensor *t, void *dense, size_t es, int64_t n, bool to_dense);
/* Input: into the dense host buffer d (n elements), strided or misaligned
 * CUDA tensor t, its span downloaded from device dv. */
fj_status fj_api_stage_in(fj_context *ctx, const fj_nvptx_device *dv, const fj_tensor *t, void *d, int64_t n);
/* Output: the dense host result d (n elements) into strided or misaligned
 * CUDA tensor u: its span downloaded, scattered into and uploaded (the gaps
 * keep their bytes). */
fj_status fj_api_stage_out(fj_context *ctx, const fj_nvptx_device *dv, const fj_tensor *u, void *d, int64_t n);

/* ---- a program's instances, for queries and benchmarks (api/program.c) ---- */

/* An idle instance of one of a program's graphs, with inputs as a run
 * converts them. */
typedef struct fj_api_inst {
	const fj_graph *g;
	fj_rt_exec *rt;                /* the compiled graph (runtime/executor.h) */
	const fj_rt_tensor *const *in; /* one per parameter; NULL: not given (shapes only) */
	const char *const *origin;     /* per parameter, for messages */
	const fj_rt_dimarg *dims;
	size_t ndims;
	const fj_dim *index_dims;      /* per parameter (the graph as written, api/query.c), or NULL */
} fj_api_inst;

typedef fj_status (*fj_api_inst_fn)(void *ud, const fj_api_inst *i);

/* What to take an instance for. */
typedef struct fj_api_use {
	bool backward;                 /* training: the backward (inputs: saved's values, then in) */
	const fj_saved *saved;
	const fj_tensor *const *in;    /* n tensors (shapes_only: NULL entries allowed) */
	size_t n;
	const fj_run_options *run;
	bool shapes_only;              /* only the inputs' shapes are read; the device is not entered */
} fj_api_use;

/* Takes an idle instance, converts the inputs, enters the device (unless
 * shapes_only), calls fn and puts the instance back, to be bound again by
 * the next run (fn may bind it to anything). */
fj_status fj_api_program_with(fj_program *p, const fj_api_use *u, fj_api_inst_fn fn, void *ud);
fj_context *fj_api_program_context(const fj_program *p);
/* fj_compile's default pipeline (training: autodiff + partition). */
const char *fj_api_default_pipeline(bool training);
/* nvptx on the host emulator (no CUDA events: no benchmark). */
bool fj_api_program_emulated(const fj_program *p);

/* For each parameter of g (as written), the dim it indexes when it is used
 * directly as an index operand, else FJ_API_NO_BOUND (api/query.c). */
#define FJ_API_NO_BOUND INT64_MIN
fj_status fj_api_index_dims(fj_context *ctx, const fj_graph *g, fj_dim **out, uint32_t *n);

#endif
