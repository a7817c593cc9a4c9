"""dragon_core.vm.torch beyond op conformance: the runner, unsupported
names, zero-copy conversion, save/load, jit/compile, data, grad modes and
PyTorch's refusals. Needs no real torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.vm.torch as torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------ runner
def _run_script(path, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dragon_core.vm.torch", str(path), *args],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_runner_maps_torch_and_submodules_and_passes_argv(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.utils.data import DataLoader
        from torch.optim.lr_scheduler import StepLR
        assert torch.__name__ == "dragon_core.vm.torch", torch.__name__
        assert F.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
        print("ARGS", sys.argv[1:], __name__)
    """))
    res = _run_script(script, "--lr", "0.1")
    assert res.returncode == 0, res.stderr
    assert "ARGS ['--lr', '0.1'] __main__" in res.stdout


def test_runner_restores_sys_modules_and_exit_code(tmp_path):
    from dragon_core.vm.torch.__main__ import run
    script = tmp_path / "exit3.py"
    script.write_text("import torch\nimport sys\nsys.exit(3)\n")
    before = sys.modules.get("torch")
    assert run([str(script)]) == 3
    assert sys.modules.get("torch") is before


def test_runner_reports_errors_of_the_script(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import torch\ntorch.fft.fft(torch.ones(4))\n")
    res = _run_script(script)
    assert res.returncode != 0
    assert "NotImplementedError" in res.stderr and "dragon_core.ops.fft" in res.stderr


def test_digits_cnn_in_plain_pytorch_trains_to_97_percent():
    res = _run_script(os.path.join("examples", "torch_digits.py"), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    last = [ln for ln in res.stdout.splitlines() if ln.startswith("final test accuracy")]
    assert last, res.stdout
    acc = float(last[-1].split()[-1])
    assert acc >= 0.97, res.stdout


# ------------------------------------------------------- unsupported names
@pytest.mark.parametrize("path", ["fft", "sparse", "vmap", "nn.Transformer", "nn.Bogus",
                                  "nn.functional.grid_sample_3d", "optim.LBFGS",
                                  "optim.lr_scheduler.CyclicLR", "utils.tensorboard",
                                  "utils.data.ChainDataset", "linalg.eig",
                                  "autograd.forward_ad", "jit.freeze", "cuda.mem_get_info",
                                  "nn.init.sparse_", "nn.utils.prune"])
def test_unsupported_names_raise_not_implemented(path):
    obj = torch
    with pytest.raises(NotImplementedError, match="not supported"):
        for part in path.split("."):
            obj = getattr(obj, part)


def test_unsupported_features_raise_not_implemented():
    with pytest.raises(NotImplementedError, match="custom_op"):
        torch.autograd.Function.apply(torch.ones(1))
    with pytest.raises(NotImplementedError, match="jit.trace"):
        torch.jit.script(lambda x: x)
    with pytest.raises(NotImplementedError):
        torch.ones(4).unfold(0, 2, 1)
    with pytest.raises(NotImplementedError):
        torch.zeros(2, dtype="complex64")
    with pytest.raises(NotImplementedError, match="IterableDataset"):
        torch.utils.data.DataLoader(torch.utils.data.IterableDataset(), num_workers=2)


def test_unsupported_tensor_method_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="Tensor.stft"):
        torch.ones(4).stft(2)
    assert not hasattr(torch.ones(1), "__cuda_array_interface__")


def test_hasattr_protocols_still_work():
    assert not hasattr(torch, "__wrapped__")
    assert hasattr(torch.nn, "Linear") and hasattr(torch, "float32")


# ------------------------------------------------------------- zero copy
def test_dragon_conversion_is_zero_copy_both_ways():
    d = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = torch.from_dragon(d)
    assert t.dragon() is d
    assert t.data_ptr() == d.data_ptr()
    t[0, 0] = 42.0
    assert float(d.numpy()[0, 0]) == 42.0
    back = t.view(3, 2).dragon()
    assert back.data_ptr() == d.data_ptr()


def test_autograd_flows_across_conversions():
    d = dg.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    d.requires_grad_(True)
    t = torch.from_dragon(d)
    loss = (t * t).sum()
    loss.backward()
    np.testing.assert_allclose(d.grad.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0, 6.0])
    y = dg.ops.mul(t.dragon(), 3.0)
    assert torch.from_dragon(y).grad_fn is not None


def test_from_numpy_shares_and_views_write_through():
    a = np.zeros((2, 3), np.float32)
    t = torch.from_numpy(a)
    t[:, 1] = 5.0
    t.view(-1)[0] = 1.0
    t.t()[2].add_(2.0)
    t.narrow(0, 1, 1).mul_(10)
    np.testing.assert_array_equal(a, [[1, 5, 2], [0, 50, 20]])


# ----------------------------------------------------------- PyTorch rules
def test_inplace_on_leaf_requiring_grad_raises():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w.add_(1)
    with torch.no_grad():
        w.add_(1)
    assert w.tolist() == [2.0, 2.0, 2.0]


def test_numpy_of_tensor_requiring_grad_raises():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        w.numpy()
    assert w.detach().numpy().tolist() == [1.0, 1.0, 1.0]


def test_backward_of_non_scalar_needs_gradient():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(torch.ones(3))
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_grad_modes_as_decorators_and_context_managers():
    x = torch.ones(2, requires_grad=True)

    @torch.no_grad()
    def f(a):
        return a * 2

    @torch.no_grad
    def g(a):
        return a * 2

    assert not f(x).requires_grad and not g(x).requires_grad
    with torch.no_grad():
        with torch.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    torch.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        torch.set_grad_enabled(True)
    with torch.inference_mode():
        assert not (x * 2).requires_grad


def test_zero_grad_and_accumulation_through_modules():
    m = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    m(x).sum().backward()
    g1 = m.weight.grad.numpy().copy()
    m(x).sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), 2 * g1, rtol=1e-6)
    m.zero_grad()
    assert m.weight.grad is None


# ---------------------------------------------------------- save / load
def test_save_load_state_dicts_without_pickle(tmp_path):
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                            torch.nn.Flatten(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    x = torch.randn(2, 1, 4, 4)
    m(x).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 7}, path)
    assert path.read_bytes()[:8] == b"\x89DGCKPT\n"   # dragon's format, not a pickle
    ck = torch.load(path)
    assert ck["epoch"] == 7
    m2 = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                             torch.nn.Flatten(), torch.nn.Linear(8, 2))
    m2.load_state_dict(ck["model"])
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.01)
    opt2.load_state_dict(ck["optim"])
    m.eval()
    m2.eval()
    np.testing.assert_allclose(m2(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="state_dict"):
        torch.save(m, tmp_path / "model.pt")


def test_load_state_dict_reports_missing_and_shape_errors():
    m = torch.nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict({"weight": torch.zeros(2, 3)})
    res = m.load_state_dict({"weight": torch.zeros(2, 3)}, strict=False)
    assert res.missing_keys == ["bias"]
    with pytest.raises(RuntimeError, match="size mismatch"):
        m.load_state_dict({"weight": torch.zeros(3, 3), "bias": torch.zeros(2)})


# ------------------------------------------------------------ jit/compile
def test_compile_and_trace_match_eager():
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    eager = m(x).detach().numpy()
    compiled = torch.compile(m)
    np.testing.assert_allclose(compiled(x).numpy(), eager, rtol=1e-5, atol=1e-6)
    traced = torch.jit.trace(lambda a: torch.softmax(a @ a.T, dim=-1), x)
    np.testing.assert_allclose(traced(x).numpy(),
                               torch.softmax(x @ x.T, dim=-1).numpy(), rtol=1e-5)


def test_compiled_training_step_updates_parameters():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def step(x, y):
        loss = torch.nn.functional.mse_loss(m(x), y)
        return loss

    eager_loss = float(step(x, y))
    compiled = torch.compile(step)
    assert abs(float(compiled(x, y)) - eager_loss) < 1e-5
    loss = step(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert float(compiled(x, y)) < eager_loss


# ------------------------------------------------------------------- data
def test_dataloader_batches_shuffles_and_yields_torch_tensors():
    xs = torch.arange(10.0).reshape(10, 1)
    ys = torch.arange(10)
    ds = torch.utils.data.TensorDataset(xs, ys)
    dl = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True)
    assert len(dl) == 3
    seen = []
    for xb, yb in dl:
        assert isinstance(xb, torch.Tensor) and xb.dtype == torch.float32
        assert yb.dtype == torch.int64
        np.testing.assert_array_equal(xb.numpy()[:, 0], yb.numpy())
        seen += yb.tolist()
    assert sorted(seen) == list(range(10))
    first = [yb.tolist() for _, yb in dl]
    second = [yb.tolist() for _, yb in dl]
    assert first != second   # reshuffled each epoch


def test_dataloader_custom_dataset_and_drop_last_and_random_split():
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return {"x": torch.tensor([float(i)]), "y": i * i}

    dl = torch.utils.data.DataLoader(Squares(), batch_size=3, drop_last=True)
    batches = list(dl)
    assert len(batches) == 2
    assert batches[1]["y"].tolist() == [9, 16, 25]
    a, b = torch.utils.data.random_split(Squares(), [5, 2])
    assert len(a) == 5 and len(b) == 2


# -------------------------------------------------------------- optimizers
def test_optimizer_param_groups_and_scheduler():
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.5}], lr=0.1,
                          momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.25]


def test_reduce_lr_on_plateau():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    for v in [1.0, 1.0, 1.0, 1.0]:
        s.step(v)
    assert opt.param_groups[0]["lr"] == 0.5


def test_clip_grad_norm():
    p = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    p.grad = torch.tensor([3.0, 4.0])
    total = torch.nn.utils.clip_grad_norm_([p], 1.0)
    assert abs(float(total) - 5.0) < 1e-5
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-4)


def test_dataloader_workers_under_the_runner(tmp_path):
    script = tmp_path / "workers.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        if __name__ == "__main__":
            ds = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
            seen = []
            for xb, yb in DataLoader(ds, batch_size=4, shuffle=True, num_workers=2):
                assert type(xb).__module__ == "dragon_core.vm.torch._tensor"
                seen += yb.tolist()
            print("SEEN", sorted(seen))
    """))
    res = _run_script(script)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "SEEN [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in res.stdout


def test_manual_sgd_loop_matches_real_torch():
    real = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
    rng = np.random.default_rng(0)
    w0, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((3, 1), (16, 3), (16, 1)))
    out = []
    for T in (real, torch):
        w = T.tensor(w0.copy(), requires_grad=True)
        b = T.zeros(1, requires_grad=True)
        for _ in range(5):
            loss = ((T.tensor(x) @ w + b - T.tensor(y)) ** 2).mean()
            loss.backward()
            with T.no_grad():
                w -= 0.1 * w.grad
                b.data.add_(b.grad, alpha=-0.1)
                w.grad.zero_()
                b.grad = None
        out.append((w.detach().numpy().copy(), b.detach().numpy().copy(), float(loss)))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-5)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-5, atol=1e-7)
    assert abs(out[1][2] - out[0][2]) < 1e-5


@pytest.mark.parametrize("op", ["&=", "|=", "^=", "<<=", ">>=", "//=", "%="])
def test_augmented_integer_operators_write_in_place(op):
    """``a op= b`` writes into ``a`` as PyTorch does: the same object, and a
    view of ``a`` taken before sees the new values; values match real torch."""
    import torch as real

    a_np = np.array([[5, -7, 12], [0, 3, -1]], dtype=np.int64)
    b_np = np.array([[3, 2, 5], [4, 1, 2]], dtype=np.int64)
    a, b = torch.tensor(a_np), torch.tensor(b_np)
    view, before = a[0], a
    scope = {"a": a, "b": b}
    exec(f"a {op} b", scope)
    ra, rb = real.tensor(a_np), real.tensor(b_np)
    rscope = {"a": ra, "b": rb}
    exec(f"a {op} b", rscope)
    assert scope["a"] is before
    np.testing.assert_array_equal(before.numpy(), rscope["a"].numpy())
    np.testing.assert_array_equal(view.numpy(), rscope["a"].numpy()[0])


@pytest.mark.parametrize("cls,shape", [("ConvTranspose2d", (1, 2, 4, 4)),
                                       ("ConvTranspose3d", (1, 2, 3, 3, 3))])
def test_conv_transpose_output_size_raises_instead_of_being_ignored(cls, shape):
    m = getattr(torch.nn, cls)(2, 3, 3, stride=2)
    x = torch.tensor(np.ones(shape, np.float32))
    m(x)  # without output_size it runs
    with pytest.raises(NotImplementedError, match="output_padding"):
        m(x, output_size=[s * 2 for s in shape[2:]])
