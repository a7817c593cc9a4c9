"""Host-side test of the cuda FusedElementwise's per-element evaluation.

``src/fused_eval.h`` (the register machine and the per-instruction ``Eval``
of ``fused.cu``) and the op functors it calls (``src/ops.cuh``, those of the
unfused ``unary.cu``/``binary.cu`` kernels) are plain C++ apart from
``DGC_HD``: here they are compiled with the host compiler and run on
programs using every fusable opcode of the element-wise table, in float32,
float64, float16 and bfloat16 (the 16-bit dtypes with the kernel's rounding
of every instruction's result), and compared with cpu_eigen's
FusedElementwise on the same inputs and program.

On the host both sides call the same C library, so the functions the CPU
computes with libm (Tan .. Erf, Expm1), the division and remainder opcodes
(FloorDivide, Mod, Fmod: exact steps only) and the IEEE-exact ones must give
the CPU's bits, sign of zero and NaN positions included; the opcodes that
cpu_eigen runs through Eigen's vectorised math (Exp, Sin, Tanh, ...) are
compared within a few units in the last place. On a GPU the library is
CUDA's (a few ulp from glibc for the transcendental functions); the GPU
tests in test_cuda_conformance.py compare the device with the CPU there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dragon_core as dg
from _host_cpp import SDK_INCLUDE, run_program

ops = dg.ops
DTYPES = ("float32", "float64", "float16", "bfloat16")

TABLE = [r for r in dg._C.elementwise_table() if r[2] >= 0]  # fusable rows
UNARY = {r[0]: r[2] for r in TABLE if r[1] == "unary"}
BINARY = {r[0]: r[2] for r in TABLE if r[1] == "binary"}
ALPHA = {r[2] for r in TABLE if r[1] == "unary" and r[4] == "alpha"}
LIBM = {r[2] for r in TABLE if r[1] == "unary" and r[5] == "libm"}
# Exact on both sides (IEEE operations, exact steps, or the same libm call).
EXACT = LIBM | {UNARY[k] for k in ("Neg", "Abs", "Sign", "Square", "Reciprocal", "Sqrt", "Relu",
                                   "Floor", "Ceil", "Round", "LeakyRelu")} \
    | {BINARY[k] for k in ("Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "FloorDivide", "Mod",
                           "Fmod")}
# The sign of a zero result is not compared for these: cpu_eigen's
# vectorised forms (Eigen's max/min, max(x, 0) + alpha min(x, 0)) pick the
# other zero of a (-0, +0) tie than its scalar forms and cuda's functors
# do, so the CPU's own sign there depends on the length of the run.
ZERO_SIGN_LOOSE = {UNARY["Relu"], UNARY["LeakyRelu"], BINARY["Maximum"], BINARY["Minimum"]}
NEW = LIBM | {BINARY[k] for k in ("FloorDivide", "Mod", "Fmod")}

UNARY_GRID = [-np.inf, -100.0, -10.0, -3.0, -2.5, -1.5, -1.0, -0.75, -0.5, -1e-3, -0.0, 0.0, 1e-3,
              0.5, 0.75, 1.0, 1.25, 1.5, 2.5, 3.0, 10.0, 100.0, np.inf, np.nan, 1e-30, 7.75]
BINARY_GRID = [-7.5, -3.0, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 5.25, 0.1, -np.inf,
               np.inf, np.nan]


def _in_dtype(arr, dtype):
    """``arr`` rounded to ``dtype``, as float64 NumPy (the values both sides
    read)."""
    t = ops.cast(dg.tensor(np.asarray(arr, np.float64)), dtype=dtype)
    return np.asarray(ops.cast(t, dtype="float64").numpy(), np.float64)


def _cases():
    """(name, dtype, program, constants, result, inputs): inputs are float64
    arrays of one length, holding values of ``dtype``."""
    cases = []
    for dtype in DTYPES:
        x = _in_dtype(UNARY_GRID, dtype)
        for name, code in sorted(UNARY.items()):
            if code in ALPHA:
                cases.append((name, dtype, [code, 2, 0, 1], [0.3], -1, [x]))
            else:
                cases.append((name, dtype, [code, 1, 0, -1], [], -1, [x]))
        pairs = np.array(list(itertools.product(BINARY_GRID, BINARY_GRID))).T
        a, b = _in_dtype(pairs[0], dtype), _in_dtype(pairs[1], dtype)
        for name, code in sorted(BINARY.items()):
            cases.append((name, dtype, [code, 2, 0, 1], [], -1, [a, b]))
        rng = np.random.default_rng(5)
        u = _in_dtype(rng.uniform(-3, 3, 257), dtype)
        v = _in_dtype(np.where(rng.random(257) < 0.5, -1, 1) * rng.uniform(0.25, 4, 257), dtype)
        op = {**UNARY, **BINARY}
        # Registers: 0, 1 inputs; 2, 3 constants; temporaries from 4 (reused).
        chain1 = [op["Tan"], 4, 0, -1, op["Mod"], 5, 4, 3, op["Expm1"], 4, 5, -1,
                  op["FloorDivide"], 5, 4, 1, op["LeakyRelu"], 4, 5, 2, op["Fmod"], 5, 4, 2,
                  op["Mul"], 6, 5, 3]
        cases.append(("chain1", dtype, chain1, [0.3, 2.5], -1, [u, v]))
        chain2 = [op["Erf"], 4, 0, -1, op["Atanh"], 5, 4, -1, op["Asinh"], 6, 1, -1,
                  op["Sub"], 7, 5, 6, op["Mul"], 8, 7, 2, op["Cosh"], 9, 8, -1,
                  op["Acosh"], 10, 9, -1, op["Sinh"], 11, 10, -1, op["Atan"], 12, 11, -1,
                  op["Mul"], 13, 12, 2, op["Asin"], 14, 13, -1, op["Acos"], 15, 13, -1,
                  op["Add"], 16, 14, 15, op["Elu"], 17, 7, 3]
        # An explicit result register that is not the last instruction's.
        cases.append(("chain2", dtype, chain2, [0.3, 1.7], 16, [u, v]))
        cases.append(("chain2-elu", dtype, chain2, [0.3, 1.7], 17, [u, v]))
        chain3 = [op["Expm1"], 4, 0, -1, op["FloorDivide"], 5, 4, 2, op["Mod"], 6, 1, 5,
                  op["Fmod"], 7, 6, 0, op["Erf"], 8, 7, -1, op["Maximum"], 9, 8, 3]
        cases.append(("chain3", dtype, chain3, [-0.75, 0.0], -1, [u, v]))
    return cases


def _literal(v):
    if np.isnan(v):
        return "__builtin_nan(\"\")"
    if np.isinf(v):
        return "__builtin_inf()" if v > 0 else "-__builtin_inf()"
    return float(v).hex()


PROLOGUE = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "fused_eval.h"

using namespace dragon_cuda;

struct Id {
  template <typename A>
  A operator()(A v) const { return v; }
};
// The kernel's Store<half>/Store<bf16> then Load: round to nearest even.
struct F16 {
  float operator()(float v) const { return static_cast<float>(static_cast<_Float16>(v)); }
};
struct BF16 {
  float operator()(float v) const {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      u |= 0x00400000u;  // NaN stays NaN (quiet)
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
    }
    u &= 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  }
};

// Constants as the kernel holds them (fused.cu): an operand rounded to the
// dtype through float (FromDouble), alpha in the arithmetic type.
template <typename A, typename R>
static void RunCase(int id, int n_in, int n_consts, const int* prog, int n_instr, int result,
                    const double* consts, const volatile double* inputs, int n, const R& round) {
  fused::Code<A> c;
  c.num_inputs = n_in;
  c.num_consts = n_consts;
  c.num_instr = n_instr;
  for (int k = 0; k < n_instr; ++k)
    for (int j = 0; j < 4; ++j) c.ins[k][j] = static_cast<int16_t>(prog[4 * k + j]);
  c.result = result >= 0 ? result : prog[4 * (n_instr - 1) + 1];
  for (int k = 0; k < n_consts; ++k) {
    c.consts[k] = round(static_cast<A>(consts[k]));
    c.alphas[k] = static_cast<A>(consts[k]);
  }
  for (int e = 0; e < n; ++e) {
    A reg[fused::kMaxRegs];
    for (int k = 0; k < n_in; ++k) reg[k] = static_cast<A>(inputs[k * n + e]);
    const A y = fused::RunElement(c, reg, round);
    std::printf("%d %a\n", id, static_cast<double>(y));
  }
}
"""


def _program(cases):
    body = []
    for i, (_, dtype, prog, consts, result, inputs) in enumerate(cases):
        n = len(inputs[0])
        flat = np.concatenate(inputs)
        a_type = "double" if dtype == "float64" else "float"
        rnd = {"float32": "Id{}", "float64": "Id{}", "float16": "F16{}",
               "bfloat16": "BF16{}"}[dtype]
        body.append(
            "  {\n"
            f"    static const int prog[] = {{{', '.join(map(str, prog))}}};\n"
            f"    static const double consts[] = {{{', '.join(map(_literal, consts)) or '0'}}};\n"
            f"    static const double in[] = {{{', '.join(map(_literal, flat))}}};\n"
            f"    RunCase<{a_type}>({i}, {len(inputs)}, {len(consts)}, prog, {len(prog) // 4}, "
            f"{result}, consts, in, {n}, {rnd});\n"
            "  }\n")
    return PROLOGUE + "int main() {\n" + "".join(body) + "  std::printf(\"OK\\n\");\n  return 0;\n}\n"


def _cpu(dtype, prog, consts, result, inputs):
    ts = [ops.cast(dg.tensor(np.asarray(a, np.float64)), dtype=dtype) for a in inputs]
    y = ops.fused_elementwise(ts, program=prog, constants=consts, result=result)
    assert str(y.dtype) == dtype
    return np.asarray(ops.cast(y, dtype="float64").numpy(), np.float64)


@pytest.fixture(scope="module")
def host_results(tmp_path_factory):
    cases = _cases()
    out = run_program(tmp_path_factory.mktemp("fused"), "fused_eval", _program(cases),
                      flags=("-O0",), timeout=300, includes=(SDK_INCLUDE,))
    got = [[] for _ in cases]
    for line in out.splitlines()[:-1]:
        i, v = line.split()
        got[int(i)].append(float.fromhex(v))
    return cases, [np.array(g, np.float64) for g in got]


def test_every_fusable_opcode_is_covered():
    """Every fusable row of the table runs alone in a case (so a new row
    without its case in fused_eval.h's Eval, which gives NaN, fails below)."""
    names = {c[0] for c in _cases()}
    assert set(UNARY) | set(BINARY) <= names
    assert NEW == {UNARY[k] for k in ("Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                                      "Acosh", "Atanh", "Erf", "Expm1")} \
        | {BINARY[k] for k in ("FloorDivide", "Mod", "Fmod")}


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_evaluation_matches_cpu_fused(host_results, dtype):
    cases, got = host_results
    ulp = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "float16": 2.0 ** -10,
           "bfloat16": 2.0 ** -7}[dtype]
    checked = 0
    for (name, dt, prog, consts, result, inputs), g in zip(cases, got):
        if dt != dtype:
            continue
        want = _cpu(dtype, prog, consts, result, inputs)
        assert g.shape == want.shape, name
        msg = f"{name} ({dtype}), program {prog}, constants {consts}"
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=msg)
        codes = {prog[k] for k in range(0, len(prog), 4)}
        if codes <= EXACT:
            ok = ~np.isnan(want)
            np.testing.assert_array_equal(g[ok], want[ok], err_msg=msg)
            if not codes & ZERO_SIGN_LOOSE:
                np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(want[ok]),
                                              err_msg=msg)
        else:
            # Eigen's vectorised exp/sin/tanh/... against libm: a few ulp.
            np.testing.assert_allclose(g, want, rtol=8 * ulp, atol=8 * ulp, err_msg=msg)
        checked += 1
    assert checked == len(UNARY) + len(BINARY) + 4


# ------------------------------------------------ unfused division kernels

DIVISION = {"FloorDivide": ("FloorDivideF", ops.floor_divide),
            "TruncDivide": ("TruncDivideF", ops.trunc_divide),
            "Mod": ("ModF", ops.mod), "Fmod": ("FmodF", ops.fmod)}
INT_TYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
             "uint8": "uint8_t"}
FLOAT_TYPES = {"float32": "float", "float64": "double"}


def _division_grid(dtype):
    if dtype in INT_TYPES:
        info = np.iinfo(dtype)
        vals = sorted(v for v in {int(info.min), int(info.min) + 1, -7, -3, -2, -1, 0, 1, 2, 3,
                                  5, 7, int(info.max) - 1, int(info.max)}
                      if info.min <= v <= info.max)
    else:
        vals = BINARY_GRID
    pairs = np.array(list(itertools.product(vals, vals)), dtype=object).T
    return np.asarray(pairs[0].tolist(), dtype), np.asarray(pairs[1].tolist(), dtype)


def _int_literal(v, ctype):
    v = int(v)
    if v == -2**63:
        return f"{ctype}(-9223372036854775807LL - 1)"
    return f"{ctype}({v}LL)"


def _division_program():
    lines = []
    for name, (functor, _) in sorted(DIVISION.items()):
        for dtype, ctype in {**INT_TYPES, **FLOAT_TYPES}.items():
            a, b = _division_grid(dtype)
            if dtype in INT_TYPES:
                lit = [_int_literal(v, ctype) for v in a], [_int_literal(v, ctype) for v in b]
                fmt, cast = '"%lld\\n"', "static_cast<long long>"
            else:
                lit = ([f"{ctype}({_literal(v)})" for v in a],
                       [f"{ctype}({_literal(v)})" for v in b])
                fmt, cast = '"%a\\n"', "static_cast<double>"
            lines.append(
                "  {\n"
                f"    static const {ctype} a[] = {{{', '.join(lit[0])}}};\n"
                f"    static const {ctype} b[] = {{{', '.join(lit[1])}}};\n"
                f"    for (int i = 0; i < {len(a)}; ++i) {{\n"
                f"      const volatile {ctype} x = a[i], y = b[i];\n"
                f"      std::printf({fmt}, {cast}(fn::{functor}{{}}({ctype}(x), {ctype}(y))));\n"
                "    }\n  }\n")
    return ("#include <cstdint>\n#include <cstdio>\n#include \"ops.cuh\"\n"
            "using namespace dragon_cuda;\nint main() {\n" + "".join(lines)
            + "  std::printf(\"OK\\n\");\n  return 0;\n}\n")


def test_division_functors_match_cpu_kernels(tmp_path):
    """The functors of the unfused cuda FloorDivide, TruncDivide, Mod and Fmod
    kernels (ops.cuh), compiled on the host, against the CPU kernels on
    every pair of a grid holding each integer dtype's MIN and MAX, -1 and 0
    (integers never trap: x / 0 is 0 and MIN / -1 wraps) and the float
    specials: the same values, bits and sign of zero included."""
    out = run_program(tmp_path, "division", _division_program(), flags=("-O0",),
                      includes=(SDK_INCLUDE,)).splitlines()[:-1]
    pos = 0
    for name, (_, fn) in sorted(DIVISION.items()):
        for dtype in {**INT_TYPES, **FLOAT_TYPES}:
            a, b = _division_grid(dtype)
            n = len(a)
            lines, pos = out[pos:pos + n], pos + n
            with np.errstate(all="ignore"):
                want = fn(dg.tensor(a), dg.tensor(b)).numpy()
            msg = f"{name} {dtype}"
            if dtype in INT_TYPES:
                got = np.array([int(v) for v in lines], np.int64).astype(dtype)
                np.testing.assert_array_equal(got, want, err_msg=msg)
            else:
                got = np.array([float.fromhex(v) for v in lines], dtype)
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=msg)
                ok = ~np.isnan(want)
                np.testing.assert_array_equal(got[ok], want[ok], err_msg=msg)
                np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]),
                                              err_msg=msg)
    assert pos == len(out)
