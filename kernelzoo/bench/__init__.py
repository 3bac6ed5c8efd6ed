"""Benchmarks: every plugin of an op against torch, with the roofline floor (docs/perf/method.md).

Shared by ``kernelzoo bench`` (:mod:`~kernelzoo.bench.run`: in-process, ``time_fn``, text tables,
JSON, plots) and the pytest-benchmark suites in ``benchmarks/`` (which time through
pytest-benchmark but take their cases, inputs, configs and floors from :mod:`~kernelzoo.bench.cases`).
"""
