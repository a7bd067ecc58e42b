"""Traffic over the last minute and hour, per topic and consumer group (``admin stats``)."""
