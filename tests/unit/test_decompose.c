/* test_decompose.c -- the decompose and canonicalize passes: every aten op of
 * the op table has a decomposition rule, the capability table, and every
 * golden graph (tests/golden/cases/CASE/graph.fj) goes through
 * verify,decompose,canonicalize to prims only, prints, parses back, verifies
 * and prints the same text again. */
#include <dirent.h>
#include <stdio.h>

#include "test.h"

#include "frontend/frontend.h"
#include "passes/decompose.h"
#include "passes/pass.h"

static fj_context *ctx;

static void setup(void) { ctx = fj_context_create(NULL, NULL); }
static void teardown(void) { fj_context_destroy(ctx); }

START_TEST(test_every_aten_op_has_a_rule)
{
	char missing[4096] = "";
	int n = 0;
	for (int op = 0; op < FJ_OP_COUNT; op++) {
		if (!(fj_op_info(ctx, (fj_op)op)->flags & FJ_OPF_ATEN))
			continue;
		n++;
		if (!fj_dec_rule_for((fj_op)op)) {
			strncat(missing, " ", sizeof missing - strlen(missing) - 1);
			strncat(missing, fj_op_name((fj_op)op), sizeof missing - strlen(missing) - 1);
		}
	}
	ck_assert_int_gt(n, 100);
	if (missing[0])
		ck_abort_msg("aten ops without a decomposition rule:%s", missing);
	/* prims and fusion ops have none. */
	ck_assert_ptr_null(fj_dec_rule_for(FJ_OP_PRIMS_ADD));
	ck_assert_ptr_null(fj_dec_rule_for(FJ_OP_FUSION_KERNEL));
}
END_TEST

START_TEST(test_capabilities)
{
	static const fj_op kept[] = {FJ_OP_ATEN_SCATTER_ADD, FJ_OP_ATEN_INDEX_ADD, FJ_OP_ATEN_EMBEDDING_DENSE_BACKWARD,
	                             FJ_OP_ATEN_CUMSUM};
	for (int op = 0; op < FJ_OP_COUNT; op++) {
		if (!(fj_op_info(ctx, (fj_op)op)->flags & FJ_OPF_ATEN))
			continue;
		bool keep = false;
		for (size_t i = 0; i < FJ_ARRAY_LEN(kept); i++)
			keep |= (int)kept[i] == op;
		ck_assert(fj_dec_lowers((fj_op)op, "all"));
		ck_assert(fj_dec_lowers((fj_op)op, "host"));
		ck_assert_int_eq(fj_dec_lowers((fj_op)op, "nvptx"), !keep);
	}
}
END_TEST

static char *print(fj_module *m)
{
	fj_buf b;
	fj_buf_init(&b, ctx);
	ck_assert_int_eq(fj_print_module(&b, m), FJ_OK);
	char *s = strdup(b.data ? b.data : "");
	fj_buf_free(&b);
	return s;
}

static int count_ops(const fj_module *m, uint32_t flag)
{
	int n = 0;
	for (uint32_t gi = 0; gi < m->ngraphs; gi++)
		for (uint32_t i = 0; i < m->graphs[gi]->nnodes; i++)
			n += (fj_op_info(ctx, m->graphs[gi]->nodes[i].op)->flags & flag) != 0;
	return n;
}

/* Runs pipeline on the module parsed from text (or file), checks the result
 * has no aten op (when all), round-trips its text; returns the text. */
static char *lower(fj_module *m, const char *what, const char *pipeline, bool all)
{
	if (fj_run_pipeline(m, pipeline, NULL) != FJ_OK)
		ck_abort_msg("%s: %s failed: %s", what, pipeline, fj_context_error(ctx));
	if (all && count_ops(m, FJ_OPF_ATEN))
		ck_abort_msg("%s: aten ops remain after %s", what, pipeline);
	char *t1 = print(m);
	fj_module *m2 = NULL;
	if (fj_parse_module(ctx, t1, strlen(t1), what, &m2) != FJ_OK)
		ck_abort_msg("%s: the printed result does not parse: %s\n%s", what, fj_context_error(ctx), t1);
	ck_assert_int_eq(fj_verify_module(m2), FJ_OK);
	char *t2 = print(m2);
	if (strcmp(t1, t2) != 0)
		ck_abort_msg("%s: print -> parse -> print differs:\n%s\n----\n%s", what, t1, t2);
	free(t2);
	fj_module_destroy(m2);
	return t1;
}

START_TEST(test_golden_graphs)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/golden/cases", fj_test_data_dir());
	DIR *dp = opendir(dir);
	if (!dp) {
		fj_test_skip("test_golden_graphs", "%s absent", dir);
		return;
	}
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dp)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[8192];
		snprintf(path, sizeof path, "%s/%s/graph.fj", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		fclose(f);
		fj_module *m = NULL;
		if (fj_parse_file(ctx, path, &m) != FJ_OK)
			ck_abort_msg("%s: %s", path, fj_context_error(ctx));
		free(lower(m, path, "verify,decompose,canonicalize", true));
		fj_module_destroy(m);
		n++;
	}
	closedir(dp);
	ck_assert_int_gt(n, 0);
}
END_TEST

static fj_module *parse(const char *text)
{
	fj_module *m = NULL;
	if (fj_parse_module(ctx, text, strlen(text), "test.fj", &m) != FJ_OK)
		ck_abort_msg("parse: %s", fj_context_error(ctx));
	return m;
}

START_TEST(test_names_and_targets)
{
	fj_module *m = parse("graph @f(%x: f16[N,8] {nograd}, %i: i64[4], %s: f16[4,8]) {\n"
	                     "  %g = aten.gelu(%x)\n"
	                     "  %c = aten.clone(%g)\n"
	                     "  %a = aten.index_add(%s, %i, %s) {dim=0}\n"
	                     "  return %c, %a\n"
	                     "}\n");
	char *t = lower(m, "nvptx", "verify,decompose{target=nvptx}", false);
	ck_assert_int_eq(count_ops(m, FJ_OPF_ATEN), 1); /* index_add stays for nvptx */
	/* Every node keeps the location of the aten node it comes from. */
	int from_gelu = 0;
	for (uint32_t i = 0; i < m->graphs[0]->nnodes; i++) {
		fj_loc loc = m->graphs[0]->nodes[i].loc;
		ck_assert(loc.line == 2 || loc.line == 4);
		ck_assert_int_eq(loc.col, 3);
		from_gelu += loc.line == 2;
	}
	ck_assert_int_ge(from_gelu, 8);
	ck_assert(strstr(t, "%g = prims.convert_element_type("));
	ck_assert(strstr(t, "{nograd=true}"));
	ck_assert(strstr(t, "%a = aten.index_add(%s, %i, %s)"));
	ck_assert(!strstr(t, "%c ="));         /* clone is its operand */
	ck_assert(strstr(t, "return %g, %a"));
	free(t);
	t = lower(m, "all", "decompose,canonicalize", true);
	ck_assert(strstr(t, "%a = prims.index_add(%s, %i, %s) {dim=0}"));
	free(t);
	fj_module_destroy(m);
}
END_TEST

START_TEST(test_canonicalize_fixed_point)
{
	fj_module *m = parse("graph @f(%x: f32[4]) {\n"
	                     "  %o = prims.full() {shape=[4], value=1.0, dtype=f32}\n"
	                     "  %t = prims.full() {shape=[4], value=2.0, dtype=f32}\n"
	                     "  %s = prims.add(%o, %t)\n"
	                     "  %h = prims.full() {shape=[4], value=0.1, dtype=f16}\n"
	                     "  %hf = prims.convert_element_type(%h) {dtype=f32}\n"
	                     "  %y = prims.mul(%x, %s)\n"
	                     "  %z = prims.mul(%x, %s)\n"
	                     "  %w = prims.add(%y, %z)\n"
	                     "  %v = prims.mul(%w, %hf)\n"
	                     "  return %v\n"
	                     "}\n");
	char *t = lower(m, "canon", "canonicalize", true);
	ck_assert(strstr(t, "value=3.0, dtype=f32"));
	/* f16(0.1) = 0.0999755859375 exactly, folded into an f32 constant. */
	ck_assert(strstr(t, "value=0.0999755859375, dtype=f32"));
	ck_assert(strstr(t, "%w = prims.add(%y, %y)"));
	ck_assert_int_eq(m->graphs[0]->nnodes, 5);
	free(t);
	fj_module_destroy(m);
}
END_TEST

Suite *suite_decompose(void)
{
	Suite *s = suite_create("decompose");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_every_aten_op_has_a_rule);
	tcase_add_test(tc, test_capabilities);
	tcase_add_test(tc, test_golden_graphs);
	tcase_add_test(tc, test_names_and_targets);
	tcase_add_test(tc, test_canonicalize_fixed_point);
	suite_add_tcase(s, tc);
	return s;
}
