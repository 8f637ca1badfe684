/* fusejit-run.h -- shared by the files of fusejit-run (IR.md §5), a program
 * on the public header alone, as the sqlite3 shell sits on SQLite's API:
 *   fusejit-run.c        arguments, the module and graph, dispatch
 *   fusejit-run-infer.c  a forward run: inputs, checks, bench, report
 *   fusejit-run-train.c  --train: the forward and the backward
 *   fusejit-run-util.c   messages, random inputs, checks, reports, files
 * and npy.c (.npy files). */
#ifndef FUSEJIT_RUN_H
#define FUSEJIT_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <fusejit/fusejit.h>

#define TOOL "fusejit-run"
#define STEM_MAX 300

typedef struct kv {
	const char *name, *value;
} kv;

typedef struct run_opts {
	const char *file;
	const char *graph;       /* the graph to run, as resolved (without '@') */
	const char *executor;
	uint64_t seed;
	const char *outdir;
	bool check, check64, json, bench, train; /* check: --check=aten; check64: --check=f64 */
	int bench_reps;          /* FUSEJIT_BENCH_REPS (0: timed) */
	kv *inputs;
	size_t ninputs;
	const char **dim_names;  /* --dim */
	int64_t *dim_values;
	size_t ndims;
	kv *tangents;
	size_t ntangents;
} run_opts;

/* ---- fusejit-run-util.c ---- */

/* "fusejit-run: error: ..." on stderr; returns 1. */
int errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the context's diagnostics (or its error) and clears them; returns 1. */
int report(fj_context *ctx, fj_status st);
/* Elements of a tensor. */
int64_t numel(const fj_tensor *t);
/* "f32[2,3]" */
void type_str(const fj_tensor *t, char *buf, size_t size);
bool is_float(fj_scalar_type t);
/* Seeded random data for parameter `param`: floats in [-1,1), bools, and
 * integers in [0,10), or in [0, bound) when bound >= 0 (an index). */
void fill_random(fj_tensor *t, uint64_t seed, const char *param, int64_t bound);
/* The file stem of output k (IR.md §5) from the outputs' value names
 * (names[j], "" for a literal), into stem[STEM_MAX]: the name, or out<k> for
 * a literal, a value returned twice or a name an earlier stem took. */
void output_stem(const char *const *names, uint32_t n, uint32_t k, char *const *prev, char *stem);

void json_str(FILE *f, const char *s);
void json_num(FILE *f, double v);
/* The first values and min/max/mean of t. */
void print_summary(FILE *f, const fj_tensor *t);

/* One output's --check=f64 verdict. */
typedef struct f64_verdict {
	double err, tol, scale;
	bool placed; /* NaN and inf at the same places */
} f64_verdict;

bool f64_ok(const f64_verdict *v);
/* Judges output out against value i of the f64 reference r. */
f64_verdict f64_judge(const fj_reference *r, size_t i, const fj_tensor *out);
void f64_print(FILE *f, const f64_verdict *v);
void f64_json(FILE *f, const f64_verdict *v);
/* The one error of a failed --check. */
void check_failed(bool aten_ok, bool f64_all_ok, bool train, bool outdir);
/* --check=aten of out against ref: *relerr, and whether it passes. */
bool aten_judge(const fj_tensor *out, const fj_tensor *ref, double *relerr);

/* An output, named for --output-dir and the reports. */
typedef struct named_out {
	char stem[STEM_MAX];
	char value[STEM_MAX]; /* the value's name as written ("" for a literal) */
	const fj_tensor *t;
	double relerr;
	char *path, *tmp;
} named_out;

/* Writes outs[0..n) to DIR/<stem>.npy: every file to a temporary first,
 * renamed when all are written. Returns 1 after an error. */
int write_outputs(const char *dir, named_out *outs, uint32_t n);
void free_outputs(named_out *outs, uint32_t n);
/* The bench line of the text report. */
void print_bench(FILE *f, const char *what, const fj_bench_result *b);
/* The "bench" member of the JSON report. */
void json_bench(FILE *f, double ms, double copy_ms, size_t bytes);

/* ---- the runs ---- */

int run_inference(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex);
int run_train(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex);
/* Reads the --input files into in[] (given[i] = &in[i], origin[i]) for the
 * inputs of graph o->graph of m. Returns 1 after an error. */
int read_inputs(fj_context *ctx, const fj_module *m, const run_opts *o, fj_tensor *in, const fj_tensor **given,
                const char **origin);
/* The run options of o (dims) with origins. */
fj_run_options run_options(const run_opts *o, const char *const *origins);
/* Fills the inputs not given with seeded random data, of the sizes the
 * program binds (salt prefixes the parameter names: tangents differ from
 * primals). Returns 1 after an error. */
int random_inputs(fj_context *ctx, fj_program *p, const run_opts *o, const fj_run_options *ro, fj_tensor *in,
                  const fj_tensor **given);
/* Compiles graph o->graph of m for ex (training or not), *ms the time. */
fj_status compile(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex, bool training, fj_program **p,
                  double *ms);
double now_ms(void);

#endif
