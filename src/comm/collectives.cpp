// cudakit.comm: torch.cuda.comm's six functions (see include/cudakit/comm.hpp).
//
// Structure of every call: validate everything and allocate every result, then move data —
// so a bad argument or an out-of-memory error leaves nothing half-written. Moving data picks
// a transport (choose_*); each transport orders its work on the current streams of the
// devices involved, with events between streams (StreamRef::wait), never a device sync.
#include "cudakit/comm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <numeric>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/nccl.hpp"
#include "cudakit/ops.hpp"
#include "comm/peer.hpp"
#include "kernels/reduce.hpp"
#include "nccl/single_process.hpp"
#include "nccl/wire.hpp"

namespace cudakit::comm {

namespace {

using detail::CommArgs;
using detail::CommKind;

std::atomic<int> g_transport{static_cast<int>(Transport::automatic)};

enum class Path { peer, nccl, copy };

std::string f(const char* fn) { return std::string(fn) + "(): "; }

// Device indices: each in range, no repeats unless allowed.
void check_devices(const std::vector<int>& devices, const char* fn, bool allow_repeats) {
  if (devices.empty()) throw ValueError(f(fn) + "argument 'devices' is empty");
  const int count = device_count();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    if (d < 0 || d >= count) {
      throw ValueError(f(fn) + "device " + std::to_string(d) + " at index " + std::to_string(i) +
                       " of 'devices' is out of range (" + std::to_string(count) +
                       " devices are visible: 0.." + std::to_string(count - 1) + ")");
    }
    if (!allow_repeats) {
      for (std::size_t j = 0; j < i; ++j) {
        if (devices[j] == d) {
          throw ValueError(f(fn) + "device " + std::to_string(d) + " appears twice in 'devices' "
                           "(at indices " + std::to_string(j) + " and " + std::to_string(i) + ")");
        }
      }
    }
  }
}

void check_defined(const Tensor& t, const char* fn, const std::string& what) {
  if (!t.defined()) throw ValueError(f(fn) + what + " is an undefined tensor");
}

std::string size_text(const Shape& s) {  // torch's "2x3"
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out.empty() ? "scalar" : out;
}

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* fn) {
  if (ndim == 0) throw ValueError(f(fn) + "cannot split or join 0-d tensors along a dimension");
  if (dim < -ndim || dim >= ndim) {
    throw ValueError(f(fn) + "argument 'dim' is out of range: got " + std::to_string(dim) +
                     ", expected a value in [" + std::to_string(-ndim) + ", " +
                     std::to_string(ndim - 1) + "]");
  }
  return dim < 0 ? dim + ndim : dim;
}

// Later work on `waiter` waits for the work enqueued so far on `producer` (another device's
// stream). One reusable event per producer device and thread: two driver calls per wait
// instead of StreamRef::wait's four (create, record, wait, destroy), which the small-message
// latency of a broadcast would feel. Re-recording is safe: a stream wait captures the
// event's state when it is enqueued.
void order_after(StreamRef waiter, StreamRef producer) {
  if (waiter == producer) return;
  // On the heap: kMaxDevices events per thread would be 1.5 KB of TLS in every thread.
  thread_local std::unique_ptr<std::array<Event, kMaxDevices>> events;
  if (!events) events = std::make_unique<std::array<Event, kMaxDevices>>();
  Event& e = (*events)[static_cast<std::size_t>(producer.device())];
  e.record(producer);
  waiter.wait(e);
}

// Where the current transport setting and the tensors allow each path.
struct Eligibility {
  bool peer = false;
  std::string peer_why;  // why not, for a forced transport
  bool nccl = false;
  std::string nccl_why;
};

Path pick(const Eligibility& e, const char* fn) {
  switch (transport()) {
    case Transport::peer:
      if (!e.peer) throw NotSupportedError(f(fn) + "the peer transport cannot serve this call: " + e.peer_why);
      return Path::peer;
    case Transport::nccl:
      if (!e.nccl) throw NotSupportedError(f(fn) + "the nccl transport cannot serve this call: " + e.nccl_why);
      return Path::nccl;
    case Transport::copy: return Path::copy;
    case Transport::automatic: break;
  }
  if (e.peer) return Path::peer;
  if (e.nccl) return Path::nccl;
  return Path::copy;
}

bool wants(Path p) {  // whether pick() may take p (so eligibility work is skipped otherwise)
  const Transport t = transport();
  if (t == Transport::automatic) return p != Path::copy;
  return (t == Transport::peer && p == Path::peer) || (t == Transport::nccl && p == Path::nccl);
}

// Peer eligibility of `tensors` (all on device tensors) where `runner` accesses the others.
void peer_check(Eligibility& e, int runner, const std::vector<const Tensor*>& tensors) {
  if (!wants(Path::peer)) return;
  if (tensors.size() > static_cast<std::size_t>(ops::kMaxPeerBuffers) + 1) {
    e.peer_why = "more than " + std::to_string(ops::kMaxPeerBuffers) + " peers";
    return;
  }
  for (const Tensor* t : tensors) {
    if (!t->is_contiguous()) {
      e.peer_why = "a tensor is not contiguous";
      return;
    }
    if (!detail::peer_mappable(*t)) {
      e.peer_why = "a tensor's memory is not mapped on peer devices (expandable segments, the "
                   "cudaMallocAsync backend, or memory another library owns)";
      return;
    }
  }
  for (const Tensor* t : tensors) {
    if (!detail::peer_access(runner, t->device().index, &e.peer_why)) return;
  }
  e.peer = true;
}

void nccl_check(Eligibility& e, const std::vector<const Tensor*>& tensors, bool reduces) {
  if (!wants(Path::nccl)) return;
  if (!nccl::engine_available()) {
    e.nccl_why = "the collectives engine is unavailable";
    try {
      (void)nccl::version();
    } catch (const std::exception& ex) {
      e.nccl_why = ex.what();
    }
    return;
  }
  std::vector<int> seen;
  for (const Tensor* t : tensors) {
    if (!t->is_contiguous()) {
      e.nccl_why = "a tensor is not contiguous";
      return;
    }
    if (std::find(seen.begin(), seen.end(), t->device().index) != seen.end()) {
      e.nccl_why = "two tensors are on " + t->device().str() + " (one rank per device)";
      return;
    }
    seen.push_back(t->device().index);
  }
  if (reduces && tensors.front()->dtype() == DType::int16) {
    e.nccl_why = "NCCL has no 16-bit integer type to reduce";
    return;
  }
  e.nccl = true;
}

// ---- broadcast ----

void broadcast_impl(const Tensor& src, const std::vector<Tensor>& all_outs, const char* fn) {
  if (all_outs.empty()) return;
  // Outputs on the source's own device are plain local copies; the transport serves the rest.
  std::vector<Tensor> outs, local;
  for (const Tensor& o : all_outs) {
    (src.is_cuda() && o.device() == src.device() ? local : outs).push_back(o);
  }
  Eligibility e;
  Path path = Path::copy;  // a CPU source is copied up, whatever the transport
  if (src.is_cuda()) {
    std::vector<const Tensor*> all{&src};
    for (const Tensor& o : outs) all.push_back(&o);
    if (!outs.empty()) {
      peer_check(e, src.device().index, all);
      if (!e.peer) nccl_check(e, all, false);
      path = pick(e, fn);  // may refuse: nothing is written before this
    }
  }
  if (src.numel() == 0) return;
  for (Tensor o : local) o.copy_(src, /*non_blocking=*/true);
  if (outs.empty()) return;
  if (path == Path::copy) {
    for (Tensor o : outs) o.copy_(src, /*non_blocking=*/true);
    return;
  }
  const int sd = src.device().index;
  if (path == Path::nccl) {
    std::vector<int> devices{sd};
    for (const Tensor& o : outs) devices.push_back(o.device().index);
    const auto& comms = detail::cached_comms(devices);
    auto w = detail::wire_type(src.dtype(), src.numel(), nccl::ReduceOp::sum, false, fn);
    std::vector<CommArgs> args(devices.size());
    std::vector<StreamRef> streams;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const Tensor& t = i == 0 ? src : outs[i - 1];
      args[i] = CommArgs{CommKind::broadcast, src.data_ptr(), t.data_ptr(), w.count, w.type,
                         nccl::ReduceOp::sum, 0, detail::keep_alive({src, t})};
      streams.push_back(current_stream(devices[i]));
    }
    detail::launch_grouped(comms, std::move(args), streams);
    return;
  }
  // peer: one kernel on the source device writes every destination.
  StreamRef ss = current_stream(sd);
  std::vector<int> waited;
  for (const Tensor& o : outs) {
    const int d = o.device().index;
    if (std::find(waited.begin(), waited.end(), d) != waited.end()) continue;
    waited.push_back(d);
    order_after(ss, current_stream(d));  // the outputs' memory is free on their streams from here on
  }
  std::vector<Tensor> keep{src};
  std::vector<void*> dsts;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    dsts.push_back(outs[i].data_ptr());
    keep.push_back(outs[i]);
    if (dsts.size() == static_cast<std::size_t>(ops::kMaxPeerBuffers) || i + 1 == outs.size()) {
      detail::peer_copy(sd, src.data_ptr(), dsts, src.nbytes(), detail::keep_alive(keep));
      dsts.clear();
      keep.resize(1);
    }
  }
  for (int d : waited) {
    if (d != sd) order_after(current_stream(d), ss);
  }
}

// ---- flat buffers for the coalesced forms ----

// torch's _take_tensors: chunks of tensor indices, one dtype each, at most `limit` bytes
// (a larger tensor alone); buffers fill in first-seen dtype order and flush when full.
std::vector<std::vector<std::size_t>> take_tensors(const std::vector<Tensor>& tensors, std::size_t limit) {
  struct Buf {
    DType type;
    std::vector<std::size_t> idx;
    std::size_t bytes = 0;
  };
  std::vector<Buf> bufs;
  std::vector<std::vector<std::size_t>> chunks;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DType t = tensors[i].dtype();
    auto it = std::find_if(bufs.begin(), bufs.end(), [&](const Buf& b) { return b.type == t; });
    if (it == bufs.end()) it = bufs.insert(bufs.end(), Buf{t, {}, 0});
    const std::size_t size = tensors[i].nbytes();
    if (it->bytes + size > limit && it->bytes > 0) {
      chunks.push_back(std::move(it->idx));
      it->idx.clear();
      it->bytes = 0;
    }
    it->idx.push_back(i);
    it->bytes += size;
  }
  for (Buf& b : bufs) {
    if (!b.idx.empty()) chunks.push_back(std::move(b.idx));
  }
  return chunks;
}

// torch's flatten_dense_tensors: one tensor is viewed flat, several are packed in a new
// contiguous buffer on their device.
Tensor flatten(const std::vector<Tensor>& tensors, const std::vector<std::size_t>& idx) {
  if (idx.size() == 1) {
    const Tensor& t = tensors[idx[0]];
    return (t.is_contiguous() ? t : t.contiguous()).view({-1});
  }
  std::int64_t total = 0;
  for (std::size_t i : idx) total += tensors[i].numel();
  const Tensor& first = tensors[idx[0]];
  Tensor flat = empty({total}, TensorOptions{first.dtype(), first.device(), false});
  std::int64_t off = 0;
  for (std::size_t i : idx) {
    const Tensor& t = tensors[i];
    flat.slice(0, off, off + t.numel()).view(t.sizes()).copy_(t);
    off += t.numel();
  }
  return flat;
}

// Views of `flat` shaped like tensors[idx[k]], stored at out[idx[k]].
void unflatten(const Tensor& flat, const std::vector<Tensor>& like, const std::vector<std::size_t>& idx,
               std::vector<Tensor>& out) {
  std::int64_t off = 0;
  for (std::size_t i : idx) {
    const Tensor& t = like[i];
    out[i] = flat.slice(0, off, off + t.numel()).view(t.sizes());
    off += t.numel();
  }
}

// ---- reduce_add ----

struct ReduceCheck {
  std::size_t root = 0;
  int destination = 0;
};

ReduceCheck check_reduce_inputs(const std::vector<Tensor>& inputs, std::optional<int> destination,
                                const char* fn) {
  if (inputs.empty()) throw ValueError(f(fn) + "argument 'inputs' is empty");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_defined(inputs[i], fn, "input " + std::to_string(i));
    if (!inputs[i].is_cuda()) {
      throw ValueError(f(fn) + "expects all inputs to be on GPUs, but input " + std::to_string(i) +
                       " is on " + inputs[i].device().str());
    }
  }
  ReduceCheck r;
  const int count = device_count();
  r.destination = destination ? *destination : current_device();
  if (r.destination < 0 || r.destination >= count) {
    throw ValueError(f(fn) + "argument 'destination' must be a device index in [0, " +
                     std::to_string(count) + "), got " + std::to_string(r.destination));
  }
  const Tensor& first = inputs[0];
  bool found = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.sizes() != first.sizes()) {
      throw ValueError(f(fn) + "input " + std::to_string(i) + " has invalid size: got " +
                       size_text(t.sizes()) + ", but expected " + size_text(first.sizes()));
    }
    if (t.dtype() != first.dtype()) {
      throw ValueError(f(fn) + "input " + std::to_string(i) + " has dtype " + dtype_name(t.dtype()) +
                       ", but input 0 has " + dtype_name(first.dtype()) + " (all inputs need one dtype)");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (inputs[j].device() == t.device()) {
        throw ValueError(f(fn) + "inputs " + std::to_string(j) + " and " + std::to_string(i) +
                         " are both on " + t.device().str() + " (one input per device)");
      }
    }
    if (t.device().index == r.destination && !found) {
      r.root = i;
      found = true;
    }
  }
  if (!found) {
    throw ValueError(f(fn) + "expects destination to be on the same GPU with one of the tensors "
                     "(destination cuda:" + std::to_string(r.destination) + " holds none of the inputs)");
  }
  return r;
}

// Sum of validated inputs (at least two) on inputs[root]'s device.
Tensor reduce_add_impl(const std::vector<Tensor>& inputs, const ReduceCheck& rc, const char* fn) {
  const Tensor& rt = inputs[rc.root];
  const int dest = rc.destination;
  Eligibility e;
  {
    std::vector<const Tensor*> all;
    for (const Tensor& t : inputs) all.push_back(&t);
    // The root is reached locally: only the others need peer access from the destination.
    peer_check(e, dest, all);
    if (!e.peer) nccl_check(e, all, true);
  }
  const Path path = pick(e, fn);
  if (path == Path::copy) {
    const Device d = Device::cuda(dest);
    Tensor result;
    bool first = true;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (i == rc.root) continue;
      Tensor moved = inputs[i].to(d, /*non_blocking=*/true);
      if (first) {
        result = add(rt, moved);
        first = false;
      } else {
        add_(result, moved);
      }
    }
    return result;
  }
  Tensor result = empty(rt.sizes(), TensorOptions{rt.dtype(), rt.device(), false});
  if (rt.numel() == 0) return result;
  if (path == Path::nccl) {
    std::vector<int> devices;
    for (const Tensor& t : inputs) devices.push_back(t.device().index);
    const auto& comms = detail::cached_comms(devices);
    auto w = detail::wire_type(rt.dtype(), rt.numel(), nccl::ReduceOp::sum, true, fn);
    std::vector<CommArgs> args(inputs.size());
    std::vector<StreamRef> streams;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const bool root = i == rc.root;
      args[i] = CommArgs{CommKind::reduce, inputs[i].data_ptr(), root ? result.data_ptr() : nullptr,
                         w.count, w.type, w.op, static_cast<int>(rc.root),
                         detail::keep_alive(root ? std::vector<Tensor>{inputs[i], result}
                                                 : std::vector<Tensor>{inputs[i]})};
      streams.push_back(current_stream(devices[i]));
    }
    detail::launch_grouped(comms, std::move(args), streams);
    return result;
  }
  // peer: one kernel on the destination reads every input where it lives.
  StreamRef ds = current_stream(dest);
  std::vector<const void*> ptrs;
  std::vector<Tensor> keep{result};
  for (const Tensor& t : inputs) {
    ptrs.push_back(t.data_ptr());
    keep.push_back(t);
    if (t.device().index != dest) order_after(ds, current_stream(t.device().index));
  }
  detail::peer_reduce(dest, result.data_ptr(), ptrs, rt.numel(), rt.dtype(), detail::keep_alive(keep));
  for (const Tensor& t : inputs) {
    // The inputs' own streams may reuse or overwrite them only after the read.
    if (t.device().index != dest) order_after(current_stream(t.device().index), ds);
  }
  return result;
}

// ---- scatter / gather ----

void check_streams(const StreamList& streams, const std::vector<int>& devices, const char* fn) {
  if (streams.empty()) return;
  if (streams.size() != devices.size()) {
    throw ValueError(f(fn) + "got " + std::to_string(streams.size()) + " streams for " +
                     std::to_string(devices.size()) + " destinations (one per destination, or none)");
  }
  for (std::size_t i = 0; i < streams.size(); ++i) {
    if (streams[i] && streams[i]->device() != devices[i]) {
      throw ValueError(f(fn) + "expected the device associated with the stream at index " +
                       std::to_string(i) + " (was " + std::to_string(streams[i]->device()) +
                       ") to match the device supplied at that index (expected " +
                       std::to_string(devices[i]) + ")");
    }
  }
}

// dst.copy_(src) with `stream` current on dst's device (when given).
void copy_on(Tensor dst, const Tensor& src, const std::optional<StreamRef>& stream) {
  if (stream) {
    StreamGuard guard(*stream);
    dst.copy_(src, /*non_blocking=*/true);
  } else {
    dst.copy_(src, /*non_blocking=*/true);
  }
}

}  // namespace

const char* transport_name(Transport t) noexcept {
  switch (t) {
    case Transport::automatic: return "auto";
    case Transport::peer: return "peer";
    case Transport::nccl: return "nccl";
    case Transport::copy: return "copy";
  }
  return "auto";
}

void set_transport(Transport t) noexcept { g_transport.store(static_cast<int>(t), std::memory_order_relaxed); }
Transport transport() noexcept { return static_cast<Transport>(g_transport.load(std::memory_order_relaxed)); }

std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<int>& devices) {
  check_defined(tensor, "broadcast", "argument 'tensor'");
  check_devices(devices, "broadcast", false);
  std::vector<Tensor> result(devices.size());
  std::vector<Tensor> outs;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (tensor.is_cuda() && tensor.device().index == devices[i]) {
      result[i] = tensor;  // already there (torch returns the tensor itself)
    } else {
      result[i] = empty(tensor.sizes(), TensorOptions{tensor.dtype(), Device::cuda(devices[i]), false});
      outs.push_back(result[i]);
    }
  }
  broadcast_impl(tensor, outs, "broadcast");
  return result;
}

std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Tensor>& out) {
  check_defined(tensor, "broadcast", "argument 'tensor'");
  if (out.empty()) throw ValueError(f("broadcast") + "argument 'out' is empty");
  for (std::size_t i = 0; i < out.size(); ++i) {
    check_defined(out[i], "broadcast", "output tensor " + std::to_string(i));
    if (!out[i].is_cuda()) {
      throw ValueError(f("broadcast") + "expected all output tensors to be CUDA tensors, but output tensor at index " +
                       std::to_string(i) + " has device '" + out[i].device().str() + "'");
    }
    if (out[i].sizes() != tensor.sizes()) {
      throw ValueError(f("broadcast") + "expected all output tensors to have the same shape as the source tensor " +
                       shape_str(tensor.sizes()) + ", but output tensor at index " + std::to_string(i) +
                       " has shape " + shape_str(out[i].sizes()));
    }
    if (out[i].dtype() != tensor.dtype()) {
      throw ValueError(f("broadcast") + "output tensor at index " + std::to_string(i) + " has dtype " +
                       dtype_name(out[i].dtype()) + " but the source is " + dtype_name(tensor.dtype()));
    }
  }
  broadcast_impl(tensor, out, "broadcast");
  return out;
}

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<int>& devices,
                                                     std::size_t buffer_size) {
  check_devices(devices, "broadcast_coalesced", false);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "broadcast_coalesced", "tensor " + std::to_string(i));
    if (!tensors[i].is_cuda() || tensors[i].device().index != devices[0]) {
      throw ValueError(f("broadcast_coalesced") + "all tensors must be on devices[0] (cuda:" +
                       std::to_string(devices[0]) + "), but tensor " + std::to_string(i) + " is on " +
                       tensors[i].device().str());
    }
  }
  std::vector<std::vector<Tensor>> outputs(devices.size());
  outputs[0] = tensors;
  for (std::size_t d = 1; d < devices.size(); ++d) outputs[d].resize(tensors.size());
  for (const auto& chunk : take_tensors(tensors, buffer_size)) {
    const Tensor flat = flatten(tensors, chunk);
    const std::vector<int> rest(devices.begin() + 1, devices.end());
    std::vector<Tensor> copies;
    for (int d : rest) copies.push_back(empty(flat.sizes(), TensorOptions{flat.dtype(), Device::cuda(d), false}));
    broadcast_impl(flat, copies, "broadcast_coalesced");
    for (std::size_t d = 1; d < devices.size(); ++d) unflatten(copies[d - 1], tensors, chunk, outputs[d]);
  }
  return outputs;
}

Tensor reduce_add(const std::vector<Tensor>& inputs, std::optional<int> destination) {
  const ReduceCheck rc = check_reduce_inputs(inputs, destination, "reduce_add");
  if (inputs.size() == 1) return inputs[0];
  return reduce_add_impl(inputs, rc, "reduce_add");
}

std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs,
                                         std::optional<int> destination, std::size_t buffer_size) {
  const char* fn = "reduce_add_coalesced";
  if (inputs.empty()) throw ValueError(f(fn) + "argument 'inputs' is empty");
  const std::vector<Tensor>& first = inputs[0];
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].size() != first.size()) {
      throw ValueError(f(fn) + "every device needs the same number of tensors, but inputs[" +
                       std::to_string(i) + "] has " + std::to_string(inputs[i].size()) +
                       " and inputs[0] has " + std::to_string(first.size()));
    }
    for (std::size_t j = 0; j < inputs[i].size(); ++j) {
      const Tensor& t = inputs[i][j];
      check_defined(t, fn, "inputs[" + std::to_string(i) + "][" + std::to_string(j) + "]");
      if (!t.is_cuda() || t.device() != inputs[i][0].device()) {
        throw ValueError(f(fn) + "inputs[" + std::to_string(i) + "] must hold tensors of one device, but tensor " +
                         std::to_string(j) + " is on " + t.device().str() + " and tensor 0 on " +
                         inputs[i][0].device().str());
      }
      if (t.sizes() != first[j].sizes() || t.dtype() != first[j].dtype()) {
        throw ValueError(f(fn) + "tensor " + std::to_string(j) + " of inputs[" + std::to_string(i) +
                         "] is " + dtype_name(t.dtype()) + " " + shape_str(t.sizes()) +
                         " but on inputs[0] it is " + dtype_name(first[j].dtype()) + " " +
                         shape_str(first[j].sizes()));
      }
    }
  }
  if (first.empty()) return {};
  std::vector<Tensor> heads;
  for (const auto& list : inputs) heads.push_back(list[0]);
  const ReduceCheck rc = check_reduce_inputs(heads, destination, fn);  // devices, destination
  std::vector<Tensor> outputs(first.size());
  for (const auto& chunk : take_tensors(first, buffer_size)) {
    std::vector<Tensor> flats;
    for (const auto& list : inputs) flats.push_back(flatten(list, chunk));
    const Tensor sum = flats.size() == 1 ? flats[0] : reduce_add_impl(flats, rc, fn);
    unflatten(sum, first, chunk, outputs);
  }
  return outputs;
}

std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<int>& devices,
                            const std::optional<std::vector<std::int64_t>>& chunk_sizes,
                            std::int64_t dim, const StreamList& streams) {
  const char* fn = "scatter";
  check_defined(tensor, fn, "argument 'tensor'");
  if (devices.empty()) throw ValueError(f(fn) + "expected at least one device to scatter to");
  check_devices(devices, fn, true);
  dim = wrap_dim(dim, tensor.dim(), fn);
  const std::int64_t extent = tensor.size(dim);
  std::vector<std::int64_t> sizes;
  if (chunk_sizes) {
    if (chunk_sizes->size() != devices.size()) {
      throw ValueError(f(fn) + "expected devices and chunk_sizes to be of same length, but got len(devices) = " +
                       std::to_string(devices.size()) + " and len(chunk_sizes) = " +
                       std::to_string(chunk_sizes->size()));
    }
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < chunk_sizes->size(); ++i) {
      const std::int64_t c = (*chunk_sizes)[i];
      if (c < 0) {
        throw ValueError(f(fn) + "chunk size at index " + std::to_string(i) + " is negative (" +
                         std::to_string(c) + ")");
      }
      sum += c;
    }
    if (sum != extent) {
      throw ValueError(f(fn) + "given chunk sizes don't sum up to the tensor's size (sum(chunk_sizes) == " +
                       std::to_string(sum) + ", but expected " + std::to_string(extent) + ")");
    }
    sizes = *chunk_sizes;
  } else {  // torch.chunk
    const auto n = static_cast<std::int64_t>(devices.size());
    const std::int64_t step = (extent + n - 1) / n;
    if (step == 0) {
      sizes.assign(devices.size(), 0);
    } else {
      for (std::int64_t start = 0; start < extent; start += step) sizes.push_back(std::min(step, extent - start));
    }
  }
  check_streams(streams, devices, fn);
  // Allocate every copy first, then move data.
  std::vector<Tensor> parts, result(sizes.size());
  std::int64_t start = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    parts.push_back(tensor.slice(dim, start, start + sizes[i]));
    start += sizes[i];
    const int d = devices[i];
    result[i] = tensor.is_cuda() && tensor.device().index == d
                    ? parts[i]
                    : empty(parts[i].sizes(), TensorOptions{tensor.dtype(), Device::cuda(d), false});
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (result[i].storage() == tensor.storage()) continue;
    copy_on(result[i], parts[i], streams.empty() ? std::nullopt : streams[i]);
  }
  return result;
}

std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Tensor>& out, std::int64_t dim,
                            const StreamList& streams) {
  const char* fn = "scatter";
  check_defined(tensor, fn, "argument 'tensor'");
  if (out.empty()) throw ValueError(f(fn) + "argument 'out' is empty");
  dim = wrap_dim(dim, tensor.dim(), fn);
  std::int64_t total = 0;
  std::vector<int> devices;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Tensor& o = out[i];
    check_defined(o, fn, "output tensor " + std::to_string(i));
    if (!o.is_cuda()) {
      throw ValueError(f(fn) + "expected all output tensors to be CUDA tensors, but output tensor at index " +
                       std::to_string(i) + " has device '" + o.device().str() + "'");
    }
    if (o.dtype() != tensor.dtype()) {
      throw ValueError(f(fn) + "output tensor at index " + std::to_string(i) + " has dtype " +
                       dtype_name(o.dtype()) + " but the source is " + dtype_name(tensor.dtype()));
    }
    bool ok = o.dim() == tensor.dim();
    for (std::int64_t k = 0; ok && k < o.dim(); ++k) ok = k == dim || o.size(k) == tensor.size(k);
    if (!ok) {
      throw ValueError(f(fn) + "output tensor at index " + std::to_string(i) + " has incorrect shape " +
                       shape_str(o.sizes()) + ": expected the source's shape " + shape_str(tensor.sizes()) +
                       " except along the scatter dim " + std::to_string(dim));
    }
    total += o.size(dim);
    devices.push_back(o.device().index);
  }
  if (total != tensor.size(dim)) {
    throw ValueError(f(fn) + "total size for output tensors along scatter dim (" + std::to_string(total) +
                     ") does not match the source tensor size at dim (" + std::to_string(tensor.size(dim)) + ")");
  }
  check_streams(streams, devices, fn);
  std::int64_t start = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t n = out[i].size(dim);
    copy_on(out[i], tensor.slice(dim, start, start + n), streams.empty() ? std::nullopt : streams[i]);
    start += n;
  }
  return out;
}

namespace {
// Shape of the concatenation of `tensors` along dim (validated), and the wrapped dim.
Shape gather_shape(const std::vector<Tensor>& tensors, std::int64_t& dim, const char* fn) {
  if (tensors.empty()) throw ValueError(f(fn) + "expected at least one tensor to gather from");
  const Tensor& first = tensors[0];
  check_defined(first, fn, "input tensor 0");
  dim = wrap_dim(dim, first.dim(), fn);
  Shape expected = first.sizes();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined(t, fn, "input tensor " + std::to_string(i));
    if (!t.is_cuda()) {
      throw ValueError(f(fn) + "expected all input tensors to be CUDA tensors, but tensor at index " +
                       std::to_string(i) + " has device '" + t.device().str() + "'");
    }
    if (t.dim() != first.dim()) {
      throw ValueError(f(fn) + "expected all input tensors to have the same number of dimensions (" +
                       std::to_string(first.dim()) + "), but tensor at index " + std::to_string(i) +
                       " has " + std::to_string(t.dim()) + " dimensions (shape " + shape_str(t.sizes()) + ")");
    }
    if (t.dtype() != first.dtype()) {
      throw ValueError(f(fn) + "input tensor at index " + std::to_string(i) + " has dtype " +
                       dtype_name(t.dtype()) + " but tensor 0 has " + dtype_name(first.dtype()));
    }
    expected[static_cast<std::size_t>(dim)] = t.size(dim);
    if (t.sizes() != expected) {
      throw ValueError(f(fn) + "input tensor at index " + std::to_string(i) + " has invalid shape " +
                       shape_str(t.sizes()) + ", but expected " + shape_str(expected));
    }
    total += t.size(dim);
  }
  expected[static_cast<std::size_t>(dim)] = total;
  return expected;
}

Tensor gather_into(const std::vector<Tensor>& tensors, const Tensor& out, std::int64_t dim) {
  std::int64_t start = 0;
  for (const Tensor& t : tensors) {
    const std::int64_t n = t.size(dim);
    out.slice(dim, start, start + n).copy_(t, /*non_blocking=*/out.is_cuda());
    start += n;
  }
  return out;
}
}  // namespace

Tensor gather(const std::vector<Tensor>& tensors, std::int64_t dim, std::optional<Device> destination) {
  const Shape shape = gather_shape(tensors, dim, "gather");
  Device dest = destination ? *destination : Device::cuda(kCurrentDevice);
  if (dest.is_cuda()) {
    const int count = device_count();
    if (dest.index < 0 || dest.index >= count) {
      throw ValueError(f("gather") + "argument 'destination' must be a device in [0, " + std::to_string(count) +
                       ") or the CPU, got cuda:" + std::to_string(dest.index));
    }
  }
  Tensor out = empty(shape, TensorOptions{tensors[0].dtype(), dest, false});
  return gather_into(tensors, out, dim);
}

Tensor gather(const std::vector<Tensor>& tensors, const Tensor& out, std::int64_t dim) {
  const Shape shape = gather_shape(tensors, dim, "gather");
  check_defined(out, "gather", "argument 'out'");
  if (out.sizes() != shape) {
    throw ValueError(f("gather") + "expected out tensor to have shape " + shape_str(shape) + ", but got " +
                     shape_str(out.sizes()));
  }
  if (out.dtype() != tensors[0].dtype()) {
    throw ValueError(f("gather") + "out has dtype " + std::string(dtype_name(out.dtype())) +
                     " but the inputs are " + dtype_name(tensors[0].dtype()));
  }
  return gather_into(tensors, out, dim);
}

}  // namespace cudakit::comm
