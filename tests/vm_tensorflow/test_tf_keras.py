"""tf.keras under dragon_core.vm.tensorflow: layers, losses, metrics and
optimizers against float64 NumPy references and, when importable, against
real Keras with the same weights."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dragon_core.vm.tensorflow as tf

from tf_cases import conv2d_nhwc, log_softmax, pool_nhwc, softmax

try:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as real_tf
except ImportError:   # pragma: no cover - depends on the environment
    real_tf = None

needs_tf = pytest.mark.skipif(real_tf is None, reason="TensorFlow is not installed (the NumPy "
                                                      "reference tests check the same layers)")


def rng():
    return np.random.default_rng(0)


# ------------------------------------------------------------------- layers
# (name, factory(keras) -> layer, input maker, numpy reference(x, weights, training))

def _dense_ref(x, w, training):
    return np.maximum(x @ w[0] + w[1], 0)


def _conv_ref(x, w, training):
    return conv2d_nhwc(x, w[0], 2, "SAME") + w[1]


def _bn_ref_infer(x, w, training):
    g, b, m, v = w
    return (x - m) / np.sqrt(v + 1e-3) * g + b


def _bn_ref_train(x, w, training):
    g, b = w[0], w[1]
    mean, var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    return (x - mean) / np.sqrt(var + 1e-3) * g + b


def _ln_ref(x, w, training):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-3) * w[0] + w[1]


def _ln_axes_ref(x, w, training):
    mean, var = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-3) * w[0] + w[1]


LAYERS = [
    ("Dense", lambda k: k.layers.Dense(5, activation="relu"),
     lambda r: r.standard_normal((4, 3)), _dense_ref, False),
    ("Dense_3d", lambda k: k.layers.Dense(2),
     lambda r: r.standard_normal((2, 3, 4)), lambda x, w, t: x @ w[0] + w[1], False),
    ("Conv2D_same_stride2", lambda k: k.layers.Conv2D(4, 3, strides=2, padding="same"),
     lambda r: r.standard_normal((2, 7, 6, 3)), _conv_ref, False),
    ("Conv2D_valid_relu", lambda k: k.layers.Conv2D(2, (2, 3), activation="relu"),
     lambda r: r.standard_normal((1, 5, 5, 2)),
     lambda x, w, t: np.maximum(conv2d_nhwc(x, w[0]) + w[1], 0), False),
    ("MaxPool2D", lambda k: k.layers.MaxPool2D(),
     lambda r: r.standard_normal((2, 4, 6, 3)),
     lambda x, w, t: pool_nhwc(x, 2, 2, "VALID", "max"), False),
    ("MaxPool2D_same", lambda k: k.layers.MaxPool2D(3, 2, padding="same"),
     lambda r: r.standard_normal((1, 5, 5, 2)),
     lambda x, w, t: pool_nhwc(x, 3, 2, "SAME", "max"), False),
    ("AveragePooling2D_same", lambda k: k.layers.AveragePooling2D(2, padding="same"),
     lambda r: r.standard_normal((1, 5, 3, 2)),
     lambda x, w, t: pool_nhwc(x, 2, 2, "SAME", "avg"), False),
    ("GlobalAveragePooling2D", lambda k: k.layers.GlobalAveragePooling2D(),
     lambda r: r.standard_normal((2, 3, 4, 5)), lambda x, w, t: x.mean((1, 2)), False),
    ("BatchNormalization_inference", lambda k: k.layers.BatchNormalization(),
     lambda r: r.standard_normal((4, 3, 3, 2)), _bn_ref_infer, False),
    ("BatchNormalization_training", lambda k: k.layers.BatchNormalization(),
     lambda r: r.standard_normal((4, 3, 3, 2)), _bn_ref_train, True),
    ("LayerNormalization", lambda k: k.layers.LayerNormalization(),
     lambda r: r.standard_normal((3, 5)), _ln_ref, False),
    ("LayerNormalization_axes", lambda k: k.layers.LayerNormalization(axis=[1, 2]),
     lambda r: r.standard_normal((2, 3, 4)), _ln_axes_ref, False),
    ("Flatten", lambda k: k.layers.Flatten(),
     lambda r: r.standard_normal((2, 3, 4, 2)), lambda x, w, t: x.reshape(2, -1), False),
    ("Dropout_inference", lambda k: k.layers.Dropout(0.5),
     lambda r: r.standard_normal((3, 4)), lambda x, w, t: x, False),
    ("Reshape", lambda k: k.layers.Reshape((2, 6)),
     lambda r: r.standard_normal((2, 3, 4)), lambda x, w, t: x.reshape(2, 2, 6), False),
]


def _random_weights(layer, r):
    out = []
    for w in layer.get_weights():
        v = r.standard_normal(w.shape)
        if "variance" in getattr(w, "name", "") or (w.ndim == 1 and len(out) == 3):
            v = np.abs(v) + 0.5
        out.append(v.astype(np.float32))
    return out


def _build_and_set(keras, make, x, weights=None):
    layer = make(keras)
    layer(x[:1] if x.shape[0] > 1 else x)           # builds from the input shape
    if weights is None:
        weights = _random_weights(layer, np.random.default_rng(7))
    layer.set_weights(weights)
    return layer, weights


@pytest.mark.parametrize("name,make,make_x,ref,training", LAYERS, ids=[l[0] for l in LAYERS])
def test_layer_matches_numpy(name, make, make_x, ref, training):
    x = make_x(rng()).astype(np.float32)
    layer, weights = _build_and_set(tf.keras, make, x)
    out = layer(tf.constant(x), training=training)
    expect = ref(x.astype(np.float64), [w.astype(np.float64) for w in weights], training)
    assert out.dtype.name == "float32"
    assert tuple(out.shape) == expect.shape
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-4, atol=1e-5)


@needs_tf
@pytest.mark.parametrize("name,make,make_x,ref,training", LAYERS, ids=[l[0] for l in LAYERS])
def test_layer_matches_real_keras(name, make, make_x, ref, training):
    x = make_x(rng()).astype(np.float32)
    ours, weights = _build_and_set(tf.keras, make, x)
    theirs, _ = _build_and_set(real_tf.keras, make, x, weights)
    assert [w.shape for w in ours.get_weights()] == [w.shape for w in theirs.get_weights()]
    a = ours(tf.constant(x), training=training).numpy()
    b = np.asarray(theirs(real_tf.constant(x), training=training))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the moving statistics move the same way
    for wa, wb in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)


def test_batch_norm_moving_statistics_update():
    x = rng().standard_normal((8, 2, 2, 3)).astype(np.float32)
    bn = tf.keras.layers.BatchNormalization(momentum=0.9)
    bn(tf.constant(x), training=True)
    mean, var = x.astype(np.float64).mean((0, 1, 2)), x.astype(np.float64).var((0, 1, 2))
    g, b, mm, mv = bn.get_weights()
    np.testing.assert_allclose(mm, 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mv, 0.9 + 0.1 * var, rtol=1e-5, atol=1e-6)
    assert len(bn.trainable_weights) == 2 and len(bn.non_trainable_weights) == 2


def test_dropout_training_zeroes_and_scales():
    tf.random.set_seed(3)
    x = np.ones((200, 50), np.float32)
    y = tf.keras.layers.Dropout(0.25)(tf.constant(x), training=True).numpy()
    kept = y != 0
    assert 0.70 < kept.mean() < 0.80
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)


def test_embedding_picks_rows():
    emb = tf.keras.layers.Embedding(6, 3)
    ids = np.array([[0, 5], [2, 2]], np.int32)
    out = emb(tf.constant(ids))
    table = emb.get_weights()[0]
    assert np.all(np.abs(table) <= 0.05)                   # Keras's uniform(-0.05, 0.05)
    np.testing.assert_array_equal(out.numpy(), table[ids])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(emb(tf.constant(ids)) * 2.0)
    (g,) = tape.gradient(loss, emb.trainable_variables)
    expect = np.zeros((6, 3))
    for i in ids.reshape(-1):
        expect[i] += 2.0
    np.testing.assert_allclose(g.numpy(), expect)


def test_default_initialisers_follow_keras():
    tf.keras.utils.set_random_seed(0)
    d = tf.keras.layers.Dense(300)
    d(tf.zeros([1, 200]))
    k, b = d.get_weights()
    limit = np.sqrt(6 / (200 + 300))                     # glorot_uniform
    assert np.abs(k).max() <= limit and np.abs(k).max() > 0.9 * limit
    np.testing.assert_allclose(k.var(), limit ** 2 / 3, rtol=0.05)
    assert not b.any()


# ------------------------------------------------------------------- losses

def _losses_cases():
    r = rng()
    logits = r.standard_normal((5, 4))
    probs = softmax(logits)
    ids = np.array([0, 3, 1, 1, 2])
    onehot = np.eye(4)[ids]
    z = r.standard_normal((5, 3))
    t01 = (r.random((5, 3)) > 0.5).astype(np.float64)
    y, p = r.standard_normal((5, 3)), r.standard_normal((5, 3))
    sig = 1 / (1 + np.exp(-z))
    return [
        ("SparseCategoricalCrossentropy_probs", lambda k: k.losses.SparseCategoricalCrossentropy(),
         ids, probs, -np.log(probs[np.arange(5), ids]).mean()),
        ("SparseCategoricalCrossentropy_logits",
         lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=True),
         ids, logits, -log_softmax(logits)[np.arange(5), ids].mean()),
        ("CategoricalCrossentropy_probs", lambda k: k.losses.CategoricalCrossentropy(),
         onehot, probs, -(onehot * np.log(probs)).sum(-1).mean()),
        ("CategoricalCrossentropy_logits_smoothing",
         lambda k: k.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1),
         onehot, logits, -((onehot * 0.9 + 0.025) * log_softmax(logits)).sum(-1).mean()),
        ("BinaryCrossentropy_probs", lambda k: k.losses.BinaryCrossentropy(), t01, sig,
         -(t01 * np.log(sig) + (1 - t01) * np.log(1 - sig)).mean()),
        ("BinaryCrossentropy_logits", lambda k: k.losses.BinaryCrossentropy(from_logits=True),
         t01, z, (np.maximum(z, 0) - z * t01 + np.log1p(np.exp(-np.abs(z)))).mean()),
        ("MeanSquaredError", lambda k: k.losses.MeanSquaredError(), y, p, ((y - p) ** 2).mean()),
        ("MeanAbsoluteError", lambda k: k.losses.MeanAbsoluteError(), y, p, np.abs(y - p).mean()),
        ("MSE_sum", lambda k: k.losses.MeanSquaredError(reduction="sum"), y, p,
         ((y - p) ** 2).mean(-1).sum()),
        ("Huber", lambda k: k.losses.Huber(), y, p,
         np.where(np.abs(y - p) <= 1, 0.5 * (y - p) ** 2, np.abs(y - p) - 0.5).mean()),
    ]


LOSSES = _losses_cases()


def _loss_inputs(y_true, y_pred):
    yt = y_true.astype(np.int64) if y_true.dtype.kind == "i" else y_true.astype(np.float32)
    return yt, y_pred.astype(np.float32)


@pytest.mark.parametrize("name,make,y_true,y_pred,expect", LOSSES, ids=[l[0] for l in LOSSES])
def test_loss_matches_numpy(name, make, y_true, y_pred, expect):
    yt, yp = _loss_inputs(y_true, y_pred)
    out = make(tf.keras)(tf.constant(yt), tf.constant(yp))
    assert out.ndim == 0 and out.dtype.name == "float32"
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-5)


@needs_tf
@pytest.mark.parametrize("name,make,y_true,y_pred,expect", LOSSES, ids=[l[0] for l in LOSSES])
def test_loss_matches_real_keras(name, make, y_true, y_pred, expect):
    yt, yp = _loss_inputs(y_true, y_pred)
    ours = make(tf.keras)(tf.constant(yt), tf.constant(yp)).numpy()
    theirs = np.asarray(make(real_tf.keras)(real_tf.constant(yt), real_tf.constant(yp)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_loss_reduction_none_and_sample_weight():
    y, p = np.array([0, 2]), softmax(rng().standard_normal((2, 3))).astype(np.float32)
    per = -np.log(p[np.arange(2), y].astype(np.float64))
    loss = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
    np.testing.assert_allclose(loss(tf.constant(y), tf.constant(p)).numpy(), per, rtol=1e-5)
    mean = tf.keras.losses.SparseCategoricalCrossentropy()
    out = mean(tf.constant(y), tf.constant(p), sample_weight=np.array([1.0, 3.0], np.float32))
    np.testing.assert_allclose(out.numpy(), (per[0] + 3 * per[1]) / 2, rtol=1e-5)


# ------------------------------------------------------------------ metrics

def test_metrics_accumulate():
    m = tf.keras.metrics.SparseCategoricalAccuracy()
    m.update_state([0, 1, 2], np.eye(3)[[0, 2, 2]])
    m.update_state([1], np.eye(3)[[1]])
    assert m.result().numpy() == pytest.approx(0.75)
    m.reset_state()
    assert m.result().numpy() == 0.0
    c = tf.keras.metrics.CategoricalAccuracy()
    assert c(np.eye(3)[[0, 1]], np.eye(3)[[0, 2]]).numpy() == pytest.approx(0.5)
    b = tf.keras.metrics.BinaryAccuracy()
    assert b(np.array([[1.0], [0.0]]), np.array([[0.7], [0.6]])).numpy() == pytest.approx(0.5)
    mean = tf.keras.metrics.Mean()
    mean.update_state([1.0, 2.0, 6.0])
    assert mean.result().numpy() == pytest.approx(3.0)
    mae = tf.keras.metrics.MeanAbsoluteError()
    assert mae(np.array([[1.0, 2.0]]), np.array([[2.0, 4.0]])).numpy() == pytest.approx(1.5)


# --------------------------------------------------------------- optimizers

def _keras_sgd(w, grads, lr, momentum, nesterov):
    v = np.zeros_like(w)
    for g in grads:
        v = momentum * v - lr * g
        w = w + (momentum * v - lr * g if nesterov else v)
    return w


def _keras_adam(w, grads, lr, b1, b2, eps):
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return w


OPTIMIZERS = [
    ("SGD", lambda k: k.optimizers.SGD(0.1), lambda w, g: _keras_sgd(w, g, 0.1, 0.0, False)),
    ("SGD_momentum", lambda k: k.optimizers.SGD(0.05, momentum=0.9),
     lambda w, g: _keras_sgd(w, g, 0.05, 0.9, False)),
    ("SGD_nesterov", lambda k: k.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
     lambda w, g: _keras_sgd(w, g, 0.05, 0.9, True)),
    ("Adam", lambda k: k.optimizers.Adam(0.01),
     lambda w, g: _keras_adam(w, g, 0.01, 0.9, 0.999, 1e-7)),
]


def _grads():
    r = rng()
    return [r.standard_normal((3, 2)) for _ in range(4)]


@pytest.mark.parametrize("name,make,ref", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_matches_numpy(name, make, ref):
    w0 = rng().standard_normal((3, 2)).astype(np.float32)
    var = tf.Variable(w0)
    opt = make(tf.keras)
    grads = _grads()
    for g in grads:
        opt.apply_gradients([(tf.constant(g.astype(np.float32)), var)])
    expect = ref(w0.astype(np.float64), grads)
    np.testing.assert_allclose(var.numpy(), expect, rtol=1e-5, atol=1e-6)


@needs_tf
@pytest.mark.parametrize("name,make,ref", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_matches_real_keras(name, make, ref):
    w0 = rng().standard_normal((3, 2)).astype(np.float32)
    results = []
    for lib in (tf, real_tf):
        var = lib.Variable(w0)
        opt = make(lib.keras)
        for g in _grads():
            opt.apply_gradients([(lib.constant(g.astype(np.float32)), var)])
        results.append(var.numpy())
    # Adam: epsilon sits after the bias correction here, before it in Keras 3
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


def test_optimizer_minimize_and_learning_rate():
    var = tf.Variable([3.0])
    opt = tf.keras.optimizers.SGD(learning_rate=0.5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(var * var)
    opt.minimize(loss, [var], tape=tape)
    np.testing.assert_allclose(var.numpy(), [0.0])
    opt.learning_rate = 0.25
    assert opt.learning_rate == 0.25
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((var - 2.0) * (var - 2.0))
    opt.minimize(loss, [var], tape=tape)
    np.testing.assert_allclose(var.numpy(), [1.0])
