/* kcache.c -- the kernel cache's memory table, its disk entries and the
 * compile counters (kcache.h; the flow over them is in kcompile.c).
 *
 * One fj_kcache per context (slot FJ_SLOT_KERNEL_CACHE): the memory table
 * (open addressing on the key's hash), the directory, the cap and the
 * counters, behind one mutex (the counters are atomics). File
 * I/O happens outside the mutex; the directory may be shared with other
 * processes, so every write is temp file + rename, and every read verifies.
 * Eviction scans the directory (O(entries)) only after a store that may have
 * crossed the cap. */
#include <dirent.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/kcache.h"

#define KC_MAGIC "FJKCACHE"
#define KC_FORMAT 1u
#define KC_HEADER 40 /* magic 8, format 4, keylen 4, len 8, sum 8, hsum 8 */
#define KC_DEFAULT_MB 256
#define KC_TMP_PREFIX ".tmp-"
#define KC_TMP_MAX_AGE 3600 /* seconds: a temporary file older than this is a leftover */

typedef struct mem_entry mem_entry;
struct mem_entry {
	fj_kc_entry e;       /* first: the backends see this */
	const char *kind;    /* a string literal of the caller's */
	char *key;           /* malloc'd */
	size_t keylen;
	uint64_t hash;
	uint32_t refs;       /* references held by callers (fj_kcache_release); 0: evictable */
	size_t charge;       /* bytes counted against the memory cap */
	mem_entry *newer, *older; /* the LRU list (kc->newest ... kc->oldest) */
};

/* What an entry costs besides its key and payload: the entry, and the
 * backend's value (the host JIT maps at least a page of code and keeps
 * its symbol tables per kernel; measured at about 8 KiB a kernel). */
#define KC_ENTRY_OVERHEAD 8192

typedef struct fj_kcache {
	pthread_mutex_t lock;
	mem_entry **tab;     /* the memory table: NULL or an entry per slot */
	uint32_t cap, count;
	mem_entry *newest, *oldest; /* the LRU list of every entry */
	uint64_t mem_bytes;  /* the entries' charges (capped by the setting kernel_cache_mb) */
	char *dir;           /* NULL: off (malloc'd) */
	bool configured;     /* set by fj_kcache_configure (wins over the environment) */
	uint64_t max_bytes;
	atomic_ullong total; /* bytes in the directory, estimated; 0: unknown */
	atomic_ullong counters[FJ_KC_COUNT];
	atomic_ullong tmp_seq;
} fj_kcache;

/* ---- hashing ---- */

static uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

uint64_t fj_kcache_hash(const void *data, size_t n, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * (n + 1));
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ fmix64(w + 0x2545f4914f6cdd1dull)) * 0x100000001b3ull;
		h = (h << 27) | (h >> 37);
	}
	uint64_t t = 0;
	for (size_t k = 0; i < n; i++, k++)
		t |= (uint64_t)p[i] << (8 * k);
	h ^= fmix64(t ^ 0x85ebca77c2b2ae63ull);
	return fmix64(h);
}

/* ---- the per-context object ---- */

/* The settings' directory (a malloc'd copy), or NULL when the disk cache is off. */
static char *default_dir(fj_context *ctx)
{
	const char *d = fj_context_settings(ctx)->cache_dir;
	return d && *d && strcmp(d, "off") != 0 ? strdup(d) : NULL;
}

static uint64_t default_max(fj_context *ctx)
{
	uint64_t m = fj_context_settings(ctx)->cache_max_bytes;
	return m ? m : (uint64_t)KC_DEFAULT_MB << 20;
}

static uint64_t default_mem_max(fj_context *ctx)
{
	uint64_t m = fj_context_settings(ctx)->kernel_cache_bytes;
	return m ? m : (uint64_t)KC_DEFAULT_MB << 20;
}

static void entry_free(fj_context *ctx, mem_entry *m)
{
	if (m->e.value && m->e.value_free)
		m->e.value_free(ctx, m->e.value);
	free(m->e.data);
	free(m->key);
	free(m);
}

static void kc_destroy(fj_context *ctx, void *p)
{
	fj_kcache *kc = p;
	for (uint32_t i = 0; i < kc->cap; i++)
		if (kc->tab[i])
			entry_free(ctx, kc->tab[i]);
	free(kc->tab);
	free(kc->dir);
	pthread_mutex_destroy(&kc->lock);
	fj_free(ctx, kc, sizeof *kc);
}

static fj_status kc_create(fj_context *ctx, void **out)
{
	fj_kcache *kc = fj_alloc(ctx, sizeof *kc);
	if (!kc)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory creating the kernel cache");
	memset(kc, 0, sizeof *kc);
	pthread_mutex_init(&kc->lock, NULL);
	kc->dir = default_dir(ctx);
	kc->max_bytes = default_max(ctx);
	for (int i = 0; i < FJ_KC_COUNT; i++)
		atomic_init(&kc->counters[i], 0);
	atomic_init(&kc->total, 0);
	atomic_init(&kc->tmp_seq, 0);
	*out = kc;
	return FJ_OK;
}

static fj_kcache *get(fj_context *ctx)
{
	void *p = NULL;
	if (fj_context_slot(ctx, FJ_SLOT_KERNEL_CACHE, kc_create, kc_destroy, &p) != FJ_OK)
		return NULL;
	return p;
}

/* ---- memory ---- */

static uint64_t mem_hash(const char *kind, const void *key, size_t keylen)
{
	return fj_kcache_hash(key, keylen, fj_kcache_hash(kind, strlen(kind), 0x6d656d));
}

static mem_entry *mem_find(fj_kcache *kc, const char *kind, const void *key, size_t keylen, uint64_t h)
{
	if (!kc->cap)
		return NULL;
	for (uint32_t i = (uint32_t)h & (kc->cap - 1);; i = (i + 1) & (kc->cap - 1)) {
		mem_entry *m = kc->tab[i];
		if (!m)
			return NULL;
		if (m->hash == h && m->keylen == keylen && memcmp(m->key, key, keylen) == 0 && strcmp(m->kind, kind) == 0)
			return m;
	}
}

/* Room for one more entry (load at most 1/2). */
static bool mem_grow(fj_kcache *kc)
{
	if ((kc->count + 1) * 2 <= kc->cap)
		return true;
	uint32_t nc = kc->cap ? kc->cap * 2 : 64;
	mem_entry **nt = calloc(nc, sizeof *nt);
	if (!nt)
		return false;
	for (uint32_t i = 0; i < kc->cap; i++) {
		if (!kc->tab[i])
			continue;
		uint32_t j = (uint32_t)kc->tab[i]->hash & (nc - 1);
		while (nt[j])
			j = (j + 1) & (nc - 1);
		nt[j] = kc->tab[i];
	}
	free(kc->tab);
	kc->tab = nt;
	kc->cap = nc;
	return true;
}

/* ---- the LRU list and eviction (under kc->lock) ---- */

static void lru_unlink(fj_kcache *kc, mem_entry *m)
{
	if (m->newer)
		m->newer->older = m->older;
	else
		kc->newest = m->older;
	if (m->older)
		m->older->newer = m->newer;
	else
		kc->oldest = m->newer;
	m->newer = m->older = NULL;
}

static void lru_push(fj_kcache *kc, mem_entry *m)
{
	m->newer = NULL;
	m->older = kc->newest;
	if (kc->newest)
		kc->newest->newer = m;
	kc->newest = m;
	if (!kc->oldest)
		kc->oldest = m;
}

/* A caller takes a reference on m, which becomes the most recently used. */
static void hold_locked(fj_kcache *kc, mem_entry *m)
{
	m->refs++;
	lru_unlink(kc, m);
	lru_push(kc, m);
}

/* Removes m from the table (linear probing: the entries after it move back
 * into the hole, so that no probe sequence breaks). */
static void tab_remove(fj_kcache *kc, mem_entry *m)
{
	uint32_t mask = kc->cap - 1, i = (uint32_t)m->hash & mask;
	while (kc->tab[i] != m)
		i = (i + 1) & mask;
	kc->tab[i] = NULL;
	for (uint32_t j = (i + 1) & mask; kc->tab[j]; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)kc->tab[j]->hash & mask;
		bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
		if (stays)
			continue;
		kc->tab[i] = kc->tab[j];
		kc->tab[j] = NULL;
		i = j;
	}
	kc->count--;
}

/* Takes the least recently used entries that no caller holds out of the
 * cache until it is within its cap; returns them (linked by `older`), for
 * entry_free outside the lock. */
static mem_entry *evict_locked(fj_kcache *kc, uint64_t max)
{
	mem_entry *victims = NULL;
	for (mem_entry *m = kc->oldest; m && kc->mem_bytes > max;) {
		mem_entry *next = m->newer;
		if (m->refs == 0) {
			lru_unlink(kc, m);
			tab_remove(kc, m);
			kc->mem_bytes -= m->charge;
			m->older = victims;
			victims = m;
		}
		m = next;
	}
	return victims;
}

static void free_victims(fj_context *ctx, fj_kcache *kc, mem_entry *victims)
{
	uint64_t n = 0;
	while (victims) {
		mem_entry *next = victims->older;
		entry_free(ctx, victims);
		victims = next;
		n++;
	}
	if (n)
		atomic_fetch_add(&kc->counters[FJ_KC_MEMORY_EVICTIONS], n);
}

fj_kc_entry *fj_kcache_find(fj_context *ctx, const char *kind, const void *key, size_t keylen)
{
	fj_kcache *kc = get(ctx);
	if (!kc)
		return NULL;
	uint64_t h = mem_hash(kind, key, keylen);
	pthread_mutex_lock(&kc->lock);
	mem_entry *m = mem_find(kc, kind, key, keylen, h);
	if (m)
		hold_locked(kc, m);
	pthread_mutex_unlock(&kc->lock);
	return m ? &m->e : NULL;
}

fj_kc_entry *fj_kcache_insert(fj_context *ctx, const char *kind, const void *key, size_t keylen, void *data,
                              size_t len)
{
	fj_kcache *kc = get(ctx);
	mem_entry *m = kc ? calloc(1, sizeof *m) : NULL;
	char *k = m ? malloc(keylen ? keylen : 1) : NULL;
	if (!k) {
		free(m);
		free(data);
		return NULL;
	}
	memcpy(k, key, keylen);
	*m = (mem_entry){{data, len, NULL, NULL}, kind, k, keylen, mem_hash(kind, key, keylen), 1,
	                 sizeof *m + keylen + len + KC_ENTRY_OVERHEAD, NULL, NULL};
	uint64_t max = default_mem_max(ctx);
	pthread_mutex_lock(&kc->lock);
	mem_entry *other = mem_find(kc, kind, key, keylen, m->hash), *victims = NULL;
	bool ok = other || mem_grow(kc);
	if (other) {
		hold_locked(kc, other);
	} else if (ok) {
		uint32_t j = (uint32_t)m->hash & (kc->cap - 1);
		while (kc->tab[j])
			j = (j + 1) & (kc->cap - 1);
		kc->tab[j] = m;
		kc->count++;
		lru_push(kc, m);
		kc->mem_bytes += m->charge;
		victims = evict_locked(kc, max);
	}
	pthread_mutex_unlock(&kc->lock);
	free_victims(ctx, kc, victims);
	if (other || !ok) { /* entered meanwhile by another thread, or no room */
		free(data);
		free(k);
		free(m);
		return other ? &other->e : NULL;
	}
	return &m->e;
}

void fj_kcache_retain(fj_context *ctx, fj_kc_entry *e)
{
	fj_kcache *kc = get(ctx);
	pthread_mutex_lock(&kc->lock);
	((mem_entry *)e)->refs++;
	pthread_mutex_unlock(&kc->lock);
}

void fj_kcache_release(fj_context *ctx, fj_kc_entry *e)
{
	fj_kcache *kc = e ? get(ctx) : NULL;
	if (!kc)
		return;
	uint64_t max = default_mem_max(ctx);
	pthread_mutex_lock(&kc->lock);
	mem_entry *m = (mem_entry *)e, *victims = NULL;
	FJ_ASSERT(m->refs > 0);
	if (--m->refs == 0 && kc->mem_bytes > max)
		victims = evict_locked(kc, max);
	pthread_mutex_unlock(&kc->lock);
	free_victims(ctx, kc, victims);
}

/* ---- counters ---- */

void fj_kcache_count(fj_context *ctx, fj_kcache_counter c, uint64_t n)
{
	fj_kcache *kc = get(ctx);
	if (kc)
		atomic_fetch_add(&kc->counters[c], n);
}

void fj_kcache_counters(fj_context *ctx, uint64_t out[FJ_KC_COUNT])
{
	fj_kcache *kc = get(ctx);
	for (int i = 0; i < FJ_KC_COUNT; i++)
		out[i] = kc ? atomic_load(&kc->counters[i]) : 0;
}

fj_status fj_kcache_configure(fj_context *ctx, const char *dir, uint64_t max_bytes)
{
	fj_kcache *kc = get(ctx);
	if (!kc)
		return FJ_ERR_NOMEM;
	char *nd = NULL;
	if (!dir)
		nd = default_dir(ctx);
	else if (*dir && strcmp(dir, "off") != 0 && !(nd = strdup(dir)))
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	pthread_mutex_lock(&kc->lock);
	free(kc->dir);
	kc->dir = nd;
	kc->configured = true;
	kc->max_bytes = max_bytes ? max_bytes : default_max(ctx);
	atomic_store(&kc->total, 0);
	pthread_mutex_unlock(&kc->lock);
	return FJ_OK;
}

/* A copy of the directory (malloc'd), or NULL when off. */
static char *dir_copy(fj_kcache *kc)
{
	pthread_mutex_lock(&kc->lock);
	char *d = kc->dir ? strdup(kc->dir) : NULL;
	pthread_mutex_unlock(&kc->lock);
	return d;
}

const char *fj_kcache_dir(fj_context *ctx)
{
	fj_kcache *kc = get(ctx);
	return kc ? kc->dir : NULL;
}

/* mkdir -p */
static bool make_dirs(const char *dir)
{
	char buf[4096];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof buf)
		return false;
	memcpy(buf, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] == '/' || buf[i] == 0) {
			char c = buf[i];
			buf[i] = 0;
			if (mkdir(buf, 0777) != 0 && errno != EEXIST)
				return false;
			buf[i] = c;
		}
	}
	struct stat sb;
	return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The identity of the fusejit build this code belongs to: the GNU build-id
 * of the ELF object (the shared library or the program fusejit is linked
 * into), which changes whenever the code does. Kernel keys describe what a
 * kernel computes, not how this build's code generator emits it, so entries
 * written by another build (a fixed bug, a new schedule) must never be read.
 * Without a build-id, the compile time of this file stands in for it. */
static struct {
	pthread_once_t once;
	uint64_t id;
} build = {PTHREAD_ONCE_INIT, 0};

static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t self = (uintptr_t)arg;
	bool mine = false;
	for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		mine = ph->p_type == PT_LOAD && self >= lo && self < lo + ph->p_memsz;
	}
	if (!mine)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
		const unsigned char *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const unsigned char *name = p + sizeof *nh;
			const unsigned char *desc = name + ((nh->n_namesz + 3) & ~3u);
			if (desc + nh->n_descsz > end)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
				build.id = fj_kcache_hash(desc, nh->n_descsz, 0x6275696c64);
				return 1;
			}
			p = desc + ((nh->n_descsz + 3) & ~3u);
		}
	}
	return 1;
}

static void init_build_id(void)
{
	dl_iterate_phdr(find_build_id, (void *)(uintptr_t)&init_build_id);
	if (!build.id) {
		const char *stamp = __DATE__ " " __TIME__;
		build.id = fj_kcache_hash(stamp, strlen(stamp), 0x6275696c64);
	}
}

static void entry_path(char *buf, size_t size, const char *dir, const char *kind, const void *key, size_t keylen)
{
	/* The name hashes the kind, the key, the fusejit version and the build. */
	pthread_once(&build.once, init_build_id);
	uint64_t seed = fj_kcache_hash(FUSEJIT_VERSION, strlen(FUSEJIT_VERSION), 0x66757365 ^ build.id);
	seed = fj_kcache_hash(kind, strlen(kind), seed);
	uint64_t a = fj_kcache_hash(key, keylen, seed);
	uint64_t b = fj_kcache_hash(key, keylen, seed ^ 0x5bd1e9955bd1e995ull);
	snprintf(buf, size, "%s/%s-%016llx%016llx.fjc", dir, kind, (unsigned long long)a, (unsigned long long)b);
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static bool read_all(int fd, void *buf, size_t n)
{
	char *p = buf;
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

/* The testing aid of the setting cache_fault (fusejit.h): once `after`
 * bytes of an entry are written (or at its end, before its rename), the
 * process is killed (SIGKILL) or the store fails with ENOSPC. */
typedef enum fault_kind { FAULT_NONE, FAULT_KILL, FAULT_ENOSPC } fault_kind;
typedef struct fault {
	fault_kind kind;
	uint64_t after, written;
} fault;

static fault parse_fault(const char *s)
{
	fault f = {FAULT_NONE, 0, 0};
	const char *n = NULL;
	if (!s)
		return f;
	if (strncmp(s, "kill-after-write:", 17) == 0)
		f.kind = FAULT_KILL, n = s + 17;
	else if (strncmp(s, "enospc-after-write:", 19) == 0)
		f.kind = FAULT_ENOSPC, n = s + 19;
	else if (strcmp(s, "enospc") == 0)
		f.kind = FAULT_ENOSPC;
	if (n)
		f.after = strtoull(n, NULL, 10);
	return f;
}

/* Fires f once its byte count is reached, or at the end of the entry (end:
 * before its rename): false (errno ENOSPC) or SIGKILL. */
static bool fault_check(const fault *f, bool end)
{
	if (f->kind == FAULT_NONE || (f->written < f->after && !end))
		return true;
	if (f->kind == FAULT_KILL)
		raise(SIGKILL);
	errno = ENOSPC;
	return false;
}

static bool write_all(int fd, const void *buf, size_t n, fault *f)
{
	const char *p = buf;
	while (n) {
		size_t chunk = n;
		if (!fault_check(f, false))
			return false;
		if (f->kind != FAULT_NONE && chunk > f->after - f->written)
			chunk = (size_t)(f->after - f->written);
		ssize_t r = write(fd, p, chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
		f->written += (uint64_t)r;
	}
	return true;
}

static uint64_t header_sum(const unsigned char *h, const void *key, size_t keylen)
{
	return fj_kcache_hash(key, keylen, fj_kcache_hash(h, 32, 0x68656164));
}

bool fj_kcache_load(fj_context *ctx, const char *kind, const void *key, size_t keylen, void **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	fj_kcache *kc = get(ctx);
	if (!kc)
		return false;
	char *dir = dir_copy(kc);
	if (!dir)
		return false;
	char path[4400];
	entry_path(path, sizeof path, dir, kind, key, keylen);
	free(dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		atomic_fetch_add(&kc->counters[FJ_KC_DISK_MISSES], 1);
		return false;
	}
	bool ok = false;
	unsigned char h[KC_HEADER];
	unsigned char *kbuf = NULL, *payload = NULL;
	struct stat sb = {0};
	if (fstat(fd, &sb) != 0 || !read_all(fd, h, KC_HEADER) || memcmp(h, KC_MAGIC, 8) != 0 ||
	    get32(h + 8) != KC_FORMAT || get32(h + 12) != keylen)
		goto done;
	uint64_t plen = get64(h + 16);
	if ((uint64_t)sb.st_size != KC_HEADER + keylen + plen)
		goto done;
	kbuf = malloc(keylen ? keylen : 1);
	payload = malloc(plen ? plen : 1);
	if (!kbuf || !payload || !read_all(fd, kbuf, keylen) || memcmp(kbuf, key, keylen) != 0)
		goto done;
	if (header_sum(h, kbuf, keylen) != get64(h + 32))
		goto done;
	if (!read_all(fd, payload, plen) || fj_kcache_hash(payload, plen, 0x7061796c) != get64(h + 24))
		goto done;
	ok = true;
done:
	close(fd);
	free(kbuf);
	if (!ok) {
		free(payload);
		/* never trusted: delete it (unless another process has replaced it
		 * meanwhile), the caller rebuilds and stores it again */
		struct stat now;
		if (stat(path, &now) == 0 && now.st_ino == sb.st_ino && now.st_dev == sb.st_dev)
			unlink(path);
		atomic_fetch_add(&kc->counters[FJ_KC_DISK_CORRUPT], 1);
		atomic_fetch_add(&kc->counters[FJ_KC_DISK_MISSES], 1);
		return false;
	}
	/* least recently used: a hit touches the entry */
	utimensat(AT_FDCWD, path, NULL, 0);
	atomic_fetch_add(&kc->counters[FJ_KC_DISK_HITS], 1);
	*data = payload;
	*len = plen;
	return true;
}

typedef struct ent {
	char *name;
	off_t size;
	struct timespec mtime;
} ent;

static int cmp_ent(const void *a, const void *b)
{
	const ent *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* A temporary file (KC_TMP_PREFIX "<pid>-<n>") of a store that never
 * finished: its writer was killed (or lost its disk). It is deleted when its
 * process is gone (this host's pids; the directory may be shared with other
 * hosts, whose writers then lose a rename, a store error) or it is older than
 * KC_TMP_MAX_AGE, so that leftovers do not pile up; temporary files never
 * count against the cap. */
static void remove_leftover(fj_kcache *kc, const char *path, const char *pid_text)
{
	char *end;
	long pid = strtol(pid_text, &end, 10);
	struct stat sb;
	if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
		return;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	bool dead = end != pid_text && *end == '-' && pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 &&
	            errno == ESRCH;
	if ((dead || now.tv_sec - sb.st_mtim.tv_sec > KC_TMP_MAX_AGE) && unlink(path) == 0)
		atomic_fetch_add(&kc->counters[FJ_KC_DISK_LEFTOVERS], 1);
}

/* Deletes the least recently used entries until the directory holds at most
 * 90% of max; returns the bytes left. */
static uint64_t evict(fj_kcache *kc, const char *dir, uint64_t max)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	ent *es = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	struct dirent *de;
	char path[4400];
	while ((de = readdir(d))) {
		size_t nl = strlen(de->d_name);
		if (strncmp(de->d_name, KC_TMP_PREFIX, strlen(KC_TMP_PREFIX)) == 0) {
			snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
			remove_leftover(kc, path, de->d_name + strlen(KC_TMP_PREFIX));
			continue;
		}
		if (nl < 5 || strcmp(de->d_name + nl - 4, ".fjc") != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		struct stat sb;
		if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			ent *ne = realloc(es, nc * sizeof *ne);
			if (!ne)
				break;
			es = ne;
			cap = nc;
		}
		es[n].name = strdup(de->d_name);
		if (!es[n].name)
			break;
		es[n].size = sb.st_size;
		es[n].mtime = sb.st_mtim;
		total += (uint64_t)sb.st_size;
		n++;
	}
	closedir(d);
	if (total > max) {
		qsort(es, n, sizeof *es, cmp_ent);
		uint64_t target = max / 10 * 9;
		for (size_t i = 0; i < n && total > target; i++) {
			snprintf(path, sizeof path, "%s/%s", dir, es[i].name);
			if (unlink(path) == 0) {
				total -= (uint64_t)es[i].size;
				atomic_fetch_add(&kc->counters[FJ_KC_DISK_EVICTIONS], 1);
			}
		}
	}
	for (size_t i = 0; i < n; i++)
		free(es[i].name);
	free(es);
	return total;
}

void fj_kcache_store(fj_context *ctx, const char *kind, const void *key, size_t keylen, const void *data,
                     size_t len)
{
	fj_kcache *kc = get(ctx);
	if (!kc)
		return;
	char *dir = dir_copy(kc);
	if (!dir)
		return;
	pthread_mutex_lock(&kc->lock);
	uint64_t max = kc->max_bytes;
	pthread_mutex_unlock(&kc->lock);
	char path[4400], tmp[4500];
	int fd = -1;
	fault f = parse_fault(fj_context_settings(ctx)->cache_fault);
	if (!make_dirs(dir))
		goto fail;
	entry_path(path, sizeof path, dir, kind, key, keylen);
	snprintf(tmp, sizeof tmp, "%s/" KC_TMP_PREFIX "%ld-%llu", dir, (long)getpid(),
	         (unsigned long long)atomic_fetch_add(&kc->tmp_seq, 1));
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		goto fail;
	unsigned char h[KC_HEADER];
	memcpy(h, KC_MAGIC, 8);
	put32(h + 8, KC_FORMAT);
	put32(h + 12, (uint32_t)keylen);
	put64(h + 16, len);
	put64(h + 24, fj_kcache_hash(data, len, 0x7061796c));
	put64(h + 32, header_sum(h, key, keylen));
	if (!write_all(fd, h, KC_HEADER, &f) || !write_all(fd, key, keylen, &f) || !write_all(fd, data, len, &f) ||
	    !fault_check(&f, true)) {
		close(fd);
		unlink(tmp);
		goto fail;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		goto fail;
	}
	atomic_fetch_add(&kc->counters[FJ_KC_DISK_STORES], 1);
	/* the cap: scan when the running estimate may have crossed it */
	uint64_t add = KC_HEADER + keylen + len;
	uint64_t tot = atomic_fetch_add(&kc->total, add) + add;
	if (tot == add || tot > max) /* unknown (first store) or over: measure */
		atomic_store(&kc->total, evict(kc, dir, max));
	free(dir);
	return;
fail:
	atomic_fetch_add(&kc->counters[FJ_KC_STORE_ERRORS], 1);
	free(dir);
}
