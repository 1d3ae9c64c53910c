"""Where models run (device, precision, threads), resolved once from the settings; and where one model runs with how
many of its calls at once (`Placement`), which each engine is built with."""

from __future__ import annotations

from dataclasses import dataclass

import ctranslate2

from .config import CoreSettings
from .scheduler import Scheduler


@dataclass(frozen=True)
class Runtime:
    device: str  # "cpu" or "cuda"
    device_index: int
    compute_type: str  # for CTranslate2
    cpu_threads: int

    @classmethod
    def from_settings(cls, settings: CoreSettings) -> Runtime:
        device, _, index = settings.device.partition(":")
        if device == "auto":
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        compute_type = settings.compute_type
        if compute_type == "default":
            compute_type = "float16" if device == "cuda" else "int8"
        return cls(device, int(index or 0), compute_type, settings.threads)


@dataclass(frozen=True)
class Placement:
    """Where a model runs, and how many of its calls at once: `workers` in its scheduler's threads, at most
    `queue_size` more waiting."""

    runtime: Runtime
    workers: int
    queue_size: int

    @property
    def worker_threads(self) -> int:
        """CPU threads for each worker's calls: the model's threads shared among its workers, so that its calls
        side by side never run more threads than the model has (on two cores, one thread a worker gave Whisper
        17 % more throughput under 8 clients, and its search alone is faster on one thread: BENCHMARKS.md)."""
        return max(1, self.runtime.cpu_threads // self.workers)

    def scheduler(self, engine: str, model: str) -> Scheduler:
        """The model's queue, named `engine-model` and labelled with both in the metrics, as every engine's is."""
        return Scheduler(f"{engine}-{model}", self.workers, self.queue_size, engine=engine, model=model)
