"""The pipeline: measured ops x HLO cost, judged against the target chip's roofline, summarized."""
