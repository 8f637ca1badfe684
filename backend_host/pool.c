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

#define FJ_POOL_MAX_THREADS 512

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
	/* the current job */
	fj_host_task_fn fn;
	void *arg;
	int64_t extent, chunk, nchunks;
	atomic_llong next;      /* the next chunk to take */
	int64_t err_chunk;      /* lowest failing chunk (guarded by lock) */
	int32_t err;
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

/* Runs chunks of the current job until none is left. */
static void run_chunks(fj_host_pool *p)
{
	for (;;) {
		long long c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
		if (c >= p->nchunks)
			return;
		int64_t lo = c * p->chunk;
		int64_t hi = lo + p->chunk < p->extent ? lo + p->chunk : p->extent;
		int32_t rc = p->fn(p->arg, lo, hi);
		if (rc) {
			pthread_mutex_lock(&p->lock);
			if (p->err == 0 || c < p->err_chunk) {
				p->err = rc;
				p->err_chunk = c;
			}
			pthread_mutex_unlock(&p->lock);
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
		pthread_mutex_unlock(&p->lock);
		run_chunks(p);
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
	atomic_init(&p->next, 0);
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
	fj_host_pool *p = get_pool(ctx);
	return p && p->pid == getpid() ? p->nworkers + 1 : 1;
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
	fj_host_pool *p = get_pool(ctx);
	if (!p || p->nworkers == 0 || p->pid != getpid() || pthread_mutex_trylock(&p->busy) != 0)
		return fn(arg, 0, extent); /* no pool, a forked child's, or busy: run here */
	if (threads > p->nworkers + 1)
		threads = p->nworkers + 1;
	int64_t maxchunks = (int64_t)threads * 4;
	int64_t nchunks = extent / grain; /* every chunk at least `grain` */
	if (nchunks > maxchunks)
		nchunks = maxchunks;
	if (nchunks < 1)
		nchunks = 1;
	int64_t chunk = extent / nchunks + (extent % nchunks != 0);
	nchunks = extent / chunk + (extent % chunk != 0);
	int want = threads - 1;
	if (want > nchunks - 1)
		want = (int)(nchunks - 1);
	if (want <= 0) {
		pthread_mutex_unlock(&p->busy);
		return fn(arg, 0, extent);
	}

	pthread_mutex_lock(&p->lock);
	p->fn = fn;
	p->arg = arg;
	p->extent = extent;
	p->chunk = chunk;
	p->nchunks = nchunks;
	atomic_store(&p->next, 0);
	p->err = 0;
	p->err_chunk = 0;
	p->want = want;
	p->active = want;
	p->generation++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);

	run_chunks(p);

	pthread_mutex_lock(&p->lock);
	while (p->active > 0)
		pthread_cond_wait(&p->done, &p->lock);
	int32_t err = p->err;
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->busy);
	return err;
}
