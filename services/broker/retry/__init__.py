"""Consumer retries: the retry and dead-letter topics (``retry_topic``),
ConsumerSendBack (``send_back``), dead letters listed and resent (``dead_letter``)."""
