"""Allocation traces of model workloads, written in the shared/traces format without a GPU:

    python3 bench/memory/synth_trace.py kv_generate out.trace.gz
    python3 bench/memory/synth_trace.py varbatch_train out.trace.gz

Each workload replays, tensor by tensor, the allocations and frees that an eager PyTorch
implementation makes (every op output is a new tensor, freed when its last use is done; the
KV cache grows by torch.cat; autograd keeps the saved activations until the backward pass of
their layer). They are models of those programs, not recordings: the header says
``synthetic=1`` and its peak_reserved is 0 (no allocator ran). Record the real programs on a
GPU with record_torch_trace.py (workloads of the same names; not recorded yet) to check
them against these.

  kv_generate     decoder-only LM (12 layers, d_model 2048, fp16) serving 10 batches of
                  1-16 prompts of 32-512 tokens, generating 16-128 tokens each: the KV cache
                  of every layer is re-allocated one token longer at each step.
  varbatch_train  GPT-style training (12 layers, d_model 1024, bf16 activations, fp32
                  weights and AdamW) on 24 steps of batch 4-16 x sequence 128-1024
                  (dynamic padding: every step has a different shape).
"""
from __future__ import annotations

import gzip
import random
import sys


class Tape:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.live: dict[int, int] = {}
        self.next_id = 0
        self.cur = 0
        self.peak = 0

    def alloc(self, nbytes: int) -> int:
        nbytes = max(int(nbytes), 1)
        i = self.next_id
        self.next_id += 1
        self.live[i] = nbytes
        self.cur += nbytes
        self.peak = max(self.peak, self.cur)
        self.lines.append(f"a {i} {nbytes} 0")
        return i

    def free(self, *ids: int) -> None:
        for i in ids:
            self.cur -= self.live.pop(i)
            self.lines.append(f"f {i}")


def kv_generate(t: Tape) -> None:
    d, heads, layers, vocab, half = 2048, 16, 12, 32000, 2
    rng = random.Random(1)
    weights = [t.alloc(vocab * d * half)]
    for _ in range(layers):
        weights += [t.alloc(3 * d * d * half), t.alloc(d * d * half), t.alloc(4 * d * d * half),
                    t.alloc(4 * d * d * half), t.alloc(4 * d * half)]

    def layer(x: int, b: int, n: int, ctx: int, cache: list[int], li: int) -> int:
        # n new tokens attend to ctx cached + new tokens.
        h = t.alloc(b * n * d * half)                      # layer norm
        qkv = t.alloc(3 * b * n * d * half)
        t.free(h)
        k_new = t.alloc(b * (ctx + n) * d * half)          # torch.cat((k_cache, k), dim=-2)
        v_new = t.alloc(b * (ctx + n) * d * half)
        if cache[2 * li] >= 0:
            t.free(cache[2 * li], cache[2 * li + 1])
        cache[2 * li], cache[2 * li + 1] = k_new, v_new
        scores = t.alloc(b * heads * n * (ctx + n) * half)
        probs = t.alloc(b * heads * n * (ctx + n) * half)   # softmax
        t.free(scores)
        attn = t.alloc(b * n * d * half)
        t.free(probs, qkv)
        o = t.alloc(b * n * d * half)
        t.free(attn)
        x2 = t.alloc(b * n * d * half)                     # residual
        t.free(o, x)
        h2 = t.alloc(b * n * d * half)
        m = t.alloc(4 * b * n * d * half)
        t.free(h2)
        g = t.alloc(4 * b * n * d * half)                  # gelu
        t.free(m)
        y = t.alloc(b * n * d * half)
        t.free(g)
        x3 = t.alloc(b * n * d * half)
        t.free(y, x2)
        return x3

    for _ in range(10):
        b, prompt, gen = rng.randint(1, 16), rng.randint(32, 512), rng.randint(16, 128)
        cache = [-1] * (2 * layers)
        tokens = t.alloc(b * prompt * 8)
        ctx, n = 0, prompt
        for step in range(gen):
            x = t.alloc(b * n * d * half)                  # embedding
            for li in range(layers):
                x = layer(x, b, n, ctx, cache, li)
            last = t.alloc(b * d * half)                   # hidden state of the last token
            t.free(x)
            logits = t.alloc(b * vocab * 4)                # fp32 logits
            t.free(last)
            nxt = t.alloc(b * 8)                           # sampled token ids
            t.free(logits)
            t.free(nxt)
            ctx += n
            n = 1
        t.free(tokens, *cache)
    t.free(*weights)


def varbatch_train(t: Tape) -> None:
    d, heads, layers, vocab, bf16, f32 = 1024, 16, 12, 32000, 2, 4
    rng = random.Random(2)
    shapes = [d * vocab]
    for _ in range(layers):
        shapes += [3 * d * d, d * d, 4 * d * d, 4 * d * d, 4 * d]
    params = [t.alloc(n * f32) for n in shapes]
    adam: list[int] = []
    for step in range(24):
        b, s = rng.randint(4, 16), rng.choice(range(128, 1025, 64))
        bsd = b * s * d
        ids = t.alloc(b * s * 8)
        x = t.alloc(bsd * bf16)
        saved: list[list[int]] = []
        for _ in range(layers):
            h = t.alloc(bsd * bf16)
            qkv = t.alloc(3 * bsd * bf16)
            probs = t.alloc(b * heads * s * s * bf16)
            attn = t.alloc(bsd * bf16)
            o = t.alloc(bsd * bf16)
            x2 = t.alloc(bsd * bf16)
            h2 = t.alloc(bsd * bf16)
            m = t.alloc(4 * bsd * bf16)
            g = t.alloc(4 * bsd * bf16)
            y = t.alloc(bsd * bf16)
            x3 = t.alloc(bsd * bf16)
            saved.append([h, qkv, probs, attn, o, x2, h2, m, g, y, x])
            x = x3
        logits = t.alloc(b * s * vocab * bf16)
        loss_tmp = t.alloc(b * s * vocab * f32)            # log_softmax in fp32
        t.free(logits)
        loss = t.alloc(4)
        grad_logits = t.alloc(b * s * vocab * bf16)
        t.free(loss_tmp)
        grads = [t.alloc(shapes[0] * f32)]
        gx = t.alloc(bsd * bf16)
        t.free(grad_logits, x)
        for li in reversed(range(layers)):
            h, qkv, probs, attn, o, x2, h2, m, g, y, xin = saved.pop()
            gy = t.alloc(bsd * bf16)
            grads += [t.alloc(4 * d * d * f32)]
            gg = t.alloc(4 * bsd * bf16)
            t.free(gy, y, g)
            gm = t.alloc(4 * bsd * bf16)
            t.free(gg, m)
            grads += [t.alloc(4 * d * d * f32), t.alloc(4 * d * f32)]
            gh2 = t.alloc(bsd * bf16)
            t.free(gm, h2)
            gx2 = t.alloc(bsd * bf16)
            t.free(gh2, gx, x2)
            go = t.alloc(bsd * bf16)
            grads += [t.alloc(d * d * f32)]
            t.free(o)
            gattn = t.alloc(bsd * bf16)
            t.free(go, attn)
            gprobs = t.alloc(b * heads * s * s * bf16)
            gscores = t.alloc(b * heads * s * s * bf16)
            t.free(gprobs, probs)
            gqkv = t.alloc(3 * bsd * bf16)
            t.free(gscores, gattn, qkv)
            grads += [t.alloc(3 * d * d * f32)]
            gh = t.alloc(bsd * bf16)
            t.free(gqkv, h)
            gxin = t.alloc(bsd * bf16)
            t.free(gh, gx2, xin)
            gx = gxin
        t.free(gx, ids, loss)
        # AdamW (foreach): state on the first step, then per-parameter temporaries.
        if not adam:
            adam = [t.alloc(n * f32) for n in shapes for _ in range(2)]
        for n in shapes:
            tmp1, tmp2 = t.alloc(n * f32), t.alloc(n * f32)
            t.free(tmp1, tmp2)
        t.free(*grads)                                     # zero_grad(set_to_none=True)
    t.free(*adam, *params)


WORKLOADS = {"kv_generate": kv_generate, "varbatch_train": varbatch_train}


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in WORKLOADS:
        print(__doc__)
        return 2
    t = Tape()
    WORKLOADS[sys.argv[1]](t)
    allocs = sum(1 for line in t.lines if line[0] == "a")
    header = (f"# workload={sys.argv[1]} events={len(t.lines)} peak_allocated={t.peak} "
              f"peak_reserved=0 seconds=0 synthetic=1 allocs={allocs}\n")
    with gzip.open(sys.argv[2], "wt") as f:
        f.write(header)
        f.write("\n".join(t.lines) + "\n")
    print(header.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
