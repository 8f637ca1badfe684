/* pass.h -- the pass manager: the pass registry (passes.def), pipeline strings
 * and the instrumentation around passes (print-after, verify-each, statistics,
 * timing).
 *
 * A pipeline is the text of IR.md §4: `decompose,partition{mode=mincut},fuse`,
 * a comma-separated list of passes, each with optional options in braces (commas
 * inside braces separate options; values are bare words or quoted strings). The
 * same grammar serves fusejit-opt --passes= and the C API.
 *
 * The library prints nothing unless asked: dumps, statistics and timing go to
 * the FILE* or callback named in fj_pipeline_opts. Errors are recorded on the
 * module's context as diagnostics.
 */
#ifndef FJ_PASS_H
#define FJ_PASS_H

#include <stdio.h>

#include "ir.h"

typedef struct fj_pass_run fj_pass_run;
typedef fj_status (*fj_pass_fn)(fj_pass_run *r);

/* Every registered pass's run function, fj_pass_<name> (defined in
 * passes/<name>.c once the pass exists). */
#define PASS(name, run, options, description) fj_status fj_pass_##name(fj_pass_run *r);
#include "passes.def"

typedef struct fj_pass_info {
	const char *name;
	fj_pass_fn run;          /* NULL: not yet available in this build */
	const char *options;     /* spec: "key: bool|int|str|a|b|c = default; ..." */
	const char *description;
} fj_pass_info;

size_t fj_pass_count(void);
const fj_pass_info *fj_pass_at(size_t i);
/* The pass named name[0..len), or NULL. */
const fj_pass_info *fj_pass_lookup(const char *name, size_t len);

/* The pipeline of a named pipeline ("default", "train"; IR.md §5), or NULL. */
const char *fj_named_pipeline(const char *name);

/* ---- options of one pass instance ---- */

typedef enum fj_pass_opt_kind { FJ_POPT_BOOL, FJ_POPT_INT, FJ_POPT_STR, FJ_POPT_ENUM } fj_pass_opt_kind;

typedef struct fj_pass_optval {
	const char *name;
	uint8_t kind;     /* fj_pass_opt_kind */
	bool b;           /* BOOL */
	int64_t i;        /* INT */
	const char *s;    /* STR and ENUM (the chosen word) */
	bool given;       /* written in the pipeline (else the default) */
} fj_pass_optval;

/* ---- parsed pipelines ---- */

typedef struct fj_pipeline fj_pipeline;

/* Parses a pipeline string. Errors (unknown pass, unknown option, bad value,
 * malformed text) are recorded on ctx naming the column in the string, and
 * *out is NULL. An empty string is a valid empty pipeline. Passes that are
 * not yet available parse fine (see fj_pipeline_check_available). */
fj_status fj_parse_pipeline(fj_context *ctx, const char *text, fj_pipeline **out);
void fj_pipeline_free(fj_pipeline *p);
size_t fj_pipeline_length(const fj_pipeline *p);
const fj_pass_info *fj_pipeline_pass(const fj_pipeline *p, size_t i);
/* Pass i as written in the pipeline, options included: "partition{mode=mincut}". */
const char *fj_pipeline_pass_text(const fj_pipeline *p, size_t i);
/* Option values of pass i, one per option of its spec, defaults filled in. */
const fj_pass_optval *fj_pipeline_pass_options(const fj_pipeline *p, size_t i, size_t *n);
/* FJ_ERR_UNSUPPORTED (recorded: "pass 'fuse' is not yet available in this
 * build") when a pass of p has no implementation yet. */
fj_status fj_pipeline_check_available(const fj_pipeline *p);

/* ---- running ---- */

/* Receives the text of dumps, statistics and timing reports. */
typedef void (*fj_pipeline_write_fn)(void *ud, const char *text, size_t len);

/* Zero-initialise, then set what is wanted (the tools set verify_each). */
typedef struct fj_pipeline_opts {
	bool print_after_all;
	const char *const *print_after; /* pass names (or texts as written) to dump after */
	size_t nprint_after;
	bool verify_each;               /* fj_verify_module after each pass */
	bool stats;                     /* "pass NAME: ..." lines */
	bool time_passes;               /* a timing report at the end */
	FILE *out;                      /* where dumps, stats and timing go ... */
	fj_pipeline_write_fn write;     /* ... or this callback, which wins over out */
	void *write_ud;
} fj_pipeline_opts;

/* Parses and runs a pipeline on m (o may be NULL: no instrumentation). Stops
 * at the first failing pass; the module is then in the state that pass left. */
fj_status fj_run_pipeline(fj_module *m, const char *pipeline, const fj_pipeline_opts *o);
fj_status fj_run_parsed_pipeline(fj_module *m, const fj_pipeline *p, const fj_pipeline_opts *o);

/* ---- what a pass sees ---- */

struct fj_pass_run {
	fj_module *m;
	const fj_pass_info *pass;
	const char *text;             /* as written in the pipeline */
	const fj_pass_optval *opts;   /* one per option of the pass's spec */
	size_t nopts;
	fj_buf *stats;                /* NULL unless statistics are wanted */
};

/* Option values by name (the name must be in the pass's spec). */
bool fj_pass_opt_bool(const fj_pass_run *r, const char *name);
int64_t fj_pass_opt_int(const fj_pass_run *r, const char *name);
const char *fj_pass_opt_str(const fj_pass_run *r, const char *name);
/* Adds a statistics line (a newline is appended); does nothing unless
 * statistics were asked for. */
void fj_pass_stat(fj_pass_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
