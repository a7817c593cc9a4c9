"""``python -m dragon_core info``: plugins, devices, ops and kernels."""

from __future__ import annotations

import sys


def info() -> str:
    """The report printed by ``python -m dragon_core info``."""
    import dragon_core as dg
    from dragon_core import _C

    lines = [f"dragon-core {dg.__version__}  (C ABI {dg.ABI_VERSION[0]}.{dg.ABI_VERSION[1]}, "
             f"{_C.NUM_THREADS} threads)", "", "Plugins:"]
    plugins = dg.plugins.list()
    if not plugins:
        lines.append("  (none: install one, e.g. pip install dragon-cpu-eigen)")
    for p in plugins:
        where = f"  [{p.dist}]" if p.dist else ""
        lines.append(f"  {p.name:<16} {p.version or '-':<10} ABI {p.abi:<5} {p.state:<9}"
                     f" ops={p.num_ops:<4} kernels={p.num_kernels:<5}{where}")
        if p.path:
            lines.append(f"      path: {p.path}")
        if p.error:
            lines.append(f"      {'error' if p.state == 'broken' else 'note'}: {p.error}")
        if p.traceback:
            lines += [f"      | {ln}" for ln in p.traceback.rstrip().splitlines()]
    lines += ["", "Devices:"]
    for d in _C.devices():
        desc = f" ({d['descriptions'][0]})" if d["descriptions"] and d["descriptions"][0] else ""
        lines.append(f"  {d['name']:<10} count={d['count']}  from {d['plugin']}{desc}")
        if d["count"] > 1:  # the line above shows the first; each one here
            lines += [f"      {d['name']}:{i}  {text}"
                      for i, text in enumerate(d["descriptions"]) if text]
        if d["count"] == 0 and d.get("reason"):
            lines.append(f"      unavailable: {d['reason']}")
    ops = _C.list_ops()
    ops = [o for o in ops if not o["control"]]  # run by the executor, no kernel
    with_kernel = sum(1 for o in ops if _C.kernels(o["name"]))
    lines += ["", f"Ops: {len(ops)} defined, {with_kernel} with at least one kernel; "
                  f"kernels: {_C.num_kernels()}"]
    missing = sorted(o["name"] for o in ops if not _C.kernels(o["name"]))
    if missing:
        lines.append(f"  without a kernel: {', '.join(missing)}")
    pins = _C.pins()
    if pins:
        lines.append("Pins: " + ", ".join(f"{k[0]}:{k[1]}={v}" for k, v in pins.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("info", "-h", "--help"):
        if argv and argv[0] in ("-h", "--help"):
            print("usage: python -m dragon_core info")
            return 0
        print(info())
        return 0
    print(f"unknown command {argv[0]!r}; usage: python -m dragon_core info", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
