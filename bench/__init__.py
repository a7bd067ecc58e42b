"""Benchmarks: ``python -m bench <name>`` (store, ha, produce, consume, e2e, soak, spark)
and ``python -m bench.compare``; figures in ``bench/RESULTS.md``."""
