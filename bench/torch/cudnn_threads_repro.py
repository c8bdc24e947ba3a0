# torch test_cuda.py test_cudnn_multiple_threads_same_device's body on cudakit's pool (PLUGIN=0: torch's own
# allocator). The fifth session's torch-suite illegal address: a default-stream tensor read by a
# side stream without record_stream, whose pages the allocator moved (device-calls.sh verify).
import os, sys, threading, torch
if os.environ.get("PLUGIN", "1") == "1":
    import cudakit.memory as m
    m.use_with_torch()
iters = int(os.environ.get("ITERS", "1000"))
weight = torch.ones((1, 1, 2, 2), device="cuda")
results = {}
barrier = threading.Barrier(2)
def worker(t):
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    barrier.wait()
    with torch.cuda.stream(s):
        for _ in range(iters):
            results[t] = torch.nn.functional.conv2d(results[t], weight, padding=0)
            results[t].div_(4.0)
    torch.cuda.synchronize()
with torch.backends.cudnn.flags(enabled=True):
    for trial in range(3):
        for t in range(2):
            results[t] = torch.ones((1, 1, 2048, 2048), device="cuda")
        th = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
        [x.start() for x in th]; [x.join() for x in th]
        for t in range(2):
            assert results[t].sum().item() == (2048 - iters) ** 2, (trial, t, results[t].sum().item())
        print("trial", trial, "ok", flush=True)
print("reserved", torch.cuda.memory_reserved(), "allocated", torch.cuda.memory_allocated())
