"""`pdserve generate`: offline generation in one process (no cluster needed)."""

from __future__ import annotations

import argparse
import sys

from engine.errors import InvalidRequest
from engine.llm_engine import LLMEngine
from engine.model_source import DEFAULT_MODEL
from engine.sampling_params import SamplingParams


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="generate text from a prompt in this process",
        description="Generate text in this process. Without --prompt, chat interactively "
        "(one line per turn, an empty line or Ctrl-D ends).",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"alias, local .gguf file or HF directory (default: {DEFAULT_MODEL})",
    )
    p.add_argument("--prompt", help="the prompt; omit for an interactive chat")
    p.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt as a user message in the model's chat template",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="tokens to generate at most")
    p.add_argument("--temperature", type=float, default=0.7, help="0 for greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    p.add_argument("--seed", type=int, default=None, help="same seed, same output")
    p.add_argument("--stream", action="store_true", help="print text as it is generated")
    p.add_argument("--kv-cache-gb", type=float, default=1.0, help="paged KV cache size")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cluster.progress import load_with_progress
    from engine.llm_engine import EngineConfig

    try:
        params = SamplingParams(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        )
    except ValueError as e:
        print(f"pdserve generate: {e}", file=sys.stderr)
        return 2
    engine = LLMEngine(load_with_progress(args.model), EngineConfig(kv_cache_gb=args.kv_cache_gb))
    if args.prompt is None:
        return _interactive(engine, params, stream=True)
    tok = engine.tokenizer
    messages = [{"role": "user", "content": args.prompt}]
    ids = tok.encode_chat(messages) if args.chat else tok.encode(args.prompt)
    try:
        _respond(engine, ids, params, stream=args.stream)
    except InvalidRequest as e:
        print(f"pdserve generate: {e}", file=sys.stderr)
        return 2
    return 0


def _respond(engine: LLMEngine, ids: list[int], params: SamplingParams, stream: bool) -> str:
    rid = engine.add_request(ids, params)
    parts = []
    for out in engine.stream(rid):
        parts.append(out.text)
        if stream:
            print(out.text, end="", flush=True)
    text = "".join(parts)
    print("" if stream else text, flush=True)
    return text


def _interactive(engine: LLMEngine, params: SamplingParams, stream: bool) -> int:
    messages: list[dict[str, str]] = []
    print("Chatting with the model; an empty line or Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        messages.append({"role": "user", "content": line})
        try:
            reply = _respond(engine, engine.tokenizer.encode_chat(messages), params, stream)
        except InvalidRequest as e:
            print(f"(conversation too long, starting over: {e})", file=sys.stderr)
            messages.clear()
            continue
        messages.append({"role": "assistant", "content": reply})
    return 0
