"""SendMessage and SendStream: the checks a batch passes (``batch_check``), the processor
that appends it (``send_processor``) and the stream of sends over it (``send_stream``)."""
