"""kernelzoo's built-in plugins, installed as ``kernelzoo_plugins``: one package per op (its
spec in ``__init__``), one module per plugin kind beside its kernel source."""
