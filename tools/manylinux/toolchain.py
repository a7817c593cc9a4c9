#!/usr/bin/env python3
"""Link flags that make gcc 12 on a new glibc produce manylinux_2_28 libraries.

Usage::

    python tools/manylinux/toolchain.py OUTDIR
    # -> OUTDIR/libdragon_glibc228.a, OUTDIR/link-<hash>.rsp, OUTDIR/current (its path)

``make wheels`` builds the wheels with the same compiler and the same
objects as ``make install`` (ccache hits), and only links them differently:
``OUTDIR/link-<hash>.rsp`` is a gcc response file that CMake appends to
every link (``CMAKE_CXX_STANDARD_LIBRARIES=@<it>``; the hash makes CMake
relink when it changes). It holds

* ``-static-libstdc++`` and ``-Wl,--exclude-libs,ALL``: libstdc++ is linked
  into each library, hidden, so no ``GLIBCXX_``/``CXXABI_`` version is
  needed at all (libgcc_s stays shared: the static unwinder of gcc 12 calls
  glibc 2.35's ``_dl_find_object``);
* ``-Wl,--wrap=SYM`` for every function of this machine's libc/libm whose
  default version is newer than glibc 2.28 but which also has a version of
  2.28 or older (the ``pthread_*``, ``dl*``, ``sem_*``, ``shm_*`` functions
  moved into libc at 2.34; ``exp``/``log``/``pow`` got new versions at
  2.29). ``libdragon_glibc228.a`` has one member per symbol, a jump to
  ``SYM@<old version>``, so a library binds to the old version, which every
  glibc since then still provides. The archive is only searched for the
  symbols a library uses;
* the few such symbols with no older version, implemented in
  ``glibc_compat.c`` (one member each, also through ``--wrap``);
* ``libpthread.so.0``, ``libdl.so.2``, ``librt.so.1`` and ``libm.so.6`` as
  ``DT_NEEDED``: on glibc < 2.34 the old versions live there, not in libc.

Which glibc versions the result needs is proven by ``auditwheel``
(``tools/wheels.py``), never assumed: a symbol that this does not cover
makes ``make wheels`` fail, and the fix is to cover it here.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

TARGET = (2, 28)  # manylinux_2_28: the newest glibc symbol version allowed
HERE = Path(__file__).resolve().parent
# Symbols newer than TARGET with no older version, and glibc_compat.c
# implements them. Anything else newer than TARGET is left for auditwheel
# to refuse.
COMPAT = ("__libc_single_threaded", "pthread_cond_clockwait", "arc4random", "fstat64", "fstat",
          "stat64", "stat", "lstat64", "lstat", "fstatat64", "fstatat")
LIBS = ("libc.so.6", "libm.so.6")
NEEDED = ("-l:libpthread.so.0", "-l:libdl.so.2", "-l:librt.so.1", "-l:libm.so.6")


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def pins(cc: str = "cc") -> dict[str, str]:
    """``{symbol: old version}`` for every function to pin, from this machine's glibc."""
    out: dict[str, str] = {}
    for lib in LIBS:
        path = subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dump = subprocess.run(["objdump", "-T", path], capture_output=True, text=True,
                              check=True).stdout
        default: dict[str, tuple[int, ...]] = {}
        older: dict[str, tuple[int, ...]] = {}
        # "0000000000089380 g    DF .text  0000000000000eed (GLIBC_2.2.5) pthread_create";
        # "iD" marks an IFUNC (log2, exp2f, ... pick an ISA-specific body at load)
        for m in re.finditer(r"\s(?:DF|iD)\s+\.text\s+[0-9a-f]+\s+(\()?GLIBC_([0-9.]+)\)?\s+(\S+)$",
                             dump, re.M):
            hidden, ver, name = m.group(1), _version(m.group(2)), m.group(3)
            if not hidden:
                default[name] = ver
            elif ver <= TARGET:
                older[name] = max(older.get(name, ver), ver)
        for name, ver in default.items():
            if ver > TARGET and name in older:
                out[name] = "GLIBC_" + ".".join(map(str, older[name]))
    return dict(sorted(out.items()))


PIN_ASM = """\
    .section .text.__wrap_{name},"ax",@progbits
    .globl __wrap_{name}
    .hidden __wrap_{name}
    .type __wrap_{name}, @function
__wrap_{name}:
    jmp __dragon_pinned_{name}@PLT
    .size __wrap_{name}, .-__wrap_{name}
    .symver __dragon_pinned_{name}, {name}@{version}
    .section .note.GNU-stack,"",@progbits
"""


def build(outdir: Path, cc: str = "cc") -> Path:
    """Write ``outdir/libdragon_glibc228.a`` and ``outdir/link.rsp``; return the latter."""
    outdir = outdir.resolve()
    objs = outdir / "obj"
    objs.mkdir(parents=True, exist_ok=True)
    for old in objs.iterdir():
        old.unlink()
    pinned = pins(cc)
    members = []
    for name, version in pinned.items():
        src = objs / f"pin_{name}.S"
        src.write_text(PIN_ASM.format(name=name, version=version))
        members.append(objs / f"pin_{name}.o")
        subprocess.run([cc, "-c", src, "-o", members[-1]], check=True)
    for name in COMPAT:
        members.append(objs / f"compat_{name}.o")
        subprocess.run([cc, "-c", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra",
                        "-Werror", f"-DDRAGON_COMPAT_{name}", HERE / "glibc_compat.c",
                        "-o", members[-1]], check=True)
    archive = outdir / "libdragon_glibc228.a"
    archive.unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", archive, *members], check=True)
    wraps = ",".join(f"--wrap={n}" for n in [*pinned, *COMPAT])
    # libstdc++.a is searched here, in one group with the archive, not
    # after it (where gcc puts it): its own pthread calls are wrapped too,
    # and libgcc.a's split-stack __wrap_pthread_create is never picked.
    flags = ["-static-libstdc++", "-Wl,--exclude-libs,ALL", f"-Wl,{wraps}",
             "-Wl,--start-group", "-l:libstdc++.a", str(archive), "-Wl,--end-group",
             "-Wl,--push-state,--no-as-needed", *NEEDED, "-Wl,--pop-state"]
    text = "\n".join(flags) + "\n"
    # The file name carries a hash of the flags and the archive: CMake sees a
    # new CMAKE_CXX_STANDARD_LIBRARIES and relinks exactly when they change.
    digest = hashlib.sha256(text.encode() + archive.read_bytes()).hexdigest()[:12]
    rsp = outdir / f"link-{digest}.rsp"
    rsp.write_text(text)
    (outdir / "current").write_text(f"{rsp}\n")
    print(f"manylinux_2_28 toolchain: {len(pinned)} pinned glibc functions, "
          f"{len(COMPAT)} stand-ins -> {rsp}")
    return rsp


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    build(Path(argv[0]), cc=os.environ.get("CC", "cc"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
