"""Bad inputs across the public API, table-driven (issue 14.5).

Each case must raise the expected exception with a message naming what was wrong (checked by
a fragment), must not leak binding internals (pybind11 signature dumps, C++ type names,
NumPy-internal dtype names, AttributeErrors of private attributes), and must leave the
process usable: the current device and stream unchanged, memory_allocated() back to its
value before the call, and a follow-up op correct.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import cudakit as ck
import cudakit.memory as mem
import cudakit.random as R

# Things no user-facing error may contain.
FORBIDDEN = ("incompatible function arguments", "Invoked with", "Unable to cast", "cudakit::",
             "std::", "pybind11", "str160", "str32", "'_pool'", "has no attribute", "<class '")


class Ops:
    """Operands created before the measurement, so a case's own temporaries are all that
    memory_allocated() can see."""

    def __init__(self):
        self.f4 = ck.ones(4)
        self.i2 = ck.ones(2, dtype=ck.int64)
        self.c2 = ck.ones(2, dtype=ck.complex64)
        self.m22 = ck.ones(2, 2)
        self.one = ck.ones(1)
        self.host = ck.ones(2, device="cpu")
        self.stream = ck.Stream()
        self.event = ck.Event(enable_timing=True)
        self.gen = ck.Generator("cuda:0")
        two = ck.device_count() > 1
        self.s1 = ck.Stream(device=1) if two else None
        self.t1 = ck.ones(2, device="cuda:1") if two else None


TWO = "needs 2 devices"

# (id, call, expected exception, message fragment[, skip reason when < 2 devices])
CASES = [
    # ---- devices ----
    ("set_device-bad-string", lambda o: ck.set_device("gpu"), ValueError, "Invalid device string"),
    ("set_device-out-of-range", lambda o: ck.set_device(99), ValueError, "Invalid device index 99"),
    ("set_device-float", lambda o: ck.set_device(1.5), TypeError, "argument 'device'"),
    ("set_device-huge-int", lambda o: ck.set_device(2**70), ValueError, "does not fit in a 64-bit"),
    ("set_device-negative", lambda o: ck.set_device(-7), ValueError, "Invalid device index -7"),
    ("set_device-None", lambda o: ck.set_device(None), ValueError, "got None"),
    ("get_device_properties-minus-one", lambda o: ck.get_device_properties(-1), ValueError, "Invalid device id -1"),
    ("get_device_name-minus-one", lambda o: ck.get_device_name(-1), ValueError, "Invalid device id"),
    ("get_device_capability-minus-one", lambda o: ck.get_device_capability(-1), ValueError, "Invalid device id"),
    ("get_device_properties-cpu", lambda o: ck.get_device_properties("cpu"), ValueError, "Expected a cuda device"),
    ("get_device_properties-99", lambda o: ck.get_device_properties(99), ValueError, "Invalid device index"),
    ("get_device_name-object", lambda o: ck.get_device_name(object()), TypeError, "must be an int, 'cuda'"),
    ("get_device_capability-list", lambda o: ck.get_device_capability([0]), TypeError, "not list"),
    ("synchronize-missing-device", lambda o: ck.synchronize("cuda:7"), ValueError, "Invalid device index 7"),
    ("can_device_access_peer-str", lambda o: ck.can_device_access_peer(0, "x"), ValueError, "peer_device"),
    ("Device-bad-type", lambda o: ck.Device("tpu:0"), ValueError, "Invalid device string: 'tpu:0'"),
    ("Device-negative-index", lambda o: ck.Device("cuda", -3), ValueError, "Invalid device index -3"),
    ("Device-float", lambda o: ck.Device(3.0), TypeError, "not float"),
    ("Device-index-str", lambda o: ck.Device("cuda", "0"), TypeError, "argument 'index'"),
    ("device-context-bad", lambda o: ck.device("cuda:x").__enter__(), ValueError, "Invalid device string"),
    ("utilization-bool", lambda o: ck.utilization(True), TypeError, "not bool"),
    ("check_error-str", lambda o: ck.check_error("x"), TypeError, "argument 'res' must be an int"),
    ("check_error-huge", lambda o: ck.check_error(2**80), ValueError, "argument 'res'"),
    ("set_sync_debug_mode-bad-str", lambda o: ck.set_sync_debug_mode("loud"), RuntimeError, "invalid value of debug_mode"),
    ("set_sync_debug_mode-bad-int", lambda o: ck.set_sync_debug_mode(7), RuntimeError, "invalid value of debug_mode"),
    ("set_sync_debug_mode-float", lambda o: ck.set_sync_debug_mode(1.5), TypeError, "argument 'debug_mode'"),
    ("is_bf16_supported-str", lambda o: ck.is_bf16_supported("yes"), TypeError, "must be a bool"),
    # ---- streams and events ----
    ("Stream-priority-str", lambda o: ck.Stream(priority="high"), TypeError, "argument 'priority' must be an int"),
    ("Stream-priority-huge", lambda o: ck.Stream(priority=2**70), ValueError, "argument 'priority'"),
    ("Stream-cpu", lambda o: ck.Stream(device="cpu"), ValueError, "Expected a cuda device"),
    ("ExternalStream-str", lambda o: ck.ExternalStream("abc"), TypeError, "argument 'stream_ptr'"),
    ("ExternalStream-negative", lambda o: ck.ExternalStream(-5), ValueError, "must be >= 0, got -5"),
    ("stream-object", lambda o: ck.stream(object()), TypeError, "cudakit.Stream"),
    ("StreamContext-int", lambda o: ck.StreamContext(3.5), TypeError, "cudakit.Stream"),
    ("set_stream-int", lambda o: ck.set_stream(5), TypeError, "argument 'stream'"),
    ("wait_event-str", lambda o: o.stream.wait_event("x"), TypeError, "must be a cudakit.Event"),
    ("wait_stream-float", lambda o: o.stream.wait_stream(1.5), TypeError, "argument 'stream'"),
    ("record_event-str", lambda o: o.stream.record_event("e"), TypeError, "cudakit.Event"),
    ("Event-enable_timing-str", lambda o: ck.Event(enable_timing="yes"), TypeError, "must be a bool"),
    ("Event-record-object", lambda o: o.event.record(object()), ValueError, "cudakit.Stream"),
    ("elapsed_time-str", lambda o: o.event.elapsed_time("x"), TypeError, "argument 'end_event'"),
    ("elapsed_time-unrecorded", lambda o: o.event.elapsed_time(ck.Event(enable_timing=True)), ValueError,
     "must be recorded"),
    ("from_ipc_handle-str", lambda o: ck.Event.from_ipc_handle(0, "str"), TypeError, "argument 'handle'"),
    ("from_ipc_handle-short", lambda o: ck.Event.from_ipc_handle(0, b"short"), ValueError, "64 bytes"),
    ("get_stream_from_external-str", lambda o: ck.get_stream_from_external("x"), TypeError, "data_ptr"),
    ("elapsed_time-across-devices", lambda o: _elapsed_across_devices(o), ValueError, "same device", TWO),
    # ---- memory ----
    ("alloc-negative", lambda o: mem.caching_allocator_alloc(-1), ValueError, "argument 'size' must be >= 0"),
    ("alloc-str", lambda o: mem.caching_allocator_alloc("10"), TypeError, "argument 'size' must be an int"),
    ("alloc-huge", lambda o: mem.caching_allocator_alloc(2**70), ValueError, "2**64 or more"),
    ("alloc-stream-str", lambda o: mem.caching_allocator_alloc(10, stream="x"), TypeError, "argument 'stream'"),
    ("alloc-device-str", lambda o: mem.caching_allocator_alloc(10, device="cuda:x"), ValueError,
     "Invalid device string"),
    ("alloc-other-device-stream", lambda o: mem.caching_allocator_alloc(10, stream=o.s1), ValueError,
     "stream belongs to device 1", TWO),
    ("delete-str", lambda o: mem.caching_allocator_delete("x"), TypeError, "mem_ptr"),
    ("delete-negative", lambda o: mem.caching_allocator_delete(-1), ValueError, "must be >= 0"),
    ("delete-unknown", lambda o: mem.caching_allocator_delete(12345), ValueError, "not a live allocation"),
    ("memory_allocated-bad", lambda o: mem.memory_allocated("cuda:x"), ValueError, "memory_allocated()"),
    ("memory_stats-float", lambda o: mem.memory_stats(1.5), TypeError, "memory_stats(): argument 'device'"),
    ("memory_reserved-huge", lambda o: mem.memory_reserved(2**70), ValueError, "64-bit"),
    ("fraction-str", lambda o: mem.set_per_process_memory_fraction("a"), TypeError, "fraction"),
    ("fraction-too-big", lambda o: mem.set_per_process_memory_fraction(1.5), ValueError, "[0, 1]"),
    ("fraction-negative", lambda o: mem.set_per_process_memory_fraction(-0.1), ValueError, "[0, 1]"),
    ("MemPool-use_on_oom-str", lambda o: mem.MemPool(use_on_oom="x"), TypeError, "use_on_oom"),
    ("MemPool-allocator-str", lambda o: mem.MemPool(allocator="x"), TypeError, "argument 'allocator'"),
    ("use_mem_pool-str", lambda o: mem.use_mem_pool("notapool").__enter__(), TypeError, "argument 'pool'"),
    ("change_current_allocator-str", lambda o: mem.change_current_allocator("x"), TypeError, "'allocator'"),
    ("CUDAPluggableAllocator-ints", lambda o: mem.CUDAPluggableAllocator(1, 2, 3), TypeError,
     "argument 'path_to_so_file' must be a str"),
    ("record_history-enabled", lambda o: mem._record_memory_history(enabled="bogus"), ValueError, "'bogus'"),
    ("record_history-max_entries", lambda o: mem._record_memory_history(max_entries=-1), ValueError,
     "max_entries"),
    ("record_history-stacks", lambda o: mem._record_memory_history(stacks=3), TypeError, "stacks"),
    ("memory_snapshot-pool-str", lambda o: mem.memory_snapshot(mempool_id="x"), TypeError, "mempool_id"),
    ("dump_snapshot-int", lambda o: mem._dump_snapshot(5), TypeError, "filename"),
    ("mem-record_stream-other-device", lambda o: _record_other_device_raw(o), ValueError, "memory is on cuda:0", TWO),
    ("memory_summary-abbreviated-str", lambda o: mem.memory_summary(abbreviated="x"), TypeError, "abbreviated"),
    # ---- factories ----
    ("empty-negative", lambda o: ck.empty(-1), ValueError, "negative dimension -1"),
    ("empty-float", lambda o: ck.empty(2.5), TypeError, "argument 'size'"),
    ("empty-2**62", lambda o: ck.empty(2**62), ck.OutOfMemoryError, "18446744073709551616 bytes"),
    ("empty-2**40x2**40", lambda o: ck.empty(2**40, 2**40), ValueError, "1208925819614629174706176 elements"),
    ("zeros-2**62", lambda o: ck.zeros(2**62), ck.OutOfMemoryError, "Tried to allocate"),
    ("ones-2**62-host", lambda o: ck.ones(2**62, device="cpu"), ck.OutOfMemoryError, "Tried to allocate"),
    ("empty-2**70", lambda o: ck.empty(2**70), ValueError, "does not fit in a 64-bit"),
    ("empty-str", lambda o: ck.empty("3"), TypeError, "tuple of ints"),
    ("zeros-tuple-with-str", lambda o: ck.zeros((2, "a")), TypeError, "element of type str at pos 1"),
    ("zeros-unsupported-dtype", lambda o: ck.zeros(2, dtype="float128"), ValueError, "unsupported dtype 'float128'"),
    ("zeros-dtype-int", lambda o: ck.zeros(2, dtype=5), TypeError, "argument 'dtype' must be a dtype"),
    ("zeros-numpy-str-dtype", lambda o: ck.zeros(2, dtype=np.dtype("U10")), ValueError, "unsupported dtype"),
    ("zeros-device-tpu", lambda o: ck.zeros(2, device="tpu"), ValueError, "Invalid device string: 'tpu'"),
    ("zeros-device-float", lambda o: ck.zeros(2, device=1.5), TypeError, "argument 'device'"),
    ("zeros-device-negative", lambda o: ck.zeros(2, device=-1), ValueError, "Invalid device index -1"),
    ("zeros-pin-device", lambda o: ck.zeros(2, pin_memory=True), ValueError, "pin_memory=True requires device='cpu'"),
    ("zeros-pin-str", lambda o: ck.zeros(2, device="cpu", pin_memory="y"), TypeError, "pin_memory"),
    ("full-str-value", lambda o: ck.full((2,), "x"), TypeError, "argument 'fill_value'"),
    ("full-huge-value", lambda o: ck.full((2,), 2**70), ValueError, "fill_value"),
    ("full-str-size", lambda o: ck.full("ab", 1), TypeError, "argument 'size'"),
    ("arange-zero-step", lambda o: ck.arange(0, 10, 0), ValueError, "step must be nonzero"),
    ("arange-str", lambda o: ck.arange("a"), TypeError, "argument 'end'"),
    ("arange-inf", lambda o: ck.arange(0, float("inf")), ValueError, "finite"),
    ("arange-huge", lambda o: ck.arange(2**62), ck.OutOfMemoryError, "Tried to allocate"),
    ("arange-sign", lambda o: ck.arange(0, -5), ValueError, "step sign"),
    ("arange-complex", lambda o: ck.arange(1j), TypeError, "real number"),
    ("tensor-ragged", lambda o: ck.tensor([[1, 2], [3]]), ValueError, "expected sequence of length 2 at dim 1 (got 1)"),
    ("tensor-ragged-depth", lambda o: ck.tensor([[1], 2]), ValueError, "at dim 1"),
    ("tensor-str", lambda o: ck.tensor(["a"]), TypeError, "found str ('a')"),
    ("tensor-huge-int", lambda o: ck.tensor([2**70]), ValueError, "does not fit in a 64-bit"),
    ("tensor-object", lambda o: ck.tensor(object()), TypeError, "argument 'data'"),
    ("tensor-dict", lambda o: ck.tensor({1: 2}), TypeError, "argument 'data'"),
    ("tensor-numpy-str", lambda o: ck.tensor(np.array(["a", "b"])), TypeError, "dtype('<U1')"),
    ("asarray-object", lambda o: ck.asarray(object()), TypeError, "argument 'obj'"),
    ("asarray-numpy-object", lambda o: ck.asarray(np.array([None])), TypeError, "can't convert a NumPy array"),
    ("asarray-copy-str", lambda o: ck.asarray(o.f4, copy="x"), TypeError, "argument 'copy'"),
    ("empty_like-str", lambda o: ck.empty_like("x"), TypeError, "argument 'input' must be a cudakit.Tensor"),
    ("zeros_like-bad-dtype", lambda o: ck.zeros_like(o.f4, dtype="x"), ValueError, "unsupported dtype"),
    ("from_dlpack-object", lambda o: ck.from_dlpack(object()), TypeError, "__dlpack__"),
    ("promote_types-bad", lambda o: ck.promote_types("x", "float32"), ValueError, "unsupported dtype 'x'"),
    ("result_type-str", lambda o: ck.result_type(o.f4, "x"), TypeError, "tensor2"),
    ("matmul-function-str", lambda o: ck.matmul(o.f4, "x"), TypeError, "argument 'other'"),
    ("set_matmul_allow_tf32-str", lambda o: ck.set_matmul_allow_tf32("yes"), TypeError, "must be a bool"),
    # ---- random ----
    ("rand-negative", lambda o: ck.rand(-1), ValueError, "negative dimension"),
    ("rand-int-dtype", lambda o: ck.rand(3, dtype=ck.int32), ValueError, "float"),
    ("randint-size-str", lambda o: ck.randint(10, "x"), TypeError, "argument 'size'"),
    ("randint-empty-range", lambda o: ck.randint(5, 1, (2,)), ValueError, "from=5"),
    ("randint-arity", lambda o: ck.randint(5), TypeError, "(high, size)"),
    ("randn-generator-str", lambda o: ck.randn(2, generator="x"), TypeError, "argument 'generator'"),
    ("manual_seed-str", lambda o: R.manual_seed("x"), TypeError, "argument 'seed' must be an int"),
    ("manual_seed-huge", lambda o: R.manual_seed(2**64), ValueError, "[-2**63, 2**64)"),
    ("Generator-device", lambda o: ck.Generator(device="tpu"), ValueError, "Invalid device string"),
    ("Generator-set_offset-neg", lambda o: o.gen.set_offset(-1), ValueError, "must be >= 0"),
    ("set_rng_state-short", lambda o: R.set_rng_state(b"short"), ValueError, "16"),
    ("set_rng_state-str", lambda o: R.set_rng_state("abc"), TypeError,
     "set_rng_state(): argument 'new_state' must be a uint8 (byte) tensor as returned by get_rng_state(), got str"),
    ("set_rng_state_all-int", lambda o: R.set_rng_state_all(5), TypeError, "new_states"),
    # ---- tensor methods ----
    ("view-mismatch", lambda o: o.f4.view(5), ValueError, "invalid for input of size 4"),
    ("view-huge", lambda o: o.f4.view(2**70), ValueError, "64-bit"),
    ("view-float", lambda o: o.f4.view(2.0), TypeError, "argument 'size'"),
    ("view-overflow", lambda o: o.f4.view(2**40, 2**40, 0), ValueError, "invalid for input of size 4"),
    ("reshape-negative", lambda o: o.f4.reshape(-2), ValueError, "negative size -2"),
    ("expand-negative", lambda o: o.f4.expand(-2), ValueError, "invalid size -2"),
    ("expand-overflow", lambda o: o.one.expand(2**40, 2**40), ValueError, "elements"),
    ("expand-mismatch", lambda o: o.f4.expand(3), ValueError, "must match the existing size"),
    ("size-out-of-range", lambda o: o.f4.size(5), ValueError, "out of range"),
    ("size-str", lambda o: o.f4.size("a"), TypeError, "argument 'dim'"),
    ("transpose-out-of-range", lambda o: o.f4.transpose(0, 9), ValueError, "dimension 9 out of range"),
    ("permute-repeated", lambda o: o.m22.permute(0, 0), ValueError, "repeated dim"),
    ("unsqueeze-out-of-range", lambda o: o.f4.unsqueeze(10), ValueError, "out of range"),
    ("squeeze-str", lambda o: o.f4.squeeze("a"), TypeError, "argument 'dim'"),
    ("index-out-of-range", lambda o: o.f4[10], IndexError, "out of bounds"),
    ("index-str", lambda o: o.f4["a"], TypeError, "Tensor indices must be integers"),
    ("index-float-slice", lambda o: o.f4[0.5:], TypeError, "must be an int"),
    ("index-too-many", lambda o: o.f4[0, 0], IndexError, "too many indices"),
    ("setitem-str", lambda o: o.f4.__setitem__(0, "x"), TypeError, "found str"),
    ("add-str", lambda o: o.f4 + "a", TypeError, "unsupported operand"),
    ("add-method-str", lambda o: o.f4.add("a"), TypeError, "Tensor.add(): argument 'other'"),
    ("add-broadcast", lambda o: o.f4 + ck.ones(3), ValueError, "not broadcastable"),
    ("add-devices", lambda o: o.f4 + o.host, ValueError, "same device"),
    ("iadd-float-into-int", lambda o: o.i2.__iadd__(0.5), ValueError, "can't be cast"),
    ("matmul-dtype", lambda o: o.m22 @ ck.ones(2, 2, dtype=ck.float64), ValueError, "same dtype"),
    ("matmul-method-str", lambda o: o.f4.matmul("x"), TypeError, "argument 'other'"),
    ("matmul-operator-str", lambda o: o.f4 @ "x", TypeError, "unsupported operand"),
    ("to-bad-device", lambda o: o.f4.to("tpu"), ValueError, "Invalid device string"),
    ("to-float", lambda o: o.f4.to(5.5), TypeError, "argument 'dtype'"),
    ("to-non_blocking-str", lambda o: o.f4.to("cpu", non_blocking="x"), TypeError, "non_blocking"),
    ("cuda-bad-device", lambda o: o.host.cuda("cpu"), ValueError, "Expected a cuda device"),
    ("copy_-str", lambda o: o.f4.copy_("x"), TypeError, "argument 'src'"),
    ("copy_-shape", lambda o: o.f4.copy_(ck.ones(3)), ValueError, "expand"),
    ("fill_-str", lambda o: o.f4.fill_("x"), TypeError, "argument 'value'"),
    ("item-many", lambda o: o.f4.item(), ValueError, "a Tensor with 4 elements cannot be converted to Scalar"),
    ("bool-many", lambda o: bool(o.f4), ValueError, "more than one value is ambiguous"),
    ("bool-empty", lambda o: bool(ck.ones(0)), ValueError, "no values is ambiguous"),
    ("float-many", lambda o: float(o.f4), ValueError, "only one element tensors"),
    ("int-many", lambda o: int(o.m22), ValueError, "only one element tensors"),
    ("float-complex", lambda o: float(ck.ones(1, dtype=ck.complex64)), TypeError, "complex"),
    ("index-float-tensor", lambda o: [1, 2][ck.ones(1)], TypeError, "only integer tensors"),
    ("record_stream-str", lambda o: o.f4.record_stream("x"), TypeError, "argument 'stream'"),
    ("record_stream-None", lambda o: o.f4.record_stream(None), TypeError, "argument 'stream'"),
    ("record_stream-host", lambda o: o.host.record_stream(o.stream), ValueError, "device tensor"),
    ("record_stream-other-device", lambda o: o.f4.record_stream(o.s1), ValueError, "stream is on cuda:1", TWO),
    ("normal_-negative-std", lambda o: o.f4.normal_(0, -1), ValueError, "std >= 0"),
    ("uniform_-str", lambda o: o.f4.uniform_("a"), TypeError, "argument 'from'"),
    ("uniform_-reversed", lambda o: o.f4.uniform_(1, 0), ValueError, "from <= to"),
    ("pow-str", lambda o: o.f4 ** "x", TypeError, "unsupported operand"),
    ("pow-int-negative", lambda o: o.i2 ** -1, ValueError, "Integers to negative integer powers are not allowed"),
    ("pow-bool", lambda o: ck.ones(2, dtype=ck.bool) ** ck.ones(2, dtype=ck.bool), ValueError, "bool"),
    ("lt-complex", lambda o: o.c2 < 1, ValueError, "complex"),
    ("eq-broadcast", lambda o: o.f4 == ck.ones(3), ValueError, "not broadcastable"),
    ("numpy-device", lambda o: o.f4.numpy(), TypeError, "copy it to host memory first"),
    ("numpy-bfloat16", lambda o: ck.ones(2, dtype=ck.bfloat16, device="cpu").numpy(), TypeError, "bfloat16"),
    ("dlpack-stream-zero", lambda o: o.f4.__dlpack__(stream=0), ValueError, "stream=0"),
    ("dlpack-stream-str", lambda o: o.f4.__dlpack__(stream="x"), TypeError, "argument 'stream'"),
    ("dlpack-dl_device-str", lambda o: o.f4.__dlpack__(dl_device="x"), TypeError, "dl_device"),
    ("len-0d", lambda o: len(ck.tensor(1)), TypeError, "0-d"),
    # ---- issue 24: errors that were silent or unclear ----
    ("CUDAGraph-keep_graph-str", lambda o: ck.CUDAGraph(keep_graph="x"), TypeError,
     "CUDAGraph(): argument 'keep_graph'"),
    ("nvtx-name_category-str-id", lambda o: ck.nvtx.name_category("x", "y"), TypeError,
     "argument 'category' must be an int id (name_category gives a name to a numeric id; for the id of a named category use Domain.category(name)"),
    ("set_rng_state-floats", lambda o: R.set_rng_state(np.full(16, 1.7)), TypeError, "of dtype float64"),
    ("set_rng_state_all-floats", lambda o: R.set_rng_state_all([np.full(16, 1.7)] * ck.device_count()),
     TypeError, "set_rng_state_all(): argument 'new_state'"),
    ("index-two-ellipses", lambda o: o.m22[..., ..., ...], IndexError, "an index can only have a single ellipsis"),
    ("setitem-two-ellipses", lambda o: o.m22.__setitem__((..., ...), 1.0), IndexError, "single ellipsis"),
    ("multi-output-jit-by-value", lambda o: ck.jiterator._create_multi_output_jit_fn(
        "template <typename T> void f(T x, T& a, T b) { a = x; b = x; }", 2), ValueError,
     "output 1 of 'f' ('T b') is passed by value"),
    ("change_current_allocator-after-allocations", lambda o: mem.change_current_allocator(
        mem.CUDAPluggableAllocator("libc.so.6", "malloc", "free")), RuntimeError,
     "can't swap an already initialized allocator"),
]


def _elapsed_across_devices(o):
    a, b = ck.Event(enable_timing=True), ck.Event(enable_timing=True)
    a.record(o.stream)
    b.record(o.s1)
    b.synchronize()
    a.synchronize()
    return a.elapsed_time(b)


def _record_other_device_raw(o):
    p = mem.caching_allocator_alloc(64, device=0)
    try:
        mem._record_stream(p, o.s1)
    finally:
        mem.caching_allocator_delete(p)


def test_table_is_large_enough():
    assert len(CASES) >= 80
    assert len({c[0] for c in CASES}) == len(CASES)


def test_argument_type_error_is_type_and_value_error():
    assert issubclass(ck.ArgumentTypeError, TypeError)
    assert issubclass(ck.ArgumentTypeError, ValueError)


@pytest.fixture(scope="module", autouse=True)
def _no_garbage_of_earlier_files():
    # Garbage cycles left by earlier test files (their tensors) are collected here, not by a
    # collection that a bad call happens to trigger between test_bad_input's two readings of
    # memory_allocated().
    gc.collect()
    ck.synchronize()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(ck, case):
    name, call, exc, fragment = case[:4]
    if len(case) > 4 and ck.device_count() < 2:
        pytest.skip(case[4])
    ops = Ops()
    ck.synchronize()
    device, stream = ck.current_device(), ck.current_stream()
    before = ck.memory_allocated()
    with pytest.raises(exc) as info:
        call(ops)
    msg = str(info.value)
    assert fragment in msg, f"{name}: {msg!r} lacks {fragment!r}"
    for bad in FORBIDDEN:
        assert bad not in msg, f"{name}: {msg!r} contains {bad!r}"
    assert "\n" not in msg.strip(), f"{name}: multi-line message {msg!r}"
    del info
    # State intact: device, stream, memory; and the next op works.
    assert ck.current_device() == device and ck.current_stream() == stream
    ck.synchronize()
    assert ck.memory_allocated() == before, name
    r = (ck.arange(4) + 1) * 2
    assert r.tolist() == [2, 4, 6, 8]
    del r
    ck.synchronize()
    assert ck.memory_allocated() == before, name
