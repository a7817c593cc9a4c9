"""Plugin discovery, loading and introspection.

Plugins are found through the entry-point group ``dragon_core.plugins``. An
entry point names a Python module (or object) that may provide:

* ``plugin_library() -> str``: the path of a shared library exporting
  ``dragon_plugin_entry_v1`` (kernels, op schemas, devices via the C ABI);
* pluggy hook implementations (see :class:`HookSpecs`) for Python-side
  extensions.

Each entry point is loaded on its own, in name order, inside its own
``try``: a broken plugin is recorded with its cause and never stops the
others or ``import dragon_core``. Environment variables:

``DRAGON_PLUGINS=a,b``            load only these plugins
``DRAGON_DISABLE_PLUGINS=a,b``    skip these (``all`` skips every plugin)
``DRAGON_STRICT=1``               a plugin that fails to load raises at import
``DRAGON_KERNEL_PIN=Op:device=target,...``
                                  pin a kernel (by kernel or plugin name)
"""

from __future__ import annotations

import dataclasses
import os
import traceback

import pluggy

from . import _C
from ._dtypes import as_dtype
from .errors import PluginError

GROUP = "dragon_core.plugins"
hookspec = pluggy.HookspecMarker("dragon_core")
hookimpl = pluggy.HookimplMarker("dragon_core")

# Which wheel provides the standard kernels of a device type. Advice only:
# the runtime never branches on a device name.
KNOWN_PROVIDERS = {
    "cpu": "dragon-cpu-eigen",
    "cuda": "dragon-cuda",
}


class HookSpecs:
    """Python-side hooks a plugin module may implement (with ``@hookimpl``)."""

    @hookspec
    def dragon_plugin_loaded(self, core, info):
        """Called once after the plugin's library (if any) was loaded.

        Parameters
        ----------
        core : module
            The ``dragon_core`` module.
        info : PluginInfo
            The plugin's record.
        """

    @hookspec
    def dragon_fusion_patterns(self, core):
        """The op chains this plugin wants fused in graphs.

        Parameters
        ----------
        core : module
            The ``dragon_core`` module.

        Returns
        -------
        sequence of dragon_core.fusion.FusionPattern
            Applied by the ``pattern_fusion`` pass only where a kernel for
            the pattern's fused op is registered (docs/graph.md).
        """


    @hookspec
    def dragon_graph_passes(self, core):
        """Graph passes this plugin adds to graph mode.

        Parameters
        ----------
        core : module
            The ``dragon_core`` module.

        Returns
        -------
        sequence of dragon_core.GraphPass
            Each runs right after the built-in pass it names (``after``),
            at the optimisation levels from its ``level`` on, and can be
            switched off by name like a built-in one (docs/graph.md).
        """


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """What the core knows about one plugin."""

    name: str
    version: str
    abi: str
    state: str  # "loaded", "broken" or "disabled"
    error: str
    path: str
    dist: str
    num_ops: int = 0
    num_kernels: int = 0
    devices: tuple = ()

    @classmethod
    def _from_record(cls, r: dict) -> "PluginInfo":
        return cls(name=r["name"], version=r["version"] or r.get("dist_version", ""),
                   abi=r["abi"], state=r["state"], error=r["error"], path=r["path"],
                   dist=r["dist"], num_ops=r["num_ops"], num_kernels=r["num_kernels"],
                   devices=tuple(r["devices"]))


_pm = pluggy.PluginManager("dragon_core")
_pm.add_hookspecs(HookSpecs)
_disabled: list[PluginInfo] = []
_loaded_eps: set[str] = set()


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _dist_of(ep):
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    try:
        return dist.metadata["Name"] or "", dist.version or ""
    except Exception:  # noqa: BLE001 - broken metadata must not stop discovery
        return "", ""


def _load_entry_point(ep, core_module) -> dict:
    dist, version = _dist_of(ep)
    try:
        obj = ep.load()
    except BaseException as e:  # noqa: BLE001 - any failure marks it broken
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = "".join(traceback.format_exception_only(type(e), e)).strip()
        return _C.record_broken_plugin(ep.name, f"importing '{ep.value}' failed: {tb}",
                                       dist, version)
    record = None
    lib_fn = getattr(obj, "plugin_library", None)
    if lib_fn is not None:
        try:
            path = os.fspath(lib_fn())
        except Exception as e:  # noqa: BLE001
            return _C.record_broken_plugin(ep.name, f"{ep.value}.plugin_library() failed: "
                                           f"{type(e).__name__}: {e}", dist, version)
        if not os.path.exists(path):
            return _C.record_broken_plugin(
                ep.name, f"{ep.value}.plugin_library() names {path}, which does not exist "
                f"(reinstall: pip install --force-reinstall {dist or ep.name})", dist, version)
        record = _C.load_plugin(path, ep.name, dist, version)
    else:
        record = {"name": ep.name, "version": version, "abi": "-", "state": "loaded",
                  "error": "", "path": "", "dist": dist, "dist_version": version,
                  "num_ops": 0, "num_kernels": 0, "devices": []}
    if record["state"] == "loaded":
        try:
            if not _pm.is_registered(obj):
                _pm.register(obj, name=record["name"])
            caller = _pm.subset_hook_caller("dragon_plugin_loaded",
                                            [p for p in _pm.get_plugins() if p is not obj])
            caller(core=core_module, info=PluginInfo._from_record(record))
        except Exception as e:  # noqa: BLE001
            return _C.record_broken_plugin(record["name"] + "#hooks",
                                           f"Python hooks failed: {type(e).__name__}: {e}",
                                           dist, version)
    return record


def discover(core_module) -> list[PluginInfo]:
    """Load every plugin of the entry-point group (once). Returns new records."""
    from importlib.metadata import entry_points

    allow = _env_list("DRAGON_PLUGINS")
    deny = _env_list("DRAGON_DISABLE_PLUGINS") or []
    eps = sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value))
    out = []
    for ep in eps:
        if ep.name in _loaded_eps:
            continue
        _loaded_eps.add(ep.name)
        dist, version = _dist_of(ep)
        if "all" in deny or ep.name in deny or (allow is not None and ep.name not in allow):
            why = ("disabled by DRAGON_DISABLE_PLUGINS" if ("all" in deny or ep.name in deny)
                   else "not listed in DRAGON_PLUGINS")
            _disabled.append(PluginInfo(ep.name, version, "-", "disabled", why, "", dist))
            continue
        out.append(PluginInfo._from_record(_load_entry_point(ep, core_module)))
    return out


def _apply_pins() -> None:
    spec = os.environ.get("DRAGON_KERNEL_PIN", "").strip()
    if not spec:
        return
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        left, eq, target = item.partition("=")
        op, colon, device = left.partition(":")
        if not (eq and colon and op and device and target):
            raise ValueError(f"DRAGON_KERNEL_PIN: bad entry '{item}'; expected "
                             "Op:device=kernel_or_plugin (e.g. Add:cpu=cpu_eigen)")
        _C.pin(op.strip(), device.strip(), target.strip())


def _check_strict() -> None:
    if os.environ.get("DRAGON_STRICT", "") not in ("1", "true", "yes"):
        return
    broken = [p for p in list_plugins() if p.state == "broken"]
    if broken:
        lines = "\n".join(f"  {p.name}: {p.error}" for p in broken)
        raise PluginError(f"DRAGON_STRICT=1 and {len(broken)} plugin(s) failed to load:\n{lines}",
                          plugin=broken[0].name)
    missing = sorted(o["name"] for o in _C.list_ops()
                     if not o["control"] and not _C.kernels(o["name"]))
    if missing:
        hint = no_kernel_hint(missing[0], "cpu")
        raise PluginError(f"DRAGON_STRICT=1 and {len(missing)} op(s) have no kernel on any "
                          f"device: {', '.join(missing)}. {hint}".rstrip())


def list_plugins() -> list[PluginInfo]:
    """Every plugin the core knows: loaded, broken and disabled ones."""
    recs = [PluginInfo._from_record(r) for r in _C.plugins() if r["name"] != "core"]
    return recs + [*_disabled]


list = list_plugins  # noqa: A001 - dragon_core.plugins.list() reads naturally


def explain(op: str, device: str = "cpu", dtype="float32") -> str:
    """Explain kernel selection for ``(op, device, dtype)``.

    Returns a text listing the candidates in selection order and why the
    winner won (also printed when called from the interactive prompt).

    Parameters
    ----------
    op : str
        Op name (``"Add"``) or Python name (``"add"``).
    device : str
        Device type name, e.g. ``"cpu"``.
    dtype : dtype or str
        The dispatch dtype.
    """
    try:
        op = _C.op(op).name
    except LookupError:
        pass
    return _C.explain(op, device.split(":")[0], as_dtype(dtype).code)


def pin(op: str, device: str, target: str) -> None:
    """Always use kernel (or plugin) ``target`` for ``op`` on ``device``.

    A pin never falls back: if ``target`` has no kernel for a dtype, calling
    the op with that dtype raises.
    """
    _C.pin(_C.op(op).name, device, target)


def unpin(op: str, device: str) -> None:
    """Remove a pin set by :func:`pin` or ``DRAGON_KERNEL_PIN``."""
    _C.unpin(_C.op(op).name, device)


def kernels(op: str) -> list[dict]:
    """The kernels registered for ``op`` (all devices)."""
    return _C.kernels(_C.op(op).name)


def devices() -> list[dict]:
    """The registered device types with their device counts."""
    return _C.devices()


def no_kernel_hint(op: str, device: str) -> str:
    """Advice appended to a missing-kernel error: which wheel to install."""
    for p in _disabled:
        if p.dist and KNOWN_PROVIDERS.get(device) == p.dist:
            return (f"Plugin '{p.name}' ({p.dist}) is installed but {p.error}; "
                    f"re-enable it to get kernels for '{device}'.")
    hints = []
    wheel = KNOWN_PROVIDERS.get(device)
    is_py_op = getattr(_C, "_is_py_op", None)
    if is_py_op is not None and is_py_op(op):
        wheel = None   # an op defined in Python: its kernels come from custom_op, not a wheel
    if wheel:
        hints.append(f"Kernels for the standard ops on '{device}' come from: pip install {wheel}")
    broken = [p for p in list_plugins() if p.state == "broken"]
    if broken:
        hints.append(f"{len(broken)} plugin(s) failed to load ({', '.join(p.name for p in broken)}); "
                     "see `python -m dragon_core info`")
    return " ".join(hints)


def load_library(path) -> PluginInfo:
    """Load a plugin shared library into the running core.

    Nothing is rebuilt: the library registers its ops, kernels and devices
    through the C ABI, and its ops appear in ``dragon_core.ops``. Loading the
    same path again returns the existing record.

    Raises
    ------
    PluginError
        If the library cannot be loaded (the message gives the cause).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_library: no such file: {path}")
    rec = _C.load_plugin(os.path.abspath(path), "", "", "")
    info = PluginInfo._from_record(rec)
    if info.state != "loaded":
        raise PluginError(f"load_library({path}) failed: {info.error}", plugin=info.name)
    from . import ops
    ops._refresh()
    from ._tensor import _install_methods
    _install_methods()
    return info
