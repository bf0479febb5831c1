"""advice: why the devices waited (idle causes, stragglers) and one list of what to fix first."""
