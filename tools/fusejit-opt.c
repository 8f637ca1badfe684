/* fusejit-opt -- parse, verify, transform and print .fj modules (IR.md §5),
 * the mlir-opt of fusejit.
 *
 *   fusejit-opt [FILE|-] [--passes=P | --pipeline=default|train] [--print-after-all]
 *               [--print-after=PASS] [--verify-each[=false]] [--stats] [--time-passes]
 *               [--split-input-file] [--emit=ir|llvm-host|llvm-nvptx|ptx]
 *               [--target=sm_80|sm_86|sm_89|sm_90|sm_90a] [-o OUT] [--help]
 *
 * With no passes it parses, verifies and prints: the round trip. The result
 * goes to stdout or -o (written to a temporary file, renamed only on success);
 * dumps, statistics, timing and diagnostics go to stderr. Exit 0 on success,
 * 1 on any error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_host/host.h"
#include "backend_nvptx/nvptx_api.h"
#include "frontend/frontend.h"
#include "ir.h"
#include "passes/pass.h"

#define TOOL "fusejit-opt"

typedef struct options {
	const char *file;
	const char *passes, *pipeline;
	const char **print_after;
	size_t nprint_after;
	bool print_after_all, verify_each, stats, time_passes, split;
	const char *emit, *target, *out;
} options;

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, TOOL ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n" TOOL ": try '" TOOL " --help'\n");
	return 1;
}

static void help(void)
{
	printf("usage: " TOOL " [FILE|-] [options]\n"
	       "\n"
	       "Parses a .fj module (stdin when FILE is - or absent), verifies it, runs the\n"
	       "passes asked for and prints the result (IR.md §5).\n"
	       "\n"
	       "options:\n"
	       "  --passes=P              run pipeline P: pass{key=value,...},pass,...\n"
	       "  --pipeline=NAME         run a named pipeline: default or train\n"
	       "  --print-after-all       dump the IR to stderr after every pass\n"
	       "  --print-after=PASS      dump the IR to stderr after PASS (repeatable)\n"
	       "  --verify-each[=BOOL]    verify after every pass (default true)\n"
	       "  --no-verify-each        same as --verify-each=false\n"
	       "  --stats                 one statistics line per pass on stderr\n"
	       "  --time-passes           a timing report on stderr\n"
	       "  --split-input-file      treat '// -----' lines as separators between modules\n"
	       "  --emit=KIND             ir (default), llvm-host, llvm-nvptx or ptx\n"
	       "  --target=SM             sm_80, sm_86, sm_89, sm_90 or sm_90a\n"
	       "  -o OUT                  write the result to OUT instead of stdout\n"
	       "  --help                  this text\n"
	       "\n"
	       "passes:\n");
	for (size_t i = 0; i < fj_pass_count(); i++) {
		const fj_pass_info *p = fj_pass_at(i);
		char name[96];
		if (*p->options)
			snprintf(name, sizeof name, "%s{%s}", p->name, p->options);
		else
			snprintf(name, sizeof name, "%s", p->name);
		printf("  %-40s %s%s\n", name, p->description, p->run ? "" : " (not yet available)");
	}
	printf("\npipelines:\n  default = %s\n  train   = %s\n", fj_named_pipeline("default"),
	       fj_named_pipeline("train"));
}

/* Matches "--name=V" or "--name V"; *i advances past a separate value. */
static int flag_value(int argc, char **argv, int *i, const char *name, const char **val)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n) != 0)
		return 0;
	if (a[n] == '=') {
		*val = a + n + 1;
		return 1;
	}
	if (a[n] != 0)
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*val = argv[++*i];
	return 1;
}

static bool one_of(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return true;
	return false;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
	static const char *const emits[] = {"ir", "llvm-host", "llvm-nvptx", "ptx", NULL};
	static const char *const targets[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", NULL};
	o->verify_each = true;
	o->emit = "ir";
	o->print_after = calloc((size_t)argc, sizeof *o->print_after);
	if (!o->print_after)
		return usage_error("%s", "out of memory");
	bool flags_done = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		int r;
		if (flags_done || a[0] != '-' || strcmp(a, "-") == 0) {
			if (o->file)
				return usage_error("more than one input file ('%s')", a);
			o->file = a;
		} else if (strcmp(a, "--") == 0) {
			flags_done = true;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			help();
			return 0;
		} else if ((r = flag_value(argc, argv, &i, "--passes", &v)) != 0) {
			if (r < 0)
				return usage_error("%s needs a value", a);
			if (o->passes)
				return usage_error("%s", "--passes given twice");
			o->passes = v;
		} else if ((r = flag_value(argc, argv, &i, "--pipeline", &v)) != 0) {
			if (r < 0)
				return usage_error("%s needs a value", a);
			if (!fj_named_pipeline(v))
				return usage_error("unknown pipeline '%s' (expected default or train)", v);
			o->pipeline = v;
		} else if (strcmp(a, "--print-after-all") == 0) {
			o->print_after_all = true;
		} else if ((r = flag_value(argc, argv, &i, "--print-after", &v)) != 0) {
			if (r < 0)
				return usage_error("%s needs a pass name", a);
			if (!fj_pass_lookup(v, strlen(v)) && !strchr(v, '{'))
				return usage_error("--print-after: unknown pass '%s'", v);
			o->print_after[o->nprint_after++] = v;
		} else if (strcmp(a, "--verify-each") == 0 || strcmp(a, "--verify-each=true") == 0) {
			o->verify_each = true;
		} else if (strcmp(a, "--verify-each=false") == 0 || strcmp(a, "--no-verify-each") == 0) {
			o->verify_each = false;
		} else if (strcmp(a, "--stats") == 0) {
			o->stats = true;
		} else if (strcmp(a, "--time-passes") == 0) {
			o->time_passes = true;
		} else if (strcmp(a, "--split-input-file") == 0) {
			o->split = true;
		} else if ((r = flag_value(argc, argv, &i, "--emit", &v)) != 0) {
			if (r < 0 || !one_of(v, emits))
				return usage_error("bad --emit value '%s' (expected ir, llvm-host, llvm-nvptx or ptx)",
				                   r < 0 ? "" : v);
			o->emit = v;
		} else if ((r = flag_value(argc, argv, &i, "--target", &v)) != 0) {
			int major = 0;
			if (r > 0 && !one_of(v, targets) && sscanf(v, "sm_%d", &major) == 1 && major >= 100)
				return usage_error("--target=%s is not supported by LLVM 19's NVPTX backend (it stops at "
				                   "sm_90a; expected sm_80, sm_86, sm_89, sm_90 or sm_90a)",
				                   v);
			if (r < 0 || !one_of(v, targets))
				return usage_error("bad --target value '%s' (expected sm_80, sm_86, sm_89, sm_90 or sm_90a)",
				                   r < 0 ? "" : v);
			o->target = v;
		} else if (strcmp(a, "-o") == 0) {
			if (i + 1 >= argc)
				return usage_error("%s needs a file name", a);
			o->out = argv[++i];
		} else if (strncmp(a, "-o", 2) == 0) {
			o->out = a + 2;
		} else {
			return usage_error("unknown option '%s'", a);
		}
	}
	if (o->passes && o->pipeline)
		return usage_error("%s", "--passes and --pipeline cannot be used together");
	if (o->target && strcmp(o->emit, "ptx") != 0 && strcmp(o->emit, "llvm-nvptx") != 0)
		return usage_error("--target=%s only applies to --emit=ptx or --emit=llvm-nvptx", o->target);
	return -1;
}

static char *read_all(const char *file, size_t *len)
{
	FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
	if (!f) {
		fprintf(stderr, TOOL ": cannot open '%s': %s\n", file, strerror(errno));
		return NULL;
	}
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		n += k;
		if (k == 0)
			break;
	}
	bool err = ferror(f);
	if (f != stdin)
		fclose(f);
	if (!buf || err) {
		fprintf(stderr, TOOL ": cannot read '%s': %s\n", file, buf ? strerror(errno) : "out of memory");
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

/* Prints and clears the diagnostics recorded on ctx. */
static void flush_diagnostics(fj_context *ctx)
{
	char line[2048];
	for (size_t i = 0; i < fj_context_diagnostic_count(ctx); i++) {
		const fj_diagnostic *d = fj_context_diagnostic(ctx, i);
		fj_format_diagnostic(d, line, sizeof line);
		fprintf(stderr, "%s%s\n", d->file ? "" : TOOL ": ", line);
	}
	fj_context_clear_diagnostics(ctx);
}

/* Parses, verifies, transforms and prints one module into out; prints the
 * diagnostics it records. */
/* --emit=llvm-host|llvm-nvptx|ptx: code for the transformed module. */
static fj_status emit_code(fj_context *ctx, const fj_module *m, const options *o, fj_buf *out)
{
	if (strcmp(o->emit, "llvm-host") == 0) {
		fj_status st = FJ_OK;
		for (uint32_t i = 0; i < m->ngraphs && st == FJ_OK; i++)
			st = fj_host_emit_llvm(ctx, m->graphs[i], out);
		return st;
	}
	return fj_nvptx_emit_module(ctx, m, o->target, strcmp(o->emit, "llvm-nvptx") == 0, out);
}

static bool process(fj_context *ctx, const char *text, size_t len, const char *name,
                    const fj_pipeline *pl, const fj_pipeline_opts *po, const options *o, fj_buf *out)
{
	fj_module *m = NULL;
	size_t errors0 = fj_context_error_count(ctx);
	fj_status st = fj_parse_module(ctx, text, len, name, &m);
	if (st == FJ_OK)
		st = fj_verify_module(m);
	if (st == FJ_OK && pl)
		st = fj_run_parsed_pipeline(m, pl, po);
	if (st == FJ_OK && strcmp(o->emit, "ir") != 0) {
		st = emit_code(ctx, m, o, out);
		if (st == FJ_OK && out->oom)
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	} else if (st == FJ_OK) {
		st = fj_print_module(out, m);
		if (st == FJ_OK && out->oom)
			st = FJ_ERR_NOMEM;
		if (st)
			fj_error_status(ctx, st, (fj_loc){0}, "out of memory printing the result");
	}
	if (st != FJ_OK && fj_context_error_count(ctx) == errors0)
		fj_error_status(ctx, st, (fj_loc){0}, "%s", fj_status_name(st));
	fj_module_destroy(m);
	flush_diagnostics(ctx);
	return st == FJ_OK;
}

/* Is the line [p, end) a `// -----` separator (trailing blanks allowed)? */
static bool is_separator(const char *p, const char *end)
{
	static const char sep[] = "// -----";
	size_t n = sizeof sep - 1;
	if ((size_t)(end - p) < n || memcmp(p, sep, n) != 0)
		return false;
	for (p += n; p < end; p++)
		if (*p != ' ' && *p != '\t' && *p != '\r')
			return false;
	return true;
}

static bool write_output(const char *path, const char *data, size_t len)
{
	if (!path) {
		if (len && fwrite(data, 1, len, stdout) != len)
			return false;
		return fflush(stdout) == 0;
	}
	size_t n = strlen(path);
	char *tmp = malloc(n + 16);
	if (!tmp)
		return false;
	snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, TOOL ": cannot write '%s': %s\n", path, strerror(errno));
		free(tmp);
		return false;
	}
	mode_t mask = umask(0);
	umask(mask);
	fchmod(fd, 0666 & ~mask);
	FILE *f = fdopen(fd, "wb");
	bool ok = f && (len == 0 || fwrite(data, 1, len, f) == len);
	if (f)
		ok = fclose(f) == 0 && ok;
	else
		close(fd);
	if (ok && rename(tmp, path) != 0)
		ok = false;
	if (!ok) {
		fprintf(stderr, TOOL ": cannot write '%s': %s\n", path, strerror(errno));
		unlink(tmp);
	}
	free(tmp);
	return ok;
}

int main(int argc, char **argv)
{
	options o = {0};
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0) {
		free(o.print_after);
		return rc;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx) {
		fprintf(stderr, TOOL ": out of memory\n");
		return 1;
	}
	fj_pipeline *pl = NULL;
	const char *ptext = o.passes ? o.passes : o.pipeline ? fj_named_pipeline(o.pipeline) : NULL;
	/* --emit=llvm-*|ptx runs `default` first unless a pipeline is given. */
	if (!ptext && strcmp(o.emit, "ir") != 0)
		ptext = fj_named_pipeline("default");
	if (ptext && (fj_parse_pipeline(ctx, ptext, &pl) != FJ_OK || fj_pipeline_check_available(pl) != FJ_OK)) {
		flush_diagnostics(ctx);
		fj_pipeline_free(pl);
		fj_context_destroy(ctx);
		free(o.print_after);
		return 1;
	}
	const char *file = o.file ? o.file : "-";
	const char *name = strcmp(file, "-") == 0 ? "<stdin>" : file;
	size_t len = 0;
	char *text = read_all(file, &len);
	bool ok = text != NULL;
	fj_pipeline_opts po = {
		.print_after_all = o.print_after_all, .print_after = o.print_after,
		.nprint_after = o.nprint_after, .verify_each = o.verify_each, .stats = o.stats,
		.time_passes = o.time_passes, .out = stderr,
	};
	fj_buf out;
	fj_buf_init(&out, ctx);
	if (text && !o.split) {
		ok = process(ctx, text, len, name, pl, &po, &o, &out);
	} else if (text) {
		/* Each chunk is parsed with as many newlines before it as lines
		 * before it in the file, so diagnostics keep the file's numbers. */
		fj_buf chunk;
		fj_buf_init(&chunk, ctx);
		const char *p = text, *end = text + len, *start = text;
		size_t line = 0, start_line = 0, nchunks = 0;
		for (;;) {
			const char *nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
			const char *next = nl ? nl + 1 : end;
			if (p < end && !is_separator(p, nl ? nl : end)) {
				p = next;
				line++;
				continue;
			}
			chunk.len = 0;
			for (size_t k = 0; k < start_line; k++)
				fj_buf_putn(&chunk, "\n", 1);
			fj_buf_putn(&chunk, start, (size_t)(p - start));
			if (nchunks++)
				fj_buf_puts(&out, "// -----\n");
			if (chunk.oom) {
				fprintf(stderr, TOOL ": out of memory\n");
				ok = false;
				break;
			}
			if (!process(ctx, chunk.data ? chunk.data : "", chunk.len, name, pl, &po, &o, &out))
				ok = false;
			if (p >= end)
				break;
			start = p = next;
			start_line = ++line;
		}
		fj_buf_free(&chunk);
	}
	if (text && out.oom) {
		fprintf(stderr, TOOL ": out of memory\n");
		ok = false;
	}
	/* A failed single module prints nothing; with --split-input-file the
	 * other chunks still reach stdout, but never a half-written -o file. */
	if (text && (ok || (o.split && !o.out)))
		if (!write_output(o.out, out.data ? out.data : "", out.len))
			ok = false;
	fj_buf_free(&out);
	free(text);
	fj_pipeline_free(pl);
	fj_context_destroy(ctx);
	free(o.print_after);
	return ok ? 0 : 1;
}
