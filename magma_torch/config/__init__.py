"""Configuration: the typed schema (``schema``: the one source of defaults, no Hydra or torch),
what ``MagmaMemory`` accepts turned into typed configs (``resolve``: OmegaConf only), and the
packaged Hydra config tree (``groups``: ``conf_root``, ``group_options``, ``load_group``), whose
import registers the schema in Hydra's ConfigStore. The tree's names are served from here lazily,
so the schema and the tensor modules that read it import without Hydra. ``build.instantiate`` builds
what a ``_target_`` names (an ``llm`` backend, a consolidator), its errors named as that setting.
"""
_GROUPS = ("CONFIG_MODULE", "conf_root", "group_options", "load_group")


def __getattr__(name: str):
    if name in _GROUPS:
        from magma_torch.config import groups

        return getattr(groups, name)
    raise AttributeError(f"module 'magma_torch.config' has no attribute {name!r}")
