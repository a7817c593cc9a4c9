#!/usr/bin/env bash
# Build Dragon on the GPU machine and run the CUDA checks, logs in one folder.
#
# The machine (see docs/cuda.md, "Verifying on a GPU"): one H100, Ubuntu
# 24.04, Python 3.12, gcc 13, nvcc 13.0, cuBLAS 13 and cuDNN 9 under
# /usr/local/cuda, no network. Run from the repository root, with the wheels
# it lacks in .whl/ (bash tools/fetch_gpu_wheels.sh, here, first):
#
#   bash tools/gpu_check.sh [extra pytest args]      # logs in $OUT, else /tmp/gpu-check
#
# It builds sdk, core, cpu_eigen, cuda (sm_80 + sm_90 + PTX), then
# vision_ops (sm_90) and nccl_dist (optional: a failed build leaves their
# tests out and makes the exit code 3 if the rest passed) into a --target folder, without -Werror (a release build;
# gcc 13 warns where gcc 12 does not), then runs the cuda plugin's tests
# (GPU conformance suite included) and vision_ops' tests (their CUDA
# kernels now run on the cuda device), the GPU benchmark beside torch
# (bench/bench_gpu.py through bench/run.py: bench_gpu.txt and .json), then a
# compute-sanitizer memcheck over a sample of cuda kernels and of the
# runtime tests (streams, events, allocator, copies). Budget: the
# whole check stays under GPU_CHECK_BUDGET_S (default 470 s, under 8
# minutes on 16 cores): after the builds, the tests, the benchmark (its
# own time budget, DRAGON_BENCH_GPU_BUDGET_S) and the memcheck share what
# is left, each with a timeout.
set -uo pipefail
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
# The default g++ there is a wrapper whose output segfaults at import and
# fails the ABI audit: the system compiler, for C, C++ and as CUDA host.
export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
T=${TMPDIR:-/tmp}; SITE=${SITE:-$T/site}; LOG=$T/gpu-check; mkdir -p "$LOG"
# The device tool brings back at most 8 files from $OUT: the summary, the
# test log and the benchmark table as they are, everything else in one
# archive (written on any exit).
collect() {
  [ -n "${OUT:-}" ] || return 0
  cp "$LOG/summary.txt" "$LOG/pytest.log" "$LOG/bench_gpu.txt" "$OUT/" 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null
}
trap collect EXIT
PY=${PY:-python3}
t0=$(date +%s)
TOTAL=${GPU_CHECK_BUDGET_S:-470}
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
clamp() { local v=$1; [ "$v" -lt "$2" ] && v=$2; [ "$v" -gt "$3" ] && v=$3; echo "$v"; }
say() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$LOG/summary.txt"; }

{ nvidia-smi; nvcc --version; /usr/bin/g++ --version | head -1; $PY --version; } > "$LOG/machine.txt" 2>&1
say "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

if ! ls .whl/*.whl >/dev/null 2>&1; then
  say "no wheels in .whl/ (run tools/fetch_gpu_wheels.sh on a machine with network first)"
  exit 2
fi
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .whl/*.whl > "$LOG/wheels.log" 2>&1 || { say "wheel install failed"; exit 1; }
export PYTHONPATH=$SITE SITE LOG

# build PATH [extra -C options]: one pip build into $SITE, log per package.
build() {
  local p=$1; shift
  local n; n=$(basename "$p"); local s; s=$(date +%s)
  # A wheel of this package carried in .whl/ (built on a development
  # machine: plugins are py3 wheels) is already installed: no build here.
  local w; w=$(ls .whl/dragon_"${n#dragon_}"-*.whl 2>/dev/null | head -n 1)
  if [ -n "$w" ]; then say "carried $p: $(basename "$w")"; return 0; fi
  $PY -m pip install -q --no-build-isolation --no-deps --no-index --upgrade --target "$SITE" \
    -Cbuild-dir="$T/build/$n" \
    -Ccmake.define.CMAKE_CXX_COMPILER=/usr/bin/g++ -Ccmake.define.CMAKE_C_COMPILER=/usr/bin/gcc \
    -Ccmake.define.CMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ "$@" "./$p" > "$LOG/build_$n.log" 2>&1
  local rc=$?
  say "build $p rc=$rc $(( $(date +%s) - s ))s"
  return $rc
}
# sdk, core, cpu_eigen and cuda are needed by every check: a failed build of
# one of them ends the run. vision_ops and nccl_dist are not: a failed build
# of either is reported and its tests are left out, so that one run still
# gives the cuda plugin's whole picture.
fail=0
opt_fail=0   # vision_ops or nccl_dist did not build: exit 3 if pytest passed
TEST_DIRS="plugins/cuda/tests"
build sdk || fail=1
build dragon_core || fail=1
build plugins/cpu_eigen || fail=1
build plugins/cuda || fail=1   # its own default: 80-real;90 (sm_80, sm_90 SASS + PTX)
if [ $fail -ne 0 ]; then
  say "a build failed: see $LOG/build_*.log"; tail -n 30 "$LOG"/build_*.log > "$LOG/build_tails.txt"
  tail -n 40 "$LOG/build_tails.txt" | tee -a "$LOG/summary.txt"
  exit 1
fi
if build plugins/vision_ops -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90; then
  TEST_DIRS="$TEST_DIRS plugins/vision_ops/tests"
else
  opt_fail=1
  say "vision_ops did not build (tail below): its tests are left out"
  tail -n 15 "$LOG/build_vision_ops.log" | tee -a "$LOG/summary.txt"
  # A previous run's install on a warm machine would otherwise load (entry
  # points) into the cuda tests, built against an older core.
  rm -rf "$SITE"/dragon_vision_ops "$SITE"/dragon_vision_ops-*.dist-info
fi
if build plugins/nccl_dist; then
  TEST_DIRS="$TEST_DIRS plugins/nccl_dist/tests"
else
  opt_fail=1
  say "nccl_dist did not build (tail below): its tests are left out"
  tail -n 15 "$LOG/build_nccl_dist.log" | tee -a "$LOG/summary.txt"
  rm -rf "$SITE"/dragon_nccl_dist "$SITE"/dragon_nccl_dist-*.dist-info
fi

# GPU_CHECK_WERROR=1: every package is built again with that machine's
# gcc 13 (and nvcc with gcc 13 as host compiler) and DRAGON_WERROR=ON into
# a throwaway folder, the packages in parallel: the issue's "warning-free
# with gcc 12, gcc 13 and clang 16" (gcc 12 and clang 16 are checked by make
# test / make check-compilers). =1 runs it in the background during the
# tests; =after runs it at the end, in the time left. Result: werror.txt.
werror_builds() {
  for p in dragon_core plugins/cpu_eigen plugins/vision_ops plugins/nccl_dist plugins/cuda; do
    (
      n=$(basename "$p"); s=$(date +%s)
      nice -n 10 $PY -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$T/werror-wheels" \
        -Cbuild-dir="$T/werror-build/$n" -Ccmake.define.DRAGON_WERROR=ON \
        -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
        -Ccmake.define.CMAKE_CXX_COMPILER=/usr/bin/g++ -Ccmake.define.CMAKE_C_COMPILER=/usr/bin/gcc \
        -Ccmake.define.CMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ "./$p" > "$LOG/werror_$n.log" 2>&1
      rc=$?
      echo "gcc13 -Werror $p rc=$rc $(( $(date +%s) - s ))s"
      [ $rc -ne 0 ] && grep -E "error:|warning:" "$LOG/werror_$n.log" | head -n 12
    ) &
  done
  wait
}
WPID=
if [ "${GPU_CHECK_WERROR:-0}" = 1 ]; then
  werror_builds > "$LOG/werror.txt" 2>&1 &
  WPID=$!
fi

# cuBLAS for MatMul: the toolkit's copy and the nvidia-* wheels torch
# brought (the plugin also searches the system loader path).
NV=$($PY - <<'PYEOF' 2>/dev/null
import os
try:
    import nvidia
    paths = list(nvidia.__path__)
except ImportError:
    paths = []
print(":".join(os.path.join(p, s, "lib") for p in paths for s in ("cu13", "cublas", "cudnn", "nccl")
               if os.path.isdir(os.path.join(p, s, "lib"))))
PYEOF
)
export DRAGON_CUDA_LIBRARY_PATH="${DRAGON_CUDA_LIBRARY_PATH:+$DRAGON_CUDA_LIBRARY_PATH:}/usr/local/cuda/lib64${NV:+:$NV}"
say "DRAGON_CUDA_LIBRARY_PATH=$DRAGON_CUDA_LIBRARY_PATH"
# libnccl.so.2 (nccl_dist opens it by name when no nvidia-nccl wheel sits
# beside the package): the one torch's nvidia-* wheels brought.
export LD_LIBRARY_PATH="${NV:+$NV:}${LD_LIBRARY_PATH:-}"

# Outside the checkout, so that the installed packages (not the sources) load.
(cd "$T" && $PY -m dragon_core info) > "$LOG/info.txt" 2>&1
grep -A3 "^Devices" "$LOG/info.txt" | tee -a "$LOG/summary.txt"
(cd "$T" && timeout 60 $PY - <<'PYEOF') > "$LOG/smoke.txt" 2>&1
import numpy as np, dragon_core as dg, dragon_cuda
print("count", dragon_cuda.device_count(), dragon_cuda.unavailable_reason())
print(dragon_cuda.get_device_name(0))
x = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).to("cuda")
print((x * x + x).cpu().numpy())
print(dg.ops.matmul(x, x, transpose_b=True).cpu().numpy())
print(dg.memory.stats("cuda:0"))
PYEOF
say "smoke rc=$? ($(tail -n 1 "$LOG/smoke.txt" | cut -c1-120))"

# MPI for nccl_dist's cpu kernels: the system Open MPI there.
for m in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40; do
  [ -e "$m" ] && { export DRAGON_LIBMPI=$m; break; }
done

# GPU_CHECK_ONLY="command": after the builds and the smoke test, run just
# that command (a profile, one test file), its output in only.txt.
if [ -n "${GPU_CHECK_ONLY:-}" ]; then
  t1=$(date +%s)
  timeout -k 5 "$(clamp $(( $(left) - 5 )) 10 600)" bash -c "$GPU_CHECK_ONLY" > "$LOG/only.txt" 2>&1
  rc=$?
  cp "$LOG/only.txt" "${OUT:-$LOG}/" 2>/dev/null
  tail -n 60 "$LOG/only.txt"
  say "only: rc=$rc $(( $(date +%s) - t1 ))s"
  exit $rc
fi

# What is left after the builds: about a third (45-150 s) for the benchmark,
# 60 s for the memcheck and the example, the rest (at least 60 s) for the tests.
L=$(left)
BENCH_S=$(clamp $(( L / 3 )) 45 150)
# (-20: pytest's grace period between SIGINT and SIGKILL, below.)
PYTEST_S=$(clamp $(( L - BENCH_S - 60 - 20 )) 60 330)
say "time left ${L}s: pytest ${PYTEST_S}s, benchmark ${BENCH_S}s"

t1=$(date +%s)
# --continue-on-collection-errors: a test file that fails to import is
# reported as an error and the other files run (xdist does so anyway;
# with GPU_CHECK_WORKERS=0 pytest would otherwise run no test at all).
# Out of time, pytest gets SIGINT (then SIGKILL 20 s later): interrupted,
# it still prints the failures so far, its counts and junit.xml, where
# timeout's SIGTERM left a log without any summary.
timeout -s INT -k 20 "$PYTEST_S" $PY -m pytest -q -p no:cacheprovider -n "${GPU_CHECK_WORKERS:-16}" -rfE \
  --continue-on-collection-errors --tb=short --durations=20 --junitxml="$LOG/junit.xml" \
  $TEST_DIRS "$@" > "$LOG/pytest.log" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)" "$LOG/pytest.log" | cut -c1-200 | head -n 60
say "pytest rc=$rc $(( $(date +%s) - t1 ))s: $(tail -n 1 "$LOG/pytest.log")"
say "pytest failures by test: $(grep -E '^(FAILED|ERROR)' "$LOG/pytest.log" | sed -E 's/^[A-Z]+ ([^[ ]+).*/\1/' | sort | uniq -c | sort -rn | head -n 25 | tr '\n' ';')"

# The benchmark table beside torch (same run), outside the checkout's
# sources: bench/run.py puts only bench/ on sys.path, the packages come
# from $SITE.
t1=$(date +%s)
DRAGON_BENCH_GPU_BUDGET_S=$(( BENCH_S - 25 )) timeout -k 5 "$BENCH_S" \
  $PY bench/run.py -k gpu --json "$LOG/bench_gpu.json" > "$LOG/bench_gpu.txt" 2>&1
brc=$?
cat "$LOG/bench_gpu.txt"
say "benchmark rc=$brc $(( $(date +%s) - t1 ))s: $(grep -cE ' (PASS|MISS|INFO)' "$LOG/bench_gpu.txt") rows timed"

# GPU_CHECK_PROFILE=1: the per-op device-time profile of the training steps
# (bench/profile_gpu.py, beside torch's), in profile.txt.
if [ "${GPU_CHECK_PROFILE:-0}" = 1 ]; then
  t1=$(date +%s)
  P_S=$(clamp $(( $(left) - 60 )) 20 70)
  timeout -k 5 "$P_S" $PY bench/profile_gpu.py --budget $(( P_S - 10 )) --top 15 > "$LOG/profile.txt" 2>&1
  prc=$?
  cp "$LOG/profile.txt" "${OUT:-$LOG}/" 2>/dev/null
  say "profile rc=$prc $(( $(date +%s) - t1 ))s"
fi

# The example trains on the GPU (two epochs; its accuracy check stays on).
t1=$(date +%s)
(cd "$T" && timeout -k 5 45 $PY "$OLDPWD/examples/train_digits.py" --device cuda --epochs 2 \
  --min-accuracy 0.9 --out "$T/digits") > "$LOG/digits.txt" 2>&1
say "train_digits --device cuda rc=$? $(( $(date +%s) - t1 ))s: $(tail -n 2 "$LOG/digits.txt" | tr '\n' ' ' | cut -c1-200)"

M=$(( $(left) - 5 ))
if [ "$M" -lt 20 ]; then
  say "no time left for the memcheck (${M}s)"
elif command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout -k 5 "$(clamp "$M" 20 60)" "$CS" --tool memcheck --error-exitcode 9 $PY -m pytest -q -p no:cacheprovider \
    plugins/cuda/tests/test_cuda_conformance.py \
    -k "(float32 and (Add-1 or Mul-2 or Sum-2 or Softmax-2 or MatMul-3 or Cast-0 or ArgMax-1 or Where)) or (bfloat16 and (LayerNorm-2 or test_multi_tensor_updates))" \
    > "$LOG/memcheck.log" 2>&1
  say "memcheck rc=$? ($(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/memcheck.log" | tail -n 2 | tr '\n' ' '))"
  # The runtime tests' streams, events, allocator reuse and copies under
  # memcheck too (short ones; not the fault-injection subprocesses, whose
  # errors are the point, nor out of memory).
  M=$(( $(left) - 5 ))
  if [ "$M" -lt 20 ]; then
    say "no time left for the runtime memcheck (${M}s)"
  else
    timeout -k 5 "$(clamp "$M" 20 60)" "$CS" --tool memcheck --error-exitcode 9 $PY -m pytest -q -p no:cacheprovider \
      plugins/cuda/tests/test_cuda_runtime.py \
      -k "stream_ordered or two_streams or cross_stream or block_freed or device_to_device or (round_trip_of_every_dtype and (int8 or float16)) or non_contiguous or empty_tensors or written_out or pinned" \
      > "$LOG/memcheck_runtime.log" 2>&1
    say "memcheck runtime rc=$? ($(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/memcheck_runtime.log" | tail -n 2 | tr '\n' ' '))"
  fi
fi
if [ "${GPU_CHECK_WERROR:-0}" = after ]; then
  if [ "$(left)" -gt 40 ]; then
    werror_builds > "$LOG/werror.txt" 2>&1 &
    WPID=$!
  else
    say "no time left for the gcc 13 -Werror builds ($(left)s)"
  fi
fi
if [ -n "$WPID" ]; then
  W=$(( $(left) > 10 ? $(left) : 10 ))
  for _ in $(seq "$W"); do kill -0 "$WPID" 2>/dev/null || break; sleep 1; done
  kill -0 "$WPID" 2>/dev/null && { kill "$WPID"; echo "(stopped: out of time)" >> "$LOG/werror.txt"; }
  while read -r line; do say "$line"; done < "$LOG/werror.txt"
fi
# pytest's code, or 3 when it passed but an optional plugin did not build
# (its tests did not run): a run that left tests out never reads as a pass.
[ $rc -eq 0 ] && [ $opt_fail -ne 0 ] && rc=3
say "total $(( $(date +%s) - t0 ))s, exit code $rc"
exit $rc
