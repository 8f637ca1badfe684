/* replay.c -- runs fuzz_parser.c's target on every file of the given
 * folders (or files), without libFuzzer: the seed corpus and the findings
 * kept as regression tests (tests/fuzz/corpus) replayed by the normal build
 * in CI. A file the target rejects aborts (a crash, a print -> parse ->
 * print mismatch); no file at all is a failure too.
 *
 *   fj-fuzz-replay DIR|FILE ... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fj-fuzz-replay: cannot open %s\n", path);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
		len += got;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "fj-fuzz-replay: out of memory reading %s\n", path);
		return -1;
	}
	/* libFuzzer hands the target an exact-size buffer: so does this, so that
	 * ASan sees a read past the end */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of dir, in name order; returns the count or -1. */
static int replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "fj-fuzz-replay: cannot open folder %s\n", dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
			if (!nn)
				break;
			names = nn;
		}
		size_t l = strlen(dir) + strlen(e->d_name) + 2;
		if (!(names[n] = malloc(l)))
			break;
		snprintf(names[n++], l, "%s/%s", dir, e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, by_name);
	int count = 0;
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
			count = replay_file(names[i]) == 0 ? count + 1 : -1;
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	int total = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		int c = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? replay_dir(argv[i])
		        : replay_file(argv[i]) == 0                     ? 1
		                                                        : -1;
		if (c < 0)
			return 1;
		total += c;
	}
	printf("fj-fuzz-replay: %d files replayed\n", total);
	if (total == 0) {
		fprintf(stderr, "fj-fuzz-replay: no files to replay\n");
		return 1;
	}
	return 0;
}
