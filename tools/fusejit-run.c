/* fusejit-run -- runs a graph of a .fj module (IR.md §5): parse a module,
 * pick a graph, bind its inputs (.npy files or seeded random data), run it
 * on an executor, and report, check, benchmark and write its outputs.
 *
 * A program on the public header alone (include/fusejit/fusejit.h), as the
 * sqlite3 shell sits on SQLite's API: what it needs, an embedder has too.
 * It reads the environment the library does not: FUSEJIT_BENCH_REPS, and
 * FUSEJIT_NVPTX_DEVICE, which it checks and sets as the context's
 * nvptx_device option.
 *
 * Every failure is one message on stderr, `fusejit-run: error: ...` or
 * `file:line:col: error: ...`, and exit status 1; outputs are written to
 * temporary files and renamed only once everything has succeeded, so a failed
 * run leaves nothing behind. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fusejit-run.h"
#include "npy.h"

static const char usage_text[] =
	"usage: fusejit-run FILE [options]\n"
	"\n"
	"Runs a graph of a .fj module (@main, else the first; FILE - reads stdin) and\n"
	"reports its outputs: name, dtype, shape, the first values, min/max/mean.\n"
	"\n"
	"  --graph=@NAME           the graph to run\n"
	"  --executor=EXEC         auto (default), host, aten or nvptx:\n"
	"                            aten  the reference: one kernel per op, one thread\n"
	"                            host  fused host code: the default pipeline, then one\n"
	"                                  vectorised loop nest per fusion.kernel, on all cores\n"
	"                                  (FUSEJIT_THREADS overrides; fuse{attention=true}: one\n"
	"                                  flash-attention kernel for softmax(Q K) V, one for its\n"
	"                                  backward; --train saves its logsumexp for that backward:\n"
	"                                  partition{attention=true})\n"
	"                            nvptx fused PTX through the CUDA driver (libcuda.so.1, a GPU;\n"
	"                                  env FUSEJIT_NVPTX_DEVICE=emulator: a host emulator, for tests)\n"
	"                            auto  nvptx with a CUDA driver and GPU, else host\n"
	"  --input NAME=FILE.npy   a parameter's value (others are seeded random data:\n"
	"                          floats in [-1,1), integers in [0,10), valid indices)\n"
	"  --dim SYM=INT           the size of a symbol no input fixes\n"
	"  --seed=S                the random inputs' seed (default 0)\n"
	"  --output-dir=DIR        write each output to DIR/<name>.npy (a literal or a value\n"
	"                          returned twice: DIR/out<i>.npy); nothing when the run fails\n"
	"  --check=aten            also run on aten; print each output's relative L2 error and\n"
	"                          fail above f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12, ints exact\n"
	"  --check=f64             also run aten on the graph computed in f64 (same inputs) and\n"
	"                          twice more with its roundings perturbed by 2^-20; per output\n"
	"                          err = ||out - ref|| / (||ref|| + scale), scale = the change\n"
	"                          per unit of perturbation; fail above the tolerance of the\n"
	"                          least precise rounding in it (f32 1e-5, f16 1e-2, bf16 5e-2,\n"
	"                          f64 1e-12), ints exact; may be given with --check=aten\n"
	"  --bench                 time the run (median after warm-up) against a memcpy of the\n"
	"                          same bytes; print ms, GB/s, memcpy GB/s and memcpy_ratio\n"
	"                          (env FUSEJIT_BENCH_REPS=N: exactly N timed runs)\n"
	"  --json                  print one JSON object instead of text\n"
	"  --train                 training: autodiff + min-cut partition, then the forward\n"
	"                          and the backward graph; writes DIR/grad_<param>.npy for\n"
	"                          each parameter that gets a gradient (and the outputs)\n"
	"  --tangent NAME=FILE.npy the tangent of output NAME (its file stem: out<i> for a literal\n"
	"                          or a value returned twice) for --train (others: seeded random)\n"
	"  --help                  this text\n";

static bool parse_i64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* --input, --tangent and --dim: NAME=VALUE. */
static int parse_pair(run_opts *o, const char *opt, size_t nlen, const char *val)
{
	bool is_dim = nlen == 3 && memcmp(opt, "dim", 3) == 0, is_tangent = nlen == 7;
	const char *e2 = strchr(val, '=');
	if (!e2 || e2 == val || !e2[1])
		return errorf("--%.*s needs NAME=%s, got '%s'", (int)nlen, opt, is_dim ? "INT" : "FILE.npy", val);
	const char *k0 = !is_dim && !is_tangent && val[0] == '%' ? val + 1 : val;
	size_t kl = (size_t)(e2 - k0);
	char *key = malloc(kl + 1);
	if (!key)
		return errorf("out of memory");
	memcpy(key, k0, kl);
	key[kl] = 0;
	if (is_tangent) {
		o->tangents[o->ntangents++] = (kv){key, e2 + 1};
	} else if (!is_dim) {
		o->inputs[o->ninputs++] = (kv){key, e2 + 1};
	} else {
		int64_t v;
		if (!parse_i64(e2 + 1, &v) || v < 0) {
			free(key);
			return errorf("--dim %s: '%s' is not a size (a non-negative integer)", val, e2 + 1);
		}
		o->dim_names[o->ndims] = key;
		o->dim_values[o->ndims++] = v;
	}
	return 0;
}

/* An option with a value (--graph ... --tangent). */
static int parse_valued(run_opts *o, const char *name, size_t nlen, const char *val)
{
#define IS(s) (nlen == strlen(s) && memcmp(name, s, nlen) == 0)
	if (IS("graph")) {
		o->graph = val[0] == '@' ? val + 1 : val;
		if (!*o->graph)
			return errorf("--graph needs a graph name, as --graph=@main");
	} else if (IS("executor")) {
		o->executor = val;
	} else if (IS("seed")) {
		char *end;
		errno = 0;
		unsigned long long s = strtoull(val, &end, 10);
		if (errno || *end || !*val || val[0] == '-')
			return errorf("--seed: '%s' is not a non-negative integer", val);
		o->seed = s;
	} else if (IS("output-dir")) {
		if (!*val)
			return errorf("--output-dir needs a directory");
		o->outdir = val;
	} else if (IS("check")) {
		if (strcmp(val, "aten") == 0)
			o->check = true;
		else if (strcmp(val, "f64") == 0)
			o->check64 = true;
		else
			return errorf("--check=%s: unknown check (expected --check=aten or --check=f64)", val);
	} else {
		return parse_pair(o, name, nlen, val);
	}
	return 0;
#undef IS
}

static int parse_args(int argc, char **argv, run_opts *o, bool *help)
{
	bool flags_done = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!flags_done && strcmp(a, "--") == 0) {
			flags_done = true;
			continue;
		}
		if (!flags_done && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
			*help = true;
			return 0;
		}
		if (flags_done || a[0] != '-' || a[1] == 0) {
			if (o->file)
				return errorf("more than one input file: '%s' and '%s'", o->file, a);
			o->file = a;
			continue;
		}
		if (a[1] != '-')
			return errorf("unknown option '%s' (see --help)", a);
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const char *val = eq ? eq + 1 : NULL;
#define IS(s) (nlen == strlen(s) && memcmp(name, s, nlen) == 0)
		if (IS("json") || IS("bench") || IS("train")) {
			if (val)
				return errorf("option --%.*s takes no value", (int)nlen, name);
			*(IS("json") ? &o->json : IS("bench") ? &o->bench : &o->train) = true;
			continue;
		}
		if (!(IS("graph") || IS("executor") || IS("input") || IS("dim") || IS("seed") || IS("output-dir") ||
		      IS("check") || IS("tangent")))
			return errorf("unknown option '--%.*s' (see --help)", (int)nlen, name);
#undef IS
		if (!val) {
			if (i + 1 >= argc)
				return errorf("option --%.*s needs a value", (int)nlen, name);
			val = argv[++i];
		}
		if (parse_valued(o, name, nlen, val) != 0)
			return 1;
	}
	return 0;
}

/* ---- shared by the runs (fusejit-run.h) ---- */

fj_run_options run_options(const run_opts *o, const char *const *origins)
{
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.dim_names = o->dim_names;
	ro.dim_values = o->dim_values;
	ro.ndims = o->ndims;
	ro.origins = origins;
	return ro;
}

int read_inputs(fj_context *ctx, const fj_module *m, const run_opts *o, fj_tensor *in, const fj_tensor **given,
                const char **origin)
{
	size_t np = fj_module_value_count(m, o->graph, FJ_ROLE_INPUT);
	fj_value_info vi;
	for (size_t k = 0; k < o->ninputs; k++) {
		size_t i = 0;
		while (i < np && fj_module_value_info(m, o->graph, FJ_ROLE_INPUT, i, &vi) == FJ_OK &&
		       strcmp(vi.name, o->inputs[k].name) != 0)
			i++;
		if (i == np) {
			char list[600] = "";
			size_t len = 0;
			for (size_t j = 0; j < np && len < sizeof list - 1; j++)
				if (fj_module_value_info(m, o->graph, FJ_ROLE_INPUT, j, &vi) == FJ_OK)
					len += (size_t)snprintf(list + len, sizeof list - len, "%s%%%s", j ? ", " : "", vi.name);
			if (o->train)
				return errorf("--input %s: graph @%s has no parameter %%%s", o->inputs[k].name, o->graph,
				              o->inputs[k].name);
			return errorf("--input %s: graph @%s has no parameter %%%s (%s%s)", o->inputs[k].name, o->graph,
			              o->inputs[k].name, np ? "its parameters: " : "it has no parameters", list);
		}
		if (given[i] && !o->train)
			return errorf("--input %s is given twice", o->inputs[k].name);
		if (given[i])
			npy_free(&in[i]);
		npy_error e;
		if (npy_read(&e, o->inputs[k].value, &in[i]) != FJ_OK)
			return errorf("%s", e.msg);
		given[i] = &in[i];
		origin[i] = o->inputs[k].value;
	}
	(void)ctx;
	return 0;
}

int random_inputs(fj_context *ctx, fj_program *p, const run_opts *o, const fj_run_options *ro, fj_tensor *in,
                  const fj_tensor **given)
{
	size_t np = fj_program_count(p, FJ_ROLE_INPUT);
	fj_value_info *info = calloc(np + 1, sizeof *info);
	int64_t *bounds = calloc(np + 1, sizeof *bounds);
	if (!info || !bounds) {
		free(info);
		free(bounds);
		return errorf("out of memory");
	}
	fj_status st = fj_program_sizes(p, ro, given, np, info, NULL, bounds);
	int rc = st == FJ_OK ? 0 : report(ctx, st);
	for (size_t i = 0; rc == 0 && i < np; i++) {
		if (given[i])
			continue;
		if (!npy_alloc(&in[i], info[i].dtype, info[i].rank, info[i].sizes)) {
			rc = errorf("out of memory");
			break;
		}
		fill_random(&in[i], o->seed, info[i].name, bounds[i]);
	}
	free(info);
	free(bounds);
	return rc;
}

fj_status compile(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex, bool training, fj_program **p,
                  double *ms)
{
	fj_compile_options co;
	fj_compile_options_init(&co);
	co.executor = ex;
	co.graph = o->graph;
	co.training = training;
	double t0 = now_ms();
	fj_status st = fj_compile(ctx, m, &co, p);
	if (ms)
		*ms = now_ms() - t0;
	return st;
}

/* ---- main ---- */

/* Reads FILE (or stdin for "-") into a module. Returns 1 after an error. */
static int load(fj_context *ctx, const char *file, fj_module **m)
{
	fj_status st;
	if (strcmp(file, "-") == 0) {
		size_t cap = 1 << 16, len = 0;
		char *text = malloc(cap);
		for (size_t k; text && (k = fread(text + len, 1, cap - len, stdin)) > 0;) {
			len += k;
			if (len == cap) {
				char *nt = realloc(text, cap * 2);
				if (!nt)
					free(text);
				text = nt;
				cap *= 2;
			}
		}
		if (!text)
			return errorf("out of memory reading stdin");
		st = fj_module_parse(ctx, text, len, "<stdin>", m);
		free(text);
	} else {
		st = fj_module_parse_file(ctx, file, m);
	}
	return st == FJ_OK ? 0 : report(ctx, st);
}

/* The graph to run: --graph's, else @main, else the first. */
static int pick_graph(const fj_module *m, run_opts *o)
{
	size_t n = fj_module_graph_count(m);
	if (o->graph) {
		for (size_t i = 0; i < n; i++)
			if (strcmp(fj_module_graph_name(m, i), o->graph) == 0)
				return 0;
		return errorf("%s has no graph named @%s", o->file, o->graph);
	}
	if (n == 0)
		return errorf("%s: no graph to run", o->file);
	o->graph = fj_module_graph_name(m, 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(fj_module_graph_name(m, i), "main") == 0)
			o->graph = "main";
	return 0;
}

/* The executor --executor names. Returns 1 after an error. */
static int pick_executor(const char *name, fj_executor *ex)
{
	static const struct {
		const char *name;
		fj_executor ex;
	} tab[] = {{"auto", FJ_EXECUTOR_AUTO}, {"host", FJ_EXECUTOR_HOST}, {"aten", FJ_EXECUTOR_ATEN},
	           {"nvptx", FJ_EXECUTOR_NVPTX}};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (strcmp(name, tab[i].name) == 0) {
			*ex = tab[i].ex;
			return 0;
		}
	return errorf("unknown executor '%s' (expected auto, host, aten or nvptx)", name);
}

/* The nvptx device from FUSEJIT_NVPTX_DEVICE (cuda, the default, or the
 * emulator), set on the context. Returns 1 after an error. */
static int pick_device(fj_context *ctx, const run_opts *o)
{
	const char *env = getenv("FUSEJIT_NVPTX_DEVICE");
	bool emulator = env && strcmp(env, "emulator") == 0;
	if (env && *env && !emulator && strcmp(env, "cuda") != 0)
		return errorf("FUSEJIT_NVPTX_DEVICE=%s: expected cuda (the default) or emulator", env);
	fj_status st = fj_context_set_option(ctx, "nvptx_device", emulator ? "emulator" : "cuda");
	if (st != FJ_OK)
		return report(ctx, st);
	if (o->bench && emulator) /* before a slow emulated run */
		return errorf("--bench needs the CUDA device (it times kernels with CUDA events), not "
		              "FUSEJIT_NVPTX_DEVICE=emulator");
	return 0;
}

static int run_main(int argc, char **argv, run_opts *o)
{
	bool help = false;
	if (parse_args(argc, argv, o, &help) != 0)
		return 1;
	if (help) {
		fputs(usage_text, stdout);
		return 0;
	}
	fj_executor ex = FJ_EXECUTOR_AUTO;
	if (pick_executor(o->executor, &ex) != 0)
		return 1;
	if (o->ntangents && !o->train)
		return errorf("--tangent needs --train");
	if (!o->file)
		return errorf("no input file (usage: fusejit-run FILE [options]; see --help)");
	const char *reps = getenv("FUSEJIT_BENCH_REPS"); /* exactly N timed runs (bench/run: few for slow executors) */
	o->bench_reps = reps && atoi(reps) > 0 ? atoi(reps) : 0;
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx)
		return errorf("out of memory");
	fj_module *m = NULL;
	int rc = load(ctx, o->file, &m);
	if (rc == 0)
		rc = pick_graph(m, o);
	if (rc == 0 && ex == FJ_EXECUTOR_NVPTX)
		rc = pick_device(ctx, o);
	if (rc == 0)
		rc = o->train ? run_train(ctx, m, o, ex) : run_inference(ctx, m, o, ex);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	return rc;
}

int main(int argc, char **argv)
{
	run_opts o = {0};
	o.executor = "auto";
	o.inputs = calloc((size_t)argc + 1, sizeof *o.inputs);
	o.dim_names = calloc((size_t)argc + 1, sizeof *o.dim_names);
	o.dim_values = calloc((size_t)argc + 1, sizeof *o.dim_values);
	o.tangents = calloc((size_t)argc + 1, sizeof *o.tangents);
	int rc = !o.inputs || !o.dim_names || !o.dim_values || !o.tangents ? errorf("out of memory")
	                                                                     : run_main(argc, argv, &o);
	for (size_t k = 0; k < o.ninputs; k++)
		free((char *)o.inputs[k].name);
	for (size_t k = 0; k < o.ndims; k++)
		free((char *)o.dim_names[k]);
	for (size_t k = 0; k < o.ntangents; k++)
		free((char *)o.tangents[k].name);
	free(o.inputs);
	free(o.dim_names);
	free(o.dim_values);
	free(o.tangents);
	fflush(stdout);
	return rc;
}
