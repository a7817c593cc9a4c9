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
