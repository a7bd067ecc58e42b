"""Producers and consumers: members known by heartbeat (``client_manager``), orderly
consumers' queue locks (``queue_lock``) and the RPCs over both (``client_processor``)."""
