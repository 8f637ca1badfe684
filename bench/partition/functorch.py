#!/usr/bin/python3
"""What functorch's min-cut partitioner (PyTorch 1.13, functorch.compile) saves
for backward on the bench/partition functions, at the same shapes (f32).

Run with Debian's /usr/bin/python3. For each function, aot_function traces the
joint graph and partitions it with min_cut_rematerialization_partition (and,
for reference, default_partition); the forward graph's extra outputs are the
saved values. Inputs are meta tensors when functorch accepts them (nothing is
allocated), else real tensors. Prints one line per function:
  NAME  mincut: N values, B bytes  default: N values, B bytes
"""
import math
import os
import sys

# this file is named functorch.py: keep its folder from shadowing the package
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import torch
import torch.nn.functional as F
from functorch.compile import aot_function, default_partition, min_cut_rematerialization_partition


def size_of(node):
    tm = node.meta.get("tensor_meta")
    if tm is None:
        return 0
    return math.prod(tm.shape) * torch.empty((), dtype=tm.dtype).element_size()


def saved_of(fn, args, partition):
    rec = {}

    def fw_compiler(gm, example_inputs):
        outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        rec["fw_outs"] = outs
        return gm

    def bw_compiler(gm, example_inputs):
        return gm

    f = aot_function(fn, fw_compiler=fw_compiler, bw_compiler=bw_compiler, partition_fn=partition)
    out = f(*args)
    # every function returns one tensor: the forward's other outputs are saved
    saved = list(rec["fw_outs"][1:])
    return len(saved), sum(size_of(n) for n in saved)


def gelu(x):
    return F.gelu(x, approximate="tanh")


def silu(x):
    return F.silu(x)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def softmax(x):
    return torch.softmax(x, -1)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def ln_residual(x, bias, res, w, b):
    return F.layer_norm(x + bias + res, (x.shape[-1],), w, b, 1e-5)


def mlp(x, lw, lb, w1, b1, w2, b2):
    h = F.layer_norm(x, (x.shape[-1],), lw, lb, 1e-5)
    h = F.gelu(F.linear(h, w1, b1), approximate="tanh")
    return F.linear(h, w2, b2) + x


def attention(q, k, v):
    return torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8.0, -1) @ v


def cross_entropy(x, t):
    return F.nll_loss(F.log_softmax(x, -1), t)


def chain(x):
    return torch.sin((torch.sigmoid(torch.log1p(torch.exp(torch.tanh(x * 2 + 1) * x))) - 0.5) * x)


CASES = [
    ("gelu", gelu, [(8192, 4096)]),
    ("silu", silu, [(8192, 4096)]),
    ("layer_norm", layer_norm, [(8192, 4096), (4096,), (4096,)]),
    ("softmax", softmax, [(8192, 4096)]),
    ("rmsnorm", rmsnorm, [(8192, 4096), (4096,)]),
    ("ln_residual", ln_residual, [(8192, 4096), (4096,), (8192, 4096), (4096,), (4096,)]),
    ("mlp", mlp, [(2048, 1024), (1024,), (1024,), (4096, 1024), (4096,), (1024, 4096), (1024,)]),
    ("attention", attention, [(8, 512, 64)] * 3),
    ("cross_entropy", cross_entropy, [(4096, 32000), "targets"]),
    ("chain", chain, [(8192, 4096)]),
]


def make_args(shapes, device):
    args = []
    for s in shapes:
        if s == "targets":
            t = torch.randint(0, 32000, (4096,), dtype=torch.int64) if device == "cpu" else \
                torch.empty((4096,), dtype=torch.int64, device=device)
            args.append(t)
        else:
            args.append(torch.randn(s, device=device, requires_grad=True) if device == "cpu" else
                        torch.empty(s, device=device, requires_grad=True))
    return args


def main():
    only = sys.argv[1:]
    for name, fn, shapes in CASES:
        if only and name not in only:
            continue
        res = []
        for part in (min_cut_rematerialization_partition, default_partition):
            try:
                r = saved_of(fn, make_args(shapes, "meta"), part)
            except Exception:
                r = saved_of(fn, make_args(shapes, "cpu"), part)
            res.append(r)
        print("%-14s mincut: %d values, %d bytes  default: %d values, %d bytes" %
              (name, res[0][0], res[0][1], res[1][0], res[1][1]), flush=True)


if __name__ == "__main__":
    main()
