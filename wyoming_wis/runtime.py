"""Where models run (device, precision, threads), resolved once from the settings."""

from __future__ import annotations

from dataclasses import dataclass

import ctranslate2

from .config import CoreSettings


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
