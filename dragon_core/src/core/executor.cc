#include "executor.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <thread>
#include <algorithm>
#include <chrono>

#include "device.h"
#include "stream.h"

namespace dragon {

int64_t Plan::planned_bytes() const {
  int64_t total = 0;
  for (int64_t b : buffer_sizes_) total += b;
  return total;
}

void Plan::SetProfiling(bool on) {
  std::lock_guard<std::mutex> lock(run_mu_);
  DrainTimings(false);
  profiling_ = on;
  op_ns_.assign(ops_.size(), 0);
  op_calls_.assign(ops_.size(), 0);
  profile_runs_ = 0;
}

int64_t Plan::profile_runs() {
  std::lock_guard<std::mutex> lock(run_mu_);
  return profile_runs_;
}

void Plan::DrainTimings(bool add) {
  std::vector<EventTiming> timings;
  {
    std::lock_guard<std::mutex> tl(timing_mu_);
    timings.swap(timings_);
  }
  for (const EventTiming& t : timings) {  // waits for the timed work
    SyncEvent(t.device, t.end);
    if (add) {
      const float ms = ElapsedMs(t.device, t.start, t.end);
      if (t.op >= 0 && static_cast<size_t>(t.op) < op_ns_.size())
        op_ns_[t.op] += static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    }
    ReleaseEvent(t.device, t.start);
    ReleaseEvent(t.device, t.end);
  }
}

void* Plan::StartTiming(DgDevice device) {
  if (!StreamOrdered(device)) return nullptr;
  void* e = AcquireEvent(device);
  RecordEvent(device, e, CurrentStream(device));
  return e;
}

void Plan::EndTiming(int32_t op, DgDevice device, void* start) {
  void* e = AcquireEvent(device);
  RecordEvent(device, e, CurrentStream(device));
  std::lock_guard<std::mutex> lock(timing_mu_);
  timings_.push_back({op, device, start, e});
}

std::vector<Plan::OpTiming> Plan::Profile() {
  std::lock_guard<std::mutex> lock(run_mu_);
  DrainTimings(true);
  std::vector<OpTiming> out;
  for (size_t k = 0; k < ops_.size(); ++k) {
    const PlanOp& p = ops_[k];
    OpTiming t;
    t.name = p.name;
    t.type = p.kind == PlanOp::kOp ? p.op->name : (p.kind == PlanOp::kCond ? "Cond" : "While");
    if (k < op_ns_.size()) {
      t.calls = op_calls_[k];
      t.total_ns = op_ns_[k];
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Truth(const Tensor& t, const std::string& where) {
  if (t->numel() != 1)
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str(where, ": the predicate must have one element, got shape ",
                            ShapeToString(t->shape())));
  Tensor host = t->device().type == kHost.type ? t : CopyTo(t, kHost);
  const char* p = static_cast<const char*>(host->data());
  for (size_t i = 0; i < host->itemsize(); ++i)
    if (p[i] != 0) return true;
  return false;
}

}  // namespace

std::vector<Tensor> Plan::RunControl(PlanOp& p, const std::vector<Tensor>& in) {
  std::string where = dg::Str("graph '", name_, "', op '", p.name, "'");
  auto slice = [&](size_t from, size_t n) {
    return std::vector<Tensor>(in.begin() + from, in.begin() + from + n);
  };
  if (p.kind == PlanOp::kCond) {
    bool taken = Truth(in[0], where);
    std::vector<Tensor> feeds = slice(1, p.num_operands);
    size_t caps = 1 + p.num_operands;
    if (taken) {
      auto c = slice(caps, p.num_then_captures);
      feeds.insert(feeds.end(), c.begin(), c.end());
      return p.then_plan->Run(feeds);
    }
    auto c = slice(caps + p.num_then_captures, p.num_else_captures);
    feeds.insert(feeds.end(), c.begin(), c.end());
    return p.else_plan->Run(feeds);
  }
  // While.
  std::vector<Tensor> vars = slice(0, p.num_operands);
  std::vector<Tensor> cond_caps = slice(p.num_operands, p.num_then_captures);
  std::vector<Tensor> body_caps = slice(p.num_operands + p.num_then_captures, p.num_else_captures);
  for (int64_t it = 0; p.max_iterations < 0 || it < p.max_iterations; ++it) {
    std::vector<Tensor> feeds = vars;
    feeds.insert(feeds.end(), cond_caps.begin(), cond_caps.end());
    if (!Truth(p.then_plan->Run(feeds).at(0), where)) break;
    feeds = vars;
    feeds.insert(feeds.end(), body_caps.begin(), body_caps.end());
    std::vector<Tensor> next = p.else_plan->Run(feeds);
    if (next.size() != vars.size())
      throw CoreError(DG_INVALID_ARGUMENT, dg::Str(where, ": the body returned ", next.size(),
                                                   " values for ", vars.size(), " loop variables"));
    for (size_t i = 0; i < vars.size(); ++i) {
      if (next[i]->dtype() != vars[i]->dtype() || next[i]->shape() != vars[i]->shape())
        throw CoreError(DG_INVALID_ARGUMENT,
                        dg::Str(where, ": loop variable ", i, " changed from ",
                                DTypeName(vars[i]->dtype()), ShapeToString(vars[i]->shape()),
                                " to ", DTypeName(next[i]->dtype()),
                                ShapeToString(next[i]->shape()), " in the body"));
    }
    vars = std::move(next);
  }
  return vars;
}

std::vector<Tensor> Plan::RunOne(PlanOp& p, std::vector<Tensor>& in, DgDevice device,
                                 const std::vector<Tensor>* pre) {
  if (p.kind != PlanOp::kOp) return RunControl(p, in);
  try {
    if (p.op->seed_attr >= 0) {
      std::vector<AttrValue> attrs = p.attrs;  // keep seed = -1 for the next run
      return Dispatch(*p.op, in, attrs, device, pre, p.site.get());
    }
    return Dispatch(*p.op, in, p.attrs, device, pre, p.site.get());
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
}

void Plan::RunParallel(std::vector<Tensor>& slots, DgDevice device) {
  const size_t n = ops_.size();
  // Who writes each slot; how many producers each op waits for; who reads.
  std::vector<int32_t> writer(num_slots_, -1);
  for (size_t k = 0; k < n; ++k)
    for (int32_t s : ops_[k].outputs) writer[s] = static_cast<int32_t>(k);
  std::vector<int32_t> waiting(n, 0);
  std::vector<std::vector<int32_t>> consumers(n);
  std::vector<int32_t> readers(num_slots_, 0);
  std::vector<char> releasable(num_slots_, 0);
  for (size_t k = 0; k < n; ++k) {
    std::vector<int32_t> seen;
    for (int32_t s : ops_[k].inputs) {
      ++readers[s];
      int32_t w = writer[s];
      if (w >= 0 && std::find(seen.begin(), seen.end(), w) == seen.end()) {
        seen.push_back(w);
        ++waiting[k];
        consumers[w].push_back(static_cast<int32_t>(k));
      }
    }
    for (int32_t s : ops_[k].release) releasable[s] = 1;
  }
  // Collectives (ABI 1.3) keep their graph order: every rank must issue
  // them in the same sequence, so each waits for the previous one.
  int32_t last_collective = -1;
  for (size_t k = 0; k < n; ++k) {
    const PlanOp& p = ops_[k];
    if (p.kind != PlanOp::kOp || !(p.op->flags & DG_OP_COLLECTIVE)) continue;
    if (last_collective >= 0) {
      ++waiting[k];
      consumers[last_collective].push_back(static_cast<int32_t>(k));
    }
    last_collective = static_cast<int32_t>(k);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int32_t> ready;
  size_t done = 0, running = 0;
  std::exception_ptr error;
  for (size_t k = 0; k < n; ++k)
    if (waiting[k] == 0) ready.push_back(static_cast<int32_t>(k));
  // Workers issue on the caller's current stream (a compiled function runs
  // on the stream current at call time).
  void* caller_stream = CurrentStream(device);
  auto worker = [&] {
    if (caller_stream) SetCurrentStream(device, caller_stream);
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return !ready.empty() || done == n || error || (running == 0 && ready.empty()); });
      if (error || done == n || (ready.empty() && running == 0)) return;
      int32_t k = ready.front();
      ready.pop_front();
      ++running;
      PlanOp& p = ops_[k];
      std::vector<Tensor> in;
      for (int32_t s : p.inputs) in.push_back(slots[s]);
      lock.unlock();
      std::vector<Tensor> out;
      std::exception_ptr failed;
      const int64_t t0 = profiling_ ? NowNs() : 0;
      void* ev0 = nullptr;
      bool evented = false;  // timed with device events, not the host clock
      try {
        ev0 = profiling_ ? StartTiming(device) : nullptr;
        evented = ev0 != nullptr;
        out = RunOne(p, in, device, nullptr);
        void* start = ev0;
        ev0 = nullptr;  // EndTiming owns it now
        if (start) EndTiming(k, device, start);
      } catch (...) {
        failed = std::current_exception();
        ReleaseEvent(device, ev0);  // the op failed: nothing to time
      }
      in.clear();
      const int64_t t1 = profiling_ ? NowNs() : 0;
      lock.lock();
      --running;
      if (profiling_) {
        if (!evented) op_ns_[k] += t1 - t0;
        ++op_calls_[k];
      }
      if (failed) {
        if (!error) error = failed;
        cv.notify_all();
        return;
      }
      for (size_t i = 0; i < out.size() && i < p.outputs.size(); ++i) slots[p.outputs[i]] = std::move(out[i]);
      for (int32_t s : p.inputs)
        if (--readers[s] == 0 && releasable[s]) slots[s].reset();
      for (int32_t c : consumers[k])
        if (--waiting[c] == 0) ready.push_back(c);
      ++done;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int32_t t = 0; t < parallel_threads_; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (done != n)
    throw CoreError(DG_INTERNAL, dg::Str("graph '", name_, "': the parallel executor ran ", done,
                                         " of ", n, " ops (a dependency cycle?)"));
}

std::vector<Tensor> Plan::Run(const std::vector<Tensor>& given) {
  if (error_code_ != 0) {
    CoreError e(static_cast<DgStatus>(error_code_),
                dg::Str("graph '", name_, "': ", error_message_),
                static_cast<ErrorKind>(error_kind_));
    e.op = error_op_;
    throw e;
  }
  std::lock_guard<std::mutex> lock(run_mu_);
  std::vector<Tensor> feeds_with_constants;
  const std::vector<Tensor>* feeds_ptr = &given;
  if (!constants_.empty()) {
    // Sub-plans: the caller gives operands then captures; constants go between.
    feeds_with_constants = given;
    feeds_with_constants.insert(feeds_with_constants.end(), constants_.begin(), constants_.end());
    feeds_ptr = &feeds_with_constants;
  }
  const std::vector<Tensor>& feeds = *feeds_ptr;
  if (feeds.size() != inputs_.size())
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("graph '", name_, "' expects ", inputs_.size(), " inputs, got ",
                            feeds.size()));
  if (profiling_) ++profile_runs_;
  std::vector<Tensor> slots(num_slots_);
  for (size_t i = 0; i < feeds.size(); ++i) slots[inputs_[i]] = feeds[i];
  DgDevice device = feeds.empty() ? kHost : feeds[0]->device();
  if (buffers_.size() != buffer_sizes_.size()) {
    buffers_.clear();
    for (int64_t bytes : buffer_sizes_)
      buffers_.push_back(TensorImpl::Empty(device, DG_UINT8, {bytes}));
  }
  if (parallel_threads_ > 0 && ops_.size() > 1) {
    RunParallel(slots, device);
    std::vector<Tensor> result;
    for (int32_t s : outputs_) result.push_back(slots[s]);
    return result;
  }
  std::vector<Tensor> in, preset;
  for (size_t k = 0; k < ops_.size(); ++k) {
    PlanOp& p = ops_[k];
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
      // (its storage is then owned by this plan alone) and the input is
      // dense: a kernel reading a strided view (a Transpose) while writing
      // a dense output over the same bytes would read what it overwrote.
      // Such an input gets a fresh output, not its alias group's buffer.
      if (p.inplace_input >= 0) {
        const Tensor& src = slots[p.inplace_input];
        if (src && !src->is_contiguous()) {
          preset[0] = nullptr;
        } else if (src && src.use_count() <= 2 && src->storage().use_count() == 1) {
          preset[0] = src;
        }
      }
      pre = &preset;
    }
    const int64_t t0 = profiling_ ? NowNs() : 0;
    void* ev0 = profiling_ ? StartTiming(device) : nullptr;
    std::vector<Tensor> out;
    try {
      out = RunOne(p, in, device, pre);
    } catch (...) {
      ReleaseEvent(device, ev0);  // the op failed: nothing to time
      throw;
    }
    if (profiling_) {
      if (ev0) EndTiming(static_cast<int32_t>(k), device, ev0);
      else op_ns_[k] += NowNs() - t0;
      ++op_calls_[k];
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
