/* fakecuda.h -- what the files of the stand-in CUDA driver share
 * (fakecuda.c: contexts, memory, streams, launches; fakecuda_module.c: PTX,
 * ptxas and modules). Not a public header: the driver's interface is the
 * CUDA driver API's, plus the test hook of backend_nvptx/fjcuda_hook.h. */
#ifndef FJ_TESTS_FAKECUDA_H
#define FJ_TESTS_FAKECUDA_H

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_nvptx/fjcuda_hook.h"

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef uint64_t CUdeviceptr;

enum {
	OK = 0,
	E_INVALID_VALUE = 1,
	E_OUT_OF_MEMORY = 2,
	E_NOT_INITIALIZED = 3,
	E_INVALID_DEVICE = 101,
	E_INVALID_IMAGE = 200,
	E_INVALID_CONTEXT = 201,
	E_INVALID_PTX = 218,
	E_UNSUPPORTED_PTX_VERSION = 222,
	E_INVALID_HANDLE = 400,
	E_NOT_FOUND = 500,
	E_NOT_READY = 600,
	E_ILLEGAL_ADDRESS = 700,
	E_LAUNCH_OUT_OF_RESOURCES = 701,
	E_MISALIGNED_ADDRESS = 716,
	E_LAUNCH_FAILED = 719,
	E_NOT_SUPPORTED = 801,
};

/* The device. */
enum {
	SM_COUNT = 132,
	REGS_PER_SM = 65536,
	SMEM_PER_SM = 228 * 1024,
	SMEM_PER_BLOCK = 48 * 1024,
	SMEM_PER_BLOCK_OPTIN = 227 * 1024,
	GUARD = 256,
	MAX_PARAMS = 512,
};
static const uint64_t TOTAL_MEM = 141ull << 30;
static const unsigned char GUARD_BYTE = 0xfb, FILL_BYTE = 0xff;

/* ---- objects ---- */

typedef struct fake_ctx fake_ctx;
typedef struct stream stream;

typedef struct alloc {
	unsigned char *base; /* aligned_alloc: GUARD bytes, the user's, the rest of the span */
	uint64_t p;          /* base + GUARD */
	size_t size, span;
	fake_ctx *ctx;
	bool reported;       /* its guard's corruption already reported */
	struct alloc *next;
} alloc;

typedef struct entry {
	char name[256];
	int nparams;
	unsigned char psize[MAX_PARAMS], isptr[MAX_PARAMS];
	unsigned palign[MAX_PARAMS];
	unsigned maxntid[3], reqntid[3];
	bool has_max, has_req;
	int regs, smem; /* from ptxas -v; -1 unknown */
	int max_dyn;    /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; -1: never set */
	fjcuda_run_fn run;
	void *ud;
	int variant;
	struct module *mod;
} entry;

typedef struct module {
	fake_ctx *ctx;
	int version; /* major * 10 + minor */
	char target[32];
	entry *e;
	int n;
	struct module *next;
} module;

typedef struct event {
	fake_ctx *ctx;
	unsigned flags;
	int state; /* 0 never recorded, 1 recorded and pending, 2 complete */
	unsigned gen;
	stream *rec_stream;
	uint64_t rec_seq;
	double t_ms;
	int refs; /* record operations queued */
	bool dead;
	struct event *next;
} event;

enum { OP_HTOD, OP_DTOH, OP_DTOD, OP_MEMSET, OP_LAUNCH, OP_RECORD, OP_WAIT };

typedef struct op {
	int kind;
	uint64_t seq;
	struct op *next;
	uint64_t dst, src;
	void *host; /* HtoD: the captured data (owned); DtoH: the destination */
	size_t n;
	unsigned char val;
	entry *f; /* launch */
	unsigned grid, block, shared;
	uint64_t *args;
	int fault;
	char fault_msg[384];
	event *ev; /* record */
	unsigned gen;
	stream *ws; /* wait: run ws up to wseq */
	uint64_t wseq;
} op;

struct stream {
	fake_ctx *ctx;
	unsigned flags; /* 1: CU_STREAM_NON_BLOCKING */
	bool legacy;
	op *head, *tail;
	stream *next;
};

struct fake_ctx {
	bool primary, alive;
	int refs; /* the primary context's retains */
	stream legacy;
	stream *streams;
	module *mods;
	int sticky;
	fake_ctx *next;
};


/* One process-wide driver, under fjc_lock; every API call takes it and
 * returns through fjc_leave, which releases it. */
extern pthread_mutex_t fjc_lock;
extern fake_ctx *fjc_ctxs;
extern char fjc_ptxas[1024]; /* ptxas's path; empty: none */

CUresult fjc_leave(CUresult r);
void fjc_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The current context, or an error (not initialised, none current; its sticky error, *out set). */
CUresult fjc_need_ctx(fake_ctx **out);
/* An entry point's start: the driver's lock taken, the current context in
 * c (r: a CUresult the entry may reuse), or the lock left with the error. */
#define FJC_ENTER(c, r)                \
	fake_ctx *c;                   \
	CUresult r;                    \
	pthread_mutex_lock(&fjc_lock); \
	if ((r = fjc_need_ctx(&c)) != OK) \
		return fjc_leave(r)
/* Runs every queued operation of c. */
void fjc_run_all(fake_ctx *c);
void fjc_free_module(module *m);
/* A live module, a function of one (NULL when the handle is not one). */
module *fjc_get_module(void *h);
entry *fjc_get_function(void *h);
/* The most dynamic shared memory a launch of f may ask. */
int fjc_dyn_limit(const entry *f);

#endif
