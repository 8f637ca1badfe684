/* program.c -- the public API's compile and run (include/fusejit/fusejit.h).
 *
 * fj_compile copies the chosen graph into a module of the program's own
 * (ir/clone.c: the caller's module is only read, and may be destroyed or
 * compiled again by other threads), runs the executor's pipeline on it (training:
 * autodiff + partition, giving @f.fw and @f.bw) and compiles one runtime
 * program (runtime/program.h) per graph to run.
 *
 * Runs: a runtime program holds mutable state (bound sizes, buffers), so each
 * fj_program keeps, per graph, a pool of runtime programs ("instances"); a
 * run takes an idle one or creates another (its kernels come from the
 * context's kernel cache: no compilation), binds it when the input shapes
 * differ from its last run, runs and puts it back. So any number of threads
 * may run one program at once.
 *
 * Tensors: inputs that are dense and aligned to their element size are used
 * in place; others (strided, misaligned) are copied to a dense buffer first.
 * Outputs are written in place when the caller's buffer is dense and aligned,
 * else computed into a temporary and copied out with the caller's strides;
 * outputs without data are allocated (fj_rt_aligned_alloc) and handed over
 * with FJ_TENSOR_OWNED.
 *
 Executors: each instance is one compiled program of the runtime's executor
 * interface (runtime/executor.h: aten, host or nvptx), which binds and
 * checks every node's shapes on the concrete sizes the same way for all
 * three. nvptx runs on the program's device (backend_nvptx/device.h: the
 * CUDA driver's primary context, or the host emulator with the context's
 * option nvptx_device=emulator), entered around each bind and run. CUDA
 * tensors (device pointers) are used in place: inputs are not uploaded and
 * outputs are written by the kernels directly (fj_rt_nvptx_run_dev) when
 * they are dense; strided or misaligned ones are staged through the host
 * (their span downloaded, gathered or scattered, uploaded). Host tensors
 * are uploaded and downloaded.
 *
 * Run options (fj_run_options: dims, origins) reach the binds; the accessors
 * at the end (api/api.h) lend an instance to api/query.c and api/bench.c. Outputs fusejit allocates are host memory,
 * and so are a training program's saved values (the backward uploads them),
 * unless the forward's run options ask for them on the device
 * (saved_on_device: device buffers the backward reads in place).
 *
 * Streams (fj_run_options.stream, nvptx): each run points its instance at
 * the caller's stream (runtime/program_nvptx.h holds the rules for the
 * instance's own buffers); device-resident saved values carry a fence, an
 * event behind their last use on a caller's stream, which a backward on
 * another stream waits for on the device and fj_saved_destroy on the host. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "passes/pass.h"
#include "runtime/executor.h"

_Static_assert(FJ_MAX_DIMS == FJ_MAX_RANK, "public and internal ranks agree");
_Static_assert((int)FJ_TYPE_F64 == (int)FJ_DT_F64 && (int)FJ_TYPE_BF16 == (int)FJ_DT_BF16 &&
                   (int)FJ_TYPE_I64 == (int)FJ_DT_I64 && (int)FJ_TYPE_BOOL == (int)FJ_DT_BOOL &&
                   (int)FJ_TYPE_U8 == (int)FJ_DT_U8 && FJ_DT_COUNT == 10,
               "fj_scalar_type follows ir/dtypes.def");

#define NROLES 5
#define BSTRIDE (FJ_MAX_RANK + 1)

typedef struct inst {
	fj_rt_exec *rt;     /* the compiled program (runtime/executor.h) */
	bool bound;
	int64_t *bdims; /* nparams * BSTRIDE: the input sizes, then dtype and rank, it was bound with */
	struct inst *next;
} inst;

typedef struct part {
	fj_graph *g;
	inst *idle;
	uint32_t ninst;
} part;

struct fj_program {
	fj_context *ctx;
	fj_module *m;
	fj_executor ex;
	const fj_rt_executor *rex;
	fj_nvptx_device dev;  /* nvptx: the device (the CUDA driver, or the host emulator) */
	bool training;
	int threads;          /* host: at most this many threads (0: all) */
	pthread_mutex_t lock; /* guards the instance pools */
	part main;            /* inference: the graph; training: the forward */
	part bw;              /* training: the backward */
	uint32_t nout;        /* outputs the caller sees */
	uint32_t nsaved;
	fj_value_info *info[NROLES];
	size_t ninfo[NROLES];
	fj_dim *index_dims;   /* per parameter of the graph as written: the dim it indexes (api/query.c) */
	uint32_t nindex_dims;
};

/* Where device-resident saved values were last used on a caller's stream:
 * an event behind that work (nvptx with events only). */
typedef struct saved_fence {
	void *ev;
	void *stream;
	bool pending;
} saved_fence;

struct fj_saved {
	fj_program *p;
	uint32_t n;
	fj_rt_tensor *t;       /* on_device: data is the device address */
	bool on_device;
	saved_fence *fence;    /* on_device: where they were last used */
	const char **names;
	int64_t *syms;   /* per symbol of p->m: the size the forward bound, or -1 */
	uint32_t nsyms;
	bool *borrowed;  /* per saved value: the caller's input or output itself (saved_in_place), not ours to free */
};

static fj_status oom(fj_context *ctx) { return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory"); }

void fj_compile_options_init(fj_compile_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof *o);
	o->struct_size = sizeof *o;
	o->executor = FJ_EXECUTOR_AUTO;
}

/* ---- pipelines ---- */

/* The executors' default pipelines. The host and aten executors run the
 * per-op kernels of runtime/program.c; once the fused host executor runs
 * fusion.kernel regions, host becomes IR.md §5's `default` / `train`. The
 * host's training forward saves an attention's logsumexp instead of its
 * weights (partition{attention=true}): its fused backward recomputes them
 * (the attention_bw region); the others keep the weights. */
static const char *default_pipeline(fj_executor ex, bool training)
{
	if (!training)
		return "verify";
	return ex == FJ_EXECUTOR_HOST
	           ? "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition{attention=true}"
	           : "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition";
}

/* ---- the nvptx device ---- */

/* The device is shared by the runs of every thread (backend_nvptx/device.h):
 * enter it before a bind, a run or a free, leave it after; *held says
 * whether it was entered (there is no device to enter on the host). */
static fj_status enter_device(fj_program *p, bool *held)
{
	fj_status st = p->dev.enter ? p->dev.enter(p->dev.ud) : FJ_OK;
	*held = p->dev.enter && st == FJ_OK;
	return st;
}

static void leave_device(fj_program *p, bool held)
{
	if (held)
		p->dev.leave(p->dev.ud);
}

/* The kernels are compiled for the GPU's own architecture (or the context's
 * nvptx_target option's): a target option naming another one is refused
 * rather than ignored. The emulator has no architecture: any target goes. */
static fj_status check_nvptx_target(fj_program *p, const char *target)
{
	const char *sm = p->dev.target;
	if (!target || p->dev.emulated || strcmp(target, sm) == 0)
		return FJ_OK;
	return fj_error_status(p->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
	                       "target %s: the nvptx executor compiles for the GPU's architecture, %s, here (leave "
	                       "target NULL, or set the context's nvptx_target option)",
	                       target, sm);
}

/* ---- value infos ---- */

static fj_status fill_info(fj_program *p, const fj_graph *g, fj_vid v, const char *name, fj_value_info *out)
{
	const fj_value *val = &g->values[v];
	memset(out, 0, sizeof *out);
	out->name = name ? name : val->name ? val->name : "";
	out->dtype = (fj_scalar_type)val->type.dtype;
	int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
	out->rank = rank;
	char buf[512];
	size_t k = (size_t)snprintf(buf, sizeof buf, "%s[", fj_dtype_name(val->type.dtype));
	size_t bytes = (size_t)fj_dtype_size(val->type.dtype);
	for (int d = 0; d < rank; d++) {
		fj_dim dim = val->type.dims[d];
		out->sizes[d] = fj_dim_is_static(dim) ? dim : -1;
		if (fj_dim_is_static(dim))
			bytes *= (size_t)dim;
		else
			bytes = 0;
		if (k < sizeof buf - 1)
			k += (size_t)snprintf(buf + k, sizeof buf - k, "%s", d ? "," : "");
		if (k < sizeof buf - 1)
			k += (size_t)fj_dim_format(g->module, dim, buf + k, sizeof buf - k);
	}
	if (k < sizeof buf - 1)
		snprintf(buf + k, sizeof buf - k, "]");
	out->bytes = bytes;
	out->type = fj_arena_strdup(&p->m->arena, buf);
	return out->type ? FJ_OK : oom(p->ctx);
}

static fj_status make_infos(fj_program *p, const fj_graph *orig)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->main.g, *bw = p->bw.g;
	size_t n[NROLES] = {g->nparams, p->nout, p->nsaved, bw ? bw->nparams - p->nsaved : 0, bw ? bw->nresults : 0};
	for (int r = 0; r < NROLES; r++) {
		p->ninfo[r] = n[r];
		p->info[r] = fj_alloc(ctx, (n[r] ? n[r] : 1) * sizeof(fj_value_info));
		if (!p->info[r])
			return oom(ctx);
	}
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++)
		st = fill_info(p, g, g->params[i], NULL, &p->info[FJ_ROLE_INPUT][i]);
	for (uint32_t i = 0; i < p->nout && st == FJ_OK; i++)
		st = fill_info(p, g, g->results[i], NULL, &p->info[FJ_ROLE_OUTPUT][i]);
	for (uint32_t i = 0; i < p->nsaved && st == FJ_OK; i++)
		st = fill_info(p, g, g->results[p->nout + i], NULL, &p->info[FJ_ROLE_SAVED][i]);
	if (!bw)
		return st;
	for (size_t i = 0; i < n[FJ_ROLE_TANGENT] && st == FJ_OK; i++)
		st = fill_info(p, bw, bw->params[p->nsaved + i], NULL, &p->info[FJ_ROLE_TANGENT][i]);
	/* gradients: one per floating-point parameter not marked nograd, in order */
	uint32_t gi = 0;
	for (uint32_t i = 0; i < orig->nparams && st == FJ_OK; i++) {
		const fj_value *pv = &orig->values[orig->params[i]];
		if (!fj_dtype_is_float(pv->type.dtype) || pv->nograd)
			continue;
		if (gi < bw->nresults)
			st = fill_info(p, bw, bw->results[gi], pv->name, &p->info[FJ_ROLE_GRADIENT][gi]);
		gi++;
	}
	for (; gi < bw->nresults && st == FJ_OK; gi++)
		st = fill_info(p, bw, bw->results[gi], NULL, &p->info[FJ_ROLE_GRADIENT][gi]);
	return st;
}

/* ---- compile ---- */

static void free_pool(fj_program *p, part *pt)
{
	for (inst *i = pt->idle, *next; i; i = next) {
		next = i->next;
		/* the device's allocator takes the buffers back: entered */
		bool held;
		enter_device(p, &held);
		fj_rt_exec_destroy(i->rt);
		leave_device(p, held);
		fj_free(p->ctx, i->bdims, (pt->g->nparams ? pt->g->nparams : 1) * BSTRIDE * sizeof *i->bdims);
		fj_free(p->ctx, i, sizeof *i);
	}
	pt->idle = NULL;
}

void fj_program_destroy(fj_program *p)
{
	if (!p)
		return;
	fj_context *ctx = p->ctx;
	if (p->main.g)
		free_pool(p, &p->main);
	if (p->bw.g)
		free_pool(p, &p->bw);
	for (int r = 0; r < NROLES; r++)
		if (p->info[r])
			fj_free(ctx, p->info[r], (p->ninfo[r] ? p->ninfo[r] : 1) * sizeof(fj_value_info));
	if (p->index_dims)
		fj_free(ctx, p->index_dims, (p->nindex_dims ? p->nindex_dims : 1) * sizeof *p->index_dims);
	fj_module_destroy(p->m);
	fj_nvptx_device_close(&p->dev); /* after the instances: their kernels live in it */
	pthread_mutex_destroy(&p->lock);
	fj_free(ctx, p, sizeof *p);
}

static fj_status new_inst(fj_program *p, part *pt, inst **out)
{
	fj_context *ctx = p->ctx;
	inst *i = fj_alloc(ctx, sizeof *i);
	if (!i)
		return oom(ctx);
	memset(i, 0, sizeof *i);
	size_t nb = (pt->g->nparams ? pt->g->nparams : 1) * BSTRIDE * sizeof *i->bdims;
	i->bdims = fj_alloc(ctx, nb);
	fj_rt_exec_options eo = {.threads = p->threads, .device = p->dev.alloc ? &p->dev : NULL};
	fj_status st = i->bdims ? fj_rt_exec_create(p->rex, ctx, pt->g, &eo, &i->rt) : oom(ctx);
	if (st != FJ_OK) {
		if (i->bdims)
			fj_free(ctx, i->bdims, nb);
		fj_free(ctx, i, sizeof *i);
		return st;
	}
	*out = i;
	return FJ_OK;
}

fj_status fj_compile(fj_context *ctx, const fj_module *m, const fj_compile_options *o, fj_program **out)
{
	if (out)
		*out = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!m || !out)
		return fj_api_arg_error(ctx, "fj_compile", "m and out may not be NULL");
	if (m->ctx != ctx)
		return fj_api_arg_error(ctx, "fj_compile", "the module belongs to another context");
	fj_compile_options opts;
	fj_compile_options_init(&opts);
	if (o && (o->struct_size < offsetof(fj_compile_options, training) + sizeof(int) || /* older: no threads */
	          !fj_api_copy_in(&opts, sizeof opts, o, o->struct_size)))
		return fj_api_arg_error(ctx, "fj_compile", "options not initialised (fj_compile_options_init)");
	if (opts.threads < 0)
		return fj_api_arg_error(ctx, "fj_compile", "threads must be 0 (all cores) or positive");
	const fj_rt_executor *rex;
	fj_executor ex = opts.executor;
	switch (ex) {
	case FJ_EXECUTOR_AUTO: /* IR.md §5: nvptx when a CUDA driver and a GPU are usable (the emulator is not a GPU) */
		rex = fj_rt_executor_auto(ctx, NULL);
		ex = rex == &fj_rt_nvptx_executor ? FJ_EXECUTOR_NVPTX : FJ_EXECUTOR_HOST;
		break;
	case FJ_EXECUTOR_HOST: rex = &fj_rt_host_executor; break;
	case FJ_EXECUTOR_ATEN: rex = &fj_rt_aten_executor; break;
	case FJ_EXECUTOR_NVPTX: rex = &fj_rt_nvptx_executor; break;
	default: return fj_api_arg_error(ctx, "fj_compile", "unknown executor");
	}
	fj_nvptx_device dev = {0}; /* nvptx: the CUDA driver, or the emulator the settings ask for */
	if (ex == FJ_EXECUTOR_NVPTX) {
		fj_status dst = fj_nvptx_device_open(ctx, &dev);
		if (dst != FJ_OK)
			return dst;
	}
	if (opts.target && !fj_nvptx_sm_supported(opts.target)) { /* backend_nvptx/nvptx_api.h's whitelist */
		fj_nvptx_device_close(&dev);
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "unknown target '%s' (expected sm_80, sm_86, sm_89, sm_90 or sm_90a)", opts.target);
	}
	/* the graph */
	const fj_graph *g0 = NULL;
	if (opts.graph) {
		const char *name = opts.graph[0] == '@' ? opts.graph + 1 : opts.graph;
		g0 = fj_module_find_graph(m, name);
		if (!g0) {
			fj_nvptx_device_close(&dev);
			return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "the module has no graph named @%s", name);
		}
	} else {
		if (!m->ngraphs) {
			fj_nvptx_device_close(&dev);
			return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "no graph to compile (the module is empty)");
		}
		g0 = fj_module_find_graph(m, "main");
		if (!g0)
			g0 = m->graphs[0];
	}
	/* the program's own copy */
	fj_program *p = fj_alloc(ctx, sizeof *p);
	if (!p) {
		fj_nvptx_device_close(&dev);
		return oom(ctx);
	}
	memset(p, 0, sizeof *p);
	p->ctx = ctx;
	p->ex = ex;
	p->rex = rex;
	p->dev = dev;
	p->training = opts.training != 0;
	p->threads = opts.threads;
	pthread_mutex_init(&p->lock, NULL);
	fj_graph *copy = NULL;
	fj_status st = fj_graph_clone(g0, &p->m, &copy);
	if (st == FJ_OK) /* index bounds of the graph as written (api/query.c) */
		st = fj_api_index_dims(ctx, copy, &p->index_dims, &p->nindex_dims);
	if (st != FJ_OK) {
		fj_program_destroy(p);
		return st;
	}
	const fj_graph *orig = p->m->graphs[0];
	const char *pipeline = opts.pipeline ? opts.pipeline : default_pipeline(ex, p->training);
	fj_pipeline_opts po = {0};
	po.verify_each = true;
	st = fj_run_pipeline(p->m, pipeline, &po);
	if (st != FJ_OK) {
		fj_program_destroy(p);
		return st;
	}
	/* orig survives the pipeline only as a name: find the graphs by name */
	char name[512];
	snprintf(name, sizeof name, "%s", g0->name);
	if (p->training) {
		char fw[530], bw[530];
		snprintf(fw, sizeof fw, "%s.fw", name);
		snprintf(bw, sizeof bw, "%s.bw", name);
		p->main.g = fj_module_find_graph(p->m, fw);
		p->bw.g = fj_module_find_graph(p->m, bw);
		if (!p->main.g || !p->bw.g || p->main.g->num_fwd_outputs < 0) {
			fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
			                "training: the pipeline did not produce @%s and @%s (it needs autodiff and partition)",
			                fw, bw);
			fj_program_destroy(p);
			return FJ_ERR_INVALID;
		}
		p->nout = (uint32_t)p->main.g->num_fwd_outputs;
		p->nsaved = p->main.g->nresults - p->nout;
		orig = fj_module_find_graph(p->m, name);
	} else {
		p->main.g = fj_module_find_graph(p->m, name);
		if (!p->main.g) {
			fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "the pipeline removed graph @%s", name);
			fj_program_destroy(p);
			return FJ_ERR_INVALID;
		}
		p->nout = p->main.g->nresults;
	}
	/* the parameters' nograd marks, for naming the gradients: the forward keeps
	 * the primals in order; the original graph, when the pipeline kept it, has
	 * the annotations */
	st = make_infos(p, orig ? orig : p->main.g);
	/* compile: one instance per graph now, so that errors show at compile time */
	inst *i = NULL;
	if (st == FJ_OK && (st = new_inst(p, &p->main, &i)) == FJ_OK) {
		i->next = p->main.idle;
		p->main.idle = i;
		p->main.ninst++;
	}
	if (st == FJ_OK && p->bw.g && (st = new_inst(p, &p->bw, &i)) == FJ_OK) {
		i->next = p->bw.idle;
		p->bw.idle = i;
		p->bw.ninst++;
	}
	if (st == FJ_OK && ex == FJ_EXECUTOR_NVPTX)
		st = check_nvptx_target(p, opts.target);
	if (st != FJ_OK) {
		fj_program_destroy(p);
		return st;
	}
	*out = p;
	return FJ_OK;
}

fj_executor fj_program_executor(const fj_program *p) { return p ? p->ex : FJ_EXECUTOR_AUTO; }

size_t fj_program_count(const fj_program *p, fj_value_role role)
{
	return p && (unsigned)role < NROLES ? p->ninfo[role] : 0;
}

fj_status fj_program_info(const fj_program *p, fj_value_role role, size_t i, fj_value_info *out)
{
	if (!p || !out)
		return FJ_ERR_INVALID;
	if ((unsigned)role >= NROLES || i >= p->ninfo[role])
		return fj_error_status(p->ctx, FJ_ERR_INVALID, (fj_loc){0}, "fj_program_info: no value %zu of that role", i);
	*out = p->info[role][i];
	return FJ_OK;
}

/* ---- tensors ---- */

void fj_tensor_release(fj_tensor *t)
{
	if (!t || !(t->flags & FJ_TENSOR_OWNED))
		return;
	fj_rt_aligned_free(t->data);
	t->data = NULL;
	t->flags &= ~FJ_TENSOR_OWNED;
}

static bool numel_of(const int64_t *sizes, int rank, int64_t *n)
{
	return fj_rt_numel(sizes, rank, n);
}

/* Dense row-major with element-size alignment. */
static bool is_dense(const fj_tensor *t)
{
	size_t es = fj_scalar_type_size(t->dtype);
	if (es && (uintptr_t)t->data % es)
		return false;
	if (!t->strides)
		return true;
	int64_t want = 1;
	for (int k = t->rank - 1; k >= 0; k--) {
		if (t->sizes[k] != 1 && t->strides[k] != want)
			return false;
		want *= t->sizes[k];
	}
	return true;
}

static char empty_byte[FJ_RT_ALIGN] __attribute__((aligned(FJ_RT_ALIGN)));

static const char *const role_word[NROLES] = {"input", "output", "saved value", "tangent", "gradient"};

/* Where a tensor may live: host memory always; CUDA device memory for an
 * nvptx program only, on device 0 (the driver's primary context); strided
 * or misaligned CUDA tensors are staged (api/staging.c). */
static fj_status check_device(const fj_program *p, const fj_tensor *t, fj_value_role role, size_t i)
{
	fj_context *ctx = p->ctx;
	const char *what = role_word[role], *name = p->info[role][i].name;
	if (t->device == FJ_DEVICE_HOST)
		return FJ_OK;
	if (t->device != FJ_DEVICE_CUDA)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu (%%%s): unknown device %d", what, i, name,
		                       (int)t->device);
	if (p->ex != FJ_EXECUTOR_NVPTX)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "%s %zu (%%%s) is in CUDA device memory, which only the nvptx executor takes; this "
		                       "program runs on %s (pass host memory, or compile with FJ_EXECUTOR_NVPTX)",
		                       what, i, name, p->ex == FJ_EXECUTOR_ATEN ? "aten" : "host");
	if (t->device_index != 0)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "%s %zu (%%%s) is on CUDA device %d: the nvptx executor runs on device 0 only", what,
		                       i, name, (int)t->device_index);
	return FJ_OK;
}

static fj_status check_desc(const fj_program *p, const fj_tensor *t, fj_value_role role, size_t i, bool output)
{
	fj_context *ctx = p->ctx;
	const char *what = role_word[role];
	if (!t)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: NULL descriptor", what, i);
	if (output && !t->data)
		return FJ_OK;
	if ((unsigned)t->dtype >= FJ_DT_COUNT)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: invalid dtype %d", what, i, (int)t->dtype);
	if (t->rank < 0 || t->rank > FJ_MAX_DIMS)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: invalid rank %d (at most %d)", what, i,
		                       (int)t->rank, FJ_MAX_DIMS);
	for (int k = 0; k < t->rank; k++)
		if (t->sizes[k] < 0)
			return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: negative size %lld", what, i,
			                       (long long)t->sizes[k]);
	int64_t n;
	if (!numel_of(t->sizes, t->rank, &n))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: size overflows", what, i);
	if (n > 0 && !t->data)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "%s %zu: data is NULL", what, i);
	return check_device(p, t, role, i);
}

/* An input descriptor as a runtime tensor; *tmp receives a dense copy when
 * one was needed (free with fj_rt_aligned_free), *dev the device address of
 * a CUDA tensor (0 for host memory): rt->data is then that address too,
 * never read on the host. */
static fj_status input_tensor(const fj_program *p, const fj_tensor *t, size_t i, fj_value_role role, fj_rt_tensor *rt,
                              void **tmp, uint64_t *dev)
{
	fj_context *ctx = p->ctx;
	*tmp = NULL;
	*dev = 0;
	fj_status st = check_desc(p, t, role, i, false);
	if (st != FJ_OK)
		return st;
	memset(rt, 0, sizeof *rt);
	rt->dtype = (fj_dtype)t->dtype;
	rt->rank = t->rank;
	memcpy(rt->dims, t->sizes, (size_t)t->rank * sizeof *rt->dims);
	int64_t n;
	numel_of(t->sizes, t->rank, &n);
	size_t es = fj_scalar_type_size(t->dtype);
	rt->nbytes = rt->cap = (size_t)n * es;
	if (n == 0) {
		rt->data = empty_byte;
	} else if (t->device == FJ_DEVICE_CUDA && is_dense(t)) { /* used in place */
		rt->data = t->data;
		*dev = (uint64_t)(uintptr_t)t->data;
	} else if (t->device == FJ_DEVICE_CUDA) { /* staged: a dense host copy, uploaded by the run */
		void *d = fj_rt_aligned_alloc(rt->nbytes);
		fj_status sst = d ? fj_api_stage_in(ctx, &p->dev, t, d, n) : oom(ctx);
		if (sst != FJ_OK) {
			fj_rt_aligned_free(d);
			return sst;
		}
		rt->data = d;
		*tmp = d;
	} else if (is_dense(t)) {
		rt->data = t->data;
	} else {
		void *d = fj_rt_aligned_alloc(rt->nbytes);
		if (!d)
			return oom(ctx);
		if (!t->strides) /* dense but misaligned */
			memcpy(d, t->data, rt->nbytes);
		else
			fj_api_strided_copy(t, d, es, n, true);
		rt->data = d;
		*tmp = d;
	}
	return FJ_OK;
}

/* ---- the instances ---- */

/* Where result k of a graph run goes. */
typedef struct out_slot {
	fj_tensor *user;    /* the caller's descriptor, or NULL: keep in rt */
	fj_rt_tensor rt;
	bool scatter;       /* computed into a temporary, copied out to user */
	bool device;        /* no user: kept in device memory (rt.data: the address), allocated by the run */
	bool borrowed;      /* no user: rt is the memory of an input or output of the run (saved_in_place) */
} out_slot;

/* What a graph's run is told besides its tensors. */
typedef struct run_ctl {
	void *stream;       /* the caller's stream, or NULL */
	saved_fence *fence; /* device-resident saved values the run writes or reads, or NULL */
	bool borrow;        /* saved_in_place: saved values that are outputs share their memory */
} run_ctl;

static fj_status acquire(fj_program *p, part *pt, inst **out)
{
	pthread_mutex_lock(&p->lock);
	inst *i = pt->idle;
	if (i)
		pt->idle = i->next;
	pthread_mutex_unlock(&p->lock);
	if (!i) {
		fj_status st = new_inst(p, pt, &i);
		if (st != FJ_OK)
			return st;
		pthread_mutex_lock(&p->lock);
		pt->ninst++;
		pthread_mutex_unlock(&p->lock);
	}
	*out = i;
	return FJ_OK;
}

static void release(fj_program *p, part *pt, inst *i)
{
	pthread_mutex_lock(&p->lock);
	i->next = pt->idle;
	pt->idle = i;
	pthread_mutex_unlock(&p->lock);
}

static fj_status bind(inst *i, const fj_graph *g, const fj_rt_tensor *const *in, const char *const *origin,
                      const fj_rt_dimarg *dims, size_t ndims)
{
	bool same = i->bound && !ndims; /* --dim: bind again (origins only name inputs in errors) */
	for (uint32_t k = 0; same && k < g->nparams; k++)
		same = i->bdims[(size_t)k * BSTRIDE + FJ_MAX_RANK] == (int64_t)in[k]->dtype * 64 + in[k]->rank &&
		       memcmp(i->bdims + (size_t)k * BSTRIDE, in[k]->dims, (size_t)in[k]->rank * sizeof(int64_t)) == 0;
	if (same)
		return FJ_OK;
	i->bound = false;
	fj_status st = fj_rt_exec_bind(i->rt, in, origin, dims, ndims);
	if (st != FJ_OK)
		return st;
	for (uint32_t k = 0; k < g->nparams; k++) {
		memcpy(i->bdims + (size_t)k * BSTRIDE, in[k]->dims, (size_t)in[k]->rank * sizeof(int64_t));
		i->bdims[(size_t)k * BSTRIDE + FJ_MAX_RANK] = (int64_t)in[k]->dtype * 64 + in[k]->rank;
	}
	i->bound = true;
	return FJ_OK;
}

/* ---- streams and device-resident saved values ---- */

/* Whether the device leaves work queued when a call returns (events). */
static bool device_queues(const fj_program *p) { return p->dev.event_create && p->dev.stream_wait; }

/* Entered: the device's current stream waits for the saved values' last
 * use on another stream. */
static void destroy_fence(fj_program *p, saved_fence *f)
{
	if (f->ev)
		p->dev.event_destroy(p->dev.ud, f->ev);
	fj_free(p->ctx, f, sizeof *f);
}

static fj_status fence_wait(fj_program *p, const run_ctl *c)
{
	saved_fence *f = c->fence;
	if (!f || !f->pending || f->stream == c->stream)
		return FJ_OK;
	p->dev.set_stream(p->dev.ud, c->stream);
	return p->dev.stream_wait(p->dev.ud, f->ev);
}

/* Entered, after a run that used the saved values: an event behind it on
 * the caller's stream (none on fusejit's own: that run was synchronised). */
static fj_status fence_record(fj_program *p, const run_ctl *c)
{
	saved_fence *f = c->fence;
	if (!f || !device_queues(p))
		return FJ_OK;
	f->pending = false;
	if (!c->stream)
		return FJ_OK;
	p->dev.set_stream(p->dev.ud, c->stream);
	fj_status st = f->ev ? FJ_OK : p->dev.event_create(p->dev.ud, &f->ev);
	if (st == FJ_OK)
		st = p->dev.event_record(p->dev.ud, f->ev);
	f->pending = st == FJ_OK;
	f->stream = c->stream;
	return st;
}

/* Waits for the caller's stream on the host (before staging CUDA inputs). */
static fj_status sync_stream(fj_program *p, void *stream)
{
	bool held;
	fj_status st = enter_device(p, &held);
	if (st == FJ_OK && p->dev.set_stream) {
		p->dev.set_stream(p->dev.ud, stream);
		st = p->dev.sync(p->dev.ud);
	}
	leave_device(p, held);
	return st;
}

/* Entered: frees the device buffers of the device slots (a failed run). */
static void release_device_slots(fj_program *p, const fj_graph *g, out_slot *slots)
{
	for (uint32_t k = 0; k < g->nresults; k++)
		if (slots[k].device && slots[k].rt.data) {
			p->dev.release(p->dev.ud, (uint64_t)(uintptr_t)slots[k].rt.data);
			slots[k].rt.data = NULL;
		}
}

/* ---- running one graph ---- */

/* Entered, after the bind: where each result goes. outs[k]: a host buffer
 * for the run (or none: allocated by it); out_dev[k]: a device address. */
static fj_status place_outputs(fj_program *p, const inst *i, const fj_graph *g, out_slot *slots, fj_rt_tensor *outs,
                               uint64_t *out_dev)
{
	fj_context *ctx = p->ctx;
	for (uint32_t k = 0; k < g->nresults; k++) {
		fj_vid v = g->results[k];
		const fj_value *val = &g->values[v];
		int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
		const int64_t *want = fj_rt_exec_value_dims(i->rt, v);
		out_slot *s = &slots[k];
		memset(&outs[k], 0, sizeof outs[k]);
		fj_tensor *u = s->user;
		if (s->device) { /* a saved value kept on the device */
			fj_rt_tensor *t = &s->rt;
			memset(t, 0, sizeof *t);
			t->dtype = val->type.dtype;
			t->rank = rank;
			memcpy(t->dims, want, (size_t)rank * sizeof *want);
			fj_rt_nbytes(val->type.dtype, want, rank, &t->nbytes);
			t->cap = t->nbytes;
			uint64_t a = 0;
			fj_status st = p->dev.alloc(p->dev.ud, t->nbytes, &a);
			if (st != FJ_OK)
				return st;
			t->data = (void *)(uintptr_t)a;
			out_dev[k] = a;
			continue;
		}
		if (!u) {
			outs[k] = s->rt; /* kept: reuse when the type matches */
			continue;
		}
		bool same = u->data && (int)u->dtype == (int)val->type.dtype && u->rank == rank &&
		            memcmp(u->sizes, want, (size_t)rank * sizeof *want) == 0;
		if (u->data && (u->flags & FJ_TENSOR_OWNED) && !same) {
			fj_tensor_release(u);
		} else if (u->data && !same) {
			char got[160], exp[160];
			fj_rt_shape_str(u->sizes, u->rank < 0 || u->rank > FJ_MAX_DIMS ? 0 : u->rank, got, sizeof got);
			fj_rt_shape_str(want, rank, exp, sizeof exp);
			return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
			                       "output %u: the caller's tensor is %s%s, the result is %s%s", k,
			                       fj_scalar_type_name(u->dtype) ? fj_scalar_type_name(u->dtype) : "?", got,
			                       fj_dtype_name(val->type.dtype), exp);
		}
		if (u->data && u->device == FJ_DEVICE_CUDA && is_dense(u)) { /* written on the device, in place */
			out_dev[k] = (uint64_t)(uintptr_t)u->data;
			continue;
		}
		if (u->data && (u->flags & FJ_TENSOR_OWNED || is_dense(u))) {
			outs[k].data = u->data;
			outs[k].dtype = val->type.dtype;
			outs[k].rank = rank;
			memcpy(outs[k].dims, want, (size_t)rank * sizeof *want);
			fj_rt_nbytes(val->type.dtype, want, rank, &outs[k].nbytes);
			outs[k].cap = outs[k].nbytes;
			if (!outs[k].nbytes && !outs[k].data)
				outs[k].data = empty_byte;
		} else {
			s->scatter = u->data != NULL;
		}
	}
	return FJ_OK;
}

/* saved_in_place: a saved value (a result past p->nout) that is also output
 * j, written in place in host memory (the caller's dense tensor, or one
 * allocated here that hand_over gives the caller), is that memory; the
 * runtime, finding the result already there, copies nothing. */
static fj_status borrow_outputs(fj_program *p, const inst *i, const fj_graph *g, out_slot *slots, fj_rt_tensor *outs,
                                const uint64_t *out_dev)
{
	for (uint32_t k = p->nout; k < g->nresults; k++) {
		if (slots[k].borrowed || slots[k].device)
			continue;
		for (uint32_t j = 0; j < p->nout; j++) {
			const fj_tensor *u = slots[j].user;
			if (g->results[j] != g->results[k] || !u || out_dev[j] || slots[j].scatter ||
			    outs[j].data == (void *)empty_byte || (outs[j].data && outs[j].data != u->data))
				continue;
			if (!outs[j].data) { /* allocated now, handed over as the caller's */
				const fj_value *val = &g->values[g->results[j]];
				int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
				fj_status st = fj_rt_tensor_reshape(p->ctx, &outs[j], val->type.dtype, rank,
				                                    fj_rt_exec_value_dims(i->rt, g->results[j]));
				if (st != FJ_OK)
					return st;
				if (!outs[j].data) /* empty: nothing to share */
					break;
			}
			slots[k].rt = outs[k] = outs[j];
			slots[k].borrowed = true;
			break;
		}
	}
	return FJ_OK;
}

/* After the run (st its status): the results to the caller's descriptors. */
static fj_status hand_over(fj_program *p, const fj_graph *g, out_slot *slots, fj_rt_tensor *outs, fj_status st)
{
	for (uint32_t k = 0; k < g->nresults; k++) {
		out_slot *s = &slots[k];
		fj_tensor *u = s->user;
		if (s->device)
			continue;
		if (!u) {
			s->rt = outs[k];
			continue;
		}
		bool fresh = outs[k].data && outs[k].data != u->data && outs[k].data != (void *)empty_byte;
		if (st == FJ_OK && s->scatter) {
			int64_t n = fj_rt_tensor_numel(&outs[k]);
			if (u->device == FJ_DEVICE_CUDA) /* strided CUDA output: staged */
				st = fj_api_stage_out(p->ctx, &p->dev, u, outs[k].data, n);
			else if (u->strides)
				fj_api_strided_copy(u, outs[k].data, (size_t)fj_dtype_size(outs[k].dtype), n, false);
			else
				memcpy(u->data, outs[k].data, outs[k].nbytes);
		} else if (st == FJ_OK && fresh) {
			u->data = outs[k].data;
			u->dtype = (fj_scalar_type)outs[k].dtype;
			u->rank = outs[k].rank;
			memset(u->sizes, 0, sizeof u->sizes);
			memcpy(u->sizes, outs[k].dims, (size_t)outs[k].rank * sizeof *u->sizes);
			u->strides = NULL;
			u->device = FJ_DEVICE_HOST;
			u->flags |= FJ_TENSOR_OWNED;
			continue;
		}
		if (fresh)
			fj_rt_aligned_free(outs[k].data);
	}
	return st;
}

/* Runs graph pt on in[0..nparams) into slots[0..nresults). in_dev[k] != 0:
 * input k is a CUDA tensor at that address (nvptx only). origin and dims:
 * the run options' (fj_rt_program_bind); c: the stream and saved values'
 * fence. syms (may be NULL): the sizes the run bound, per symbol of p->m
 * (-1: unused). */
static fj_status run_graph(fj_program *p, part *pt, const fj_rt_tensor *const *in, const uint64_t *in_dev,
                           out_slot *slots, const char *const *origin, const fj_rt_dimarg *dims, size_t ndims,
                           const run_ctl *c, int64_t *syms)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = pt->g;
	inst *i;
	fj_status st = acquire(p, pt, &i);
	if (st != FJ_OK)
		return st;
	bool held;
	if ((st = enter_device(p, &held)) != FJ_OK) {
		release(p, pt, i);
		return st;
	}
	fj_rt_exec_set_stream(i->rt, c->stream); /* every time: the instance is pooled */
	st = fence_wait(p, c);
	if (st == FJ_OK)
		st = bind(i, g, in, origin, dims, ndims);
	size_t nr = g->nresults ? g->nresults : 1;
	fj_rt_tensor *outs = fj_alloc(ctx, nr * sizeof *outs);
	uint64_t *out_dev = fj_alloc(ctx, nr * sizeof *out_dev); /* CUDA outputs' addresses, 0: host */
	if (!outs || !out_dev) {
		fj_free(ctx, outs, nr * sizeof *outs);
		fj_free(ctx, out_dev, nr * sizeof *out_dev);
		leave_device(p, held);
		release(p, pt, i);
		return oom(ctx);
	}
	memset(outs, 0, nr * sizeof *outs);
	memset(out_dev, 0, nr * sizeof *out_dev);
	for (uint32_t k = 0; k < g->nresults; k++)
		if (!slots[k].user && !slots[k].device)
			outs[k] = slots[k].rt;
	if (st == FJ_OK)
		st = place_outputs(p, i, g, slots, outs, out_dev);
	if (st == FJ_OK && c->borrow)
		st = borrow_outputs(p, i, g, slots, outs, out_dev);
	if (st == FJ_OK)
		st = fj_rt_exec_run(i->rt, in, in_dev, outs, out_dev);
	if (st == FJ_OK)
		st = fence_record(p, c);
	if (st != FJ_OK)
		release_device_slots(p, g, slots);
	for (uint32_t k = 0; st == FJ_OK && syms && k < fj_symbol_count(p->m); k++)
		syms[k] = fj_rt_exec_symbol(i->rt, k);
	leave_device(p, held);
	release(p, pt, i);
	st = hand_over(p, g, slots, outs, st);
	fj_free(ctx, outs, nr * sizeof *outs);
	fj_free(ctx, out_dev, nr * sizeof *out_dev);
	return st;
}

/* The per-run scratch of a graph's run: its inputs as runtime tensors (rin),
 * the pointers the program reads (pin), the converted copies to free (tmp),
 * the CUDA inputs' addresses (dev, 0: host) and one slot per result. */
typedef struct run_scratch {
	size_t np, nr;
	fj_rt_tensor *rin;
	const fj_rt_tensor **pin;
	void **tmp;
	uint64_t *dev;
	out_slot *slots;
	const char **origin;   /* per parameter: the run options' origins, or NULL */
	fj_rt_dimarg *dims;    /* the run options' dims (the backward: then the forward's sizes) */
	size_t ndims, dims_cap;
	void *stream;          /* the run options' stream */
	bool saved_dev;        /* the run options' saved_on_device */
	bool saved_inplace;    /* the run options' saved_in_place */
} run_scratch;

static fj_status scratch_alloc(fj_context *ctx, const fj_graph *g, run_scratch *r)
{
	r->np = g->nparams ? g->nparams : 1;
	r->nr = g->nresults ? g->nresults : 1;
	r->rin = fj_alloc(ctx, r->np * sizeof *r->rin);
	r->pin = fj_alloc(ctx, r->np * sizeof *r->pin);
	r->tmp = fj_alloc(ctx, r->np * sizeof *r->tmp);
	r->dev = fj_alloc(ctx, r->np * sizeof *r->dev);
	r->slots = fj_alloc(ctx, r->nr * sizeof *r->slots);
	r->origin = fj_alloc(ctx, r->np * sizeof *r->origin);
	r->dims = NULL;
	r->ndims = r->dims_cap = 0;
	r->stream = NULL;
	r->saved_dev = r->saved_inplace = false;
	fj_status st = r->rin && r->pin && r->tmp && r->dev && r->slots && r->origin ? FJ_OK : oom(ctx);
	if (r->origin)
		memset(r->origin, 0, r->np * sizeof *r->origin);
	if (r->tmp)
		memset(r->tmp, 0, r->np * sizeof *r->tmp);
	if (r->dev)
		memset(r->dev, 0, r->np * sizeof *r->dev);
	if (r->slots)
		memset(r->slots, 0, r->nr * sizeof *r->slots);
	return st;
}

/* Frees the scratch and the input copies (the slots' tensors stay the caller's). */
static void scratch_free(fj_context *ctx, run_scratch *r)
{
	for (size_t k = 0; r->tmp && k < r->np; k++)
		fj_rt_aligned_free(r->tmp[k]);
	fj_free(ctx, r->rin, r->np * sizeof *r->rin);
	fj_free(ctx, r->pin, r->np * sizeof *r->pin);
	fj_free(ctx, r->tmp, r->np * sizeof *r->tmp);
	fj_free(ctx, r->dev, r->np * sizeof *r->dev);
	fj_free(ctx, r->slots, r->nr * sizeof *r->slots);
	fj_free(ctx, r->origin, r->np * sizeof *r->origin);
	if (r->dims)
		fj_free(ctx, r->dims, r->dims_cap * sizeof *r->dims);
}

/* The run options ro (may be NULL) into r: origins[k] names parameter
 * off + k; the dims as the runtime's. */
static fj_status scratch_options(fj_context *ctx, const fj_run_options *ro, size_t n, size_t off, run_scratch *r)
{
	fj_run_options o;
	fj_status st = fj_api_run_options(ctx, ro, &o);
	for (size_t k = 0; st == FJ_OK && o.origins && k < n && off + k < r->np; k++)
		r->origin[off + k] = o.origins[k];
	r->stream = o.stream;
	r->saved_dev = o.saved_on_device != 0;
	r->saved_inplace = o.saved_in_place != 0;
	if (st != FJ_OK || !o.ndims)
		return st;
	if (!o.dim_names || !o.dim_values)
		return fj_api_arg_error(ctx, "fj_run_options", "ndims > 0 needs dim_names and dim_values");
	if (!(r->dims = fj_alloc(ctx, o.ndims * sizeof *r->dims)))
		return oom(ctx);
	r->ndims = r->dims_cap = o.ndims;
	for (size_t k = 0; k < o.ndims; k++)
		r->dims[k] = (fj_rt_dimarg){o.dim_names[k], o.dim_values[k]};
	return FJ_OK;
}

/* The backward's sizes: the run options' dims, then every other symbol the
 * forward bound (the backward's own inputs may not fix them all: the
 * gradient of sum(x) takes an f32[] tangent and returns x's shape). */
static fj_status saved_dims(fj_context *ctx, const fj_saved *saved, run_scratch *r)
{
	size_t n = r->ndims + saved->nsyms;
	fj_rt_dimarg *d = n ? fj_alloc(ctx, n * sizeof *d) : NULL;
	if (n && !d)
		return oom(ctx);
	if (r->ndims)
		memcpy(d, r->dims, r->ndims * sizeof *d);
	size_t k = r->ndims;
	for (uint32_t s = 0; s < saved->nsyms; s++) {
		const char *name = fj_symbol_name(saved->p->m, s);
		bool given = saved->syms[s] < 0 || fj_symbol_is_derived(saved->p->m, s); /* derived: computed */
		for (size_t j = 0; j < r->ndims && !given; j++)
			given = strcmp(r->dims[j].name, name) == 0;
		if (!given)
			d[k++] = (fj_rt_dimarg){name, saved->syms[s]};
	}
	if (r->dims)
		fj_free(ctx, r->dims, r->dims_cap * sizeof *r->dims);
	r->dims = d;
	r->ndims = k;
	r->dims_cap = n;
	return FJ_OK;
}

/* Converts inputs[0..n) (of role input or tangent) into r's entries
 * off..off+n. */
static fj_status convert_inputs(const fj_program *p, const fj_tensor *inputs, size_t n, fj_value_role role,
                                run_scratch *r, size_t off)
{
	for (size_t k = 0; k < n; k++) {
		fj_status st = input_tensor(p, &inputs[k], k, role, &r->rin[off + k], &r->tmp[off + k], &r->dev[off + k]);
		if (st != FJ_OK)
			return st;
	}
	return FJ_OK;
}

/* The run options' stream: nvptx programs only. With one, CUDA inputs that
 * are staged (strided, misaligned) are read once the stream's earlier work
 * is done. */
static fj_status check_stream(fj_program *p, const run_scratch *r, const fj_tensor *inputs, size_t n,
                              const char *fn)
{
	if (!r->stream)
		return FJ_OK;
	if (p->ex != FJ_EXECUTOR_NVPTX)
		return fj_error_status(p->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "%s: a stream (fj_run_options.stream) is for nvptx programs; this program runs on %s",
		                       fn, p->ex == FJ_EXECUTOR_ATEN ? "aten" : "host");
	for (size_t k = 0; k < n; k++)
		if (inputs[k].device == FJ_DEVICE_CUDA && inputs[k].data && !is_dense(&inputs[k]))
			return sync_stream(p, r->stream);
	return FJ_OK;
}

/* A failed forward's device-resident saved values back to the device's
 * allocator, once the work queued on them (fence) is done. */
static void drop_device_slots(fj_program *p, const fj_graph *g, out_slot *slots, const saved_fence *f)
{
	bool held;
	if (enter_device(p, &held) != FJ_OK)
		return;
	if (f && f->pending)
		p->dev.event_sync(p->dev.ud, f->ev);
	release_device_slots(p, g, slots);
	leave_device(p, held);
}

/* saved_in_place: each saved value that is a parameter whose input
 * the run reads in place (a dense host tensor of the graph's dtype, no
 * converted copy) starts as that input's memory; the runtime, finding a
 * result that is a parameter already in its input's memory, copies nothing
 * (runtime/program.c). */
static void borrow_inputs(const fj_program *p, const fj_graph *g, run_scratch *r)
{
	for (uint32_t k = p->nout; k < g->nresults; k++) {
		const fj_value *val = &g->values[g->results[k]];
		if (val->kind != FJ_VK_PARAM || r->tmp[val->def] || r->dev[val->def] || !r->rin[val->def].data)
			continue;
		r->slots[k].rt = r->rin[val->def];
		r->slots[k].borrowed = true;
	}
}

static fj_status run_forward(fj_program *p, const fj_run_options *ro, const fj_tensor *inputs, size_t ninputs,
                             fj_tensor *outputs, size_t noutputs, fj_saved **saved)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->main.g;
	if (ninputs != g->nparams || (ninputs && !inputs))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "graph @%s takes %u inputs, %zu given", g->name,
		                       g->nparams, ninputs);
	if (noutputs != p->nout || (noutputs && !outputs))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "graph @%s returns %u outputs, room for %zu given",
		                       g->name, p->nout, noutputs);
	for (size_t k = 0; k < noutputs; k++) {
		fj_status st = check_desc(p, &outputs[k], FJ_ROLE_OUTPUT, k, true);
		if (st != FJ_OK)
			return st;
	}
	run_scratch r;
	fj_status st = scratch_alloc(ctx, g, &r);
	out_slot *slots = r.slots;
	if (st == FJ_OK)
		st = scratch_options(ctx, ro, ninputs, 0, &r);
	if (st == FJ_OK)
		st = check_stream(p, &r, inputs, ninputs, saved ? "fj_program_forward" : "fj_program_run");
	if (st == FJ_OK)
		st = convert_inputs(p, inputs, ninputs, FJ_ROLE_INPUT, &r, 0);
	for (uint32_t k = 0; st == FJ_OK && k < g->nparams; k++)
		r.pin[k] = &r.rin[k];
	for (uint32_t k = 0; st == FJ_OK && k < p->nout; k++)
		slots[k].user = &outputs[k];
	bool on_dev = saved && r.saved_dev && p->ex == FJ_EXECUTOR_NVPTX;
	bool borrow = saved && r.saved_inplace && p->ex != FJ_EXECUTOR_NVPTX;
	if (st == FJ_OK && borrow)
		borrow_inputs(p, g, &r);
	for (uint32_t k = p->nout; st == FJ_OK && on_dev && k < g->nresults; k++)
		slots[k].device = true;
	saved_fence *fence = on_dev ? fj_alloc(ctx, sizeof *fence) : NULL;
	if (st == FJ_OK && on_dev && !fence)
		st = oom(ctx);
	if (fence)
		memset(fence, 0, sizeof *fence);
	run_ctl c = {r.stream, fence, borrow};
	uint32_t nsyms = fj_symbol_count(p->m);
	int64_t *syms = saved ? fj_alloc(ctx, (nsyms ? nsyms : 1) * sizeof *syms) : NULL;
	if (st == FJ_OK && saved && !syms)
		st = oom(ctx);
	if (st == FJ_OK)
		st = run_graph(p, &p->main, r.pin, r.dev, slots, r.origin, r.dims, r.ndims, &c, syms);
	fj_saved *s = NULL;
	if (st == FJ_OK && saved) {
		s = fj_alloc(ctx, sizeof *s);
		fj_rt_tensor *t = fj_alloc(ctx, (p->nsaved ? p->nsaved : 1) * sizeof *t);
		const char **names = fj_alloc(ctx, (p->nsaved ? p->nsaved : 1) * sizeof *names);
		bool *borrowed = fj_alloc(ctx, (p->nsaved ? p->nsaved : 1) * sizeof *borrowed);
		if (!s || !t || !names || !borrowed) {
			fj_free(ctx, s, sizeof *s);
			fj_free(ctx, t, (p->nsaved ? p->nsaved : 1) * sizeof *t);
			fj_free(ctx, names, (p->nsaved ? p->nsaved : 1) * sizeof *names);
			fj_free(ctx, borrowed, (p->nsaved ? p->nsaved : 1) * sizeof *borrowed);
			s = NULL;
			st = oom(ctx);
		} else {
			s->p = p;
			s->n = p->nsaved;
			s->t = t;
			s->names = names;
			s->borrowed = borrowed;
			s->syms = syms;
			s->nsyms = nsyms;
			s->on_device = on_dev;
			s->fence = fence;
			syms = NULL;
			fence = NULL;
			for (uint32_t k = 0; k < p->nsaved; k++) {
				t[k] = slots[p->nout + k].rt;
				s->borrowed[k] = slots[p->nout + k].borrowed;
				slots[p->nout + k].rt.data = NULL;
				slots[p->nout + k].borrowed = false;
				names[k] = p->info[FJ_ROLE_SAVED][k].name;
			}
		}
	}
	if (on_dev && !s && slots)
		drop_device_slots(p, g, slots, fence);
	for (uint32_t k = p->nout; slots && !on_dev && k < g->nresults; k++)
		if (!slots[k].borrowed)
			fj_rt_tensor_free(&slots[k].rt);
	if (syms)
		fj_free(ctx, syms, (nsyms ? nsyms : 1) * sizeof *syms);
	if (fence) /* not handed over: a failed forward */
		destroy_fence(p, fence);
	scratch_free(ctx, &r);
	if (saved)
		*saved = s;
	return st;
}

fj_status fj_program_run(fj_program *p, const fj_tensor *inputs, size_t ninputs, fj_tensor *outputs,
                         size_t noutputs)
{
	if (!p)
		return FJ_ERR_INVALID;
	return run_forward(p, NULL, inputs, ninputs, outputs, noutputs, NULL);
}

fj_status fj_program_forward(fj_program *p, const fj_tensor *inputs, size_t ninputs, fj_tensor *outputs,
                             size_t noutputs, fj_saved **saved)
{
	if (saved)
		*saved = NULL;
	if (!p)
		return FJ_ERR_INVALID;
	if (!saved)
		return fj_api_arg_error(p->ctx, "fj_program_forward", "saved may not be NULL");
	if (!p->training)
		return fj_error_status(p->ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "fj_program_forward: the program was not compiled for training");
	return run_forward(p, NULL, inputs, ninputs, outputs, noutputs, saved);
}

static fj_status run_backward(fj_program *p, const fj_run_options *ro, const fj_saved *saved,
                              const fj_tensor *tangents, size_t ntangents, fj_tensor *grads, size_t ngrads)
{
	if (!p)
		return FJ_ERR_INVALID;
	fj_context *ctx = p->ctx;
	if (!p->training)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "fj_program_backward: the program was not compiled for training");
	if (!saved || saved->p != p)
		return fj_api_arg_error(ctx, "fj_program_backward", "saved values of a forward run of this program needed");
	const fj_graph *g = p->bw.g;
	size_t nt = p->ninfo[FJ_ROLE_TANGENT];
	if (ntangents != nt || (nt && !tangents))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "the backward takes %zu tangents, %zu given", nt,
		                       ntangents);
	if (ngrads != g->nresults || (ngrads && !grads))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "the backward returns %u gradients, room for %zu given", g->nresults, ngrads);
	for (size_t k = 0; k < ngrads; k++) {
		fj_status st = check_desc(p, &grads[k], FJ_ROLE_GRADIENT, k, true);
		if (st != FJ_OK)
			return st;
	}
	run_scratch r;
	fj_status st = scratch_alloc(ctx, g, &r);
	if (st == FJ_OK)
		st = scratch_options(ctx, ro, nt, saved->n, &r);
	if (st == FJ_OK)
		st = check_stream(p, &r, tangents, nt, "fj_program_backward");
	if (st == FJ_OK)
		st = saved_dims(ctx, saved, &r);
	if (st == FJ_OK)
		st = convert_inputs(p, tangents, nt, FJ_ROLE_TANGENT, &r, saved->n);
	for (uint32_t k = 0; st == FJ_OK && k < g->nparams; k++)
		r.pin[k] = k < saved->n ? &saved->t[k] : &r.rin[k];
	for (uint32_t k = 0; st == FJ_OK && saved->on_device && k < saved->n; k++)
		r.dev[k] = (uint64_t)(uintptr_t)saved->t[k].data; /* read in place */
	run_ctl c = {r.stream, saved->on_device ? saved->fence : NULL, false};
	for (uint32_t k = 0; st == FJ_OK && k < g->nresults; k++)
		r.slots[k].user = &grads[k];
	if (st == FJ_OK)
		st = run_graph(p, &p->bw, r.pin, r.dev, r.slots, r.origin, r.dims, r.ndims, &c, NULL);
	scratch_free(ctx, &r);
	return st;
}

fj_status fj_program_backward(fj_program *p, const fj_saved *saved, const fj_tensor *tangents, size_t ntangents,
                              fj_tensor *grads, size_t ngrads)
{
	return run_backward(p, NULL, saved, tangents, ntangents, grads, ngrads);
}

size_t fj_saved_count(const fj_saved *s) { return s ? s->n : 0; }

size_t fj_saved_bytes(const fj_saved *s)
{
	size_t b = 0;
	for (uint32_t k = 0; s && k < s->n; k++)
		b += s->t[k].nbytes;
	return b;
}

fj_status fj_saved_info(const fj_saved *s, size_t i, fj_value_info *info, fj_tensor *view)
{
	if (!s)
		return FJ_ERR_INVALID;
	if (i >= s->n)
		return fj_error_status(s->p->ctx, FJ_ERR_INVALID, (fj_loc){0}, "fj_saved_info: no saved value %zu", i);
	const fj_rt_tensor *t = &s->t[i];
	if (info) {
		*info = s->p->info[FJ_ROLE_SAVED][i];
		info->rank = t->rank;
		memset(info->sizes, 0, sizeof info->sizes);
		memcpy(info->sizes, t->dims, (size_t)t->rank * sizeof *t->dims);
		info->bytes = t->nbytes;
	}
	if (view) {
		memset(view, 0, sizeof *view);
		view->data = t->data;
		view->dtype = (fj_scalar_type)t->dtype;
		view->rank = t->rank;
		memcpy(view->sizes, t->dims, (size_t)t->rank * sizeof *t->dims);
		view->device = s->on_device ? FJ_DEVICE_CUDA : FJ_DEVICE_HOST;
	}
	return FJ_OK;
}

void fj_saved_destroy(fj_saved *s)
{
	if (!s)
		return;
	fj_context *ctx = s->p->ctx;
	size_t n = s->n ? s->n : 1;
	if (s->on_device) {
		bool held;
		if (enter_device(s->p, &held) == FJ_OK) {
			if (s->fence->pending) /* the work queued on them first */
				s->p->dev.event_sync(s->p->dev.ud, s->fence->ev);
			for (uint32_t k = 0; k < s->n; k++)
				if (s->t[k].data)
					s->p->dev.release(s->p->dev.ud, (uint64_t)(uintptr_t)s->t[k].data);
			leave_device(s->p, held);
		}
		destroy_fence(s->p, s->fence);
	}
	for (uint32_t k = 0; k < s->n && !s->on_device; k++)
		if (!s->borrowed[k])
			fj_rt_tensor_free(&s->t[k]);
	fj_free(ctx, s->t, n * sizeof *s->t);
	fj_free(ctx, s->names, n * sizeof *s->names);
	fj_free(ctx, s->borrowed, n * sizeof *s->borrowed);
	if (s->syms)
		fj_free(ctx, s->syms, (s->nsyms ? s->nsyms : 1) * sizeof *s->syms);
	fj_free(ctx, s, sizeof *s);
}

/* ---- runs with options, and the accessors of api/api.h ---- */

fj_status fj_program_run_with(fj_program *p, const fj_run_options *o, const fj_tensor *inputs, size_t ninputs,
                              fj_tensor *outputs, size_t noutputs)
{
	if (!p)
		return FJ_ERR_INVALID;
	return run_forward(p, o, inputs, ninputs, outputs, noutputs, NULL);
}

fj_status fj_program_forward_with(fj_program *p, const fj_run_options *o, const fj_tensor *inputs, size_t ninputs,
                                  fj_tensor *outputs, size_t noutputs, fj_saved **saved)
{
	if (saved)
		*saved = NULL;
	if (!p)
		return FJ_ERR_INVALID;
	if (!saved)
		return fj_api_arg_error(p->ctx, "fj_program_forward_with", "saved may not be NULL");
	if (!p->training)
		return fj_error_status(p->ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "fj_program_forward_with: the program was not compiled for training");
	return run_forward(p, o, inputs, ninputs, outputs, noutputs, saved);
}

fj_status fj_program_backward_with(fj_program *p, const fj_run_options *o, const fj_saved *saved,
                                   const fj_tensor *tangents, size_t ntangents, fj_tensor *grads, size_t ngrads)
{
	return run_backward(p, o, saved, tangents, ntangents, grads, ngrads);
}

/* Input i's dtype and shape only (data not read), checked as a run checks
 * them. */
static fj_status shape_tensor(const fj_program *p, const fj_tensor *t, size_t i, fj_value_role role, fj_rt_tensor *rt)
{
	fj_tensor d = *t;
	d.data = empty_byte;
	d.device = FJ_DEVICE_HOST;
	d.strides = NULL;
	fj_status st = check_desc(p, &d, role, i, false);
	if (st != FJ_OK)
		return st;
	memset(rt, 0, sizeof *rt);
	rt->data = empty_byte;
	rt->dtype = (fj_dtype)t->dtype;
	rt->rank = t->rank;
	memcpy(rt->dims, t->sizes, (size_t)t->rank * sizeof *rt->dims);
	return FJ_OK;
}

fj_status fj_api_program_with(fj_program *p, const fj_api_use *u, fj_api_inst_fn fn, void *ud)
{
	fj_context *ctx = p->ctx;
	part *pt = u->backward ? &p->bw : &p->main;
	if (!pt->g)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "the program was not compiled for training");
	if (u->backward && (!u->saved || u->saved->p != p))
		return fj_api_arg_error(ctx, "fj_program_bench", "saved values of a forward run of this program needed");
	if (u->backward && u->saved->on_device)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "fj_program_bench: the saved values are in device memory (saved_on_device); "
		                       "bench the backward with host ones");
	const fj_graph *g = pt->g;
	size_t off = u->backward ? u->saved->n : 0;
	fj_value_role role = u->backward ? FJ_ROLE_TANGENT : FJ_ROLE_INPUT;
	if (off + u->n != g->nparams || (u->n && !u->in))
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "graph @%s takes %u inputs, %zu given", g->name,
		                       g->nparams - (uint32_t)off, u->n);
	run_scratch r;
	fj_status st = scratch_alloc(ctx, g, &r);
	if (st == FJ_OK)
		st = scratch_options(ctx, u->run, u->n, off, &r);
	if (st == FJ_OK && u->backward)
		st = saved_dims(ctx, u->saved, &r);
	for (size_t k = 0; st == FJ_OK && k < off; k++)
		r.pin[k] = &u->saved->t[k];
	for (size_t k = 0; st == FJ_OK && k < u->n; k++) {
		r.pin[off + k] = u->in[k] ? &r.rin[off + k] : NULL;
		if (u->in[k] && u->shapes_only)
			st = shape_tensor(p, u->in[k], k, role, &r.rin[off + k]);
		else if (u->in[k])
			st = input_tensor(p, u->in[k], k, role, &r.rin[off + k], &r.tmp[off + k], &r.dev[off + k]);
	}
	inst *i = NULL;
	bool held = false;
	/* shapes_only too: binding allocates the device's buffers */
	if (st == FJ_OK && (st = acquire(p, pt, &i)) == FJ_OK && (st = enter_device(p, &held)) != FJ_OK)
		release(p, pt, i);
	if (st == FJ_OK && !u->shapes_only)
		fj_rt_exec_set_stream(i->rt, NULL); /* fusejit's own stream */
	if (st == FJ_OK) {
		bool idx = !u->backward && p->index_dims && p->nindex_dims == g->nparams;
		fj_api_inst v = {g, i->rt, r.pin, r.origin, r.dims, r.ndims, idx ? p->index_dims : NULL};
		st = fn(ud, &v);
		i->bound = false; /* fn bound it to its own inputs */
		leave_device(p, held);
		release(p, pt, i);
	}
	scratch_free(ctx, &r);
	return st;
}

bool fj_api_program_emulated(const fj_program *p) { return p && p->dev.emulated; }

fj_status fj_program_stats_get(const fj_program *p, fj_program_stats *out)
{
	if (!p || !out)
		return FJ_ERR_INVALID;
	if (out->struct_size < offsetof(fj_program_stats, compiled))
		return fj_api_arg_error(p->ctx, "fj_program_stats_get", "stats not initialised (fj_program_stats_init)");
	fj_program_stats s;
	fj_program_stats_init(&s);
	const inst *m = p->main.idle, *b = p->bw.idle;
	if (m) {
		fj_rt_exec_info mi = fj_rt_exec_info_of(m->rt);
		s.compiled = mi.compiled;
		s.kernels = mi.kernels;
		s.kernels_backward = b ? fj_rt_exec_info_of(b->rt).kernels : 0;
		s.device = mi.device;
		s.target = mi.target;
		s.threads = mi.device ? 0 : mi.threads;
	}
	fj_api_copy_out(out, &s, sizeof s);
	return FJ_OK;
}

fj_context *fj_api_program_context(const fj_program *p) { return p->ctx; }

const char *fj_api_default_pipeline(bool training) { return default_pipeline(FJ_EXECUTOR_AUTO, training); }
