"""What happened, told: the event log, notifications and their webhooks."""
