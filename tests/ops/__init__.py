"""Op tests for the standard library (docs/ops.md) against NumPy."""
