"""magma_torch: MAGMA, the multi-graph memory for LLM agents, on PyTorch Geometric tensors."""
from magma_torch.errors import MagmaError

__version__ = "0.1.0"

# Lazy: the facade pulls in Hydra and the text stack; the tensor modules (store, query, bench)
# import without them, e.g. on a GPU node that has only torch and PyG. Each error is exported from
# the module that raises it, so importing magma_torch loads none of them (nor any eval module).
_LAZY = {
    "MagmaMemory": "memory", "QueryError": "memory", "AnswerError": "memory", "MemoryClosedError": "memory",
    "StoredEvent": "events", "UnknownEventError": "events",
    "IngestError": "ingest.fast_path", "MissingNLPModel": "ingest.nlp", "ForgetError": "lifecycle",
    "CorruptSaveError": "store.persistence", "SaveNotFoundError": "store.persistence",
    "SaveWouldOverwriteError": "store.persistence", "StoreMismatchError": "store.persistence",
    "LiveReadTimeoutError": "store.live_read",
    "IntegrityError": "store.integrity", "DamagedFileError": "files",
    "NamespaceError": "store.durable", "UnknownNamespaceError": "store.durable",
    "NamespaceNotEmptyError": "store.durable", "StoreInUseError": "store.durable",
    "ReadOnlyError": "store.durable", "NoStoreDirError": "store.durable", "StoreDirNotAFolderError": "store.durable",
    "LLMUnavailable": "llm.base", "LLMInterfaceError": "llm.base", "UnknownPromptError": "llm.prompts",
    "UnknownDateStyleError": "llm.answer_format", "OutputError": "llm.schema", "ModelError": "llm.models",
    "GGUFNotFoundError": "llm.gguf_export", "CacheModelError": "llm.cache",
    "ExplainError": "explain.cli", "ScreenshotError": "explain.screenshot",
    "DatasetError": "eval.datasets.base", "ConfigError": "config.schema", "CompareError": "eval.compare",
    "RunFolderError": "eval.run_folder", "AggregateError": "eval.aggregate", "OverrideError": "eval.overrides",
    "TrackerError": "eval.tracking", "MissingDependencyError": "errors",
}
__all__ = ["MagmaError", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'magma_torch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"magma_torch.{_LAZY[name]}"), name)
