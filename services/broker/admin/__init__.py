"""The operators' calls: topics, groups and their lag, messages, the broker's role
(``admin_processor``)."""
