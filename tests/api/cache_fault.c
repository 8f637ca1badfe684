/* cache_fault.c -- fj-api-cache-fault: the disk kernel cache under
 * concurrent processes and faults (issue 17, item 4).
 *
 *   fj-api-cache-fault concurrent|kill|enospc CASES_DIR
 *
 * Each process below is a fork of this one that makes its own context (its
 * cache_dir and cache_fault options set with fj_context_set_option),
 * compiles a handful of golden graphs (tests/golden/cases) on the host and
 * aten executors and runs them against their expected outputs, and emits PTX
 * for two of them (fj_nvptx_emit_module, sm_80: no GPU needed); it reports
 * its failures, the kernel cache's counters and a hash of its PTX through a
 * pipe.
 *
 *   concurrent: 8 processes at once on one fresh folder: all right, the same
 *     PTX, no corrupt entry, no temporary file left; then one more process
 *     compiles nothing (every kernel from the disk).
 *   kill: a process killed (SIGKILL, the cache_fault "kill-after-write:N")
 *     at several points of its first store; its temporary file is then also
 *     copied over every entry's name (a torn write on a filesystem without
 *     atomic renames). The next process is right, counts the torn entries as
 *     corrupt, rebuilds them and deletes the leftover; the one after compiles
 *     nothing. Leftovers of live processes are kept unless an hour old.
 *   enospc: writes failing with ENOSPC (cache_fault "enospc", and after some
 *     bytes), then a real full disk: a 64 KiB tmpfs where one can be mounted
 *     (root), else that part is reported and skipped. Compiles succeed, the
 *     failures are counted (store errors), nothing corrupt or temporary is
 *     left. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_nvptx/nvptx_api.h"
#include "cache/kcache.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "tests/common/npy_rt.h"
#include "tests/api/expect.h"

static const char *const graphs[] = {"softmax_f32", "layer_norm_f32", "gelu_mlp"};
static const char *const ptx_graphs[] = {"softmax_f32", "layer_norm_f32"};
static const char *cases_dir;

typedef struct report {
	int fails;
	uint64_t ptx_hash;
	uint64_t c[FJ_KC_COUNT];
} report;

/* ---- one process's work ---- */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return s;
}

/* Runs p on the case's inputs and compares each output with its golden one. */
static int check_run(fj_context *ctx, const char *dir, fj_program *p)
{
	size_t nin = fj_program_count(p, FJ_ROLE_INPUT), nout = fj_program_count(p, FJ_ROLE_OUTPUT);
	fj_rt_tensor *rin = calloc(nin + 1, sizeof *rin);
	fj_tensor *in = calloc(nin + 1, sizeof *in), *out = calloc(nout + 1, sizeof *out);
	char path[1200];
	int bad = 0;
	for (size_t i = 0; i < nin && !bad; i++) {
		fj_value_info vi;
		fj_program_info(p, FJ_ROLE_INPUT, i, &vi);
		snprintf(path, sizeof path, "%s/in_%s.npy", dir, vi.name);
		bad += fj_npy_read(ctx, path, &rin[i]) != FJ_OK;
		in[i].data = rin[i].data;
		in[i].dtype = (fj_scalar_type)rin[i].dtype;
		in[i].rank = rin[i].rank;
		memcpy(in[i].sizes, rin[i].dims, sizeof rin[i].dims);
	}
	bad = bad || fj_program_run(p, in, nin, out, nout) != FJ_OK;
	for (size_t o = 0; !bad && o < nout; o++) {
		fj_rt_tensor ref, got = {0};
		snprintf(path, sizeof path, "%s/out_%zu.npy", dir, o);
		if (fj_npy_read(ctx, path, &ref) != FJ_OK) {
			bad = 1;
			break;
		}
		got.data = out[o].data;
		got.dtype = (fj_dtype)out[o].dtype;
		got.rank = out[o].rank;
		memcpy(got.dims, out[o].sizes, sizeof got.dims);
		fj_rt_nbytes(got.dtype, got.dims, got.rank, &got.nbytes);
		bool placed = true;
		bad = !fj_rt_tensor_same_type(&got, &ref) || fj_rt_rel_l2(&got, &ref, &placed) > fj_rt_tolerance(ref.dtype) ||
		      !placed;
		fj_rt_tensor_free(&ref);
	}
	if (bad)
		fprintf(stderr, "FAIL %s: %s\n", dir, fj_context_error(ctx));
	for (size_t o = 0; o < nout; o++)
		fj_tensor_release(&out[o]);
	for (size_t i = 0; i < nin; i++)
		fj_rt_tensor_free(&rin[i]);
	free(rin);
	free(in);
	free(out);
	return bad;
}

/* Compiles and runs every graph on host and aten, emits the PTX graphs. */
static void work(const char *cdir, const char *fault, report *r)
{
	memset(r, 0, sizeof *r);
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx || fj_context_set_option(ctx, "cache_dir", cdir) != FJ_OK ||
	    fj_context_set_option(ctx, "cache_fault", fault) != FJ_OK) {
		r->fails = 1;
		return;
	}
	for (size_t g = 0; g < FJ_ARRAY_LEN(graphs); g++) {
		char dir[1024], path[1100];
		snprintf(dir, sizeof dir, "%s/%s", cases_dir, graphs[g]);
		snprintf(path, sizeof path, "%s/graph.fj", dir);
		size_t len;
		char *text = slurp(path, &len);
		fj_module *m = NULL;
		if (!text || fj_module_parse(ctx, text, len, path, &m) != FJ_OK) {
			fprintf(stderr, "FAIL %s: %s\n", path, fj_context_error(ctx));
			r->fails++;
			free(text);
			continue;
		}
		for (int e = 0; e < 2; e++) {
			fj_compile_options o;
			fj_compile_options_init(&o);
			o.executor = e ? FJ_EXECUTOR_ATEN : FJ_EXECUTOR_HOST;
			fj_program *p = NULL;
			if (fj_compile(ctx, m, &o, &p) != FJ_OK) {
				fprintf(stderr, "FAIL %s: compile: %s\n", dir, fj_context_error(ctx));
				r->fails++;
				continue;
			}
			r->fails += check_run(ctx, dir, p);
			fj_program_destroy(p);
		}
		fj_module_destroy(m);
		free(text);
	}
	for (size_t g = 0; g < FJ_ARRAY_LEN(ptx_graphs); g++) {
		char path[1100];
		snprintf(path, sizeof path, "%s/%s/graph.fj", cases_dir, ptx_graphs[g]);
		size_t len;
		char *text = slurp(path, &len);
		fj_module *m = NULL;
		fj_buf out;
		fj_buf_init(&out, ctx);
		if (!text || fj_parse_module(ctx, text, len, path, &m) != FJ_OK ||
		    fj_run_pipeline(m, fj_named_pipeline("default"), NULL) != FJ_OK ||
		    fj_nvptx_emit_module(ctx, m, "sm_80", false, &out) != FJ_OK) {
			fprintf(stderr, "FAIL %s: PTX: %s\n", path, fj_context_error(ctx));
			r->fails++;
		} else {
			r->ptx_hash = fj_kcache_hash(out.data, out.len, r->ptx_hash);
		}
		fj_buf_free(&out);
		if (m)
			fj_module_destroy(m);
		free(text);
	}
	fj_kcache_counters(ctx, r->c);
	fj_context_destroy(ctx);
}

/* ---- processes ---- */

/* Starts n processes doing work(cdir, fault) at once and waits for them:
 * r[i] is process i's report, status[i] its wait status; returns how many
 * reported. */
static int processes(int n, const char *cdir, const char *fault, report *r, int *status)
{
	int fd[2];
	if (pipe(fd) != 0)
		return 0;
	pid_t *pid = calloc((size_t)n, sizeof *pid);
	for (int i = 0; i < n; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			close(fd[0]);
			report mine;
			work(cdir, fault, &mine);
			ssize_t w = write(fd[1], &mine, sizeof mine); /* under PIPE_BUF: atomic */
			_exit(w == (ssize_t)sizeof mine ? 0 : 3);
		}
	}
	close(fd[1]);
	int got = 0;
	while (got < n && read(fd[0], &r[got], sizeof *r) == (ssize_t)sizeof *r)
		got++;
	close(fd[0]);
	for (int i = 0; i < n; i++)
		waitpid(pid[i], &status[i], 0);
	free(pid);
	return got;
}

static report one(const char *cdir, const char *fault)
{
	report r;
	int st;
	memset(&r, 0, sizeof r);
	if (processes(1, cdir, fault, &r, &st) != 1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "a process failed (status %d)\n", st);
		fails++;
	}
	EXPECT(r.fails == 0);
	return r;
}

/* Counts the folder's entries and temporary files (names in tmp_name). */
static void count_files(const char *dir, int *entries, int *tmps, char tmp_name[][256], int max_names)
{
	*entries = *tmps = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".fjc") == 0)
			(*entries)++;
		else if (strncmp(de->d_name, ".tmp-", 5) == 0) {
			if (*tmps < max_names)
				snprintf(tmp_name[*tmps], 256, "%s", de->d_name);
			(*tmps)++;
		}
	}
	if (d)
		closedir(d);
}

static void rm_rf(const char *dir)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

static bool copy_file(const char *from, const char *to)
{
	size_t len;
	char *s = slurp(from, &len);
	FILE *f = s ? fopen(to, "wb") : NULL;
	bool ok = f && fwrite(s, 1, len, f) == len;
	if (f)
		ok = fclose(f) == 0 && ok;
	free(s);
	return ok;
}

/* ---- the three tests ---- */

static void test_concurrent(void)
{
	char cdir[] = "/tmp/fj-cache-conc.XXXXXX";
	if (!mkdtemp(cdir))
		exit(1);
	enum { N = 8 };
	report r[N];
	int st[N];
	memset(r, 0, sizeof r);
	time_t t0 = time(NULL);
	EXPECT(processes(N, cdir, NULL, r, st) == N);
	uint64_t compiled = 0, loaded = 0;
	for (int i = 0; i < N; i++) {
		EXPECT(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0);
		EXPECT(r[i].fails == 0);
		EXPECT(r[i].c[FJ_KC_DISK_CORRUPT] == 0);
		EXPECT(r[i].c[FJ_KC_STORE_ERRORS] == 0);
		EXPECT(r[i].ptx_hash == r[0].ptx_hash);
		compiled += r[i].c[FJ_KC_KERNELS_COMPILED];
		loaded += r[i].c[FJ_KC_KERNELS_LOADED];
	}
	int entries, tmps;
	char names[4][256];
	count_files(cdir, &entries, &tmps, names, 4);
	EXPECT(entries > 0);
	EXPECT(tmps == 0);
	printf("concurrent: %d processes in %lds: %llu kernels compiled, %llu loaded; %d entries, %d temporary files\n",
	       N, (long)(time(NULL) - t0), (unsigned long long)compiled, (unsigned long long)loaded, entries, tmps);
	report later = one(cdir, NULL);
	EXPECT(later.c[FJ_KC_KERNELS_COMPILED] == 0);
	EXPECT(later.c[FJ_KC_KERNELS_LOADED] > 0);
	EXPECT(later.c[FJ_KC_DISK_HITS] > 0);
	EXPECT(later.c[FJ_KC_DISK_CORRUPT] == 0);
	EXPECT(later.ptx_hash == r[0].ptx_hash);
	printf("concurrent: a later process: %llu kernels loaded from %llu disk hits, %llu compiled\n",
	       (unsigned long long)later.c[FJ_KC_KERNELS_LOADED], (unsigned long long)later.c[FJ_KC_DISK_HITS],
	       (unsigned long long)later.c[FJ_KC_KERNELS_COMPILED]);
	rm_rf(cdir);
}

/* The names of a complete cache's entries (a reference run). */
static int entry_names(const char *dir, char names[][256], int max)
{
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".fjc") == 0 && n < max)
			snprintf(names[n++], 256, "%s", de->d_name);
	}
	if (d)
		closedir(d);
	return n;
}

static void test_kill(void)
{
	char ref[] = "/tmp/fj-cache-ref.XXXXXX";
	if (!mkdtemp(ref))
		exit(1);
	report rr = one(ref, NULL);
	static char names[64][256];
	int nnames = entry_names(ref, names, 64);
	EXPECT(nnames > 1);
	rm_rf(ref);
	/* in the header, at its end, in the key, in the payload, and after the
	 * whole entry (before its rename) */
	static const char *const at[] = {"7", "41", "5000", "1000000000"};
	for (size_t k = 0; k < FJ_ARRAY_LEN(at); k++) {
		char cdir[] = "/tmp/fj-cache-kill.XXXXXX", fault[64], from[1400], to[1400];
		if (!mkdtemp(cdir))
			exit(1);
		snprintf(fault, sizeof fault, "kill-after-write:%s", at[k]);
		report r;
		int st = 0;
		EXPECT(processes(1, cdir, fault, &r, &st) == 0);
		EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		int entries, tmps;
		char tmp[2][256];
		count_files(cdir, &entries, &tmps, tmp, 2);
		EXPECT(entries == 0 && tmps == 1);
		/* a torn write under every entry's name */
		snprintf(from, sizeof from, "%s/%s", cdir, tmp[0]);
		for (int i = 0; tmps == 1 && i < nnames; i++) {
			snprintf(to, sizeof to, "%s/%s", cdir, names[i]);
			EXPECT(copy_file(from, to));
		}
		report next = one(cdir, NULL);
		/* every torn entry was rejected; only the whole one (killed before
		 * its rename) may be used */
		bool whole = k + 1 == FJ_ARRAY_LEN(at);
		EXPECT(next.c[FJ_KC_DISK_CORRUPT] >= (uint64_t)nnames - 1);
		EXPECT(whole || next.c[FJ_KC_DISK_CORRUPT] == (uint64_t)nnames);
		EXPECT(next.c[FJ_KC_DISK_LEFTOVERS] == 1);
		EXPECT(next.ptx_hash == rr.ptx_hash);
		count_files(cdir, &entries, &tmps, tmp, 2);
		EXPECT(entries == nnames && tmps == 0);
		report after = one(cdir, NULL);
		EXPECT(after.c[FJ_KC_KERNELS_COMPILED] == 0);
		EXPECT(after.c[FJ_KC_DISK_CORRUPT] == 0);
		EXPECT(after.ptx_hash == rr.ptx_hash);
		printf("kill after %s bytes: the next process rejected %llu torn entries, deleted %llu leftover, "
		       "compiled %llu kernels; the one after compiled %llu\n",
		       at[k], (unsigned long long)next.c[FJ_KC_DISK_CORRUPT],
		       (unsigned long long)next.c[FJ_KC_DISK_LEFTOVERS],
		       (unsigned long long)next.c[FJ_KC_KERNELS_COMPILED],
		       (unsigned long long)after.c[FJ_KC_KERNELS_COMPILED]);
		rm_rf(cdir);
	}
	/* leftovers of a live process (pid 1) stay, unless an hour old */
	char cdir[] = "/tmp/fj-cache-live.XXXXXX", p_old[100], p_new[100];
	if (!mkdtemp(cdir))
		exit(1);
	snprintf(p_old, sizeof p_old, "%s/.tmp-1-0", cdir);
	snprintf(p_new, sizeof p_new, "%s/.tmp-1-1", cdir);
	EXPECT(copy_file("/dev/null", p_old) && copy_file("/dev/null", p_new));
	struct timespec ts[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
	EXPECT(utimensat(AT_FDCWD, p_old, ts, 0) == 0);
	report live = one(cdir, NULL);
	EXPECT(live.c[FJ_KC_DISK_LEFTOVERS] == 1);
	EXPECT(access(p_old, F_OK) != 0 && access(p_new, F_OK) == 0);
	rm_rf(cdir);
}

/* A process on a folder where writes fail: right, counted, nothing left. */
static void full_disk(const char *cdir, const char *fault, const char *what)
{
	report r = one(cdir, fault);
	int entries, tmps;
	char tmp[2][256];
	count_files(cdir, &entries, &tmps, tmp, 2);
	EXPECT(r.c[FJ_KC_STORE_ERRORS] > 0);
	EXPECT(tmps == 0);
	EXPECT(r.c[FJ_KC_DISK_STORES] == (uint64_t)entries);
	report again = one(cdir, NULL);
	EXPECT(again.c[FJ_KC_DISK_CORRUPT] == 0);
	EXPECT(again.ptx_hash == r.ptx_hash);
	printf("%s: %llu store errors, %llu stores; then %llu disk hits, 0 corrupt\n", what,
	       (unsigned long long)r.c[FJ_KC_STORE_ERRORS], (unsigned long long)r.c[FJ_KC_DISK_STORES],
	       (unsigned long long)again.c[FJ_KC_DISK_HITS]);
}

static void test_enospc(void)
{
	static const char *const faults[] = {"enospc", "enospc-after-write:3000"};
	for (size_t k = 0; k < FJ_ARRAY_LEN(faults); k++) {
		char cdir[] = "/tmp/fj-cache-full.XXXXXX";
		if (!mkdtemp(cdir))
			exit(1);
		full_disk(cdir, faults[k], faults[k]);
		rm_rf(cdir);
	}
	/* a real full disk: 64 KiB of tmpfs, most of it taken */
	char mnt[] = "/tmp/fj-cache-tmpfs.XXXXXX", fill[100];
	if (!mkdtemp(mnt))
		exit(1);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0) {
		printf("tmpfs: cannot mount one here (%s): the fault injection above stands in for it\n", strerror(errno));
		rmdir(mnt);
		return;
	}
	snprintf(fill, sizeof fill, "%s/fill", mnt);
	FILE *f = fopen(fill, "wb");
	static char zeros[40 << 10];
	EXPECT(f && fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros);
	if (f)
		fclose(f);
	full_disk(mnt, NULL, "tmpfs of 64 KiB");
	EXPECT(umount(mnt) == 0);
	rmdir(mnt);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fj-api-cache-fault concurrent|kill|enospc CASES_DIR\n");
		return 2;
	}
	cases_dir = argv[2];
	if (strcmp(argv[1], "concurrent") == 0)
		test_concurrent();
	else if (strcmp(argv[1], "kill") == 0)
		test_kill();
	else if (strcmp(argv[1], "enospc") == 0)
		test_enospc();
	else
		return 2;
	printf("%s: %d failures\n", argv[1], fails);
	return fails ? 1 : 0;
}
