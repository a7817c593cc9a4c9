"""check_bad_inputs: garbage in, a clean named error (or a result) out --
and a crash becomes a test failure naming the op and the variant."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import check_bad_inputs
from dragon_sdk.testing.badinputs import variants

KNOWN: list = []   # variants every op is allowed to skip: none


def _r(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Add", [_r(3, 4), _r(3, 4)], {}),
    ("MatMul", [_r(3, 4), _r(4, 2)], {}),
    ("Softplus", [_r(3, 4)], {"beta": 2.0}),
    ("Sum", [_r(3, 4)], {"axes": [1]}),
    ("Concat", [[_r(2, 3), _r(1, 3)]], {"axis": 0}),
])
def test_core_ops_survive_bad_inputs(dg, op, inputs, attrs):
    report = check_bad_inputs(op, inputs, skip=KNOWN, **attrs)
    assert report["valid"] == "ok"
    assert len(report) > 10


def test_plugin_op_survives_bad_inputs(dg, custom_op):
    # The child process reloads custom_op (loaded here by load_library).
    report = check_bad_inputs("ScaledAdd", [_r(2, 3), _r(2, 3)], skip=KNOWN,
                              alpha=2.0)
    assert "does not broadcast" in report["input 1 with last dim 4"]


def test_variants_cover_the_advertised_kinds():
    labels = [v.label for v in variants([_r(2, 3)], {"beta": 1.0}, ["beta"])]
    for want in ("input 0 as int32", "input 0 with an extra axis",
                 "input 0 as a 0-d array", "input 0 with last dim 4",
                 "input 0 empty [0, 3]", "input 0 non-contiguous",
                 "one input missing", "an extra input", "attr beta='garbage'",
                 "unknown attr"):
        assert want in labels, want


def test_a_crash_fails_with_the_op_and_variant_named(dg, crashy):
    x = _r(2, 3)
    np.testing.assert_array_equal(dg.ops.crashy(dg.tensor(x)).numpy(), x)
    with pytest.raises(AssertionError) as err:
        check_bad_inputs("Crashy", [x], skip=KNOWN)
    text = str(err.value)
    assert text.startswith("Crashy: 2 of")
    assert "input 0 empty [0, 3]: crashed the process (SIGSEGV)" in text
    assert "every input empty: crashed the process (SIGSEGV)" in text
    # The variants after the crash ran in a fresh child and passed.
    assert "unknown attr" not in text


def test_an_unnamed_error_fails():
    """The child judges each error with classify_error: one that names
    neither the op nor its Python name fails the check."""
    from dragon_sdk.testing.badinputs import classify_error
    bad = classify_error(TypeError("unsupported operand"), ["relu"])
    assert not bad["ok"] and bad["why"] == "the error does not name the op"
    good = classify_error(ValueError("Relu: input 'x' is None"), ["relu"])
    assert good["ok"], good


def test_none_inputs_are_named_errors(dg):
    """None for a required input: an ArgumentTypeError (a TypeError) naming
    the op and the input, checked by the kit's None variants."""
    report = check_bad_inputs("Relu", [_r(3)])
    assert report["input 0 as None"].startswith("ArgumentTypeError: Relu"), report
    with pytest.raises(TypeError, match=r"Conv2d: input 'w' \(position 1\) is None"):
        dg.ops.conv2d(dg.tensor(_r(1, 1, 3, 3)), None)


def test_an_extra_input_is_an_arity_error(dg):
    """A None or unconvertible value past the schema's last input is reported
    as too many inputs, not as a bad value of the last named input."""
    from dragon_core import _C
    from dragon_core.errors import InvalidArgumentError
    x = dg.tensor(_r(3))
    for extra in (None, "a"):
        with pytest.raises(InvalidArgumentError,
                           match=r"Relu: expects at most 1 input\(s\), got 2"):
            _C.call(_C.op("Relu"), (x, extra), ())
