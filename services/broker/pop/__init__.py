"""POP consumption: receive messages that stay invisible until acked, redelivered after
their invisible time, dead-lettered after the group's last attempt (``pop_service.py``,
whose docstring is the in-broker API), where receives wait and what wakes them
(``pop_wakeups.py``), and the receipt handles that name one delivery
(``receipt_handle.py``). The state is :mod:`services.broker.metadata.pop_state`."""
