"""Networks the benchmarks run in several libraries (see resnet.py)."""
