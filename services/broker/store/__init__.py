"""The broker's side of its store: the client (``store_client``) with its append stream
(``append_stream``), and the store's master or replica role (``store_role``)."""
