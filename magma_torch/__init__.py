"""magma_torch: MAGMA, the multi-graph memory for LLM agents, on PyTorch Geometric tensors."""
from magma_torch.memory import MagmaMemory

__all__ = ["MagmaMemory"]
__version__ = "0.1.0"
