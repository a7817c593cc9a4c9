"""Cases and the per-case runner of tests/ops/test_differential_kernels.py.

The parent test process only builds case specs (plain JSON: op family,
dtype, shapes, attributes, seed); a worker process (``_kernel_worker.py``)
runs each spec once per kernel that claims it and reports, for every
kernel and every phase (forward, each gradient), the worst ratio
``|got - ref| / tol`` against a float64 torch reference and the oneDNN
primitives that executed (``ONEDNN_VERBOSE=1``), which is how a case proves
that the kernel it meant to test really ran.

Kernels are forced with plugin pins (``dragon_core.plugins.pin``); a pin
puts its target first but a ``supports()`` predicate that declines still
falls through to the next kernel, hence the oneDNN evidence check.
"""

from __future__ import annotations

import math

import numpy as np

EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7,
       "float16": 2.0**-10}

# oneDNN primitive kinds (as ONEDNN_VERBOSE prints them) per family.
PRIMS = {
    "matmul": ("matmul", "inner_product"),
    "conv": ("convolution", "deconvolution", "matmul"),
    "pool": ("pooling",),
    "bnorm": ("batch_normalization",),
    "lnorm": ("layer_normalization",),
    "softmax": ("softmax",),
    "eltwise": ("eltwise",),
    "none": (),
    "blocked": ("convolution", "pooling"),
}

# Ops of each family that a pin must cover (forward and gradient ops).
FAMILY_OPS = {
    "matmul": ["MatMul"],
    "matmul_bias_act": ["MatMulBiasAct"],
    "conv": ["Conv2d", "ConvTranspose2d", "Conv2dBackpropFilter"],
    "conv_bias_act": ["Conv2dBiasAct"],
    "maxpool": ["MaxPool2d", "MaxPool2dGrad"],
    "avgpool": ["AvgPool2d", "AvgPool2dGrad"],
    "adaptive": ["AdaptiveAvgPool2d", "AdaptiveAvgPool2dGrad"],
    "bnorm": ["BatchNorm", "BatchNormGrad"],
    "lnorm": ["LayerNorm", "LayerNormGrad"],
    "softmax": ["Softmax"],
    "log_softmax": ["LogSoftmax"],
    "eltwise": [],  # the op itself, see _eltwise_op
    # one kernel per dtype (still against float64): cpu_eigen / vision_ops
    "conv3d": ["Conv3d", "ConvTranspose3d", "Conv3dBackpropFilter"],
    "pool3d": ["MaxPool3d", "AvgPool3d", "AvgPool3dGrad"],
    "gnorm": ["GroupNorm", "GroupNormGrad"],
    "grid_sample": ["GridSample", "GridSampleGrad"],
    "interpolate": ["Interpolate", "InterpolateGrad"],
    "deform": ["DeformConv2d"],
    "cast": ["Cast"],
    "blocked": [],  # mkldnn-only ops (layout.cc), nothing to pin
}
SINGLE = {"conv3d": "cpu_eigen", "pool3d": "cpu_eigen", "gnorm": "cpu_eigen",
          "grid_sample": "vision_ops", "interpolate": "vision_ops", "deform": "vision_ops",
          "cast": "cpu_eigen", "blocked": "mkldnn"}

PRIM_OF = {"matmul": "matmul", "matmul_bias_act": "matmul", "conv": "conv",
           "conv_bias_act": "conv", "maxpool": "pool", "avgpool": "pool",
           "adaptive": "pool", "bnorm": "bnorm", "lnorm": "lnorm",
           "softmax": "softmax", "log_softmax": "softmax", "eltwise": "eltwise",
           "conv3d": "conv", "pool3d": "pool", "gnorm": "bnorm", "grid_sample": "conv",
           "interpolate": "pool", "deform": "conv", "cast": "none",
           "blocked": "blocked"}

ELTWISE = ["Sigmoid", "Tanh", "Elu", "Gelu"]


# --------------------------------------------------------------------------
# case generation (parent side: numpy only)
# --------------------------------------------------------------------------

def _mkldnn_claims(spec):
    """mkldnn's supports() as documented in its sources: eltwise ops from a
    size where oneDNN wins (Gelu only exact), BatchNorm without spatial axes."""
    fam = spec["family"]
    if fam == "eltwise":
        numel = int(np.prod(spec["shape"]))
        if spec["op"] in ("Sigmoid", "Tanh"):
            return numel >= 1 << 20
        if spec["op"] == "Gelu" and spec["approximate"] != "none":
            return False
        return numel >= 8192
    if fam == "bnorm":
        return int(np.prod(spec["shape"][2:])) == 1
    if fam in ("softmax", "log_softmax"):
        # oneDNN's softmax: along the last non-trivial axis only
        shape, axis = spec["shape"], spec["axis"] % len(spec["shape"])
        return int(np.prod(shape[axis + 1:])) == 1
    if fam == "adaptive":
        return spec["h"] % spec["out"][0] == 0 and spec["w"] % spec["out"][1] == 0
    if fam == "avgpool" and spec["count_include_pad"]:
        # a ceil_mode window past the padding is not oneDNN's include-padding
        for a, size in enumerate((spec["h"], spec["w"])):
            k, st, p = spec["kernel"][a], spec["strides"][a], spec["pads"][a]
            out = _pool_out(size, k, st, p, 1, spec["ceil_mode"])
            if (out - 1) * st + k - size - p > p:
                return False
    return True


def conv_gemm_expected(spec, phase, worker):
    """Whether mkldnn's conv-as-GEMM path (conv_gemm.cc) serves a phase:
    float32, one group, no dilation, no bias (forward), a filter over 1 x 1,
    an output map (of the product's window side) of at most 4 pixels, the
    default layout, DRAGON_MKLDNN_CONV_GEMM not 0."""
    if worker != "default" or spec["dtype"] != "float32" or spec["groups"] != 1:
        return False
    if spec["dilations"] != [1, 1] or spec["kh"] * spec["kw"] <= 1:
        return False
    if phase == "fwd" and (spec["bias"] or spec["family"] == "conv_bias_act"):
        return False
    if spec["transpose"]:
        window = (spec["h"], spec["w"])  # a deconvolution's window is its input
    else:
        window = tuple(_conv_out(size, k, st, p, p, d) for size, k, st, p, d in zip(
            (spec["h"], spec["w"]), (spec["kh"], spec["kw"]), spec["strides"],
            spec["pads"], spec["dilations"]))
    return window[0] * window[1] <= 4


def _round_once_bf16(x, approx):
    """float64 -> bfloat16 rounded once (ml_dtypes and torch go through
    float32 and round twice: -0x1.4effff17db30ap-98 gives 0x1.50p-98 there,
    0x1.4ep-98 is the nearest). Picks the nearest of the bfloat16 neighbours
    of ``approx`` (ties to the even one); x - candidate is exact in float64."""
    import ml_dtypes

    bits = approx.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int64)
    best, best_d = approx.copy(), np.full(x.shape, np.inf)
    for step in (0, -1, 1):
        b = np.clip(bits + step, 0, 0xFFFF).astype(np.uint16)
        with np.errstate(invalid="ignore"):
            cand = b.view(ml_dtypes.bfloat16).astype(np.float64)
            d = np.abs(x - cand)
        even = (b & 1) == 0
        take = (d < best_d) | ((d == best_d) & even)
        take &= np.isfinite(cand) & (np.sign(cand) == np.sign(x)) | (cand == 0)
        best = np.where(take, cand, best)
        best_d = np.where(take, d, best_d)
    return np.where(np.isfinite(x) & np.isfinite(approx), best, approx)


def _pool_out(size, k, s, p, d, ceil):
    """torch's pooled length (a last window must start inside the input)."""
    num = size + 2 * p - d * (k - 1) - 1
    out = (num + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _configs(spec):
    """(name, pin target, expects oneDNN) for each kernel claiming the call."""
    family, dtype = spec["family"], spec["dtype"]
    if family in SINGLE:
        return [(SINGLE[family], SINGLE[family], SINGLE[family] == "mkldnn")]
    ops = FAMILY_OPS[family] or [spec["op"]]
    out = []
    if dtype in ("float32", "bfloat16") and _mkldnn_claims(spec):
        if not (family in ("bnorm", "lnorm") and dtype == "bfloat16"):
            out.append(("mkldnn", "mkldnn", True))
    if family in ("matmul", "matmul_bias_act") and dtype == "bfloat16":
        out.append(("avx512bf16", ops[0] + "Bf16Avx512", False))
        if family == "matmul":
            out.append(("eigen_half", "HalfMatMul<bfloat16>", False))
    else:
        out.append(("cpu_eigen", "cpu_eigen", False))
    return out


def _dt(rng, dtypes):
    return dtypes[int(rng.integers(len(dtypes)))]


def _matmul_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "bfloat16", "float16", "float64"])
    m, k, n = (int(rng.choice([1, 2, 3, 5, 8, 16, 17, 31, 33, 64])) for _ in range(3))
    big = rng.random() < 0.12
    if big:  # past the register tiles (6 x 64) and the k chunk (2048)
        m, n = int(rng.choice([7, 13, 70])), int(rng.choice([65, 130, 200]))
        k = int(rng.choice([300, 2049, 4100]))
    batch_a, batch_b = [], []
    r = rng.random() if not big else 1.0
    if r < 0.35:
        b = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, 3)))]
        batch_a = list(b)
        batch_b = [1 if rng.random() < 0.3 else x for x in b]
        if rng.random() < 0.3:
            batch_b = batch_b[1:]
    elif r < 0.5:
        batch_b = [int(rng.integers(2, 4))]
    spec = dict(family="matmul", dtype=dtype, m=m, k=k, n=n, batch_a=batch_a,
                batch_b=batch_b, ta=bool(rng.random() < 0.3), tb=bool(rng.random() < 0.3),
                view_a=bool(rng.random() < 0.25), view_b=bool(rng.random() < 0.25),
                out_dtype=None, grad=bool(rng.random() < 0.6))
    if dtype in ("bfloat16", "float16") and rng.random() < 0.3:
        spec["out_dtype"] = "float32"
        spec["grad"] = False
    if rng.random() < 0.25 and dtype != "float16":
        spec["family"] = "matmul_bias_act"
        spec["act"] = str(rng.choice(["relu", "none"]))
        spec["bias"] = bool(rng.random() < 0.7)
        spec["grad"] = False
        # a float32 result (and bias) of bfloat16 operands: autocast's products
        spec["out_dtype"] = "float32" if dtype == "bfloat16" and rng.random() < 0.3 else None
        spec["batch_a"] = spec["batch_a"][:1] if rng.random() < 0.5 else []
        spec["batch_b"] = []
    return spec


def _conv_out(h, k, s, p0, p1, d):
    return (h + p0 + p1 - d * (k - 1) - 1) // s + 1


def _conv_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "float16", "float64"])
    while True:
        g = int(rng.choice([1, 1, 1, 2, 3]))
        cin = g * int(rng.integers(1, 5))
        cout = g * int(rng.integers(1, 5))
        if rng.random() < 0.15:  # depthwise
            cin = cout = g = int(rng.integers(2, 9))
        n = int(rng.integers(1, 4))
        h, w = int(rng.integers(3, 13)), int(rng.integers(3, 13))
        if rng.random() < 0.3:  # tiny output maps: mkldnn's conv-as-GEMM path
            h, w = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        s = [int(rng.integers(1, 3)), int(rng.integers(1, 4))]
        d = [int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))]
        p = [int(rng.integers(0, 3)) for _ in range(2)]
        if rng.random() < 0.1:  # filter taps that read only padding
            w, kw, p[1], d[1] = int(rng.integers(1, 3)), 3, 2, 1
        if rng.random() < 0.1:  # wide channels: oneDNN's blocked kernels
            cin, cout, g = int(rng.choice([16, 17, 33])), int(rng.choice([16, 32, 19])), 1
        oh = _conv_out(h, kh, s[0], p[0], p[0], d[0])
        ow = _conv_out(w, kw, s[1], p[1], p[1], d[1])
        if oh >= 1 and ow >= 1 and p[0] < d[0] * (kh - 1) + 1 and p[1] < d[1] * (kw - 1) + 1:
            break
    spec = dict(family="conv", dtype=dtype, n=n, cin=cin, cout=cout, h=h, w=w, kh=kh,
                kw=kw, strides=s, dilations=d, pads=p, groups=g,
                bias=bool(rng.random() < 0.5), cl=bool(rng.random() < 0.3),
                transpose=bool(rng.random() < 0.25), grad=bool(rng.random() < 0.7))
    # Operands stored in another axis order, read through a permuted view
    # (mkldnn's kernels read strides): x, w and the incoming gradient.
    for key in ("x_perm", "w_perm", "g_perm"):
        spec[key] = [int(a) for a in rng.permutation(4)] if rng.random() < 0.25 else None
    if spec["cl"]:
        spec["x_perm"] = None
    if spec["transpose"]:
        # ConvTranspose2d: weight [cin, cout/g, kh, kw]; output_padding < stride.
        spec["output_padding"] = [int(rng.integers(0, max(s[0], d[0]))) if s[0] > 1 else 0,
                                  int(rng.integers(0, max(s[1], d[1]))) if s[1] > 1 else 0]
        spec["output_padding"] = [min(op, max(s[i], d[i]) - 1) for i, op in
                                  enumerate(spec["output_padding"])]
        outs = [(size - 1) * s[i] - 2 * p[i] + d[i] * (k - 1) + spec["output_padding"][i] + 1
                for i, (size, k) in enumerate(((h, kh), (w, kw)))]
        if min(outs) < 1:  # not a valid deconvolution: a plain one
            spec["transpose"] = False
            del spec["output_padding"]
    elif rng.random() < 0.2:
        spec["family"] = "conv_bias_act"
        spec["bias"] = True
        spec["grad"] = False
    return spec


def _pool_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "float16", "float64"])
    fam = str(rng.choice(["maxpool", "maxpool", "avgpool", "avgpool", "adaptive"]))
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    h, w = int(rng.integers(2, 12)), int(rng.integers(2, 12))
    spec = dict(family=fam, dtype=dtype, n=n, c=c, h=h, w=w, cl=bool(rng.random() < 0.3),
                grad=bool(rng.random() < 0.7))
    if fam == "adaptive":
        spec["out"] = [int(rng.integers(1, h + 2)), int(rng.integers(1, w + 2))]
        if rng.random() < 0.5:  # uniform windows (oneDNN's case)
            spec["out"] = [int(rng.choice([o for o in range(1, h + 1) if h % o == 0])),
                           int(rng.choice([o for o in range(1, w + 1) if w % o == 0]))]
        return spec
    while True:
        k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        s = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        d = [int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))] if fam == "maxpool" else [1, 1]
        p = [int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1))]
        ceil = bool(rng.random() < 0.4)
        ok = True
        for i, size in enumerate((h, w)):
            eff = d[i] * (k[i] - 1) + 1
            num = size + 2 * p[i] - eff
            if num < 0:
                ok = False
                break
        if ok:
            break
    spec.update(kernel=k, strides=s, dilations=d, pads=p, ceil_mode=ceil)
    if fam == "avgpool":
        spec["count_include_pad"] = bool(rng.random() < 0.5)
    return spec


def _norm_case(rng):
    fam = str(rng.choice(["bnorm", "lnorm"]))
    dtype = _dt(rng, ["float32", "float32", "float32", "bfloat16", "float64"])
    if fam == "bnorm":
        shape = [int(rng.integers(1, 9)), int(rng.integers(1, 17))] + \
            [int(rng.integers(1, 7)) for _ in range(int(rng.choice([0, 0, 1, 2])))]
        return dict(family=fam, dtype=dtype, shape=shape, training=bool(rng.random() < 0.7),
                    grad=True, cl=len(shape) == 4 and bool(rng.random() < 0.3))
    shape = [int(rng.integers(1, 5)) for _ in range(int(rng.integers(1, 3)))] + \
        [int(rng.choice([1, 3, 7, 16, 33, 64, 100, 1000, 4099]))]
    return dict(family=fam, dtype=dtype, shape=shape, axis=-1, grad=True)


def _softmax_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "bfloat16", "float16", "float64"])
    nd = int(rng.integers(1, 4))
    shape = [int(rng.choice([1, 2, 3, 5, 16, 17, 33, 100])) for _ in range(nd)]
    axis = int(rng.integers(-nd, nd)) if rng.random() < 0.5 else -1
    return dict(family=str(rng.choice(["softmax", "log_softmax"])), dtype=dtype, shape=shape,
                axis=axis, view=bool(nd >= 2 and rng.random() < 0.25),
                scale=float(rng.choice([1.0, 5.0, 30.0])), grad=bool(rng.random() < 0.6))


def _eltwise_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "bfloat16", "float16", "float64"])
    op = str(rng.choice(ELTWISE))
    shape = [int(rng.choice([1, 3, 7, 16, 33, 129])) for _ in range(int(rng.integers(1, 3)))]
    r = rng.random()
    if op in ("Elu", "Gelu") and r < 0.6:  # oneDNN's from 8192 elements
        shape = [int(rng.integers(64, 96)), int(rng.integers(128, 200))]
    elif r < 0.15:  # Sigmoid/Tanh: oneDNN's from 2^20 elements
        shape = [1024, int(rng.integers(1024, 1100))]
    return dict(family="eltwise", op=op, dtype=dtype, shape=shape,
                alpha=float(rng.choice([1.0, 0.5, 2.0])),
                approximate=str(rng.choice(["none", "tanh"])),
                view=bool(len(shape) == 2 and rng.random() < 0.25),
                scale=float(rng.choice([1.0, 4.0, 12.0])), grad=bool(rng.random() < 0.6))


def _conv3d_case(rng):
    dtype = _dt(rng, ["float32", "float32", "bfloat16", "float16", "float64"])
    while True:
        g = int(rng.choice([1, 1, 2]))
        cin, cout = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 4))
        size = [int(rng.integers(1, 7)) for _ in range(3)]
        k = [int(rng.integers(1, 4)) for _ in range(3)]
        st = [int(rng.integers(1, 3)) for _ in range(3)]
        d = [int(rng.choice([1, 1, 2])) for _ in range(3)]
        p = [int(rng.integers(0, 2)) for _ in range(3)]
        tr = bool(rng.random() < 0.3)
        # (ConvTranspose3d takes output_padding < stride only; torch allows
        # < max(stride, dilation), as ConvTranspose2d does here)
        op = [int(rng.integers(0, st[i])) for i in range(3)] if tr else [0, 0, 0]
        if tr:
            outs = [(size[i] - 1) * st[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1
                    for i in range(3)]
        else:
            outs = [_conv_out(size[i], k[i], st[i], p[i], p[i], d[i]) for i in range(3)]
        if min(outs) >= 1:
            break
    return dict(family="conv3d", dtype=dtype, n=int(rng.integers(1, 3)), cin=cin, cout=cout,
                size=size, k=k, strides=st, dilations=d, pads=p, groups=g, transpose=tr,
                output_padding=op, bias=bool(rng.random() < 0.5),
                cl=bool(rng.random() < 0.3), grad=bool(rng.random() < 0.6))


def _pool3d_case(rng):
    dtype = _dt(rng, ["float32", "bfloat16", "float16", "float64"])
    mx = bool(rng.random() < 0.5)
    while True:
        size = [int(rng.integers(2, 8)) for _ in range(3)]
        k = [int(rng.integers(1, 4)) for _ in range(3)]
        st = [int(rng.integers(1, 3)) for _ in range(3)]
        d = [int(rng.choice([1, 1, 2])) for _ in range(3)] if mx else [1, 1, 1]
        p = [int(rng.integers(0, k[i] // 2 + 1)) for i in range(3)]
        if all(size[i] + 2 * p[i] >= d[i] * (k[i] - 1) + 1 and (mx or size[i] >= k[i])
               for i in range(3)):  # (torch's avg_pool3d wants the kernel inside)
            break
    return dict(family="pool3d", dtype=dtype, max=mx, n=int(rng.integers(1, 3)),
                c=int(rng.integers(1, 4)), size=size, kernel=k, strides=st, dilations=d,
                pads=p, ceil_mode=bool(rng.random() < 0.4),
                count_include_pad=bool(rng.random() < 0.5), cl=bool(rng.random() < 0.3),
                grad=bool(rng.random() < 0.6))


def _vision_case(rng):
    fam = str(rng.choice(["gnorm", "grid_sample", "interpolate", "deform"]))
    if fam == "gnorm":
        g = int(rng.integers(1, 5))
        shape = [int(rng.integers(1, 4)), g * int(rng.integers(1, 4))] + \
            [int(rng.integers(2, 6)) for _ in range(int(rng.integers(1, 3)))]
        return dict(family=fam, dtype=_dt(rng, ["float32", "bfloat16", "float16", "float64"]),
                    shape=shape, groups=g, grad=True)
    dtype = _dt(rng, ["float32", "float32", "float64"])
    n, c, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 9)), \
        int(rng.integers(1, 9))
    if fam == "grid_sample":
        return dict(family=fam, dtype=dtype, n=n, c=c, h=h, w=w, ho=int(rng.integers(1, 6)),
                    wo=int(rng.integers(1, 6)),
                    mode=str(rng.choice(["bilinear", "nearest", "bicubic"])),
                    padding_mode=str(rng.choice(["zeros", "border", "reflection"])),
                    align_corners=bool(rng.random() < 0.5), grad=bool(rng.random() < 0.6))
    if fam == "interpolate":
        mode = str(rng.choice(["nearest", "bilinear", "bicubic"]))
        return dict(family=fam, dtype=dtype, n=n, c=c, h=h, w=w,
                    size=[int(rng.integers(1, 13)), int(rng.integers(1, 13))], mode=mode,
                    align_corners=bool(rng.random() < 0.5) if mode != "nearest" else None,
                    grad=bool(rng.random() < 0.6))
    g = int(rng.choice([1, 1, 2]))
    while True:
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        st = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        d = [int(rng.choice([1, 2])), int(rng.choice([1, 2]))]
        p = [int(rng.integers(0, 2)), int(rng.integers(0, 2))]
        if _conv_out(h, kh, st[0], p[0], p[0], d[0]) >= 1 and \
                _conv_out(w, kw, st[1], p[1], p[1], d[1]) >= 1:
            break
    return dict(family=fam, dtype=dtype, n=n, cin=g * c, cout=g * int(rng.integers(1, 4)),
                h=h, w=w, kh=kh, kw=kw, strides=st, dilations=d, pads=p, groups=g,
                offsets=str(rng.choice(["zero", "integer"])), mask=bool(rng.random() < 0.5),
                grad=False)


def _cast_case(rng):
    src, dst = [("float32", "bfloat16"), ("bfloat16", "float32"), ("float32", "float16"),
                ("float16", "float32"), ("float64", "bfloat16"), ("float64", "float16"),
                ("bfloat16", "float16"), ("float16", "bfloat16"),
                ("float64", "float32")][int(rng.integers(9))]
    n = int(rng.choice([1, 7, 16, 33, 257, 4099, 70000]))
    return dict(family="cast", dtype=src, dst=dst, n=n, view=bool(rng.random() < 0.25),
                grad=False)


def _blocked_case(rng):
    """The mkldnn nchw16c chain: a plain first layer (C < 16) or a blocked
    input, Conv2dNchw16c (+ bias, relu), MaxPool2dNchw16c, back to plain."""
    first = bool(rng.random() < 0.4)
    while True:
        c = int(rng.integers(1, 16)) if first else 16 * int(rng.integers(1, 3))
        o = 16 * int(rng.integers(1, 3))
        h, w = int(rng.integers(3, 12)), int(rng.integers(3, 12))
        k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        st = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        d = [int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))]
        p = [int(rng.integers(0, 2)), int(rng.integers(0, 2))]
        oh = _conv_out(h, k[0], st[0], p[0], p[0], d[0])
        ow = _conv_out(w, k[1], st[1], p[1], p[1], d[1])
        pk = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        pp = [int(rng.integers(0, pk[0] // 2 + 1)), int(rng.integers(0, pk[1] // 2 + 1))]
        if min(oh, ow) >= 1 and oh + 2 * pp[0] >= pk[0] and ow + 2 * pp[1] >= pk[1]:
            break
    return dict(family="blocked", dtype="float32", first=first, n=int(rng.integers(1, 3)),
                c=c, o=o, h=h, w=w, k=k, strides=st, dilations=d, pads=p,
                bias=bool(rng.random() < 0.6), act=str(rng.choice(["none", "relu"])),
                pool_k=pk, pool_s=[int(rng.integers(1, 3)), int(rng.integers(1, 3))],
                pool_p=pp, ceil_mode=bool(rng.random() < 0.4), grad=False)


GENERATORS = {"matmul": (_matmul_case, 70), "conv": (_conv_case, 70),
              "pool": (_pool_case, 60), "norm": (_norm_case, 30),
              "softmax": (_softmax_case, 30), "eltwise": (_eltwise_case, 40),
              "conv3d": (_conv3d_case, 25), "pool3d": (_pool3d_case, 20),
              "vision": (_vision_case, 40), "cast": (_cast_case, 16),
              "blocked": (_blocked_case, 12)}


def make_cases(offset: int = 0):
    """The seeded specs: GENERATORS[group][1] cases per group."""
    cases = []
    for gi, (group, (gen, count)) in enumerate(sorted(GENERATORS.items())):
        for i in range(count):
            seed = (offset * 1_000_003 + gi * 10_007 + i) & 0x7FFFFFFF
            rng = np.random.default_rng(seed)
            spec = gen(rng)
            spec["seed"] = seed
            spec["id"] = f"{group}-{offset}-{i}-{spec['family']}-{spec['dtype']}"
            spec["configs"] = _configs(spec)
            cases.append(spec)
    return cases


# --------------------------------------------------------------------------
# running (worker side)
# --------------------------------------------------------------------------

def _np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def _rand(rng, dtype, shape, scale=1.0):
    """Values representable in ``dtype``; returned as float64 and the dtype."""
    x = (rng.standard_normal(shape) * scale).astype(_np_dtype(dtype))
    return x.astype(np.float64), x


class Runner:
    """Runs one spec with one kernel config; built once per worker."""

    def __init__(self, dc, torch, verbose_log):
        self.dc = dc
        self.torch = torch
        self.log = verbose_log  # callable: () -> list of oneDNN prim kinds since last call
        import os
        self.poison = os.environ.get("DRAGON_FUZZ_POISON", "1") != "0"

    # -- helpers ------------------------------------------------------------
    def _t(self, x, view_perm=None, cl=False, requires_grad=False):
        dc = self.dc
        if view_perm is not None:
            inv = np.argsort(view_perm)
            base = dc.tensor(np.ascontiguousarray(np.transpose(x, inv)))
            t = base.permute(*[int(p) for p in view_perm])
        else:
            t = dc.tensor(np.ascontiguousarray(x))
        if cl:
            t = t.to(memory_format=dc.channels_last if x.ndim == 4 else dc.channels_last_3d)
        if requires_grad:
            t.requires_grad = True
        return t

    def _np(self, t):
        return np.asarray(t.numpy()).astype(np.float64)

    def _pins(self, spec, target):
        dc = self.dc
        ops = FAMILY_OPS[spec["family"]] or [spec.get("op")]
        pinned = []
        if ops == [None]:
            return pinned
        for op in ops:
            dtypes = set()
            for k in dc.plugins.kernels(op):
                if k["device"] == "cpu" and (k["plugin"] == target or k["name"] == target):
                    dtypes.update(s.strip() for s in k["dtypes"].split(","))
            if spec["dtype"] in dtypes:
                dc.plugins.pin(op, "cpu", target)
                pinned.append(op)
        return pinned

    def _unpin(self, pinned):
        for op in pinned:
            self.dc.plugins.unpin(op, "cpu")

    def _poison(self):
        """Leave huge values in the core's workspace and freed blocks, so a
        kernel that reads memory it never wrote shows it (DRAGON_FUZZ_POISON=0
        skips): cpu_eigen's float16 convolution widens its operands there."""
        dc = self.dc
        if not hasattr(self, "_junk"):
            self._junk = (dc.tensor(np.full((1, 16, 24, 24), 6.0e4, np.float16)),
                          dc.tensor(np.full((16, 16, 3, 3), 6.0e4, np.float16)))
        x, w = self._junk
        dc.ops.conv2d(x, w, None, pads=(1, 1))
        for n in (64, 1024, 16384):
            dc.tensor(np.full(n, -1.0e30, np.float32))

    # -- main ---------------------------------------------------------------
    def run(self, spec):
        """{config: {phase: {"ratio", "where", "prims", "error"}}}."""
        out = {}
        fn = getattr(self, "_case_" + spec["family"])
        for name, target, _ in spec["configs"]:
            pinned = []
            if self.poison:
                self._poison()
            try:
                pinned = self._pins(spec, target)
                phases = {}
                rng = np.random.default_rng(spec["seed"])
                fn(spec, rng, phases)
            except Exception as e:  # reported, the test fails on it
                phases = {"error": {"error": f"{type(e).__name__}: {e}"}}
            finally:
                self._unpin(pinned)
            out[name] = phases
        return out

    def _phase(self, phases, name, run, ref, tol):
        """Run ``run()`` (returns a dragon tensor), compare with ``ref``."""
        self.log()
        try:
            got = self._np(run())
        except Exception as e:
            phases[name] = {"error": f"{type(e).__name__}: {e}", "prims": self.log()}
            return
        prims = self.log()
        ref = np.asarray(ref, np.float64)
        tol = np.broadcast_to(np.asarray(tol, np.float64), ref.shape)
        if got.shape != ref.shape:
            phases[name] = {"error": f"shape {got.shape} != reference {ref.shape}",
                            "prims": prims}
            return
        both_nan = np.isnan(got) & np.isnan(ref)
        err = np.where(both_nan, 0.0, np.abs(got - ref))
        err = np.where(np.isnan(err), np.inf, err)
        ratio = err / np.maximum(tol, 1e-300)
        worst = float(ratio.max()) if ratio.size else 0.0
        where = None
        if ratio.size:
            i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
            where = [list(map(int, i)), float(got[i]), float(ref[i]), float(tol[i])]
        phases[name] = {"ratio": worst, "where": where, "prims": prims}

    # Tolerance of a product-like result: |ref| rounding of the output plus
    # accumulation error against sum |a||b| (``absb``) over ``k`` terms.
    @staticmethod
    def _tol_prod(ref, absb, k, dtype, out_dtype=None):
        e_out = EPS[out_dtype or dtype]
        e_acc = max(EPS[dtype], EPS["float32"]) if dtype != "float64" else EPS["float64"]
        if out_dtype is None and dtype in ("bfloat16", "float16"):
            e_acc = EPS[dtype]  # partial results may be rounded to the dtype
        tiny = 2.0**-24 if (out_dtype or dtype) == "float16" else 2.0**-125  # subnormals
        return 2 * e_out * np.abs(ref) + (4 + 2 * math.sqrt(k)) * e_acc * absb + tiny

    # -- families -----------------------------------------------------------
    def _case_matmul(self, spec, rng, phases, bias_act=False):
        torch, dc = self.torch, self.dc
        dt, m, k, n = spec["dtype"], spec["m"], spec["k"], spec["n"]
        sa = spec["batch_a"] + ([k, m] if spec["ta"] else [m, k])
        sb = spec["batch_b"] + ([n, k] if spec["tb"] else [k, n])
        a64, a = _rand(rng, dt, sa)
        b64, b = _rand(rng, dt, sb)

        def perm(nd, on):
            if not on:
                return None
            p = list(range(nd))
            p[-1], p[-2] = p[-2], p[-1]
            return p

        # A "view" operand is the transposed view of a contiguous tensor.
        ta = self._t(a, perm(a.ndim, spec["view_a"]), requires_grad=spec["grad"])
        tb = self._t(b, perm(b.ndim, spec["view_b"]), requires_grad=spec["grad"])
        A = torch.from_numpy(a64).requires_grad_(True)
        B = torch.from_numpy(b64).requires_grad_(True)
        opA = A.transpose(-1, -2) if spec["ta"] else A
        opB = B.transpose(-1, -2) if spec["tb"] else B
        absA, absB = opA.detach().abs(), opB.detach().abs()
        ref = opA @ opB
        absb = absA @ absB
        odt = spec.get("out_dtype")
        if bias_act:
            bias64 = None
            if spec["bias"]:
                bias64, bias = _rand(rng, odt or dt, [n])
                tbias = self._t(bias)
                ref = ref + torch.from_numpy(bias64)
                absb = absb + torch.from_numpy(np.abs(bias64))
            if spec["act"] == "relu":
                ref = torch.relu(ref)
            fwd = lambda: dc.ops.matmul_bias_act(ta, tb, tbias if spec["bias"] else None,
                                                 transpose_a=spec["ta"], transpose_b=spec["tb"],
                                                 activation=spec["act"], out_dtype=odt)
        else:
            fwd = lambda: dc.ops.matmul(ta, tb, transpose_a=spec["ta"], transpose_b=spec["tb"],
                                        out_dtype=odt)
        tol = self._tol_prod(ref.detach().numpy(), absb.numpy(), k, dt, odt)
        self._phase(phases, "fwd", fwd, ref.detach().numpy(), tol)
        if not spec["grad"]:
            return
        g64, g = _rand(rng, dt, list(ref.shape))
        G = torch.from_numpy(g64)
        gA, gB = torch.autograd.grad(ref, [A, B], G)
        absg = G.abs()
        # bounds: the same products on absolute values
        A1 = A.detach().abs().requires_grad_(True)
        B1 = B.detach().abs().requires_grad_(True)
        o1 = (A1.transpose(-1, -2) if spec["ta"] else A1) @ \
            (B1.transpose(-1, -2) if spec["tb"] else B1)
        bgA, bgB = torch.autograd.grad(o1, [A1, B1], absg)
        tg = self._t(g)
        out = fwd()
        gk_a = n * max(1, int(np.prod(ref.shape[:-2])) // max(1, int(np.prod(sa[:-2]))))
        gk_b = m * max(1, int(np.prod(ref.shape[:-2])) // max(1, int(np.prod(sb[:-2]))))
        self._phase(phases, "grad_a", lambda: dc.grad([out], [ta], [tg])[0], gA.numpy(),
                    self._tol_prod(gA.numpy(), bgA.numpy(), gk_a, dt))
        out = fwd()
        self._phase(phases, "grad_b", lambda: dc.grad([out], [tb], [tg])[0], gB.numpy(),
                    self._tol_prod(gB.numpy(), bgB.numpy(), gk_b, dt))

    def _case_matmul_bias_act(self, spec, rng, phases):
        self._case_matmul(spec, rng, phases, bias_act=True)

    def _case_conv(self, spec, rng, phases, bias_act=False):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, g = spec["dtype"], spec["groups"]
        tr = spec["transpose"]
        xs = [spec["n"], spec["cin"], spec["h"], spec["w"]]
        ws = ([spec["cin"], spec["cout"] // g] if tr else [spec["cout"], spec["cin"] // g]) + \
            [spec["kh"], spec["kw"]]
        x64, x = _rand(rng, dt, xs)
        w64, w = _rand(rng, dt, ws)
        b64, b = _rand(rng, dt, [spec["cout"]])
        tx = self._t(x, spec.get("x_perm"), cl=spec["cl"], requires_grad=spec["grad"])
        tw = self._t(w, spec.get("w_perm"), requires_grad=spec["grad"])
        tbias = self._t(b) if spec["bias"] else None
        kw = dict(stride=spec["strides"], padding=spec["pads"], dilation=spec["dilations"],
                  groups=g)
        if tr:
            kw["output_padding"] = spec["output_padding"]

        def tfn(X, W, Bb):
            return (F.conv_transpose2d if tr else F.conv2d)(X, W, Bb, **kw)

        X = torch.from_numpy(x64).requires_grad_(True)
        W = torch.from_numpy(w64).requires_grad_(True)
        Bt = torch.from_numpy(b64) if spec["bias"] else None
        ref = tfn(X, W, Bt)
        X1 = X.detach().abs().requires_grad_(True)
        W1 = W.detach().abs().requires_grad_(True)
        absb = tfn(X1, W1, Bt.abs() if Bt is not None else None)
        ksum = (spec["cin"] // g) * spec["kh"] * spec["kw"]
        attrs = dict(strides=tuple(spec["strides"]), pads=tuple(spec["pads"]),
                     dilations=tuple(spec["dilations"]), groups=g)
        if bias_act:
            ref = torch.relu(ref)
            fwd = lambda: dc.ops.conv2d_bias_act(tx, tw, tbias, activation="relu", **attrs)
        elif tr:
            fwd = lambda: dc.ops.conv_transpose2d(
                tx, tw, tbias, output_padding=tuple(spec["output_padding"]), **attrs)
        else:
            fwd = lambda: dc.ops.conv2d(tx, tw, tbias, **attrs)
        refn = ref.detach().numpy()
        self._phase(phases, "fwd", fwd, refn, self._tol_prod(refn, absb.detach().numpy(), ksum, dt))
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        G = torch.from_numpy(g64)
        gX, gW = torch.autograd.grad(ref, [X, W], G)
        bX, bW = torch.autograd.grad(absb, [X1, W1], G.abs())
        tg = self._t(gy, spec.get("g_perm"))
        out = fwd()
        ohw = int(np.prod(ref.shape[2:])) * spec["n"]
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], gX.numpy(),
                    self._tol_prod(gX.numpy(), bX.numpy(), ksum * spec["cout"], dt))
        out = fwd()
        self._phase(phases, "grad_w", lambda: dc.grad([out], [tw], [tg])[0], gW.numpy(),
                    self._tol_prod(gW.numpy(), bW.numpy(), ohw, dt))

    def _case_conv_bias_act(self, spec, rng, phases):
        self._case_conv(spec, rng, phases, bias_act=True)

    def _pool_common(self, spec, rng, phases, tfn, dfn, ksum):
        torch, dc = self.torch, self.dc
        dt = spec["dtype"]
        x64, x = _rand(rng, dt, [spec["n"], spec["c"], spec["h"], spec["w"]])
        tx = self._t(x, cl=spec["cl"], requires_grad=spec["grad"])
        X = torch.from_numpy(x64).requires_grad_(True)
        ref = tfn(X)
        refn = ref.detach().numpy()
        e = EPS[dt]
        tol = 2 * e * np.abs(refn) + 4 * e * np.abs(x64).max()
        self._phase(phases, "fwd", lambda: dfn(tx), refn, tol)
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = dfn(tx)
        tolg = (2 * e * np.abs(gX.numpy()) + (4 + ksum) * e * np.abs(g64).max())
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], gX.numpy(), tolg)

    def _case_maxpool(self, spec, rng, phases):
        F, dc = self.torch.nn.functional, self.dc
        a = dict(kernel_size=spec["kernel"], stride=spec["strides"], padding=spec["pads"],
                 dilation=spec["dilations"], ceil_mode=spec["ceil_mode"])
        self._pool_common(
            spec, rng, phases, lambda X: F.max_pool2d(X, **a),
            lambda t: dc.ops.max_pool2d(t, tuple(spec["kernel"]), tuple(spec["strides"]),
                                        tuple(spec["pads"]), tuple(spec["dilations"]),
                                        spec["ceil_mode"]),
            spec["kernel"][0] * spec["kernel"][1])

    def _case_avgpool(self, spec, rng, phases):
        F, dc = self.torch.nn.functional, self.dc
        a = dict(kernel_size=spec["kernel"], stride=spec["strides"], padding=spec["pads"],
                 ceil_mode=spec["ceil_mode"], count_include_pad=spec["count_include_pad"])
        self._pool_common(
            spec, rng, phases, lambda X: F.avg_pool2d(X, **a),
            lambda t: dc.ops.avg_pool2d(t, tuple(spec["kernel"]), tuple(spec["strides"]),
                                        tuple(spec["pads"]), spec["ceil_mode"],
                                        spec["count_include_pad"]),
            spec["kernel"][0] * spec["kernel"][1])

    def _case_adaptive(self, spec, rng, phases):
        F, dc = self.torch.nn.functional, self.dc
        self._pool_common(spec, rng, phases,
                          lambda X: F.adaptive_avg_pool2d(X, spec["out"]),
                          lambda t: dc.ops.adaptive_avg_pool2d(t, tuple(spec["out"])),
                          spec["h"] * spec["w"])

    def _case_bnorm(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, shape = spec["dtype"], spec["shape"]
        c = shape[1]
        x64, x = _rand(rng, dt, shape, 2.0)
        x64 += 0.5
        x = (x.astype(np.float64) + 0.5).astype(_np_dtype(dt))
        x64 = x.astype(np.float64)
        gm64, gm = _rand(rng, dt, [c])
        bt64, bt = _rand(rng, dt, [c])
        rm64, rm = _rand(rng, dt, [c], 0.5)
        rv = (rng.uniform(0.5, 2.0, [c])).astype(_np_dtype(dt))
        rv64 = rv.astype(np.float64)
        tr = spec["training"]
        if tr and int(np.prod(shape)) // c < 2:
            tr = False
        tx = self._t(x, cl=spec["cl"], requires_grad=True)
        tg, tb = self._t(gm, requires_grad=True), self._t(bt, requires_grad=True)
        X = torch.from_numpy(x64).requires_grad_(True)
        Gm = torch.from_numpy(gm64).requires_grad_(True)
        Bt = torch.from_numpy(bt64).requires_grad_(True)
        ref = F.batch_norm(X, torch.from_numpy(rm64.copy()), torch.from_numpy(rv64.copy()),
                           Gm, Bt, training=tr, eps=1e-5)

        def fwd():
            y = dc.ops.batch_norm(tx, tg, tb, self._t(rm), self._t(rv), eps=1e-5, training=tr)
            return y[0] if isinstance(y, (tuple, list)) else y

        refn = ref.detach().numpy()
        e = EPS[dt]
        scale = np.abs(refn).max() + 1
        red = int(np.prod(shape)) // c
        self._phase(phases, "fwd", fwd, refn,
                    2 * e * np.abs(refn) + (8 + math.sqrt(red)) * e * scale)
        g64, gy = _rand(rng, dt, shape)
        gX, gG, gB = torch.autograd.grad(ref, [X, Gm, Bt], torch.from_numpy(g64))
        tgy = self._t(gy)
        axes = tuple(i for i in range(len(shape)) if i != 1)
        rstd = 1 / math.sqrt((x64.var(axis=axes).min() if tr else rv64.min()) + 1e-5)
        for name, tin, r in (("grad_x", tx, gX), ("grad_gamma", tg, gG), ("grad_beta", tb, gB)):
            out = fwd()
            rn = r.numpy()
            sc = np.abs(rn).max() + np.abs(g64).max() * max(1.0, np.abs(gm64).max()) * rstd
            self._phase(phases, name, lambda: dc.grad([out], [tin], [tgy])[0], rn,
                        2 * e * np.abs(rn) + (16 + 2 * math.sqrt(red)) * e * sc)

    def _case_lnorm(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, shape = spec["dtype"], spec["shape"]
        c = shape[-1]
        x64, x = _rand(rng, dt, shape, 2.0)
        gm64, gm = _rand(rng, dt, [c])
        bt64, bt = _rand(rng, dt, [c])
        tx = self._t(x, requires_grad=True)
        tg, tb = self._t(gm, requires_grad=True), self._t(bt, requires_grad=True)
        X = torch.from_numpy(x64).requires_grad_(True)
        Gm = torch.from_numpy(gm64).requires_grad_(True)
        Bt = torch.from_numpy(bt64).requires_grad_(True)
        ref = F.layer_norm(X, [c], Gm, Bt, eps=1e-5)

        def fwd():
            y = dc.ops.layer_norm(tx, tg, tb, axis=-1, eps=1e-5)
            return y[0] if isinstance(y, (tuple, list)) else y

        refn = ref.detach().numpy()
        e = EPS[dt]
        scale = np.abs(refn).max() + 1
        self._phase(phases, "fwd", fwd, refn, 2 * e * np.abs(refn) + (8 + math.sqrt(c)) * e * scale)
        g64, gy = _rand(rng, dt, shape)
        gX, gG, gB = torch.autograd.grad(ref, [X, Gm, Bt], torch.from_numpy(g64))
        tgy = self._t(gy)
        red = int(np.prod(shape)) // c
        rstd = 1 / math.sqrt(x64.var(axis=-1).min() + 1e-5)
        for name, tin, r in (("grad_x", tx, gX), ("grad_gamma", tg, gG), ("grad_beta", tb, gB)):
            out = fwd()
            rn = r.numpy()
            # dx = rstd (g dy - means): rounding of the terms grows by rstd
            sc = np.abs(rn).max() + np.abs(g64).max() * max(1.0, np.abs(gm64).max()) * rstd
            self._phase(phases, name, lambda: dc.grad([out], [tin], [tgy])[0], rn,
                        2 * e * np.abs(rn) + (16 + 2 * math.sqrt(max(c, red))) * e * sc)

    def _softmax_common(self, spec, rng, phases, log):
        torch, dc = self.torch, self.dc
        dt, shape, axis = spec["dtype"], spec["shape"], spec["axis"]
        x64, x = _rand(rng, dt, shape, spec["scale"])
        nd = len(shape)
        perm = None
        if spec["view"]:
            perm = list(range(nd))
            perm[0], perm[-1] = perm[-1], perm[0]
        tx = self._t(x, perm, requires_grad=spec["grad"])
        X = torch.from_numpy(x64).requires_grad_(True)
        ref = (torch.log_softmax if log else torch.softmax)(X, axis)
        fn = dc.ops.log_softmax if log else dc.ops.softmax
        refn = ref.detach().numpy()
        e = EPS[dt]
        n = shape[axis]
        base = (np.abs(x64).max() + 1) if log else 1.0
        # oneDNN's float32 log_softmax (pinned; cpu_eigen's LogSoftmaxF32 is
        # the default) measured up to 28 ulps of |ref| + 1 for short rows
        # (its own log of the sum), cpu_eigen's under 1: allow 32 there.
        slack = 32 if log else 8
        # exp(x - max) carries the rounding of x - max (|x| eps) relatively;
        # probabilities below the dtype's normal range may flush to 0.
        rel = 1 + 2 * np.abs(x64).max()
        tiny = 2.0**-14 if dt == "float16" else 2.0**-125
        self._phase(phases, "fwd", lambda: fn(tx, axis), refn,
                    2 * e * np.abs(refn)
                    + (slack + math.sqrt(n)) * e * (base if log else rel * np.abs(refn)) + tiny)
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, shape)
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = fn(tx, axis)
        rn = gX.numpy()
        sc = np.abs(g64).max() * (n if log else 1)
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], rn,
                    2 * e * np.abs(rn) + (16 + 2 * math.sqrt(n)) * e * sc)

    def _case_softmax(self, spec, rng, phases):
        self._softmax_common(spec, rng, phases, False)

    def _case_log_softmax(self, spec, rng, phases):
        self._softmax_common(spec, rng, phases, True)

    def _case_eltwise(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, shape, op = spec["dtype"], spec["shape"], spec["op"]
        x64, x = _rand(rng, dt, shape, spec["scale"])
        perm = [1, 0] if spec["view"] else None
        tx = self._t(x, perm, requires_grad=spec["grad"])
        X = torch.from_numpy(x64).requires_grad_(True)
        if op == "Sigmoid":
            tf, df = torch.sigmoid, dc.ops.sigmoid
        elif op == "Tanh":
            tf, df = torch.tanh, dc.ops.tanh
        elif op == "Elu":
            tf = lambda X: F.elu(X, spec["alpha"])
            df = lambda t: dc.ops.elu(t, spec["alpha"])
        else:
            tf = lambda X: F.gelu(X, approximate=spec["approximate"])
            df = lambda t: dc.ops.gelu(t, spec["approximate"])
        ref = tf(X)
        refn = ref.detach().numpy()
        e = EPS[dt]
        # an input rounding is not the kernel's: compare with |f'(x)| x slack
        # Absolute error ~ |x| eps where f = x * (something near 0): oneDNN's
        # Gelu is x Phi(x) with Phi = (1 + erf) / 2, which cancels in the
        # negative tail (relative error 1e-3 there, absolute under |x| eps).
        tiny = 2.0**-24 if dt == "float16" else 2.0**-125
        self._phase(phases, "fwd", lambda: df(tx), refn,
                    4 * e * np.abs(refn) + 8 * e * np.maximum(1.0, np.abs(x64)) + tiny)
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, shape)
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = df(tx)
        rn = gX.numpy()
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], rn,
                    4 * e * np.abs(rn) + 16 * e * np.abs(g64) * np.maximum(1.0, np.abs(x64))
                    + tiny)

    # -- single-kernel families ---------------------------------------------
    def _case_conv3d(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, g, tr = spec["dtype"], spec["groups"], spec["transpose"]
        xs = [spec["n"], spec["cin"]] + spec["size"]
        ws = ([spec["cin"], spec["cout"] // g] if tr else [spec["cout"], spec["cin"] // g]) + \
            spec["k"]
        x64, x = _rand(rng, dt, xs)
        w64, w = _rand(rng, dt, ws)
        b64, b = _rand(rng, dt, [spec["cout"]])
        tx = self._t(x, cl=spec["cl"], requires_grad=spec["grad"])
        tw = self._t(w, requires_grad=spec["grad"])
        tb = self._t(b) if spec["bias"] else None
        kw = dict(stride=spec["strides"], padding=spec["pads"], dilation=spec["dilations"],
                  groups=g)
        attrs = dict(strides=tuple(spec["strides"]), pads=tuple(spec["pads"]),
                     dilations=tuple(spec["dilations"]), groups=g)
        if tr:
            kw["output_padding"] = spec["output_padding"]
            attrs["output_padding"] = tuple(spec["output_padding"])
        tf = F.conv_transpose3d if tr else F.conv3d
        df = dc.ops.conv_transpose3d if tr else dc.ops.conv3d
        X = torch.from_numpy(x64).requires_grad_(True)
        W = torch.from_numpy(w64).requires_grad_(True)
        Bt = torch.from_numpy(b64) if spec["bias"] else None
        ref = tf(X, W, Bt, **kw)
        X1 = X.detach().abs().requires_grad_(True)
        W1 = W.detach().abs().requires_grad_(True)
        absb = tf(X1, W1, Bt.abs() if Bt is not None else None, **kw)
        ksum = (spec["cin"] // g) * int(np.prod(spec["k"]))
        fwd = lambda: df(tx, tw, tb, **attrs)
        refn = ref.detach().numpy()
        self._phase(phases, "fwd", fwd, refn, self._tol_prod(refn, absb.detach().numpy(), ksum, dt))
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        G = torch.from_numpy(g64)
        gX, gW = torch.autograd.grad(ref, [X, W], G)
        bX, bW = torch.autograd.grad(absb, [X1, W1], G.abs())
        tg = self._t(gy)
        out = fwd()
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], gX.numpy(),
                    self._tol_prod(gX.numpy(), bX.numpy(), ksum * spec["cout"], dt))
        out = fwd()
        self._phase(phases, "grad_w", lambda: dc.grad([out], [tw], [tg])[0], gW.numpy(),
                    self._tol_prod(gW.numpy(), bW.numpy(), int(np.prod(ref.shape[2:])) *
                                   spec["n"], dt))

    def _case_pool3d(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt = spec["dtype"]
        x64, x = _rand(rng, dt, [spec["n"], spec["c"]] + spec["size"])
        tx = self._t(x, cl=spec["cl"], requires_grad=spec["grad"])
        X = torch.from_numpy(x64).requires_grad_(True)
        k, st, p = spec["kernel"], spec["strides"], spec["pads"]
        if spec["max"]:
            ref = F.max_pool3d(X, k, st, p, spec["dilations"], ceil_mode=spec["ceil_mode"])
            fwd = lambda: dc.ops.max_pool3d(tx, tuple(k), tuple(st), tuple(p),
                                            tuple(spec["dilations"]), spec["ceil_mode"])[0]
        else:
            ref = F.avg_pool3d(X, k, st, p, ceil_mode=spec["ceil_mode"],
                               count_include_pad=spec["count_include_pad"])
            fwd = lambda: dc.ops.avg_pool3d(tx, tuple(k), tuple(st), tuple(p), spec["ceil_mode"],
                                            spec["count_include_pad"])
        refn = ref.detach().numpy()
        e = EPS[dt]
        self._phase(phases, "fwd", fwd, refn, 2 * e * np.abs(refn) + 4 * e * np.abs(x64).max())
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = fwd()
        rn = gX.numpy()
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], rn,
                    2 * e * np.abs(rn) + (4 + int(np.prod(k))) * e * np.abs(g64).max())

    def _case_gnorm(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt, shape, g = spec["dtype"], spec["shape"], spec["groups"]
        c = shape[1]
        x64, x = _rand(rng, dt, shape, 2.0)
        gm64, gm = _rand(rng, dt, [c])
        bt64, bt = _rand(rng, dt, [c])
        tx = self._t(x, requires_grad=True)
        tg, tb = self._t(gm, requires_grad=True), self._t(bt, requires_grad=True)
        X = torch.from_numpy(x64).requires_grad_(True)
        Gm = torch.from_numpy(gm64).requires_grad_(True)
        Bt = torch.from_numpy(bt64).requires_grad_(True)
        ref = F.group_norm(X, g, Gm, Bt, eps=1e-5)
        fwd = lambda: dc.ops.group_norm(tx, tg, tb, g, eps=1e-5)
        refn = ref.detach().numpy()
        e = EPS[dt]
        red = int(np.prod(shape)) // (shape[0] * g)
        self._phase(phases, "fwd", fwd, refn,
                    2 * e * np.abs(refn) + (8 + math.sqrt(red)) * e * (np.abs(refn).max() + 1))
        g64, gy = _rand(rng, dt, shape)
        gX, gG, gB = torch.autograd.grad(ref, [X, Gm, Bt], torch.from_numpy(g64))
        tgy = self._t(gy)
        xg = x64.reshape(shape[0], g, -1)
        rstd = 1 / math.sqrt(xg.var(axis=-1).min() + 1e-5)
        for name, tin, r in (("grad_x", tx, gX), ("grad_gamma", tg, gG), ("grad_beta", tb, gB)):
            out = fwd()
            rn = r.numpy()
            sc = np.abs(rn).max() + np.abs(g64).max() * max(1.0, np.abs(gm64).max()) * rstd
            self._phase(phases, name, lambda: dc.grad([out], [tin], [tgy])[0], rn,
                        2 * e * np.abs(rn) + (16 + 2 * math.sqrt(int(np.prod(shape)))) * e * sc)

    def _case_grid_sample(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt = spec["dtype"]
        x64, x = _rand(rng, dt, [spec["n"], spec["c"], spec["h"], spec["w"]])
        gr64, gr = _rand(rng, dt, [spec["n"], spec["ho"], spec["wo"], 2], 0.8)
        tx = self._t(x, requires_grad=spec["grad"])
        tgr = self._t(gr)
        X = torch.from_numpy(x64).requires_grad_(True)
        a = dict(mode=spec["mode"], padding_mode=spec["padding_mode"],
                 align_corners=spec["align_corners"])
        ref = F.grid_sample(X, torch.from_numpy(gr64), **a)
        fwd = lambda: dc.ops.grid_sample(tx, tgr, **a)
        refn = ref.detach().numpy()
        e = EPS[dt]
        # a grid point's own rounding moves a nearest pick or a weight: the
        # comparison is against the same (rounded) points, so only the
        # interpolation's arithmetic differs
        sc = np.abs(x64).max() * (4 if spec["mode"] == "bicubic" else 1)
        self._phase(phases, "fwd", fwd, refn, 2 * e * np.abs(refn) + 64 * e * sc *
                    max(spec["h"], spec["w"]))
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = fwd()
        rn = gX.numpy()
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], rn,
                    2 * e * np.abs(rn) + 64 * e * np.abs(g64).max() * spec["ho"] * spec["wo"] *
                    (4 if spec["mode"] == "bicubic" else 1))

    def _case_interpolate(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        dt = spec["dtype"]
        x64, x = _rand(rng, dt, [spec["n"], spec["c"], spec["h"], spec["w"]])
        tx = self._t(x, requires_grad=spec["grad"])
        X = torch.from_numpy(x64).requires_grad_(True)
        a = dict(size=tuple(spec["size"]), mode=spec["mode"], align_corners=spec["align_corners"])
        ref = F.interpolate(X, **a)
        fwd = lambda: dc.ops.interpolate(tx, **a)
        refn = ref.detach().numpy()
        e = EPS[dt]
        sc = np.abs(x64).max() * (4 if spec["mode"] == "bicubic" else 1)
        self._phase(phases, "fwd", fwd, refn, 2 * e * np.abs(refn) + 16 * e * sc)
        if not spec["grad"]:
            return
        g64, gy = _rand(rng, dt, list(ref.shape))
        (gX,) = torch.autograd.grad(ref, [X], torch.from_numpy(g64))
        tg = self._t(gy)
        out = fwd()
        rn = gX.numpy()
        self._phase(phases, "grad_x", lambda: dc.grad([out], [tx], [tg])[0], rn,
                    2 * e * np.abs(rn) + 16 * e * np.abs(g64).max() * 4 *
                    (spec["size"][0] * spec["size"][1]) / (spec["h"] * spec["w"]) * 4)

    def _case_deform(self, spec, rng, phases):
        """DeformConv2d with zero or integer offsets (and a mask) is a Conv2d
        of shifted, scaled taps: the reference samples exactly."""
        torch, dc = self.torch, self.dc
        dt, g = spec["dtype"], spec["groups"]
        n, c, o, h, w = spec["n"], spec["cin"], spec["cout"], spec["h"], spec["w"]
        kh, kw = spec["kh"], spec["kw"]
        (sh, sw), (dh, dw), (ph, pw) = spec["strides"], spec["dilations"], spec["pads"]
        oh, ow = _conv_out(h, kh, sh, ph, ph, dh), _conv_out(w, kw, sw, pw, pw, dw)
        x64, x = _rand(rng, dt, [n, c, h, w])
        w64, wt = _rand(rng, dt, [o, c // g, kh, kw])
        off = np.zeros([n, 2 * kh * kw, oh, ow])
        if spec["offsets"] == "integer":
            off = rng.integers(-2, 3, off.shape).astype(np.float64)
        mask = rng.uniform(0, 1, [n, kh * kw, oh, ow]).astype(_np_dtype(dt)).astype(np.float64)
        if not spec["mask"]:
            mask = np.ones_like(mask)
        # columns [n, c, kh*kw, oh, ow] sampled at the (integer) points
        cols = np.zeros([n, c, kh * kw, oh, ow])
        for p in range(kh):
            for q in range(kw):
                t = p * kw + q
                for i in range(oh):
                    for j in range(ow):
                        yy = i * sh - ph + p * dh + off[:, 2 * t, i, j]
                        xx = j * sw - pw + q * dw + off[:, 2 * t + 1, i, j]
                        for b in range(n):
                            y0, x0 = int(yy[b]), int(xx[b])
                            if 0 <= y0 < h and 0 <= x0 < w:
                                cols[b, :, t, i, j] = x64[b, :, y0, x0] * mask[b, t, i, j]
        cg, og = c // g, o // g
        ref = np.zeros([n, o, oh, ow])
        absb = np.zeros_like(ref)
        for gi in range(g):
            cc = cols[:, gi * cg:(gi + 1) * cg].reshape(n, cg * kh * kw, oh, ow)
            ww = w64[gi * og:(gi + 1) * og].reshape(og, cg * kh * kw)
            ref[:, gi * og:(gi + 1) * og] = np.einsum("ok,nkij->noij", ww, cc)
            absb[:, gi * og:(gi + 1) * og] = np.einsum("ok,nkij->noij", np.abs(ww), np.abs(cc))
        tx, tw = self._t(x), self._t(wt)
        toff = self._t(off.astype(_np_dtype(dt)))
        tm = self._t(mask.astype(_np_dtype(dt))) if spec["mask"] else None
        fwd = lambda: dc.ops.deform_conv2d(tx, tw, toff, tm, None, strides=(sh, sw),
                                           pads=(ph, pw), dilations=(dh, dw), groups=g)
        self._phase(phases, "fwd", fwd, ref, self._tol_prod(ref, absb, cg * kh * kw, dt))

    def _case_cast(self, spec, rng, phases):
        """Exact: every cast rounds once to nearest even (ml_dtypes / NumPy)."""
        dc = self.dc
        src, dst, n = spec["dtype"], spec["dst"], spec["n"]
        # normal, subnormal, tie-breaking, overflowing and special values
        scale = 2.0 ** rng.integers(-140, 130, n).astype(np.float64)
        v = rng.standard_normal(n) * scale
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 6e-8,
                            3.0e38, 3.4e38, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 2.0**-133,
                            2.0**-126, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,
                            # double rounding through float32 would move these
                            1.0 + 2.0**-8 + 2.0**-30, -float.fromhex("0x1.4effff17db30ap-98"),
                            1.0 + 2.0**-11 + 2.0**-40])
        v[: min(n, len(special))] = special[: min(n, len(special))]
        with np.errstate(over="ignore"):
            x = v.astype(_np_dtype(src))
        # one rounding from the exact source value
        with np.errstate(over="ignore"):
            ref = x.astype(np.float64).astype(_np_dtype(dst)).astype(np.float64)
        if src == "float64" and dst == "bfloat16":
            ref = _round_once_bf16(x, ref)
        if spec["view"] and n > 1:  # a transposed [n/2.., 2] view, read through strides
            m = n // 2 * 2
            x, ref = x[:m], ref[:m]
            tx = dc.tensor(np.ascontiguousarray(x.reshape(-1, 2).T)).permute(1, 0)
            ref = ref.reshape(-1, 2)
        else:
            tx = self._t(x)
        same = lambda a, b: (a == b) | (np.isnan(a) & np.isnan(b))
        self._phase(phases, "fwd", lambda: dc.ops.cast(tx, dst), ref, 0.0)
        r = phases["fwd"]
        if "error" not in r:
            got = self._np(dc.ops.cast(tx, dst))
            bad = ~same(got, ref)
            r["ratio"] = 0.0
            if bad.any():
                i = np.unravel_index(int(np.argmax(bad)), bad.shape)
                r["where"] = [list(map(int, i)), float(got[i]), float(ref[i]), 0.0]
                r["ratio"] = 1.0 + float(bad.sum())

    def _case_blocked(self, spec, rng, phases):
        torch, dc = self.torch, self.dc
        F = torch.nn.functional
        n, c, o, h, w = spec["n"], spec["c"], spec["o"], spec["h"], spec["w"]
        x64, x = _rand(rng, "float32", [n, c, h, w])
        w64, wt = _rand(rng, "float32", [o, c] + spec["k"])
        b64, b = _rand(rng, "float32", [o])
        X, W = torch.from_numpy(x64), torch.from_numpy(w64)
        Bt = torch.from_numpy(b64) if spec["bias"] else None
        kw = dict(stride=spec["strides"], padding=spec["pads"], dilation=spec["dilations"])
        ref = F.conv2d(X, W, Bt, **kw)
        absb = F.conv2d(X.abs(), W.abs(), Bt.abs() if Bt is not None else None, **kw)
        if spec["act"] == "relu":
            ref = torch.relu(ref)
        pref = F.max_pool2d(ref, spec["pool_k"], spec["pool_s"], spec["pool_p"],
                            ceil_mode=spec["ceil_mode"])
        tx = dc.tensor(x) if spec["first"] else dc.ops.nchw16c_from_nchw(dc.tensor(x))
        tw, tb = dc.tensor(wt), (dc.tensor(b) if spec["bias"] else None)

        def conv():
            return dc.ops.conv2d_nchw16c(
                tx, tw, tb, strides=tuple(spec["strides"]), pads=tuple(spec["pads"]),
                dilations=tuple(spec["dilations"]), activation=spec["act"])

        def pooled():
            y = dc.ops.max_pool2d_nchw16c(conv(), tuple(spec["pool_k"]), tuple(spec["pool_s"]),
                                          tuple(spec["pool_p"]), (1, 1), spec["ceil_mode"])
            return dc.ops.nchw_from_nchw16c(y[0] if isinstance(y, (tuple, list)) else y)

        refn = ref.numpy()
        tol = self._tol_prod(refn, absb.numpy(), c * int(np.prod(spec["k"])), "float32")
        self._phase(phases, "conv", lambda: dc.ops.nchw_from_nchw16c(conv()), refn, tol)
        ptol = np.max(tol) * np.ones(pref.shape)
        self._phase(phases, "pool", pooled, pref.numpy(), ptol)
