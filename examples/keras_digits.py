"""Train a Keras-style CNN on scikit-learn's digits with dragon_core.vm.tensorflow.

The script is plain TensorFlow 2 / Keras code apart from its import line:
``tf.keras.Sequential`` with channels-last ``Conv2D``, ``BatchNormalization``,
``MaxPool2D``, ``Dropout`` and ``Dense`` layers, ``compile`` with Adam and
sparse categorical cross-entropy, ``fit`` with a progress bar, ``evaluate``
and ``predict``. ``fit`` compiles the whole training step into one graph.

Run ``python examples/keras_digits.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits

import dragon_core.vm.tensorflow as tf


def build_model() -> "tf.keras.Sequential":
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.MaxPool2D(),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPool2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, default=2)
    args = parser.parse_args(argv)

    tf.keras.utils.set_random_seed(args.seed)
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]    # NHWC
    y = digits.target.astype("int64")
    order = np.random.default_rng(args.seed).permutation(len(x))
    x, y = x[order], y[order]
    n_train = 1400
    model = build_model()
    model.compile(optimizer=tf.keras.optimizers.Adam(args.lr),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.summary()
    t0 = time.perf_counter()
    model.fit(x[:n_train], y[:n_train], batch_size=args.batch_size, epochs=args.epochs,
              verbose=args.verbose, validation_data=(x[n_train:], y[n_train:]))
    train_s = time.perf_counter() - t0
    loss, acc = model.evaluate(x[n_train:], y[n_train:], verbose=0)
    pred = model.predict(x[n_train:], verbose=0)
    agree = float(np.mean(pred.argmax(-1) == y[n_train:]))
    print(f"test loss {loss:.4f}, test accuracy {100 * acc:.2f}% "
          f"(predict: {100 * agree:.2f}%), trained in {train_s:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
