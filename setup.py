"""Packages: kernelzoo and mytorch as they are, ``plugins/`` installed as ``kernelzoo_plugins``
with every op folder in it, so adding an op or a plugin needs no edit here, and ``tuning_db/``
(the shipped winners) as ``kernelzoo_tuning_db``."""

from setuptools import find_packages, setup

plugins = ["kernelzoo_plugins", *(f"kernelzoo_plugins.{p}" for p in find_packages("plugins"))]
setup(
    packages=[*find_packages(include=["kernelzoo", "kernelzoo.*", "mytorch", "mytorch.*"]), *plugins,
              "kernelzoo_tuning_db"],
    package_dir={"kernelzoo_plugins": "plugins", "kernelzoo_tuning_db": "tuning_db"},
)
