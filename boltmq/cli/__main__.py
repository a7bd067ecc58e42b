"""``python -m boltmq.cli``: the same as the ``boltmq`` command."""

from boltmq.cli.main import main

main()
