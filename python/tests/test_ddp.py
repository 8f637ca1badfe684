"""A model compiled with torch.compile(backend="fusejit_host") inside
DistributedDataParallel (gloo, 2 processes on this machine): three training steps give the same gradients
and parameters as eager DDP. PyTorch 2.x; skipped elsewhere."""
import os
import socket

import pytest

torch = pytest.importorskip("torch")
import fusejit.torch as fjt  # noqa: E402

pytestmark = pytest.mark.skipif("fusejit_host" not in fjt.REGISTERED, reason="torch.compile needs PyTorch 2.x")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, out):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import fusejit.torch  # noqa: F401  (registers the backends in this process)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    grads = {}
    sink = []
    fjt._reports.sink = sink
    for kind in ("eager", "fusejit"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                    torch.nn.Linear(32, 4))
        # the model compiled with fusejit, inside DDP
        run = DDP(torch.compile(model, backend="fusejit_host", dynamic=False) if kind == "fusejit" else model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        for step in range(3):
            x = torch.randn(8, 16, generator=g)
            y = torch.randint(0, 4, (8,), generator=g)
            opt.zero_grad()
            F.cross_entropy(run(x), y).backward()
            grads[(kind, step)] = [p.grad.detach().clone() for p in model.parameters()]
            opt.step()
        grads[(kind, "params")] = [p.detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    grads["fused_ops"] = sum(r.fused for r in sink)
    torch.save(grads, os.path.join(out, "rank%d.pt" % rank))


def test_ddp_gradients_match_eager(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    res = [torch.load(tmp_path / ("rank%d.pt" % r)) for r in range(2)]
    for r in res:
        assert r["fused_ops"] > 0  # the compiled steps ran in fusejit
        for key in [k for k in r if k[0] == "eager"]:
            for a, b in zip(r[("fusejit", key[1])], r[key]):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # all-reduced: both ranks hold the same gradients
    for a, b in zip(res[0][("fusejit", 2)], res[1][("fusejit", 2)]):
        torch.testing.assert_close(a, b)
