"""A rank that must stop alone in the middle of a step takes every other rank with it, at once, with its line.

A CUDA out-of-memory error happens on one rank, anywhere in a training step: in the forward pass, in the
backward pass after DDP has all-reduced some of its gradient buckets, in the optimizer step. The other ranks
are then waiting, or about to wait, in a collective this rank will never join, so no agreement inside the
process group can reach them (the loop's per-iteration agreement comes before the step). The rank therefore
announces its line out of band, in the process group's store (`depart`), and every rank runs a thread from the
start of training (`watch`) that looks for the announcement twice a second: on seeing it, the thread says the
same line on its stderr, acknowledges it and ends its process with the line's exit code, wherever the main
thread is (a collective, a GPU wait). The announcing rank waits for the acknowledgements (at most ACK_S
seconds), then says it has them, and leaves the same way; the others leave once it has said so. Rank 0
hosts the store (unless a launcher's agent does): no rank leaves while another still reads it from rank 0,
so a departing rank 0 also waits for the others to say they have stopped reading it.

Why ending the others at once leaves nothing half-written: checkpoints are written by rank 0 between two
collectives that every rank joins (it gathers the random states, writes, then broadcasts the outcome), so no
rank can be inside a step while a checkpoint is written. At most a log or history line being written by rank
0 at that moment is cut short. Failures that every rank meets together (a validation's out-of-memory error,
agreed in the evaluation's per-round gather) leave through the normal path instead.
"""
import json
import os
import sys
import threading
import time
from typing import Any, Optional

import torch.distributed as dist

from utils.errors import say

POLL_S = 0.5   # how often each rank looks for an announcement
ACK_S = 30.0   # how long the announcing rank waits for the others to have read it
KEY, ACKS, DONE, LEFT = (f'restoration/departure{k}' for k in ('', '_acks', '_done', '_left'))

_departed = False
_watcher: Optional['_Watcher'] = None
# set once this rank's watcher follows another rank's departure: the process ends with that rank's line and code
_following = threading.Event()


class _Watcher:
    """The thread that ends this process when another rank announces its departure."""

    def __init__(self, store: Any, poll_s: float):
        self.store, self.poll_s = store, poll_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, name='rank-departure', daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(self.poll_s):
            try:
                if not self.store.check([KEY]):
                    continue
                announced = self.store.get(KEY)
            except Exception:  # the store is gone (rank 0 ended): nothing more can be announced
                return
            if _departed or self.done.is_set():
                return  # this rank's own announcement, or the run is over
            _, code, line = json.loads(announced)
            self.leave(code, line)

    def leave(self, code: int, line: str) -> None:
        """Say the departed rank's line, acknowledge it, and end this process with its code once the departed
        rank has counted the acknowledgements (rank 0 hosts the store: leaving earlier would break its count)."""
        _following.set()
        say(f'error: {line}')
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            self.store.add(ACKS, 1)
            deadline = time.monotonic() + ACK_S
            while not self.store.check([DONE]) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.store.add(LEFT, 1)  # the last use of the store: its host may leave once every rank said so
        except Exception:  # the departed rank hosted the store and has left
            pass
        os._exit(code)


def watch(poll_s: float = POLL_S) -> None:
    """Every rank of a process group, once, at the start of training: start looking for departures."""
    global _watcher
    if dist.is_available() and dist.is_initialized() and _watcher is None:
        _watcher = _Watcher(dist.group.WORLD.get_group_store(), poll_s)


def stop_watching() -> None:
    """The run is ending normally (or together): no departure can come any more."""
    global _watcher
    if _watcher is not None:
        _watcher.done.set()
        _watcher = None


def depart(line: str, code: int, ack_s: float = ACK_S) -> None:
    """This rank stops alone with `line` and exit code `code`: announce them to every rank and wait (at most
    `ack_s`) until each has read them. Without a process group (or before `watch`) there is nobody to tell."""
    global _departed
    if _watcher is None:
        return
    _departed = True
    store, others = _watcher.store, dist.get_world_size() - 1
    try:
        store.set(KEY, json.dumps([dist.get_rank(), code, line]))
        deadline = time.monotonic() + ack_s
        while store.add(ACKS, 0) < others and time.monotonic() < deadline:
            time.sleep(0.05)
        store.set(DONE, '1')
        if dist.get_rank() == 0:  # the store's host (unless a launcher's agent hosts it): the others read it still
            while store.add(LEFT, 0) < others and time.monotonic() < deadline:
                time.sleep(0.05)
    except Exception:  # the store is gone: the others learn it from their next collective
        pass


def await_departure(timeout_s: float = ACK_S + 5) -> None:
    """On an error in the main thread: if this process is following another rank's departure, wait for the watcher
    to end it with that rank's line and code. The departed rank leaves once this one has acknowledged, which closes
    the connections of the collective the main thread waits in: the error that follows ("Connection closed by
    peer") is the departure, not a crash of its own, and its traceback must not race the watcher's exit."""
    if _following.is_set():
        time.sleep(timeout_s)  # the watcher's os._exit ends the process first


def departed() -> bool:
    """Whether this rank announced its departure: it leaves without meeting the others again."""
    return _departed

