"""magma_torch: MAGMA, the multi-graph memory for LLM agents, on PyTorch Geometric tensors."""
__all__ = ["MagmaMemory", "StoredEvent", "UnknownEventError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy: the facade pulls in Hydra and the text stack; the tensor modules (store, query,
    # bench) import without them, e.g. on a GPU node that has only torch and PyG.
    if name == "MagmaMemory":
        from magma_torch.memory import MagmaMemory

        return MagmaMemory
    if name in ("StoredEvent", "UnknownEventError"):
        from magma_torch import events

        return getattr(events, name)
    raise AttributeError(f"module 'magma_torch' has no attribute {name!r}")
