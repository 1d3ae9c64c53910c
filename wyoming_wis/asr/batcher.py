"""Micro-batching: pieces that wait for a worker are decoded together in one call.

CTranslate2 decodes a batch of windows for little more than the cost of one:
the decoder's matrix products are too small to keep the CPU or GPU busy one
sequence at a time. Requests arriving together queue here; whichever worker
thread is free takes the oldest piece and every waiting piece that can share
its call, so under load each call carries more audio, and with one client a
piece never waits for company.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass, field

from .decoder import Decoded, Job

_LOGGER = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    """One job's place in the queue, and later its result."""

    job: Job
    done: threading.Event = field(default_factory=threading.Event)
    result: Decoded | None = None
    error: BaseException | None = None


class Batcher:
    def __init__(self, decode: Callable[[list[Job]], list[Decoded]], max_batch: int) -> None:
        self._decode = decode
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[Slot] = []
        self.sizes: Counter[int] = Counter()  # batches decoded, by size

    def submit(self, jobs: Sequence[Job]) -> list[Slot]:
        slots = [Slot(job) for job in jobs]
        with self._lock:
            self._waiting.extend(slots)
        return slots

    def cancel(self, slots: Sequence[Slot]) -> None:
        """Drop jobs nobody waits for any more; ones already being decoded finish anyway.

        A dropped job is done, with an error: the worker thread of its request may be decoding another batch
        and come back for it.
        """
        gone = set(slots)
        with self._lock:
            dropped = [slot for slot in self._waiting if slot in gone]
            self._waiting = [slot for slot in self._waiting if slot not in gone]
        for slot in dropped:
            slot.error = CancelledError()
            slot.done.set()

    def process(self, slots: Sequence[Slot]) -> list[Decoded]:
        """Decode until all of `slots` are done, taking other waiting jobs along; blocking.

        Each request calls this once in a worker thread. The batches it decodes
        may hold other requests' jobs, and its own may be decoded by another
        worker, in which case it waits for them.
        """
        for slot in slots:
            while not slot.done.is_set():
                batch = self._take()
                if batch:
                    self._run(batch)
                else:
                    slot.done.wait()  # another worker has it
        for slot in slots:
            if slot.error is not None:
                raise slot.error
        return [slot.result for slot in slots]  # type: ignore[misc]

    def _take(self) -> list[Slot]:
        """The oldest waiting job and up to max_batch - 1 others that fit its call."""
        with self._lock:
            if not self._waiting:
                return []
            key = self._waiting[0].job.batch_key
            batch = [slot for slot in self._waiting if slot.job.batch_key == key][: self.max_batch]
            self._waiting = [slot for slot in self._waiting if slot not in batch]
            return batch

    def _run(self, batch: list[Slot]) -> None:
        self.sizes[len(batch)] += 1
        _LOGGER.debug("Decoding a batch of %d pieces", len(batch))
        try:
            results = self._decode([slot.job for slot in batch])
            for slot, result in zip(batch, results, strict=True):
                slot.result = result
        except BaseException as err:  # noqa: BLE001 - every waiter must hear of it
            for slot in batch:
                slot.error = err
        finally:
            for slot in batch:
                slot.done.set()
