"""The optimizer-update family: what sgd_update_, adam_update_ and adam_update_foreach_ share.

- ``spec.py``: checks of the state tensors and hyperparameters, the wrapper that runs an update on contiguous
  copies (``dense_run``), Adam's per-step scalars and the conformance cases' tensors and hyperparameters;
- ``triton.py``: Adam's element update as a @triton.jit helper, for the one-tensor and the many-tensor kernels.
"""
