// ThreadScratch (thread_scratch.h).
#include "thread_scratch.h"

#include <cstdlib>

namespace cpu_eigen {

char* ThreadScratch(int64_t bytes) {
  static thread_local char* buf = nullptr;
  static thread_local int64_t cap = 0;
  if (bytes > kThreadScratchMax) return nullptr;
  if (bytes > cap) {
    std::free(buf);
    cap = (bytes + 63) / 64 * 64;
    buf = static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>(cap)));
    if (buf == nullptr) cap = 0;
  }
  return buf;
}

}  // namespace cpu_eigen
