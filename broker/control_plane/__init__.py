"""The control plane: controller-to-broker requests on their own listener (seeds/002).

`messages` holds the requests and responses as values, `codec` their Kafka-framed wire
format, `server` the broker's listener and the controller's channel to the brokers.
"""

from broker.control_plane.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from broker.control_plane.messages import (
    NONE,
    NOT_CONTROLLER,
    STALE_BROKER_EPOCH,
    STALE_CONTROLLER_EPOCH,
    UNKNOWN_SERVER_ERROR,
    BrokerEndpoint,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionStateInfo,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from broker.control_plane.server import (
    ControllerChannel,
    ControlPlaneServer,
    ControlRequestHandler,
    request_controlled_shutdown,
)

__all__ = [
    "NONE", "UNKNOWN_SERVER_ERROR", "STALE_CONTROLLER_EPOCH", "NOT_CONTROLLER",
    "STALE_BROKER_EPOCH", "PartitionStateInfo", "BrokerEndpoint", "LeaderAndIsrRequest",
    "UpdateMetadataRequest", "StopReplicaRequest", "ControlledShutdownRequest",
    "LeaderAndIsrResponse", "UpdateMetadataResponse", "StopReplicaResponse",
    "ControlledShutdownResponse", "ControlRequestHandler", "ControlPlaneServer",
    "ControllerChannel", "request_controlled_shutdown", "encode_request", "decode_request",
    "encode_response", "decode_response",
]
