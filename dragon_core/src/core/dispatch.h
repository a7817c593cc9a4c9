// The eager dispatcher: schema checks, shape inference, output allocation,
// kernel selection, the kernel call, and error reporting.
#ifndef DRAGON_CORE_DISPATCH_H_
#define DRAGON_CORE_DISPATCH_H_

#include <utility>
#include <vector>

#include "registry.h"
#include "tensor.h"

namespace dragon {

struct InferredOutput {
  DgDType dtype;
  Shape shape;
};

// Runs `op` on `inputs` with `attrs` (schema order, complete). Ops without
// inputs run on `device`. Throws CoreError with full context.
// `preset`, when given, may hold for output i a tensor whose storage the
// output must be written into (a planned buffer or an input being
// overwritten in place); it is used only when it is on the right device,
// starts its own storage, which the core owns, and that storage is large
// enough (the output takes its own dtype and shape over it).
// `site`, when given, is the op's call site in a compiled graph: its
// DgCallSiteState reaches kernels of plugins built for ABI >= 1.2.
struct CallSite;
std::vector<Tensor> Dispatch(OpSchema& op, const std::vector<Tensor>& inputs,
                             std::vector<AttrValue>& attrs, DgDevice device,
                             const std::vector<Tensor>* preset = nullptr,
                             CallSite* site = nullptr);

// One op of a compiled graph as a call site (docs/abi.md): the state its
// kernel keeps across runs, and which kernel that state belongs to.
struct CallSite {
  DgCallSiteState state{};
  const KernelEntry* kernel = nullptr;
  CallSite() { state.struct_size = sizeof(DgCallSiteState); }
  ~CallSite() { Reset(); }
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;
  // Destroys the kernel's data (the constant-input mask stays).
  void Reset() {
    if (state.destroy && state.data) state.destroy(state.data);
    state.data = nullptr;
    state.destroy = nullptr;
    kernel = nullptr;
  }
};

// The op profiler (dragon_core.profiler): while a thread has one started,
// every Dispatch on that thread appends a record, in call order: the op,
// its inputs' dtypes and shapes, its outputs' dtypes, the host time of the
// call (shape inference, allocation, the kernel; on a stream-ordered
// device the launch, not the kernel's run) and its nesting depth (a
// Contiguous copy made inside another op's dispatch has depth 1; its time
// is part of the outer record's too). Off, the cost is one thread-local
// load per op.
struct OpRecord {
  const OpSchema* op = nullptr;
  std::vector<DgDType> in_dtypes;
  std::vector<Shape> in_shapes;
  std::vector<DgDType> out_dtypes;
  double us = 0.0;
  int depth = 0;
};
struct OpProfile {
  std::vector<OpRecord> records;
  int depth = 0;
};
// This thread's profile (null when off); Start replaces it with an empty
// one; Stop ends it and returns the records.
OpProfile* CurrentOpProfile();
void StartOpProfile();
std::vector<OpRecord> StopOpProfile();

// Shape/dtype inference alone, for metadata-only inputs.
std::vector<InferredOutput> InferShapes(OpSchema& op,
                                        const std::vector<DgDType>& dtypes,
                                        const std::vector<Shape>& shapes,
                                        const std::vector<AttrValue>& attrs);

// A dense row-major copy made by the device's Contiguous kernel.
Tensor MakeContiguous(const Tensor& t);

// The global generator that fills `seed = -1` of stateful ops.
void ManualSeed(uint64_t seed);
// The global generator's whole state (the counter NextSeed advances), to
// save and restore it (torch.get_rng_state / set_rng_state).
uint64_t SeedState();
void SetSeedState(uint64_t state);
uint64_t NextSeed();

// Builds the context appended to errors: "inputs: x: float32[2, 3] on cpu:0".
std::string DescribeInputs(const OpSchema& op, const std::vector<Tensor>& in);

// Optional hook (set from Python) returning advice for a missing kernel,
// e.g. which wheel provides kernels for a device.
using NoKernelHint = std::string (*)(const std::string& op,
                                     const std::string& device);
void SetNoKernelHint(std::string (*hint)(const std::string&, const std::string&));

}  // namespace dragon

#endif  // DRAGON_CORE_DISPATCH_H_
