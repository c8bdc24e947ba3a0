"""Record allocation traces (shared/traces format) from real PyTorch workloads on a GPU:

    python bench/memory/record_torch_trace.py NAME out.trace.gz     # one workload
    python bench/memory/record_torch_trace.py --all OUTDIR          # every workload, one process
        [--only a,b,...] [--budget SECONDS] [--timeout SECONDS] [--total SECONDS]
    python bench/memory/record_torch_trace.py --list                # names, split, needs

The trace comes from torch's own _record_memory_history, so it is exactly what torch's
default caching allocator saw; the header carries torch's own peaks (format: README.md in
shared/traces). Models are built from config classes with random weights: no downloads,
no network (HF_HUB_OFFLINE is set before transformers is imported).

Each workload runs for at most --budget seconds of steps (its loop stops early, the trace is
still written) and is abandoned after --timeout seconds (SIGALRM; that one is skipped with a
message); --total skips the workloads that would start too late to finish in time (so a
wrapper's own time limit is never hit). A workload whose package (transformers, timm,
torchvision) is missing is skipped with a message, never an error. ``--all`` prints one line per trace:
``SPLIT NAME <header>``.

The issue-27 recording (one device-tool call, ~200 s; $OUT returns at most 8 files, hence
the tar in 15 MB pieces):
    set -o pipefail; export PYTHONUNBUFFERED=1; mkdir -p /tmp/tr; timeout 570 python3 \
      bench/memory/record_torch_trace.py --all /tmp/tr --budget 12 --timeout 45 --total 520 \
      2>&1 | tee $OUT/record.log; tar cf - -C /tmp/tr . | split -b 15M -d - $OUT/traces.tar.

SPLIT assigns each workload to the half the allocator policy is designed on ("design") or
the half it is only measured on ("holdout"). It was fixed before any of these traces was
recorded, alternating by kind so that both halves hold training, inference/generation, MoE,
encoder-decoder and vision. Never tune the policy on a holdout trace.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import os
import random
import signal
import sys
import threading
import time

# Recorded before (traces in bench/memory/traces and shared/traces) = design data.
# gc = gradient checkpointing, vl = variable-length batches.
SPLIT = {
    # the original four (varlen_infer and mlp_train already recorded; kv_generate and
    # varbatch_train exist only as synthetic models in the repository)
    "varlen_infer": "design", "mlp_train": "design",
    "kv_generate": "design", "varbatch_train": "design",
    # LM training, vl + gc
    "gpt2_ckpt_train": "design", "llama_ckpt_train": "holdout",
    # LM training, vl, masked LM with fp16 GradScaler
    "bert_varlen_train": "holdout",
    # MoE training
    "mixtral_train": "design", "qwen2moe_train": "holdout",
    # encoder-decoder training
    "t5_train": "design", "bart_train": "holdout",
    # generation with a growing KV cache (transformers generate)
    "llama_generate": "design", "gpt2_generate": "holdout",
    # vision, mixed resolution
    "resnet_multires_train": "design", "convnext_multires_train": "holdout",
    # vision, bf16 autocast with eval passes
    "swin_bf16_train": "design", "efficientnet_bf16_train": "holdout",
    # inference server: concurrent variable-length requests on several streams
    "server_bert_threads": "design", "server_gpt2_streams": "holdout",
    # diffusion-like UNet with EMA weights
    "unet_train": "design",
}


class Budget:
    """Soft time limit of one workload: loops call over() and stop early."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def over(self) -> bool:
        return time.monotonic() >= self.end


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _build(torch, cls, config, dtype=None):
    # Built directly on the GPU (as `with torch.device("cuda")` users do): random init, fast.
    with torch.device("cuda"):
        model = cls(config)
    return model.to(dtype) if dtype is not None else model


def _padded_ids(torch, rng, vocab, b, s, left=False):
    """Random ids of shape (b, s) with a ragged attention mask (dynamic padding)."""
    ids = torch.randint(3, vocab, (b, s), device="cuda")
    lens = torch.tensor([rng.randint(max(1, s // 2), s) for _ in range(b)], device="cuda")
    pos = torch.arange(s, device="cuda")
    mask = (pos.flip(0)[None, :] < lens[:, None]) if left else (pos[None, :] < lens[:, None])
    return ids, mask.long()


def _autocast(torch, dtype):
    return torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext()


# ------------------------------------------------------------------ the original workloads

def varlen_infer(torch, budget):
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                         batch_first=True), num_layers=6).cuda().half().eval()
    rng = random.Random(0)
    with torch.no_grad():
        for _ in range(200):
            if budget.over():
                break
            b, s = rng.randint(1, 32), rng.randint(16, 1024)
            x = torch.randn(b, s, 1024, device="cuda", dtype=torch.half)
            y = model(x)
            del x, y


def mlp_train(torch, budget):
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU())
                                  for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for step in range(6):
        if budget.over():
            break
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


def kv_generate(torch, budget):
    d, heads, layers, vocab = 2048, 16, 12, 32000
    blocks = _decoder(torch, d, heads, layers, torch.half).eval()
    emb = torch.nn.Embedding(vocab, d).cuda().half()
    rng = random.Random(1)
    with torch.no_grad():
        for _ in range(10):
            if budget.over():
                break
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


def varbatch_train(torch, budget):
    d, heads, layers, vocab = 1024, 16, 12, 32000
    blocks = _decoder(torch, d, heads, layers, torch.float)
    emb = torch.nn.Embedding(vocab, d).cuda()
    opt = torch.optim.AdamW(list(blocks.parameters()) + list(emb.parameters()))
    rng = random.Random(2)
    for _ in range(24):
        if budget.over():
            break
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


# ------------------------------------------------------------------ transformers: training

def _lm_train(torch, budget, model, vocab, rng, steps, b_range, s_range, accum=1, dtype=None,
              scaler=None, mlm=False):
    """Causal-LM (or masked-LM) training with a new (batch, length) every micro-step."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    for _ in range(steps):
        if budget.over():
            break
        for _ in range(accum):
            b, s = rng.randint(*b_range), rng.choice(range(s_range[0], s_range[1] + 1, 8))
            ids, mask = _padded_ids(torch, rng, vocab, b, s)
            if mlm:
                labels = ids.masked_fill(torch.rand(ids.shape, device="cuda") > 0.15, -100)
            else:
                labels = ids.masked_fill(mask == 0, -100)
            with _autocast(torch, dtype):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / accum
            (scaler.scale(loss) if scaler else loss).backward()
            del ids, mask, labels, loss
        if scaler:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)


def gpt2_ckpt_train(torch, budget):
    tf = _transformers()
    cfg = tf.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                        use_cache=False)
    model = _build(torch, tf.GPT2LMHeadModel, cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _lm_train(torch, budget, model, cfg.vocab_size, random.Random(10), steps=12, b_range=(2, 8),
              s_range=(128, 1024), accum=2)


def llama_ckpt_train(torch, budget):
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=8,
                         max_position_embeddings=2048, use_cache=False)
    model = _build(torch, tf.LlamaForCausalLM, cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _lm_train(torch, budget, model, cfg.vocab_size, random.Random(11), steps=12, b_range=(2, 8),
              s_range=(256, 2048), accum=2, dtype=torch.bfloat16)


def bert_varlen_train(torch, budget):
    tf = _transformers()
    cfg = tf.BertConfig()  # bert-base shape
    model = _build(torch, tf.BertForMaskedLM, cfg)
    _lm_train(torch, budget, model, cfg.vocab_size, random.Random(12), steps=20, b_range=(8, 32),
              s_range=(32, 512), dtype=torch.float16, scaler=torch.amp.GradScaler("cuda"), mlm=True)


def mixtral_train(torch, budget):
    tf = _transformers()
    cfg = tf.MixtralConfig(vocab_size=32000, hidden_size=768, intermediate_size=1536,
                           num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4,
                           num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048,
                           output_router_logits=True, router_aux_loss_coef=0.01, use_cache=False)
    model = _build(torch, tf.MixtralForCausalLM, cfg)
    _lm_train(torch, budget, model, cfg.vocab_size, random.Random(13), steps=12, b_range=(2, 8),
              s_range=(128, 1024), accum=2, dtype=torch.bfloat16)


def qwen2moe_train(torch, budget):
    tf = _transformers()
    cfg = tf.Qwen2MoeConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                            moe_intermediate_size=512, shared_expert_intermediate_size=1536,
                            num_experts=16, num_experts_per_tok=4, num_hidden_layers=6,
                            num_attention_heads=12, num_key_value_heads=4,
                            max_position_embeddings=2048, output_router_logits=True,
                            use_cache=False)
    model = _build(torch, tf.Qwen2MoeForCausalLM, cfg)
    _lm_train(torch, budget, model, cfg.vocab_size, random.Random(14), steps=12, b_range=(2, 8),
              s_range=(128, 1024), accum=2, dtype=torch.bfloat16)


def _seq2seq_train(torch, budget, model, vocab, rng, steps, b_range, src_range, tgt_range, dtype):
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        if budget.over():
            break
        b = rng.randint(*b_range)
        ids, mask = _padded_ids(torch, rng, vocab, b, rng.randint(*src_range))
        labels, lmask = _padded_ids(torch, rng, vocab, b, rng.randint(*tgt_range))
        labels = labels.masked_fill(lmask == 0, -100)
        with _autocast(torch, dtype):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, mask, labels, lmask, loss


def t5_train(torch, budget):
    tf = _transformers()
    cfg = tf.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                      num_decoder_layers=6, num_heads=8, decoder_start_token_id=0, pad_token_id=0)
    model = _build(torch, tf.T5ForConditionalGeneration, cfg)
    _seq2seq_train(torch, budget, model, cfg.vocab_size, random.Random(15), steps=30,
                   b_range=(8, 32), src_range=(64, 512), tgt_range=(16, 128), dtype=None)


def bart_train(torch, budget):
    tf = _transformers()
    cfg = tf.BartConfig(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=12, decoder_attention_heads=12,
                        encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024)
    model = _build(torch, tf.BartForConditionalGeneration, cfg)
    _seq2seq_train(torch, budget, model, cfg.vocab_size, random.Random(16), steps=30,
                   b_range=(4, 24), src_range=(64, 768), tgt_range=(16, 256), dtype=torch.bfloat16)


# ------------------------------------------------------------------ transformers: generation

def _generate(torch, budget, model, vocab, rng, rounds, b_range, prompt_range, new_range, sample):
    model.eval()
    gc_ = model.generation_config
    gc_.pad_token_id, gc_.eos_token_id = 0, None  # random weights: never stop early
    with torch.no_grad():
        for _ in range(rounds):
            if budget.over():
                break
            ids, mask = _padded_ids(torch, rng, vocab, rng.randint(*b_range),
                                    rng.randint(*prompt_range), left=True)
            n = rng.randint(*new_range)
            kw = dict(do_sample=True, top_k=50) if sample else dict(do_sample=False)
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                                 min_new_tokens=n, **kw)
            del ids, mask, out


def llama_generate(torch, budget):
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                         max_position_embeddings=2048)
    model = _build(torch, tf.LlamaForCausalLM, cfg, torch.bfloat16)
    _generate(torch, budget, model, cfg.vocab_size, random.Random(20), rounds=16, b_range=(1, 16),
              prompt_range=(16, 512), new_range=(16, 160), sample=False)


def gpt2_generate(torch, budget):
    tf = _transformers()
    cfg = tf.GPT2Config(n_layer=12, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257)
    model = _build(torch, tf.GPT2LMHeadModel, cfg, torch.float16)
    _generate(torch, budget, model, cfg.vocab_size, random.Random(21), rounds=16, b_range=(1, 24),
              prompt_range=(8, 384), new_range=(16, 128), sample=True)


# ------------------------------------------------------------------ inference servers

def server_bert_threads(torch, budget):
    """4 worker threads, one stream each, serving variable-length encoder requests."""
    tf = _transformers()
    cfg = tf.BertConfig()
    model = _build(torch, tf.BertModel, cfg, torch.float16).eval()
    torch.cuda.synchronize()
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream), torch.no_grad():
                for _ in range(150):
                    if budget.over():
                        break
                    ids, mask = _padded_ids(torch, rng, cfg.vocab_size, rng.randint(1, 16),
                                            rng.randint(8, 512))
                    out = model(input_ids=ids, attention_mask=mask).last_hidden_state
                    pooled = (out[:, 0].float()).cpu()  # the response: waits for this stream
                    del ids, mask, out, pooled
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(30 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def server_gpt2_streams(torch, budget):
    """One scheduler interleaving up to 6 in-flight generation requests, each on its own
    stream with its own growing KV cache; requests arrive and finish at random."""
    tf = _transformers()
    cfg = tf.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = _build(torch, tf.GPT2LMHeadModel, cfg, torch.float16).eval()
    torch.cuda.synchronize()
    rng = random.Random(31)
    streams = [torch.cuda.Stream() for _ in range(6)]
    free_streams, active, served = list(streams), [], 0
    with torch.no_grad():
        while served < 120 and not budget.over():
            while free_streams and rng.random() < 0.6:
                s = free_streams.pop()
                with torch.cuda.stream(s):
                    ids = torch.randint(3, cfg.vocab_size, (rng.randint(1, 4), rng.randint(16, 512)),
                                        device="cuda")
                active.append({"stream": s, "tok": ids, "past": None, "left": rng.randint(8, 96)})
            for r in list(active):
                with torch.cuda.stream(r["stream"]):
                    out = model(input_ids=r["tok"], past_key_values=r["past"], use_cache=True)
                    r["past"], r["tok"] = out.past_key_values, out.logits[:, -1:].argmax(-1)
                    del out
                r["left"] -= 1
                if r["left"] == 0:
                    r["stream"].synchronize()
                    active.remove(r)
                    free_streams.append(r["stream"])
                    served += 1
                    r.clear()
        for r in active:
            r["stream"].synchronize()
        del active


# ------------------------------------------------------------------ vision

def _vision_train(torch, budget, model, rng, steps, shape_fn, dtype, opt, scaler=None,
                  eval_every=0, eval_batch=0, eval_res=224):
    model = model.cuda().to(memory_format=torch.channels_last).train()
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        if budget.over():
            break
        b, res = shape_fn(rng)
        x = torch.randn(b, 3, res, res, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (b,), device="cuda")
        with _autocast(torch, dtype):
            loss = loss_fn(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
        if eval_every and step % eval_every == eval_every - 1:
            model.eval()
            with torch.no_grad(), _autocast(torch, dtype):
                xe = torch.randn(eval_batch, 3, eval_res, eval_res, device="cuda")
                model(xe.to(memory_format=torch.channels_last)).argmax(-1)
                del xe
            model.train()


def resnet_multires_train(torch, budget):
    import torchvision

    model = torchvision.models.resnet50(weights=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def shape(rng):  # progressive-resizing style: about constant pixels per batch
        res = rng.choice([128, 160, 192, 224, 256, 288])
        return int(64 * (224 / res) ** 2), res

    _vision_train(torch, budget, model, random.Random(40), 40, shape, torch.float16, opt,
                  scaler=torch.amp.GradScaler("cuda"))


def convnext_multires_train(torch, budget):
    import timm

    model = timm.create_model("convnext_tiny", pretrained=False, num_classes=1000)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def shape(rng):  # independent batch size and resolution
        return rng.randint(8, 48), rng.choice([160, 192, 224, 256, 288])

    _vision_train(torch, budget, model, random.Random(41), 30,
                  shape, torch.bfloat16, opt)


def swin_bf16_train(torch, budget):
    import torchvision

    model = torchvision.models.swin_t(weights=None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _vision_train(torch, budget, model, random.Random(42), 24, lambda rng: (48, 224),
                  torch.bfloat16, opt, eval_every=6, eval_batch=128)


def efficientnet_bf16_train(torch, budget):
    import torchvision

    model = torchvision.models.efficientnet_b0(weights=None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _vision_train(torch, budget, model, random.Random(43), 30,
                  lambda rng: (rng.choice([128, 128, 128, 96, 37]), 224),  # incl. ragged last batches
                  torch.bfloat16, opt, eval_every=8, eval_batch=256)


def unet_train(torch, budget):
    """A latent-diffusion-style UNet (GroupNorm/SiLU res blocks, time embedding, attention at
    the two lowest resolutions, skip connections) trained with an EMA copy of its weights."""
    nn, F = torch.nn, torch.nn.functional

    class Res(nn.Module):
        def __init__(self, cin, cout, tdim):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(tdim, cout)
            self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            return self.skip(x) + self.c2(F.silu(self.n2(h)))

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n, self.qkv, self.o = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.n(x)).view(b, 3, 8, c // 8, h * w).transpose(-1, -2).unbind(1)
            a = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(b, c, h, w)
            return x + self.o(a)

    class UNet(nn.Module):
        def __init__(self, chans=(128, 256, 512), tdim=512):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(128, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inp = nn.Conv2d(4, chans[0], 3, padding=1)
            self.down, self.up, c = nn.ModuleList(), nn.ModuleList(), chans[0]
            for i, co in enumerate(chans):
                self.down.append(nn.ModuleList([Res(c, co, tdim), Res(co, co, tdim),
                                                Attn(co) if i else nn.Identity()]))
                c = co
            self.mid = nn.ModuleList([Res(c, c, tdim), Attn(c), Res(c, c, tdim)])
            for i, co in reversed(list(enumerate(chans))):
                self.up.append(nn.ModuleList([Res(c + co, co, tdim), Res(co, co, tdim),
                                              Attn(co) if i else nn.Identity()]))
                c = co
            self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 4, 3, padding=1))

        def forward(self, x, t):
            half = torch.exp(-torch.arange(64, device=x.device) * (9.2 / 64))
            te = self.temb(torch.cat([torch.sin(t[:, None] * half), torch.cos(t[:, None] * half)], 1))
            h, skips = self.inp(x), []
            for i, (r1, r2, at) in enumerate(self.down):
                h = at(r2(r1(h, te), te))
                skips.append(h)
                if i < len(self.down) - 1:
                    h = F.avg_pool2d(h, 2)
            h = self.mid[2](self.mid[1](self.mid[0](h, te)), te)
            for i, (r1, r2, at) in enumerate(self.up):
                s = skips.pop()
                if h.shape[-1] != s.shape[-1]:
                    h = F.interpolate(h, scale_factor=2.0, mode="nearest")
                h = at(r2(r1(torch.cat([h, s], 1), te), te))
            return self.out(h)

    model = UNet().cuda().train()
    ema = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(44)
    for _ in range(30):
        if budget.over():
            break
        b = rng.choice([16, 24, 32])
        x0 = torch.randn(b, 4, 64, 64, device="cuda")
        t = torch.rand(b, device="cuda") * 1000
        noise = torch.randn_like(x0)
        alpha = torch.cos(t / 1000 * 1.5707)[:, None, None, None]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(alpha * x0 + (1 - alpha ** 2).sqrt() * noise, t).float(), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 0.001)
        del x0, t, noise, alpha, loss


# --all order: new workloads first; the two already recorded for real come last.
WORKLOADS = {f.__name__: f for f in [
    gpt2_ckpt_train, llama_ckpt_train, bert_varlen_train, mixtral_train, qwen2moe_train,
    t5_train, bart_train, llama_generate, gpt2_generate, server_bert_threads, server_gpt2_streams,
    resnet_multires_train, convnext_multires_train, swin_bf16_train, efficientnet_bf16_train,
    unet_train, kv_generate, varbatch_train, varlen_infer, mlp_train]}
NEEDS = {"resnet_multires_train": "torchvision", "swin_bf16_train": "torchvision",
         "efficientnet_bf16_train": "torchvision", "convnext_multires_train": "timm"}
for _n in WORKLOADS:
    assert _n in SPLIT, _n
for _n in ("gpt2", "llama", "bert", "mixtral", "qwen2moe", "t5", "bart", "server"):
    for _w in WORKLOADS:
        if _w.startswith(_n) and _w not in NEEDS:
            NEEDS[_w] = "transformers"


# ------------------------------------------------------------------ recording

class _Timeout(BaseException):
    """BaseException: library code's `except Exception` must not swallow the timeout."""


def _on_alarm(signum, frame):
    raise _Timeout()


def _history(torch, on: bool):
    rec = torch.cuda.memory._record_memory_history
    if not on:
        rec(None)
        return
    # No Python frames per event (context=None): recording stays cheap and the snapshot
    # small; only actions, addresses, sizes and streams are needed.
    for kw in (dict(context=None, stacks="python", max_entries=20_000_000, clear_history=True),
               dict(context=None, stacks="python", max_entries=20_000_000),
               dict(max_entries=20_000_000, stacks="python")):
        try:
            rec("all", **kw)
            return
        except TypeError:
            continue
    rec(True, trace_alloc_max_entries=20_000_000)


def _clean(torch):
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def record(torch, name: str, out_path: str, budget_s: float, timeout_s: float) -> str:
    """Runs one workload under torch's memory history and writes its trace; returns the header."""
    _clean(torch)
    _history(torch, True)
    # Marks where this workload's events start in the (possibly not cleared) history ring.
    marker = torch.empty(7 * 512 + 1, dtype=torch.uint8, device="cuda")
    marker_ptr = marker.data_ptr()
    old = signal.signal(signal.SIGALRM, _on_alarm) if timeout_s > 0 else None
    if timeout_s > 0:
        signal.alarm(max(1, int(timeout_s)))
    t0 = time.time()
    try:
        WORKLOADS[name](torch, Budget(budget_s))
        torch.cuda.synchronize()
        secs = time.time() - t0
    finally:
        if timeout_s > 0:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    try:
        snap = torch.cuda.memory._snapshot()
    finally:
        _history(torch, False)
    trace = snap["device_traces"][torch.cuda.current_device()]
    start = 0
    for i in range(len(trace) - 1, -1, -1):
        if trace[i]["action"] == "alloc" and trace[i]["addr"] == marker_ptr:
            start = i + 1
            break
    del marker
    ids, lines, next_id = {}, [], 0
    for e in trace[start:]:
        if e["action"] == "alloc":
            ids[e["addr"]] = next_id
            lines.append(f"a {next_id} {e['size']} {e['stream']}")
            next_id += 1
        elif e["action"] == "free_requested" and e["addr"] in ids:
            lines.append(f"f {ids.pop(e['addr'])}")
    del snap, trace
    header = (f"# workload={name} events={len(lines)} peak_allocated={peak_alloc} "
              f"peak_reserved={peak_res} seconds={secs:.2f}")
    with gzip.open(out_path, "wt") as f:
        f.write(header + "\n" + "\n".join(lines) + "\n")
    return header


def record_all(torch, outdir: str, only, budget_s: float, timeout_s: float, total_s: float = 0) -> int:
    import importlib.util

    os.makedirs(outdir, exist_ok=True)
    recorded, t_all = 0, time.time()
    for name in WORKLOADS:
        if only and name not in only:
            continue
        if total_s and time.time() - t_all + budget_s > total_s:
            print(f"SKIP {SPLIT[name]} {name}: --total {total_s:g} s would be exceeded", flush=True)
            continue
        need = NEEDS.get(name)
        if need and importlib.util.find_spec(need) is None:
            print(f"SKIP {SPLIT[name]} {name}: package {need} is not installed", flush=True)
            continue
        try:
            header = record(torch, name, os.path.join(outdir, f"{name}.trace.gz"), budget_s, timeout_s)
        except _Timeout:
            print(f"SKIP {SPLIT[name]} {name}: ran past --timeout {timeout_s:g} s", flush=True)
        except ImportError as e:
            print(f"SKIP {SPLIT[name]} {name}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - one broken workload must not lose the others
            print(f"FAIL {SPLIT[name]} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        else:
            print(f"{SPLIT[name]} {name} {header}", flush=True)
            recorded += 1
        finally:
            with contextlib.suppress(Exception):
                _history(torch, False)
            _clean(torch)
    print(f"# {recorded} traces in {outdir} ({time.time() - t_all:.0f} s)", flush=True)
    return 0 if recorded else 1


def main(argv) -> int:
    if argv[:1] == ["--list"]:
        for n in WORKLOADS:
            print(f"{SPLIT[n]:8s} {n:26s} {NEEDS.get(n, 'torch')}")
        return 0
    if argv[:1] == ["--all"] and len(argv) >= 2:
        opts = {"--only": "", "--budget": "15", "--timeout": "60", "--total": "0"}
        rest = argv[2:]
        while rest:
            if rest[0] not in opts or len(rest) < 2:
                print(__doc__)
                return 2
            opts[rest[0]], rest = rest[1], rest[2:]
        only = {s for s in opts["--only"].split(",") if s}
        if only - set(WORKLOADS):
            print(f"unknown workloads: {sorted(only - set(WORKLOADS))}; --list shows them")
            return 2
        import torch

        return record_all(torch, argv[1], only, float(opts["--budget"]), float(opts["--timeout"]),
                          float(opts["--total"]))
    if len(argv) != 2 or argv[0] not in WORKLOADS:
        print(__doc__)
        return 2
    import torch

    print(record(torch, argv[0], argv[1], budget_s=1e9, timeout_s=0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
