"""Measure the binary layout of the Dragon C ABI and compare it to a golden file.

The public structs and constants are read from ``dragon/plugin.h`` itself (so
a field added anywhere is noticed), a small C program printing ``sizeof``,
``_Alignof`` and ``offsetof`` of every field is compiled with ``cc`` and run,
and the result is compared with ``golden/abi_v1.json``.

Used by ``test_abi.py``; run it as a script to (re)write the golden file::

    python tests/plugins/abi_layout.py --write            # from dragon_sdk
    python tests/plugins/abi_layout.py --write --include sdk/include

Rewriting the golden file is a deliberate act: the only legal change to ABI
version 1 is appending fields at the end of a struct (and new constants),
together with a ``DG_ABI_MINOR`` bump. ``--write`` refuses anything else
unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "abi_v1.json"

#: The structs the ABI documents; the header must define exactly these.
PUBLIC_STRUCTS = (
    "DgDevice", "DgTensorView", "DgAttrValue", "DgCallFrame",
    "DgInferContext", "DgHostApi", "DgArgDef", "DgAttrDef", "DgOpDef",
    "DgKernelDef", "DgDeviceDef", "DgRegistrar", "DgPluginInfo",
    "DgCallSiteState",
)

#: Object-like macros whose numeric values are part of the ABI.
_NUMERIC_MACRO = re.compile(r"^DG_(ABI_MAJOR|ABI_MINOR|MASK_\w+)$")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_header(path: Path) -> dict:
    """Return the structs (with field names in order) and constants of a header.

    Parameters
    ----------
    path : pathlib.Path
        ``dragon/plugin.h``.

    Returns
    -------
    dict
        ``{"structs": {name: [field, ...]}, "constants": [name, ...],
        "entry_symbol": str}``.
    """
    text = _strip_comments(path.read_text())
    structs: dict[str, list[str]] = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;",
                         text, flags=re.S):
        name, body, alias = m.group(1), m.group(2), m.group(3)
        if name != alias:
            raise ValueError(f"struct {name} is typedef'd as {alias}")
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
            if fp:
                fields.append(fp.group(1))
                continue
            if "," in decl:
                raise ValueError(f"{name}: one field per declaration please: "
                                 f"{decl!r}")
            ident = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", decl)
            if not ident:
                raise ValueError(f"{name}: cannot parse field {decl!r}")
            fields.append(ident.group(1))
        structs[name] = fields

    constants: list[str] = []
    for m in re.finditer(r"\benum\s*\{(.*?)\}\s*;", text, flags=re.S):
        for item in m.group(1).split(","):
            item = item.strip()
            if item:
                constants.append(item.split("=")[0].strip())
    for m in re.finditer(r"^\s*#\s*define\s+(DG_\w+)\s+\S", text, flags=re.M):
        if _NUMERIC_MACRO.match(m.group(1)):
            constants.append(m.group(1))

    sym = re.search(r'#\s*define\s+DG_PLUGIN_ENTRY_SYMBOL\s+"(\w+)"', text)
    return {"structs": structs, "constants": constants,
            "entry_symbol": sym.group(1) if sym else None}


def _c_program(parsed: dict) -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "dragon/plugin.h"',
        "#define FIELD(S, F) printf(\"F %s %s %zu %zu\\n\", #S, #F, "
        "offsetof(S, F), sizeof(((S*)0)->F))",
        "int main(void) {",
    ]
    for s, fields in parsed["structs"].items():
        lines.append(f'  printf("S {s} %zu %zu\\n", sizeof({s}), '
                     f"_Alignof({s}));")
        lines.extend(f"  FIELD({s}, {f});" for f in fields)
    for c in parsed["constants"]:
        lines.append(f'  printf("C {c} %lld\\n", (long long)({c}));')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def measure(include_dir: Path, cc: str = "cc") -> dict:
    """Compile and run the layout probe against ``include_dir/dragon/plugin.h``.

    Parameters
    ----------
    include_dir : pathlib.Path
        Folder holding ``dragon/plugin.h``.
    cc : str
        C compiler.

    Returns
    -------
    dict
        The layout in the golden file's format.
    """
    parsed = parse_header(include_dir / "dragon" / "plugin.h")
    with tempfile.TemporaryDirectory(prefix="dragon-abi-") as tmp:
        src = Path(tmp) / "probe.c"
        exe = Path(tmp) / "probe"
        src.write_text(_c_program(parsed))
        build = subprocess.run(
            [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic",
             "-I", str(include_dir), str(src), "-o", str(exe)],
            capture_output=True, text=True, timeout=120)
        if build.returncode != 0:
            raise RuntimeError("the ABI layout probe does not compile as pure "
                               f"C11:\n{build.stderr}")
        out = subprocess.run([str(exe)], capture_output=True, text=True,
                             check=True, timeout=60).stdout
    structs: dict[str, dict] = {}
    constants: dict[str, int] = {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "S":
            structs[rest[0]] = {"size": int(rest[1]), "align": int(rest[2]),
                                "fields": []}
        elif kind == "F":
            structs[rest[0]]["fields"].append(
                {"name": rest[1], "offset": int(rest[2]), "size": int(rest[3])})
        elif kind == "C":
            constants[rest[0]] = int(rest[1])
    return {
        "abi": {"major": constants.get("DG_ABI_MAJOR"),
                "minor": constants.get("DG_ABI_MINOR")},
        "entry_symbol": parsed["entry_symbol"],
        "structs": structs,
        "constants": constants,
    }


#: Constants that count an enum which minors append to: they may grow.
_GROWING_COUNTS = ("DG_NUM_DTYPES",)


def compare(golden: dict, current: dict) -> tuple[list[str], list[str]]:
    """Split the differences between two layouts into breaking and appended.

    Returns
    -------
    tuple of (list of str, list of str)
        ``(breaking, appended)``: human-readable lines. A layout may only
        change by ``appended`` items (fields added at the end of a struct,
        new structs or constants) together with a minor version bump.
    """
    breaking: list[str] = []
    appended: list[str] = []
    if golden.get("entry_symbol") != current.get("entry_symbol"):
        breaking.append(f"entry symbol {golden.get('entry_symbol')!r} became "
                        f"{current.get('entry_symbol')!r}")
    g_abi, c_abi = golden["abi"], current["abi"]
    if g_abi["major"] != c_abi["major"]:
        breaking.append(f"DG_ABI_MAJOR {g_abi['major']} -> {c_abi['major']} "
                        "(a new major needs a new golden file, abi_v2.json)")
    for name, g in golden["structs"].items():
        c = current["structs"].get(name)
        if c is None:
            breaking.append(f"struct {name} was removed")
            continue
        if c["align"] != g["align"]:
            breaking.append(f"{name}: alignment {g['align']} -> {c['align']}")
        gf, cf = g["fields"], c["fields"]
        already = len(breaking)
        for i, field in enumerate(gf):
            if i >= len(cf):
                breaking.append(f"{name}.{field['name']} was removed")
            elif cf[i] != field:
                breaking.append(f"{name} field #{i}: {field} is now {cf[i]}")
        if len(cf) > len(gf) and len(breaking) == already:
            appended.extend(f"{name}.{f['name']} appended at offset "
                            f"{f['offset']}" for f in cf[len(gf):])
        if c["size"] < g["size"]:
            breaking.append(f"{name}: size shrank {g['size']} -> {c['size']}")
        elif c["size"] > g["size"] and len(cf) == len(gf):
            breaking.append(f"{name}: size grew {g['size']} -> {c['size']} "
                            "with no new field (padding or type change)")
    for name in current["structs"]:
        if name not in golden["structs"]:
            appended.append(f"new struct {name}")
    for name, value in golden["constants"].items():
        if name == "DG_ABI_MINOR":
            continue
        if name in _GROWING_COUNTS and current["constants"].get(name, value) > value:
            # A count of an enum that minors append to (DG_NUM_DTYPES: the
            # dtypes a header knows) grows with them; readers bounds-check.
            appended.append(f"constant {name} grew {value} -> {current['constants'][name]}")
            continue
        if name not in current["constants"]:
            breaking.append(f"constant {name} was removed")
        elif current["constants"][name] != value:
            breaking.append(f"constant {name} changed {value} -> "
                            f"{current['constants'][name]}")
    for name in current["constants"]:
        if name not in golden["constants"]:
            appended.append(f"new constant {name}")
    if appended and c_abi["minor"] == g_abi["minor"]:
        breaking.append("fields or constants were appended but DG_ABI_MINOR "
                        f"is still {c_abi['minor']}: bump it")
    elif c_abi["minor"] != g_abi["minor"]:
        appended.append(f"DG_ABI_MINOR {g_abi['minor']} -> {c_abi['minor']}")
    return breaking, appended


def dumps(layout: dict) -> str:
    """Serialise a layout as JSON with one line per field (diff-friendly)."""
    lines = ["{",
             f' "abi": {json.dumps(layout["abi"])},',
             f' "entry_symbol": {json.dumps(layout["entry_symbol"])},',
             ' "structs": {']
    names = list(layout["structs"])
    for i, name in enumerate(names):
        st = layout["structs"][name]
        lines.append(f'  {json.dumps(name)}: {{"size": {st["size"]}, '
                     f'"align": {st["align"]}, "fields": [')
        fields = [f"   {json.dumps(f)}" for f in st["fields"]]
        lines.append(",\n".join(fields))
        lines.append("  ]}" + ("," if i + 1 < len(names) else ""))
    lines.append(" },")
    lines.append(' "constants": {')
    consts = [f"  {json.dumps(k)}: {v}" for k, v in layout["constants"].items()]
    lines.append(",\n".join(consts))
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _default_include() -> Path:
    import dragon_sdk  # noqa: PLC0415 - only needed when run as a script
    return Path(dragon_sdk.get_include())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--include", type=Path, default=None,
                        help="folder holding dragon/plugin.h "
                             "(default: dragon_sdk.get_include())")
    parser.add_argument("--write", action="store_true",
                        help=f"write the measured layout to {GOLDEN}")
    parser.add_argument("--force", action="store_true",
                        help="write even a breaking change (new major only)")
    args = parser.parse_args(argv)
    current = measure(args.include or _default_include())
    if not args.write:
        sys.stdout.write(dumps(current))
        return 0
    if GOLDEN.exists():
        breaking, appended = compare(json.loads(GOLDEN.read_text()), current)
        if breaking and not args.force:
            print("refusing to rewrite the golden file, these changes break "
                  "ABI v1:\n  " + "\n  ".join(breaking), file=sys.stderr)
            return 1
        for line in appended:
            print("appended:", line)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(dumps(current))
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
