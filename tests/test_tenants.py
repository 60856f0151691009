"""Tenant isolation: namespaces are separate memories (folders, logs, indexes, graphs).

Two tenants hold near-identical conversations (the same demo turns, a few words changed)
and are written to interleaved in one store_dir; every retrieval in one must equal, to the
last score and path, the retrieval of a memory built from that tenant's events alone."""
import pytest

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets import load_demo
from magma_torch.text.embedder import Embedder


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def tenant_records(tenant: str) -> list[dict]:
    out = []
    for s in load_demo():
        for t in s.turns:
            text = t.text if tenant == "alice" else t.text.replace("the", "this").replace("I ", "We ")
            out.append({"text": text, "timestamp": t.timestamp, "speaker": t.speaker, "session_id": t.session_id,
                        "source_id": f"{tenant}:{s.sample_id}/{t.source_id}", "stream": s.sample_id})
    return out


def config():
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    return cfg


def fingerprint(r):
    return (r.intent, [(n.id, n.text, n.score, tuple(n.source_ids)) for n in r.nodes], r.paths, r.context)


def test_namespaces_never_see_or_shift_each_other(embedder, tmp_path):
    recs = {t: tenant_records(t) for t in ("alice", "bob")}
    questions = [q for s in load_demo() for q in s.questions][::5]
    texts, times = [q.question for q in questions], [q.query_time for q in questions]
    shared = {t: MagmaMemory(config(), store_dir=tmp_path, durable=True, namespace=t, embedder=embedder)
              for t in recs}
    for a in range(0, len(recs["alice"]), 70):  # interleaved writes, consolidation and checkpoints
        for t, mem in shared.items():
            mem.add_many(recs[t][a:a + 70])
            mem.consolidate()
    for mem in shared.values():
        mem.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice", "bob"]
    for tenant, other in (("alice", "bob"), ("bob", "alice")):
        with MagmaMemory(config(), embedder=embedder) as alone:
            for a in range(0, len(recs[tenant]), 70):
                alone.add_many(recs[tenant][a:a + 70])
                alone.consolidate()
            expected = [fingerprint(r) for r in alone.retrieve_batch(texts, times)]
        with MagmaMemory(store_dir=tmp_path, durable=True, namespace=tenant, embedder=embedder) as mem:
            assert mem.stats()["events"] == len(recs[tenant])
            got = mem.retrieve_batch(texts, times)
            assert [fingerprint(r) for r in got] == expected  # same nodes, scores, paths, context
            sources = {s for r in got for n in r.nodes for s in n.source_ids}
            assert sources and not any(s.startswith(other) for s in sources)
            assert not any(other in line for r in got for line in r.context.split("\n"))
            visited = {v for r in got for p in r.paths for v in (p.src, p.dst)}
            assert visited <= set(range(len(recs[tenant])))


def test_a_tenant_folder_opened_as_another_tenant_is_refused(embedder, tmp_path):
    with MagmaMemory(config(), store_dir=tmp_path, durable=True, namespace="alice", embedder=embedder) as mem:
        mem.add("hello", "2024-01-01")
    (tmp_path / "alice").rename(tmp_path / "mallory")
    with pytest.raises(ValueError, match="holds namespace 'alice', opened as 'mallory'"):
        MagmaMemory(store_dir=tmp_path, durable=True, namespace="mallory", embedder=embedder)
