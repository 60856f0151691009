"""magma_torch's Hydra launcher plugin (``hydra/launcher=slurm``, ``slurm_local``)."""
from __future__ import annotations


def register() -> None:
    """Register the launcher with Hydra by hand: Hydra finds plugins by walking the
    ``hydra_plugins`` folders, which an editable install (``pip install -e``) hides. The module
    is named ``_launcher`` so that Hydra's scan, where it does see it, skips it and never
    imports it without the `slurm` extra."""
    try:
        from ._launcher import SlurmLauncher
    except ImportError:   # without the `slurm` extra; hydra/launcher=slurm then names what is missing
        return
    from hydra.core.plugins import Plugins

    Plugins.instance().register(SlurmLauncher)
