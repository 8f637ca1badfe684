"""ATen ops the bridge writes in fusejit's op set: indexing, scatters and the
ops that rearrange a tensor (see decomp.py for the rule protocol)."""

RULES = {}
