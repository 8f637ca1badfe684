/* kcache.h -- the one kernel cache: memory plus disk, for every kind of
 * kernel a backend builds (host object code, PTX), keyed by structure.
 *
 * It lives in cache/ (not runtime/) because the backends use it and may not
 * include runtime/ (ARCHITECTURE.md: one direction only); it depends on ir/
 * and libc only, never on LLVM.
 *
 * Keys: a kernel's key is its structure (codegen/cg.h fj_cg_node_key: ops,
 * types, attributes, schedule) plus what its code depends on in this
 * process (the target: CPU or SM, and the LLVM version), never its kernel
 * name: identical regions (the layers of a deep stack) share one key, so
 * they compile once per context and, through the disk, once per machine.
 *
 * The flow (fj_kcache_get): a batch of kernel keys of one kind is looked up
 * in memory; the distinct misses are looked up on disk as one entry (keyed
 * by the kind, a target description and every missing key, in order); what
 * is still missing is compiled by the caller's function, in parallel on
 * `compile_jobs` threads (fj_kcache_parallel), stored on disk as one entry
 * and entered in memory. Backends keep what they make of a payload (the JIT
 * addresses of an object, a loaded CUDA module) on its memory entry.
 *
 * Memory: one table per context (slot FJ_SLOT_KERNEL_CACHE), capped by the
 * setting kernel_cache_mb (default 256 MiB): each entry is charged its key,
 * its payload and KC_ENTRY_OVERHEAD (the backend's value: JIT code pages,
 * symbol tables). Callers hold references on the entries they use
 * (fj_kcache_find, fj_kcache_insert and fj_kcache_get each hand out one;
 * fj_kcache_release drops it): a program keeps its kernels' entries until
 * it is destroyed. Once the charges pass the cap, the least recently used
 * entries that nobody holds are evicted (value_free frees the backend's
 * value: a host kernel's code leaves the JIT); entries in use are never
 * evicted, so the cap may be exceeded by what live programs use. The rest
 * live until the context is destroyed (first among its slots, so the
 * backends' state is still there for the entries' value_free).
 *
 * Disk place: the context's setting cache_dir (fj_context_set_cache or the
 * option "cache_dir"; by default $FUSEJIT_CACHE_DIR, else
 * $XDG_CACHE_HOME/fusejit, else $HOME/.cache/fusejit). The value "off" (or
 * an empty string) disables the disk cache; the memory cache stays.
 *
 * Disk entries: one file per (kind, key), named <kind>-<128-bit hash>.fjc,
 * where the hash is over the kind, the key, FUSEJIT_VERSION and the build.
 * Callers put everything their output depends on into the key (kernel keys,
 * LLVM version, CPU name and features, target ...). A file is
 *
 *   magic "FJKCACHE" | u32 format | u32 keylen | u64 payload length |
 *   u64 payload checksum | u64 header checksum | key bytes | payload
 *
 * written to a temporary file in the same directory and renamed into place
 * (atomic: readers see a whole entry or none). The temporary files of
 * writers that died (SIGKILL mid-store) are deleted by the next directory
 * scan (see the cap) once their process is gone or after an hour; they never
 * count against the cap. A failed store (ENOSPC ...) deletes its temporary
 * file and is counted (store_errors), never an error of the compile. The
 * setting cache_fault injects such faults, for tests (fusejit.h). On read the magic, format,
 * key echo, length and both checksums are verified; an entry that fails is
 * counted as corrupt, deleted and reported as a miss, so the caller rebuilds
 * and stores it again: it is never trusted. A batch's payload is
 * u32 count | u64 length x count | the payloads, in key order.
 *
 * Size cap: the setting cache_max_mb (default $FUSEJIT_CACHE_MAX_MB, else 256). After a store that brings the
 * directory over the cap, the least recently used entries (oldest mtime;
 * every hit touches its entry's mtime) are deleted until it is under 90% of
 * the cap.
 *
 * Thread safety: every function may be called from any thread; several
 * processes may share one directory (atomic renames, no locks). */
#ifndef FJ_KCACHE_H
#define FJ_KCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* Looks up (kind, key[0..keylen)). On a verified hit returns true and sets
 * *data (allocated with malloc; the caller frees it) and *len. */
bool fj_kcache_load(fj_context *ctx, const char *kind, const void *key, size_t keylen, void **data,
                    size_t *len);
/* Stores an entry (best effort: failures are silent, counted in
 * store_errors). */
void fj_kcache_store(fj_context *ctx, const char *kind, const void *key, size_t keylen, const void *data,
                     size_t len);
/* The directory in use, or NULL when the disk cache is off. */
const char *fj_kcache_dir(fj_context *ctx);
/* Sets the directory (NULL: the settings'; "off": disabled) and the cap in
 * bytes (0: the settings'). */
fj_status fj_kcache_configure(fj_context *ctx, const char *dir, uint64_t max_bytes);

/* ---- memory ---- */

/* A kernel in memory. data/len: its payload (malloc'd), as compiled or read
 * from disk. value: what the backend made of it, set once by the backend
 * under its own lock (then the backend may free data and set it NULL, if it
 * never reads it again); value_free (may be NULL) frees it with the cache. */
typedef struct fj_kc_entry {
	void *data;
	size_t len;
	void *value;
	void (*value_free)(fj_context *ctx, void *value);
} fj_kc_entry;

/* The entry of (kind, key) in memory, with a reference the caller drops
 * with fj_kcache_release, or NULL. */
fj_kc_entry *fj_kcache_find(fj_context *ctx, const char *kind, const void *key, size_t keylen);
/* Enters (kind, key) -> data[0..len) (taking data, malloc'd) and returns its
 * entry, with a reference; when another thread entered the key meanwhile,
 * frees data and returns that entry (with a reference). NULL when out of
 * memory (data freed). May evict entries nobody holds. */
fj_kc_entry *fj_kcache_insert(fj_context *ctx, const char *kind, const void *key, size_t keylen, void *data,
                              size_t len);
/* Takes one more reference on e, and drops one (e may be NULL): an entry
 * with none left may be evicted (at once when the cache is over its cap). */
void fj_kcache_retain(fj_context *ctx, fj_kc_entry *e);
void fj_kcache_release(fj_context *ctx, fj_kc_entry *e);

/* ---- the flow: memory, disk, then compile in parallel ---- */

typedef struct fj_kc_request {
	const void *key;      /* the kernel's key (see above) */
	size_t keylen;
	fj_kc_entry *entry;   /* out */
} fj_kc_request;

/* Compiles request i's kernel: *data (malloc'd) and *len, its payload. Runs on
 * any thread; dctx takes its diagnostics (a worker's private context, or ctx
 * itself when there is one thread). */
typedef fj_status (*fj_kc_compile_fn)(void *arg, fj_context *dctx, uint32_t i, void **data, size_t *len);

/* Fills req[i].entry for i in [0, n), each with one reference (release
 * each request's): from memory (counted in memory_hits),
 * else from the disk entry of the batch of distinct misses (kernels_loaded),
 * else compiled with compile (kernels_compiled; then stored on disk). target
 * describes what the payloads depend on besides the keys (LLVM version, CPU
 * features ...): part of the disk key only. *fresh (may be NULL): the number
 * of distinct kernels loaded or compiled. On an error no entry is set. */
fj_status fj_kcache_get(fj_context *ctx, const char *kind, const char *target, fj_kc_request *req, uint32_t n,
                        fj_kc_compile_fn compile, void *arg, uint32_t *fresh);

/* ---- parallel jobs ---- */

/* Runs job(arg, dctx, i) for i in [0, n) on up to `threads` threads, the
 * calling one included (threads <= 0: fj_kcache_jobs), jobs handed out in
 * order. With one thread, dctx is ctx and the first failure stops the
 * rest. With several, each thread records into a private context
 * (fj_context_new_like), jobs after a failed one are skipped, and once all
 * have joined the diagnostics of jobs 0 .. the first failed one are replayed
 * onto ctx in job order: the same diagnostics and status as one thread, in
 * any timing. Returns the first failed job's status, or FJ_OK. */
typedef fj_status (*fj_kc_job_fn)(void *arg, fj_context *dctx, uint32_t i);
fj_status fj_kcache_parallel(fj_context *ctx, uint32_t n, int threads, fj_kc_job_fn job, void *arg);
/* Threads for compiling: the setting compile_jobs, 0 = the online cores. */
int fj_kcache_jobs(fj_context *ctx);

/* ---- counters (see fusejit.h's fj_cache_stats) ---- */
typedef enum fj_kcache_counter {
	FJ_KC_KERNELS_COMPILED,  /* kernels generated by LLVM in this context */
	FJ_KC_KERNELS_LOADED,    /* kernels taken from the disk cache */
	FJ_KC_MEMORY_HITS,       /* kernels found in the in-memory cache */
	FJ_KC_DISK_HITS,         /* disk entries read and verified */
	FJ_KC_DISK_MISSES,       /* disk lookups that found nothing usable */
	FJ_KC_DISK_CORRUPT,      /* entries rejected by verification (and deleted) */
	FJ_KC_DISK_STORES,       /* entries written */
	FJ_KC_DISK_EVICTIONS,    /* entries deleted by the size cap */
	FJ_KC_STORE_ERRORS,      /* stores that failed (a full disk ...): not errors of the compile */
	FJ_KC_DISK_LEFTOVERS,    /* temporary files of unfinished stores deleted */
	FJ_KC_MEMORY_EVICTIONS,  /* entries evicted from memory by the cap kernel_cache_mb */
	FJ_KC_COUNT
} fj_kcache_counter;
void fj_kcache_count(fj_context *ctx, fj_kcache_counter c, uint64_t n);
void fj_kcache_counters(fj_context *ctx, uint64_t out[FJ_KC_COUNT]);

/* 64-bit hashes with a seed (not cryptographic). */
uint64_t fj_kcache_hash(const void *data, size_t n, uint64_t seed);

#endif
