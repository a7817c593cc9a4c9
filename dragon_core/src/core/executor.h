// The graph executor: runs a compiled plan (a flattened GraphDef) with no
// Python per op. Tensors live in numbered slots; a slot is released after
// its last use (liveness from the memory-planning pass) unless the plan
// keeps everything (O0). Planned buffers (O3) and in-place outputs (O2)
// reach the dispatcher as preset output storage.
#ifndef DRAGON_CORE_EXECUTOR_H_
#define DRAGON_CORE_EXECUTOR_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dispatch.h"

namespace dragon {

class Plan;

struct PlanOp {
  enum Kind { kOp, kCond, kWhile } kind = kOp;
  OpSchema* op = nullptr;
  std::string name;                 // the OpDef's name, for errors
  std::vector<int32_t> inputs;      // slots; variadic inputs flattened
  std::vector<int32_t> outputs;     // slots
  std::vector<AttrValue> attrs;     // schema order, complete
  std::vector<int32_t> release;     // slots dead after this op
  int32_t inplace_input = -1;       // slot whose buffer output 0 may reuse
  // Per output: a planned buffer id (>= 0), -1 (a fresh buffer), or
  // StateSlot(s) (<= -2): the storage of captured slot s, the variable the
  // graph rebinds to this output (passes/state_inplace.py), when nobody
  // else can see it at run time (see Plan::RunSequential); else fresh.
  std::vector<int32_t> out_buffers;
  static constexpr int32_t StateSlot(int32_t slot) { return -2 - slot; }
  // The kernel's state across runs (DgCallSiteState); constant_inputs
  // marks the inputs fed from the plan's constants.
  std::unique_ptr<CallSite> site = std::make_unique<CallSite>();
  // Control flow. Cond: inputs = [pred, operands..., then captures...,
  // else captures...]; While: inputs = [loop vars..., cond captures...,
  // body captures...]. Sub-plans take (operands/loop vars, captures).
  std::shared_ptr<Plan> then_plan, else_plan;  // While: cond, body
  int32_t num_operands = 0, num_then_captures = 0, num_else_captures = 0;
  int64_t max_iterations = -1;
};

class Plan {
 public:
  Plan(std::string name, int32_t num_slots, std::vector<int32_t> inputs,
       std::vector<int32_t> outputs)
      : name_(std::move(name)), num_slots_(num_slots), inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}
  void AddOp(PlanOp op) { ops_.push_back(std::move(op)); }
  // Planned buffers: sizes in bytes, allocated on first run on the device.
  void SetBuffers(std::vector<int64_t> sizes) { buffer_sizes_ = std::move(sizes); }
  std::vector<Tensor> Run(const std::vector<Tensor>& feeds);
  // Constant feeds appended after the caller's (a sub-plan's own constants).
  void SetConstants(std::vector<Tensor> c) { constants_ = std::move(c); }
  // A plan that only raises (the branch of a Cond whose tracing failed):
  // Run() throws this error, so it surfaces only if the branch is taken.
  void SetError(int32_t code, int32_t kind, std::string message, std::string op) {
    error_code_ = code;
    error_kind_ = kind;
    error_message_ = std::move(message);
    error_op_ = std::move(op);
  }
  // Dependency-driven parallel execution on `threads` workers (0: off).
  // Ops run as soon as their inputs exist; in-place outputs and planned
  // buffers are not used then (they assume the sequential order).
  void SetParallel(int32_t threads) { parallel_threads_ = threads; }
  int32_t num_ops() const { return static_cast<int32_t>(ops_.size()); }
  int64_t planned_bytes() const;
  // Per-op wall time, accumulated while enabled (in a parallel plan, on
  // whichever worker ran the op).
  struct OpTiming {
    std::string name, type;
    int64_t calls = 0, total_ns = 0;
  };
  // Enabling resets the counters. Runs from every thread count (runs of a
  // plan never overlap); profile_runs() says how many were timed.
  void SetProfiling(bool on);

  // Graph capture (ABI 1.5 devices that offer it, e.g. CUDA Graphs; see
  // docs/graph.md, "CUDA Graphs"). After `warmup` runs with one input
  // signature (shapes, dtypes, device; and the buffers of the immutable
  // feeds [immutable_begin, immutable_end), the graph's constants), the next
  // run is recorded on the current stream and every later run with that
  // signature replays it: feeds are copied into the graph's own input
  // buffers (immutable feeds are read in place), the recorded work is
  // launched, and the outputs are returned as fresh copies, so nothing the
  // caller holds is ever overwritten by a later replay.
  void SetCapture(bool enabled, int32_t warmup, int32_t immutable_begin,
                  int32_t immutable_end);
  struct CaptureStatus {
    bool enabled = false;
    std::string state;   // off, warming up, captured, replayed, ineligible, failed
    std::string reason;  // why not (ineligible / failed), else empty
    int64_t captures = 0, replays = 0, normal_runs = 0;
    int32_t graphs = 0;  // recorded graphs kept (one per signature, at most 4)
  };
  CaptureStatus GetCaptureStatus();
  ~Plan();
  std::vector<OpTiming> Profile();
  int64_t profile_runs();

 private:
  std::string name_;
  int32_t num_slots_;
  std::vector<int32_t> inputs_, outputs_;
  std::vector<PlanOp> ops_;
  std::vector<int64_t> buffer_sizes_;
  std::vector<Tensor> constants_;
  int32_t error_code_ = 0, error_kind_ = 0;  // SetError: nonzero code raises
  std::string error_message_, error_op_;
  std::vector<Tensor> RunControl(PlanOp& p, const std::vector<Tensor>& in);
  std::vector<Tensor> RunOne(PlanOp& p, std::vector<Tensor>& in, DgDevice device,
                             const std::vector<Tensor>* preset);
  void RunParallel(std::vector<Tensor>& slots, DgDevice device);
  // The ops in order over `slots` (inputs filled); returns the outputs.
  std::vector<Tensor> RunSequential(std::vector<Tensor>& slots, DgDevice device);
  // Graph capture: true when `result` came from a recorded graph.
  struct Captured;
  bool TryGraph(const std::vector<Tensor>& feeds, DgDevice device, std::vector<Tensor>* result);
  bool CaptureRun(const std::vector<Tensor>& feeds, DgDevice device, void* stream,
                  std::vector<int64_t> sig, std::vector<Tensor>* result);
  void Replay(Captured& g, const std::vector<Tensor>& feeds, void* stream,
              std::vector<Tensor>* result);
  std::vector<int64_t> Signature(const std::vector<Tensor>& feeds) const;
  std::string StaticIneligibility() const;
  bool capture_enabled_ = false;
  int32_t capture_warmup_ = 2, immutable_begin_ = 0, immutable_end_ = 0;
  bool capture_checked_ = false, capture_failed_ = false;
  std::string capture_static_reason_, capture_reason_, capture_state_ = "off";
  std::vector<std::shared_ptr<Captured>> graphs_;  // newest last
  std::vector<int64_t> warm_sig_;
  int32_t warm_runs_ = 0;
  int64_t captures_ = 0, replays_ = 0, normal_runs_ = 0;
  int32_t parallel_threads_ = 0;
  bool profiling_ = false;
  std::vector<int64_t> op_ns_, op_calls_;  // per op, while profiling
  int64_t profile_runs_ = 0;
  // On stream-ordered devices an op is timed by two events around it on
  // the current stream (host clocks would time the issue, not the work);
  // they are read when Profile() is called.
  struct EventTiming {
    int32_t op;
    DgDevice device;
    void *start, *end;
  };
  void* StartTiming(DgDevice device);
  void EndTiming(int32_t op, DgDevice device, void* start);
  // Takes the pending timings, waits for their work and gives their events
  // back; with `add`, adds their times to op_ns_.
  void DrainTimings(bool add);
  std::mutex timing_mu_;
  std::vector<EventTiming> timings_;
  std::vector<Tensor> buffers_;  // one per planned buffer, kept across runs
  std::mutex run_mu_;            // planned buffers: one run at a time
};

}  // namespace dragon

#endif  // DRAGON_CORE_EXECUTOR_H_
