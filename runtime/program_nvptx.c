/* program_nvptx.c -- the nvptx executor (program_nvptx.h).
 *
 * Binding: the shared binder (binder.h) binds and checks the graph given to
 * create, node by node; the fused copy's sizes are evaluated with the same
 * symbols (the copy keeps the module's symbol table, ir/clone.c).
 * Buffers: one device buffer per graph parameter and per value returned;
 * the regions' other results follow the shared buffer plan (binder.h: reused
 * once dead), one device buffer per plan buffer (the device's caching
 * allocator recycles them across binds). Each region's kernel reads its
 * sizes from a slice of one device array of i64 (uploaded at bind) and ORs
 * its errors into a slot of a status array (zeroed before a run, read back
 * after it only when a region can fail: indexing, amax/amin/argmax/argmin).
 * Launches go, in node order, on the device's current stream: its own, or
 * the caller's (fj_rt_nvptx_set_stream).
 *
 * Streams and the caching allocator: a run on the caller's stream that
 * does not synchronise it (every input and output in device memory) leaves
 * its work queued behind an event (`done`). A later run of p on another
 * stream makes that stream wait for the event (the GPU waits, not the
 * host); before p's buffers go back to the device's allocator (a new bind,
 * destroy) the host waits for it, so no block is reused by other work
 * while a queued launch may still touch it. A device without events (the
 * emulator) is synchronous: nothing is ever left queued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/device.h"
#include "codegen/region.h"
#include "passes/pass.h"
#include "runtime/program_nvptx.h"

typedef struct nvkernel {
	uint32_t node;
	void *k;                 /* the device's prepared kernel */
	fj_nvptx_plan plan;      /* for 16-byte aligned pointers (the program's own buffers) */
	fj_nvptx_plan plan_u;    /* for others: a caller's device tensor may start at any element */
	uint64_t ws;             /* the plans' workspace (zeroed at bind), or 0 */
	size_t ws_bytes;
	size_t dims_off;         /* in i64 elements, into the dims array */
	uint32_t *xsyms, nxsyms; /* extra symbols (codegen/region.h), after the sizes */
} nvkernel;

struct fj_rt_nvprog {
	fj_context *ctx;
	fj_nvptx_device dev;
	const fj_graph *orig;    /* bound and checked (bind) */
	fj_module *m;            /* the copy, fused */
	fj_graph *g;
	char sm[16];
	nvkernel *kern;
	uint32_t nkern, compiled;
	/* binding */
	fj_rt_binding bind;      /* of orig */
	fj_rt_plan plan;         /* of g */
	bool bound;
	int64_t *vdims;          /* per value of g, FJ_MAX_RANK entries */
	uint64_t *vbuf;          /* per value of g: device buffer, 0 none */
	size_t *vbytes;
	uint64_t *own;           /* per value of g: a buffer of its own (parameters, values returned), 0 */
	uint64_t *pbuf;          /* per plan buffer */
	uint32_t npbuf;
	uint64_t dims, status;
	bool may_fail;
	bool ws_dirty;           /* a run failed after its launches began: a split reduction's
	                          * counters may not be back at zero (zeroed before the next) */
	/* streams (see the top) */
	void *stream;            /* the caller's stream for the next bind and runs; NULL: the device's own */
	void *done;              /* an event behind the last run queued on a caller's stream, or NULL */
	void *done_stream;       /* the stream it was recorded on */
	bool pending;            /* that run may still be queued */
};

static fj_status oom(fj_context *ctx) { return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory"); }

/* ---- creation ---- */

/* The extra symbols of nk's region: sizes its body uses that none of its
 * operands and results has (codegen/region.h); its kernel reads their
 * values after their sizes in dims. */
static fj_status list_extra_syms(fj_rt_nvprog *p, nvkernel *nk)
{
	nk->xsyms = calloc(fj_symbol_count(p->m) + 1, sizeof *nk->xsyms);
	if (!nk->xsyms)
		return oom(p->ctx);
	return fj_rg_extra_syms(p->ctx, p->g, nk->node, nk->xsyms, &nk->nxsyms);
}

static bool fused(const fj_graph *g)
{
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].op != FJ_OP_FUSION_KERNEL)
			return false;
	return true;
}

fj_status fj_rt_nvptx_create(fj_context *ctx, const fj_graph *g, fj_rt_nvprog **out)
{
	*out = NULL;
	fj_nvptx_device dev;
	fj_status st = fj_nvptx_cuda_device(ctx, &dev);
	return st == FJ_OK ? fj_rt_nvptx_create_on(ctx, g, &dev, out) : st;
}

/* A copy of g alone in a module of its own (ir/clone.c: the same symbols),
 * fused by the `default` pipeline unless g is fused already; p->g: the
 * copy. */
static fj_status fuse_copy(fj_rt_nvprog *p, const fj_graph *g)
{
	fj_status st = fj_graph_clone(g, &p->m, &p->g);
	if (st != FJ_OK)
		return st;
	if (!fused(p->g))
		st = fj_run_pipeline(p->m, fj_named_pipeline("default"), NULL);
	p->g = fj_module_find_graph(p->m, g->name);
	if (st == FJ_OK && !p->g)
		st = fj_error_status(p->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: graph @%s lost by the pipeline", g->name);
	return st;
}

/* Prepares every region of p->g on the device. */
static fj_status prepare_kernels(fj_rt_nvprog *p)
{
	fj_status st = FJ_OK;
	for (uint32_t i = 0; st == FJ_OK && i < p->g->nnodes; i++) {
		const fj_node *n = &p->g->nodes[i];
		if (n->op != FJ_OP_FUSION_KERNEL)
			return fj_error_status(p->ctx, FJ_ERR_UNSUPPORTED, n->loc,
			                       "%s: the nvptx executor runs fused regions only", fj_op_name(n->op));
		nvkernel *nk = &p->kern[p->nkern++];
		nk->node = i;
		bool hit = false;
		st = p->dev.prepare(p->dev.ud, p->g, i, &nk->k, &hit);
		if (st == FJ_OK && !hit)
			p->compiled++;
		if (st == FJ_OK)
			st = list_extra_syms(p, nk);
	}
	return st;
}

static fj_status create_on(fj_rt_nvprog *p, const fj_graph *g)
{
	fj_status st = fj_rt_binding_init(&p->bind, p->ctx, g);
	if (st == FJ_OK)
		st = fuse_copy(p, g);
	if (st == FJ_OK)
		st = fj_rt_plan_init(&p->plan, p->ctx, p->g);
	if (st != FJ_OK)
		return st;
	size_t nv = p->g->nvalues ? p->g->nvalues : 1;
	p->kern = calloc(p->g->nnodes ? p->g->nnodes : 1, sizeof *p->kern);
	p->vdims = calloc(nv * FJ_MAX_RANK, sizeof *p->vdims);
	p->vbuf = calloc(nv, sizeof *p->vbuf);
	p->vbytes = calloc(nv, sizeof *p->vbytes);
	p->own = calloc(nv, sizeof *p->own);
	if (!p->kern || !p->vdims || !p->vbuf || !p->vbytes || !p->own)
		return oom(p->ctx);
	return prepare_kernels(p);
}

fj_status fj_rt_nvptx_create_on(fj_context *ctx, const fj_graph *g, const fj_nvptx_device *dev, fj_rt_nvprog **out)
{
	*out = NULL;
	fj_rt_nvprog *p = calloc(1, sizeof *p);
	if (!p)
		return oom(ctx);
	p->ctx = ctx;
	p->dev = *dev;
	p->orig = g;
	snprintf(p->sm, sizeof p->sm, "%s", dev->target ? dev->target : "?");
	fj_status st = create_on(p, g);
	if (st != FJ_OK) {
		fj_rt_nvptx_destroy(p);
		return st;
	}
	*out = p;
	return FJ_OK;
}

/* ---- streams ---- */

void fj_rt_nvptx_set_stream(fj_rt_nvprog *p, void *stream) { p->stream = stream; }

/* Whether work stays queued after a call returns (the device has events). */
static bool queues(const fj_rt_nvprog *p) { return p->dev.event_create && p->dev.stream_wait && p->dev.event_sync; }

/* Points the device at p's stream; a run of p still queued on another
 * stream is waited for there, on the device. */
static fj_status use_stream(fj_rt_nvprog *p)
{
	if (p->dev.set_stream)
		p->dev.set_stream(p->dev.ud, p->stream);
	if (!p->pending || p->done_stream == p->stream)
		return FJ_OK;
	return p->dev.stream_wait(p->dev.ud, p->done);
}

/* After a run on the caller's stream: an event behind its work. After a
 * run on the device's own stream (synchronised, and ordered after any
 * earlier run's event): nothing is queued. */
static fj_status fence(fj_rt_nvprog *p)
{
	if (!p->stream || !queues(p)) {
		p->pending = false;
		return FJ_OK;
	}
	fj_status st = p->done ? FJ_OK : p->dev.event_create(p->dev.ud, &p->done);
	if (st == FJ_OK)
		st = p->dev.event_record(p->dev.ud, p->done);
	p->pending = st == FJ_OK;
	p->done_stream = p->stream;
	return st;
}

/* The host waits for p's queued work: its buffers may then be reused. */
static void drain(fj_rt_nvprog *p)
{
	if (p->pending)
		p->dev.event_sync(p->dev.ud, p->done);
	p->pending = false;
}

static void release_buffers(fj_rt_nvprog *p)
{
	drain(p);
	for (uint32_t v = 0; p->own && v < p->g->nvalues; v++)
		if (p->own[v]) {
			p->dev.release(p->dev.ud, p->own[v]);
			p->own[v] = 0;
		}
	for (uint32_t b = 0; b < p->npbuf; b++)
		if (p->pbuf[b])
			p->dev.release(p->dev.ud, p->pbuf[b]);
	free(p->pbuf);
	p->pbuf = NULL;
	p->npbuf = 0;
	if (p->vbuf)
		memset(p->vbuf, 0, (p->g->nvalues ? p->g->nvalues : 1) * sizeof *p->vbuf);
	for (uint32_t q = 0; p->kern && q < p->nkern; q++)
		if (p->kern[q].ws) {
			p->dev.release(p->dev.ud, p->kern[q].ws);
			p->kern[q].ws = 0;
		}
	if (p->dims)
		p->dev.release(p->dev.ud, p->dims);
	if (p->status)
		p->dev.release(p->dev.ud, p->status);
	p->dims = p->status = 0;
}

void fj_rt_nvptx_destroy(fj_rt_nvprog *p)
{
	if (!p)
		return;
	if (p->g)
		release_buffers(p);
	drain(p);
	if (p->done)
		p->dev.event_destroy(p->dev.ud, p->done);
	for (uint32_t q = 0; p->kern && q < p->nkern; q++)
		free(p->kern[q].xsyms);
	free(p->kern);
	free(p->vdims);
	free(p->vbuf);
	free(p->vbytes);
	free(p->own);
	fj_rt_binding_free(&p->bind);
	fj_rt_plan_free(&p->plan);
	fj_module_destroy(p->m);
	free(p);
}

uint32_t fj_rt_nvptx_compiled(const fj_rt_nvprog *p) { return p->compiled; }
uint32_t fj_rt_nvptx_kernels(const fj_rt_nvprog *p) { return p->nkern; }
const char *fj_rt_nvptx_target(const fj_rt_nvprog *p) { return p->sm; }
const char *fj_rt_nvptx_device(const fj_rt_nvprog *p) { return p->dev.name ? p->dev.name : "?"; }
const fj_rt_binding *fj_rt_nvptx_binding(const fj_rt_nvprog *p) { return &p->bind; }

/* ---- binding ---- */

static int64_t dimval(void *ud, fj_dim d)
{
	fj_rt_nvprog *p = ud;
	int64_t v = -1;
	fj_rt_eval_dim(&p->bind, p->m, d, &v);
	return v;
}

/* Every value's shape and size in the fused copy, with the bound symbols. */
static fj_status eval_values(fj_rt_nvprog *p)
{
	const fj_graph *g = p->g;
	for (uint32_t v = 0; v < g->nvalues; v++) {
		const fj_value *val = &g->values[v];
		int64_t *vd = &p->vdims[(size_t)v * FJ_MAX_RANK];
		int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
		for (int d = 0; d < rank; d++)
			if (!fj_rt_eval_dim(&p->bind, p->m, val->type.dims[d], &vd[d]))
				return fj_error_status(p->ctx, FJ_ERR_RUNTIME, val->loc,
				                       "a size of %%%s is not bound, or overflows, at run time",
				                       val->name ? val->name : "?");
		p->vbytes[v] = 0;
		if (val->kind != FJ_VK_LITERAL && !fj_rt_nbytes(val->type.dtype, vd, rank, &p->vbytes[v]))
			return fj_error_status(p->ctx, FJ_ERR_INVALID, val->loc, "%%%s is too big", val->name ? val->name : "?");
	}
	return FJ_OK;
}

/* Device buffers: the parameters' and the values returned of their own, the
 * plan's for the others. */
static fj_status alloc_buffers(fj_rt_nvprog *p)
{
	const fj_graph *g = p->g;
	fj_status st = fj_rt_plan_make(&p->plan, g, p->vbytes);
	if (st != FJ_OK)
		return st;
	p->pbuf = calloc(p->plan.nbufs + 1, sizeof *p->pbuf);
	if (!p->pbuf)
		return oom(p->ctx);
	p->npbuf = p->plan.nbufs;
	for (uint32_t b = 0; b < p->npbuf && st == FJ_OK; b++)
		st = p->dev.alloc(p->dev.ud, p->plan.bufsize[b], &p->pbuf[b]);
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++)
		st = p->dev.alloc(p->dev.ud, p->vbytes[g->params[i]], &p->own[g->params[i]]);
	for (uint32_t v = 0; v < g->nvalues && st == FJ_OK; v++)
		if (g->values[v].kind == FJ_VK_RESULT && p->plan.out_pos[v] >= 0)
			st = p->dev.alloc(p->dev.ud, p->vbytes[v], &p->own[v]);
	for (uint32_t v = 0; v < g->nvalues && st == FJ_OK; v++)
		p->vbuf[v] = p->own[v] ? p->own[v] : p->plan.vbuf[v] >= 0 ? p->pbuf[p->plan.vbuf[v]] : 0;
	return st;
}

/* Each region's launch plan and workspace, and the sizes array's layout. */
static fj_status plan_launches(fj_rt_nvprog *p, size_t *ndims_total)
{
	const fj_graph *g = p->g;
	fj_status st = FJ_OK;
	*ndims_total = 0;
	p->may_fail = false;
	for (uint32_t q = 0; q < p->nkern && st == FJ_OK; q++) {
		nvkernel *nk = &p->kern[q];
		const fj_node *n = &g->nodes[nk->node];
		st = fj_nvptx_plan_region(NULL, &p->dev.limits, g, nk->node, dimval, p, true, &nk->plan);
		if (st == FJ_OK)
			st = fj_nvptx_plan_region(NULL, &p->dev.limits, g, nk->node, dimval, p, false, &nk->plan_u);
		/* a split reduction's counters start at zero; its last blocks re-zero them */
		nk->ws_bytes = nk->plan.workspace > nk->plan_u.workspace ? nk->plan.workspace : nk->plan_u.workspace;
		if (st == FJ_OK && nk->ws_bytes)
			st = p->dev.alloc(p->dev.ud, nk->ws_bytes, &nk->ws);
		if (st == FJ_OK && nk->ws)
			st = p->dev.memset0(p->dev.ud, nk->ws, nk->ws_bytes);
		p->may_fail |= nk->plan.may_fail;
		nk->dims_off = *ndims_total;
		for (uint32_t j = 0; j < n->nopnds; j++)
			if (n->opnds[j] != FJ_NOVAL && g->values[n->opnds[j]].kind != FJ_VK_LITERAL)
				*ndims_total += g->values[n->opnds[j]].type.rank;
		for (uint32_t j = 0; j < n->nres; j++)
			*ndims_total += g->values[n->res[j]].type.rank;
		*ndims_total += nk->nxsyms;
	}
	return st;
}

/* Uploads the kernels' sizes (the dims array) and zeroes the status array. */
static fj_status upload_sizes(fj_rt_nvprog *p, size_t ndims_total)
{
	const fj_graph *g = p->g;
	int64_t *hd = calloc(ndims_total + 1, sizeof *hd);
	if (!hd)
		return oom(p->ctx);
	for (uint32_t q = 0; q < p->nkern; q++) {
		const fj_node *n = &g->nodes[p->kern[q].node];
		size_t o = p->kern[q].dims_off;
		for (uint32_t j = 0; j < n->nopnds + n->nres; j++) {
			fj_vid v = j < n->nopnds ? n->opnds[j] : n->res[j - n->nopnds];
			if (v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL)
				continue;
			for (int d = 0; d < g->values[v].type.rank; d++)
				hd[o++] = p->vdims[(size_t)v * FJ_MAX_RANK + d];
		}
		for (uint32_t x = 0; x < p->kern[q].nxsyms; x++)
			hd[o++] = fj_rt_binding_symbol(&p->bind, p->kern[q].xsyms[x]);
	}
	fj_status st = p->dev.alloc(p->dev.ud, (ndims_total + 1) * sizeof *hd, &p->dims);
	if (st == FJ_OK)
		st = p->dev.htod(p->dev.ud, p->dims, hd, ndims_total * sizeof *hd);
	if (st == FJ_OK)
		st = p->dev.alloc(p->dev.ud, (p->nkern + 1) * sizeof(int32_t), &p->status);
	if (st == FJ_OK)
		st = p->dev.memset0(p->dev.ud, p->status, (p->nkern + 1) * sizeof(int32_t));
	free(hd);
	return st;
}

fj_status fj_rt_nvptx_bind(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, const char *const *origin,
                           const fj_rt_dimarg *dims, size_t ndims)
{
	p->bound = false;
	fj_status st = use_stream(p); /* the sizes' upload is queued there */
	release_buffers(p);
	size_t ndims_total = 0;
	if (st == FJ_OK)
		st = fj_rt_binding_bind(&p->bind, inputs, origin, dims, ndims);
	if (st == FJ_OK)
		st = eval_values(p);
	if (st == FJ_OK)
		st = alloc_buffers(p);
	if (st == FJ_OK)
		st = plan_launches(p, &ndims_total);
	if (st == FJ_OK)
		st = upload_sizes(p, ndims_total);
	if (st != FJ_OK) {
		release_buffers(p);
		return st;
	}
	p->bound = true;
	return FJ_OK;
}

const int64_t *fj_rt_nvptx_param_dims(const fj_rt_nvprog *p, uint32_t i)
{
	return fj_rt_binding_dims(&p->bind, p->orig->params[i]);
}

/* ---- running ---- */

static fj_status upload(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs)
{
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < p->g->nparams && st == FJ_OK; i++)
		st = p->dev.htod(p->dev.ud, p->vbuf[p->g->params[i]], inputs[i]->data, p->vbytes[p->g->params[i]]);
	return st;
}

/* After a failed run: the workspaces back to zero (a faulted split
 * reduction may have left its counters part-way). */
static fj_status rezero_workspaces(fj_rt_nvprog *p)
{
	fj_status st = FJ_OK;
	for (uint32_t q = 0; q < p->nkern && st == FJ_OK; q++)
		if (p->kern[q].ws)
			st = p->dev.memset0(p->dev.ud, p->kern[q].ws, p->kern[q].ws_bytes);
	if (st == FJ_OK)
		p->ws_dirty = false;
	return st;
}

/* Launches every kernel; each picks its plan from the pointers it gets
 * this run (the vectorised variants need 16-byte aligned ones). */
static fj_status launch_all(fj_rt_nvprog *p)
{
	const fj_graph *g = p->g;
	fj_status st = p->ws_dirty ? rezero_workspaces(p) : FJ_OK;
	for (uint32_t q = 0; q < p->nkern && st == FJ_OK; q++) {
		nvkernel *nk = &p->kern[q];
		const fj_node *n = &g->nodes[nk->node];
		uint32_t np = n->nopnds + n->nres + 2;
		uint64_t args[np + 1]; /* + the workspace, which only split entries declare */
		bool aligned = true;
		for (uint32_t j = 0; j < n->nopnds + n->nres; j++) {
			fj_vid v = j < n->nopnds ? n->opnds[j] : n->res[j - n->nopnds];
			args[j] = v == FJ_NOVAL ? 0 : p->vbuf[v];
			aligned &= args[j] % 16 == 0;
		}
		args[np - 2] = p->dims + nk->dims_off * sizeof(int64_t);
		args[np - 1] = p->status + q * sizeof(int32_t);
		args[np] = nk->ws;
		const fj_nvptx_plan *plan = aligned ? &nk->plan : &nk->plan_u;
		for (int s = 0; s < plan->n && st == FJ_OK; s++) {
			const fj_nvptx_launch_step *ls = &plan->launch[s];
			st = p->dev.launch(p->dev.ud, nk->k, ls->variant, ls->grid, ls->block, ls->shared, args, np + 1);
		}
	}
	return st;
}

static fj_status check_status(fj_rt_nvprog *p)
{
	if (!p->may_fail)
		return FJ_OK;
	int32_t *hs = calloc(p->nkern + 1, sizeof *hs);
	if (!hs)
		return oom(p->ctx);
	fj_status st = p->dev.dtoh(p->dev.ud, hs, p->status, p->nkern * sizeof *hs);
	for (uint32_t q = 0; q < p->nkern && st == FJ_OK; q++) {
		if (!hs[q])
			continue;
		const fj_node *n = &p->g->nodes[p->kern[q].node];
		st = fj_error_status(p->ctx, FJ_ERR_RUNTIME, n->loc, "%s: %s", n->kernel ? n->kernel : "fusion.kernel",
		                     hs[q] & FJ_KERR_INDEX ? "an index is out of range"
		                                           : "an invalid value (a reduction over an empty dim?)");
	}
	if (st == FJ_ERR_RUNTIME || (st == FJ_OK && p->may_fail))
		p->dev.memset0(p->dev.ud, p->status, (p->nkern + 1) * sizeof(int32_t));
	free(hs);
	return st;
}

static void store_literal(fj_rt_tensor *t, const fj_literal *lit)
{
	fj_rt_store_f64(t->data, t->dtype, 0, fj_literal_value(lit));
}

fj_status fj_rt_nvptx_run(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs)
{
	return fj_rt_nvptx_run_dev(p, inputs, NULL, outputs, NULL);
}

/* One run of all kernels between events e0 and e1; *ms: its time. */
static fj_status timed_launch(fj_rt_nvprog *p, void *e0, void *e1, float *ms)
{
	fj_status st = p->dev.event_record(p->dev.ud, e0);
	if (st == FJ_OK)
		st = launch_all(p);
	if (st == FJ_OK)
		st = p->dev.event_record(p->dev.ud, e1);
	if (st == FJ_OK)
		st = p->dev.event_elapsed(p->dev.ud, e0, e1, ms);
	return st;
}

fj_status fj_rt_nvptx_bench(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, fj_rt_nvptx_bench_result *br)
{
	memset(br, 0, sizeof *br);
	if (!p->dev.event_create)
		return fj_error_status(p->ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0}, "--bench needs the CUDA device");
	const fj_graph *g = p->g;
	size_t bytes = 0;
	for (uint32_t i = 0; i < g->nparams; i++)
		bytes += p->vbytes[g->params[i]];
	for (uint32_t k = 0; k < g->nresults; k++)
		bytes += g->values[g->results[k]].kind == FJ_VK_LITERAL ? 0 : p->vbytes[g->results[k]];
	br->bytes = bytes;
	void *e0 = NULL, *e1 = NULL;
	fj_status st = use_stream(p);
	if (st == FJ_OK)
		st = upload(p, inputs);
	if (st == FJ_OK)
		st = p->dev.event_create(p->dev.ud, &e0);
	if (st == FJ_OK)
		st = p->dev.event_create(p->dev.ud, &e1);
	/* warm-up, and an estimate of one run */
	float ms = 0;
	for (int w = 0; w < 3 && st == FJ_OK; w++)
		st = timed_launch(p, e0, e1, &ms);
	if (st == FJ_OK)
		st = check_status(p);
	int reps = ms > 0 ? (int)(300.0 / ms) : 200;
	reps = reps < 10 ? 10 : reps > 200 ? 200 : reps;
	double *times = calloc((size_t)reps, sizeof *times);
	if (st == FJ_OK && !times)
		st = oom(p->ctx);
	for (int r = 0; r < reps && st == FJ_OK; r++) {
		st = timed_launch(p, e0, e1, &ms);
		if (times)
			times[r] = ms;
	}
	if (st == FJ_OK) {
		br->median_ms = fj_rt_median(times, reps);
		br->reps = reps;
	}
	/* the same-run copy baseline: bytes/2 device to device */
	size_t half = bytes / 2;
	uint64_t src = 0, dst = 0;
	if (st == FJ_OK && half) {
		st = p->dev.alloc(p->dev.ud, half, &src);
		if (st == FJ_OK)
			st = p->dev.alloc(p->dev.ud, half, &dst);
		if (st == FJ_OK)
			st = p->dev.memset0(p->dev.ud, src, half);
		for (int r = 0; r < reps + 3 && st == FJ_OK; r++) {
			st = p->dev.event_record(p->dev.ud, e0);
			if (st == FJ_OK)
				st = fj_nvptx_device_copy(p->ctx, &p->dev, dst, src, half);
			if (st == FJ_OK)
				st = p->dev.event_record(p->dev.ud, e1);
			if (st == FJ_OK)
				st = p->dev.event_elapsed(p->dev.ud, e0, e1, &ms);
			if (r >= 3)
				times[r - 3] = ms;
		}
		if (st == FJ_OK)
			br->copy_ms = fj_rt_median(times, reps);
	}
	if (src)
		p->dev.release(p->dev.ud, src);
	if (dst)
		p->dev.release(p->dev.ud, dst);
	if (e0)
		p->dev.event_destroy(p->dev.ud, e0);
	if (e1)
		p->dev.event_destroy(p->dev.ud, e1);
	free(times);
	if (st == FJ_OK)
		st = p->dev.sync(p->dev.ud);
	p->ws_dirty |= st != FJ_OK;
	if (st == FJ_OK)
		st = fence(p);
	return st;
}

/* ---- running on the caller's device memory (the public API's CUDA tensors) ---- */

/* Writes a returned literal's one element to device address dst. */
static fj_status store_literal_dev(fj_rt_nvprog *p, uint64_t dst, const fj_value *val)
{
	int64_t cell[2] = {0, 0}; /* room for the widest dtype, aligned */
	fj_rt_tensor t = {.data = cell, .dtype = val->type.dtype};
	store_literal(&t, &val->lit);
	return p->dev.htod(p->dev.ud, dst, cell, (size_t)fj_dtype_size(val->type.dtype));
}

/* Result k of a run whose buffers are in place: to the caller's device
 * buffer out_dev (0: to the host tensor out, as fj_rt_nvptx_run does). */
static fj_status place_result(fj_rt_nvprog *p, uint32_t k, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                              fj_rt_tensor *out, uint64_t out_dev)
{
	const fj_graph *g = p->g;
	fj_vid v = g->results[k];
	const fj_value *val = &g->values[v];
	if (out_dev) {
		if (val->kind == FJ_VK_LITERAL)
			return store_literal_dev(p, out_dev, val);
		return fj_nvptx_device_copy(p->ctx, &p->dev, out_dev, p->vbuf[v], p->vbytes[v]); /* nothing when written in place */
	}
	fj_status st =
		fj_rt_tensor_reshape(p->ctx, out, val->type.dtype, val->type.rank, &p->vdims[(size_t)v * FJ_MAX_RANK]);
	if (st != FJ_OK || !out->nbytes)
		return st;
	if (val->kind == FJ_VK_LITERAL) {
		store_literal(out, &val->lit);
		return FJ_OK;
	}
	if (val->kind == FJ_VK_PARAM && !(in_dev && in_dev[val->def])) {
		memcpy(out->data, inputs[val->def]->data, out->nbytes);
		return FJ_OK;
	}
	return p->dev.dtoh(p->dev.ud, out->data, p->vbuf[v], out->nbytes);
}

/* Points the parameters given in device memory, and the results the caller
 * wants in device memory, at the caller's buffers (the program's own stand
 * aside; saved holds them, to restore). A result that is a parameter or a
 * literal, or the second place of a value returned twice, keeps its buffer
 * and is copied afterwards (place_result). */
static void redirect_buffers(fj_rt_nvprog *p, const uint64_t *in_dev, const uint64_t *out_dev, const uint64_t *saved)
{
	const fj_graph *g = p->g;
	for (uint32_t i = 0; in_dev && i < g->nparams; i++)
		if (in_dev[i])
			p->vbuf[g->params[i]] = in_dev[i];
	for (uint32_t k = 0; out_dev && k < g->nresults; k++) {
		fj_vid v = g->results[k];
		fj_value_kind kind = g->values[v].kind;
		if (out_dev[k] && kind != FJ_VK_LITERAL && kind != FJ_VK_PARAM && p->vbuf[v] == saved[v])
			p->vbuf[v] = out_dev[k];
	}
}

/* Whether every parameter and result is in the caller's device memory. */
static bool all_on_device(const fj_rt_nvprog *p, const uint64_t *in_dev, const uint64_t *out_dev)
{
	const fj_graph *g = p->g;
	for (uint32_t i = 0; i < g->nparams; i++)
		if (!in_dev || !in_dev[i])
			return false;
	for (uint32_t k = 0; k < g->nresults; k++)
		if (!out_dev || !out_dev[k])
			return false;
	return true;
}

fj_status fj_rt_nvptx_run_dev(fj_rt_nvprog *p, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                              fj_rt_tensor *outputs, const uint64_t *out_dev)
{
	if (!p->bound)
		return fj_error_status(p->ctx, FJ_ERR_INVALID, (fj_loc){0}, "nvptx: run before bind");
	const fj_graph *g = p->g;
	size_t nv = g->nvalues ? g->nvalues : 1;
	uint64_t *saved = malloc(nv * sizeof *saved);
	if (!saved)
		return oom(p->ctx);
	memcpy(saved, p->vbuf, nv * sizeof *saved);
	redirect_buffers(p, in_dev, out_dev, saved);
	/* on the caller's stream with nothing on the host, nothing waits (unless
	 * a kernel may report an error: its flags are read back) */
	bool async = p->stream && !p->may_fail && all_on_device(p, in_dev, out_dev);
	fj_status st = use_stream(p);
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++)
		if (!(in_dev && in_dev[i]))
			st = p->dev.htod(p->dev.ud, p->vbuf[g->params[i]], inputs[i]->data, p->vbytes[g->params[i]]);
	bool launched = st == FJ_OK;
	if (st == FJ_OK)
		st = launch_all(p);
	if (st == FJ_OK && !async)
		st = p->dev.sync(p->dev.ud);
	p->ws_dirty |= launched && st != FJ_OK;
	if (st == FJ_OK)
		st = check_status(p);
	for (uint32_t k = 0; k < g->nresults && st == FJ_OK; k++)
		st = place_result(p, k, inputs, in_dev, &outputs[k], out_dev ? out_dev[k] : 0);
	if (st == FJ_OK && !async && (out_dev || p->stream))
		st = p->dev.sync(p->dev.ud); /* the device-to-device copies, and uploads from the caller's memory */
	fj_status fst = fence(p);
	if (st == FJ_OK)
		st = fst;
	memcpy(p->vbuf, saved, nv * sizeof *saved);
	free(saved);
	return st;
}
