/* fakecuda_module.c -- the stand-in CUDA driver's modules (fakecuda.c's
 * header says what it enforces): the PTX text parsed for .version, .target
 * and each .entry (parameters: size, .ptr and .align; .maxntid, .reqntid),
 * registers and static shared memory from `ptxas -v` (once per PTX text),
 * the JIT error log filled on bad PTX, functions and their attributes. */
#include "tests/driver/fakecuda.h"

/* ---- PTX ---- */

typedef struct ptx_err {
	char *log;
	size_t cap, len;
} ptx_err;

static void log_add(ptx_err *pe, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_add(ptx_err *pe, const char *fmt, ...)
{
	if (!pe->log || pe->len + 1 >= pe->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(pe->log + pe->len, pe->cap - pe->len, fmt, ap);
	va_end(ap);
	if (k > 0)
		pe->len = pe->len + (size_t)k < pe->cap ? pe->len + (size_t)k : pe->cap - 1;
}

/* A copy of the PTX with comments blanked (newlines kept, for line numbers). */
static char *strip_comments(const char *src)
{
	size_t n = strlen(src);
	char *s = malloc(n + 1);
	if (!s)
		return NULL;
	memcpy(s, src, n + 1);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '/' && s[i + 1] == '/') {
			while (i < n && s[i] != '\n')
				s[i++] = ' ';
		} else if (s[i] == '/' && s[i + 1] == '*') {
			s[i] = s[i + 1] = ' ';
			for (i += 2; i < n && !(s[i] == '*' && s[i + 1] == '/'); i++)
				if (s[i] != '\n')
					s[i] = ' ';
			if (i < n)
				s[i] = s[i + 1] = ' ';
			i++;
		}
	}
	return s;
}

static int line_of(const char *s, const char *p)
{
	int line = 1;
	for (; s < p; s++)
		line += *s == '\n';
	return line;
}

static const char *skip_ws(const char *p)
{
	while (*p && isspace((unsigned char)*p))
		p++;
	return p;
}

/* The next token: an identifier or directive (letters, digits, _ $ . %), a
 * number, or one punctuation character. */
static const char *token(const char *p, char *tok, size_t n)
{
	p = skip_ws(p);
	size_t k = 0;
	if (isalnum((unsigned char)*p) || strchr("_$.%", *p)) {
		while (*p && (isalnum((unsigned char)*p) || strchr("_$.%", *p))) {
			if (k + 1 < n)
				tok[k++] = *p;
			p++;
		}
	} else if (*p) {
		tok[k++] = *p++;
	}
	tok[k] = 0;
	return p;
}

static int type_size(const char *t)
{
	static const char *const types[] = {".u8", ".s8", ".b8", ".u16", ".s16", ".b16", ".f16", ".bf16", ".u32",
	                                    ".s32", ".b32", ".f32", ".u64", ".s64", ".b64", ".f64", ".pred"};
	static const int sizes[] = {1, 1, 1, 2, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 1};
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (strcmp(t, types[i]) == 0)
			return sizes[i];
	return 0;
}

/* Parses one parameter declaration from p (after `.param`) to the next ','
 * or ')'. */
static const char *parse_param(const char *text, const char *p, entry *e, ptx_err *pe, bool *ok)
{
	char tok[256];
	int size = 0, count = 1;
	unsigned align = 0;
	bool isptr = false, named = false;
	for (;;) {
		const char *q = token(p, tok, sizeof tok);
		if (!tok[0] || tok[0] == ',' || tok[0] == ')')
			break;
		p = q;
		if (strcmp(tok, ".ptr") == 0) {
			isptr = true;
		} else if (strcmp(tok, ".align") == 0) {
			p = token(p, tok, sizeof tok);
			align = (unsigned)strtoul(tok, NULL, 10);
			if (!align || (align & (align - 1))) {
				log_add(pe, "ptxas application ptx input, line %d; error   : Invalid .align value '%s'\n",
				        line_of(text, p), tok);
				*ok = false;
			}
		} else if (tok[0] == '.') {
			int ts = type_size(tok);
			if (ts)
				size = ts;
			/* a state space (.global, .const ...) and the like are accepted */
		} else if (tok[0] == '[') {
			p = token(p, tok, sizeof tok);
			count = atoi(tok);
			p = token(p, tok, sizeof tok); /* ] */
		} else if (isalpha((unsigned char)tok[0]) || tok[0] == '_' || tok[0] == '$' || tok[0] == '%') {
			named = true;
		} else {
			log_add(pe, "ptxas application ptx input, line %d; error   : syntax error at '%s'\n", line_of(text, p),
			        tok);
			*ok = false;
			return p;
		}
	}
	if (!size || !named || count < 1) {
		log_add(pe, "ptxas application ptx input, line %d; error   : malformed parameter of entry '%s'\n",
		        line_of(text, p), e->name);
		*ok = false;
		return p;
	}
	if (e->nparams >= MAX_PARAMS) {
		log_add(pe, "ptxas application ptx input, line %d; error   : entry '%s' has too many parameters\n",
		        line_of(text, p), e->name);
		*ok = false;
		return p;
	}
	int i = e->nparams++;
	e->psize[i] = (unsigned char)(size * count > 8 ? 8 : size * count);
	e->isptr[i] = isptr;
	e->palign[i] = align ? align : (unsigned)size;
	return p;
}

/* Three comma-separated numbers (missing ones are 1). */
static const char *parse_dims(const char *p, unsigned d[3])
{
	char tok[64];
	d[0] = d[1] = d[2] = 1;
	for (int i = 0; i < 3; i++) {
		p = token(p, tok, sizeof tok);
		d[i] = (unsigned)strtoul(tok, NULL, 10);
		const char *q = token(p, tok, sizeof tok);
		if (tok[0] != ',')
			break;
		p = q;
	}
	return p;
}

/* Parses .version, .target and the entries (with their parameter lists and
 * directives) of text into m. False, with the log filled, on an error. */
static bool parse_ptx(const char *src, module *m, ptx_err *pe)
{
	char *text = strip_comments(src);
	if (!text) {
		log_add(pe, "out of memory\n");
		return false;
	}
	bool ok = true, have_version = false, have_target = false;
	char tok[256];
	const char *p = text;
	int cap = 0;
	for (;;) {
		p = token(p, tok, sizeof tok);
		if (!tok[0])
			break;
		if (strcmp(tok, ".version") == 0) {
			p = token(p, tok, sizeof tok);
			int maj = 0, min = 0;
			if (sscanf(tok, "%d.%d", &maj, &min) != 2) {
				log_add(pe, "ptxas application ptx input, line %d; fatal   : Parsing error near '%s': syntax error\n",
				        line_of(text, p), tok);
				ok = false;
				break;
			}
			m->version = maj * 10 + min;
			have_version = true;
		} else if (strcmp(tok, ".target") == 0) {
			p = token(p, tok, sizeof tok);
			snprintf(m->target, sizeof m->target, "%.31s", tok);
			have_target = true;
		} else if (strcmp(tok, ".entry") == 0) {
			if (!have_version || !have_target)
				break; /* reported below */
			if (m->n == cap) {
				cap = cap ? 2 * cap : 8;
				entry *ne = realloc(m->e, (size_t)cap * sizeof *ne);
				if (!ne) {
					ok = false;
					break;
				}
				m->e = ne;
			}
			entry *e = &m->e[m->n];
			memset(e, 0, sizeof *e);
			e->regs = e->smem = -1;
			p = token(p, tok, sizeof tok);
			snprintf(e->name, sizeof e->name, "%s", tok);
			const char *q = token(p, tok, sizeof tok);
			if (tok[0] == '(') {
				p = q;
				for (;;) {
					q = token(p, tok, sizeof tok);
					if (tok[0] == ')') {
						p = q;
						break;
					}
					if (strcmp(tok, ".param") != 0) {
						log_add(pe, "ptxas application ptx input, line %d; error   : expected .param in entry '%s'\n",
						        line_of(text, p), e->name);
						ok = false;
						break;
					}
					p = parse_param(text, q, e, pe, &ok);
					if (!ok)
						break;
					q = token(p, tok, sizeof tok);
					if (tok[0] == ',')
						p = q;
				}
				if (!ok)
					break;
			}
			/* directives up to the body (or the ';' of a declaration) */
			for (;;) {
				q = token(p, tok, sizeof tok);
				if (!tok[0] || tok[0] == '{' || tok[0] == ';')
					break;
				p = q;
				if (strcmp(tok, ".maxntid") == 0) {
					p = parse_dims(p, e->maxntid);
					e->has_max = true;
				} else if (strcmp(tok, ".reqntid") == 0) {
					p = parse_dims(p, e->reqntid);
					e->has_req = true;
				}
			}
			if (tok[0] == ';') { /* a declaration: no entry */
				p = q;
				continue;
			}
			if (tok[0] != '{') {
				log_add(pe, "ptxas application ptx input, line %d; error   : entry '%s' has no body\n",
				        line_of(text, p), e->name);
				ok = false;
				break;
			}
			p = q;
			for (int depth = 1; depth && *p; p++)
				depth += *p == '{' ? 1 : *p == '}' ? -1 : 0;
			e->max_dyn = -1;
			m->n++;
		}
	}
	if (ok && !have_version)
		log_add(pe, "ptxas application ptx input, line 1; fatal   : Missing .version directive at start of file\n");
	else if (ok && !have_target)
		log_add(pe, "ptxas application ptx input, line 1; fatal   : Missing .target directive\n");
	ok = ok && have_version && have_target;
	if (!ok)
		log_add(pe, "ptxas fatal   : Ptx assembly aborted due to errors\n");
	free(text);
	return ok;
}

/* ---- ptxas -v, once per PTX text ---- */

typedef struct ptxas_result {
	uint64_t hash;
	bool ok;
	char *log; /* ptxas's output */
	struct ptxas_result *next;
} ptxas_result;
static ptxas_result *g_ptxas_cache;

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static char *read_all(FILE *f)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t k;
	while (buf && (k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += k;
		if (cap - len < 1024) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

/* Runs ptxas -v on text (cached by its hash): NULL when there is no ptxas. */
static ptxas_result *run_ptxas(const char *text, const char *gpu)
{
	if (!fjc_ptxas[0])
		return NULL;
	uint64_t h = fnv1a(text) ^ fnv1a(gpu);
	for (ptxas_result *r = g_ptxas_cache; r; r = r->next)
		if (r->hash == h)
			return r;
	const char *tmp = getenv("TMPDIR");
	char path[512];
	snprintf(path, sizeof path, "%s/fjcuda-XXXXXX.ptx", tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemps(path, 4);
	if (fd < 0)
		return NULL;
	size_t n = strlen(text);
	bool wrote = write(fd, text, n) == (ssize_t)n;
	close(fd);
	ptxas_result *r = calloc(1, sizeof *r);
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "'%s' -v --gpu-name %s -o /dev/null '%s' 2>&1", fjc_ptxas, gpu, path);
	FILE *f = wrote && r ? popen(cmd, "r") : NULL;
	if (!f) {
		unlink(path);
		free(r);
		return NULL;
	}
	r->log = read_all(f);
	int status = pclose(f);
	unlink(path);
	r->hash = h;
	r->ok = status == 0 && r->log;
	r->next = g_ptxas_cache;
	g_ptxas_cache = r;
	return r;
}

/* Fills each entry's registers and static shared memory from ptxas's output:
 * "Compiling entry function 'NAME' ..." then "Used N registers, ... M bytes smem". */
static void apply_ptxas(module *m, const char *log)
{
	entry *cur = NULL;
	for (const char *line = log; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char buf[1024];
		snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
		const char *q = strstr(buf, "Compiling entry function '");
		if (q) {
			q += strlen("Compiling entry function '");
			const char *end = strchr(q, '\'');
			cur = NULL;
			for (int i = 0; end && i < m->n; i++)
				if (strlen(m->e[i].name) == (size_t)(end - q) && strncmp(m->e[i].name, q, (size_t)(end - q)) == 0)
					cur = &m->e[i];
		}
		if (cur && (q = strstr(buf, "Used ")) != NULL) {
			int regs;
			if (sscanf(q, "Used %d registers", &regs) == 1) {
				cur->regs = regs;
				cur->smem = 0;
				const char *sm = strstr(q, "bytes smem");
				if (sm) {
					while (sm > q && sm[-1] == ' ')
						sm--;
					while (sm > q && isdigit((unsigned char)sm[-1]))
						sm--;
					cur->smem = atoi(sm);
				}
			}
		}
		line = nl ? nl + 1 : NULL;
	}
}

/* ---- modules ---- */

module *fjc_get_module(void *h)
{
	for (fake_ctx *c = fjc_ctxs; c; c = c->next)
		for (module *m = c->alive ? c->mods : NULL; m; m = m->next)
			if (m == h)
				return m;
	return NULL;
}

entry *fjc_get_function(void *h)
{
	for (fake_ctx *c = fjc_ctxs; c; c = c->next)
		for (module *m = c->alive ? c->mods : NULL; m; m = m->next)
			if (m->n && (entry *)h >= m->e && (entry *)h < m->e + m->n)
				return h;
	return NULL;
}

/* The JIT options: the error and info logs (5/6, 3/4) filled, sizes written back. */
typedef struct jit_logs {
	char *err, *info;
	size_t err_size, info_size;
	int err_i, info_i;
} jit_logs;

static CUresult read_options(unsigned n, const int *opts, void **vals, jit_logs *jl)
{
	memset(jl, 0, sizeof *jl);
	jl->err_i = jl->info_i = -1;
	if (n && (!opts || !vals))
		return E_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		switch (opts[i]) {
		case 3: jl->info = vals[i]; break;
		case 4: jl->info_size = (size_t)(uintptr_t)vals[i]; jl->info_i = (int)i; break;
		case 5: jl->err = vals[i]; break;
		case 6: jl->err_size = (size_t)(uintptr_t)vals[i]; jl->err_i = (int)i; break;
		default:
			if (opts[i] < 0 || opts[i] > 40)
				return E_INVALID_VALUE;
		}
	}
	return OK;
}

static void write_log(char *buf, size_t size, int idx, void **vals, const char *text)
{
	if (!buf || !size)
		return;
	snprintf(buf, size, "%s", text ? text : "");
	if (idx >= 0)
		vals[idx] = (void *)(uintptr_t)strlen(buf);
}

/* "sm_90" -> 90 (0 when not an sm_ target). */
static int sm_number(const char *t) { return strncmp(t, "sm_", 3) == 0 ? atoi(t + 3) : 0; }

static CUresult load_module(fake_ctx *c, const char *ptx, jit_logs *jl, void **vals, module **out)
{
	module *m = calloc(1, sizeof *m);
	char *log = calloc(1, 16384);
	if (!m || !log) {
		free(m);
		free(log);
		return E_OUT_OF_MEMORY;
	}
	ptx_err pe = {log, 16384, 0};
	CUresult r = OK;
	if ((unsigned char)ptx[0] == 0x7f && strncmp(ptx + 1, "ELF", 3) == 0) {
		log_add(&pe, "the fjcuda stand-in loads PTX text only, not a cubin\n");
		r = E_INVALID_IMAGE;
	} else if (!parse_ptx(ptx, m, &pe)) {
		r = E_INVALID_PTX;
	} else if (m->version > 90) {
		log_add(&pe, "ptxas application ptx input, line 1; fatal   : Unsupported .version %d.%d; current version "
		        "is '9.0'\n", m->version / 10, m->version % 10);
		r = E_UNSUPPORTED_PTX_VERSION;
	} else if (sm_number(m->target) > 90 || sm_number(m->target) < 50) {
		log_add(&pe, "ptxas application ptx input, line 1; fatal   : SM version specified by .target (%s) is not "
		        "supported by the device (sm_90)\n", m->target);
		r = E_INVALID_PTX;
	} else {
		const char *gpu = strcmp(m->target, "sm_90a") == 0 ? "sm_90a" : "sm_90";
		ptxas_result *pr = run_ptxas(ptx, gpu);
		if (pr && !pr->ok) {
			log_add(&pe, "%s", pr->log ? pr->log : "ptxas failed\n");
			r = E_INVALID_PTX;
		} else if (pr) {
			apply_ptxas(m, pr->log);
			write_log(jl->info, jl->info_size, jl->info_i, vals, pr->log);
		}
	}
	if (r != OK) {
		write_log(jl->err, jl->err_size, jl->err_i, vals, log);
		free(log);
		fjc_free_module(m);
		return r;
	}
	free(log);
	m->ctx = c;
	for (int i = 0; i < m->n; i++)
		m->e[i].mod = m;
	m->next = c->mods;
	c->mods = m;
	*out = m;
	return OK;
}

API CUresult cuModuleLoadDataEx(void **pmod, const void *image, unsigned n, int *opts, void **vals)
{
	FJC_ENTER(c, r);
	jit_logs jl;
	if (!pmod || !image || (r = read_options(n, opts, vals, &jl)) != OK)
		return fjc_leave(r ? r : E_INVALID_VALUE);
	module *m = NULL;
	r = load_module(c, image, &jl, vals, &m);
	if (r == OK)
		*pmod = m;
	return fjc_leave(r);
}

API CUresult cuModuleLoadData(void **pmod, const void *image) { return cuModuleLoadDataEx(pmod, image, 0, NULL, NULL); }

API CUresult cuModuleUnload(void *h)
{
	fake_ctx *c;
	pthread_mutex_lock(&fjc_lock);
	CUresult r = fjc_need_ctx(&c);
	module *m = fjc_get_module(h);
	if (!c) {
		fjc_note("cuModuleUnload(%p): %s", h,
		         r == E_INVALID_CONTEXT ? (m ? "no current context (make the module's context current first)"
		                                     : "no current context, and not a live module (its context is gone?)")
		                            : "before cuInit");
		return fjc_leave(r);
	}
	if (!m)
		return fjc_leave(E_INVALID_HANDLE);
	if (m->ctx != c) {
		fjc_note("cuModuleUnload: the module belongs to another context than the current one");
		return fjc_leave(E_INVALID_CONTEXT);
	}
	fjc_run_all(c); /* launches of its entries may be queued */
	module **pp = &c->mods;
	while (*pp != m)
		pp = &(*pp)->next;
	*pp = m->next;
	fjc_free_module(m);
	return fjc_leave(c->sticky);
}

API CUresult cuModuleGetFunction(void **pf, void *h, const char *name)
{
	FJC_ENTER(c, r);
	module *m = fjc_get_module(h);
	if (!m)
		return fjc_leave(E_INVALID_HANDLE);
	if (!pf || !name)
		return fjc_leave(E_INVALID_VALUE);
	for (int i = 0; i < m->n; i++)
		if (strcmp(m->e[i].name, name) == 0) {
			*pf = &m->e[i];
			return fjc_leave(OK);
		}
	return fjc_leave(E_NOT_FOUND);
}

API CUresult cuFuncSetAttribute(void *h, int attr, int value)
{
	FJC_ENTER(c, r);
	entry *f = fjc_get_function(h);
	if (!f)
		return fjc_leave(E_INVALID_HANDLE);
	int smem = f->smem > 0 ? f->smem : 0;
	if (attr == 8) { /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
		if (value < 0 || value + smem > SMEM_PER_BLOCK_OPTIN)
			return fjc_leave(E_INVALID_VALUE);
		f->max_dyn = value;
		return fjc_leave(OK);
	}
	if (attr == 9) /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
		return fjc_leave(value >= -1 && value <= 100 ? OK : E_INVALID_VALUE);
	return fjc_leave(E_INVALID_VALUE);
}

/* The most dynamic shared memory a launch of f may ask: the opt-in
 * attribute, else what the 48 KiB of a block fjc_leave beside its static. */
int fjc_dyn_limit(const entry *f)
{
	int smem = f->smem > 0 ? f->smem : 0;
	return f->max_dyn >= 0 ? f->max_dyn : SMEM_PER_BLOCK - smem;
}

API CUresult cuFuncGetAttribute(int *v, int attr, void *h)
{
	FJC_ENTER(c, r);
	entry *f = fjc_get_function(h);
	if (!f || !v)
		return fjc_leave(!v ? E_INVALID_VALUE : E_INVALID_HANDLE);
	switch (attr) {
	case 0: { /* MAX_THREADS_PER_BLOCK */
		int most = 1024;
		if (f->has_max && (int)(f->maxntid[0] * f->maxntid[1] * f->maxntid[2]) < most)
			most = (int)(f->maxntid[0] * f->maxntid[1] * f->maxntid[2]);
		if (f->regs > 0) {
			int per_warp = (f->regs * 32 + 255) / 256 * 256;
			int warps = REGS_PER_SM / per_warp;
			if (warps * 32 < most)
				most = warps * 32;
		}
		*v = most;
		break;
	}
	case 1: *v = f->smem > 0 ? f->smem : 0; break;       /* SHARED_SIZE_BYTES */
	case 4: *v = f->regs > 0 ? f->regs : 0; break;       /* NUM_REGS */
	case 5: *v = f->mod->version; break;                 /* PTX_VERSION */
	case 6: *v = 90; break;                              /* BINARY_VERSION */
	case 8: *v = fjc_dyn_limit(f); break;                    /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
	default: return fjc_leave(E_INVALID_VALUE);
	}
	return fjc_leave(OK);
}
