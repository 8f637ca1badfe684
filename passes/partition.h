/* partition.h -- internals of the `partition` pass shared by
 * passes/partition.c (the split of a joint graph) and
 * passes/partition_attention.c (its option `attention`). */
#ifndef FJ_PASS_PARTITION_H
#define FJ_PASS_PARTITION_H

#include "ir.h"

/* partition{attention=true}: rewrites the stand-alone pair *fw / *bw that
 * partition just extracted so that each attention pattern whose weights P
 * the forward saves saves the row logsumexp and O instead (and the
 * parameters its scores read), the backward recomputing P (see
 * partition_attention.c). On success *fw and *bw may be
 * new graphs (the old ones destroyed); *found counts the patterns whose P
 * the forward saves, *done those rewritten. On failure the pair is left as
 * it was and the error is recorded. */
fj_status fj_pass_partition_attention(fj_graph **fw, fj_graph **bw, uint32_t *found, uint32_t *done);

#endif
