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


# ------------------------------------------------- strict attribute types

def test_wrong_typed_attrs_must_raise():
    """The variants of a bool attribute with garbage are marked must-fail;
    values of the right type (False, True) are not."""
    from dragon_sdk.testing.badinputs import wrong_type
    specs = [{"name": "keepdims", "type": 3, "optional": False},
             {"name": "axes", "type": 5, "optional": True}]
    by_label = {v.label: v for v in variants([_r(3)], {}, attr_specs=specs)}
    for value in ("'false'", "nan", "[1]", "-1", "None", "'garbage'"):
        assert by_label[f"attr keepdims={value}"].must_fail == "keepdims", value
    assert by_label["attr keepdims=True"].must_fail == ""
    assert by_label["attr axes=None"].must_fail == ""      # optional
    assert by_label["attr axes=[1]"].must_fail == ""
    assert by_label["attr axes=True"].must_fail == "axes"  # a bool is not an int
    assert by_label["attr axes=-2.5"].must_fail == "axes"
    assert wrong_type(2, True) and not wrong_type(2, 3) and wrong_type(7, 3)


def test_a_lenient_op_fails_the_kit(dg, monkeypatch):
    """A front end that turns garbage into True (bool(keepdims)) fails
    check_bad_inputs, naming each accepted value; the strict core op with
    the same attributes passes."""
    from pathlib import Path
    import os
    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    monkeypatch.setenv("PYTHONPATH", fixtures + os.pathsep + os.environ.get("PYTHONPATH", ""))
    x = _r(3, 4)
    with pytest.raises(AssertionError) as err:
        check_bad_inputs("Sum", [x], function="lenient_wrappers:lenient_sum",
                         axes=[1])
    text = str(err.value)
    for value in ("'false'", "nan", "[1]", "-1", "'garbage'", "1099511627776"):
        assert (f"attr keepdims={value}: accepted a value of the wrong type for "
                f"attribute 'keepdims'") in text, (value, text)
    assert "attr keepdims=True:" not in text
    report = check_bad_inputs("Sum", [x], axes=[1])
    assert report["attr keepdims='false'"].startswith("ArgumentTypeError: Sum: attribute "
                                                      "'keepdims' expects a bool")


@pytest.mark.parametrize("value", ["false", float("nan"), [1], -1, 1, None, np.float64(1.0)])
def test_bool_attr_takes_only_bools(dg, value):
    """Sum(keepdims=...): only True/False (or np.bool_); the error names the
    op, the attribute, the value and what was expected."""
    x = dg.tensor(_r(2, 3))
    with pytest.raises(TypeError, match=r"Sum: attribute 'keepdims' expects a bool") as err:
        dg.ops.sum(x, [1], value)
    if value is not None:
        assert repr(value) in str(err.value) or str(value) in str(err.value)
    assert dg.ops.sum(x, [1], np.bool_(True)).shape == (2, 1)
    assert dg.ops.sum(x, [1], False).shape == (2,)
