"""Chat templates (the Jinja text shipped with a model) rendered in a sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Template
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Used when a model ships none: ChatML, which most instruction-tuned models understand.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """The messages cannot be rendered by this model's template."""


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


@lru_cache(maxsize=8)
def _compile(source: str) -> Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    try:
        return _compile(template).render(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except ChatTemplateError:
        raise
    except (TemplateError, TypeError) as e:
        raise ChatTemplateError(f"chat template failed: {e}") from e
