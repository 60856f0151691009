"""Explanations of a retrieval: why each event was retrieved (``magma-explain``).

``subgraph`` turns a ``Retrieval`` into the shown subgraph, ``terminal`` and ``html_view``
render it, ``screenshot`` turns the HTML into a PNG with headless chromium, ``cli`` wires
them to a saved memory.
"""
from magma_torch.explain.subgraph import Explanation, ShownNode, explain

__all__ = ["Explanation", "ShownNode", "explain"]
