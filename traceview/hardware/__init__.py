"""The hardware database (chips, their figures and sources) and detection of the chip a trace ran on."""
