// GemmBest: the src/gemm/ build for the best instruction set this CPU has.
//
// Built with the library's baseline flags (plain x86-64, or the target's
// default on other architectures), so it runs on any CPU of the target and
// only calls into a v3/v4 build after DetectIsaLevel() says the CPU has it.
#include "common.h"
#include "gemm/gemm.h"

namespace cpu_eigen {
namespace {

template <typename T>
void Run(const GemmCall<T>& call) {
#ifdef CPU_EIGEN_X86_ISAS
  static const int level = DetectIsaLevel();
  if (level >= 4) return gemm_v4::Gemm(call);
  if (level == 3) return gemm_v3::Gemm(call);
#endif
  gemm_base::Gemm(call);
}

}  // namespace

void GemmBest(const GemmCall<float>& call) { Run(call); }
void GemmBest(const GemmCall<double>& call) { Run(call); }

const char* GemmBestDescribe() {
#ifdef CPU_EIGEN_X86_ISAS
  const int level = DetectIsaLevel();
  if (level >= 4) return gemm_v4::Describe();
  if (level == 3) return gemm_v3::Describe();
#endif
  return gemm_base::Describe();
}

}  // namespace cpu_eigen
