"""magma_torch's Hydra launcher plugin (``hydra/launcher=slurm``, ``slurm_local``)."""
from __future__ import annotations


def register() -> None:
    """Register the launcher with Hydra by hand: Hydra finds plugins by walking the
    ``hydra_plugins`` folders, which an editable install (``pip install -e``) hides."""
    try:
        from .slurm_launcher import SlurmLauncher
    except ImportError:   # without the `slurm` extra; hydra/launcher=slurm then names what is missing
        return
    from hydra.core.plugins import Plugins

    Plugins.instance().register(SlurmLauncher)
