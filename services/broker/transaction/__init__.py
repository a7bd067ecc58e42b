"""Transactions: the design and the undecided halves (``transaction_service``), the
records made of a half (``half_message``), the producers' check-back streams
(``check_channel``)."""
