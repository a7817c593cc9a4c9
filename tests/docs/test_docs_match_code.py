"""The guides quote the code as it is: ABI versions, macros, identifiers.

* Every ABI version docs/*.md and README.md state as *current* ("today
  1.3", ``ABI 1.3  loaded`` in ``info`` output, ``#define DG_ABI_MINOR 3``)
  equals ``DG_ABI_MAJOR.DG_ABI_MINOR`` of sdk/include/dragon/plugin.h, and so
  do ``dragon_sdk.ABI_VERSION`` and the SDK's CMake package version.
* Every other ABI version they mention (history: "ABI 1.2") exists: same
  major, minor at most the header's -- except a "needs Dragon ABI X.Y or
  newer" message, which may name the next minor.
* abi.md's minor history lists every minor up to the header's.
* Every call of a function-like macro of the SDK headers or of cpu_eigen's
  sources (``DG_KERNEL_EX(...)``, ``CPU_EIGEN_UNARY(...)``) in a guide has
  the macro's argument count, and every ``DG_*`` / ``CPU_EIGEN_*`` name a
  guide mentions is defined there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "sdk" / "include" / "dragon" / "plugin.h"
HEADERS = sorted((ROOT / "sdk" / "include" / "dragon").glob("*.h*"))
CPU_EIGEN = sorted((ROOT / "plugins" / "cpu_eigen" / "src").glob("*.[hc]*"))
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def header_abi() -> tuple[int, int]:
    text = HEADER.read_text("utf-8")
    major = int(re.search(r"#define DG_ABI_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define DG_ABI_MINOR (\d+)", text).group(1))
    return major, minor


def _lines(path: Path):
    for no, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        yield no, line


# Statements of the current ABI version, each giving (major, minor).
CURRENT = [
    re.compile(r"\btoday (\d+)\.(\d+)\b"),
    re.compile(r"\bABI (\d+)\.(\d+) +loaded\b"),            # `python -m dragon_core info`
    re.compile(r"\(C ABI (\d+)\.(\d+),"),                   # its header line
    re.compile(r"\babi='(\d+)\.(\d+)'"),                    # PluginInfo repr
    re.compile(r"ABI_VERSION\W+\((\d+), (\d+)\)"),
]
ANY = re.compile(r"\bABI\s*(?:>=|<=|<|>|≥|≤)?\s*(\d+)\.(\d+)\b")
NEEDS = re.compile(r"needs Dragon ABI (\d+)\.(\d+) or newer")


def test_header_sdk_and_cmake_package_agree():
    import dragon_sdk
    major, minor = header_abi()
    assert tuple(dragon_sdk.ABI_VERSION) == (major, minor)
    cmake = (ROOT / "sdk" / "CMakeLists.txt").read_text("utf-8")
    version = re.search(r"project\(DragonSDK VERSION (\d+)\.(\d+)", cmake)
    assert version and (int(version.group(1)), int(version.group(2))) == (major, minor)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_abi_versions_quoted_in_the_docs(path):
    major, minor = header_abi()
    wrong = []
    for no, line in _lines(path):
        for pattern in CURRENT:
            for m in pattern.finditer(line):
                if (int(m.group(1)), int(m.group(2))) != (major, minor):
                    wrong.append(f"{path.name}:{no}: quotes {m.group(0)!r} as the current ABI "
                                 f"(the header says {major}.{minor})")
        needs = {m.start(1) for m in NEEDS.finditer(line)}
        for m in ANY.finditer(line):
            a, b = int(m.group(1)), int(m.group(2))
            limit = minor + 1 if m.start(1) in needs else minor
            if a != major or b > limit:
                wrong.append(f"{path.name}:{no}: mentions {m.group(0)!r}, which the header "
                             f"({major}.{minor}) does not have")
        for m in re.finditer(r"#define DG_ABI_(MAJOR|MINOR) (\d+)", line):
            want = major if m.group(1) == "MAJOR" else minor
            if int(m.group(2)) != want:
                wrong.append(f"{path.name}:{no}: quotes {m.group(0)!r}; the header has {want}")
    assert not wrong, "\n".join(wrong)


def test_newer_minor_fixture_message_names_the_next_minor():
    """The fixture plugin ``newer_minor`` needs DG_ABI_MINOR + 1; a guide that
    quotes its refusal must quote that version."""
    major, minor = header_abi()
    for path in DOCS:
        for no, line in _lines(path):
            m = re.search(r"'newer_minor' needs Dragon ABI (\d+)\.(\d+)", line)
            if m:
                assert (int(m.group(1)), int(m.group(2))) == (major, minor + 1), (
                    f"{path.name}:{no}: {m.group(0)}")


def test_abi_md_history_lists_every_minor():
    major, minor = header_abi()
    text = (ROOT / "docs" / "abi.md").read_text("utf-8")
    assert text.startswith(f"# The plugin C ABI, version {major}\n")
    history = text[text.index("Minor history:"):]
    history = history[:history.index("\n\n")]
    for k in range(minor + 1):
        assert f"**{major}.{k}**" in history, f"abi.md's minor history lacks {major}.{k}"
    assert f"**{major}.{minor + 1}**" not in history


# ----------------------------------------------------------------- macros

def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def defined_macros() -> dict[str, tuple[int, bool]]:
    """``name -> (fixed parameter count, variadic)`` of every function-like
    macro of the SDK headers and cpu_eigen's sources."""
    macros = {}
    for path in HEADERS + CPU_EIGEN:
        for m in re.finditer(r"#\s*define\s+([A-Z][A-Z0-9_]*)\(([^)]*)\)",
                             path.read_text("utf-8")):
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            variadic = bool(params) and params[-1] == "..."
            macros[m.group(1)] = (len(params) - variadic, variadic)
    return macros


def defined_names() -> set[str]:
    names = set()
    for path in HEADERS + CPU_EIGEN:
        names |= set(re.findall(r"\b((?:DG|CPU_EIGEN)_[A-Z0-9_]+)\b", path.read_text("utf-8")))
    return names


def _call_args(text: str, open_paren: int) -> list[str] | None:
    """The top-level comma-separated arguments of the call whose ``(`` is at
    ``open_paren``, or None when it is not closed."""
    depth, args, cur, i, quote = 0, [], [], open_paren, None
    while i < len(text):
        c = text[i]
        if quote:
            cur.append(c)
            if c == "\\":
                cur.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            cur.append(c)
        elif c in "([{<" and not (c == "<" and depth == 1 and text[i - 1] == " "):
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ")]}>" and not (c == ">" and depth == 1):
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return [a for a in args if a] if any(args) else []
            cur.append(c)
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    return None


def macro_calls(text: str, macros: dict):
    """``(name, args, offset)`` of every call of a known macro in ``text``."""
    text = _strip_comments(text)
    for m in re.finditer(r"\b([A-Z][A-Z0-9_]*)\(", text):
        if m.group(1) in macros and not text[max(0, m.start() - 8):m.start()].rstrip().endswith(
                "define"):
            args = _call_args(text, m.end() - 1)
            if args is not None:
                yield m.group(1), args, m.start()


def test_macro_parser_reads_the_real_signatures():
    macros = defined_macros()
    assert macros["DG_KERNEL"] == (3, True)
    assert macros["DG_KERNEL_EX"] == (5, True)
    assert macros["DG_KERNEL_MASK"] == (6, False)
    assert macros["DG_PLUGIN"] == (2, False)
    assert macros["CPU_EIGEN_UNARY"] == (4, True)
    calls = list(macro_calls('DG_KERNEL_EX("Relu", "cpu", f(1, 2), 0, F<T>, float);', macros))
    assert [(n, len(a)) for n, a, _ in calls] == [("DG_KERNEL_EX", 6)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_macro_calls_in_the_docs_have_the_real_arity(path):
    macros = defined_macros()
    text = path.read_text("utf-8").replace("`", " ")
    wrong = []
    for name, args, offset in macro_calls(text, macros):
        fixed, variadic = macros[name]
        ok = len(args) >= fixed + 1 if variadic else len(args) == fixed
        if not ok:
            no = text.count("\n", 0, offset) + 1
            need = f"{fixed} and at least one more" if variadic else str(fixed)
            wrong.append(f"{path.name}:~{no}: {name} called with {len(args)} arguments "
                         f"({', '.join(args)}); the macro takes {need}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_sdk_names_in_the_docs_exist(path):
    names = defined_names()
    text = path.read_text("utf-8")
    unknown = sorted({n for n in re.findall(r"\b((?:DG|CPU_EIGEN)_[A-Z0-9_]+)\b", text)
                      if n not in names})
    assert not unknown, f"{path.name} names {unknown}, defined nowhere in the SDK headers " \
                        f"or cpu_eigen's sources"


# ---------------------------------------------------------------- structs

def struct_fields(text: str) -> dict[str, list[str]]:
    """``typedef struct X {...} X;`` -> the field names in order."""
    out = {}
    for m in re.finditer(r"typedef struct (\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields = []
        for decl in _strip_comments(m.group(2)).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            f = (re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)  # a function pointer
                 or re.search(r"(\w+)\s*(?:\[[^\]]*\])?\s*$", decl))
            if f:
                fields.append(f.group(1))
        out[m.group(3)] = fields
    return out


def test_struct_parser_reads_the_header():
    fields = struct_fields(HEADER.read_text("utf-8"))
    assert fields["DgPluginInfo"][:2] == ["struct_size", "name"]
    assert "call_site_state" in fields["DgCallFrame"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_structs_quoted_in_the_docs_match_the_header(path):
    header = struct_fields(HEADER.read_text("utf-8"))
    for name, fields in struct_fields(path.read_text("utf-8")).items():
        assert name in header, f"{path.name} quotes struct {name}, which plugin.h lacks"
        assert fields == header[name], (f"{path.name} quotes {name} with fields {fields}; "
                                        f"plugin.h has {header[name]}")


def test_every_bench_module_has_run():
    """bench/run.py (``make bench``) imports every bench/bench_*.py and calls
    its ``run()``; a script without one would be an ERROR row. Scripts that
    are not benchmark modules are named otherwise (bench/README.md)."""
    import ast
    missing = []
    for path in sorted((ROOT / "bench").glob("bench_*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            missing.append(path.name)
    assert not missing, missing
