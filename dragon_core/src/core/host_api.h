// The host function table handed to plugins, and the per-call contexts its
// functions receive as `host_ctx`.
#ifndef DRAGON_CORE_HOST_API_H_
#define DRAGON_CORE_HOST_API_H_

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "tensor.h"

namespace dragon {

struct HostCtx {
  enum Kind { kInfer, kCall, kInit } kind;
  explicit HostCtx(Kind k) : kind(k) {}
  DgStatus code = DG_OK;
  std::string message;
};

struct InferState : HostCtx {
  InferState() : HostCtx(kInfer) {}
  struct Out {
    bool set = false;
    DgDType dtype = DG_FLOAT32;
    Shape shape;
  };
  std::vector<Out> outs;
  int32_t fixed_outputs = 0;  // -1: variadic
};

struct CallState : HostCtx {
  CallState() : HostCtx(kCall) {}
  DgDevice device{0, 0};
  std::vector<std::shared_ptr<Storage>> workspaces;
};

const DgHostApi* HostApi();
int32_t HostNumThreads();

}  // namespace dragon

#endif  // DRAGON_CORE_HOST_API_H_
