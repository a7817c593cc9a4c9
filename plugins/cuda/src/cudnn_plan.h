// The plain C++ half of the cuda plugin's cuDNN convolutions (cudnn.cu):
// which calls cuDNN's legacy 4-D descriptors can describe, the key of the
// per-shape plan cache, and the algorithm rule. No CUDA or cuDNN header is
// needed, so plugins/cuda/tests/test_cuda_host_math.py compiles this file
// with the host compiler and tests it without a GPU.
//
// The three convolution ops map onto cuDNN's three legacy calls:
//   Conv2d, Conv2dBiasAct   cudnnConvolutionForward       x -> y
//   ConvTranspose2d         cudnnConvolutionBackwardData  (dy = x) -> (dx = y)
//   Conv2dBackpropFilter    cudnnConvolutionBackwardFilter (x, dy) -> dw
// Each is described by one geometry: the "image" tensor [n, c, h, w] (the
// input of Conv2d, the output of ConvTranspose2d), the filter
// [k, c / groups, kh, kw] (ConvTranspose2d's filter [C, O / groups, kh, kw]
// read as the filter of the forward convolution it is the adjoint of) and
// the "window" tensor [n, k, ho, wo].
//
// Memory format (docs/cuda.md, "Channels-last"): the kernels declare
// DG_KERNEL_CHANNELS_LAST (float32, float16, bfloat16), so each operand
// arrives contiguous (NCHW) or channels-last (logical NCHW, NHWC strides).
// A call runs in one layout, input 0's: with input 0 channels-last every
// descriptor (image, window and filter) is NHWC, as PyTorch runs cuDNN;
// an operand in the other layout is first copied into the call's workspace
// in the call's layout (an output: computed there, then copied out).
#ifndef DRAGON_CUDA_CUDNN_PLAN_H_
#define DRAGON_CUDA_CUDNN_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#ifdef __CUDACC__
#define DGC_PLAN_HD __host__ __device__
#else
#define DGC_PLAN_HD
#endif

namespace dragon_cuda {
namespace cudnn_plan {

// The dense layout of a 4-D operand [n, c, h, w] from its strides (size-1
// axes ignored, as the core's contiguity test does): row-major (NCHW),
// channels-last (NHWC), or neither. A tensor may be both (c == 1, or
// h == w == 1): IsNhwc and IsNchw both hold.
inline bool IsNchw(const int64_t* shape, const int64_t* strides) {
  int64_t expected = 1;
  for (int d = 3; d >= 0; --d) {
    if (shape[d] == 0) return true;
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

inline bool IsNhwc(const int64_t* shape, const int64_t* strides) {
  for (int d = 0; d < 4; ++d)
    if (shape[d] == 0) return true;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// Relayout of a dense 4-D tensor [n, c, h, w] between NCHW and NHWC: the
// source offset of destination element i (to_nhwc: the destination is
// NHWC and the source NCHW; else the other way round).
DGC_PLAN_HD inline int64_t RelayoutSource(int64_t i, int64_t c, int64_t h, int64_t w,
                                          bool to_nhwc) {
  if (to_nhwc) {  // i = ((n * h + y) * w + x) * c + ch
    const int64_t ch = i % c, x = (i / c) % w, y = (i / (c * w)) % h, n = i / (c * w * h);
    return ((n * c + ch) * h + y) * w + x;
  }
  // i = ((n * c + ch) * h + y) * w + x
  const int64_t x = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, n = i / (w * h * c);
  return ((n * h + y) * w + x) * c + ch;
}

// The channel of element i of a dense 4-D tensor with `c` channels and
// h * w = `hw` cells per plane, in either layout.
DGC_PLAN_HD inline int64_t ChannelOf(int64_t i, int64_t hw, int64_t c, bool nhwc) {
  return nhwc ? i % c : (i / hw) % c;
}

enum class Direction : int32_t { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

struct ConvGeometry {
  Direction dir = Direction::kForward;
  int32_t dtype = 0;    // DgDType
  int32_t device = 0;   // the cuda ordinal (heuristics depend on the GPU)
  bool tf32 = false;    // float32 with DRAGON_CUDA_ALLOW_TF32=1
  bool deterministic = true;  // false with DRAGON_CUDNN_DETERMINISTIC=0
  int64_t n = 0, c = 0, h = 0, w = 0;     // image
  int64_t k = 0, kh = 1, kw = 1;          // filter [k, c / groups, kh, kw]
  int64_t ho = 0, wo = 0;                 // window [n, k, ho, wo]
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
  bool nhwc = false;  // every descriptor NHWC (input 0 channels-last)

  auto Tie() const {
    return std::make_tuple(static_cast<int32_t>(dir), dtype, device, tf32, deterministic, n, c, h, w, k, kh, kw,
                           ho, wo, pad_top, pad_left, pad_bottom, pad_right, sh, sw, dh, dw,
                           groups, nhwc);
  }
  bool operator<(const ConvGeometry& o) const { return Tie() < o.Tie(); }
  bool operator==(const ConvGeometry& o) const { return Tie() == o.Tie(); }
};

// The window extent cuDNN computes for one axis: its descriptors hold one
// pad per axis, applied on both sides. -1 when the dilated kernel does not
// fit the padded image.
inline int64_t SymmetricWindowExtent(int64_t image, int64_t pad, int64_t kernel, int64_t stride,
                                     int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t room = image + 2 * pad - span;
  if (stride < 1 || room < 0) return -1;
  return room / stride + 1;
}

constexpr int64_t kIntMax = 2147483647;

// Why cuDNN cannot run the call: "" when it can. The rule (docs/cuda.md):
//   * every extent, and every tensor's element count, fits a C int (the
//     legacy descriptors hold int dimensions and strides);
//   * the padding is expressible with the top/left pads on both sides: the
//     window extents cuDNN computes with them equal the op's (always so for
//     symmetric pads; an extra bottom/right pad that adds no output row or
//     column reads only zeros, so it changes nothing);
//   * no extent is zero (the kernels fill such calls themselves, without
//     cuDNN: an empty output, or a sum over nothing).
inline std::string Unsupported(const ConvGeometry& g) {
  const int64_t dims[] = {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.ho, g.wo,
                          g.pad_top, g.pad_left, g.sh, g.sw, g.dh, g.dw, g.groups};
  for (int64_t d : dims) {
    if (d < 0 || d > kIntMax) return "an extent or attribute above 2^31-1";
  }
  for (int64_t d : {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.ho, g.wo}) {
    if (d == 0) return "an empty extent";
  }
  if (g.groups < 1 || g.c % g.groups != 0 || g.k % g.groups != 0)
    return "groups that do not divide the channels";
  const double image = static_cast<double>(g.n) * g.c * g.h * g.w;
  const double window = static_cast<double>(g.n) * g.k * g.ho * g.wo;
  const double filter = static_cast<double>(g.k) * (g.c / g.groups) * g.kh * g.kw;
  if (image > kIntMax || window > kIntMax || filter > kIntMax)
    return "a tensor of more than 2^31-1 elements";
  if (SymmetricWindowExtent(g.h, g.pad_top, g.kh, g.sh, g.dh) != g.ho ||
      SymmetricWindowExtent(g.w, g.pad_left, g.kw, g.sw, g.dw) != g.wo)
    return "bottom/right pads that differ from the top/left pads and change the output size";
  return "";
}

// One entry of cuDNN's heuristic list (cudnnGet*Algorithm_v7), in its order.
struct Candidate {
  int32_t algo = 0;
  int32_t status = 0;        // cudnnStatus_t: 0 is success
  size_t memory = 0;         // workspace bytes
  int32_t determinism = 0;   // 1: CUDNN_DETERMINISTIC
  int32_t math = 0;          // cudnnMathType_t
};

// cudnnMathType_t values (cudnn_graph.h).
constexpr int32_t kDefaultMath = 0, kTensorOpMath = 1, kTensorOpAllowConversion = 2,
                  kFmaMath = 3;

// The candidates the rule accepts, in cuDNN's heuristic order: the
// algorithm is supported for the call (status success), deterministic (no
// atomics: the same inputs give the same bits, as the direct kernels did;
// unless `deterministic` is false: DRAGON_CUDNN_DETERMINISTIC=0), needs at
// most `workspace_limit` bytes, and, for exact float32, uses no tensor-op
// math (which would round the operands to TF32). The first one
// whose actual workspace size (asked again with the math type set) fits is
// the algorithm; the plan cache keeps the choice per geometry.
inline std::vector<size_t> Acceptable(const std::vector<Candidate>& list, size_t workspace_limit,
                                      bool exact_float32, bool deterministic = true) {
  std::vector<size_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const Candidate& c = list[i];
    if (c.status != 0 || c.memory > workspace_limit) continue;
    if (deterministic && c.determinism != 1) continue;
    if (exact_float32 && (c.math == kTensorOpMath || c.math == kTensorOpAllowConversion))
      continue;
    out.push_back(i);
  }
  return out;
}

// The math type set on the convolution descriptor for a chosen candidate:
// exact float32 runs FMA kernels only (CUDNN_DEFAULT_MATH would allow TF32
// on sm_80+), 16-bit types tensor-op math (float32 accumulation: the
// descriptor's compute type), float64 and TF32 what the heuristic listed.
inline int32_t MathFor(const Candidate& c, bool exact_float32, bool half) {
  if (exact_float32) return kFmaMath;
  if (half) return kTensorOpMath;
  return c.math;
}

// A bounded cache of plans by geometry. Plans are shared: a caller keeps
// its plan alive while a full cache is cleared under it.
template <typename Plan>
class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(capacity) {}

  // The plan for `g`, made by `make` on a miss (outside no lock: `make` may
  // call cuDNN; two threads missing at once both make one, the first
  // stored wins, so a geometry always has one plan).
  std::shared_ptr<const Plan> Get(const ConvGeometry& g,
                                  const std::function<std::shared_ptr<const Plan>()>& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(g);
      if (it != map_.end()) return it->second;
    }
    std::shared_ptr<const Plan> p = make();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(g);
    if (it != map_.end()) return it->second;
    if (map_.size() >= capacity_) map_.clear();
    map_.emplace(g, p);
    ++made_;
    return p;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  size_t made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  size_t made_ = 0;
  std::map<ConvGeometry, std::shared_ptr<const Plan>> map_;
};

}  // namespace cudnn_plan
}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_CUDNN_PLAN_H_
