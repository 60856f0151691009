"""A pre-warmed process that forks ingesting children for the kill -9 test (test_durability.py).

Run as ``python durable_child.py STORE_DIR ACK_DIR``. It loads the embedder once, prints
``ready``, then for each ``run K`` line on stdin forks a child and prints ``pid P``; when
the child is gone (killed by the test) it prints ``exit P``. Forking from a warm process
keeps a kill cheap: a child only opens the store (replaying the log), it does not import
torch or load a model. Torch runs single-threaded here, so no thread pool crosses a fork,
and tqdm's cross-process semaphore is switched off, so no lock is shared across forks.

A child opens the durable store, checks it (integrity; every event an earlier child
acknowledged adding is there unless a forget of it was acknowledged, no event whose forget was
acknowledged is, and every acknowledged update holds; the verdict goes to ``ACK_DIR/verify-K``),
then adds events until it is killed, appending a line to ``ACK_DIR/ack-K`` only after the call
returned: ``e<i>`` for an add, ``-e<i>`` for a forget (``?e<i>`` before it starts: if the kill lands
inside, either outcome is right), ``~e<i> K C`` for the update that made the text start with
"revised K C:". Now and then it adds a batch, forgets or updates an event,
consolidates (which checkpoints) or lets ``checkpoint_every`` checkpoint, so kills land in every
phase of each.
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
from magma_torch.text.embedder import Embedder  # noqa: E402

TEMPLATES = ("{who} went hiking near the lake on day {i} because the weather was nice.",
             "{who} bought a new guitar, so the band could practise on day {i}.",
             "On day {i} {who} met Carol at the library to talk about the book club.",
             "{who} felt tired after the night shift on day {i}.")

START = datetime(2024, 1, 1, tzinfo=timezone.utc)


class Ledger:
    """What the children acknowledged, in order (children run one after another; a torn last line
    is ignored): ``added`` source ids, ``forgotten`` ones, ``revision`` (K, C) of each updated one;
    ``forgetting``: added ones whose forget started, maybe not acknowledged."""

    def __init__(self, ack_dir: Path):
        self.added: set[str] = set()
        self.forgotten: set[str] = set()
        self.revision: dict[str, tuple[int, int]] = {}
        self.forgetting: set[str] = set()
        for f in sorted(ack_dir.glob("ack-*"), key=lambda p: int(p.name.split("-")[1])):
            for line in f.read_text().split("\n")[:-1]:
                if line.startswith("?"):
                    self.forgetting.add(line[1:])
                elif line.startswith("-"):
                    self.forgotten.add(line[1:])
                    self.added.discard(line[1:])
                elif line.startswith("~"):
                    sid, k, c = line[1:].split()
                    self.revision[sid] = (int(k), int(c))
                elif line:
                    self.added.add(line)

    def problems(self, mem: MagmaMemory) -> list[str]:
        """Acknowledged adds missing, acknowledged forgets back, acknowledged updates lost."""
        held = mem.store.events.by_source
        missing = self.added - self.forgetting - set(held)
        out = [f"missing {sorted(missing)[:10]}"] if missing else []
        if self.forgotten & set(held):
            out.append(f"forgotten but back {sorted(self.forgotten & set(held))[:10]}")
        for sid, rev in self.revision.items():
            if sid in held and revision_of(mem.store.events.rows[held[sid]].text) < rev:
                out.append(f"update of {sid} to revision {rev} lost: {mem.store.events.rows[held[sid]].text!r}")
            elif sid not in held and sid not in self.forgotten | self.forgetting:
                out.append(f"updated {sid} missing")
        return out


def revision_of(text: str) -> tuple[int, int]:
    if not text.startswith("revised "):
        return (-1, -1)
    k, c = text[len("revised "):].split(":")[0].split()
    return (int(k), int(c))


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
    ledger = Ledger(ack_dir)
    try:
        mem.check()
        found = ledger.problems(mem)
        verdict = "; ".join(found) if found else f"ok {len(mem.store)}"
    except Exception as err:  # the verdict file carries it to the test
        verdict = f"check failed: {err}"
    # whole or absent: a kill between write_text's open and its write left an empty verdict behind
    (ack_dir / f".verify-{k}").write_text(verdict + "\n")
    os.replace(ack_dir / f".verify-{k}", ack_dir / f"verify-{k}")
    fd = os.open(ack_dir / f"ack-{k}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    # past every index ever used: a forgotten source id is never added again
    i = 1 + max((int(sid[1:]) for sid in {*mem.store.events.by_source, *ledger.added, *ledger.forgotten}),
                default=-1)
    revisions = 0
    while True:
        r = rng.random()
        if r < 0.12 and len(mem.store) > 3:
            sid = rng.choice(sorted(mem.store.events.by_source))
            if rng.random() < 0.5:
                os.write(fd, f"?{sid}\n".encode())
                mem.forget(source_ids=[sid])
                os.write(fd, f"-{sid}\n".encode())
            else:
                revisions += 1
                event = mem.store.events.ids[mem.store.events.by_source[sid]]
                mem.update(event, text=f"revised {k} {revisions}: {record(int(sid[1:]))['text']}")
                os.write(fd, f"~{sid} {k} {revisions}\n".encode())
            continue
        if r < 0.2:
            recs = [record(j) for j in range(i, i + 3)]
            mem.add_many(recs)
            os.write(fd, "".join(x["source_id"] + "\n" for x in recs).encode())
            i += 3
            continue
        if r < 0.23:
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
