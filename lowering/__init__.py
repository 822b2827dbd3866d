"""Lowering of the memplan dialect to executables (NumPy and CuPy backends)."""
