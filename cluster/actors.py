"""Ray actors: each worker is an actor hosting its gRPC server; KV never goes through
Ray's object store (workers move it over NIXL or TCP between themselves).

Each worker gets a placement group of its own (STRICT_PACK: a TP group stays on one
node; one bundle per rank).
"""

from __future__ import annotations

import os

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.worker_server import WorkerSettings


@ray.remote(max_restarts=0)
class WorkerActor:
    def __init__(self, model: str, settings: WorkerSettings, cache_dir: str | None) -> None:
        if cache_dir:
            os.environ["PDSERVE_CACHE_DIR"] = cache_dir
        from cluster.worker_server import WorkerServer
        from engine.loader import load_model

        self._server = WorkerServer(load_model(model), model, settings)
        self._address = self._server.start_in_thread()

    def address(self) -> str:
        return self._address

    def stop(self) -> None:
        self._server.stop()


def start_worker_actor(
    model: str, settings: WorkerSettings, num_cpus: float, tp: int = 1
) -> ray.actor.ActorHandle:
    pg = placement_group([{"CPU": num_cpus}] * tp, strategy="STRICT_PACK")
    ray.get(pg.ready())
    return WorkerActor.options(
        num_cpus=num_cpus,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
        name=settings.engine_id,
    ).remote(model, settings, os.environ.get("PDSERVE_CACHE_DIR"))
