"""Record a new allocation trace (shared/traces format) from a real PyTorch workload:

    python bench/memory/record_torch_trace.py varlen_infer out.trace.gz
    python bench/memory/record_torch_trace.py mlp_train out.trace.gz
    python bench/memory/record_torch_trace.py kv_generate out.trace.gz
    python bench/memory/record_torch_trace.py varbatch_train out.trace.gz

Workloads: ``varlen_infer`` — a Transformer encoder serving requests of random batch size
and sequence length (the case where torch's fragmentation is worst); ``mlp_train`` — an MLP
trained with AdamW and gradient accumulation; ``kv_generate`` and ``varbatch_train`` — the
real programs behind synth_trace.py's models of the same names (greedy generation with a KV
cache grown by torch.cat; GPT-style training on a different batch x sequence shape every
step). The trace comes from torch's own
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


def _decoder(torch, d, heads, layers, dtype):
    blocks = torch.nn.ModuleList()
    for _ in range(layers):
        blocks.append(torch.nn.ModuleDict({
            "ln1": torch.nn.LayerNorm(d), "qkv": torch.nn.Linear(d, 3 * d), "o": torch.nn.Linear(d, d),
            "ln2": torch.nn.LayerNorm(d), "up": torch.nn.Linear(d, 4 * d), "down": torch.nn.Linear(4 * d, d)}))
    return blocks.cuda().to(dtype)


def _block(torch, blk, x, heads, cache=None):
    # Pre-norm decoder block; with `cache` (a [k, v] list) the keys and values grow by cat.
    b, n, d = x.shape
    q, k, v = blk["qkv"](blk["ln1"](x)).view(b, n, 3, heads, d // heads).unbind(2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if cache is not None:
        if cache[0] is not None:
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
        cache[0], cache[1] = k, v
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cache is None or n > 1)
    x = x + blk["o"](a.transpose(1, 2).reshape(b, n, d))
    return x + blk["down"](torch.nn.functional.gelu(blk["up"](blk["ln2"](x))))


def kv_generate(torch):
    d, heads, layers, vocab = 2048, 16, 12, 32000
    blocks = _decoder(torch, d, heads, layers, torch.half).eval()
    emb = torch.nn.Embedding(vocab, d).cuda().half()
    rng = random.Random(1)
    with torch.no_grad():
        for _ in range(10):
            b, prompt, gen = rng.randint(1, 16), rng.randint(32, 512), rng.randint(16, 128)
            tokens = torch.randint(0, vocab, (b, prompt), device="cuda")
            caches = [[None, None] for _ in range(layers)]
            for _ in range(gen):
                x = emb(tokens)
                for blk, c in zip(blocks, caches):
                    x = _block(torch, blk, x, heads, c)
                logits = (x[:, -1] @ emb.weight.t()).float()
                tokens = logits.argmax(-1, keepdim=True)
                del x, logits
            del caches, tokens


def varbatch_train(torch):
    d, heads, layers, vocab = 1024, 16, 12, 32000
    blocks = _decoder(torch, d, heads, layers, torch.float)
    emb = torch.nn.Embedding(vocab, d).cuda()
    opt = torch.optim.AdamW(list(blocks.parameters()) + list(emb.parameters()))
    rng = random.Random(2)
    for _ in range(24):
        b, s = rng.randint(4, 16), rng.choice(range(128, 1025, 64))
        ids = torch.randint(0, vocab, (b, s), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = emb(ids)
            for blk in blocks:
                x = _block(torch, blk, x, heads)
            logits = x @ emb.weight.t()
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, logits, loss


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    import torch

    work = {"varlen_infer": varlen_infer, "mlp_train": mlp_train, "kv_generate": kv_generate,
            "varbatch_train": varbatch_train}[sys.argv[1]]
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
