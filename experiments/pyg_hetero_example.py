"""A PyG heterogeneous GNN on a memory's live multigraph (``mem.graph``).

Builds a memory from the first demo conversation, takes ``mem.graph`` (a zero-copy
``HeteroData`` of its event, entity and episode nodes and every relation), and runs an
untrained ``to_hetero(GraphSAGE)`` over all edge types: one embedding per node of every
type, mixing each event with its temporal, semantic, causal, entity and episode
neighbourhoods. It then ranks the events whose GNN embedding is closest to one event's.
Nothing is trained; it shows that PyG models run on the memory as it is stored.

    python experiments/pyg_hetero_example.py [--hidden 64] [--layers 2]
"""
from __future__ import annotations

import argparse

import torch
from torch_geometric.nn import GraphSAGE, to_hetero

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_demo
from magma_torch.eval.runner import records


def build_memory() -> MagmaMemory:
    mem = MagmaMemory()
    mem.add_many(records(load_demo()[0]))
    mem.consolidate()           # the slow path's entity and causal edges are in the graph now
    return mem


def node_embeddings(data, hidden: int, layers: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """An untrained GraphSAGE, made heterogeneous over the graph's node and edge types."""
    torch.manual_seed(seed)
    model = to_hetero(GraphSAGE((-1, -1), hidden, layers, hidden), data.metadata(), aggr="sum")
    with torch.no_grad():     # not inference_mode: EdgeIndex's views cannot be taken of inference tensors
        return model(data.x_dict, data.edge_index_dict)


def main(argv: list[str] | None = None) -> dict[str, torch.Tensor]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=64, help="GraphSAGE width")
    ap.add_argument("--layers", type=int, default=2, help="GraphSAGE layers (hops of message passing)")
    args = ap.parse_args(argv)
    with build_memory() as mem:
        data = mem.graph
        print(data)
        out = node_embeddings(data, args.hidden, args.layers)
        for node_type, h in out.items():
            print(f"{node_type:8s} {tuple(data[node_type].x.shape)} -> {tuple(h.shape)}")
        rows = mem.store.events.rows
        h = torch.nn.functional.normalize(out["event"], dim=1)
        near = (h @ h[0]).topk(min(4, h.shape[0])).indices.tolist()[1:]
        print(f"event 0: {rows[0].text!r}\nnearest by GNN embedding: {[rows[i].text for i in near]}")
    return out


if __name__ == "__main__":
    main()
