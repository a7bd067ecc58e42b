"""SendMessage: the checks a batch passes (``batch_check``) and the processor that
appends it (``send_processor``)."""
