"""Helpers the tests share: the HLO corpus, the fuzz harness, headless Chromium."""
