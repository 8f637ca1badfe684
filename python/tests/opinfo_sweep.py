#!/usr/bin/env python3
"""OpInfo conformance sweep for the fusejit torch.compile backend (a script, not a
pytest module: pytest collects only test_*.py).

Every op in PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations
.op_db) that supports float32 on the CPU is run, sample by sample, through

    torch.compile(fn, backend="fusejit_host", dynamic=False)

and compared with eager using torch.testing.assert_close's default tolerances for the
dtype (NaNs compare equal). A control run through backend="aot_eager" on the same sample
separates PyTorch's own (dynamo / AOTAutograd) failures from fusejit's. Each sample is
classified as

    match_in_fusejit      matches eager, and at least one region ran in fusejit
    match_all_in_pytorch  matches eager, but fusejit left every op to PyTorch
    close_in_fusejit      differs from eager beyond assert_close's tolerance, but is as
                          accurate as f32 allows: no farther from the same call computed
                          in f64 than that tolerance plus twice the larger of eager's own
                          error and the result's change when the inputs move by one f32
                          roundoff (see _no_less_accurate)
    random_in_fusejit     the sample draws random numbers (eager's result changes with
                          the seed) and fusejit drew them itself: its Philox stream is
                          not PyTorch's generator, by design, so values differ; the
                          results' structure, shapes and dtypes match eager's
    mismatch              fusejit's result differs from eager while aot_eager's matches
    backend_error         the fusejit run raised (or hung, or crashed) while aot_eager works
    control_failure       aot_eager itself fails or differs from eager
    eager_error           eager itself raised on the sample (the sample is not usable)
    skipped               the op's results are not determined by its inputs (random, empty)

Forward only: the samples are made without requires_grad.

    PY2=$(scripts/torch2-env.sh)
    FUSEJIT_LIB=$PWD/build/libfusejit.so FUSEJIT_CACHE_DIR=off PYTHONPATH=$PWD/python \\
        $PY2 python/tests/opinfo_sweep.py --samples=1 --jobs=2 --out=opinfo.json

Options: --samples=N (samples per op, 0 = all; default all), --ops=REGEX (ops whose full
name, name.variant, matches), --timeout=S (per sample and phase, signal.alarm; a worker
that does not answer in time is killed and restarted), --jobs=N (worker processes), --out
(JSON), --csv. The ops run in worker processes, so a crash (a segfault in the C library)
or a hang costs one op, not the sweep. Writes the JSON (summary, per-op rows with the
fallback reasons and, for mismatches, the max abs/rel error, per-sample rows, top
fallback reasons), a CSV (one row per op) and prints a summary.
"""
import argparse
import collections
import csv
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

CLASSES = ["match_in_fusejit", "match_all_in_pytorch", "close_in_fusejit", "random_in_fusejit", "mismatch", "backend_error",
           "control_failure",
           "eager_error", "skipped"]
# the class of an op with several samples: the first one of these any sample has
SEVERITY = ["mismatch", "backend_error", "control_failure", "match_in_fusejit", "close_in_fusejit",
            "random_in_fusejit",
            "match_all_in_pytorch",
            "eager_error", "skipped"]

# Ops whose results are not determined by their inputs: random draws, uninitialized memory.
NONDETERMINISTIC = re.compile(r"""^(
    empty.*|new_empty.*|resize_|resize_as_|
    rand.*|randn.*|randint.*|bernoulli|multinomial|normal(\..*)?|uniform|cauchy|exponential|geometric|
    log_normal|
    nn\.functional\.(dropout.*|alpha_dropout|feature_alpha_dropout\.with_train|rrelu|fractional_max_pool.*)|
    pca_lowrank|svd_lowrank
    )$""", re.X)


def full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# ---------------------------------------------------------------- worker side

def _import_op_db():
    try:
        import expecttest  # noqa: F401
    except ImportError:  # common_utils imports it for its TestCase only
        import types
        import unittest
        m = types.ModuleType("expecttest")
        m.TestCase = unittest.TestCase
        sys.modules["expecttest"] = m
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    # Many ops' OpInfo call goes through torch.testing's wrapper_set_seed, a frame
    # dynamo does not trace: the op would run eagerly and never reach the backend.
    # The same wrapper, defined here, lets dynamo see the call.
    for name, mod in list(sys.modules.items()):
        if name.startswith("torch.testing._internal") and hasattr(mod, "wrapper_set_seed"):
            mod.wrapper_set_seed = _wrapper_set_seed
    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


# The seed _wrapper_set_seed sets: a worker runs eager once more with another one to
# tell a sample that draws random numbers.
_SEED = [42]


def _wrapper_set_seed(op, *args, **kwargs):
    import torch
    torch.manual_seed(_SEED[0])
    return op(*args, **kwargs)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("timed out")


def _short(e, n=600):
    s = "%s: %s" % (type(e).__name__, e)
    s = s.strip()
    return s if len(s) <= n else s[:n] + " ..."


_NODE = re.compile(r"\b(operand|input|returning) %?[A-Za-z_][\w.]*")


_OVERLOAD = re.compile(r"^(aten|prims|quantized|_?\w+)\.\w+\.\w+$")


def normalize_reason(r):
    """A fallback reason with the graph's node names left out, for aggregating."""
    if _OVERLOAD.match(r):  # the converter names the overload it has no rule for
        return "no conversion rule for " + r
    return _NODE.sub(r"\1 <node>", r)


def _copy(x):
    """A deep copy of a sample's structure with tensors copied, strides and storage offset
    kept where possible."""
    import torch
    from torch.utils._pytree import tree_map

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        try:
            if t.layout == torch.strided and not t.is_quantized and t.untyped_storage().nbytes() > 0:
                st = t.untyped_storage().clone()
                y = torch.empty((0,), dtype=t.dtype, device=t.device)
                y.set_(st, t.storage_offset(), t.size(), t.stride())
                return y
        except Exception:
            pass
        return t.clone()
    return tree_map(one, x)


def _tensors(x):
    import torch
    from torch.utils._pytree import tree_flatten
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _draws_random(call, fn, ref):
    """Whether eager's result ref changes when _wrapper_set_seed sets another seed."""
    _SEED[0] = 43
    try:
        drawn, _ = call("eager", fn)
        return _compare(drawn, ref) is not None
    except Exception:
        return False
    finally:
        _SEED[0] = 42


def _no_less_accurate(out, ref, call, fn):
    """True when fusejit's f32 result out is as accurate as f32 allows, judged against the
    same call computed in f64 (z): element by element within assert_close's default f32
    tolerance (atol 1e-5, rtol 1.3e-6) plus twice the larger of eager's own largest error
    |ref - z| and the call's sensitivity: the largest change of z when every float input
    moves by one f32 unit roundoff (2^-24, relative, random signs; two draws). Two f32
    results of a long or ill-conditioned computation may differ by more than the
    tolerance with neither less accurate than f32 can be."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    gen = torch.Generator().manual_seed(1)

    def f64(t):
        return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    def nudged(t):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            return t
        sign = torch.randint(0, 2, t.shape, generator=gen, dtype=torch.float64) * 2 - 1
        return t.double() * (1 + sign * 2.0 ** -24)

    try:
        exact, _ = call("eager_f64", lambda *a: fn(*tree_map(f64, a)))
        moved = [tree_flatten(call("eager_f64", lambda *a: fn(*tree_map(nudged, a)))[0])[0] for _ in range(2)]
    except Exception:
        return False
    a, _ = tree_flatten(out)
    b, _ = tree_flatten(ref)
    c, _ = tree_flatten(exact)
    if not (len(a) == len(b) == len(c)) or any(len(m) != len(c) for m in moved):
        return False
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
            continue
        if x.dtype != torch.float32 or y.dtype != torch.float32 or not isinstance(z, torch.Tensor) \
                or z.shape != x.shape or x.shape != y.shape:
            return False
        if x.numel() == 0:
            continue
        x, y, z = x.double(), y.double(), z.double()
        scale = (y - z).abs().nan_to_num(nan=0.0).max().item()
        for m in moved:
            scale = max(scale, (m[i].double() - z).abs().nan_to_num(nan=0.0).max().item())
        bound = 1e-5 + 1.3e-6 * z.abs() + 2 * scale
        ok = ((x - z).abs() <= bound) | (x.isnan() & z.isnan()) | (x == z)
        if not bool(ok.all()):
            return False
    return True


def _structure(x):
    """x's pytree structure with each tensor leaf as (shape, dtype)."""
    import torch
    from torch.utils._pytree import tree_flatten
    leaves, spec = tree_flatten(x)
    return str(spec), [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t) for t in leaves]


def _compare(actual, expected):
    """None when they match (assert_close, default tolerances, NaNs equal), else a message."""
    import torch
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
        return None
    except AssertionError as e:
        return str(e)
    except Exception as e:  # types assert_close cannot compare: compare leaves
        from torch.utils._pytree import tree_flatten
        a, _ = tree_flatten(actual)
        b, _ = tree_flatten(expected)
        if len(a) != len(b):
            return "different structure: %d vs %d leaves" % (len(a), len(b))
        for x, y in zip(a, b):
            if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
                m = _compare(x, y)
                if m:
                    return m
            elif x != y and not (x != x and y != y):
                return "leaf %r != %r (%s)" % (x, y, _short(e, 200))
        return None


def _errors(actual, expected):
    """(max abs error, max rel error) over the tensor leaves, NaN == NaN and inf == inf;
    inf where a NaN faces a number or the shapes differ."""
    import torch
    from torch.utils._pytree import tree_flatten
    a, _ = tree_flatten(actual)
    b, _ = tree_flatten(expected)
    mabs = mrel = 0.0
    if len(a) != len(b):
        return float("inf"), float("inf")
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            try:
                x, y = torch.as_tensor(x), torch.as_tensor(y)
            except Exception:
                continue
        if x.shape != y.shape:
            return float("inf"), float("inf")
        if x.numel() == 0:
            continue
        cd = torch.complex128 if (x.is_complex() or y.is_complex()) else torch.float64
        xx, yy = x.detach().to(cd), y.detach().to(cd)
        same = (xx == yy) | (torch.isnan(xx) & torch.isnan(yy))
        d = (xx - yy).abs()
        d = torch.where(same, torch.zeros_like(d), d)
        d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
        r = d / yy.abs().clamp_min(1e-30)
        r = torch.where(same, torch.zeros_like(r), r)
        r = torch.where(torch.isnan(r), torch.full_like(r, float("inf")), r)
        mabs = max(mabs, d.max().item())
        mrel = max(mrel, r.max().item())
    return mabs, mrel


def _describe(x):
    import torch
    from torch.utils._pytree import tree_map

    def one(t):
        if isinstance(t, torch.Tensor):
            s = "%s%s" % (str(t.dtype).replace("torch.", ""), list(t.shape))
            if t.layout == torch.strided and t.numel() > 1 and not t.is_contiguous():
                s += "(strides %s)" % (list(t.stride()),)
            return s
        return t
    try:
        return repr(tree_map(one, x))[:400]
    except Exception:
        return "?"


def run_sample(op, sample, timeout, emit):
    """Classifies one sample; returns the row."""
    import torch
    import fusejit.torch as fjt

    fop = op.op

    def fn(inp, args, kwargs):
        return fop(inp, *args, **kwargs)

    sin = (sample.input, tuple(sample.args), dict(sample.kwargs))
    row = {"input": _describe(sin)}

    def call(phase, runner):
        emit({"kind": "phase", "phase": phase})
        args = _copy(sin)
        signal.alarm(timeout)
        try:
            out = runner(*args)
        finally:
            signal.alarm(0)
        return out, args

    # eager, twice: a sample whose eager results differ from run to run is not determined
    try:
        ref, ref_args = call("eager", fn)
        ref2, _ = call("eager", fn)
    except Exception as e:
        row.update(cls="eager_error", error=_short(e))
        return row
    if _compare(ref, ref2) is not None:
        row.update(cls="skipped", error="eager results differ from run to run")
        return row
    def compiled(backend):
        def runner(*args):
            torch._dynamo.reset()
            try:
                return torch.compile(fn, backend=backend, dynamic=False)(*args)
            finally:
                torch._dynamo.reset()
        return runner

    def check(out, args):
        m = _compare(out, ref)
        if m is not None:
            return "output: " + m
        m = _compare(_tensors(args), _tensors(ref_args))
        if m is not None:
            return "inputs after the call (mutation): " + m
        return None

    # control: aot_eager
    control_err = None
    try:
        out, args = call("aot_eager", compiled("aot_eager"))
        m = check(out, args)
        if m is not None:
            control_err = "aot_eager differs from eager: " + m
    except Exception as e:
        control_err = "aot_eager raised " + _short(e)

    # fusejit_host, with the bridge's reports
    sink = []
    old = getattr(fjt._reports, "sink", None)
    fjt._reports.sink = sink
    fj_err = fj_mis = None
    out = None
    try:
        out, args = call("fusejit", compiled("fusejit_host"))
        fj_mis = check(out, args)
    except Exception as e:
        fj_err = _short(e, 2000)
        row["traceback"] = traceback.format_exc()[-3000:]
    finally:
        fjt._reports.sink = old

    fused = sum(rep.fused for rep in sink)
    counted = sum(rep.counted for rep in sink)
    regions = [r for rep in sink for r in rep.regions]
    fallback = [(opn, why) for rep in sink for _, opn, why in rep.fallback]
    if not sink and fj_err is None:
        fallback = [("-", "no FX graph reached fusejit (dynamo ran the function eagerly)")]
    row.update(graphs=len(sink), fused_ops=fused, ops=counted, regions=regions, fallback=fallback)

    if control_err is not None:
        row.update(cls="control_failure", error=control_err)
        if fj_err is not None:
            row["fusejit_error"] = fj_err
        elif fj_mis is not None:
            row["fusejit_mismatch"] = fj_mis[:1500]
    elif fj_err is not None:
        row.update(cls="backend_error", error=fj_err)
    elif fj_mis is not None:
        # judged further only for a wrong output of a graph fusejit ran part of
        judged = fused > 0 and fj_mis.startswith("output")
        random = judged and _draws_random(call, fn, ref)
        if random and _structure(out) == _structure(ref):
            row.update(cls="random_in_fusejit", error=fj_mis[:300])
            return row
        if judged and not random and _no_less_accurate(out, ref, call, fn):
            row.update(cls="close_in_fusejit", error=fj_mis[:300])
            return row
        mabs, mrel = _errors(out, ref) if fj_mis.startswith("output") else _errors(_tensors(args),
                                                                                   _tensors(ref_args))
        row.update(cls="mismatch", error=fj_mis[:2000], max_abs_err=mabs, max_rel_err=mrel)
    else:
        row["cls"] = "match_in_fusejit" if fused > 0 else "match_all_in_pytorch"
    return row


def worker_main(args):
    import warnings
    warnings.filterwarnings("ignore")
    os.environ.setdefault("FUSEJIT_CACHE_DIR", "off")
    import logging
    logging.disable(logging.WARNING)
    ops = _import_op_db()
    import torch
    import torch._dynamo
    import fusejit.torch  # noqa: F401  (registers the backends)
    signal.signal(signal.SIGALRM, _alarm)
    torch.set_num_threads(1)
    res = os.fdopen(args.result_fd, "w", buffering=1)

    def emit(d):
        res.write(json.dumps(d) + "\n")
        res.flush()

    emit({"kind": "ready"})
    for line in sys.stdin:
        task = json.loads(line)
        k = task["op"]
        op = ops[k]
        name = full_name(op)
        torch.manual_seed(0)
        try:
            signal.alarm(args.timeout)
            try:
                it = op.sample_inputs("cpu", torch.float32, requires_grad=False)
                samples = list(itertools.islice(it, args.samples) if args.samples > 0 else it)
            finally:
                signal.alarm(0)
        except Exception as e:
            emit({"kind": "sample", "op": name, "index": -1, "row": {"cls": "eager_error",
                                                                      "error": "sample_inputs: " + _short(e)}})
            emit({"kind": "done", "op": name})
            continue
        for i, s in enumerate(samples):
            emit({"kind": "start", "op": name, "index": i})
            try:
                row = run_sample(op, s, args.timeout, emit)
            except Exception as e:
                row = {"cls": "backend_error", "error": "sweep: " + _short(e), "traceback": traceback.format_exc()}
            emit({"kind": "sample", "op": name, "index": i, "row": row})
        if not samples:
            emit({"kind": "sample", "op": name, "index": -1, "row": {"cls": "eager_error",
                                                                      "error": "no float32 CPU samples"}})
        emit({"kind": "done", "op": name})


# ---------------------------------------------------------------- parent side

class Worker:
    def __init__(self, args, logdir, wid):
        self.args, self.wid = args, wid
        self.log = os.path.join(logdir, "worker%d.log" % wid)
        self.proc = None
        self.start()

    def start(self):
        r, w = os.pipe()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--result-fd=%d" % w,
               "--samples=%d" % self.args.samples, "--timeout=%d" % self.args.timeout]
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self.logf, stderr=subprocess.STDOUT,
                                     pass_fds=(w,))
        os.close(w)
        self.fd = r
        self.buf = b""
        self.task = None       # (op index, op name)
        self.done_ops = 0
        self.phase = None
        self.sample = None
        self.last = time.time()
        self.ready = False

    def send(self, k, name):
        self.task = (k, name)
        self.phase, self.sample = None, None
        self.last = time.time()
        self.proc.stdin.write((json.dumps({"op": k}) + "\n").encode())
        self.proc.stdin.flush()

    def lines(self):
        try:
            data = os.read(self.fd, 1 << 20)
        except OSError:
            data = b""
        if not data:
            return None  # EOF: the worker died
        self.buf += data
        out = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            out.append(json.loads(line))
        self.last = time.time()
        return out

    def kill(self):
        try:
            self.proc.kill()
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except Exception:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.logf.close()

    def restart(self):
        self.kill()
        self.start()

    def tail(self, n=1500):
        try:
            with open(self.log, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def parent_main(args):
    import torch  # noqa: F401  (only to list the ops)
    ops = _import_op_db()
    rx = re.compile(args.ops) if args.ops else None
    tasks, rows = [], []
    for k, op in enumerate(ops):
        name = full_name(op)
        if rx is not None and not rx.search(name):
            continue
        if NONDETERMINISTIC.match(name):
            rows.append({"op": name, "index": -1, "cls": "skipped", "error": "results not determined by the inputs"})
            continue
        tasks.append((k, name))
    del ops
    print("opinfo_sweep: %d ops to run (%d skipped), %s samples per op, %d workers" % (
        len(tasks), len(rows), args.samples or "all", args.jobs), flush=True)

    logdir = tempfile.mkdtemp(prefix="opinfo_sweep_")
    workers = [Worker(args, logdir, i) for i in range(min(args.jobs, max(1, len(tasks))))]
    pending = list(reversed(tasks))
    ndone = 0
    t0 = time.time()
    hard = args.timeout * 4 + 60  # no line from a worker for this long: it hangs (in C)

    def finish_op(w, cls, err):
        """The worker died or hung on its op: the sample it was on gets cls/err."""
        k, name = w.task
        rows.append({"op": name, "index": w.sample if w.sample is not None else -1, "cls": cls, "error": err})

    def on_failure(w, why):
        nonlocal ndone
        if w.task is not None:
            if w.phase == "fusejit":
                finish_op(w, "backend_error", "%s in the fusejit run; worker log tail: %s" % (why, w.tail(600)))
            elif w.phase == "aot_eager":
                finish_op(w, "control_failure", "%s in the aot_eager run" % why)
            else:
                finish_op(w, "eager_error", "%s in phase %s" % (why, w.phase))
            ndone += 1
            print("[%d/%d] %s: %s (%s)" % (ndone, len(tasks), w.task[1], why, w.phase), flush=True)
        w.task = None
        w.restart()

    stop = []

    def on_term(signum, frame):
        stop.append(signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while (pending or any(w.task is not None for w in workers)) and not stop:
        for w in workers:
            if w.task is None and w.ready and pending:
                if w.done_ops >= args.recycle:
                    w.restart()
                    continue
                w.send(*pending.pop())
        fds = {w.fd: w for w in workers}
        ready, _, _ = select.select(list(fds), [], [], 1.0)
        for fd in ready:
            w = fds[fd]
            msgs = w.lines()
            if msgs is None:
                rc = w.proc.poll()
                if rc is None:
                    try:
                        rc = w.proc.wait(5)
                    except Exception:
                        rc = "?"
                why = "worker died (exit status %s%s)" % (rc, ", signal %s" % signal.Signals(-rc).name
                                                          if isinstance(rc, int) and rc < 0 else "")
                if w.task is None and not w.ready:
                    print("opinfo_sweep: a worker failed to start:\n" + w.tail(), file=sys.stderr)
                    sys.exit(2)
                on_failure(w, why)
                continue
            for m in msgs:
                kind = m["kind"]
                if kind == "ready":
                    w.ready = True
                elif kind == "start":
                    w.sample, w.phase = m["index"], None
                elif kind == "phase":
                    w.phase = m["phase"]
                elif kind == "sample":
                    r = dict(m["row"])
                    r.update(op=m["op"], index=m["index"])
                    rows.append(r)
                elif kind == "done":
                    ndone += 1
                    w.done_ops += 1
                    mine = [r for r in rows if r["op"] == m["op"]]
                    cls = op_class(mine)
                    print("[%d/%d] %.0fs %s: %s" % (ndone, len(tasks), time.time() - t0, m["op"], cls), flush=True)
                    w.task = None
        for w in workers:
            if w.task is not None and time.time() - w.last > hard:
                on_failure(w, "no answer for %ds (a hang)" % hard)
            elif w.task is None and not w.ready and time.time() - w.last > 300:
                print("opinfo_sweep: a worker did not start:\n" + w.tail(), file=sys.stderr)
                sys.exit(2)
    for w in workers:
        w.kill()
    if stop:
        print("opinfo_sweep: stopped (signal %d) after %d of %d ops; reporting those" % (stop[0], ndone, len(tasks)),
              flush=True)
    counts = report(args, rows, time.time() - t0, logdir)
    if args.gate:
        ran = sum(v for k, v in counts.items() if k != "skipped")
        bad = counts.get("mismatch", 0) + counts.get("backend_error", 0)
        if bad or ran < args.gate:
            print("opinfo_sweep: gate FAILED: %d mismatches, %d backend errors, %d ops run (at least %d wanted)"
                  % (counts.get("mismatch", 0), counts.get("backend_error", 0), ran, args.gate), file=sys.stderr)
            sys.exit(1)
        print("opinfo_sweep: gate passed: %d ops run, 0 mismatches, 0 backend errors" % ran)
    if args.left:
        check_left(args.left, rows)


def read_left(path):
    """The committed list of what fusejit leaves to PyTorch (python/tests/opinfo_left.tsv):
    `aten.op<TAB>reason` for an ATen op (`aten.op.overload` for one overload), `*text<TAB>reason`
    for every fallback whose reason contains text. '#' starts a comment."""
    ops, texts = {}, {}
    with open(path) as f:
        for k, line in enumerate(f, 1):
            line = line.split("#", 1)[0].rstrip()
            if not line:
                continue
            key, tab, why = line.partition("\t")
            if not tab or not why.strip():
                sys.exit("%s:%d: error: want KEY<TAB>reason" % (path, k))
            (texts if key.startswith("*") else ops)[key.lstrip("*")] = why.strip()
    return ops, texts


def check_left(path, rows):
    """Exit 1 when an ATen op went to PyTorch for a reason the committed list does
    not give: the floor (every op that maps onto fusejit's op set runs in fusejit)
    holds only if each op left to PyTorch is listed with its reason."""
    ops, texts = read_left(path)
    unlisted = collections.Counter()
    for r in rows:
        for aten, why in r.get("fallback", []):
            base = ".".join(aten.split(".")[:2])
            listed = base in ops or any(k in why for k in ops if k.count(".") == 2)  # an overload
            if not listed and not any(t in why for t in texts):
                unlisted["%s (%s)" % (base, why)] += 1
    if unlisted:
        print("opinfo_sweep: %d ATen ops left to PyTorch are not in %s:" % (len(unlisted), path), file=sys.stderr)
        for k, v in sorted(unlisted.items()):
            print("  %s  [%d nodes]" % (k, v), file=sys.stderr)
        sys.exit(1)
    print("opinfo_sweep: every op left to PyTorch is listed in %s" % path)


def op_class(rows):
    have = {r["cls"] for r in rows}
    for c in SEVERITY:
        if c in have:
            return c
    return "skipped"


def reason_category(nw):
    """A coarse bucket of a normalized reason."""
    if nw.startswith("no conversion rule for "):
        return "no conversion rule for the op (not in fusejit's converter / op set)"
    if nw.startswith("fusejit refused it: "):
        return "fusejit refused it (compile error)"
    m = re.match(r"^(dtype \w+|operand <node> has dtype \w+)", nw)
    if m:
        return "unsupported dtype: " + m.group(1)
    return nw if len(nw) < 120 else nw[:120] + " ..."


def report(args, rows, seconds, logdir):
    by_op = collections.OrderedDict()
    for r in sorted(rows, key=lambda r: (r["op"], r["index"])):
        by_op.setdefault(r["op"], []).append(r)
    sample_counts = collections.Counter(r["cls"] for r in rows)
    op_rows = []
    reason_ops = collections.defaultdict(set)      # normalized reason -> ops
    reason_nodes = collections.Counter()           # normalized reason -> nodes left to PyTorch
    opreason = collections.Counter()               # (aten op, normalized reason) -> nodes
    cat_ops = collections.defaultdict(set)         # reason category -> ops
    cat_nodes = collections.Counter()
    for name, rs in by_op.items():
        cls = op_class(rs)
        reasons = collections.Counter()
        for r in rs:
            for aten, why in r.get("fallback", []):
                nw = normalize_reason(why)
                reasons["%s: %s" % (aten, nw)] += 1
                reason_ops[nw].add(name)
                reason_nodes[nw] += 1
                opreason[(aten, nw)] += 1
                cat_ops[reason_category(nw)].add(name)
                cat_nodes[reason_category(nw)] += 1
        bad = [r for r in rs if r["cls"] == cls]
        first = bad[0] if bad else rs[0]
        o = {"op": name, "class": cls, "samples": len(rs),
             "sample_classes": dict(collections.Counter(r["cls"] for r in rs)),
             "fused_ops": sum(r.get("fused_ops", 0) for r in rs), "ops": sum(r.get("ops", 0) for r in rs),
             "fallback_reasons": [{"reason": k, "nodes": v} for k, v in reasons.most_common(10)],
             "error": first.get("error"), "input": first.get("input")}
        if cls == "mismatch":
            mm = [r for r in rs if r["cls"] == "mismatch"]
            o["max_abs_err"] = max(r.get("max_abs_err", 0.0) for r in mm)
            o["max_rel_err"] = max(r.get("max_rel_err", 0.0) for r in mm)
        if first.get("traceback"):
            o["traceback"] = first["traceback"]
        op_rows.append(o)
    op_counts = collections.Counter(o["class"] for o in op_rows)
    top = [{"reason": k, "ops": len(reason_ops[k]), "nodes": reason_nodes[k]}
           for k in sorted(reason_ops, key=lambda k: (-len(reason_ops[k]), -reason_nodes[k], k))]
    cats = [{"category": k, "ops": len(cat_ops[k]), "nodes": cat_nodes[k]}
            for k in sorted(cat_ops, key=lambda k: (-len(cat_ops[k]), -cat_nodes[k], k))]
    top_op = [{"aten_op": a, "reason": w, "nodes": n} for (a, w), n in opreason.most_common(60)]
    doc = {"torch": _torch_version(), "samples_per_op": args.samples or "all", "seconds": round(seconds, 1),
           "op_counts": {c: op_counts.get(c, 0) for c in CLASSES},
           "sample_counts": {c: sample_counts.get(c, 0) for c in CLASSES},
           "fallback_reason_categories": cats, "top_fallback_reasons": top[:100], "top_fallback_reasons_by_aten_op": top_op,
           "ops": op_rows, "samples": sorted(rows, key=lambda r: (r["op"], r["index"]))}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    csv_path = args.csv or os.path.splitext(args.out)[0] + ".csv"
    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["op", "class", "samples", "fused_ops", "ops", "max_abs_err", "max_rel_err",
                     "top_fallback_reasons", "error"])
        for o in op_rows:
            wr.writerow([o["op"], o["class"], o["samples"], o["fused_ops"], o["ops"], o.get("max_abs_err", ""),
                         o.get("max_rel_err", ""), " | ".join("%s (x%d)" % (x["reason"], x["nodes"])
                                                              for x in o["fallback_reasons"][:5]),
                         (o.get("error") or "").replace("\n", " ")[:500]])

    out = sys.stdout
    print("\n==== opinfo_sweep: %d ops, %d samples, %.0fs (torch %s; worker logs in %s)" % (
        len(op_rows), len(rows), seconds, doc["torch"], logdir), file=out)
    print("%-22s %6s %8s" % ("class", "ops", "samples"), file=out)
    for c in CLASSES:
        print("%-22s %6d %8d" % (c, op_counts.get(c, 0), sample_counts.get(c, 0)), file=out)
    for c in ("mismatch", "backend_error", "control_failure"):
        lst = [o for o in op_rows if o["class"] == c]
        if not lst:
            continue
        print("\n-- %s (%d ops)" % (c, len(lst)), file=out)
        for o in lst:
            extra = ""
            if c == "mismatch":
                extra = " max_abs=%.3g max_rel=%.3g" % (o["max_abs_err"], o["max_rel_err"])
            err = (o.get("error") or "").replace("\n", " ")
            print("  %s%s: %s" % (o["op"], extra, err[:300]), file=out)
    print("\n-- fallback reason categories (ops affected, nodes)", file=out)
    for t in cats[:12]:
        print("  %4d ops %5d nodes  %s" % (t["ops"], t["nodes"], t["category"]), file=out)
    print("\n-- top fallback reasons (ops affected, nodes)", file=out)
    for t in top[:20]:
        print("  %4d ops %5d nodes  %s" % (t["ops"], t["nodes"], t["reason"][:200]), file=out)
    print("\nwrote %s and %s" % (args.out, csv_path), file=out)
    return op_counts


def _torch_version():
    try:
        import torch
        return torch.__version__
    except Exception:
        return "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=0, help="samples per op (0: all)")
    p.add_argument("--ops", default=None, help="regex over op names (name.variant)")
    p.add_argument("--timeout", type=int, default=120, help="seconds per sample and phase")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--recycle", type=int, default=40, help="restart a worker after this many ops")
    p.add_argument("--out", default="opinfo_sweep.json")
    p.add_argument("--csv", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result-fd", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--report-from", default=None, help="re-render the report of an earlier run's JSON")
    p.add_argument("--gate", type=int, default=0, metavar="N",
                   help="exit 1 on any mismatch or backend error, or when fewer than N ops ran (CI)")
    p.add_argument("--left", default=None, metavar="FILE",
                   help="exit 1 when an op goes to PyTorch for a reason FILE does not list (the floor)")
    args = p.parse_args()
    if args.report_from:
        with open(args.report_from) as f:
            doc = json.load(f)
        args.samples = 0 if doc["samples_per_op"] == "all" else doc["samples_per_op"]
        report(args, doc["samples"], doc["seconds"], "-")
    elif args.worker:
        worker_main(args)
    else:
        parent_main(args)


if __name__ == "__main__":
    main()
