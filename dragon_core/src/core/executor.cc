#include "executor.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <thread>
#include <algorithm>
#include <chrono>

#include "allocator.h"
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

// Whether an optimizer update may write its output over `var`, a captured
// variable the graph rebinds to that output (PlanOp::StateSlot): only when
// nobody but the variable can see the bytes, so that a caller observes what
// a fresh buffer would give. The variable's own TensorImpl is shared by
// whoever holds the variable (and rebinding it shows them the new value
// anyway); any other view of the storage (a slice, a detach(), a returned
// tensor), a NumPy array or DLPack capsule handed out over it, memory the
// caller owns (external) or read-only memory keeps the old bytes: the op
// then writes a fresh buffer. The tensor must be dense from the storage's
// first byte, appear among the op's inputs once, and not already be the
// preset of another output.
bool StateWritable(const Tensor& var, const std::vector<Tensor>& in,
                   const std::vector<Tensor>& preset) {
  if (!var || !var->is_contiguous() || var->byte_offset() != 0) return false;
  const std::shared_ptr<Storage>& st = var->storage();
  if (!st || st.use_count() != 1 || st->exported || st->external() || st->read_only())
    return false;
  if (static_cast<size_t>(var->numel()) * var->itemsize() > st->bytes()) return false;
  int seen = 0;
  for (const Tensor& t : in)
    if (t && t->storage() == st) ++seen;
  if (seen != 1) return false;
  for (const Tensor& t : preset)
    if (t && t->storage() == st) return false;
  return true;
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
  if (capture_enabled_) {
    std::vector<Tensor> result;
    if (TryGraph(feeds, device, &result)) return result;
    ++normal_runs_;
  }
  if (parallel_threads_ > 0 && ops_.size() > 1) {
    RunParallel(slots, device);
    std::vector<Tensor> result;
    for (int32_t s : outputs_) result.push_back(slots[s]);
    return result;
  }
  return RunSequential(slots, device);
}

std::vector<Tensor> Plan::RunSequential(std::vector<Tensor>& slots, DgDevice device) {
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
      for (size_t i = 0; i < p.out_buffers.size() && i < preset.size(); ++i) {
        const int32_t b = p.out_buffers[i];
        if (b >= 0) {
          preset[i] = buffers_[b];
        } else if (b <= PlanOp::StateSlot(0)) {
          const Tensor& var = slots[PlanOp::StateSlot(0) - b];
          if (StateWritable(var, in, preset)) preset[i] = var;
        }
      }
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

// ---------------------------------------------------------- graph capture

struct Plan::Captured {
  DgDevice device{};
  std::vector<int64_t> sig;
  void* graph = nullptr;
  std::vector<Tensor> static_in;   // per feed: the buffer the graph reads
  std::vector<char> in_place;      // per feed: read where it is (a constant)
  std::vector<Tensor> static_out;  // what the graph writes, per output
  std::vector<CachingAllocator::HeldBlock> held;  // freed during the capture
  void* last_stream = nullptr;     // where the last launch was issued
  void* done = nullptr;            // event after the last launch
  ~Captured() {
    // The device may still run the last replay: wait for it, then give the
    // graph and the memory it used back. Never throws (a destructor).
    try {
      if (done) {
        SyncEvent(device, done);
        ReleaseEvent(device, done);
      }
    } catch (const std::exception&) {
    }
    DestroyGraph(device, graph);
    static_in.clear();
    static_out.clear();
    try {
      if (!held.empty()) DeviceRegistry::Get().Allocator(device).ReleaseHeld(held, last_stream);
    } catch (const std::exception&) {
    }
  }
};

Plan::~Plan() = default;

void Plan::SetCapture(bool enabled, int32_t warmup, int32_t immutable_begin,
                      int32_t immutable_end) {
  std::lock_guard<std::mutex> lock(run_mu_);
  capture_enabled_ = enabled;
  capture_warmup_ = warmup < 1 ? 1 : warmup;
  immutable_begin_ = immutable_begin;
  immutable_end_ = immutable_end;
  capture_state_ = enabled ? "warming up" : "off";
  capture_reason_.clear();
  capture_failed_ = false;
  warm_sig_.clear();
  warm_runs_ = 0;
  if (!enabled) graphs_.clear();
}

Plan::CaptureStatus Plan::GetCaptureStatus() {
  std::lock_guard<std::mutex> lock(run_mu_);
  CaptureStatus st;
  st.enabled = capture_enabled_;
  st.state = capture_state_;
  st.reason = capture_reason_;
  st.captures = captures_;
  st.replays = replays_;
  st.normal_runs = normal_runs_;
  st.graphs = static_cast<int32_t>(graphs_.size());
  return st;
}

std::string Plan::StaticIneligibility() const {
  if (ops_.empty()) return "the graph has no ops";
  if (parallel_threads_ > 0)
    return dg::Str("the parallel executor (parallel=", parallel_threads_,
                   ") issues ops from several threads");
  for (const PlanOp& p : ops_) {
    if (p.kind != PlanOp::kOp)
      return dg::Str("op '", p.name, "' (", p.kind == PlanOp::kCond ? "cond" : "while_loop",
                     ") reads its predicate on the host at every run");
    if (p.op->flags & DG_OP_COLLECTIVE)
      return dg::Str("op '", p.name, "' (", p.op->name,
                     ") is a collective: every rank must issue it, not replay it");
    if (p.op->seed_attr >= 0 && p.attrs[p.op->seed_attr].v.i < 0)
      return dg::Str("op '", p.name, "' (", p.op->name,
                     ") draws a fresh random seed at every run; a replay would repeat "
                     "its numbers (a fixed seed= makes it capturable)");
    // Other stateful ops have side effects beyond their outputs (a seeded
    // random op's only state is its seed attribute, fixed above).
    if ((p.op->flags & DG_OP_STATEFUL) && p.op->seed_attr < 0)
      return dg::Str("op '", p.name, "' (", p.op->name,
                     ") is stateful: its side effects are not part of a recording");
  }
  return "";
}

std::vector<int64_t> Plan::Signature(const std::vector<Tensor>& feeds) const {
  std::vector<int64_t> sig;
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Tensor& t = feeds[i];
    sig.push_back(t->device().type);
    sig.push_back(t->device().index);
    sig.push_back(static_cast<int64_t>(t->dtype()));
    sig.push_back(t->ndim());
    for (int64_t d : t->shape()) sig.push_back(d);
    const int32_t k = static_cast<int32_t>(i);
    if (k >= immutable_begin_ && k < immutable_end_) {
      // A constant is read in place: its buffer is part of the signature.
      sig.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(t->data())));
      sig.push_back(t->is_contiguous() ? 1 : 0);
    }
  }
  return sig;
}

namespace {

// Copies `src` into the dense `dst` (same shape and dtype) on the current
// stream of dst's device.
void CopyInto(const Tensor& dst, const Tensor& src) {
  const Tensor dense = src->is_contiguous() ? src : MakeContiguous(src);
  CopyOrdered(*dst->storage(), dst->data(), *dense->storage(), dense->data(),
              static_cast<size_t>(dense->numel()) * dense->itemsize());
}

// A fresh dense copy of `t` (the caller's output: a later replay never
// writes it).
Tensor FreshCopy(const Tensor& t) {
  if (!t->is_contiguous()) return MakeContiguous(t);
  Tensor out = TensorImpl::Empty(t->device(), t->dtype(), t->shape());
  CopyOrdered(*out->storage(), out->data(), *t->storage(), t->data(),
              static_cast<size_t>(t->numel()) * t->itemsize());
  return out;
}

}  // namespace

bool Plan::TryGraph(const std::vector<Tensor>& feeds, DgDevice device,
                    std::vector<Tensor>* result) {
  if (profiling_) {
    capture_state_ = "off while profiling";
    return false;
  }
  if (!capture_checked_) {
    capture_static_reason_ = StaticIneligibility();
    capture_checked_ = true;
  }
  if (!capture_static_reason_.empty()) {
    capture_state_ = "ineligible";
    capture_reason_ = capture_static_reason_;
    return false;
  }
  if (capture_failed_) return false;  // state and reason say why
  if (device.type == 0 || !CanCapture(device)) {
    capture_state_ = "ineligible";
    capture_reason_ = dg::Str("device '", DeviceRegistry::Get().Name(device),
                              "' offers no graph capture (ABI 1.5 stream_begin_capture)");
    return false;
  }
  for (const Tensor& t : feeds) {
    if (!SameDevice(t->device(), device)) {
      capture_state_ = "ineligible";
      capture_reason_ = dg::Str("the inputs are on several devices (",
                                DeviceRegistry::Get().Name(device), " and ",
                                DeviceRegistry::Get().Name(t->device()), ")");
      return false;
    }
  }
  std::vector<int64_t> sig = Signature(feeds);
  void* stream = CurrentStream(device);
  for (size_t k = 0; k < graphs_.size(); ++k) {
    if (graphs_[k]->sig == sig) {
      std::shared_ptr<Captured> g = graphs_[k];
      graphs_.erase(graphs_.begin() + static_cast<std::ptrdiff_t>(k));
      graphs_.push_back(g);  // most recently used last
      Replay(*g, feeds, stream, result);
      ++replays_;
      capture_state_ = "replayed";
      capture_reason_.clear();
      return true;
    }
  }
  if (sig != warm_sig_) {
    warm_sig_ = sig;
    warm_runs_ = 0;
  }
  if (warm_runs_ < capture_warmup_) {
    ++warm_runs_;
    capture_state_ = "warming up";
    return false;
  }
  warm_runs_ = 0;
  return CaptureRun(feeds, device, stream, std::move(sig), result);
}

bool Plan::CaptureRun(const std::vector<Tensor>& feeds, DgDevice device, void* stream,
                      std::vector<int64_t> sig, std::vector<Tensor>* result) {
  auto g = std::make_shared<Captured>();
  g->device = device;
  g->sig = std::move(sig);
  g->last_stream = stream;
  // The graph's inputs: its own buffers, written before the capture (a
  // constant is read where it is).
  for (size_t i = 0; i < feeds.size(); ++i) {
    const int32_t k = static_cast<int32_t>(i);
    const bool in_place =
        k >= immutable_begin_ && k < immutable_end_ && feeds[i]->is_contiguous();
    g->in_place.push_back(in_place ? 1 : 0);
    if (in_place) {
      g->static_in.push_back(feeds[i]);
    } else {
      Tensor t = TensorImpl::Empty(device, feeds[i]->dtype(), feeds[i]->shape());
      CopyInto(t, feeds[i]);
      g->static_in.push_back(std::move(t));
    }
  }
  // Order what the recorded work reads after its writers now, outside the
  // recording (a wait for another stream's event inside it would tie the
  // graph to that one event): constants and planned buffers count as
  // written on this stream from here on, which only orders more.
  for (size_t i = 0; i < feeds.size(); ++i)
    if (g->in_place[i]) UseOnStream(*g->static_in[i]->storage(), stream, true);
  for (const Tensor& t : buffers_) UseOnStream(*t->storage(), stream, true);
  CachingAllocator& alloc = DeviceRegistry::Get().Allocator(device);
  std::string failure;
  std::vector<Tensor> outs;
  bool began = false;
  alloc.BeginHold(stream);
  try {
    BeginCapture(device, stream);
    began = true;
    std::vector<Tensor> slots(num_slots_);
    for (size_t i = 0; i < g->static_in.size(); ++i) slots[inputs_[i]] = g->static_in[i];
    outs = RunSequential(slots, device);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  void* graph = nullptr;
  if (began) {
    std::string why;
    graph = EndCapture(device, stream, &why);
    if (graph == nullptr && failure.empty()) failure = why;
  }
  std::vector<CachingAllocator::HeldBlock> held = alloc.EndHold(stream);
  if (graph == nullptr || !failure.empty()) {
    // Nothing recorded ran: the caller runs the plan normally.
    DestroyGraph(device, graph);
    outs.clear();
    alloc.ReleaseHeld(held, stream);
    capture_failed_ = true;
    capture_state_ = "failed";
    capture_reason_ = dg::Str("the capture failed, so the function runs op by op: ", failure);
    return false;
  }
  g->graph = graph;
  g->static_out = std::move(outs);
  g->held = std::move(held);
  g->done = AcquireEvent(device);
  ++captures_;
  capture_state_ = "captured";
  capture_reason_.clear();
  // Bounded: the least recently used graph goes first.
  while (graphs_.size() >= 4) graphs_.erase(graphs_.begin());
  graphs_.push_back(g);
  Replay(*g, feeds, stream, result);  // the recorded work runs for the first time
  return true;
}

void Plan::Replay(Captured& g, const std::vector<Tensor>& feeds, void* stream,
                  std::vector<Tensor>* result) {
  const DgDevice device = g.device;
  // Replays never overlap: a launch on another stream waits for the last.
  if (g.last_stream != stream) JoinStreams(device, g.last_stream, stream);
  for (size_t i = 0; i < feeds.size(); ++i) {
    if (g.in_place[i]) {
      UseOnStream(*g.static_in[i]->storage(), stream, false);
    } else if (feeds[i] != g.static_in[i]) {
      CopyInto(g.static_in[i], feeds[i]);
    }
  }
  for (const Tensor& t : g.static_out) UseOnStream(*t->storage(), stream, true);
  for (const Tensor& t : buffers_) UseOnStream(*t->storage(), stream, true);
  LaunchGraph(device, g.graph, stream);
  g.last_stream = stream;
  RecordEvent(device, g.done, stream);
  result->clear();
  result->reserve(g.static_out.size());
  for (const Tensor& t : g.static_out) result->push_back(FreshCopy(t));
}

}  // namespace dragon
