"""The broker's tables: topics (``topic_config``), consumer groups
(``subscription_group``, ``group_access``), consumer and delay offsets
(``consumer_offset``, ``delay_offset``), their JSON documents (``json_document``) saved
in the store (``persister``), the names they accept (``names``) and their clocks (``clock``)."""
