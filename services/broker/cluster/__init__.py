"""The broker among its peers: registration with every registry (``registration``),
a topic change saved and registered (``topic_publisher``), a replica's copy of its master
broker's metadata (``metadata_sync``)."""
