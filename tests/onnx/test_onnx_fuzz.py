"""Seeded differential fuzzing of ONNX export and import
(``tests/onnx/onnxfuzz.py``).

- export: random graphfuzz programs (float32 / float64, opsets 17-23),
  random integer programs (int8..int64, uint8, with negative values),
  random conv nets of ``dragon_core.nn`` and of ``dragon_core.vm.torch``
  (exported with a dynamic batch axis and run at another batch size) and
  random attention/sequence models with int64 and bool
  tensors; each model passes ``onnx.checker`` (full check) and strict
  shape inference, computes Dragon's eager result in onnxruntime, and
  ``load(export(model))`` computes it again (round trip);
- import: random torch models (conv, norms, pooling, interpolate,
  attention, indexing) exported by ``torch.onnx`` with a dynamic batch axis
  and compared with torch at two batch sizes; one random node per case
  over the ops ``load`` claims, attributes
  at their edge values, at an opset drawn per case; Dragon agrees with
  onnxruntime (with the same model in float32 where onnxruntime lacks a
  float64 kernel; onnx's reference evaluator decides where onnxruntime
  departs from the specification), or refuses the node by name.

``DRAGON_FUZZ_OFFSET=k`` draws other, still reproducible, cases and
``DRAGON_ONNX_FUZZ_SCALE=n`` runs n times as many, for a deeper run by hand:
``DRAGON_FUZZ_OFFSET=1000 DRAGON_ONNX_FUZZ_SCALE=10 pytest tests/onnx/test_onnx_fuzz.py``.
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnxfuzz as F  # noqa: E402

OFFSET = int(os.environ.get("DRAGON_FUZZ_OFFSET", "0"))
SCALE = int(os.environ.get("DRAGON_ONNX_FUZZ_SCALE", "1"))
CHUNK = 16


def _chunks(n):
    return range((n * SCALE + CHUNK - 1) // CHUNK)


@pytest.mark.parametrize("chunk", _chunks(128))
def test_random_programs_export_and_round_trip(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        prog, xs, opset = F.export_program(seed)
        ran += F.check_export(prog, xs, opset, f"program seed {seed}\n{prog}")
    assert ran > CHUNK // 2


@pytest.mark.parametrize("chunk", _chunks(64))
def test_random_integer_programs_export(chunk):
    # truncating vs flooring division and modulo, narrow integer
    # reductions, sorts and argmax with ties, bool results
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        prog, xs, opset, steps = F.int_program(seed)
        ran += F.check_export(prog, xs, opset, f"integer program seed {seed}: {steps}")
    assert ran > CHUNK // 3


@pytest.mark.parametrize("chunk", _chunks(48))
def test_random_convnets_export_with_a_dynamic_batch(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        model, xs, xs2 = F.random_convnet(seed)
        opset = int(np.random.default_rng(seed).choice(F.OPSETS))
        dyn = {"input_0": {0: "batch"}, "output_0": {0: "batch"}}
        ran += F.check_export(model, xs, opset, f"convnet seed {seed}\n{model}",
                              dynamic_axes=dyn, other_xs=xs2)
    assert ran > CHUNK // 2


@pytest.mark.parametrize("chunk", _chunks(32))
def test_random_vm_torch_models_export_with_a_dynamic_batch(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        got = F.random_torchnet(seed)
        if got is None:
            continue
        model, xs, xs2 = got
        opset = int(np.random.default_rng(seed).choice(F.OPSETS))
        dyn = {"input_0": {0: "batch"}, "output_0": {0: "batch"}}
        ran += F.check_export(model, xs, opset, f"vm.torch model seed {seed}\n{model}",
                              dynamic_axes=dyn, other_xs=xs2)
    assert ran > CHUNK // 2


@pytest.mark.parametrize("chunk", _chunks(32))
def test_random_sequence_models_export(chunk):
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        model, xs, _ = F.random_seqmodel(seed)
        opset = int(np.random.default_rng(seed).choice(F.OPSETS))
        assert F.check_export(model, xs, opset, f"seqmodel seed {seed}")


@pytest.mark.parametrize("cat", sorted(F.IMPORT_GENERATORS))
def test_random_nodes_import(cat):
    gen, count = F.IMPORT_GENERATORS[cat]
    count = count * SCALE
    outcomes = collections.Counter()
    for i in range(OFFSET, OFFSET + count):
        rng = np.random.default_rng(1000003 * (i + 1) + sum(map(ord, cat)))
        case = None
        while case is None:
            case = gen(rng)
        outcomes[F.check_import(case)] += 1
    compared = sum(v for k, v in outcomes.items() if k.startswith("ran") or k == "ort-quirk")
    assert compared >= count // 2, f"{cat}: too few cases compared: {dict(outcomes)}"


@pytest.mark.parametrize("chunk", _chunks(16))
def test_random_torch_models_import(chunk):
    # exported by torch.onnx (TorchScript, dynamic batch), loaded by Dragon,
    # compared with torch at the traced batch and another one
    pytest.importorskip("torch")
    import warnings
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + (chunk + 1) * CHUNK):
        opset = int(np.random.default_rng(seed).choice([13, 14, 16, 17, 18, 20]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ran += F.check_torch_import(seed, opset)
    assert ran > CHUNK // 2
