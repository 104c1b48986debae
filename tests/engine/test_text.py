"""Tokenizer, chat template, incremental detokeniser and stop strings."""

from __future__ import annotations

import pytest

from engine.chat_template import ChatTemplateError, render_chat
from engine.detokenizer import IncrementalDetokenizer
from engine.stop_strings import StopStringMatcher

TEXTS = [
    "Hello, world!",
    "Numbers 1234567 and 3.14159",
    "Ünïcödé: naïve café, 日本語のテキスト, 中文, Ελληνικά, русский, עברית, العربية",
    "Emoji 🙂👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵",
    "  leading and trailing spaces  \n\ttabs\n\nnewlines ",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>",
]


@pytest.fixture(scope="module")
def hf_tokenizer(smol):
    from transformers import AutoTokenizer

    path = smol.source.path
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_matches_transformers_gguf_tokenizer(smol, hf_tokenizer, text):
    assert smol.tokenizer.encode(text) == hf_tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_detokeniser_round_trips_and_never_splits_a_character(smol, text):
    tok = smol.tokenizer
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok.token_bytes)  # nothing skipped: exact round trip
    deltas = [detok.push(i) for i in ids] + [detok.flush()]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_multibyte_characters_span_several_tokens(smol):
    """Guards the test above: some emoji really are split across tokens."""
    tok = smol.tokenizer
    ids = tok.encode("👨‍👩‍👧‍👦")
    partial = [tok.token_bytes[i] for i in ids]
    assert any(_incomplete_utf8(b) for b in partial)


def _incomplete_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_invalid_bytes_become_replacement_at_the_end():
    detok = IncrementalDetokenizer([b"\xf0\x9f", b"ok"])
    assert detok.push(0) == ""
    assert detok.push(1) == "\ufffdok"
    assert detok.flush() == ""


def test_special_tokens_are_skipped_in_output(smol):
    tok = smol.tokenizer
    ids = tok.encode("<|im_start|>hi<|im_end|>")
    assert len(ids) == 3
    assert tok.decode(ids) == "hi"
    assert tok.decode(ids, skip_special=False) == "<|im_start|>hi<|im_end|>"


def test_chat_template_renders_smollm2_format(smol):
    text = smol.tokenizer.render_chat([{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")  # the model's default system prompt


def test_chat_template_errors_are_typed():
    with pytest.raises(ChatTemplateError, match="no system"):
        render_chat("{{ raise_exception('no system') }}", [])
    with pytest.raises(ChatTemplateError):
        render_chat("{{ messages[0]['content'] }", [{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("stops", "pieces", "emitted", "hit"),
    [
        (["STOP"], ["hello ", "ST", "OP and more"], "hello ", True),
        (["STOP"], ["hello ", "ST", "ay"], "hello STay", False),
        (["\n\n", "END"], ["a\n", "\nb"], "a", True),
        ([], ["anything"], "anything", False),
        (["abc"], ["xxab"], "xx", False),  # "ab" is held back until decided
    ],
)
def test_stop_strings(stops, pieces, emitted, hit):
    m = StopStringMatcher(stops)
    out, stopped = "", False
    for p in pieces:
        text, stopped = m.push(p)
        out += text
        if stopped:
            break
    assert out == emitted and stopped == hit
