"""Shared machinery of the compiled plugin kinds: OpenMP C (cffi), CUDA (NVRTC + driver API
through cffi) and Triton. A plugin file holds its kernel and config space; building,
caching, loading and launching live here once."""
