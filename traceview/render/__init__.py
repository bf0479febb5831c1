"""Output: terminal tables, analysis reports (JSON, CSV, Markdown, text) and roofline charts."""
