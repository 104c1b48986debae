"""The controller: a named Ray actor holding the cluster's worker registry.

`pdserve up` registers each worker it starts; `pdserve status` (any process on a node
of the cluster) reads the registry and asks each worker for its Stats over gRPC.
Health probes, restarts and scaling will live here too (not yet).
"""

from __future__ import annotations

from dataclasses import dataclass

import ray

CONTROLLER_NAME = "pdserve-controller"
NAMESPACE = "pdserve"


@dataclass(frozen=True)
class WorkerEntry:
    engine_id: str
    role: str
    address: str


@ray.remote(num_cpus=0)
class Controller:
    def __init__(self, model: str, router_url: str) -> None:
        self.model = model
        self.router_url = router_url
        self._workers: dict[str, WorkerEntry] = {}

    def register(self, entry: WorkerEntry) -> None:
        self._workers[entry.engine_id] = entry

    def deregister(self, engine_id: str) -> bool:
        return self._workers.pop(engine_id, None) is not None

    def workers(self) -> list[WorkerEntry]:
        return sorted(self._workers.values(), key=lambda w: (w.role != "prefill", w.engine_id))

    def info(self) -> tuple[str, str]:
        return self.model, self.router_url


def start_controller(model: str, router_url: str) -> ray.actor.ActorHandle:
    return Controller.options(name=CONTROLLER_NAME, namespace=NAMESPACE).remote(model, router_url)


def find_controller() -> ray.actor.ActorHandle:
    return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
