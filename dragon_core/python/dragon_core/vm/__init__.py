"""Virtual frameworks: PyTorch- and TensorFlow-style front ends over dragon_core."""
