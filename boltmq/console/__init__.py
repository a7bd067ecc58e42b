"""The web console (``boltmq console``): a client of the cluster, like the CLI.

It sits beside :mod:`boltmq.cli`, above the SDK: it asks the registries and the
brokers through the SDK's :class:`boltmq.client.ClientInstance` (the admin RPCs
``boltmq admin`` uses), signing every call with the logged-in account, and
renders what they answer as server-side Jinja2 pages (docs/console.md).
"""
