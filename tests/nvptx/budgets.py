#!/usr/bin/python3
"""budgets.py FUSEJIT_OPT SRC_ROOT [--table-only] -- ptxas budgets at sm_90.

Every bench graph (bench/graphs/*.fj), forward (--pipeline=default) and
training (--pipeline=train: the forward and backward kernels), through
`fusejit-opt --emit=ptx --target=sm_90` with every variant of every region
(FUSEJIT_PTX_ALL_VARIANTS=1), then `ptxas -v --gpu-name sm_90`. Per entry:
registers, spill stores/loads, shared memory, .maxntid, the resident blocks
per SM that follow, and the widest global load and store in the PTX text.

Checks (each failure names the entry):
  - no spills beyond the table's spill bytes (stores and loads each; 0 when
    the column is absent, so no spills at all but in row_reg8: see
    budgets.tsv) -- a stack frame without spills (libdevice's sinf/cosf
    keep their argument reduction's table in local memory) is not one;
  - the entry's template is in the budget table (tests/nvptx/budgets.tsv),
    its .maxntid is the table's threads, its registers are at most the
    table's, and that many registers leave the table's blocks per SM
    resident (65,536 registers per SM in 4 sub-partitions, allocated per
    warp in units of 256; 2,048 threads, 32 blocks, 228 KiB of shared
    memory, 1 KiB of it reserved per block);
  - the table's vec128 templates make 128-bit global accesses
    (ld.global[.nc].v4.f32/b32/u32, .v2.f64/b64 ...) in regions whose
    results are all f32, f16 or bf16: loads and stores ("ldst": the
    vectorised pointwise entry) or loads ("ld": a block per row of an inner
    reduction, which stores its row's outputs per element); the scalar _s1
    entries and the other templates are exempt ("no");
  - the cross-block protocol (the _split entries and persistent_inner_outer
    ones, which take a workspace): a fence (membar.gl, fence.sc/acq_rel.gpu)
    between the last global store and every counter atomic, and no
    ld.global.nc from the workspace (other blocks write it: a non-coherent
    load may see a stale line) -- checked by following the registers
    computed from the workspace parameter (operands may be read .nc after
    the last-block test: nothing writes them during the launch). The lint
    first runs on three entries of its own (LINT_CASES), two it must
    reject, so a lint that finds nothing fails.

Prints the table (`--table-only`: prints it and checks nothing). Exit 0 when
every check holds, 1 otherwise, 77 (with the reason) without ptxas at
$PTXAS (default /usr/local/cuda/bin/ptxas).
"""
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile

REGS_PER_SM = 65536
SUBPARTS = 4
REG_UNIT = 256  # registers, per warp
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED = 1024  # per block


def blocks_per_sm(regs, threads, smem):
    """Resident blocks per SM at sm_90 (CUDA's occupancy calculator)."""
    warps = (threads + 31) // 32
    per_warp = max(1, (regs * 32 + REG_UNIT - 1) // REG_UNIT * REG_UNIT)
    by_regs = (REGS_PER_SM // SUBPARTS // per_warp) * SUBPARTS // warps
    by_threads = THREADS_PER_SM // (warps * 32)
    by_smem = SMEM_PER_SM // (smem + SMEM_RESERVED)
    return min(by_regs, by_threads, by_smem, BLOCKS_PER_SM)


def load_budgets(path):
    """template -> (threads, blocks, max_regs, vec128: 'ldst', 'ld' or 'no', spill bytes allowed)."""
    table = {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            cols = line.split()
            if len(cols) not in (5, 6) or cols[4] not in ('ldst', 'ld', 'no') or (len(cols) == 6
                                                                           and not cols[5].isdigit()):
                sys.exit('%s:%d: expected: template threads blocks max_regs vec128(ldst|ld|no) [spill_bytes]'
                         % (path, ln))
            table[cols[0]] = (int(cols[1]), int(cols[2]), int(cols[3]), cols[4], int(cols[5]) if len(cols) == 6 else 0)
    return table


# ---- the regions: schedule, kernel name and result dtypes from the IR ----

KERNEL_RE = re.compile(r'= fusion\.kernel\(.*\{schedule="([a-z_]+)", kernel="([A-Za-z0-9_]+)"\} : (.*) \{$')


def regions_of(ir):
    """kernel name -> (schedule, set of result dtypes)."""
    out = {}
    for line in ir.splitlines():
        m = KERNEL_RE.search(line.strip())
        if m:
            dts = set(re.findall(r'\b([a-z]+[0-9]*)\[', m.group(3)))
            out[m.group(2)] = (m.group(1), dts)
    return out


SUFFIXES = ('_s1', '_tpr', '_reg8', '_col', '_split', '_simt', '_add')


def template_of(entry, regions, smem):
    """The budget table's template of an entry (its region's schedule and
    the variant's suffix), its region's result dtypes."""
    base, suf = entry, ''
    if entry not in regions:
        for s in SUFFIXES:
            if entry.endswith(s) and entry[:-len(s)] in regions:
                base, suf = entry[:-len(s)], s
                break
    if base not in regions:
        return None, set()
    sched, dts = regions[base]
    if sched in ('pointwise', 'transpose'):
        if suf == '_s1':
            return 'pointwise_s1', dts
        # a transpose is tiled through shared memory when its results allow
        return ('transpose' if sched == 'transpose' and smem > 0 else 'pointwise'), dts
    if sched == 'persistent_inner_outer':
        return ('io' + suf), dts
    if sched in ('reduction_outer', 'persistent_outer') and suf == '':
        return 'row_outer', dts  # a block per row over strided rows: nothing to read 16 bytes at a time
    if sched in ('reduction_inner', 'reduction_outer', 'persistent_inner', 'persistent_outer'):
        return ('row' + suf), dts
    if sched == 'matmul':
        if suf == '_simt' or (suf == '' and smem < 8192):
            return 'matmul_simt', dts
        return 'matmul_mma', dts
    if sched == 'scatter':
        return 'scatter' + suf, dts
    return sched, dts  # take, gather, scan


# ---- PTX text ----

ENTRY_RE = re.compile(r'^\.visible \.entry (\w+)\(')
WIDTH_RE = re.compile(r'^\s*(ld|st)\.(?:volatile\.|relaxed\.gpu\.|acquire\.gpu\.)?global\.(nc\.)?(?:L1::\w+\.)?(?:L2::\w+\.)?'
                      r'(?:(v2|v4|v8)\.)?([a-z])(\d+)\s')


def ptx_entries(ptx):
    """entry name -> its lines (the .entry line to the closing brace)."""
    out, cur = {}, None
    for line in ptx.splitlines():
        m = ENTRY_RE.match(line)
        if m:
            cur = m.group(1)
            out[cur] = []
        if cur is not None:
            out[cur].append(line)
            if line.startswith('}'):
                cur = None
    return out


def widest(lines):
    """The widest global load and store, in bits."""
    w = {'ld': 0, 'st': 0}
    for line in lines:
        m = WIDTH_RE.match(line)
        if m:
            n = {'v2': 2, 'v4': 4, 'v8': 8}.get(m.group(3), 1) * int(m.group(5))
            w[m.group(1)] = max(w[m.group(1)], n)
    return w['ld'], w['st']


def directive(lines, name):
    for line in lines:
        m = re.match(r'^\.' + name + r'\s+(\d+)', line.strip())
        if m:
            return int(m.group(1))
    return 0


FENCE_RE = re.compile(r'^\s*(membar\.gl|membar\.sys|fence\.(sc|acq_rel)\.(gpu|sys))\s*;')
REG_RE = re.compile(r'%[a-z]+\d+')


def lint_protocol(entry, lines):
    """The cross-block protocol of an entry with a workspace (its last
    parameter): problems found, as sentences."""
    params = [ln.strip().rstrip(',') for ln in lines if re.match(r'^\s*\.param\s', ln)]
    if not params:
        return []
    ws = params[-1].split()[-1]
    bad = []
    tainted = set()
    atoms = 0
    fenced = True  # no global store since the last fence
    for no, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith('//') or s.endswith(':'):
            continue
        instr = s.split(None, 1)
        op = instr[0]
        if op.startswith('@'):  # a predicate guard: @%p1 bra ...
            parts = s.split(None, 2)
            if len(parts) < 2:
                continue
            op, rest = parts[1], parts[2] if len(parts) > 2 else ''
        else:
            rest = instr[1] if len(instr) > 1 else ''
        regs = REG_RE.findall(rest)
        if op.startswith('ld.param') and ('[' + ws + ']') in rest.replace(' ', ''):
            tainted.add(regs[0])
            continue
        if op.startswith('st.global') or op.startswith('st.volatile.global') or op.startswith('red.'):
            fenced = False
        if FENCE_RE.match(s if not s.startswith('@') else s.split(None, 1)[1]):
            fenced = True
        if op.startswith('atom.') and '.add' in op:
            atoms += 1
            if not fenced:
                bad.append('%s: counter atomic without a fence after the global stores before it (line %d of the entry: %s)'
                           % (entry, no + 1, s))
        if op.startswith('ld.global.nc') and any(r in tainted for r in regs[1:]):
            bad.append('%s: ld.global.nc from the workspace (line %d of the entry: %s)' % (entry, no + 1, s))
        # taint: a destination computed from a tainted source
        if regs and not op.startswith(('st.', 'atom.', 'red.', 'bra', 'setp', 'ld.')) and any(r in tainted for r in regs[1:]):
            tainted.add(regs[0])
        if op.startswith(('cvta', 'mov')) and any(r in tainted for r in regs[1:]):
            tainted.add(regs[0])
    if atoms == 0:
        bad.append('%s: takes a workspace but has no counter atomic' % entry)
    return bad


# The lint on two entries it must reject (a counter atomic right after a
# store, and a non-coherent load from the workspace) and one it must accept:
# the problems it finds in each.
LINT_CASES = {
    'no_fence': (1, """.visible .entry no_fence(
	.param .u64 no_fence_param_0
)
{
	ld.param.u64 	%rd1, [no_fence_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	st.global.f64 	[%rd2+16], %fd1;
	atom.global.add.u32 	%r1, [%rd2], 1;
	ret;
}"""),
    'nc_ws': (1, """.visible .entry nc_ws(
	.param .u64 nc_ws_param_0
)
{
	ld.param.u64 	%rd1, [nc_ws_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	add.s64 	%rd3, %rd2, 16;
	st.global.f64 	[%rd3], %fd1;
	membar.gl;
	atom.global.add.u32 	%r1, [%rd2], 1;
	ld.global.nc.f64 	%fd2, [%rd3+8];
	ret;
}"""),
    'good': (0, """.visible .entry good(
	.param .u64 good_param_0
)
{
	ld.param.u64 	%rd1, [good_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	st.global.f64 	[%rd2+16], %fd1;
	membar.gl;
	atom.global.add.u32 	%r1, [%rd2], 1;
	ld.volatile.global.f64 	%fd2, [%rd2+24];
	ret;
}"""),
}


def lint_self_test():
    bad = []
    for name, (want, ptx) in LINT_CASES.items():
        got = lint_protocol(name, ptx_entries(ptx)[name])
        if len(got) != want:
            bad.append('the protocol lint finds %d problems in its test entry %s, not %d: %s' % (len(got), name, want, got))
    return bad


# ---- ptxas -v ----

PTXAS_SPILL_RE = re.compile(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads')


def ptxas_info(text):
    """entry -> {regs, spill_st, spill_ld, stack, smem}."""
    out = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
            out[cur] = {'regs': 0, 'spill_st': 0, 'spill_ld': 0, 'stack': 0, 'smem': 0}
            continue
        if cur is None:
            continue
        m = PTXAS_SPILL_RE.search(line)
        if m:
            out[cur]['stack'], out[cur]['spill_st'], out[cur]['spill_ld'] = map(int, m.groups())
        m = re.search(r'Used (\d+) registers', line)
        if m:
            out[cur]['regs'] = int(m.group(1))
            m2 = re.search(r'(\d+) bytes smem', line)
            if m2:
                out[cur]['smem'] = int(m2.group(1))
    return out


def run_one(opt, ptxas, tmp, path, pipe):
    name = os.path.basename(path)[:-3]
    env = dict(os.environ, FUSEJIT_PTX_ALL_VARIANTS='1')
    ptx_path = os.path.join(tmp, '%s.%s.ptx' % (path.strip('/').replace('/', '_'), pipe))  # unique per graph
    ir = subprocess.run([opt, path, '--pipeline=' + pipe], env=env, capture_output=True, text=True)
    if ir.returncode != 0:
        return name, pipe, None, 'fusejit-opt (ir): ' + ir.stderr[:400]
    r = subprocess.run([opt, path, '--pipeline=' + pipe, '--emit=ptx', '--target=sm_90', '-o', ptx_path], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return name, pipe, None, 'fusejit-opt (ptx): ' + r.stderr[:400]
    v = subprocess.run([ptxas, '-v', '--gpu-name', 'sm_90', ptx_path, '-o', os.devnull], capture_output=True,
                       text=True)
    if v.returncode != 0:
        return name, pipe, None, 'ptxas: ' + (v.stderr + v.stdout)[:400]
    with open(ptx_path) as f:
        ptx = f.read()
    return name, pipe, (regions_of(ir.stdout), ptx_entries(ptx), ptxas_info(v.stderr + v.stdout)), None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    table_only = '--table-only' in sys.argv
    if len(args) != 2:
        sys.exit('usage: budgets.py FUSEJIT_OPT SRC_ROOT [--table-only]')
    opt, root = args
    ptxas = os.environ.get('PTXAS', '/usr/local/cuda/bin/ptxas')
    if not os.access(ptxas, os.X_OK):
        print('SKIP: %s not found (install the CUDA toolkit to check the ptxas budgets)' % ptxas)
        return 77
    budgets = load_budgets(os.path.join(root, 'tests', 'nvptx', 'budgets.tsv'))
    graphs = sorted(glob.glob(os.path.join(root, 'bench', 'graphs', '*.fj')))
    if not graphs:
        print('FAIL: no bench graph in %s/bench/graphs' % root)
        return 1
    problems = lint_self_test()
    for t, (threads, blocks, regs, _, _) in sorted(budgets.items()):
        if blocks_per_sm(regs, threads, 0) < blocks:
            problems.append('budgets.tsv: %s: %d registers at %d threads leave %d blocks per SM, not %d'
                            % (t, regs, threads, blocks_per_sm(regs, threads, 0), blocks))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(g, p) for g in graphs for p in ('default', 'train')]
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
            results = list(ex.map(lambda j: run_one(opt, ptxas, tmp, j[0], j[1]), jobs))
    seen = set()
    for name, pipe, res, err in results:
        if err:
            problems.append('%s (%s): %s' % (name, pipe, err))
            continue
        regions, entries, info = res
        for entry in sorted(entries):
            if (entry in seen) or entry not in info:
                if entry not in info:
                    problems.append('%s (%s): ptxas reported nothing for %s' % (name, pipe, entry))
                continue
            seen.add(entry)
            lines = entries[entry]
            pi = info[entry]
            tmpl, dts = template_of(entry, regions, pi['smem'])
            ntid = directive(lines, 'maxntid')
            blocks = blocks_per_sm(pi['regs'], ntid or 1024, pi['smem'])
            ld, st = widest(lines)
            rows.append((entry, tmpl or '?', pi['regs'], pi['spill_st'], pi['spill_ld'], pi['smem'], ntid, blocks, ld, st))
            b_spill = budgets[tmpl][4] if tmpl in budgets else 0  # no budget: no spills either
            if max(pi['spill_st'], pi['spill_ld']) > b_spill:
                problems.append('%s (%s): spills %d B of stores and %d B of loads, the budget is %d'
                                % (entry, tmpl, pi['spill_st'], pi['spill_ld'], b_spill))
            if tmpl is None or tmpl not in budgets:
                problems.append('%s: template %s has no budget in budgets.tsv' % (entry, tmpl))
                continue
            b_threads, b_blocks, b_regs, vec, _ = budgets[tmpl]
            if ntid != b_threads:
                problems.append('%s (%s): .maxntid %d, the budget assumes %d' % (entry, tmpl, ntid, b_threads))
            if pi['regs'] > b_regs:
                problems.append('%s (%s): %d registers, the budget is %d' % (entry, tmpl, pi['regs'], b_regs))
            if blocks < b_blocks:
                problems.append('%s (%s): %d blocks per SM (%d registers, %d threads, %d B smem), the budget is %d'
                                % (entry, tmpl, blocks, pi['regs'], ntid, pi['smem'], b_blocks))
            if vec != 'no' and dts and dts <= {'f32', 'f16', 'bf16'} and (ld < 128 or (vec == 'ldst' and st < 128)):
                problems.append('%s (%s): widest global load %d bits, store %d bits; 128 expected' % (entry, tmpl, ld, st))
            if tmpl.startswith('io') or tmpl.endswith('_split'):
                problems.extend(lint_protocol(entry, lines))
    print('%-44s %-13s %5s %9s %6s %7s %7s %7s' % ('entry', 'template', 'regs', 'spill', 'smem', 'threads',
                                                   'blk/SM', 'ld/st'))
    for r in rows:
        print('%-44s %-13s %5d %4d/%-4d %6d %7d %7d %3d/%-3d' % r)
    print('budgets: %d entries of %d graphs (forward and training) at sm_90' % (len(rows), len(graphs)))
    if table_only:
        return 0
    for p in problems:
        print('FAIL: ' + p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
