#!/usr/bin/env python3
"""bench/models/run.py [--only NAME,...] [--reps N] [--threads T]

Real models through torch.compile: fusejit ("fusejit_host") against PyTorch
eager and inductor, on the CPU with T threads (default 2). Run it with the
pinned PyTorch 2.x (`$(scripts/torch2-env.sh) bench/models/run.py`), with
FUSEJIT_LIB pointing at a build of libfusejit.so.

Per model (tiny configs, random weights, f32, train mode, dropout 0):
  fwd      forward, ms (median of --reps after warm-up)
  train    forward + backward of sum(outputs * a fixed random tangent), ms
  compile  the first call's time (the compile), s, fusejit and inductor
  rss      the process's peak resident memory after that system ran, MB
           (each system runs in a fresh process, so the peaks do not mix)
Then the bridge's fixed cost per call on tiny tensors (µs), for 1, 8 and 32
input tensors: fusejit.torch.TensorCall around a one-op program.

Timings of a shared 2-vCPU machine are noisy: eager, fusejit and inductor run
alternately (A/B/C, --rounds times), each keeping its best median; name the
CPU when you quote a number.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the checkout's fusejit package
MODELS = ["encoder", "resnet18", "vit", "gpt2", "llama"]
SYSTEMS = ["eager", "fusejit", "inductor"]


def make(name):
    import torch
    torch.manual_seed(0)
    if name == "encoder":
        return torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True), \
            (torch.randn(8, 128, 256),)
    if name in ("resnet18", "vit"):
        import torchvision as tv
        if name == "resnet18":
            return tv.models.resnet18(num_classes=100), (torch.randn(8, 3, 64, 64),)
        return tv.models.VisionTransformer(image_size=64, patch_size=8, num_layers=4, num_heads=4, hidden_dim=256,
                                           mlp_dim=1024, num_classes=100, dropout=0.0), (torch.randn(8, 3, 64, 64),)
    import transformers as T
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=1000, n_positions=256, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(cfg), (torch.randint(0, 1000, (4, 128)),)
    cfg = T.LlamaConfig(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, hidden_size=256,
                        intermediate_size=688, vocab_size=1000, max_position_embeddings=256, bos_token_id=0,
                        eos_token_id=0)
    return T.LlamaForCausalLM(cfg), (torch.randint(0, 1000, (4, 128)),)


def median_ms(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def worker(name, system, reps, threads):
    """One model on one system in this process: prints a JSON line."""
    import resource
    import torch
    torch.set_num_threads(threads)
    os.environ.setdefault("FUSEJIT_THREADS", str(threads))
    from fusejit.torch import output_tensors  # and registers the backends
    model, inputs = make(name)
    model.train()
    run = model if system == "eager" else torch.compile(
        model, backend="fusejit_host" if system == "fusejit" else "inductor", dynamic=False)
    t0 = time.perf_counter()
    outs = output_tensors(run(*inputs))
    torch.manual_seed(1)
    tangents = [torch.randn_like(o) for o in outs]
    torch.autograd.backward(outs, tangents)
    first = time.perf_counter() - t0

    def fwd():
        with torch.no_grad():
            run(*inputs)

    def train():
        torch.autograd.backward(output_tensors(run(*inputs)), tangents)

    res = {"model": name, "system": system, "compile_s": first, "fwd_ms": median_ms(fwd, reps),
           "train_ms": median_ms(train, reps),
           "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(res), flush=True)


def overhead():
    import torch
    from fusejit.torch import TensorCall, context
    ctx = context()
    rows = []
    for nin in (1, 8, 32):
        ps = ", ".join("%%x%d: f32[4]" % i for i in range(nin))
        prog = ctx.compile("graph @main(%s) {\n  %%y = aten.add(%%x0, %%x%d)\n  return %%y\n}\n" % (ps, nin - 1),
                           executor="host", threads=1)
        call = TensorCall(prog, [(torch.float32, (4,), (1,))])
        xs = [torch.ones(4) for _ in range(nin)]
        for _ in range(500):
            call(*xs)
        best = min(timeit_loop(call, xs) for _ in range(5))
        rows.append((nin, best))
    return rows


def timeit_loop(call, xs, n=2000):
    t0 = time.perf_counter()
    for _ in range(n):
        call(*xs)
    return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "SYSTEM"))
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.reps, a.threads)
    models = [m for m in a.only.split(",") if m] or MODELS
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    env.setdefault("FUSEJIT_CACHE_DIR", "off")
    best = {}
    for r in range(a.rounds):
        for m in models:
            for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                p = subprocess.run([sys.executable, __file__, "--worker", m, s, "--reps", str(a.reps),
                                    "--threads", str(a.threads)], env=env, capture_output=True, text=True)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                if p.returncode or not line:
                    best[(m, s)] = {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:120]}
                    continue
                res = json.loads(line[-1])
                old = best.get((m, s))
                if old is None or "error" in old:
                    best[(m, s)] = res
                else:
                    for k in ("fwd_ms", "train_ms", "compile_s", "rss_mb"):
                        old[k] = min(old[k], res[k])
    print("%-9s %-9s %10s %10s %10s %8s" % ("model", "system", "fwd ms", "train ms", "compile s", "rss MB"))
    for m in models:
        for s in SYSTEMS:
            res = best.get((m, s), {"error": "not run"})
            if "error" in res:
                print("%-9s %-9s %s" % (m, s, res["error"]))
                continue
            print("%-9s %-9s %10.2f %10.2f %10.2f %8.0f" % (m, s, res["fwd_ms"], res["train_ms"], res["compile_s"],
                                                          res["rss_mb"]))
    print("bridge fixed cost per call (tiny tensors, one output):")
    for nin, us in overhead():
        print("  %2d inputs: %.1f us" % (nin, us))


if __name__ == "__main__":
    main()
