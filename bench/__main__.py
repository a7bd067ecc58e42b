"""``python -m bench``: the benchmarks' command (:mod:`bench.cli`)."""

from bench.cli import bench

bench()
