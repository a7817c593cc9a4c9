// Control-flow ops. They hold sub-graphs (GraphDef attributes "then_branch",
// "else_branch" / "cond_graph", "body_graph") and are run by the graph
// executor itself, never dispatched to a kernel; their schemas exist so that
// graphs, passes and `info` know them. Python front end: dragon_core.cond and
// dragon_core.while_loop (dragon_core/_graph/control.py).
#include "dragon/plugin.hpp"

namespace {

void RunsInGraphsOnly(dg::InferContext& ctx) {
  DG_CHECK(false, DG_FAILED_PRECONDITION,
           "control-flow ops run inside graphs only; in eager mode call "
           "dragon_core.cond / dragon_core.while_loop");
  (void)ctx;
}

}  // namespace

DG_OP(Cond)
    .Doc("Runs the then-branch sub-graph when the predicate (input 0) is true, the "
         "else-branch otherwise. Inputs: predicate, operands, then captures, else captures.")
    .Input("inputs", dg::kAny, DG_ARG_VARIADIC, "predicate, operands and captures")
    .Output("outputs", dg::kAny, DG_ARG_VARIADIC, "the branch's results")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD | DG_OP_CONTROL)
    .PyName("_cond")
    .Shape(RunsInGraphsOnly);

DG_OP(While)
    .Doc("Runs the body sub-graph while the cond sub-graph returns true (at most "
         "max_iterations times when given). Inputs: loop variables, cond captures, body "
         "captures.")
    .Input("inputs", dg::kAny, DG_ARG_VARIADIC, "loop variables and captures")
    .Output("outputs", dg::kAny, DG_ARG_VARIADIC, "the final loop variables")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD | DG_OP_CONTROL)
    .PyName("_while")
    .Shape(RunsInGraphsOnly);
