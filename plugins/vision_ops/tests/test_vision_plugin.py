"""The vision_ops plugin loads through the ABI only."""

import dragon_core as dg


def test_plugin_is_loaded():
    info = [p for p in dg.plugins.list_plugins() if p.name == "vision_ops"]
    assert info and info[0].state == "loaded", dg.plugins.list_plugins()


def test_library_passes_the_abi_audit():
    """One exported symbol and no core symbol imported, CUDA kernels or not
    (the CUDA runtime is linked statically)."""
    import dragon_vision_ops
    from dragon_sdk.testing import audit_plugin_so
    audit_plugin_so(dragon_vision_ops.plugin_library(), abi_major=1)


def test_build_info_says_whether_cuda_kernels_are_inside():
    import shutil

    import dragon_vision_ops
    assert isinstance(dragon_vision_ops.built_with_cuda(), bool)
    if shutil.which("nvcc"):  # CI builds with nvcc on PATH
        assert dragon_vision_ops.built_with_cuda()
        assert dragon_vision_ops.cuda_architectures()
