"""Subcommands of the ``kernelzoo`` command line, one module per group."""
