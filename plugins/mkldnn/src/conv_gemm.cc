// Convolutions on tiny feature maps as one GEMM (conv_gemm.h).
//
// On a 2 x 2 output map a 3 x 3 filter with padding 1 reads the image at
// only 4 of its 9 taps per pixel, and oneDNN's direct kernels
// (jit:avx512_core, nChw16c) spend most of their time on the padding and
// on loop overhead: ResNet-18's last stage (512 channels, 2 x 2 at 64 x 64
// input) ran at a third of the speed of its earlier stages. As a GEMM the
// same work runs on oneDNN's matmul (brgemm) near the FMA peak, reads the
// filter in the core's plain [O, C kh kw] layout (no reorder into and out
// of OIhw16i16o: the filter gradient is written in place), and the im2col
// matrix is small (n oh ow rows). With X = im2col(x) [M, K] (M = n oh ow
// rows ordered (n, oy, ox); K = c kh kw columns ordered (c, i, j), the
// filter's own order; zeros where a tap reads padding), W = filter [O, K]
// and DY = dy as [M, O]:
//   forward:        Y^T = W X^T         [O, M]  -> y  [n, o, oh, ow]
//   backward data:  DX  = DY W          [M, K]  -> dx by col2im (sums)
//   filter grad:    dW  = DY^T X        [O, K]  (dw itself)
// Each product is arranged so that the large operand, the filter, is read
// in its own row-major layout (oneDNN's matmul copies a transposed
// operand into its blocks: X W^T took 1.9 ms where W X^T takes 1.4 ms on
// [32, 4608] x [4608, 512]), and DY^T is built dense.
// Every loop here runs in a fixed order, so results do not depend on the
// thread count beyond oneDNN's matmul (which is deterministic for a fixed
// primitive). docs/conv.md has the measurements behind kGemmMaxPixels.
#include "conv_gemm.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace mkldnn_plugin {
namespace {

using dnnl::memory;

// Products with fewer multiply-adds run on one thread (as in matmul.cc).
constexpr int64_t kSerialWork = int64_t{1} << 20;

bool Enabled() {
  static const bool on = [] {
    const char* env = std::getenv("DRAGON_MKLDNN_CONV_GEMM");
    return !(env && std::string(env) == "0");
  }();
  return on;
}

memory::desc Matrix(int64_t rows, int64_t cols, int64_t row_stride,
                    int64_t col_stride) {
  return memory::desc({rows, cols}, memory::data_type::f32,
                      {row_stride, col_stride});
}

// The matmul of a call: a [m, k] @ b [k, n] -> c [m, n], each operand with
// its strides (see the file comment for the three products).
struct Product {
  memory::desc a, b, c;
  int threads;
  std::string key;
};

Product MakeProduct(const DgCallFrame* f, const GemmConvGeometry& g,
                    GemmConvKind kind) {
  const int64_t m = g.rows(), k = g.cols(), o = g.o;
  Product p;
  switch (kind) {
    case GemmConvKind::kForward:  // W [o, k] @ X^T [k, m]
      p.a = Matrix(o, k, k, 1);
      p.b = Matrix(k, m, 1, k);
      p.c = Matrix(o, m, m, 1);
      break;
    case GemmConvKind::kBackwardData:  // DY [m, o] @ W [o, k]
      p.a = Matrix(m, o, o, 1);
      p.b = Matrix(o, k, k, 1);
      p.c = Matrix(m, k, k, 1);
      break;
    case GemmConvKind::kFilterGrad:  // DY^T [o, m] (dense) @ X [m, k]
      p.a = Matrix(o, m, m, 1);
      p.b = Matrix(m, k, k, 1);
      p.c = Matrix(o, k, k, 1);
      break;
  }
  p.threads = Threads(f, m * k * o, kSerialWork);
  p.key = Key("convgemm", static_cast<int>(kind), m, k, o, p.threads);
  return p;
}

using MatMulPd = dnnl::matmul::primitive_desc;

// The cached primitive; an empty entry when oneDNN has only its reference
// loop (or none) for the product.
Prim<MatMulPd> Lookup(const Product& p) {
  PrimitiveCache::Entry e = PrimitiveCache::Get().Lookup(p.key, [&] {
    const OmpThreads threads(p.threads);
    try {
      auto pd = std::make_shared<const MatMulPd>(Engine(), p.a, p.b, p.c,
                                                 Attr());
      if (std::strncmp(pd->impl_info_str(), "ref", 3) == 0) {
        return PrimitiveCache::Entry{};
      }
      return PrimitiveCache::Entry{dnnl::matmul(*pd), pd};
    } catch (const dnnl::error&) {
      return PrimitiveCache::Entry{};
    }
  });
  return {e.prim, std::static_pointer_cast<const MatMulPd>(e.pd)};
}

void Run(const dg::KernelContext& ctx, const GemmConvGeometry& g,
         GemmConvKind kind, const void* a, const void* b, void* c) {
  const Product p = MakeProduct(ctx.frame(), g, kind);
  const Prim<MatMulPd> prim = Lookup(p);
  DG_CHECK(prim.pd != nullptr, DG_INTERNAL, ctx.op_name(),
           ": no matmul for the GEMM convolution (supports() should have "
           "declined)");
  const OmpThreads threads(p.threads);
  Execute(ctx, prim.prim, *prim.pd,
          {{DNNL_ARG_SRC, memory(p.a, Engine(), const_cast<void*>(a))},
           {DNNL_ARG_WEIGHTS, memory(p.b, Engine(), const_cast<void*>(b))},
           {DNNL_ARG_DST, memory(p.c, Engine(), c)}});
}

// A 4-D tensor's element (i0, i1, i2, i3) through its strides.
struct Strided4 {
  const float* data;
  int64_t s[4];
  explicit Strided4(const dg::TensorRef& t)
      : data(t.data<const float>()),
        s{t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]} {}
  float at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return data[a * s[0] + b * s[1] + c * s[2] + d * s[3]];
  }
};

// The image row (iy) a tap reads for output row oy, or -1 in the padding.
inline int64_t Tap(int64_t out, int64_t stride, int64_t pad, int64_t i,
                   int64_t size) {
  const int64_t v = out * stride - pad + i;
  return v >= 0 && v < size ? v : -1;
}

// X = im2col(x) into cols [M, K].
void Im2Col(const dg::TensorRef& xt, const GemmConvGeometry& g, float* cols) {
  const Strided4 x(xt);
  const int64_t k = g.cols();
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float* row = cols + ((n * g.oh + oy) * g.ow + ox) * k;
        for (int64_t c = 0; c < g.c; ++c) {
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = Tap(oy, g.sh, g.ph, i, g.h);
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t ix = Tap(ox, g.sw, g.pw, j, g.w);
              *row++ = iy >= 0 && ix >= 0 ? x.at(n, c, iy, ix) : 0.f;
            }
          }
        }
      }
    }
  }
}

// dy [n, o, oh, ow] as the matrix [M, O].
void WindowRows(const dg::TensorRef& dyt, const GemmConvGeometry& g,
                float* out) {
  const Strided4 dy(dyt);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float* row = out + ((n * g.oh + oy) * g.ow + ox) * g.o;
        for (int64_t o = 0; o < g.o; ++o) row[o] = dy.at(n, o, oy, ox);
      }
    }
  }
}

// dy [n, o, oh, ow] as the dense matrix DY^T [O, M].
void WindowCols(const dg::TensorRef& dyt, const GemmConvGeometry& g,
                float* out) {
  const Strided4 dy(dyt);
  const int64_t m = g.rows();
  for (int64_t o = 0; o < g.o; ++o) {
    float* col = out + o * m;
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) *col++ = dy.at(n, o, oy, ox);
      }
    }
  }
}

// The filter as a dense [O, K] matrix: the tensor itself when contiguous,
// else a workspace copy.
const float* DenseFilter(const dg::KernelContext& ctx, const dg::TensorRef& w,
                         const GemmConvGeometry& g) {
  if (w.is_contiguous()) return w.data<const float>();
  float* out = ctx.workspace<float>(g.o * g.cols());
  const Strided4 s(w);
  float* p = out;
  for (int64_t o = 0; o < g.o; ++o) {
    for (int64_t c = 0; c < g.c; ++c) {
      for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) *p++ = s.at(o, c, i, j);
      }
    }
  }
  return out;
}

}  // namespace

bool GemmConvServes(const GemmConvGeometry& g) {
  return Enabled() && g.kh * g.kw > 1 && g.pixels() <= kGemmMaxPixels &&
         g.rows() > 0 && g.cols() > 0 && g.o > 0;
}

bool GemmConvPrimitive(const DgCallFrame* f, const GemmConvGeometry& g,
                       GemmConvKind kind) {
  return Lookup(MakeProduct(f, g, kind)).pd != nullptr;
}

void GemmConvForward(const dg::KernelContext& ctx, const GemmConvGeometry& g) {
  const int64_t m = g.rows(), pixels = g.pixels();
  float* cols = ctx.workspace<float>(m * g.cols());
  float* prod = ctx.workspace<float>(m * g.o);
  Im2Col(ctx.input(0), g, cols);
  Run(ctx, g, GemmConvKind::kForward, DenseFilter(ctx, ctx.input(1), g), cols,
      prod);
  // Y^T [O, M], M ordered (n, pixel) -> y [n, o, oh, ow] (contiguous: an
  // output): runs of `pixels` floats.
  float* y = ctx.output(0).data<float>();
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.o; ++o) {
      std::memcpy(y + (n * g.o + o) * pixels, prod + o * m + n * pixels,
                  sizeof(float) * pixels);
    }
  }
}

void GemmConvBackwardData(const dg::KernelContext& ctx,
                          const GemmConvGeometry& g) {
  const int64_t m = g.rows(), k = g.cols();
  float* rows = ctx.workspace<float>(m * g.o);
  float* cols = ctx.workspace<float>(m * k);
  WindowRows(ctx.input(0), g, rows);
  Run(ctx, g, GemmConvKind::kBackwardData, rows,
      DenseFilter(ctx, ctx.input(1), g), cols);
  // col2im: every tap's value adds into the image pixel it read.
  float* dx = ctx.output(0).data<float>();
  std::memset(dx, 0, sizeof(float) * g.n * g.c * g.h * g.w);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const float* row = cols + ((n * g.oh + oy) * g.ow + ox) * k;
        for (int64_t c = 0; c < g.c; ++c) {
          float* image = dx + (n * g.c + c) * g.h * g.w;
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = Tap(oy, g.sh, g.ph, i, g.h);
            for (int64_t j = 0; j < g.kw; ++j, ++row) {
              const int64_t ix = Tap(ox, g.sw, g.pw, j, g.w);
              if (iy >= 0 && ix >= 0) image[iy * g.w + ix] += *row;
            }
          }
        }
      }
    }
  }
}

void GemmConvFilterGrad(const dg::KernelContext& ctx,
                        const GemmConvGeometry& g) {
  const int64_t m = g.rows();
  float* cols = ctx.workspace<float>(m * g.cols());
  float* dy_t = ctx.workspace<float>(m * g.o);
  Im2Col(ctx.input(0), g, cols);
  WindowCols(ctx.input(1), g, dy_t);
  Run(ctx, g, GemmConvKind::kFilterGrad, dy_t, cols,
      ctx.output(0).data<float>());
}

}  // namespace mkldnn_plugin
