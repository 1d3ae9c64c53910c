"""Nothing leaves the house unless the user allows downloads.

Two libraries we load would otherwise reach the internet on their own, even with
every model on disk: onnxruntime (Piper) sends usage telemetry to Microsoft, and
huggingface_hub asks the Hub for a list of agents even when it only looks in its
cache. Both read their switches from the environment when they are imported or
first used, so these are set before any of them is imported.
"""

from __future__ import annotations

import os


def keep_local(allow_download: bool) -> None:
    """Telemetry off always; the Hugging Face Hub off unless `--allow-download`."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # onnxruntime
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    if not allow_download:
        os.environ["HF_HUB_OFFLINE"] = "1"  # huggingface_hub, and transformers through it (XTTS)
