"""Host-side test of the per-(device, stream) library handle table the cuBLAS
and cuDNN kernels share (``src/runtime.h``: ``HandleFor``).

The plugin declares both libraries' handle types itself, as ``void*``. A
table keyed by the handle type alone was one table for both libraries (the
table is a static of a template instance, one object across the plugin's
object files), so a matmul and a convolution on one stream were handed the
same handle, made by whichever library ran first. The table is now keyed by
a library tag; this test links two translation units, each with its own
tag and a ``void*`` handle (as matmul.cu and cudnn.cu), and checks that
each library gets its own handle per (device, stream), made once. Runs
without a GPU: the header needs only CUDA's runtime API header.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from _host_cpp import run_program


def _cuda_include() -> Path:
    """The CUDA toolkit's include folder (cuda_runtime_api.h), else skip."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parents[1]))
    for root in roots:
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root) / "include"
    pytest.skip("no CUDA toolkit headers (cuda_runtime_api.h) for the host-side test")


UNIT = r"""
#include "runtime.h"

namespace {
struct Lib {};  // this unit's library tag, as CublasLib / CudnnLib
}  // namespace

// The handle of library NAME for (device, stream); *made counts creations.
void* NAME(int device, cudaStream_t stream, int* made) {
  return dragon_cuda::HandleFor<Lib, void*>(device, stream, [&](void** h) {
           ++*made;
           *h = reinterpret_cast<void*>(static_cast<intptr_t>(BASE + device));
         }).h;
}
"""

MAIN = r"""
#include <cstdint>
#include <cstdio>
#include <cuda_runtime_api.h>

void* Blas(int device, cudaStream_t stream, int* made);
void* Dnn(int device, cudaStream_t stream, int* made);

static int fails = 0;
static void Expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++fails;
  }
}

int main() {
  int blas = 0, dnn = 0;
  cudaStream_t s0 = nullptr;
  cudaStream_t s1 = reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(0x1000));
  // cuBLAS first on (0, s0), then cuDNN on the same (device, stream).
  Expect(Blas(0, s0, &blas) == reinterpret_cast<void*>(0x100), "blas handle of (0, s0)");
  Expect(Dnn(0, s0, &dnn) == reinterpret_cast<void*>(0x200), "dnn handle of (0, s0)");
  // Made once per (library, device, stream).
  Expect(Blas(0, s0, &blas) == reinterpret_cast<void*>(0x100), "blas handle again");
  Expect(Dnn(0, s0, &dnn) == reinterpret_cast<void*>(0x200), "dnn handle again");
  Expect(blas == 1 && dnn == 1, "one creation per library");
  // Another stream and another device get their own, in either order.
  Expect(Dnn(0, s1, &dnn) == reinterpret_cast<void*>(0x200), "dnn handle of (0, s1)");
  Expect(Blas(0, s1, &blas) == reinterpret_cast<void*>(0x100), "blas handle of (0, s1)");
  Expect(Dnn(1, s0, &dnn) == reinterpret_cast<void*>(0x201), "dnn handle of (1, s0)");
  Expect(Blas(1, s0, &blas) == reinterpret_cast<void*>(0x101), "blas handle of (1, s0)");
  Expect(blas == 3 && dnn == 3, "one creation per (library, device, stream)");
  std::printf(fails ? "fails %d\n" : "OK\n", fails);
  return fails != 0;
}
"""


def test_each_library_gets_its_own_handle(tmp_path):
    units = {
        "unit_blas": UNIT.replace("NAME", "Blas").replace("BASE", "0x100"),
        "unit_dnn": UNIT.replace("NAME", "Dnn").replace("BASE", "0x200"),
    }
    # -isystem: the toolkit's headers are not held to -Wall -Wextra -Werror
    # (another host compiler, e.g. the GPU machine's gcc 13, may warn there).
    run_program(tmp_path, "handles", MAIN, flags=("-O1", "-isystem", str(_cuda_include())),
                units=units)
