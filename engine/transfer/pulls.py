"""The decode side's KV pulls, each an explicit state machine:

    WAITING --post--> TRANSFERRING --complete--> DONE
       |                  |  \\--error/timeout--> FAILED
       \\--no blocks yet--/

1. A request arrives with a KV handle; blocks are reserved (WAITING until they are).
2. The READ is posted (TRANSFERRING); the engine keeps stepping its batch meanwhile.
3. Polled each loop: DONE joins the request to the batch; FAILED (error or deadline)
   falls back to recomputing the prompt locally. An abort during TRANSFERRING is only
   applied once the transfer has ended: NIXL may still be writing into the blocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum


class PullState(Enum):
    WAITING = "waiting"
    TRANSFERRING = "transferring"
    DONE = "done"
    FAILED = "failed"


@dataclass
class Pull:
    request_id: str
    engine_id: str
    remote_blocks: list[int]
    num_tokens: int
    deadline: float
    state: PullState = PullState.WAITING
    handle: object | None = None
    local_blocks: list[int] = field(default_factory=list)
    abort_requested: bool = False
    started: float = 0.0
    error: str = ""

    def expired(self, now: float | None = None) -> bool:
        return (now if now is not None else time.monotonic()) > self.deadline
