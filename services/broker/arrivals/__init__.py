"""Waiting for messages: the long-poll hub where pulls and the scheduler park
(``long_poll``) and the store's arrival stream that wakes them (``arrival_watcher``)."""
