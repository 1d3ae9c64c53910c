"""A tiny, randomly initialised XTTS-v2, written in the layout of the real release.

No real XTTS weights may be downloaded here, so the tests build one: the real
architecture (GPT-2 with the perceiver conditioning of v2, the HiFi-GAN decoder
and its speaker encoder) with a 2-layer, 32-wide GPT and a vocabulary of single
characters. It speaks noise, but it loads, clones and streams through exactly
the code a real model goes through. Files: config.json, model.pth, vocab.json,
speakers_xtts.pth.
"""

from __future__ import annotations

import json
import logging
import string
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import Whitespace
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
from TTS.tts.models.xtts import Xtts

SPEAKERS = ("Claribel Dervla", "Daisy Studious")
# Audio tokens the GPT writes per sentence: it never stops early, so always MAX_AUDIO_TOKENS - 3.
MAX_AUDIO_TOKENS = 35
# Input samples (at 22.05 kHz) per audio token: 1024 in the real model, 128 here for a quicker HiFi-GAN.
CODE_STRIDE = 128
LANGUAGES = [
    "en", "es", "fr", "de", "it", "pt", "pl", "tr", "ru", "nl", "cs", "ar", "zh-cn", "hu", "ko", "ja", "hi",
]  # fmt: skip


def write_vocab(path: Path) -> None:
    """A BPE tokenizer file like the real vocab.json, with single characters and no merges."""
    special = ["[STOP]", "[UNK]", "[SPACE]"] + [f"[{code}]" for code in LANGUAGES]
    chars = sorted(set(string.ascii_lowercase + string.digits + ".,!?'-:;\"()"))
    vocab = {token: index for index, token in enumerate(special + chars)}
    vocab["[START]"] = len(vocab)
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.add_special_tokens(special + ["[START]"])
    tokenizer.save(str(path))


def tiny_config() -> XttsConfig:
    config = XttsConfig()
    config.languages = list(LANGUAGES)
    args = config.model_args
    # as in the real XTTS-v2 config.json
    args.gpt_use_perceiver_resampler = True
    args.gpt_num_audio_tokens = 1026
    args.gpt_start_audio_token = 1024
    args.gpt_stop_audio_token = 1025
    # shrunk
    args.gpt_layers = 2
    args.gpt_n_model_channels = 32
    args.gpt_n_heads = 2
    args.gpt_max_audio_tokens = MAX_AUDIO_TOKENS
    args.gpt_code_stride_len = CODE_STRIDE
    args.decoder_input_dim = 32
    # conditioning on the first 4 s only (30 s in the real model), so cloning is quick on a CPU
    config.gpt_cond_len = 4
    config.gpt_cond_chunk_len = 4
    config.max_ref_len = 4
    return config


def build(folder: Path, seed: int = 0) -> Path:
    """Write a tiny XTTS-v2 into `folder` (created) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    write_vocab(folder / "vocab.json")
    config = tiny_config()
    quiet = logging.getLogger("transformers.configuration_utils")  # GPT-2's stock bos/eos ids: harmless
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        model = Xtts(config)
        model.tokenizer = VoiceBpeTokenizer(vocab_file=folder / "vocab.json")
        model.init_models()
    finally:
        quiet.setLevel(level)
    with torch.no_grad():
        # Never stop early, so every sentence has the full MAX_AUDIO_TOKENS and streams in several pieces.
        model.gpt.mel_head.bias[config.model_args.gpt_stop_audio_token] = -1e4
        model.mel_stats.uniform_(0.5, 1.5)
    state = {key: value for key, value in model.state_dict().items() if not key.startswith("gpt.gpt_inference")}
    torch.save({"model": state, "config": config.to_dict()}, folder / "model.pth")
    dim = config.model_args.gpt_n_model_channels
    speakers = {
        name: {"gpt_cond_latent": torch.randn(1, 32, dim), "speaker_embedding": torch.randn(1, 512, 1)}
        for name in SPEAKERS
    }
    torch.save(speakers, folder / "speakers_xtts.pth")
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2), encoding="utf-8")
    return folder
