"""Capability partitioning of an FX graph: the nodes fusejit supports are
grouped into maximal regions that fusejit compiles; every other node stays
the original ATen call, run by PyTorch between them.

Algorithm (one pass in topological order, deterministic): a supported node
joins the region of its supported producers, merging their regions, when no
path leaves one of them and comes back (that would be a cycle between
regions); else it joins the first one it can, else opens a new region. Per
node, `up` is the set of regions it depends on and `taint` the regions that
reach it through a path that leaves them; a region may take a node, or merge
with another, only when none of the regions involved taints the result. A
getitem of a multi-output node follows its producer. Regions that compute
nothing (only views and getitems: a lone reshape) are left to PyTorch, as a
kernel launch would gain nothing there.

Cost: O(nodes * regions) set work; the graphs torch.compile hands over have
at most a few thousand nodes.
"""
import heapq
import operator

import torch

# ATen ops that only describe another tensor's data (a region made of them
# alone gains nothing from a kernel). Copies and conversions (clone, _to_copy,
# lift_fresh_copy) move data: they are work fusejit does, even alone.
VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "t", "transpose", "squeeze",
    "unsqueeze", "alias", "detach", "slice", "select", "as_strided", "split",
    "split_with_sizes", "unbind", "chunk", "view_as", "expand_as", "flatten", "unflatten", "narrow",
}


def is_getitem(n):
    return n.op == "call_function" and n.target is operator.getitem


def op_name(n):
    """'aten.add' for an ATen OpOverload node, else the target's name."""
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        s = t._schema.name
        return s.replace("::", ".")
    return getattr(t, "fusejit_op", None) or getattr(t, "__name__", str(t))


def is_view(n):
    if is_getitem(n):
        return True
    name = op_name(n)
    return name.startswith("aten.") and name[5:] in VIEW_OPS


class _Regions:
    def __init__(self):
        self.parent = []
        self.members = []
        self.taint = []  # per region: regions that reach one of its members through a path leaving them

    def new(self):
        self.parent.append(len(self.parent))
        self.members.append([])
        self.taint.append(set())
        return len(self.parent) - 1

    def find(self, r):
        while self.parent[r] != r:
            self.parent[r] = self.parent[self.parent[r]]
            r = self.parent[r]
        return r

    def norm(self, s):
        return {self.find(r) for r in s}

    def merge(self, rs):
        root = rs[0]
        for r in rs[1:]:
            self.parent[r] = root
            self.members[root].extend(self.members[r])
            self.taint[root] |= self.taint[r]
            self.members[r] = []
            self.taint[r] = set()
        return root


def propose(graph, supported):
    """Regions of graph's call_function nodes: a list of node lists, each in
    graph order. supported(node) -> bool."""
    R = _Regions()
    region, up, taint = {}, {}, {}
    for n in graph.nodes:
        if n.op != "call_function":
            up[n], taint[n] = set(), set()
            continue
        ins = n.all_input_nodes
        ok = supported(n) if not is_getitem(n) else (ins[0] in region)
        pid = None
        if ok:
            cands = []
            for o in ins:
                if o in region:
                    r = R.find(region[o])
                    if r not in cands:
                        cands.append(r)

            def clean(ms):
                t = set()
                for o in ins:
                    t |= taint[o]
                    r = R.find(region[o]) if o in region else None
                    if r is None or r not in ms:
                        t |= up[o]
                        if r is not None:
                            t.add(r)
                for m in ms:
                    t |= R.taint[m]
                return not (R.norm(t) & set(ms))

            if cands and clean(cands):
                pid = R.merge(cands)
            else:
                for c in cands:
                    if clean([c]):
                        pid = c
                        break
            if pid is None:
                pid = R.new()
        u, t = set(), set()
        for o in ins:
            u |= up[o]
            t |= taint[o]
            r = R.find(region[o]) if o in region else None
            if r is not None:
                u.add(r)
            if r is None or r != pid:
                t |= up[o]
                if r is not None:
                    t.add(r)
        up[n], taint[n] = R.norm(u), R.norm(t)
        if pid is not None:
            region[n] = pid
            R.members[pid].append(n)
            R.taint[pid] |= taint[n]
    order = {n: i for i, n in enumerate(graph.nodes)}
    regions = []
    for r in range(len(R.parent)):
        ms = R.members[r] if R.find(r) == r else []
        if ms and not all(is_view(m) for m in ms):
            regions.append(sorted(ms, key=order.__getitem__))
    regions.sort(key=lambda ms: order[ms[0]])
    return regions


def boundary(region, graph):
    """(inputs, outputs) of a region: the nodes it reads from outside, in first
    use, and its members used outside it or returned, in graph order."""
    inside = set(region)
    inputs, seen = [], set()
    for n in region:
        for o in n.all_input_nodes:
            if isinstance(o.meta.get("val"), getattr(torch, "SymInt", ())):
                continue  # a size: written into the region's text as its expression
            if o not in inside and o not in seen:
                seen.add(o)
                inputs.append(o)
    outputs = [n for n in region if any(u not in inside for u in n.users)]
    return inputs, outputs


def rebuild(gm, regions, make_call):
    """A GraphModule where each region is one call: make_call(region, inputs,
    outputs) returns a callable(*input_tensors) -> list of output tensors.
    Regions and the other nodes are placed in a topological order of the
    region graph (Kahn's, ties by first node)."""
    g = gm.graph
    nodes = list(g.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    unit_of = {}
    units = []
    for r in regions:
        for n in r:
            unit_of[n] = len(units)
        units.append(("region", r))
    for n in nodes:
        if n not in unit_of:
            unit_of[n] = len(units)
            units.append(("node", [n]))
    succ = [set() for _ in units]
    indeg = [0] * len(units)
    for n in nodes:
        for o in n.all_input_nodes:
            a, b = unit_of[o], unit_of[n]
            if a != b and b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    first = [min(order[n] for n in u[1]) for u in units]
    heap = [(first[i], i) for i in range(len(units)) if indeg[i] == 0]
    heapq.heapify(heap)
    ng = torch.fx.Graph()
    env = {}
    done = 0
    while heap:
        _, i = heapq.heappop(heap)
        done += 1
        kind, ms = units[i]
        if kind == "node":
            n = ms[0]
            env[n] = ng.node_copy(n, lambda x: env[x])
        else:
            inputs, outputs = boundary(ms, g)
            fn = make_call(ms, inputs, outputs)
            # a call may also take sizes (symbols its inputs do not give), after the tensors
            call = ng.call_function(fn, tuple(env[x] for x in list(inputs) + list(getattr(fn, "size_inputs", ()))))
            for k, o in enumerate(outputs):
                env[o] = ng.call_function(operator.getitem, (call, k))
                env[o].meta = dict(o.meta)
        for j in sorted(succ[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (first[j], j))
    if done != len(units):
        raise RuntimeError("fusejit: the regions of a graph form a cycle (a bug in fusejit.partition)")
    return torch.fx.GraphModule(gm, ng)
