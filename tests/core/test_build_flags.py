"""Release builds never use -Werror (DESIGN.md §7); our own builds do."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_werror_only_behind_the_dragon_werror_option():
    for cmake in [ROOT / "dragon_core" / "CMakeLists.txt",
                  *sorted((ROOT / "plugins").glob("*/CMakeLists.txt")),
                  *sorted((ROOT / "sdk" / "cmake").glob("*.cmake"))]:
        guarded = False
        for line in cmake.read_text().splitlines():
            code = line.split("#", 1)[0].strip()
            if code.startswith("if(DRAGON_WERROR"):
                guarded = True
            elif code.startswith("endif("):
                guarded = False
            elif "-Werror" in code:
                assert guarded, f"{cmake.relative_to(ROOT)}: -Werror outside if(DRAGON_WERROR)"
    assert "DRAGON_WERROR=ON" in (ROOT / "Makefile").read_text()


CMAKES = [ROOT / "dragon_core" / "CMakeLists.txt",
          *sorted((ROOT / "plugins").glob("*/CMakeLists.txt"))]


def test_dragon_werror_defaults_off_everywhere():
    """A user's `pip install` never gets -Werror: every project that has the
    option declares it OFF by default."""
    for cmake in CMAKES:
        text = cmake.read_text()
        if "-Werror" not in text:
            continue
        options = [ln for ln in text.splitlines() if ln.strip().startswith("option(DRAGON_WERROR")]
        assert options, f"{cmake.relative_to(ROOT)}: -Werror without a DRAGON_WERROR option"
        for ln in options:
            assert ln.rstrip().endswith("OFF)"), f"{cmake.relative_to(ROOT)}: {ln.strip()}"


def test_no_hard_coded_march():
    """CPU features are chosen at run time: no library is compiled with a
    fixed -march; only cpu_eigen's per-ISA object libraries get one, from
    their MARCH argument, and only on x86-64."""
    for cmake in [*CMAKES, *sorted((ROOT / "sdk" / "cmake").glob("*.cmake")),
                  ROOT / "sdk" / "python" / "dragon_sdk" / "_template" / "CMakeLists.txt.tmpl"]:
        for line in cmake.read_text().splitlines():
            code = line.split("#", 1)[0]
            if "-march" in code or "-mavx" in code or "-mcpu" in code:
                assert "-march=${arg_MARCH}" in code, \
                    f"{cmake.relative_to(ROOT)}: hard-coded CPU flag: {line.strip()}"


def test_installed_nccl_dist_has_its_nccl_half_where_nvcc_is():
    """`make install` with nvcc on PATH requires the NCCL half (DRAGON_NCCL=ON,
    as `make wheels`): the installed plugin registers NcclCommInit, instead of
    quietly being the MPI-only build when nccl.h was not found."""
    import shutil

    import pytest
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH: the NCCL half is optional there")
    mod = pytest.importorskip("dragon_nccl_dist")
    libs = sorted(Path(mod.__file__).parent.glob("libdragon_nccl_dist*.so*"))
    assert libs, f"no libdragon_nccl_dist in {Path(mod.__file__).parent}"
    assert b"NcclCommInit" in libs[0].read_bytes()
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ninstall-nccl-dist:", 1)[1].split("\n\n", 1)[0]
    assert "$(NCCL_HALF)" in recipe
