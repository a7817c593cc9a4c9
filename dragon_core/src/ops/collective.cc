// Collectives (issue 16): all_reduce, broadcast, all_gather, reduce_scatter,
// all_to_all over a process group of dragon_core.distributed. The schemas
// live in the core so graphs name them without any backend; kernels come
// from the backends (the mpi backend's cpu kernels are registered by
// dragon_core.distributed at init_process_group; cuda ones by a plugin).
// DG_OP_COLLECTIVE (ABI 1.3): never pruned, merged or folded, and kept in
// traced order against the other collectives by the executor.
// Differentiable (rules in dragon_core/_grads/collective.py, as
// torch.distributed.nn): all_reduce sum/avg -> all_reduce of the gradient,
// all_gather <-> reduce_scatter, broadcast -> reduce to the root, all_to_all
// -> all_to_all.
#include <cstdint>
#include <string>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

int64_t GroupSize(dg::InferContext& ctx) {
  const int64_t n = ctx.i("group_size");
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "group_size must be >= 1, got ", n);
  return n;
}

void CheckReduceOp(dg::InferContext& ctx) {
  const std::string op = ctx.s("reduce_op");
  DG_CHECK(op == "sum" || op == "avg" || op == "max" || op == "min" ||
               op == "prod",
           DG_INVALID_ARGUMENT,
           "reduce_op must be one of sum, avg, max, min, prod; got '", op, "'");
}

void SameShape(dg::InferContext& ctx) {
  GroupSize(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}

void AllReduceShape(dg::InferContext& ctx) {
  CheckReduceOp(ctx);
  SameShape(ctx);
}

void AllGatherShape(dg::InferContext& ctx) {
  Shape out = ctx.input(0).shape();
  out.insert(out.begin(), GroupSize(ctx));
  CheckedNumel(out, "output shape");
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

Shape Blocks(dg::InferContext& ctx, const char* what) {
  const Shape in = ctx.input(0).shape();
  const int64_t n = GroupSize(ctx);
  DG_CHECK(!in.empty() && in[0] % n == 0, DG_INVALID_ARGUMENT, what,
           ": axis 0 of the input ", ShapeStr(in), " must divide into ", n,
           " blocks (the group size)");
  return in;
}

void ReduceScatterShape(dg::InferContext& ctx) {
  CheckReduceOp(ctx);
  Shape out = Blocks(ctx, "reduce_scatter");
  out[0] /= GroupSize(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void AllToAllShape(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), Blocks(ctx, "all_to_all"));
}

constexpr const char* kGroupDoc =
    "Process-group id of dragon_core.distributed (0: the world).";
constexpr const char* kSizeDoc = "Number of ranks in the group.";
constexpr const char* kTagDoc =
    "Trace-order tag; the first run checks that every rank issues the same "
    "collective here.";

}  // namespace

#define DG_COLLECTIVE_COMMON(DOC)                                          \
  .Doc(DOC)                                                                \
      .Input("x", dg::kAny, 0, "This rank's tensor.")                      \
      .Output("y", dg::kAny, 0, "The result on this rank.")                \
      .Attr("group", int64_t{0}, kGroupDoc)                                \
      .Attr("group_size", int64_t{1}, kSizeDoc)                            \
      .Attr("reduce_op", "sum",                                            \
            "Reduction: sum, avg, max, min or prod (reductions only).")   \
      .Attr("src", int64_t{0}, "Root's rank in the group (broadcast).")    \
      .Attr("tag", "", kTagDoc)                                            \
      .Flags(DG_OP_COLLECTIVE)

DG_OP(CollectiveAllReduce)
DG_COLLECTIVE_COMMON("Reduces x over the ranks of the group; every rank gets "
                     "the result.")
    .Shape(AllReduceShape);

DG_OP(CollectiveBroadcast)
DG_COLLECTIVE_COMMON("x of the group's rank src, on every rank.")
    .Shape(SameShape);

DG_OP(CollectiveAllGather)
DG_COLLECTIVE_COMMON("Every rank's x stacked along a new axis 0, in rank "
                     "order: shape (group_size, *x.shape).")
    .Shape(AllGatherShape);

DG_OP(CollectiveReduceScatter)
DG_COLLECTIVE_COMMON("Reduces x over the ranks; rank r gets block r of "
                     "group_size equal blocks along axis 0.")
    .Shape(ReduceScatterShape);

DG_OP(CollectiveAllToAll)
DG_COLLECTIVE_COMMON("Block j of group_size equal blocks of x along axis 0 "
                     "goes to rank j; the result's block i came from rank i.")
    .Shape(AllToAllShape);

#undef DG_COLLECTIVE_COMMON

}  // namespace ops
}  // namespace dragon
