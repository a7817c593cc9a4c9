"""tools/manylinux/toolchain.py: gcc 12 on glibc 2.36 links manylinux_2_28 libraries.

`make wheels` proves the real wheels with auditwheel; this links a small
C++ library that uses what our libraries and libstdc++ use (threads, a
condition variable's timed wait, std::call_once, thread-local keys, dlopen,
exp/log/pow, the stat family through std::ifstream and directly,
std::random_device, shared_ptr reference counts) with the toolchain's flags,
then checks that (1) it needs no glibc symbol version newer than 2.28 and
no GLIBCXX/CXXABI version at all (libstdc++ is inside it), (2) it names the
libraries glibc < 2.34 keeps those symbols in, and (3) every call still
does what it did: results against Python's own.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine != "x86_64"
    or not shutil.which("g++") or not shutil.which("objdump"),
    reason="the manylinux toolchain is for x86-64 Linux with gcc and binutils")


def _toolchain():
    spec = importlib.util.spec_from_file_location(
        "dragon_manylinux_toolchain", ROOT / "tools" / "manylinux" / "toolchain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SRC = r"""
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <dlfcn.h>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <sys/stat.h>
#include <thread>

#define API extern "C" __attribute__((visibility("default")))

API double probe_math(double x) { return std::exp(x) + std::log(x) + std::pow(x, 1.5); }

// A thread that adds 1..n under a mutex, joined; call_once runs once.
API long probe_threads(long n) {
  static std::once_flag once;
  static long calls = 0;
  std::call_once(once, [] { ++calls; });
  std::call_once(once, [] { ++calls; });
  long sum = 0;
  std::mutex m;
  std::thread t([&] { for (long i = 1; i <= n; ++i) { std::lock_guard<std::mutex> g(m); sum += i; } });
  t.join();
  auto p = std::make_shared<long>(sum);
  auto q = p;
  return *q * 10 + calls + (p.use_count() == 2 ? 0 : 1000000);
}

// wait_for on the steady clock with nobody notifying: the timeout, in ms.
API long probe_wait_ms(long ms) {
  std::mutex m;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(m);
  auto t0 = std::chrono::steady_clock::now();
  bool woke = cv.wait_for(lock, std::chrono::milliseconds(ms), [] { return false; });
  auto took = std::chrono::steady_clock::now() - t0;
  return woke ? -1 : (long)std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
}

// stat/lstat/fstat sizes and the first line of a file through std::ifstream.
API long probe_stat(const char *path, char *line, long cap) {
  struct stat a; struct stat64 b;
  if (stat(path, &a) != 0 || lstat64(path, &b) != 0 || a.st_size != b.st_size) return -1;
  std::ifstream f(path);
  std::string first;
  std::getline(f, first);
  first.copy(line, (size_t)cap - 1);
  line[std::min<size_t>(first.size(), (size_t)cap - 1)] = 0;
  return (long)a.st_size;
}

// Eight draws from std::random_device: not all equal.
API int probe_random() {
  std::random_device rd;
  unsigned first = rd(), differ = 0;
  for (int i = 0; i < 7; ++i) differ |= rd() != first;
  return (int)differ;
}

API int probe_dlopen() {
  void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  auto cosine = (double (*)(double))dlsym(h, "cos");
  return cosine && cosine(0.0) == 1.0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("manylinux")
    rsp = _toolchain().build(tmp / "toolchain", cc=shutil.which("gcc") or "cc")
    (tmp / "probe.cc").write_text(SRC)
    lib = tmp / "libprobe.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                    "-Wall", "-Werror", tmp / "probe.cc", "-o", lib, "-Wl,--no-undefined",
                    f"@{rsp}"], check=True)
    return lib


def _versions(lib: Path) -> set[str]:
    dump = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\b((?:GLIBC|GLIBCXX|CXXABI)_[0-9.]+)\b", dump))


def _needed(lib: Path) -> list[str]:
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)


def test_no_symbol_newer_than_glibc_2_28(probe):
    versions = _versions(probe)
    glibc = [v for v in versions if v.startswith("GLIBC_")]
    assert glibc, "expected glibc symbol versions"
    too_new = sorted(v for v in glibc
                     if tuple(int(x) for x in v[len("GLIBC_"):].split(".")) > (2, 28))
    assert too_new == [], too_new
    assert not [v for v in versions if v.startswith(("GLIBCXX_", "CXXABI_"))], sorted(versions)


def test_needs_the_pre_2_34_libraries_and_no_libstdcxx(probe):
    needed = _needed(probe)
    for lib in ("libpthread.so.0", "libdl.so.2", "librt.so.1", "libm.so.6", "libc.so.6"):
        assert lib in needed, needed
    assert not [n for n in needed if n.startswith("libstdc++")], needed


def test_only_the_entry_points_are_exported(probe):
    dump = subprocess.run(["nm", "-D", "--defined-only", probe], capture_output=True, text=True,
                          check=True).stdout
    names = {line.split()[-1] for line in dump.splitlines() if line.strip()}
    # The static libstdc++ and the pins stay inside (--exclude-libs): none of
    # libstdc++'s own functions that the probe calls, no __wrap_. (Template
    # instantiations compiled into the probe itself are another matter: our
    # libraries hide those with a version script.)
    own = {"_ZNSt6thread4joinEv", "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14"
           "default_deleteIS1_EEPFvvE", "_ZNSt13random_device7_M_initERKNSt7__cxx1112basic_"
           "stringIcSt11char_traitsIcESaIcEEE", "_ZNSt18condition_variableD1Ev",
           "_ZNSt18condition_variableC1Ev", "_ZSt15__once_callable"}
    assert not own & names, sorted(own & names)
    assert not [n for n in names if n.startswith("__wrap_")], sorted(names)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", probe], capture_output=True,
                               text=True, check=True).stdout
    assert not own & {line.split()[-1] for line in undefined.splitlines() if line.strip()}
    assert {"probe_math", "probe_threads", "probe_wait_ms", "probe_stat"} <= names


def test_calls_behave_as_before(probe, tmp_path):
    lib = ctypes.CDLL(str(probe), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.probe_math.restype, lib.probe_math.argtypes = ctypes.c_double, [ctypes.c_double]
    for x in (0.5, 1.0, 2.75, 10.0):
        ref = math.exp(x) + math.log(x) + x ** 1.5
        assert lib.probe_math(x) == pytest.approx(ref, rel=1e-15)

    lib.probe_threads.restype, lib.probe_threads.argtypes = ctypes.c_long, [ctypes.c_long]
    assert lib.probe_threads(1000) == 500500 * 10 + 1

    lib.probe_wait_ms.restype, lib.probe_wait_ms.argtypes = ctypes.c_long, [ctypes.c_long]
    took = lib.probe_wait_ms(30)
    assert 30 <= took < 30 + 2000, took  # timed out, not early, not hung

    f = tmp_path / "data.txt"
    f.write_text("first line\nsecond\n")
    buf = ctypes.create_string_buffer(64)
    lib.probe_stat.restype = ctypes.c_long
    lib.probe_stat.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long]
    assert lib.probe_stat(str(f).encode(), buf, 64) == os.stat(f).st_size
    assert buf.value == b"first line"
    assert lib.probe_stat(str(tmp_path / "missing").encode(), buf, 64) == -1

    assert lib.probe_random() == 1
    assert lib.probe_dlopen() == 1


def test_pins_come_from_this_glibc():
    pins = _toolchain().pins(shutil.which("gcc") or "cc")
    # Moved into libc at 2.34 / new versions at 2.29: pinned to x86-64's first.
    for name in ("pthread_create", "dlopen", "sem_init", "shm_open", "exp", "pow"):
        assert pins.get(name) == "GLIBC_2.2.5", (name, pins.get(name))
    assert all(tuple(int(x) for x in v[len("GLIBC_"):].split(".")) <= (2, 28)
               for v in pins.values())


# ------------------------------------------------- tools/wheels.py audit
def _wheels():
    spec = importlib.util.spec_from_file_location("dragon_tools_wheels_audit",
                                                  ROOT / "tools" / "wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


AUDIT_SRC = r"""
#include <dlfcn.h>
#include <omp.h>
extern "C" __attribute__((visibility("default"))) int probe(void) {
  void *h = dlopen("libm.so.6", RTLD_NOW);
#ifdef WITH_OMP
  return (h != 0) + omp_get_max_threads();
#else
  return h != 0;
#endif
}
"""


def _stand_in_wheel(tmp: Path, name: str, link: list[str], omp: bool = False) -> Path:
    """A py3-none-manylinux_2_28 wheel around one library linked with ``link``."""
    pytest.importorskip("auditwheel")
    wheels = _wheels()
    (tmp / "a.cc").write_text(AUDIT_SRC)
    so = tmp / f"{name}.so"
    subprocess.run(["g++", "-O2", "-fPIC", "-shared", *(["-DWITH_OMP", "-fopenmp"] if omp else []),
                    tmp / "a.cc", "-o", so, "-Wl,--no-undefined", *link], check=True)
    path = tmp / f"{name}-0.1.0-py3-none-{wheels.PLAT}.whl"
    files = {
        f"{name}/lib{name}.so": so.read_bytes(),
        f"{name}/__init__.py": b"",
        f"{name}-0.1.0.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n".encode(),
        f"{name}-0.1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\n"
                                           "Root-Is-Purelib: false\n"
                                           f"Tag: py3-none-{wheels.PLAT}\n").encode(),
    }
    record = [f"{n},sha256={_b64sha(data)},{len(data)}" for n, data in files.items()]
    files[f"{name}-0.1.0.dist-info/RECORD"] = ("\n".join(record)
                                               + f"\n{name}-0.1.0.dist-info/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    return path


def _b64sha(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_audit_refuses_a_natively_linked_wheel(tmp_path):
    """dlopen@GLIBC_2.34 (linked as usual on glibc 2.36): the tag would be a lie."""
    whl = _stand_in_wheel(tmp_path, "native_probe", [])
    with pytest.raises(RuntimeError, match="does not fit manylinux_2_28"):
        _wheels().audit(whl)


def test_audit_accepts_the_toolchain_link(tmp_path):
    rsp = _toolchain().build(tmp_path / "toolchain", cc=shutil.which("gcc") or "cc")
    whl = _stand_in_wheel(tmp_path, "pinned_probe", [f"@{rsp}"])
    assert "consistent with manylinux_2_" in _wheels().audit(whl)


def test_audit_allows_only_the_excluded_outside_libraries(tmp_path):
    """libgomp stays a dependency (EXCLUDE): judged without it, as repair does."""
    rsp = _toolchain().build(tmp_path / "toolchain", cc=shutil.which("gcc") or "cc")
    whl = _stand_in_wheel(tmp_path, "omp_probe", [f"@{rsp}"], omp=True)
    summary = _wheels().audit(whl)
    assert "because of libgomp.so.1" in summary and "without them: consistent with" in summary


def test_make_wheels_links_every_wheel_with_the_toolchain():
    """`make wheels` writes the toolchain first, and every `pip wheel` of it
    appends the response file to the link; `make install` does not."""
    text = (ROOT / "Makefile").read_text()
    pipw = re.search(r"^PIPW\s*:=(.*)$", text, re.M).group(1)
    assert "$(PORTABLE)" in pipw
    portable = re.search(r"^PORTABLE\s*:=(.*)$", text, re.M).group(1)
    assert "CMAKE_CXX_STANDARD_LIBRARIES=@" in portable
    recipe = text.split("\nwheels:", 1)[1].split("\n\n", 1)[0]
    lines = [ln.strip() for ln in recipe.splitlines()]
    first_build = next(i for i, ln in enumerate(lines) if ln.startswith("$(PIPW)"))
    assert any("tools/manylinux/toolchain.py" in ln for ln in lines[:first_build])
    builds = [ln for ln in lines if "pip wheel" in ln or "$(PIP) wheel" in ln]
    assert builds == [], builds  # every wheel goes through $(PIPW)
    # Their own build folders: the dev build (make install) stays native.
    assert all("-Cbuild-dir=build/wheel-" in ln for ln in lines if ln.startswith("$(PIPW)"))
    pipi = re.search(r"^PIPI\s*:=(.*)$", text, re.M).group(1)
    assert "PORTABLE" not in pipi and "STANDARD_LIBRARIES" not in pipi
