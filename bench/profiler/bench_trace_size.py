"""Trace size of one training step (issue 28 item 5): cudakit's JSON, JSON.gz, Perfetto
protobuf and protobuf.gz against torch.profiler's JSON of the same step, in one process.

The step: a transformers causal LM built from a config (random init, no weights downloaded),
forward + backward + optimizer step in torch; cudakit traces it through CUPTI (the same
kernels), torch.profiler traces the next identical step. Goal: cudakit's files >= 5x smaller
than torch's JSON.

    CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/profiler/bench_trace_size.py \
        [--model gpt2] [--layers 12] [--seq 512] [--batch 8]

Prints a markdown table (scripts/gpu-check.sh collects "|" lines).
"""
import argparse
import os
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", help="a transformers config name (gpt2, llama)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"bench_trace_size.py: needs torch and transformers, installed on the GPU machine ({e})")
        return 0
    import cudakit as ck
    from torch.profiler import ProfilerActivity, profile

    if args.model == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=args.layers, hidden_size=1024,
                                       intermediate_size=2816, num_attention_heads=16,
                                       num_key_value_heads=16, vocab_size=32000)
    else:
        cfg = transformers.GPT2Config(n_layer=args.layers)
    model = transformers.AutoModelForCausalLM.from_config(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")

    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm up (cuBLAS handles, allocator, autotuning)
        step()
    torch.cuda.synchronize()
    sizes = {}
    with tempfile.TemporaryDirectory() as d:
        # cudakit first: CUPTI has one subscriber, and torch's Kineto may keep it afterwards
        t = ck.profiler.trace()
        t.start()
        step()
        t.stop()
        if t.warnings:
            print(f"warning: {t.warnings[0]}")
        for name in ("t.json", "t.json.gz"):
            t.export_chrome_trace(os.path.join(d, name))
        for name in ("t.pftrace", "t.pftrace.gz"):
            t.export_perfetto(os.path.join(d, name))
        kernels = sum(1 for e in t.events() if e.get("cat") == "kernel")
        for name in ("t.json", "t.json.gz", "t.pftrace", "t.pftrace.gz"):
            sizes["cudakit " + name] = os.path.getsize(os.path.join(d, name))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        torch_path = os.path.join(d, "torch.json")
        prof.export_chrome_trace(torch_path)
        sizes["torch json"] = os.path.getsize(torch_path)
    ref = sizes["torch json"]
    print(f"## trace size of one {args.model} step ({args.layers} layers, batch {args.batch}, "
          f"seq {args.seq}; {kernels} kernels; torch {torch.__version__})")
    print("| file | bytes | torch json / this | goal |")
    print("|---|---|---|---|")
    for k, v in sizes.items():
        goal = ">= 5x" if k.startswith("cudakit") and k != "cudakit t.json" else ""
        print(f"| {k} | {v} | {ref / v:.1f}x | {goal} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
