"""Serving profiles: a view of an analysis that finds the prefill and decode programs of a serving loop and
judges each against the book's inference roofline (docs/inference.md).

``programs`` reads an HLO module's signature (weights, KV cache, token input), ``executions`` finds each
module call in the op table, ``roofline`` holds the book's formulas, and ``view`` puts them together:
``inference_from_analysis(pipeline) -> InferenceReport`` (``Analysis.inference()``).
"""
