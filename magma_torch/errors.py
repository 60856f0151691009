"""The base of every error magma_torch raises on purpose, so a caller can catch them all at once.

Each specific error also keeps the builtin base it had before (``IngestError`` is still a
``ValueError``), so code that catches the builtin keeps working.
"""


class MagmaError(Exception):
    """An error magma_torch raised on purpose: bad input, a damaged file, an unusable setting; its
    message names what to fix."""


class MissingDependencyError(MagmaError, ImportError):
    """An optional package that a chosen setting needs is not installed (vllm for ``llm=vllm``,
    numba for ``retrieval.kernel=numba``, ...); the message names the setting and the pip extra or
    command that installs it. An ``ImportError`` too, as the bare one it replaces was."""
