"""The CUDA backend: CuPy kernels captured in CUDA graphs.

Modules: :mod:`.backend` (``CudaBackend``: binds every node of a compiled program to a CuPy
launcher and captures the step graphs; built on :mod:`.device`, :mod:`.ops`,
:mod:`.impls`, :mod:`.winograd`: the Winograd 3x3 convs), :mod:`.sources` (the CUDA C++ kernel
sources, compiled with NVRTC), :mod:`.emulator` (a NumPy stand-in for the subset of CuPy the backend uses, so the
backend is tested on machines without a GPU), :mod:`.checks` (static checks of the sources and
of the backend's table against the kernel registry; :mod:`.winograd_checks` for the Winograd convs).
"""
