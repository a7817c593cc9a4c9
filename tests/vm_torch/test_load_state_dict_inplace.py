"""load_state_dict writes into the existing tensors (as torch does), in
vm.torch and in the native dragon_core.nn, compared with real torch."""

import numpy as np
import pytest
import torch

import dragon_core as dg
import dragon_core.vm.torch as vt


def _arange_sd(sd, dtype=np.float64):
    return {k: np.arange(int(np.prod(tuple(v.shape))), dtype=dtype).reshape(tuple(v.shape)) + 1
            for k, v in sd.items()}


def _torch_pair():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    vm = vt.nn.Sequential(vt.nn.Linear(3, 2), vt.nn.BatchNorm1d(2))
    return tm, vm


# ---------------------------------------------------------------- vm.torch
def test_vt_views_and_aliases_see_loaded_values():
    tm, vm = _torch_pair()
    arrs = _arange_sd(tm.state_dict(), np.float32)
    with torch.no_grad():
        tv = tm[0].weight[1]
    with vt.no_grad():
        vv = vm[0].weight[1]
    t_old, v_old = tm.state_dict(), vm.state_dict()     # aliases
    t_bias, v_bias = tm[0].bias.detach(), vm[0].bias.detach()
    t_rm, v_rm = tm[1].running_mean, vm[1].running_mean
    tm.load_state_dict({k: torch.tensor(a) for k, a in arrs.items()})
    vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    np.testing.assert_array_equal(vv.detach().numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(v_bias.numpy(), t_bias.numpy())
    np.testing.assert_array_equal(v_rm.numpy(), t_rm.numpy())
    for k in arrs:
        np.testing.assert_array_equal(v_old[k].numpy(), t_old[k].numpy())
        np.testing.assert_array_equal(v_old[k].numpy(), arrs[k])


def test_vt_casts_to_parameter_dtype_and_keeps_objects():
    tm, vm = _torch_pair()
    arrs = _arange_sd(tm.state_dict(), np.float64)
    arrs["1.num_batches_tracked"] = np.array(5, np.int64)
    tw, vw = tm[0].weight, vm[0].weight
    tm.load_state_dict({k: torch.tensor(a) for k, a in arrs.items()})
    vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    assert tm[0].weight is tw and vm[0].weight is vw
    assert str(vm[0].weight.dtype) == str(tm[0].weight.dtype) == "torch.float32"
    assert vm[0].weight.requires_grad
    for k, v in tm.state_dict().items():
        got = vm.state_dict()[k]
        assert str(got.dtype) == str(v.dtype)
        np.testing.assert_array_equal(got.numpy(), v.numpy())


def test_vt_version_counter_moves():
    vm = vt.nn.Linear(3, 2)
    before = vm.weight._t._version
    vm.load_state_dict(vm.state_dict())
    assert vm.weight._t._version > before


def test_vt_optimizer_made_before_load_sees_loaded_values():
    tm, vm = torch.nn.Linear(3, 2), vt.nn.Linear(3, 2)
    topt = torch.optim.SGD(tm.parameters(), lr=0.5, momentum=0.9)
    vopt = vt.optim.SGD(vm.parameters(), lr=0.5, momentum=0.9)
    arrs = _arange_sd(tm.state_dict(), np.float32)
    tm.load_state_dict({k: torch.tensor(a) for k, a in arrs.items()})
    vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    for _ in range(2):
        topt.zero_grad(); vopt.zero_grad()
        (tm(torch.tensor(x)) ** 2).sum().backward()
        (vm(vt.tensor(x)) ** 2).sum().backward()
        topt.step(); vopt.step()
    np.testing.assert_allclose(vm.weight.detach().numpy(), tm.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vm.bias.detach().numpy(), tm.bias.detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_vt_compiled_step_traced_before_load_uses_loaded_values():
    vm = vt.nn.Linear(3, 2)
    opt = vt.optim.SGD(vm.parameters(), lr=0.5)
    x = vt.tensor(np.ones((4, 3), np.float32))

    @vt.compile
    def step(x):
        opt.zero_grad()
        loss = vm(x).sum()
        loss.backward()
        opt.step()
        return loss

    fwd = vt.compile(lambda x: vm(x))
    step(x)
    fwd(x)
    arrs = _arange_sd(vm.state_dict(), np.float32)   # weight 1..6, bias 1..2
    vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    w, b = arrs["weight"].astype(np.float64), arrs["bias"].astype(np.float64)
    np.testing.assert_array_equal(fwd(x).numpy(), np.tile(w.sum(1) + b, (4, 1)))
    assert float(step(x)) == 4 * (w.sum() + b.sum())
    np.testing.assert_array_equal(vm.weight.detach().numpy(), w - 0.5 * 4)
    np.testing.assert_array_equal(vm.bias.detach().numpy(), b - 0.5 * 4)


def test_vt_size_mismatch_loads_the_other_keys_then_raises_like_torch():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 3))
    vm = vt.nn.Sequential(vt.nn.Linear(2, 2), vt.nn.Linear(2, 3))
    arrs = {k: np.full(tuple(v.shape), 7.0, np.float32) for k, v in tm.state_dict().items()}
    arrs["1.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(RuntimeError, match="size mismatch for 1.weight"):
        tm.load_state_dict({k: torch.tensor(a) for k, a in arrs.items()})
    with pytest.raises(RuntimeError, match="size mismatch for 1.weight"):
        vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    for k in ("0.weight", "0.bias", "1.bias"):
        np.testing.assert_array_equal(vm.state_dict()[k].numpy(), tm.state_dict()[k].numpy())


def test_vt_assign_true_replaces_like_torch():
    tm, vm = _torch_pair()
    arrs = _arange_sd(tm.state_dict(), np.float64)
    arrs["1.num_batches_tracked"] = np.array(3, np.int64)
    tm[0].bias.requires_grad_(False)
    vm[0].bias.requires_grad_(False)
    with torch.no_grad():
        tv = tm[0].weight[0]
    with vt.no_grad():
        vv = vm[0].weight[0]
    vv_old = vv.detach().numpy().copy()
    tw, vw = tm[0].weight, vm[0].weight
    tsd = {k: torch.tensor(a) for k, a in arrs.items()}
    vsd = {k: vt.tensor(a) for k, a in arrs.items()}
    tm.load_state_dict(tsd, assign=True)
    vm.load_state_dict(vsd, assign=True)
    assert tm[0].weight is not tw and vm[0].weight is not vw
    assert isinstance(vm[0].weight, vt.nn.Parameter)
    np.testing.assert_array_equal(vv.detach().numpy(), vv_old)    # old values, as torch
    assert not np.array_equal(tv.detach().numpy(), arrs["0.weight"][0])
    for k, v in tm.state_dict().items():
        got = vm.state_dict()[k]
        assert str(got.dtype) == str(v.dtype)                     # the state dict's
        np.testing.assert_array_equal(got.numpy(), v.numpy())
    assert vm[0].weight.requires_grad == tm[0].weight.requires_grad is True
    assert vm[0].bias.requires_grad == tm[0].bias.requires_grad is False
    assert (vm[1].running_mean is vsd["1.running_mean"]) == \
        (tm[1].running_mean is tsd["1.running_mean"])
    # the parameter shares the state dict tensor's memory, as torch's does
    tsd["0.weight"][0, 0] = 99.0
    vsd["0.weight"][0, 0] = 99.0
    np.testing.assert_array_equal(vm[0].weight.detach().numpy(), tm[0].weight.detach().numpy())


def test_vt_recorded_view_alive_raises_before_writing():
    # a view taken while autograd records is a copy in vm.torch: it could not
    # see the load as torch's does, so the load raises and changes nothing
    vm = vt.nn.Linear(3, 2)
    v = vm.weight[0]
    before = {k: t.numpy().copy() for k, t in vm.state_dict().items()}
    arrs = _arange_sd(vm.state_dict(), np.float32)
    msg = r"load_state_dict for Linear \('weight'\): in-place write .* live views"
    with pytest.raises(RuntimeError, match=msg):
        vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    for k, t in vm.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), before[k])
    del v
    vm.load_state_dict({k: vt.tensor(a) for k, a in arrs.items()})
    np.testing.assert_array_equal(vm.weight.detach().numpy(), arrs["weight"])


# ------------------------------------------------------------------ native
def test_native_aliases_see_loaded_values_and_failed_load_changes_nothing():
    m = dg.nn.Linear(3, 2)
    w, sd_old = m.weight, m.state_dict()
    alias, flat = m.weight.detach(), m.weight.reshape(6)
    before = m.weight._version
    arrs = _arange_sd(sd_old, np.float64)
    bad = dict(arrs, bias=np.zeros(3))
    with pytest.raises(ValueError, match="'bias' has shape"):
        m.load_state_dict({k: dg.tensor(a) for k, a in bad.items()})
    assert not np.array_equal(alias.numpy(), arrs["weight"].astype(np.float32))
    m.load_state_dict({k: dg.tensor(a) for k, a in arrs.items()})
    assert m.weight is w and m.weight.dtype == dg.float32 and m.weight._version > before
    np.testing.assert_array_equal(alias.numpy(), arrs["weight"])
    np.testing.assert_array_equal(flat.numpy(), arrs["weight"].reshape(6))
    np.testing.assert_array_equal(sd_old["bias"].numpy(), arrs["bias"])


def test_native_compiled_function_traced_before_load_uses_loaded_values():
    m = dg.nn.Linear(3, 2)
    f = dg.function(lambda x: m(x))
    x = dg.tensor(np.ones((4, 3), np.float32))
    f(x)
    arrs = _arange_sd(m.state_dict(), np.float32)
    m.load_state_dict({k: dg.tensor(a) for k, a in arrs.items()})
    np.testing.assert_array_equal(f(x).numpy(),
                                  np.tile(arrs["weight"].sum(1) + arrs["bias"], (4, 1)))
