"""mem.graph: the live multigraph as a zero-copy PyG HeteroData, and a PyG model run on it."""
from __future__ import annotations

import re
from pathlib import Path

import torch
from torch_geometric import EdgeIndex

from magma_torch import MagmaMemory
from magma_torch.bench.measure import ingest, load_config
from magma_torch.bench.synthetic import event_rows, synthesize
from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records
from magma_torch.ingest import bulk
from magma_torch.store.graph import EDGE_TYPES, REVERSED
from magma_torch.testing import experiment_script

ROOT = Path(__file__).resolve().parents[1]


def _synthetic_store(events: int = 2000):
    cfg = load_config()
    mem = synthesize(events, cfg.graph, seed=0)
    store, _ = ingest(mem, cfg, torch.device("cpu"))
    return store, mem


def _storage(t: torch.Tensor) -> int:
    if isinstance(t, EdgeIndex):
        t = t.as_tensor()
    return t.untyped_storage().data_ptr()


def _tensors(data, clone: bool = False) -> dict:
    """Every tensor of a HeteroData by (node or edge type, attribute), EdgeIndex as a plain tensor."""
    out = {}
    for part in data.node_stores + data.edge_stores:
        for name, val in part.items():
            if torch.is_tensor(val):
                val = val.as_tensor() if isinstance(val, EdgeIndex) else val
                out[(part._key, name)] = val.clone() if clone else val
    return out


def test_hetero_data_is_views_of_the_store_buffers():
    """Every node feature, edge_index and edge_weight shares storage with the store's columns
    and holds their values; the reverse hops are [dst, src] of the same buffer."""
    store, _ = _synthetic_store()
    data = store.hetero_data()
    data.validate(raise_on_error=True)
    ev, en, ep = store.events, store.entities, store.episodes
    for node_type, x, column in (("event", data["event"].x, ev.embeddings.data),
                                 ("event", data["event"].time, ev.timestamps.data),
                                 ("entity", data["entity"].x, en.embeddings.data),
                                 ("episode", data["episode"].x, ep.sums.data)):
        assert x.data_ptr() == column.data_ptr() and x.shape == column.shape, node_type
        assert data[node_type].num_nodes == column.shape[0]
    assert data["event"].num_nodes == len(ev) == 2000 and data["episode"].num_nodes == len(ep) > 1
    for rel, edge_type in EDGE_TYPES.items():
        src, dst, w = store.graph.edges(rel)
        ei = data[edge_type].edge_index
        assert isinstance(ei, EdgeIndex) and ei.sparse_size() == (data[edge_type[0]].num_nodes,
                                                                   data[edge_type[2]].num_nodes)
        assert _storage(ei) == _storage(src) == _storage(dst), rel
        assert ei.as_tensor()[0].data_ptr() == src.data_ptr() and ei.as_tensor()[1].data_ptr() == dst.data_ptr()
        assert torch.equal(ei.as_tensor(), torch.stack([src, dst]))
        assert data[edge_type].edge_weight.data_ptr() == w.data_ptr()
        if rel in REVERSED:
            back = data[REVERSED[rel]].edge_index
            assert _storage(back) == _storage(src) and torch.equal(back.as_tensor(), torch.stack([dst, src]))
    nonempty = {rel for rel, et in EDGE_TYPES.items() if data[et].num_edges}
    assert nonempty == set(EDGE_TYPES) - {"supersedes"}      # the synthetic memory has no updates


def test_hetero_data_is_a_snapshot_later_adds_leave_alone():
    """A HeteroData taken earlier keeps its sizes and values while events and edges are added
    (through reallocations); a new one sees them."""
    store, mem = _synthetic_store()
    before = store.hetero_data()
    kept = _tensors(before, clone=True)
    more = synthesize(900, load_config().graph, seed=1)
    rows = event_rows(more, 0, 900)
    for r in rows:
        r.stream, r.source_id = "later " + r.stream, None
    bulk.add_events(store, rows, more.embeddings, tokens=[[]] * 900)
    n = len(store.events)
    bulk.add_links(store, semantic=(torch.arange(2000, n), torch.arange(0, n - 2000), torch.ones(n - 2000)))
    after = store.hetero_data()
    assert after["event"].num_nodes == n == 2900 and before["event"].num_nodes == 2000
    assert after[EDGE_TYPES["semantic"]].num_edges == before[EDGE_TYPES["semantic"]].num_edges + 900
    assert kept.keys() == _tensors(before).keys() and len(kept) == 4 + 2 * (len(EDGE_TYPES) + len(REVERSED))
    for key, now in _tensors(before).items():
        assert torch.equal(now, kept[key]), key


def test_pyg_hetero_example_runs_a_hetero_graphsage_on_mem_graph(capsys):
    """experiments/pyg_hetero_example.py: to_hetero(GraphSAGE) gives every node of every type an
    embedding of the requested width, and the output depends on the edges."""
    example = experiment_script(ROOT / "experiments" / "pyg_hetero_example.py")
    out = example.main(["--hidden", "16", "--layers", "2"])
    printed = capsys.readouterr().out
    assert "HeteroData" in printed and "nearest by GNN embedding" in printed
    with example.build_memory() as mem:
        data = mem.graph
        stats = mem.stats()
    assert {t: h.shape for t, h in out.items()} == {"event": (stats["events"], 16), "entity": (stats["entities"], 16),
                                                   "episode": (stats["episodes"], 16)}
    assert all(torch.isfinite(h).all() for h in out.values())
    assert torch.allclose(example.node_embeddings(data, 16, 2)["event"], out["event"])
    del data[EDGE_TYPES["temporal"]]
    assert not torch.allclose(example.node_embeddings(data, 16, 2)["event"], out["event"])


def test_readme_graph_example_runs_as_written():
    """README's "The graph as PyG" block on a small memory: its model runs on every node type."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
                 if "mem.graph" in b)
    mem = MagmaMemory()
    mem.add_many(records(load_demo()[0])[:30])
    scope = {"mem": mem}
    exec(compile(block, "README.md", "exec"), scope)
    data, model = scope["data"], scope["model"]
    with torch.no_grad():
        out = model(data.x_dict, data.edge_index_dict)
    assert {t: h.shape for t, h in out.items()} == {t: (data[t].num_nodes, 64) for t in data.node_types}
    assert data["event"].num_nodes == 30
    mem.close()
