"""``python -m bench.compare``."""

from bench.compare.run import main

main()
