#!/usr/bin/env bash
# Download, here (with network), the cp312 wheels the GPU machine lacks into
# .whl/ (ignored by git; `run` carries it with carry=[".whl"]). See
# /work/shared/gpu/README.md and docs/cuda.md.
set -euo pipefail
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl cmeel cmeel-eigen grpcio-tools==1.84.0 tensorboardX pyelftools
ls -la .whl
