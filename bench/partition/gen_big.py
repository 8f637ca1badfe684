#!/usr/bin/env python3
"""Writes a prims graph of N forward nodes (default 6000: a joint graph of
over 10,000 nodes after autodiff) for timing `partition`: a random DAG of
pointwise ops, row reductions and broadcasts over [512,256] f32 values."""
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
random.seed(1)
print("graph @big(%x: f32[512,256], %w: f32[256]) {")
vals = ["x"]
print("  %wb = prims.broadcast_in_dim(%w) {shape=[512,256], broadcast_dims=[1]}")
vals.append("wb")
un = ["tanh", "exp", "sin", "neg", "abs"]
bi = ["add", "mul", "sub"]
for i in range(n):
    r = random.random()
    a = random.choice(vals[-20:])
    if r < 0.45:
        print(f"  %v{i} = prims.{random.choice(un)}(%{a})")
    elif r < 0.9:
        b = random.choice(vals)
        print(f"  %v{i} = prims.{random.choice(bi)}(%{a}, %{b})")
    else:
        print(f"  %s{i} = prims.sum(%{a}) {{dims=[1]}}")
        print(f"  %v{i} = prims.broadcast_in_dim(%s{i}) {{shape=[512,256], broadcast_dims=[0]}}")
    vals.append(f"v{i}")
print(f"  return %{vals[-1]}")
print("}")
