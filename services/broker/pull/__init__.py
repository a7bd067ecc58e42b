"""PullMessage and PullQueues: the checks a read passes (``read_check``) and the
processor that reads and long-polls (``pull_processor``)."""
