"""The CuPy hook keeps the CuPy streams it allocated on alive until nobody else references them,
then retires them in cudakit before CuPy destroys them (python/cudakit/_cupy_interop.py): cudakit
asks the streams that allocated whether they are idle before it moves pages, and asking the
driver about a destroyed stream is undefined. CuPy is replaced by a stand-in module here (the
hook receives the module), so this runs without CuPy and without a GPU; the GPU test with
real CuPy streams is in test_memory_interop_gpu.py."""
import gc
import types
import weakref

import cudakit
from cudakit import _cupy_interop


class _FakeStream:
    """A CuPy stream stand-in over a cudakit stream (CuPy's Stream has .ptr)."""

    def __init__(self):
        self.backing = cudakit.Stream()
        self.ptr = self.backing.cuda_stream


def _fake_cupy(current):
    class _Pointer:
        def __init__(self, ptr):
            self.ptr = ptr

    class PythonFunctionAllocator:
        def __init__(self, malloc, free):
            self._malloc, self._free = malloc, free

        def malloc(self, size):
            return _Pointer(self._malloc(size, 0))

    cuda = types.SimpleNamespace(get_current_stream=lambda: current[0],
                                 memory=types.SimpleNamespace(PythonFunctionAllocator=PythonFunctionAllocator))
    return types.SimpleNamespace(cuda=cuda)


def test_a_dropped_cupy_stream_lives_until_the_next_new_stream_then_goes():
    current = [None]
    malloc = _cupy_interop.allocator(_fake_cupy(current))
    first = _FakeStream()
    current[0] = first
    p = malloc(1 << 20)
    cudakit.memory.caching_allocator_delete(p.ptr)
    gone = weakref.ref(first)
    current[0] = None
    del first
    gc.collect()
    assert gone() is not None, "the hook must keep a stream it allocated on alive"
    second = _FakeStream()
    current[0] = second
    q = malloc(1 << 20)  # a new stream: the first one, referenced by nobody else, is retired
    gc.collect()
    assert gone() is None, "a kept stream nobody references is let go once a new one shows up"
    cudakit.memory.caching_allocator_delete(q.ptr)


def test_a_stream_the_user_still_holds_is_kept():
    current = [None]
    malloc = _cupy_interop.allocator(_fake_cupy(current))
    held = _FakeStream()
    current[0] = held
    cudakit.memory.caching_allocator_delete(malloc(4096).ptr)
    other = _FakeStream()
    current[0] = other
    cudakit.memory.caching_allocator_delete(malloc(4096).ptr)
    current[0] = held  # still usable: the hook did not retire it
    cudakit.memory.caching_allocator_delete(malloc(4096).ptr)
    held.backing.synchronize()


def test_retiring_a_foreign_stream_is_harmless_for_streams_that_never_allocated():
    s = cudakit.Stream()
    cudakit._C._stream_retiring(s.cuda_stream, 0)
    x = cudakit.memory.caching_allocator_alloc(1 << 20, stream=s)
    cudakit.memory.caching_allocator_delete(x)
    s.synchronize()
