"""The mkldnn plugin loads through the ABI only and wins over cpu_eigen."""

import dragon_core as dg


def test_plugin_is_loaded():
    info = [p for p in dg.plugins.list_plugins() if p.name == "mkldnn"]
    assert info and info[0].state == "loaded", dg.plugins.list_plugins()


def test_library_passes_the_abi_audit():
    """One exported symbol, no core symbol imported; oneDNN and the GNU
    OpenMP runtime are the only libraries beyond the C/C++ runtime."""
    import dragon_mkldnn
    from dragon_sdk.testing import audit_plugin_so
    audit = audit_plugin_so(dragon_mkldnn.plugin_library(), abi_major=1,
                            allowed_libs=["libdnnl.so.3", "libgomp.so.1"])
    assert "libdnnl.so.3" in audit.needed
