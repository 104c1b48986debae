"""gRPC face of the prefill worker (proto: pdserve.v1.PrefillWorker)."""

from __future__ import annotations

import asyncio
import uuid

import grpc

from cluster.serving import WorkerRPCs, abort_invalid
from engine.errors import InvalidRequest
from engine.transfer.layout import PROTOCOL_VERSION
from prefill_worker.worker import Aborted, PrefillWorker
from proto.convert import has_unknown_fields, layout_to_proto, params_from_proto, sample_to_proto
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc


class PrefillServicer(WorkerRPCs, rpc.PrefillWorkerServicer):
    role = "prefill"

    def __init__(self, worker: PrefillWorker, model: str, address: str) -> None:
        super().__init__(worker, model)
        self.worker: PrefillWorker = worker
        self.address = address

    def set_address(self, address: str) -> None:
        """The address decode workers reach this server at (known once bound)."""
        self.address = address

    async def Prefill(
        self, request: pb.PrefillRequest, context: grpc.aio.ServicerContext
    ) -> pb.PrefillResponse:
        if has_unknown_fields(request) or has_unknown_fields(request.params):
            await abort_invalid(context, "request has fields this server does not know")
        rid = request.request_id or uuid.uuid4().hex
        try:
            params = params_from_proto(request.params)
            future = self.worker.prefill(rid, list(request.prompt_token_ids), params)
            out = await asyncio.wrap_future(future)
        except (InvalidRequest, ValueError) as e:
            await abort_invalid(context, str(e))
        except Aborted:
            await context.abort(grpc.StatusCode.CANCELLED, f"request {rid} was aborted")
        except asyncio.CancelledError:  # the client went away
            self.worker.abort(rid)
            raise
        usage = pb.Usage(
            prompt_tokens=out.prompt_tokens,
            completion_tokens=1,
            cached_prompt_tokens=out.cached_prompt_tokens,
        )
        response = pb.PrefillResponse(
            request_id=rid,
            first_token=sample_to_proto(out.samples[0]),
            text=out.text,
            finish_reason=out.finish_reason or "",
            usage=usage,
        )
        if out.handed_off is not None:
            response.kv.CopyFrom(
                pb.KVHandle(
                    engine_id=self.worker.config.engine_id,
                    prefill_address=self.address,
                    block_ids=list(out.handed_off),
                    num_tokens=out.prompt_tokens,
                    lease_ms=int(self.worker.config.lease_s * 1000),
                )
            )
        return response

    async def ReleaseKV(
        self, request: pb.ReleaseKVRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseKVResponse:
        released = await asyncio.wrap_future(self.worker.release(request.request_id))
        return pb.ReleaseKVResponse(released=released)

    async def LeaseHeartbeat(
        self, request: pb.LeaseHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaseHeartbeatResponse:
        live = await asyncio.wrap_future(self.worker.heartbeat(list(request.request_ids)))
        return pb.LeaseHeartbeatResponse(extended=live)

    async def TransferMetadata(
        self, request: pb.TransferMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.TransferMetadataResponse:
        if request.protocol_version != PROTOCOL_VERSION:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol v{request.protocol_version} not spoken here (v{PROTOCOL_VERSION})",
            )
        metadata, base = await asyncio.wrap_future(self.worker.transfer_metadata())
        return pb.TransferMetadataResponse(
            protocol_version=PROTOCOL_VERSION,
            engine_id=self.worker.config.engine_id,
            backend=self.worker.backend,
            agent_metadata=metadata,
            base_address=base,
            layout=layout_to_proto(self.worker.layout),
        )
