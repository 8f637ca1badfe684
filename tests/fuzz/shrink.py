#!/usr/bin/python3
"""Shrink a failing graph to a minimal .fj while the failure persists.

    shrink.py FILE.fj --executor=host [--train] [--kind=crash|mismatch|error]
              [--bin DIR] [-o OUT.fj]

FILE is one graph @main as gen_graph.py writes it (every node with its
written type, one result a line; other graphs work when their nodes carry
types). The failure is judged as run_fuzz.py judges it: `crash` (a signal,
a sanitizer report, an exit code other than 0 and 1), `mismatch`
(--check=f64 fails, or the executor's .npy files differ grossly from
aten's), `error` (exit 1 with the same first error message, the place left
out, while aten runs the graph). Without --kind the kind the original shows
is kept. Every candidate must still verify (fusejit-opt FILE).

Steps, repeated until none helps: drop returned values; replace a node by a
parameter of its type (the nodes only it used go too); drop parameters no
one uses; shrink sizes (every occurrence of a size in types and attributes
at once: to 1, 2, or half).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_fuzz  # noqa: E402

NODE = re.compile(r"^\s*%([\w.]+) = (\S+)\((.*?)\)(?: \{(.*)\})?(?: : (\w+\[[^\]]*\]))?\s*$")


def split_top(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


class Graph:
    def __init__(self, text):
        lines = text.splitlines()
        self.head = [ln for ln in lines if ln.startswith("//")]
        sig = next(ln for ln in lines if ln.startswith("graph "))
        m = re.match(r"graph @(\S+)\((.*)\) \{$", sig)
        self.name = m.group(1)
        self.params = split_top(m.group(2))
        body = lines[lines.index(sig) + 1:]
        self.nodes = [ln for ln in body if ln.strip() and not ln.strip().startswith(("return", "}", "//"))]
        ret = next(ln for ln in body if ln.strip().startswith("return"))
        self.rets = [x.strip() for x in ret.strip()[len("return"):].split(",") if x.strip()]

    def text(self):
        return "\n".join(self.head + ["graph @%s(%s) {" % (self.name, ", ".join(self.params))] +
                         self.nodes + ["  return " + ", ".join(self.rets), "}"]) + "\n"

    def copy(self):
        return Graph(self.text())

    def dce(self):
        """Drop nodes and parameters nothing uses."""
        while True:
            used = set(re.findall(r"%([\w.]+)", " ".join(self.rets)))
            for ln in self.nodes:
                rhs = ln.split("=", 1)[1]
                used |= set(re.findall(r"%([\w.]+)", rhs))
            keep = []
            for ln in self.nodes:
                defs = re.findall(r"%([\w.]+)", ln.split("=", 1)[0])
                if any(d in used for d in defs):
                    keep.append(ln)
            params = [p for p in self.params if p.split(":")[0].strip()[1:] in used]
            if len(keep) == len(self.nodes) and len(params) == len(self.params):
                return
            self.nodes, self.params = keep, params


class Shrinker:
    def __init__(self, a):
        self.a = a
        self.opt = run_fuzz.find_tool(a.bin, "fusejit-opt")
        self.run = run_fuzz.find_tool(a.bin, "fusejit-run")
        self.tries = 0
        self.kind = a.kind
        self.msg = None

    def outcome(self, text):
        """The failure kind of text (None when it passes or does not verify)
        and the first error line, its place left out."""
        self.tries += 1
        tmp = tempfile.mkdtemp(prefix="fjshrink.")
        try:
            path = os.path.join(tmp, "g.fj")
            with open(path, "w") as f:
                f.write(text)
            if subprocess.run([self.opt, path], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode != 0:
                return None, None
            dims = re.findall(r"// DIMS: (\w+)=(\d+)", text)
            res = {}
            for ex in ["aten", self.a.executor] if self.a.executor != "aten" else ["aten"]:
                d = os.path.join(tmp, ex)
                cmd = [self.run, path, "--executor=" + ex, "--check=f64", "--json", "--output-dir=" + d]
                for kv in dims:
                    cmd += ["--dim", "%s=%s" % kv]
                if self.a.train:
                    cmd.append("--train")
                env = dict(os.environ)
                if ex == "nvptx":
                    env["FUSEJIT_NVPTX_DEVICE"] = "emulator"
                res[ex] = run_fuzz.run(cmd, env, self.a.timeout) + (d,)
            rc, out, err, _, d = res[self.a.executor]
            if rc is None:
                return "timeout", None
            if rc not in (0, 1) or run_fuzz.SANITIZER.search(err):
                return "crash", None
            if rc == 1:
                if "FAIL" in out or '"f64_err"' in out:
                    return "mismatch", None
                first = re.sub(r"^\S+:\d+:\d+: ", "", (err.strip().splitlines() or [""])[0])
                if res["aten"][0] == 0 or self.a.executor == "aten":
                    return "error", first
                return None, None
            if self.a.executor != "aten" and res["aten"][0] == 0:
                import json
                try:
                    outs = json.loads(out)["outputs"]
                except (ValueError, KeyError):
                    return None, None
                if run_fuzz.compare_dirs(res["aten"][4], d, outs):
                    return "mismatch", None
            return None, None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def fails(self, g):
        kind, msg = self.outcome(g.text())
        return kind == self.kind and (kind != "error" or msg == self.msg)

    def shrink(self, g):
        progress = True
        while progress:
            progress = False
            # 1. returned values
            i = 0
            while len(g.rets) > 1 and i < len(g.rets):
                c = g.copy()
                del c.rets[i]
                c.dce()
                if self.fails(c):
                    g, progress = c, True
                else:
                    i += 1
            # 2. a node replaced by a parameter of its type, from the end
            i = len(g.nodes) - 1
            while i >= 0:
                if i >= len(g.nodes):
                    i = len(g.nodes) - 1
                    continue
                m = NODE.match(g.nodes[i])
                if m and m.group(5):
                    c = g.copy()
                    del c.nodes[i]
                    c.params.append("%%%s: %s" % (m.group(1), m.group(5)))
                    c.dce()
                    if self.fails(c):
                        g, progress = c, True
                i -= 1
            # 3. sizes, all occurrences of one at once
            sizes = sorted({int(x) for t in re.findall(r"\w+\[([^\]]*)\]", g.text())
                            for x in re.findall(r"\b\d+\b", t) if int(x) > 1}, reverse=True)
            for s in sizes:
                for to in sorted({1, 2, s // 2} - {s}):
                    if to >= s:
                        continue
                    text = re.sub(r"(?<![\w.])%d(?![\w.])" % s, str(to), "\n".join(
                        ln for ln in g.text().splitlines() if not ln.startswith("//")))
                    c = Graph("\n".join(g.head) + "\n" + text)
                    if self.fails(c):
                        g, progress = c, True
                        break
        return g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--executor", default="host")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--kind", choices=["crash", "mismatch", "error", "timeout"])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("-o", dest="out")
    a = ap.parse_args()
    sh = Shrinker(a)
    with open(a.file) as f:
        g = Graph(f.read())
    kind, msg = sh.outcome(g.text())
    if kind is None:
        sys.exit("shrink: %s does not fail on %s" % (a.file, a.executor))
    if a.kind and kind != a.kind:
        sys.exit("shrink: %s fails as %s, not %s" % (a.file, kind, a.kind))
    sh.kind, sh.msg = kind, msg
    n0 = len(g.nodes)
    g = sh.shrink(g)
    text = g.text()
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print("shrink: %s, %d -> %d nodes, %d runs" % (kind, n0, len(g.nodes), sh.tries), file=sys.stderr)


if __name__ == "__main__":
    main()
