"""Kernels: the NumPy reference backend (and later CuPy), one table keyed by compute op."""
