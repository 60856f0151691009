"""A pre-warmed process that forks ingesting children for the kill -9 test (test_durability.py).

Run as ``python durable_child.py STORE_DIR ACK_DIR``. It loads the embedder once, prints
``ready``, then for each ``run K`` line on stdin forks a child and prints ``pid P``; when
the child is gone (killed by the test) it prints ``exit P``. Forking from a warm process
keeps a kill cheap: a child only opens the store (replaying the log), it does not import
torch or load a model. Torch runs single-threaded here, so no thread pool crosses a fork,
and tqdm's cross-process semaphore is switched off, so no lock is shared across forks.

A child opens the durable store, checks it (integrity, and that every event an earlier
child acknowledged is there; the verdict goes to ``ACK_DIR/verify-K``), then adds events
until it is killed, appending each event's source id to ``ACK_DIR/ack-K`` only after its
``add`` returned. Now and then it adds a batch, consolidates (which checkpoints) or lets
``checkpoint_every`` checkpoint, so kills land in every phase.
"""
from __future__ import annotations

import os
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import torch
from tqdm.std import TqdmDefaultWriteLock

torch.set_num_threads(1)
# tqdm's write lock includes a multiprocessing semaphore that forked children share: a child
# killed while holding it (bm25s tokenising shows a bar) would block every later child. Keep
# only tqdm's per-process thread lock; set before any bar exists.
TqdmDefaultWriteLock.mp_lock = None

from magma_torch import MagmaMemory  # noqa: E402  (after the thread setting, before any fork)
from magma_torch.config import load_group  # noqa: E402
from magma_torch.ingest.embedder import Embedder  # noqa: E402

TEMPLATES = ("{who} went hiking near the lake on day {i} because the weather was nice.",
             "{who} bought a new guitar, so the band could practise on day {i}.",
             "On day {i} {who} met Carol at the library to talk about the book club.",
             "{who} felt tired after the night shift on day {i}.")

START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def acked(ack_dir: Path) -> set[str]:
    """Source ids whose ``add`` returned, over all children (a torn last line is ignored)."""
    out = set()
    for f in ack_dir.glob("ack-*"):
        out.update(line for line in f.read_text().split("\n")[:-1] if line)
    return out


def record(i: int) -> dict:
    who = ("Ann", "Bob")[i % 2]
    return {"text": TEMPLATES[i % len(TEMPLATES)].format(who=who, i=i),
            "timestamp": (START + timedelta(minutes=i)).isoformat(), "speaker": who, "source_id": f"e{i}",
            "stream": f"s{i % 3}"}


def child(store_dir: Path, ack_dir: Path, k: int, embedder: Embedder) -> None:
    rng = random.Random(k)
    cfg = load_group("memory", "magma")
    cfg.durability.checkpoint_every = rng.randint(3, 12)
    mem = MagmaMemory(cfg, store_dir=store_dir, durable=True, embedder=embedder)
    missing = acked(ack_dir) - set(mem.store.events.by_source)
    try:
        mem.check()
        verdict = f"missing {sorted(missing)[:10]}" if missing else f"ok {len(mem.store)}"
    except Exception as err:  # the verdict file carries it to the test
        verdict = f"check failed: {err}"
    (ack_dir / f"verify-{k}").write_text(verdict + "\n")
    fd = os.open(ack_dir / f"ack-{k}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    i = len(mem.store)
    while True:
        r = rng.random()
        if r < 0.1:
            recs = [record(j) for j in range(i, i + 3)]
            mem.add_many(recs)
            os.write(fd, "".join(x["source_id"] + "\n" for x in recs).encode())
            i += 3
            continue
        if r < 0.13:
            mem.consolidate()
        rec = record(i)
        mem.add(**rec)
        os.write(fd, (rec["source_id"] + "\n").encode())
        i += 1


def main() -> None:
    store_dir, ack_dir = Path(sys.argv[1]), Path(sys.argv[2])
    embedder = Embedder(device="cpu")
    print("ready", flush=True)
    for line in sys.stdin:
        k = int(line.split()[1])
        pid = os.fork()
        if pid == 0:
            try:
                child(store_dir, ack_dir, k, embedder)
            finally:
                os._exit(1)
        print(f"pid {pid}", flush=True)
        os.waitpid(pid, 0)
        print(f"exit {pid}", flush=True)


if __name__ == "__main__":
    main()
