"""Tokenizer built from a GGUF's vocabulary or a `tokenizer.json`, with the chat template.

Encoding uses the `tokenizers` library. Decoding goes through each token's raw bytes
(`token_bytes`), which the incremental detokeniser needs to emit only whole characters.
Only byte-level BPE (GGUF `tokenizer.ggml.model == "gpt2"`) is supported for now.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from engine.chat_template import CHATML, render_chat
from engine.detokenizer import IncrementalDetokenizer, decode_all

# llama.cpp pre-tokenizer names whose regex splits digits one by one before GPT-2's.
_DIGIT_SPLITTING_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell"}
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable stand-in character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


@dataclass(frozen=True)
class TokenizerInfo:
    """What the model file says beyond the vocabulary (kept next to the cached JSON)."""

    bos_id: int | None
    eos_ids: tuple[int, ...]
    add_bos: bool
    chat_template: str | None


class Tokenizer:
    def __init__(self, hf: HFTokenizer, info: TokenizerInfo) -> None:
        self.hf = hf
        self.info = info
        vocab = hf.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        self.special_ids = frozenset(
            i for i, t in hf.get_added_tokens_decoder().items() if t.special
        )
        self.token_bytes = _token_bytes(vocab, self.special_ids, self.vocab_size)

    # -- construction ----------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"unsupported GGUF tokenizer {kind!r} (only byte-level BPE)")
        tokens: list[str] = meta["tokenizer.ggml.tokens"]
        types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
        hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if meta.get("tokenizer.ggml.pre") in _DIGIT_SPLITTING_PRE:
            hf.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True), byte_level]
            )
        else:
            hf.pre_tokenizer = byte_level
        hf.decoder = decoders.ByteLevel()
        specials = [
            AddedToken(t, special=True, normalized=False)
            for t, ty in zip(tokens, types, strict=True)
            if ty in (_GGUF_CONTROL, _GGUF_USER_DEFINED)
        ]
        hf.add_special_tokens(specials)
        bos = meta.get("tokenizer.ggml.bos_token_id")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        info = TokenizerInfo(
            bos_id=None if bos is None else int(bos),
            eos_ids=() if eos is None else (int(eos),),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=meta.get("tokenizer.chat_template"),
        )
        return cls(hf, info)

    @classmethod
    def from_hf_dir(cls, model_dir: Path) -> Tokenizer:
        hf = HFTokenizer.from_file(str(model_dir / "tokenizer.json"))
        cfg = _read_json(model_dir / "tokenizer_config.json")
        gen = _read_json(model_dir / "generation_config.json")
        vocab = hf.get_vocab(with_added_tokens=True)

        def token_id(value: Any) -> int | None:
            if isinstance(value, dict):
                value = value.get("content")
            return vocab.get(value) if isinstance(value, str) else None

        eos = gen.get("eos_token_id", token_id(cfg.get("eos_token")))
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        bos = token_id(cfg.get("bos_token"))
        template = cfg.get("chat_template")
        if template is None and (model_dir / "chat_template.jinja").exists():
            template = (model_dir / "chat_template.jinja").read_text()
        info = TokenizerInfo(
            bos_id=bos,
            eos_ids=tuple(int(e) for e in eos_ids),
            add_bos=bool(cfg.get("add_bos_token", False)) and bos is not None,
            chat_template=template if isinstance(template, str) else None,
        )
        return cls(hf, info)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tokenizer.json").write_text(self.hf.to_str())
        (directory / "tokenizer_info.json").write_text(json.dumps(self.info.__dict__))

    @classmethod
    def load(cls, directory: Path) -> Tokenizer:
        hf = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        raw = json.loads((directory / "tokenizer_info.json").read_text())
        raw["eos_ids"] = tuple(raw["eos_ids"])
        return cls(hf, TokenizerInfo(**raw))

    # -- use -------------------------------------------------------------------------

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        ids = self.hf.encode(text, add_special_tokens=False).ids
        if (self.info.add_bos if add_bos is None else add_bos) and self.info.bos_id is not None:
            ids = [self.info.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        skip = self.special_ids if skip_special else frozenset()
        return decode_all(self.token_bytes, ids, skip)

    def detokenizer(self) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self.token_bytes, self.special_ids)

    def render_chat(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True
    ) -> str:
        def text(i: int | None) -> str:
            return "" if i is None else self.hf.id_to_token(i) or ""

        return render_chat(
            self.info.chat_template or CHATML,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=text(self.info.bos_id),
            eos_token=text(self.info.eos_ids[0] if self.info.eos_ids else None),
        )

    def encode_chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Rendered templates carry their own BOS when the model wants one."""
        return self.encode(self.render_chat(messages), add_bos=False)


def _token_bytes(vocab: Mapping[str, int], special: frozenset[int], size: int) -> list[bytes]:
    table = [b""] * size
    dec = _byte_decoder()
    for token, i in vocab.items():
        if i in special or any(c not in dec for c in token):
            table[i] = token.encode("utf-8")
        else:
            table[i] = bytes(dec[c] for c in token)
    return table


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}
