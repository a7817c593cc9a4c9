// MatMul and MatMulBiasAct on cuda through cuBLAS, opened with dlopen when a
// matmul first runs (the plugin never links cuBLAS; see runtime.h for where
// it is searched). The few functions used are declared below from cuBLAS's
// documented C API. One cuBLAS handle per (device, stream), bound to that
// stream once. NumPy matmul semantics as cpu_eigen (matmul.cc): the last
// two axes multiply, batch axes broadcast, a 1-D operand is a row (a) or a
// column (b). float32 computes in float32 unless DRAGON_CUDA_ALLOW_TF32=1
// (TF32 tensor cores); float16 and bfloat16 accumulate in float32.
#include <library_types.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

// ------------------------------------------------------------ cuBLAS C API
// Our own declarations of the documented signatures (cublas_api.h is not
// needed to build). Enumerations are C ints.
using cublasHandle_t = void*;
using cublasStatus_t = int;
constexpr int kOpN = 0, kOpT = 1;                   // cublasOperation_t
constexpr int kCompute32F = 68, kCompute32FFastTF32 = 77, kCompute64F = 70;  // cublasComputeType_t
constexpr int kGemmDefault = -1;                    // cublasGemmAlgo_t

struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(
      cublasHandle_t, int transa, int transb, int m, int n, int k, const void* alpha,
      const void* A, cudaDataType Atype, int lda, long long strideA, const void* B,
      cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
      cudaDataType Ctype, int ldc, long long strideC, int batch_count, int compute_type,
      int algo) = nullptr;
  std::string error;  // non-empty when cuBLAS could not be opened
};

// Resolve(lib, "cublasCreate_v2", &fn, &error): ResolveSymbol for cuBLAS.
template <typename F>
bool Resolve(void* lib, const char* name, F* fn, std::string* error) {
  return ResolveSymbol(lib, "libcublas.so.13", name, fn, error);
}

const Cublas& TheCublas() {
  static Cublas* c = [] {
    auto* c = new Cublas();  // never destroyed (used until exit)
    std::string error;
    void* lib = OpenLibrary("libcublas.so.13", &error);
    if (lib == nullptr) {
      c->error = error + InstallHint("nvidia-cublas");
      return c;
    }
    if (!Resolve(lib, "cublasCreate_v2", &c->create, &error) ||
        !Resolve(lib, "cublasSetStream_v2", &c->set_stream, &error) ||
        !Resolve(lib, "cublasGetStatusString", &c->status_string, &error) ||
        !Resolve(lib, "cublasGemmStridedBatchedEx", &c->gemm_strided_batched_ex, &error))
      c->error = error;
    return c;
  }();
  return *c;
}

using Handle = StreamHandle<cublasHandle_t>;
// This library's handle table (runtime.h: HandleFor).
struct CublasLib {};

Handle& GetHandle(const dg::KernelContext& ctx, const Cublas& cb, cudaStream_t s) {
  return HandleFor<CublasLib, cublasHandle_t>(ctx.device().index, s, [&](cublasHandle_t* h) {
    cublasStatus_t st = cb.create(h);
    DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), " on cuda:", ctx.device().index,
             ": cublasCreate failed: ", cb.status_string(st));
    st = cb.set_stream(*h, s);
    DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), ": cublasSetStream failed: ",
             cb.status_string(st));
  });
}

template <typename T>
struct GemmTypes;
template <>
struct GemmTypes<float> {
  static constexpr cudaDataType kData = CUDA_R_32F;
  using Scale = float;
};
template <>
struct GemmTypes<double> {
  static constexpr cudaDataType kData = CUDA_R_64F;
  using Scale = double;
};
template <>
struct GemmTypes<half> {
  static constexpr cudaDataType kData = CUDA_R_16F;
  using Scale = float;
};
template <>
struct GemmTypes<bf16> {
  static constexpr cudaDataType kData = CUDA_R_16BF;
  using Scale = float;
};

bool AllowTf32() {
  const char* v = std::getenv("DRAGON_CUDA_ALLOW_TF32");
  return v && v[0] && std::strcmp(v, "0") != 0;
}

// Batch offsets (in elements) of one operand's matrices for each output
// batch index: its own batch shape right-aligned and broadcast.
std::vector<int64_t> BatchStrides(const std::vector<int64_t>& batch,
                                  const std::vector<int64_t>& out_batch, int64_t mat) {
  std::vector<int64_t> dense(batch.size(), mat);
  for (size_t d = batch.size(); d-- > 1;) dense[d - 1] = dense[d] * batch[d];
  return BroadcastStrides(batch, dense, out_batch);
}

template <typename T>
void Gemm(dg::KernelContext& ctx) {
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  DG_CHECK(a.dtype() == b.dtype(), DG_INVALID_ARGUMENT, ctx.op_name(),
           ": a and b must share a dtype, got ", dg::DTypeName(a.dtype()), " and ",
           dg::DTypeName(b.dtype()));
  // out_dtype: 16-bit operands may write a float32 product (cuBLAS takes a
  // float32 C with 16-bit A and B, accumulating in float32 either way).
  constexpr bool kLow = std::is_same<T, half>::value || std::is_same<T, bf16>::value;
  const bool out32 = kLow && y.dtype() == DG_FLOAT32;
  DG_CHECK(y.dtype() == a.dtype() || out32, DG_INVALID_ARGUMENT, ctx.op_name(),
           " on cuda: out_dtype ", dg::DTypeName(y.dtype()), " for ", dg::DTypeName(a.dtype()),
           " operands is not supported (float32 for float16/bfloat16 operands only)");
  const size_t out_size = out32 ? sizeof(float) : sizeof(T);
  std::vector<int64_t> as = a.shape(), bs = b.shape();
  const bool ta = ctx.b("transpose_a") && as.size() >= 2;
  const bool tb = ctx.b("transpose_b") && bs.size() >= 2;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t m = ta ? as[as.size() - 1] : as[as.size() - 2];
  const int64_t k = ta ? as[as.size() - 2] : as[as.size() - 1];
  const int64_t kb = tb ? bs[bs.size() - 1] : bs[bs.size() - 2];
  const int64_t n = tb ? bs[bs.size() - 2] : bs[bs.size() - 1];
  DG_CHECK(k == kb, DG_INVALID_ARGUMENT, ctx.op_name(), ": inner dimensions differ (", k,
           " and ", kb, ") for shapes ", dg::ShapeStr(a.shape()), " and ",
           dg::ShapeStr(b.shape()));
  const std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  std::vector<int64_t> ob(std::max(ab.size(), bb.size()), 1);
  for (size_t i = 0; i < ob.size(); ++i) {
    const int64_t da = i + ab.size() >= ob.size() ? ab[i + ab.size() - ob.size()] : 1;
    const int64_t db = i + bb.size() >= ob.size() ? bb[i + bb.size() - ob.size()] : 1;
    ob[i] = da == 1 ? db : da;
  }
  int64_t batch = 1;
  for (int64_t d : ob) batch *= d;
  DG_CHECK(batch * m * n == y.numel(), DG_INTERNAL, ctx.op_name(), ": output has ", y.numel(),
           " elements, expected ", batch * m * n);
  if (y.numel() == 0) return;
  cudaStream_t s = Prepare(ctx);
  if (k == 0) {  // an empty sum: zeros
    const cudaError_t e = cudaMemsetAsync(y.raw_data(), 0, y.numel() * out_size, s);
    DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), ": memset failed: ", ErrorText(e));
    return;
  }
  constexpr int64_t kIntMax = 2147483647;
  DG_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax, DG_UNIMPLEMENTED, ctx.op_name(),
           " on cuda: matrix dimensions above 2^31-1 are not supported (m=", m, ", n=", n,
           ", k=", k, ")");
  const Cublas& cb = TheCublas();
  DG_CHECK(cb.error.empty(), DG_UNAVAILABLE, ctx.op_name(), " on cuda needs cuBLAS: ", cb.error);
  Handle& h = GetHandle(ctx, cb, s);

  const std::vector<int64_t> sa = BatchStrides(ab, ob, m * k), sb = BatchStrides(bb, ob, k * n);
  // One strided-batched call when each operand's batch offsets are an
  // arithmetic progression (the usual case), else one call per matrix.
  const Indexer ix = MakeIndexer(ctx.op_name(), ob, {sa, sb, DenseStrides(ob)});
  const bool linear = ix.ndim <= 1;
  const long long stride_a = ix.ndim == 1 ? ix.strides[0][0] : 0;
  const long long stride_b = ix.ndim == 1 ? ix.strides[1][0] : 0;

  using S = typename GemmTypes<T>::Scale;
  const S one = S(1), zero = S(0);
  int compute = std::is_same<T, double>::value ? kCompute64F : kCompute32F;
  if (std::is_same<T, float>::value && AllowTf32()) compute = kCompute32FFastTF32;
  constexpr cudaDataType dt = GemmTypes<T>::kData;
  const cudaDataType ct = out32 ? CUDA_R_32F : dt;
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  char* py = static_cast<char*>(y.raw_data());
  // Row-major y = op(a) op(b) is column-major y^T = op(b)^T op(a)^T.
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  auto call = [&](const T* A, const T* B, void* C, long long sA, long long sB, int count) {
    const cublasStatus_t st = cb.gemm_strided_batched_ex(
        h.h, tb ? kOpT : kOpN, ta ? kOpT : kOpN, static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &one, B, dt, ldb, sB, A, dt, lda, sA, &zero, C, ct,
        static_cast<int>(n), static_cast<long long>(m * n), count, compute, kGemmDefault);
    DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), " on cuda: cublasGemmStridedBatchedEx failed: ",
             cb.status_string(st), " (", dg::DTypeName(dg::DTypeOf<T>::value), ", m=", m,
             ", n=", n, ", k=", k, ", batch=", batch, ")");
  };
  std::lock_guard<std::mutex> lock(h.mu);
  if (linear && batch <= kIntMax) {
    call(pa, pb, py, stride_a, stride_b, static_cast<int>(batch));
  } else {
    for (int64_t i = 0; i < batch; ++i) {
      int64_t off[3];
      ix.Offsets(i, off, 3);
      call(pa + off[0], pb + off[1], py + static_cast<size_t>(i * m * n) * out_size, 0, 0, 1);
    }
  }
}

template <typename T>
void MatMul(dg::KernelContext& ctx) { Gemm<T>(ctx); }
DG_KERNEL("MatMul", "cuda", MatMul, float, double, half, bf16);

// y = act(y + bias[j]) in place over rows of n.
template <typename T>
__global__ void BiasAct(T* y, const T* bias, int64_t total, int64_t n, bool relu) {
  DGC_LOOP(i, total) {
    Acc<T> v = Load(y[i]);
    if (bias) v += Load(bias[i % n]);
    if (relu) v = v > Acc<T>(0) || v != v ? v : Acc<T>(0);
    y[i] = static_cast<T>(v);
  }
}

// act(matmul(a, b) + bias): the product through cuBLAS, then one pass for
// the bias and the activation ("none" or "relu").
template <typename T>
void MatMulBiasAct(dg::KernelContext& ctx) {
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": activation must be 'none' or 'relu', got '", act, "'");
  Gemm<T>(ctx);
  const dg::TensorRef y = ctx.output(0);
  const bool has_bias = ctx.num_inputs() >= 3;
  if (y.numel() == 0 || (!has_bias && act == "none")) return;
  const int64_t n = y.ndim() ? y.dim(-1) : 1;
  // The bias has the output's dtype: float32 where out_dtype asked for it.
  if (y.dtype() == DG_FLOAT32 && !std::is_same<T, float>::value) {
    BiasAct<float><<<Blocks(y.numel()), kThreads, 0, Prepare(ctx)>>>(
        static_cast<float*>(y.raw_data()),
        has_bias ? static_cast<const float*>(ctx.input(2).raw_data()) : nullptr, y.numel(), n,
        act == "relu");
  } else {
    BiasAct<T><<<Blocks(y.numel()), kThreads, 0, Prepare(ctx)>>>(
        static_cast<T*>(y.raw_data()),
        has_bias ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr, y.numel(), n,
        act == "relu");
  }
  CheckLaunch(ctx);
}
DG_KERNEL("MatMulBiasAct", "cuda", MatMulBiasAct, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
