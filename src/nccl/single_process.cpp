// torch.cuda.nccl's single-process collectives: one tensor per device, one thread.
#include "nccl/single_process.hpp"

#include <map>
#include <mutex>

#include "backend/comm_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/nccl.hpp"
#include "nccl/communicator_impl.hpp"
#include "nccl/wire.hpp"

namespace cudakit::detail {

namespace {
struct CommCache {
  std::mutex mu;
  std::map<std::vector<int>, std::vector<std::shared_ptr<BackendComm>>> comms;
};
CommCache& cache() {
  static auto* c = new CommCache();  // leaked: no communicator is destroyed during exit
  return *c;
}
}  // namespace

const std::vector<std::shared_ptr<BackendComm>>& cached_comms(const std::vector<int>& devices) {
  thread_local std::vector<int> last_key;
  thread_local const std::vector<std::shared_ptr<BackendComm>>* last = nullptr;
  if (last && last_key == devices) return *last;
  CommCache& c = cache();
  std::lock_guard lock(c.mu);
  auto it = c.comms.find(devices);
  if (it == c.comms.end()) it = c.comms.emplace(devices, comm_ops().comm_init_all(devices)).first;
  last_key = devices;
  last = &it->second;  // map nodes are stable and never erased
  return *last;
}

void launch_grouped(const std::vector<std::shared_ptr<BackendComm>>& comms,
                    std::vector<CommArgs> args, const std::vector<StreamRef>& streams) {
  CommOps& be = comm_ops();
  be.comm_group_start();
  try {
    for (std::size_t i = 0; i < comms.size(); ++i) {
      DeviceGuard guard(comms[i]->device());
      comms[i]->enqueue(std::move(args[i]), streams[i].handle());
    }
  } catch (...) {
    try {
      be.comm_group_end();  // launches what was enqueued; the error below is what matters
    } catch (...) {
    }
    throw;
  }
  be.comm_group_end();
}

}  // namespace cudakit::detail

namespace cudakit::nccl {
namespace {

using detail::BackendComm;
using detail::CommArgs;
using detail::CommKind;

// torch's check_inputs: a non-empty list of dense contiguous device tensors on distinct
// devices, one dtype, equal sizes; outputs[i] on inputs[i]'s device with
// outputs[i].numel() * output_multiplier == inputs[i].numel() * input_multiplier.
void check_inputs(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                  std::int64_t input_multiplier, std::int64_t output_multiplier, const char* fn) {
  const std::string f = std::string(fn) + "(): ";
  if (inputs.empty()) throw ValueError(f + "argument 'inputs' is empty (one tensor per device is needed)");
  if (outputs.size() != inputs.size()) {
    throw ValueError(f + "inputs and outputs must have the same length, got " +
                     std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                     " outputs");
  }
  const DType dtype = inputs[0].defined() ? inputs[0].dtype() : DType::float32;
  const std::int64_t numel = inputs[0].defined() ? inputs[0].numel() : 0;
  std::vector<int> devices;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    const Tensor& out = outputs[i];
    const std::string at = " at index " + std::to_string(i);
    if (!in.defined() || !out.defined()) throw ValueError(f + "undefined tensor" + at);
    if (!in.is_cuda() || !out.is_cuda()) {
      throw ValueError(f + "inputs and outputs must be device tensors, but the pair" + at +
                       " is on " + in.device().str() + " / " + out.device().str());
    }
    if (in.dtype() != dtype || out.dtype() != dtype) {
      throw ValueError(f + "all inputs and outputs must have one dtype (" + dtype_name(dtype) +
                       "), but the pair" + at + " is " + dtype_name(in.dtype()) + " / " +
                       dtype_name(out.dtype()));
    }
    if (!in.is_contiguous() || !out.is_contiguous()) {
      throw ValueError(f + "all inputs and outputs must be contiguous (the pair" + at + " is not)");
    }
    const int d = in.device().index;
    for (int s : devices) {
      if (s == d) throw ValueError(f + "inputs must be on distinct devices, but cuda:" + std::to_string(d) + " appears twice");
    }
    devices.push_back(d);
    if (out.device().index != d) {
      throw ValueError(f + "the output" + at + " is on " + out.device().str() +
                       " but its input is on cuda:" + std::to_string(d));
    }
    if (in.numel() != numel) {
      throw ValueError(f + "all inputs must have the same number of elements (" + std::to_string(numel) +
                       "), but the input" + at + " has " + std::to_string(in.numel()));
    }
    if (out.numel() * output_multiplier != numel * input_multiplier) {
      throw ValueError(f + "the output" + at + " has " + std::to_string(out.numel()) +
                       " elements, expected " + std::to_string(numel * input_multiplier / output_multiplier));
    }
  }
}

std::vector<int> devices_of(const std::vector<Tensor>& inputs) {
  std::vector<int> d;
  for (const Tensor& t : inputs) d.push_back(t.device().index);
  return d;
}

std::vector<StreamRef> streams_for(const std::vector<Tensor>& inputs, const StreamList& streams,
                                   const char* fn) {
  if (!streams.empty() && streams.size() != inputs.size()) {
    throw ValueError(std::string(fn) + "(): got " + std::to_string(streams.size()) +
                     " streams for " + std::to_string(inputs.size()) + " inputs (one per input, or none)");
  }
  std::vector<StreamRef> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const int d = inputs[i].device().index;
    if (!streams.empty() && streams[i]) {
      if (streams[i]->device() != d) {
        throw ValueError(std::string(fn) + "(): the stream at index " + std::to_string(i) +
                         " is on cuda:" + std::to_string(streams[i]->device()) +
                         " but the input there is on cuda:" + std::to_string(d));
      }
      out.push_back(*streams[i]);
    } else {
      out.push_back(current_stream(d));
    }
  }
  return out;
}

std::vector<std::shared_ptr<BackendComm>> comms_for(const std::vector<Tensor>& inputs,
                                                    const std::vector<Communicator>& comms,
                                                    const char* fn) {
  if (comms.empty()) return detail::cached_comms(devices_of(inputs));
  if (comms.size() != inputs.size()) {
    throw ValueError(std::string(fn) + "(): got " + std::to_string(comms.size()) +
                     " communicators for " + std::to_string(inputs.size()) + " inputs");
  }
  std::vector<std::shared_ptr<BackendComm>> out;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const Communicator& c = comms[i];
    if (!c.valid()) throw ValueError(std::string(fn) + "(): the communicator at index " + std::to_string(i) + " is empty");
    if (c.size() != static_cast<int>(inputs.size()) || c.rank() != static_cast<int>(i) ||
        c.device() != inputs[i].device().index) {
      throw ValueError(std::string(fn) + "(): the communicator at index " + std::to_string(i) +
                       " is rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) +
                       " on cuda:" + std::to_string(c.device()) + "; expected rank " +
                       std::to_string(i) + " of " + std::to_string(inputs.size()) + " on " +
                       inputs[i].device().str());
    }
    c.check();
    out.push_back(c.impl()->backend_comm());
  }
  return out;
}

void check_root(int root, std::size_t n, const char* fn) {
  if (root < 0 || static_cast<std::size_t>(root) >= n) {
    throw ValueError(std::string(fn) + "(): argument 'root' must be an index into the inputs, in [0, " +
                     std::to_string(n) + "), got " + std::to_string(root));
  }
}

void run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
         std::vector<CommArgs> args, const StreamList& streams,
         const std::vector<Communicator>& comms, const char* fn) {
  auto ss = streams_for(inputs, streams, fn);
  auto cs = comms_for(inputs, comms, fn);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::vector<Tensor> used{inputs[i]};
    if (i < outputs.size() && outputs[i].defined()) used.push_back(outputs[i]);
    for (const Tensor& t : used) detail::note_stream_use(t, ss[i]);
    args[i].keep_alive = detail::keep_alive(std::move(used));
  }
  detail::launch_grouped(cs, std::move(args), ss);
}

}  // namespace

void all_reduce(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op,
                const StreamList& streams, const std::vector<Communicator>& comms) {
  check_inputs(inputs, outputs, 1, 1, "all_reduce");
  auto w = detail::wire_type(inputs[0].dtype(), inputs[0].numel(), op, true, "all_reduce()");
  std::vector<CommArgs> args(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args[i] = CommArgs{CommKind::all_reduce, inputs[i].data_ptr(), outputs[i].data_ptr(), w.count, w.type, w.op, 0, {}};
  }
  run(inputs, outputs, std::move(args), streams, comms, "all_reduce");
}

void reduce(const std::vector<Tensor>& inputs, const Tensor& output, int root, ReduceOp op,
            const StreamList& streams, const std::vector<Communicator>& comms) {
  if (inputs.empty()) throw ValueError("reduce(): argument 'inputs' is empty (one tensor per device is needed)");
  check_root(root, inputs.size(), "reduce");
  std::vector<Tensor> outs = inputs;  // uniform checks; the root's slot holds the real output
  outs[static_cast<std::size_t>(root)] = output;
  check_inputs(inputs, outs, 1, 1, "reduce");
  auto w = detail::wire_type(inputs[0].dtype(), inputs[0].numel(), op, true, "reduce()");
  std::vector<CommArgs> args(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    void* recv = static_cast<int>(i) == root ? output.data_ptr() : nullptr;
    args[i] = CommArgs{CommKind::reduce, inputs[i].data_ptr(), recv, w.count, w.type, w.op, root, {}};
  }
  std::vector<Tensor> kept(inputs.size());
  kept[static_cast<std::size_t>(root)] = output;
  run(inputs, kept, std::move(args), streams, comms, "reduce");
}

void broadcast(const std::vector<Tensor>& tensors, int root, const StreamList& streams,
               const std::vector<Communicator>& comms) {
  if (tensors.empty()) throw ValueError("broadcast(): argument 'inputs' is empty (one tensor per device is needed)");
  check_root(root, tensors.size(), "broadcast");
  check_inputs(tensors, tensors, 1, 1, "broadcast");
  auto w = detail::wire_type(tensors[0].dtype(), tensors[0].numel(), ReduceOp::sum, false, "broadcast()");
  std::vector<CommArgs> args(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    args[i] = CommArgs{CommKind::broadcast, tensors[i].data_ptr(), tensors[i].data_ptr(), w.count, w.type, ReduceOp::sum, root, {}};
  }
  run(tensors, {}, std::move(args), streams, comms, "broadcast");
}

void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const StreamList& streams, const std::vector<Communicator>& comms) {
  check_inputs(inputs, outputs, static_cast<std::int64_t>(inputs.size()), 1, "all_gather");
  auto w = detail::wire_type(inputs[0].dtype(), inputs[0].numel(), ReduceOp::sum, false, "all_gather()");
  std::vector<CommArgs> args(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args[i] = CommArgs{CommKind::all_gather, inputs[i].data_ptr(), outputs[i].data_ptr(), w.count, w.type, ReduceOp::sum, 0, {}};
  }
  run(inputs, outputs, std::move(args), streams, comms, "all_gather");
}

void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op,
                    const StreamList& streams, const std::vector<Communicator>& comms) {
  check_inputs(inputs, outputs, 1, static_cast<std::int64_t>(inputs.size()), "reduce_scatter");
  auto w = detail::wire_type(outputs[0].dtype(), outputs[0].numel(), op, true, "reduce_scatter()");
  std::vector<CommArgs> args(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args[i] = CommArgs{CommKind::reduce_scatter, inputs[i].data_ptr(), outputs[i].data_ptr(), w.count, w.type, w.op, 0, {}};
  }
  run(inputs, outputs, std::move(args), streams, comms, "reduce_scatter");
}

}  // namespace cudakit::nccl
