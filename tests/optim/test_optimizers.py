"""dragon_core.optim optimizers against NumPy references of PyTorch's rules:
several steps, parameter groups, zero_grad, explicit gradients, state_dict
round trips, graph mode, convergence and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.optim as optim

from ._reference import RefAdagrad, RefAdam, RefRMSprop, RefSGD

STEPS = 5

# (optimizer class, its reference, constructor kwargs, reference hyper-parameters)
CASES = [
    ("sgd", optim.SGD, RefSGD, dict(lr=0.1), {}),
    ("sgd_momentum", optim.SGD, RefSGD, dict(lr=0.05, momentum=0.9), {}),
    ("sgd_dampening_wd", optim.SGD, RefSGD,
     dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.1), {}),
    ("sgd_nesterov", optim.SGD, RefSGD, dict(lr=0.05, momentum=0.8, nesterov=True), {}),
    ("sgd_maximize", optim.SGD, RefSGD, dict(lr=0.05, momentum=0.5, maximize=True), {}),
    ("adam", optim.Adam, RefAdam, dict(lr=0.01), {}),
    ("adam_l2", optim.Adam, RefAdam, dict(lr=0.01, weight_decay=0.1), {}),
    ("adam_amsgrad", optim.Adam, RefAdam,
     dict(lr=0.02, betas=(0.8, 0.95), amsgrad=True, eps=1e-6), {}),
    ("adamw", optim.AdamW, RefAdam, dict(lr=0.01), dict(decoupled=True, weight_decay=1e-2)),
    ("adamw_amsgrad", optim.AdamW, RefAdam, dict(lr=0.01, weight_decay=0.2, amsgrad=True),
     dict(decoupled=True)),
    ("rmsprop", optim.RMSprop, RefRMSprop, dict(lr=0.01), {}),
    ("rmsprop_centered_momentum", optim.RMSprop, RefRMSprop,
     dict(lr=0.01, centered=True, momentum=0.9, weight_decay=0.01), {}),
    ("adagrad", optim.Adagrad, RefAdagrad, dict(lr=0.1), {}),
    ("adagrad_decay", optim.Adagrad, RefAdagrad,
     dict(lr=0.1, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.5), {}),
]
IDS = [c[0] for c in CASES]


class Problem:
    """0.5 * sum((X w + b - y)^2) with its gradient in closed form."""

    def __init__(self, seed=0, n=8, d=3, dtype="float64"):
        rng = np.random.default_rng(seed)
        self.x = rng.uniform(-1, 1, (n, d))
        self.y = rng.uniform(-1, 1, (n, 1))
        self.w0 = rng.uniform(-1, 1, (d, 1))
        self.b0 = rng.uniform(-1, 1, (1,))
        self.dtype = dtype

    def params(self):
        return [dg.tensor(self.w0.astype(self.dtype)).requires_grad_(),
                dg.tensor(self.b0.astype(self.dtype)).requires_grad_()]

    def inputs(self):
        return dg.tensor(self.x.astype(self.dtype)), dg.tensor(self.y.astype(self.dtype))

    def loss(self, w, b, x, y):
        r = x @ w + b - y
        return 0.5 * dg.ops.sum(r * r)

    def grads_np(self, w, b):
        r = self.x @ w + b - self.y
        return [self.x.T @ r, r.sum(axis=0)]


def _hyper(kwargs, extra):
    h = dict(kwargs)
    h.update(extra)
    return h


@pytest.mark.parametrize("name, cls, ref_cls, kwargs, extra", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_steps_match_reference(name, cls, ref_cls, kwargs, extra, dtype):
    prob = Problem(dtype=dtype)
    w, b = prob.params()
    x, y = prob.inputs()
    opt = cls([w, b], **kwargs)
    ref = ref_cls([([prob.w0.astype(dtype), prob.b0.astype(dtype)], _hyper(kwargs, extra))])
    for _ in range(STEPS):
        opt.zero_grad()
        prob.loss(w, b, x, y).backward()
        opt.step()
        ref.step([prob.grads_np(*ref.params)])
    tol = dict(rtol=1e-11, atol=1e-12) if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref.params[0], **tol)
    np.testing.assert_allclose(b.numpy(), ref.params[1], **tol)
    assert w.dtype.name == dtype and w.requires_grad and w.is_leaf


@pytest.mark.parametrize("name, cls, ref_cls, kwargs, extra", CASES, ids=IDS)
def test_graph_step_equals_eager(name, cls, ref_cls, kwargs, extra):
    prob = Problem()
    x, y = prob.inputs()
    runs = []
    for mode in ("eager", "graph"):
        w, b = prob.params()
        opt = cls([w, b], **kwargs)

        def train_step(x, y, w=w, b=b, opt=opt):
            with dg.GradientTape() as tape:
                tape.watch([w, b])
                loss = prob.loss(w, b, x, y)
            opt.step(tape.gradient(loss, [w, b]))
            return loss

        fn = dg.function(train_step) if mode == "graph" else train_step
        losses = [fn(x, y).item() for _ in range(STEPS)]
        if mode == "graph":
            assert fn.trace_count == 1
        runs.append((losses, w.numpy().copy(), b.numpy().copy(), opt.state_dict()))
    (le, we, be, se), (lg, wg, bg, sg) = runs
    np.testing.assert_allclose(lg, le, rtol=1e-13)
    np.testing.assert_allclose(wg, we, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(bg, be, rtol=1e-13, atol=1e-15)
    for idx, st in se["state"].items():
        assert set(sg["state"][idx]) == set(st)
        for key, value in st.items():
            np.testing.assert_allclose(sg["state"][idx][key].numpy(), value.numpy(),
                                       rtol=1e-13, atol=1e-15)


def test_graph_step_follows_lr_changes_without_retracing():
    prob = Problem()
    x, y = prob.inputs()
    results = []
    for mode in ("eager", "graph"):
        w, b = prob.params()
        opt = optim.SGD([w, b], lr=0.1, momentum=0.9)
        sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

        def train_step(x, y, w=w, b=b, opt=opt):
            with dg.GradientTape() as tape:
                tape.watch([w, b])
                loss = prob.loss(w, b, x, y)
            opt.step(tape.gradient(loss, [w, b]))
            return loss

        fn = dg.function(train_step) if mode == "graph" else train_step
        for _ in range(6):
            fn(x, y)
            sched.step()
        if mode == "graph":
            assert fn.trace_count == 1
        results.append(w.numpy().copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-13)
    # ... and differs from a run at constant lr.
    w, b = prob.params()
    opt = optim.SGD([w, b], lr=0.1, momentum=0.9)
    for _ in range(6):
        opt.step([dg.tensor(g) for g in prob.grads_np(w.numpy(), b.numpy())])
    assert not np.allclose(w.numpy(), results[0])


def test_param_groups_have_their_own_hyper_parameters():
    prob = Problem()
    w, b = prob.params()
    x, y = prob.inputs()
    opt = optim.SGD([{"params": [w]}, {"params": b, "lr": 0.01, "momentum": 0.5}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["lr"] == 0.01
    assert opt.param_groups[0]["momentum"] == 0.0
    ref = RefSGD([([prob.w0], dict(lr=0.1)), ([prob.b0], dict(lr=0.01, momentum=0.5))])
    for _ in range(STEPS):
        opt.zero_grad()
        prob.loss(w, b, x, y).backward()
        opt.step()
        gw, gb = prob.grads_np(*ref.params)
        ref.step([[gw], [gb]])
    np.testing.assert_allclose(w.numpy(), ref.params[0], rtol=1e-12)
    np.testing.assert_allclose(b.numpy(), ref.params[1], rtol=1e-12)


def test_add_param_group_later():
    a = dg.tensor(np.ones(2)).requires_grad_()
    c = dg.tensor(np.ones(3)).requires_grad_()
    opt = optim.Adam([a], lr=0.1)
    opt.add_param_group({"params": [c], "lr": 0.5, "betas": (0.5, 0.5)})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["eps"] == 1e-8
    opt.step([dg.tensor(np.ones(2)), dg.tensor(np.ones(3))])
    # The first Adam step moves every element by (almost exactly) its lr.
    np.testing.assert_allclose(a.numpy(), 0.9, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), 0.5, rtol=1e-6)


def test_changing_group_lr_writes_the_lr_tensor():
    a = dg.tensor(np.zeros(2)).requires_grad_()
    opt = optim.SGD([a], lr=0.1)
    group = opt.param_groups[0]
    assert group.lr_tensor.item() == 0.1
    group["lr"] = 0.25
    assert group.lr_tensor.item() == 0.25
    opt.step([dg.tensor(np.ones(2))])
    np.testing.assert_allclose(a.numpy(), -0.25)


def test_zero_grad():
    prob = Problem()
    w, b = prob.params()
    x, y = prob.inputs()
    opt = optim.SGD([w, b], lr=0.1)
    prob.loss(w, b, x, y).backward()
    g1 = w.grad.numpy().copy()
    prob.loss(w, b, x, y).backward()           # accumulates
    np.testing.assert_allclose(w.grad.numpy(), 2 * g1)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros_like(g1))
    assert w.grad.dtype == w.dtype
    prob.loss(w, b, x, y).backward()
    np.testing.assert_allclose(w.grad.numpy(), g1)
    opt.zero_grad()
    assert w.grad is None and b.grad is None


def test_params_without_grad_are_skipped():
    a = dg.tensor(np.ones(2)).requires_grad_()
    c = dg.tensor(np.ones(2)).requires_grad_()
    opt = optim.Adam([a, c], lr=0.1)
    a.grad = dg.tensor(np.ones(2))
    opt.step()
    np.testing.assert_array_equal(c.numpy(), np.ones(2))
    assert a.numpy()[0] < 1.0
    assert c not in opt.state and "step" in opt.state[a]
    assert opt.state[a]["step"].item() == 1
    opt.step([None, dg.tensor(np.ones(2))])
    assert opt.state[a]["step"].item() == 1 and opt.state[c]["step"].item() == 1


def test_step_with_closure():
    prob = Problem()
    w, b = prob.params()
    x, y = prob.inputs()
    opt = optim.SGD([w, b], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = prob.loss(w, b, x, y)
        loss.backward()
        return loss

    first = opt.step(closure).item()
    second = opt.step(closure=closure).item()
    assert second < first


@pytest.mark.parametrize("name, cls, ref_cls, kwargs, extra", CASES, ids=IDS)
def test_state_dict_round_trip_continues_identically(name, cls, ref_cls, kwargs, extra):
    prob = Problem()
    x, y = prob.inputs()

    def train(opt, w, b, steps):
        for _ in range(steps):
            opt.zero_grad()
            prob.loss(w, b, x, y).backward()
            opt.step()

    w, b = prob.params()
    opt = cls([w, b], **kwargs)
    train(opt, w, b, 3)
    saved = opt.state_dict()
    w2 = dg.tensor(w.numpy().copy()).requires_grad_()
    b2 = dg.tensor(b.numpy().copy()).requires_grad_()
    opt2 = cls([w2, b2], lr=123.0)            # different hyper-parameters, no state
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert opt2.param_groups[0].lr_tensor.item() == opt.param_groups[0]["lr"]
    train(opt, w, b, 3)
    train(opt2, w2, b2, 3)
    np.testing.assert_array_equal(w2.numpy(), w.numpy())
    np.testing.assert_array_equal(b2.numpy(), b.numpy())


def test_state_dict_layout_and_snapshot():
    a = dg.tensor(np.ones(2)).requires_grad_()
    c = dg.tensor(np.ones((2, 2))).requires_grad_()
    opt = optim.Adam([{"params": [a]}, {"params": [c], "lr": 0.5}], lr=0.1, amsgrad=True)
    opt.step([dg.tensor(np.ones(2)), dg.tensor(np.ones((2, 2)))])
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert sd["param_groups"][1]["lr"] == 0.5
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999)
    assert set(sd["state"]) == {0, 1}
    assert set(sd["state"][1]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert sd["state"][1]["step"].item() == 1 and sd["state"][1]["step"].dtype.name == "int64"
    before = sd["state"][0]["exp_avg"].numpy().copy()
    opt.step([dg.tensor(np.ones(2)), dg.tensor(np.ones((2, 2)))])
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), before)
    assert sd["state"][0]["step"].item() == 1


def test_load_state_dict_into_a_compiled_step():
    prob = Problem()
    x, y = prob.inputs()
    w, b = prob.params()
    opt = optim.Adam([w, b], lr=0.05)

    @dg.function
    def train_step(x, y):
        with dg.GradientTape() as tape:
            tape.watch([w, b])
            loss = prob.loss(w, b, x, y)
        opt.step(tape.gradient(loss, [w, b]))
        return loss

    for _ in range(2):
        train_step(x, y)
    saved_w, saved_b, saved = w.numpy().copy(), b.numpy().copy(), opt.state_dict()
    for _ in range(3):
        train_step(x, y)
    after = (w.numpy().copy(), b.numpy().copy())
    w.assign(dg.tensor(saved_w))
    b.assign(dg.tensor(saved_b))
    opt.load_state_dict(saved)
    for _ in range(3):
        train_step(x, y)
    assert train_step.trace_count == 1
    np.testing.assert_array_equal(w.numpy(), after[0])
    np.testing.assert_array_equal(b.numpy(), after[1])


@pytest.mark.parametrize("cls, kwargs", [
    (optim.SGD, dict(lr=0.1, momentum=0.9)), (optim.Adam, dict(lr=0.05)),
    (optim.AdamW, dict(lr=0.05)), (optim.RMSprop, dict(lr=0.01)),
    (optim.Adagrad, dict(lr=0.5))])
def test_linear_regression_converges(cls, kwargs):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (64, 3)).astype(np.float32)
    true_w = np.array([[1.5], [-2.0], [0.5]], np.float32)
    y = x @ true_w + 0.3
    w = dg.tensor(np.zeros((3, 1), np.float32)).requires_grad_()
    b = dg.tensor(np.zeros((1,), np.float32)).requires_grad_()
    opt = cls([w, b], **kwargs)
    xt, yt = dg.tensor(x), dg.tensor(y)

    @dg.function
    def train_step(x, y):
        with dg.GradientTape() as tape:
            tape.watch([w, b])
            loss = dg.ops.mean(dg.ops.square(x @ w + b - y))
        opt.step(tape.gradient(loss, [w, b]))
        return loss

    first = train_step(xt, yt).item()
    for _ in range(300):
        loss = train_step(xt, yt).item()
    assert loss < 1e-3 * first, (first, loss)
    np.testing.assert_allclose(w.numpy(), true_w, atol=0.05)


# ------------------------------------------------------------ bad input


def test_bad_construction():
    a = dg.tensor(np.ones(2)).requires_grad_()
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="single Tensor"):
        optim.SGD(a, lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD([a], lr=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([a], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([a], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="alpha"):
        optim.RMSprop([a], alpha=1.5)
    with pytest.raises(ValueError, match="lr_decay"):
        optim.Adagrad([a], lr_decay=-1)
    with pytest.raises(TypeError, match="int64"):
        optim.SGD([dg.tensor(np.ones(2, np.int64))], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        optim.SGD([{"params": [a], "betas": (0.9, 0.9)}], lr=0.1)


def test_step_with_wrong_gradients():
    a = dg.tensor(np.ones(2)).requires_grad_()
    c = dg.tensor(np.ones(3)).requires_grad_()
    opt = optim.Adam([a, c])
    with pytest.raises(ValueError, match="1 gradients for 2 parameters"):
        opt.step([dg.tensor(np.ones(2))])
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"AdamUpdate.*\[4\]"):
        opt.step([dg.tensor(np.ones(4)), dg.tensor(np.ones(3))])
    with pytest.raises(dg.errors.InvalidArgumentError, match="AdamUpdate.*float32"):
        opt.step([dg.tensor(np.ones(2, np.float32)), dg.tensor(np.ones(3))])


def test_load_state_dict_mismatch():
    a = dg.tensor(np.ones(2)).requires_grad_()
    c = dg.tensor(np.ones(3)).requires_grad_()
    opt = optim.SGD([a, c], lr=0.1, momentum=0.9)
    opt.step([dg.tensor(np.ones(2)), dg.tensor(np.ones(3))])
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="group 0 has 2 parameter"):
        optim.SGD([a], lr=0.1, momentum=0.9).load_state_dict(sd)
    with pytest.raises(ValueError, match="parameter group"):
        optim.SGD([{"params": [a]}, {"params": [c]}], lr=0.1).load_state_dict(sd)
    swapped = optim.SGD([c, a], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match=r"momentum_buffer.*shape \[2\].*\[3\]"):
        swapped.load_state_dict(sd)
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})
    bad = opt.state_dict()
    bad["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ValueError, match="learning rate"):
        opt.load_state_dict(bad)
    bad["param_groups"][0].update(lr=0.1, betas=(0.9, 0.9))
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        opt.load_state_dict(bad)
    assert opt.param_groups[0]["lr"] == 0.1     # nothing was loaded
