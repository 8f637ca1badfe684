"""ATen ops the bridge writes in fusejit's op set: pointwise functions, losses,
reductions and small linear algebra that fusejit has no single op for (see
decomp.py for the rule protocol)."""

RULES = {}
