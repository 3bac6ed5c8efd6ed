"""Packages: kernelzoo and mytorch as they are, and ``plugins/`` installed as ``kernelzoo_plugins``
with every op folder in it, so adding an op or a plugin needs no edit here."""

from setuptools import find_packages, setup

plugins = ["kernelzoo_plugins", *(f"kernelzoo_plugins.{p}" for p in find_packages("plugins"))]
setup(
    packages=find_packages(include=["kernelzoo", "kernelzoo.*", "mytorch", "mytorch.*"]) + plugins,
    package_dir={"kernelzoo_plugins": "plugins"},
)
