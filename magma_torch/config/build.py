"""Building what a config's ``_target_`` names (an ``llm`` backend, a consolidator) with Hydra's
``instantiate``, and its refusals in one line. Hydra wraps what goes wrong in an
``InstantiationException``, neither a MagmaError nor the builtin; ``instantiate`` here undoes that:

- a MagmaError the constructor (or importing its module) raised is raised as it is, and so is
  any other ImportError the constructor raised;
- a ``_target_`` that cannot be imported or is not callable is a ``ConfigError`` naming
  ``<setting>._target_`` with what Hydra said;
- a keyword the constructor does not take is a ``ConfigError`` naming ``<setting>.<keyword>``;
- anything else (and anything in a nested node, which Hydra names by its full key) is raised as it is.
"""
from __future__ import annotations

import re

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate

from magma_torch.config.schema import ConfigError
from magma_torch.errors import MagmaError

# the starts of Hydra's messages for a _target_ it cannot import or that is not callable (nothing was called)
_NO_TARGET = ("Error locating target", "Expected a callable target")
_UNKNOWN_KEYWORD = re.compile(r"got an unexpected keyword argument '(\w+)'$")


def instantiate(cfg, setting: str, **kwargs):
    """``hydra.utils.instantiate(cfg, **kwargs)``, its errors named as the setting ``setting``
    (``"llm"``, ``"consolidation"``) of which ``cfg`` is the node; see the module docstring."""
    try:
        return hydra_instantiate(cfg, **kwargs)
    except InstantiationException as err:
        said, cause = str(err), err.__cause__
        if said.startswith(_NO_TARGET) and isinstance(getattr(cause, "__cause__", None), MagmaError):
            cause = cause.__cause__   # raised importing its module (a missing extra), under Hydra's ImportError
        if isinstance(cause, MagmaError):
            raise cause from None
        if "\nfull_key: " in said:   # a nested node: Hydra's message names it, our setting names would not
            raise
        if said.startswith(_NO_TARGET):
            raise ConfigError(f"{setting}._target_: cannot build {cfg.get('_target_')!r}: "
                              f"{_one_line((str(cause) if cause is not None else '').strip() or said)}") from None
        if isinstance(cause, ImportError):   # a package the constructor imports, said in its own words
            raise cause from None
        unknown = _UNKNOWN_KEYWORD.search(str(cause)) if isinstance(cause, TypeError) else None
        # no frame below Hydra's call: the call itself refused the keyword, not code the constructor ran
        if unknown and cause.__traceback__ is not None and cause.__traceback__.tb_next is None:
            raise ConfigError(f"{setting}.{unknown.group(1)}: not a setting of {cfg.get('_target_')!r}") from None
        raise


def _one_line(text: str) -> str:
    """Hydra's several lines as one: a line ending in ':' runs on into the next, others end with ';'."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "".join(line + (" " if line.endswith(":") else "; ") for line in lines[:-1]) + lines[-1]
