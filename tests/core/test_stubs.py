"""The generated .pyi stubs of dragon_core.ops and Tensor are current, ship
with the package, and the examples type-check against them (issue 19.2)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import dragon_core as dg

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "dragon_core" / "python" / "dragon_core"


def _gen():
    spec = importlib.util.spec_from_file_location("_gen_stubs", ROOT / "tools" / "gen_stubs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stubs_are_current():
    for name, text in _gen().stubs().items():
        assert (PKG / name).read_text() == text, \
            f"{name} is stale: run `make stubs` (tools/gen_stubs.py)"


def test_stubs_follow_the_convention():
    ops_pyi = (PKG / "ops.pyi").read_text()
    tensor_pyi = (PKG / "_tensor.pyi").read_text()
    assert "def sum(x: _TensorLike, axis: int | Sequence[int] | None = ..., " \
           "keepdims: bool = ...) -> Tensor: ..." in ops_pyi
    assert "    def sum(self, axis: int | Sequence[int] | None = ..., " \
           "keepdims: bool = ...) -> Tensor: ..." in tensor_pyi
    for gone in ("def adam_update(self", "def max_pool2d_grad(self", "axes: Sequence[int] |",
                 "def conv2d_bias_act(self"):
        assert gone not in tensor_pyi
    assert "axes:" not in ops_pyi.replace("def transpose(x: _TensorLike, axes:", "")


def test_package_is_typed():
    installed = Path(dg.__file__).parent
    assert (installed / "py.typed").exists()
    assert (installed / "ops.pyi").exists() and (installed / "_tensor.pyi").exists()


def test_examples_type_check_with_mypy(tmp_path):
    # mypy is in requirements-dev.txt, so `make` installs it.
    pytest.importorskip("mypy", reason="mypy is in requirements-dev.txt; run `make deps`")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                        "--cache-dir", str(tmp_path / "cache"), "--ignore-missing-imports",
                        "--follow-imports=silent", str(ROOT / "examples")],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_catches_an_old_name(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in requirements-dev.txt; run `make deps`")
    bad = tmp_path / "bad.py"
    bad.write_text("import dragon_core as dg\n"
                   "x = dg.ops.ones((2, 3))\n"
                   "y = dg.ops.sum(x, axes=[1])\n"
                   "z = x.adam_update\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                        "--cache-dir", str(tmp_path / "cache"), "--ignore-missing-imports",
                        "--follow-imports=silent", str(bad)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert 'Unexpected keyword argument "axes" for "sum"' in r.stdout, r.stdout
