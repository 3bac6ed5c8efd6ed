"""mytorch: a small autograd framework on kernelzoo's tuned kernels (its own issue builds it)."""
