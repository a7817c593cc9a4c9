"""Command line of the Dragon SDK.

``python -m dragon_sdk new-plugin NAME [--dir DIR] [--op OPNAME]`` writes a
complete plugin project into ``DIR/NAME`` (default: ``./NAME``): a
scikit-build-core ``pyproject.toml`` with the ``dragon_core.plugins`` entry
point, a ``CMakeLists.txt`` using ``find_package(DragonSDK)``, one example op
(schema, shape rule, CPU kernels, a Python gradient rule), its tests and a
README. See ``docs/sdk.md``.

``python -m dragon_sdk info`` prints the SDK version, the ABI it describes
and where its headers and CMake package are.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from importlib import resources
from pathlib import Path

import dragon_sdk

#: The first ``dragon-core`` release speaking each plugin ABI (major, minor).
#: A generated plugin requires the release of the minor it needs
#: (``min_host_minor``; 0 with ``DG_PLUGIN``), and excludes the next ABI major:
#: from 1.0 on, dragon-core's major version is its ABI major (0.x speak ABI 1).
#: Append a row whenever ``DG_ABI_MINOR`` is bumped.
CORE_RELEASE_FOR_ABI = {(1, 0): "0.1", (1, 1): "0.1", (1, 2): "0.1", (1, 3): "0.1",
                        (1, 4): "0.1", (1, 5): "0.1"}

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
_OP_RE = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
_RESERVED = {"dragon", "dragon_core", "dragon_sdk", "test", "tests", "src", "python"}


class UsageError(Exception):
    """A bad argument; the message says what to do instead."""


def check_name(name: str) -> str:
    """Return ``name`` if it can name a plugin, else raise :class:`UsageError`.

    The name is used as the Python package, the entry-point name, the
    library (``lib<name>.so``) and, with ``-`` for ``_``, the distribution.
    """
    if not _NAME_RE.match(name) or keyword.iskeyword(name) or name in _RESERVED:
        fixed = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
        if not fixed or not fixed[0].isalpha():
            fixed = "ops_" + fixed
        if keyword.iskeyword(fixed) or fixed in _RESERVED:
            fixed += "_ops"
        why = ("is reserved" if keyword.iskeyword(name) or name in _RESERVED else
               "is not a lower-case Python identifier (a letter, then letters, digits, '_')")
        raise UsageError(f"plugin name {name!r} {why}: it becomes the Python package, the "
                         f"entry point and lib<name>.so. Try: new-plugin {fixed}")
    return name


def check_op(op: str) -> str:
    """Return ``op`` if it can name an op (CamelCase), else raise :class:`UsageError`."""
    if not _OP_RE.match(op):
        fixed = "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", op) if p)
        hint = f" Try: --op {fixed}" if fixed and _OP_RE.match(fixed) else ""
        raise UsageError(f"op name {op!r} is not CamelCase (an upper-case letter, then "
                         f"letters and digits), like the core's ops (Softplus, "
                         f"LeakyRelu).{hint}")
    return op


def snake_case(op: str) -> str:
    """The Python name the core derives from an op name (``LeakyRelu`` → ``leaky_relu``)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", op)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def core_requirement(abi: tuple[int, int] = dragon_sdk.ABI_VERSION,
                     min_host_minor: int = 0) -> str:
    """The ``dragon-core`` requirement of a plugin built for ``abi``.

    Parameters
    ----------
    abi : tuple of int
        ``(DG_ABI_MAJOR, DG_ABI_MINOR)`` of the headers the plugin is built with.
    min_host_minor : int
        The oldest ABI minor the plugin needs from the core (``DG_PLUGIN``: 0).

    Returns
    -------
    str
        E.g. ``"dragon-core>=0.1,<2"``.
    """
    major, minor = abi
    if not 0 <= min_host_minor <= minor:
        raise ValueError(f"min_host_minor {min_host_minor} is outside ABI {major}.0..{major}."
                         f"{minor} that these headers describe")
    first = CORE_RELEASE_FOR_ABI.get((major, min_host_minor))
    if first is None:
        raise ValueError(f"dragon_sdk does not know which dragon-core release first speaks "
                         f"ABI {major}.{min_host_minor}; add it to CORE_RELEASE_FOR_ABI")
    return f"dragon-core>={first},<{major + 1}"


def sdk_requirement() -> str:
    """The ``dragon-sdk`` build requirement: this SDK or newer, same ABI major."""
    v = dragon_sdk.__version__.split(".")
    return f"dragon-sdk>={v[0]}.{v[1]},<{dragon_sdk.ABI_VERSION[0] + 1}"


def _substitutions(name: str, op: str) -> dict[str, str]:
    major, minor = dragon_sdk.ABI_VERSION
    min_host_minor = 0  # the template uses DG_PLUGIN, which needs nothing newer than x.0
    return {
        "@NAME@": name,
        "@DIST_NAME@": name.replace("_", "-"),
        "@OP@": op,
        "@PY_OP@": snake_case(op),
        "@ABI_MAJOR@": str(major),
        "@ABI_MINOR@": str(minor),
        "@MIN_HOST_MINOR@": str(min_host_minor),
        "@SDK_VERSION@": dragon_sdk.__version__,
        "@SDK_REQUIREMENT@": sdk_requirement(),
        "@CORE_REQUIREMENT@": core_requirement((major, minor), min_host_minor),
    }


def _template_files(root=None):
    """Yield ``(relative posix path, text)`` for every template file."""
    root = root or resources.files("dragon_sdk") / "_template"
    stack = [(root, "")]
    while stack:
        node, rel = stack.pop()
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            path = f"{rel}{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    stack.append((child, path + "/"))
            elif child.name.endswith(".tmpl"):
                yield path, child.read_text(encoding="utf-8")


def new_plugin(name: str, directory: str | Path = ".", op: str = "Swish") -> Path:
    """Write a new plugin project into ``directory/name`` and return its path.

    Raises
    ------
    UsageError
        A bad name, or the target folder already exists.
    """
    check_name(name)
    check_op(op)
    dest = Path(directory) / name
    if dest.exists():
        raise UsageError(f"{dest} already exists; new-plugin never overwrites anything. "
                         f"Choose another --dir or name, or remove it first.")
    subs = _substitutions(name, op)
    files = []
    for rel, text in _template_files():
        rel = rel[: -len(".tmpl")].replace("__name__", name)
        if rel == "gitignore":
            rel = ".gitignore"
        for key, value in subs.items():
            text = text.replace(key, value)
        leftover = re.search(r"@[A-Z_]+@", text)
        if leftover:  # a template bug, not a user error
            raise RuntimeError(f"template {rel}: unknown placeholder {leftover.group(0)}")
        files.append((dest / rel, text))
    dest.mkdir(parents=True)
    for path, text in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dest


def _print_info() -> None:
    major, minor = dragon_sdk.ABI_VERSION
    print(f"dragon-sdk {dragon_sdk.__version__}, plugin ABI {major}.{minor}")
    print(f"include dir: {dragon_sdk.get_include()}")
    print(f"cmake dir:   {dragon_sdk.get_cmake_dir()}")
    print(f"a new plugin requires: {core_requirement()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dragon_sdk",
                                     description="Dragon plugin SDK tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new-plugin", help="generate a plugin project",
                         description="Generate a complete Dragon plugin project "
                                     "(op, kernels, gradient, tests, wheel packaging).")
    new.add_argument("name", help="plugin name: lower-case identifier, e.g. my_ops")
    new.add_argument("--dir", default=".", help="parent folder (default: .)")
    new.add_argument("--op", default="Swish",
                     help="CamelCase name of the example op (default: Swish)")
    sub.add_parser("info", help="print the SDK version, ABI and paths")
    args = parser.parse_args(argv)
    if args.command == "info":
        _print_info()
        return 0
    try:
        dest = new_plugin(args.name, args.dir, args.op)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"created {dest}")
    print("next:")
    print(f"  cd {dest}")
    print("  pip install .              # builds lib{}.so and installs the wheel".format(args.name))
    print(f"  python -m pytest tests     # op {args.op} (dragon_core.ops.{snake_case(args.op)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
