"""`tools/wheels.py check` on dragon-cuda's wheel (issue 20).

The real wheel is checked by `make wheels`; these build small stand-in
wheels around a real shared object (compiled here) to show that the check
refuses what it must: a library that needs the CUDA runtime (or any NVIDIA
library) at load time, METADATA without the nvidia-* run-time wheels, and a
missing dragon-cuda wheel when nvcc built one.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("elftools", reason="pyelftools comes with auditwheel (requirements-dev)")


def _wheels_module():
    spec = importlib.util.spec_from_file_location("dragon_tools_wheels", ROOT / "tools" / "wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wheels = _wheels_module()

METADATA = """Metadata-Version: 2.1
Name: dragon-cuda
Version: 0.1.0
Summary: stand-in
License: Apache-2.0
Requires-Python: >=3.9
Classifier: Programming Language :: Python :: 3
Project-URL: Homepage, https://example.invalid
Description-Content-Type: text/markdown
Requires-Dist: dragon-core<2,>=0.1
{requires}
# dragon-cuda stand-in
"""

NVIDIA_REQUIRES = ('Requires-Dist: nvidia-cublas<14,>=13; platform_system == "Linux"\n'
                   'Requires-Dist: nvidia-cudnn-cu13<10,>=9; platform_system == "Linux"')


def _compile(tmp: Path, link_cudart: bool) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the stand-in library"
    src = tmp / "x.c"
    src.write_text("#include <string.h>\n"
                   "size_t dragon_stand_in(const char *s) { return strlen(s); }\n")
    args = []
    if link_cudart:
        # A library with the CUDA runtime's SONAME, linked as a dynamic one.
        fake = tmp / "libcudart.so"
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", fake, src],
                       check=True)
        args = ["-Wl,--no-as-needed", f"-L{tmp}", "-lcudart"]
    out = tmp / ("bad.so" if link_cudart else "good.so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", out, src, *args], check=True)
    return out


def _wheel(dist: Path, so: Path, requires: str) -> Path:
    dist.mkdir(exist_ok=True)
    path = dist / f"dragon_cuda-0.1.0-py3-none-{wheels.PLAT}.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("dragon_cuda/__init__.py", "")
        z.write(so, "dragon_cuda/libdragon_cuda.so")
        z.writestr("dragon_cuda-0.1.0.dist-info/METADATA", METADATA.format(requires=requires))
        z.write(ROOT / "LICENSE", "dragon_cuda-0.1.0.dist-info/licenses/LICENSE")
    return path


def _sdist(dist: Path) -> Path:
    path = dist / "dragon_cuda-0.1.0.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        t.add(ROOT / "LICENSE", "dragon_cuda-0.1.0/LICENSE")
    return path


def _cuda_problems(dist: Path, cuda: bool = True) -> list[str]:
    return [p for p in wheels.check(dist, cuda=cuda)
            if p.startswith(("dragon_cuda-", "dragon-cuda:"))]


def test_clean_cuda_wheel_passes(tmp_path):
    whl = _wheel(tmp_path / "dist", _compile(tmp_path, link_cudart=False), NVIDIA_REQUIRES)
    assert "libc.so.6" in wheels._needed(whl, "dragon_cuda/libdragon_cuda.so")
    _sdist(tmp_path / "dist")
    assert _cuda_problems(tmp_path / "dist") == []


def test_dynamic_cudart_is_refused(tmp_path):
    whl = _wheel(tmp_path / "dist", _compile(tmp_path, link_cudart=True), NVIDIA_REQUIRES)
    assert "libcudart.so.13" in wheels._needed(whl, "dragon_cuda/libdragon_cuda.so")
    problems = _cuda_problems(tmp_path / "dist")
    assert any("needs ['libcudart.so.13'] at load time" in p for p in problems), problems


def test_missing_nvidia_requirements_are_refused(tmp_path):
    _wheel(tmp_path / "dist", _compile(tmp_path, link_cudart=False), "")
    problems = _cuda_problems(tmp_path / "dist")
    for req in ("nvidia-cublas", "nvidia-cudnn"):
        assert any(f"does not require {req}" in p for p in problems), problems
    assert any("dragon-cuda: no sdist" in p for p in problems), problems


def test_cuda_wheel_required_with_flag_only(tmp_path):
    (tmp_path / "dist").mkdir()
    assert any("dragon-cuda: expected one wheel" in p for p in _cuda_problems(tmp_path / "dist"))
    assert _cuda_problems(tmp_path / "dist", cuda=False) == []


def test_license_must_ship(tmp_path):
    """A wheel without the LICENSE, and an sdist with another one, are refused."""
    whl = _wheel(tmp_path / "dist", _compile(tmp_path, link_cudart=False), NVIDIA_REQUIRES)
    stripped = tmp_path / "dist" / "x.whl"
    with zipfile.ZipFile(whl) as src, zipfile.ZipFile(stripped, "w") as dst:
        for item in src.infolist():
            if not item.filename.endswith("/LICENSE"):
                dst.writestr(item, src.read(item))
    stripped.replace(whl)
    with tarfile.open(tmp_path / "dist" / "dragon_cuda-0.1.0.tar.gz", "w:gz") as t:
        other = tmp_path / "LICENSE"
        other.write_text("MIT License\n")
        t.add(other, "dragon_cuda-0.1.0/LICENSE")
    problems = _cuda_problems(tmp_path / "dist")
    assert any("no LICENSE in its .dist-info" in p for p in problems), problems
    assert any("LICENSE differs from the repository's" in p for p in problems), problems
