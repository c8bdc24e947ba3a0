"""Record a new allocation trace (shared/traces format) from a real PyTorch workload:

    python bench/memory/record_torch_trace.py varlen_infer out.trace.gz
    python bench/memory/record_torch_trace.py mlp_train out.trace.gz

Workloads: ``varlen_infer`` — a Transformer encoder serving requests of random batch size
and sequence length (the case where torch's fragmentation is worst); ``mlp_train`` — an MLP
trained with AdamW and gradient accumulation. The trace comes from torch's own
_record_memory_history, so it is exactly what torch's allocator saw.
"""
from __future__ import annotations

import gzip
import random
import sys
import time


def varlen_infer(torch):
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                         batch_first=True), num_layers=6).cuda().half().eval()
    rng = random.Random(0)
    with torch.no_grad():
        for _ in range(200):
            b, s = rng.randint(1, 32), rng.randint(16, 1024)
            x = torch.randn(b, s, 1024, device="cuda", dtype=torch.half)
            y = model(x)
            del x, y


def mlp_train(torch):
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU())
                                  for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for step in range(6):
        for micro in range(4):
            x = torch.randn(256 + 64 * micro, 4096, device="cuda")
            model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    import torch

    work = {"varlen_infer": varlen_infer, "mlp_train": mlp_train}[sys.argv[1]]
    torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python")
    t0 = time.time()
    work(torch)
    torch.cuda.synchronize()
    secs = time.time() - t0
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    ids, lines, next_id = {}, [], 0
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ids[e["addr"]] = next_id
            lines.append(f"a {next_id} {e['size']} {e['stream']}")
            next_id += 1
        elif e["action"] == "free_requested" and e["addr"] in ids:
            lines.append(f"f {ids.pop(e['addr'])}")
    header = (f"# workload={sys.argv[1]} events={len(lines)} "
              f"peak_allocated={torch.cuda.max_memory_allocated()} "
              f"peak_reserved={torch.cuda.max_memory_reserved()} seconds={secs:.2f}")
    with gzip.open(sys.argv[2], "wt") as f:
        f.write(header + "\n" + "\n".join(lines) + "\n")
    print(header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
