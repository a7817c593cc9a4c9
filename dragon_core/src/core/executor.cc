#include "executor.h"

#include "device.h"

namespace dragon {

int64_t Plan::planned_bytes() const {
  int64_t total = 0;
  for (int64_t b : buffer_sizes_) total += b;
  return total;
}

std::vector<Tensor> Plan::Run(const std::vector<Tensor>& feeds) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (feeds.size() != inputs_.size())
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("graph '", name_, "' expects ", inputs_.size(), " inputs, got ",
                            feeds.size()));
  std::vector<Tensor> slots(num_slots_);
  for (size_t i = 0; i < feeds.size(); ++i) slots[inputs_[i]] = feeds[i];
  DgDevice device = feeds.empty() ? kHost : feeds[0]->device();
  if (buffers_.size() != buffer_sizes_.size()) {
    buffers_.clear();
    for (int64_t bytes : buffer_sizes_)
      buffers_.push_back(TensorImpl::Empty(device, DG_UINT8, {bytes}));
  }
  std::vector<Tensor> in, preset;
  for (PlanOp& p : ops_) {
    in.clear();
    for (int32_t s : p.inputs) {
      if (!slots[s])
        throw CoreError(DG_INTERNAL, dg::Str("graph '", name_, "': op '", p.name,
                                             "' reads slot ", s, " before it is written"));
      in.push_back(slots[s]);
    }
    const std::vector<Tensor>* pre = nullptr;
    if (p.inplace_input >= 0 || !p.out_buffers.empty()) {
      preset.assign(p.outputs.size(), nullptr);
      for (size_t i = 0; i < p.out_buffers.size() && i < preset.size(); ++i)
        if (p.out_buffers[i] >= 0) preset[i] = buffers_[p.out_buffers[i]];
      // In place only when the slot holds the last reference to the input
      // (its storage is then owned by this plan alone).
      if (p.inplace_input >= 0) {
        const Tensor& src = slots[p.inplace_input];
        if (src && src.use_count() <= 2 && src->storage().use_count() == 1)
          preset[0] = src;
      }
      pre = &preset;
    }
    std::vector<Tensor> out;
    try {
      if (p.op->seed_attr >= 0) {
        std::vector<AttrValue> attrs = p.attrs;  // keep seed = -1 for the next run
        out = Dispatch(*p.op, in, attrs, device, pre);
      } else {
        out = Dispatch(*p.op, in, p.attrs, device, pre);
      }
    } catch (CoreError& e) {
      std::string shapes;
      for (size_t i = 0; i < in.size(); ++i)
        shapes += dg::Str(i ? ", " : "", DTypeName(in[i]->dtype()), ShapeToString(in[i]->shape()));
      CoreError wrapped(e.code(),
                        dg::Str("graph '", name_, "', op '", p.name, "' (", p.op->name,
                                ", inputs ", shapes, ") failed: ", e.what()),
                        e.kind());
      wrapped.op = e.op;
      wrapped.kernel = e.kernel;
      wrapped.plugin = e.plugin;
      throw wrapped;
    }
    for (size_t i = 0; i < out.size() && i < p.outputs.size(); ++i) slots[p.outputs[i]] = std::move(out[i]);
    for (int32_t s : p.release) slots[s].reset();
  }
  std::vector<Tensor> result;
  result.reserve(outputs_.size());
  for (int32_t s : outputs_) result.push_back(slots[s]);
  return result;
}

}  // namespace dragon
