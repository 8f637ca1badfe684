/* cache_test.c -- fj-api-cache: the kernel cache on disk, across processes.
 *
 *   1. a context compiles a graph (kernels compiled, an entry stored); a
 *      second compile in the same context compiles nothing (memory);
 *   2. a second process compiles nothing: everything comes from the disk;
 *   3. every entry corrupted (bytes flipped), then truncated: the next
 *      process detects it, rebuilds, and the one after compiles nothing again;
 *   4. a tiny cap evicts; "off" stores nothing;
 *   5. PTX (where the nvptx executor has a GPU): a cold process compiles and
 *      stores its regions' PTX, the next one loads it all from the disk
 *      (without a GPU the unit suite `cache` covers PTX on disk).
 * Results are checked every time. Public API only. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fusejit/fusejit.h>

#include "expect.h"

static const char text[] =
	"graph @main(%x: f32[N,16], %w: f32[16]) {\n"
	"  %a = aten.mul(%x, %w)\n"
	"  %b = aten.sigmoid(%a)\n"
	"  %c = aten.sum(%b) {dims=[1], keepdim=true}\n"
	"  %d = aten.div(%b, %c)\n"
	"  return %d\n"
	"}\n";

/* Compiles and runs the graph in a fresh context with cache dir (cap bytes);
 * checks the result; returns the stats. */
static void compile_run(const char *dir, uint64_t cap, const char *graph, fj_cache_stats *cs, int twice)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_context_set_cache(ctx, dir, cap);
	fj_module *m;
	fj_program *p = NULL;
	fj_compile_options o; /* host: auto would pick nvptx on a GPU machine */
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	if (fj_module_parse(ctx, graph, strlen(graph), "cache.fj", &m) != FJ_OK ||
	    fj_compile(ctx, m, &o, &p) != FJ_OK) {
		fprintf(stderr, "compile failed: %s\n", fj_context_error(ctx));
		exit(1);
	}
	if (twice) {
		fj_cache_stats before, after;
		fj_context_cache_stats(ctx, &before);
		fj_program *p2;
		EXPECT(fj_compile(ctx, m, &o, &p2) == FJ_OK);
		fj_context_cache_stats(ctx, &after);
		EXPECT(after.kernels_compiled == before.kernels_compiled);
		EXPECT(after.kernels_loaded == before.kernels_loaded);
		EXPECT(after.memory_hits > before.memory_hits);
		fj_program_destroy(p2);
	}
	float x[3][16], w[16], y[3][16];
	for (int j = 0; j < 16; j++) {
		w[j] = 0.1f * (float)j - 0.5f;
		for (int i = 0; i < 3; i++)
			x[i][j] = (float)cos(i * 16 + j);
	}
	fj_tensor in[2], out;
	memset(in, 0, sizeof in);
	memset(&out, 0, sizeof out);
	in[0].data = x, in[0].dtype = FJ_TYPE_F32, in[0].rank = 2, in[0].sizes[0] = 3, in[0].sizes[1] = 16;
	in[1].data = w, in[1].dtype = FJ_TYPE_F32, in[1].rank = 1, in[1].sizes[0] = 16;
	out.data = y, out.dtype = FJ_TYPE_F32, out.rank = 2, out.sizes[0] = 3, out.sizes[1] = 16;
	if (strcmp(graph, text) == 0 && fj_program_run(p, in, 2, &out, 1) != FJ_OK) {
		fprintf(stderr, "run failed: %s\n", fj_context_error(ctx));
		fails++;
	}
	if (strcmp(graph, text) == 0)
		for (int i = 0; i < 3; i++) {
			double s = 0;
			for (int j = 0; j < 16; j++)
				s += 1 / (1 + exp(-(double)x[i][j] * w[j]));
			for (int j = 0; j < 16; j++)
				EXPECT(fabs(y[i][j] - 1 / (1 + exp(-(double)x[i][j] * w[j])) / s) < 1e-6);
		}
	fj_context_cache_stats(ctx, cs);
	fj_program_destroy(p);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}

/* Compiles the graph for nvptx in a fresh context with cache dir and runs
 * it; returns the compile's status (FJ_ERR_DRIVER: no GPU). */
static fj_status compile_run_ptx(const char *dir, fj_cache_stats *cs)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_context_set_cache(ctx, dir, 0);
	fj_context_set_option(ctx, "nvptx_device", "cuda"); /* the emulator compiles no PTX */
	fj_module *m;
	fj_program *p = NULL;
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_NVPTX;
	if (fj_module_parse(ctx, text, strlen(text), "cache.fj", &m) != FJ_OK)
		exit(1);
	fj_status st = fj_compile(ctx, m, &o, &p);
	if (st == FJ_OK) {
		float x[2][16], w[16], y[2][16];
		for (int j = 0; j < 16; j++)
			w[j] = 0.25f, x[0][j] = x[1][j] = 1.0f;
		fj_tensor in[2], out;
		memset(in, 0, sizeof in);
		memset(&out, 0, sizeof out);
		in[0].data = x, in[0].dtype = FJ_TYPE_F32, in[0].rank = 2, in[0].sizes[0] = 2, in[0].sizes[1] = 16;
		in[1].data = w, in[1].dtype = FJ_TYPE_F32, in[1].rank = 1, in[1].sizes[0] = 16;
		out.data = y, out.dtype = FJ_TYPE_F32, out.rank = 2, out.sizes[0] = 2, out.sizes[1] = 16;
		EXPECT(fj_program_run(p, in, 2, &out, 1) == FJ_OK);
		for (int j = 0; j < 16; j++) /* sigmoid(0.25) / (16 sigmoid(0.25)) */
			EXPECT(fabs(y[1][j] - 1.0 / 16) < 1e-6);
		fj_context_cache_stats(ctx, cs);
		fj_program_destroy(p);
	}
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	return st;
}

/* Child: "child DIR zero|rebuild|ptx" */
static int child(const char *dir, const char *expect)
{
	fj_cache_stats cs;
	if (strcmp(expect, "ptx") == 0) {
		EXPECT(compile_run_ptx(dir, &cs) == FJ_OK);
		printf("  child (ptx): compiled %llu, loaded %llu\n", (unsigned long long)cs.kernels_compiled,
		       (unsigned long long)cs.kernels_loaded);
		EXPECT(cs.kernels_compiled == 0);
		EXPECT(cs.kernels_loaded > 0);
		return fails ? 1 : 0;
	}
	compile_run(dir, 0, text, &cs, 0);
	printf("  child (%s): compiled %llu, loaded %llu, disk hits %llu, corrupt %llu, stores %llu\n", expect,
	       (unsigned long long)cs.kernels_compiled, (unsigned long long)cs.kernels_loaded,
	       (unsigned long long)cs.disk_hits, (unsigned long long)cs.disk_corrupt, (unsigned long long)cs.disk_stores);
	if (strcmp(expect, "zero") == 0) {
		EXPECT(cs.kernels_compiled == 0);
		EXPECT(cs.kernels_loaded > 0);
		EXPECT(cs.disk_hits > 0);
	} else {
		EXPECT(cs.disk_corrupt > 0);
		EXPECT(cs.kernels_compiled > 0);
		EXPECT(cs.disk_stores > 0);
	}
	return fails ? 1 : 0;
}

static int spawn(const char *self, const char *dir, const char *expect)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "child", dir, expect, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Applies f to every entry of dir; returns how many. */
static int for_entries(const char *dir, void (*f)(const char *path))
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 5 || strcmp(de->d_name + l - 4, ".fjc") != 0)
			continue;
		char p[1500];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		f(p);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static void flip(const char *path)
{
	FILE *f = fopen(path, "r+b");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, n / 2, SEEK_SET);
	int c = fgetc(f);
	fseek(f, n / 2, SEEK_SET);
	fputc(c ^ 0x5a, f);
	fclose(f);
}

static void truncate_half(const char *path)
{
	struct stat sb;
	stat(path, &sb);
	if (truncate(path, sb.st_size / 2) != 0)
		perror(path);
}

static void count_bytes(const char *path)
{
	(void)path;
}

static uint64_t dir_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	uint64_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char p[1500];
		struct stat sb;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
			n += (uint64_t)sb.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return child(argv[2], argv[3]);
	char self[1024];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sl <= 0)
		return 1;
	self[sl] = 0;
	char dir[] = "/tmp/fj-cache-test.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char sub[1100];
	snprintf(sub, sizeof sub, "%s/nested/cache", dir); /* created on first store */

	fj_cache_stats cs;
	printf("1. first process, cold\n");
	compile_run(sub, 0, text, &cs, 1);
	EXPECT(cs.kernels_compiled > 0);
	EXPECT(cs.disk_stores > 0);
	EXPECT(for_entries(sub, count_bytes) > 0);

	printf("2. second process\n");
	EXPECT(spawn(self, sub, "zero") == 0);

	printf("3. corrupt entries (bytes flipped)\n");
	for_entries(sub, flip);
	EXPECT(spawn(self, sub, "rebuild") == 0);
	EXPECT(spawn(self, sub, "zero") == 0);
	printf("   truncated entries\n");
	for_entries(sub, truncate_half);
	EXPECT(spawn(self, sub, "rebuild") == 0);
	EXPECT(spawn(self, sub, "zero") == 0);

	printf("4. a small cap evicts; off stores nothing\n");
	char small[1100];
	snprintf(small, sizeof small, "%s/small", dir);
	static const char other[] = "graph @g(%x: f32[8]) {\n  %y = aten.exp(%x)\n  %z = aten.neg(%y)\n  return %z\n}\n";
	compile_run(small, 0, text, &cs, 0);
	uint64_t one = dir_bytes(small); /* one entry: the cap is 1.5 of them */
	compile_run(small, one * 3 / 2, other, &cs, 0);
	EXPECT(cs.disk_evictions > 0);
	EXPECT(dir_bytes(small) <= one * 3 / 2);
	compile_run("off", 0, text, &cs, 0);
	EXPECT(cs.disk_stores == 0 && cs.disk_hits == 0);

	printf("5. PTX\n");
	char ptx[1100];
	snprintf(ptx, sizeof ptx, "%s/ptx", dir);
	fj_status pst = compile_run_ptx(ptx, &cs);
	if (pst == FJ_OK) {
		EXPECT(cs.kernels_compiled > 0);
		EXPECT(cs.disk_stores > 0);
		EXPECT(spawn(self, ptx, "ptx") == 0);
	} else {
		EXPECT(pst == FJ_ERR_DRIVER);
		printf("   no GPU here: PTX on disk is covered by the unit suite `cache`\n");
	}

	char cmd[200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fails++;
	printf("disk cache test: %s\n", fails ? "FAILED" : "ok");
	return fails ? 1 : 0;
}
