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


def test_saved_graph_names_this_plugin_as_provider(tmp_path):
    """A graph using a vision op records vision_ops, its version and its
    wheel, so loading it elsewhere says what to pip install."""
    import numpy as np
    import dragon_vision_ops as vo
    from dragon_core import proto as P

    x = dg.tensor(np.ones((1, 2, 4, 4), np.float32))
    rois = dg.tensor(np.array([[0, 0.0, 0.0, 3.0, 3.0]], np.float32))
    f = dg.function(lambda x, r: vo.roi_align(x, r, output_size=2))
    path = tmp_path / "roi.pb"
    dg.save_graph(f.get_graph(x, rois), path)
    g = P.GraphDef()
    g.ParseFromString(path.read_bytes())
    (op,) = [o for o in g.op if o.type == "RoiAlign"]
    assert (op.plugin, op.plugin_version, op.plugin_dist) == (
        "vision_ops", vo.__version__, "dragon-vision-ops")
    # It loads and runs here, where the plugin is installed.
    want = np.asarray(vo.roi_align(x, rois, output_size=2))
    got = dg.load_graph(path)(x, rois)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), want)
