/* pool.c -- the host thread pool (host.h): fj_host_thread_count and
 * fj_host_parallel_for.
 *
 * One pool per context, kept in the context slot FJ_SLOT_THREAD_POOL and
 * created on first use with (cores - 1) workers: the caller of
 * fj_host_parallel_for works too. FUSEJIT_THREADS overrides the number of
 * cores. Workers sleep on a condition variable between jobs.
 *
 * A job is [0, extent) cut into chunks of at least `grain` iterations, at
 * most 4 per thread; threads take chunks from an atomic counter, so a slow
 * thread does not hold the others back. An extent of at most one grain runs on
 * the caller alone. The pool runs one job at a time: a second caller (another
 * thread, or a task that calls fj_host_parallel_for itself) finds it busy and
 * runs its job on its own thread, so nesting never deadlocks.
 *
 * The result is the non-zero value returned by the lowest-numbered failing
 * chunk (deterministic), or 0.
 *
 * An embedder's runner (fj_context_set_parallel_runner) replaces the pool:
 * a job then runs as one call of the runner, each of its threads taking
 * chunks from the same counter, and no worker of fusejit's own is started.
 * A job started inside a runner's body runs on its thread alone.
 *
 * Fork: a child process inherits the pool but none of its workers (and maybe
 * a lock another thread held at the fork), so a pool created by another
 * process is never used: the child runs every job on the calling thread
 * (DataLoader workers keep working; they run single-threaded). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_host/host.h"
#include "ir/context.h"

#define FJ_POOL_MAX_THREADS 512

/* One parallel_for: [0, extent) in nchunks chunks of `chunk`. */
typedef struct job {
	fj_host_task_fn fn;
	void *arg;
	int64_t extent, chunk, nchunks;
	atomic_llong next;      /* the next chunk to take */
	pthread_mutex_t lock;   /* guards err and err_chunk */
	int64_t err_chunk;      /* lowest failing chunk */
	int32_t err;
} job;

typedef struct fj_host_pool {
	fj_context *ctx;
	int nthreads;           /* cores, the caller included */
	int nworkers;           /* threads started (nthreads - 1) */
	pid_t pid;              /* the process whose threads they are */
	pthread_t *workers;
	pthread_mutex_t busy;   /* held by the caller running a job */
	pthread_mutex_t lock;   /* guards the fields below */
	pthread_cond_t wake;    /* a new job or shutdown */
	pthread_cond_t done;    /* the last worker left the job */
	uint64_t generation;    /* bumped per job */
	bool shutdown;
	int active;             /* workers still inside the current job */
	int want;               /* workers that take part in the current job */
	job *job;               /* the current job */
} fj_host_pool;

static int detect_cores(fj_context *ctx)
{
	int v = fj_context_settings(ctx)->threads;
	if (v > 0)
		return v > FJ_POOL_MAX_THREADS ? FJ_POOL_MAX_THREADS : v;
	int n = 0;
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		n = c > 0 ? (int)c : 1;
	}
	return n > FJ_POOL_MAX_THREADS ? FJ_POOL_MAX_THREADS : n;
}

/* Runs chunks of job j until none is left. */
static void run_chunks(job *j)
{
	for (;;) {
		long long c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= j->nchunks)
			return;
		int64_t lo = c * j->chunk;
		int64_t hi = lo + j->chunk < j->extent ? lo + j->chunk : j->extent;
		int32_t rc = j->fn(j->arg, lo, hi);
		if (rc) {
			pthread_mutex_lock(&j->lock);
			if (j->err == 0 || c < j->err_chunk) {
				j->err = rc;
				j->err_chunk = c;
			}
			pthread_mutex_unlock(&j->lock);
		}
	}
}

typedef struct worker_arg {
	fj_host_pool *p;
	int index;
} worker_arg;

static void *worker_main(void *varg)
{
	fj_host_pool *p = ((worker_arg *)varg)->p;
	int index = ((worker_arg *)varg)->index;
	free(varg);
	pthread_setname_np(pthread_self(), "fusejit-pool"); /* as top and gdb show it */
	uint64_t seen = 0;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->shutdown && p->generation == seen)
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->shutdown)
			break;
		seen = p->generation;
		if (index >= p->want)
			continue; /* not needed for this job */
		job *j = p->job;
		pthread_mutex_unlock(&p->lock);
		run_chunks(j);
		pthread_mutex_lock(&p->lock);
		if (--p->active == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void pool_destroy(fj_context *ctx, void *vp)
{
	fj_host_pool *p = vp;
	if (p->pid != getpid())
		return; /* a forked child's copy: its workers are the parent's */
	pthread_mutex_lock(&p->lock);
	p->shutdown = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i], NULL);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->busy);
	fj_free(ctx, p->workers, (size_t)(p->nthreads > 1 ? p->nthreads - 1 : 1) * sizeof *p->workers);
	fj_free(ctx, p, sizeof *p);
}

static fj_status pool_create(fj_context *ctx, void **out)
{
	fj_host_pool *p = fj_alloc(ctx, sizeof *p);
	if (!p)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory creating the thread pool");
	memset(p, 0, sizeof *p);
	p->ctx = ctx;
	p->pid = getpid();
	p->nthreads = detect_cores(ctx);
	p->workers = fj_alloc(ctx, (size_t)(p->nthreads > 1 ? p->nthreads - 1 : 1) * sizeof *p->workers);
	if (!p->workers) {
		fj_free(ctx, p, sizeof *p);
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory creating the thread pool");
	}
	pthread_mutex_init(&p->busy, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 0; i < p->nthreads - 1; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (!wa)
			break;
		wa->p = p;
		wa->index = i;
		if (pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
			free(wa);
			break; /* run with the workers we have */
		}
		p->nworkers++;
	}
	*out = p;
	return FJ_OK;
}

static fj_host_pool *get_pool(fj_context *ctx)
{
	void *p = NULL;
	if (fj_context_slot(ctx, FJ_SLOT_THREAD_POOL, pool_create, pool_destroy, &p) != FJ_OK)
		return NULL;
	return p;
}

int fj_host_thread_count(fj_context *ctx)
{
	if (ctx->runner)
		return ctx->runner_pid == (long)getpid() ? detect_cores(ctx) : 1;
	fj_host_pool *p = get_pool(ctx);
	return p && p->pid == getpid() ? p->nworkers + 1 : 1;
}

/* True on a thread running a runner's body: a job it starts runs there. */
static _Thread_local bool in_runner;

static void runner_body(void *vj)
{
	bool was = in_runner;
	in_runner = true;
	run_chunks(vj);
	in_runner = was;
}

/* Cuts [0, extent) into chunks of at least grain for `threads` threads (at
 * most 4 chunks each); returns how many threads have a chunk to take. */
static int plan(job *j, int threads, int64_t extent, int64_t grain)
{
	int64_t maxchunks = (int64_t)threads * 4;
	int64_t nchunks = extent / grain; /* every chunk at least `grain` */
	if (nchunks > maxchunks)
		nchunks = maxchunks;
	if (nchunks < 1)
		nchunks = 1;
	int64_t chunk = extent / nchunks + (extent % nchunks != 0);
	j->extent = extent;
	j->chunk = chunk;
	j->nchunks = extent / chunk + (extent % chunk != 0);
	atomic_init(&j->next, 0);
	j->err = 0;
	j->err_chunk = 0;
	return threads < j->nchunks ? threads : (int)j->nchunks;
}

/* The job on the embedder's runner (fj_context_set_parallel_runner). */
static int32_t run_on_runner(fj_context *ctx, int threads, int64_t extent, int64_t grain, fj_host_task_fn fn,
                             void *arg)
{
	if (in_runner || ctx->runner_pid != (long)getpid())
		return fn(arg, 0, extent); /* nested in a body, or a forked child */
	job j = {.fn = fn, .arg = arg};
	int n = plan(&j, threads < FJ_POOL_MAX_THREADS ? threads : FJ_POOL_MAX_THREADS, extent, grain);
	if (n <= 1)
		return fn(arg, 0, extent);
	pthread_mutex_init(&j.lock, NULL);
	ctx->runner(runner_body, &j, (unsigned)n, 0);
	pthread_mutex_destroy(&j.lock);
	return j.err;
}

int32_t fj_host_parallel_for(fj_context *ctx, int threads, int64_t extent, int64_t grain,
                             fj_host_task_fn fn, void *arg)
{
	if (extent <= 0)
		return 0;
	if (grain < 1)
		grain = 1;
	if (threads <= 1 || extent <= grain)
		return fn(arg, 0, extent);
	if (ctx->runner)
		return run_on_runner(ctx, threads, extent, grain, fn, arg);
	fj_host_pool *p = get_pool(ctx);
	if (!p || p->nworkers == 0 || p->pid != getpid() || pthread_mutex_trylock(&p->busy) != 0)
		return fn(arg, 0, extent); /* no pool, a forked child's, or busy: run here */
	if (threads > p->nworkers + 1)
		threads = p->nworkers + 1;
	job j = {.fn = fn, .arg = arg};
	int want = plan(&j, threads, extent, grain) - 1;
	if (want <= 0) {
		pthread_mutex_unlock(&p->busy);
		return fn(arg, 0, extent);
	}
	pthread_mutex_init(&j.lock, NULL);

	pthread_mutex_lock(&p->lock);
	p->job = &j;
	p->want = want;
	p->active = want;
	p->generation++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);

	run_chunks(&j);

	pthread_mutex_lock(&p->lock);
	while (p->active > 0)
		pthread_cond_wait(&p->done, &p->lock);
	p->job = NULL;
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->busy);
	pthread_mutex_destroy(&j.lock);
	return j.err;
}
