"""Delay messages: the level table (``delay_level``), their form in the schedule topic
(``delay_message``) and the scheduler that delivers them when due (``schedule_service``)."""
