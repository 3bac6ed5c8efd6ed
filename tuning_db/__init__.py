"""Shipped tuning winners: ``kernelzoo db export`` files per GPU, installed as ``kernelzoo_tuning_db``.

kernelzoo imports the records of a file on first use on a matching GPU (see README.md here).
"""
