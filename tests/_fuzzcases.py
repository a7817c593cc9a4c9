"""The seeded case drawing the differential test files share
(tests/ops/test_differential_numpy.py, tests/vm_torch/test_differential.py).

Each file has a table ``{category: (generator, count)}``; a generator takes a
NumPy ``Generator`` and returns a case (a dict) or None to decline.
``DRAGON_FUZZ_OFFSET=k`` draws a different, still reproducible, set of cases
for a deeper run by hand; the suite runs offset 0.
"""
from __future__ import annotations

import os

import numpy as np

OFFSET = int(os.environ.get("DRAGON_FUZZ_OFFSET", "0"))


def draw(generators: dict, cat: str, i: int, prime: int) -> dict:
    """Case ``i`` of category ``cat``: its seed mixes ``prime``, ``i``, the
    offset and the category's name, so files and categories draw apart."""
    gen, _ = generators[cat]
    seed = prime * (i + 1 + OFFSET) + sum(map(ord, cat))
    rng = np.random.default_rng(seed)
    for _ in range(20):
        case = gen(rng)
        if case is not None:
            case["seed"] = seed
            return case
    raise AssertionError(f"generator {cat!r} keeps declining (seed {seed})")


def cases(generators: dict) -> list[tuple[str, int]]:
    """Every (category, index) pair of a table, for parametrize."""
    return [(cat, i) for cat, (_, n) in generators.items() for i in range(n)]
