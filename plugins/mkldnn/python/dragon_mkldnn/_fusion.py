"""The op chains this plugin's fused kernels serve (pattern_fusion pass).

mkldnn registers ``Conv2dBiasAct`` and ``MatMulBiasAct`` kernels (oneDNN
convolution / matmul with a bias and a ReLU post-op), so it declares the
core's standard patterns: conv -> bias -> relu, conv -> batch-norm
(inference, folded into the filter) -> relu, matmul -> bias -> relu and
their two-op prefixes. The pass applies a pattern only where some kernel
for the fused op is registered for the graph's device and dtype.

The hook marker is pluggy's for the ``dragon_core`` project, made here so
that importing this package never imports ``dragon_core`` (which loads the
plugins, this one included, while this module would be half-initialised).
"""

import pluggy

hookimpl = pluggy.HookimplMarker("dragon_core")


@hookimpl
def dragon_fusion_patterns(core):
    """The standard patterns of ``dragon_core.fusion``."""
    return core.fusion.STANDARD_PATTERNS
