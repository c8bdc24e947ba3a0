#!/usr/bin/env python3
"""Model of ck_normal_f32's per-warp queues (src/kernels/random.cu), for checking their
bookkeeping without a GPU: the block ring (kRing entries, appended by ballot + prefix count
two blocks per lane per iteration, drained 32 at a time) and the element ring (kXRing
entries, the 2nd-4th rejects of a drained block, with the `full` case that finishes the 32
oldest entries before appending the rest). Lanes are simulated one by one in the kernel's
order. Asserts that every rejected (block, word) reaches the slow path exactly once, that no
slot is overwritten before it is read or read before it is written, and that the block ring
never overflows; prints how often the `full` path ran. High reject rates stress the rings.

  python3 bench/tensor/normal_queue_model.py
"""
import random

K_RING, K_XRING = 128, 32


def popc(x):
    return bin(x).count("1")


def ffs0(x):
    return (x & -x).bit_length() - 1


def run(iters, p, seed):
    rnd = random.Random(seed)
    masks, done = {}, set()
    ring, xring = [None] * K_RING, [None] * K_XRING
    st = {"head": 0, "xhead": 0, "xtail": 0}
    tail, fulls = 0, 0

    def slow(c, k):
        assert (c, k) not in done and masks[c] >> k & 1, (c, k)
        done.add((c, k))

    def drain(m, last):
        nonlocal fulls
        cs, mask = [None] * 32, [0] * 32
        for l in range(m):
            slot = (st["head"] + l) % K_RING
            assert ring[slot] is not None, "block ring: read before written"
            cs[l], ring[slot] = ring[slot], None
            mask[l] = masks[cs[l]]
        st["head"] += m
        have = [x != 0 for x in mask]
        jk = [ffs0(x) if x else 0 for x in mask]
        jc = list(cs)
        mask = [x & (x - 1) for x in mask]
        pos = [0] * 32
        if any(mask):
            n = [popc(x) for x in mask]
            b = [sum(1 << l for l in range(32) if n[l] >= t) for t in (1, 2, 3)]
            for l in range(32):
                pos[l] = st["xtail"] + sum(popc(bb & ((1 << l) - 1)) for bb in b)
            st["xtail"] += sum(popc(bb) for bb in b)
        while True:
            for l in range(32):
                if have[l]:
                    slow(jc[l], jk[l])
            full = False
            if any(mask):
                for l in range(32):
                    while mask[l] and pos[l] - st["xhead"] < K_XRING:
                        slot = pos[l] % K_XRING
                        assert xring[slot] is None, "element ring: overwritten before read"
                        xring[slot] = (cs[l], ffs0(mask[l]))
                        pos[l] += 1
                        mask[l] &= mask[l] - 1
                full = any(mask)
                fulls += full
            pending = st["xtail"] - st["xhead"]
            if not full and pending < (1 if last else 32):
                break
            take = min(pending, 32)
            have = [l < take for l in range(32)]
            for l in range(take):
                slot = (st["xhead"] + l) % K_XRING
                assert xring[slot] is not None, "element ring: read before written"
                (jc[l], jk[l]), xring[slot] = xring[slot], None
            st["xhead"] += take

    c = 0
    for _ in range(iters):
        for _ in range(64):  # two blocks per lane
            mk = sum(1 << k for k in range(4) if rnd.random() < p)
            masks[c] = mk
            if mk:
                assert tail - st["head"] < K_RING, "block ring overflow"
                ring[tail % K_RING] = c
                tail += 1
            c += 1
        while tail - st["head"] >= 32:
            drain(32, False)
    while True:
        m, last = min(tail - st["head"], 32), tail - st["head"] <= 32
        drain(m, last)
        if last:
            break
    assert done == {(cc, k) for cc, mk in masks.items() for k in range(4) if mk >> k & 1}
    assert st["xhead"] == st["xtail"]
    return len(done), fulls


def main():
    # 1.51 % of words are rejected by the fast test (5.9 % of blocks hold a reject).
    for p, iters in ((0.0151, 8192), (0.0151, 32768), (0.05, 2000), (0.2, 500), (0.5, 300), (0.9, 100), (0.0, 10)):
        for seed in range(2):
            rejects, fulls = run(iters, p, seed)
            print(f"p={p} iterations={iters} seed={seed}: {rejects} rejects finished once each, full path {fulls}x")


if __name__ == "__main__":
    main()
