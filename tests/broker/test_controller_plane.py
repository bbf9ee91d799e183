"""broker/control_plane/: codec round trips and a real server and channel over loopback."""

from __future__ import annotations

import asyncio
import struct

from broker import control_plane as cp
from broker.control_plane import codec
from tests.support.control_plane import Recorder
from tests.support.ports import free_port

STATE = cp.PartitionStateInfo("t", 0, 3, 2, 7, (2, 1), 5, (1, 2, 3), True)
LEADERS = (cp.BrokerEndpoint(2, "127.0.0.1", 9092, "r1"), cp.BrokerEndpoint(1, "h", 1, None))


def roundtrip(request):
    frame = cp.encode_request(request, 42)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert struct.unpack(">hh", frame[4:8]) == (codec.api_key(request), 1)
    return cp.decode_request(frame[4:])


def test_codec_roundtrip():
    requests = [
        cp.LeaderAndIsrRequest(1, 3, 77, (STATE,), LEADERS),
        cp.UpdateMetadataRequest(1, 3, 77, (STATE, STATE), LEADERS),
        cp.StopReplicaRequest(1, 3, 77, True, (("t", 0), ("ü", 9))),
        cp.ControlledShutdownRequest(4, 1 << 40),
    ]
    for request in requests:
        assert roundtrip(request) == (42, request)
    response = cp.LeaderAndIsrResponse(0, {("t", 0): 0, ("t", 1): 11})
    assert cp.decode_response(4, cp.encode_response(response, 9)[4:]) == (9, response)
    shutdown = cp.ControlledShutdownResponse(0, (("t", 1),))
    assert cp.decode_response(7, cp.encode_response(shutdown, 9)[4:]) == (9, shutdown)


def test_truncated_frame_is_rejected():
    frame = cp.encode_request(cp.LeaderAndIsrRequest(1, 3, 77, (STATE,), LEADERS), 1)
    for cut in (6, 20, len(frame) - 1):
        try:
            cp.decode_request(frame[4:cut])
        except ValueError:
            continue
        raise AssertionError(f"cut at {cut} decoded")


def test_server_and_channel_fence_stale_epochs():
    async def scenario():
        recorder = Recorder()
        calls = []

        async def shutdown(broker_id, broker_epoch):
            calls.append((broker_id, broker_epoch))
            return 0, [("t", 1)]

        server = cp.ControlPlaneServer("127.0.0.1", 0, recorder, shutdown)
        await server.start()
        channel = cp.ControllerChannel(request_timeout=5)
        channel.add_broker(cp.BrokerEndpoint(2, "127.0.0.1", server.port))
        try:
            lai = cp.LeaderAndIsrRequest(1, 3, 77, (STATE,), LEADERS)
            assert await channel.send(2, lai) == cp.LeaderAndIsrResponse(0, {("t", 0): 0})
            assert server.highest_controller_epoch == 3
            stale = cp.UpdateMetadataRequest(9, 2, 77, (STATE,), LEADERS)
            assert await channel.send(2, stale) == cp.UpdateMetadataResponse(11)
            stale_stop = cp.StopReplicaRequest(9, 2, 77, False, (("t", 0),))
            assert await channel.send(2, stale_stop) == cp.StopReplicaResponse(11, {("t", 0): 11})
            newer = cp.StopReplicaRequest(5, 4, 77, False, (("t", 0),))
            assert (await channel.send(2, newer)).error_code == 0
            assert recorder.received == [lai, newer]
            answer = await cp.request_controlled_shutdown("127.0.0.1", server.port, 2, 77, 5)
            assert answer == (0, [("t", 1)]) and calls == [(2, 77)]
            assert channel.broker_ids == {2}
            channel.remove_broker(2)
            failed = channel.enqueue(2, lai)
            assert isinstance(failed.exception(), ConnectionError)
        finally:
            await channel.close()
            await server.stop()

    asyncio.run(scenario())


def test_no_controller_and_bad_frames_keep_server_alive():
    async def scenario():
        recorder = Recorder()
        server = cp.ControlPlaneServer("127.0.0.1", 0, recorder, None)
        await server.start()
        try:
            assert await cp.request_controlled_shutdown("127.0.0.1", server.port, 1, 1, 5) == (
                cp.NOT_CONTROLLER, [])
            for junk in (b"\x00\x00\x00\x05\x00\x63\x00\x01\x00",
                         struct.pack(">i", 1 << 30), struct.pack(">i", -4)):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(junk)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""
                writer.close()
            channel = cp.ControllerChannel(request_timeout=5)
            channel.add_broker(cp.BrokerEndpoint(1, "127.0.0.1", server.port))
            request = cp.UpdateMetadataRequest(1, 1, 1, (), ())
            assert await channel.send(1, request) == cp.UpdateMetadataResponse(0)
            await channel.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_channel_retries_until_broker_listens():
    async def scenario():
        port = free_port()
        channel = cp.ControllerChannel(request_timeout=2, backoff=0.05)
        channel.add_broker(cp.BrokerEndpoint(1, "127.0.0.1", port))
        request = cp.LeaderAndIsrRequest(1, 1, 1, (STATE,), ())
        pending = channel.enqueue(1, request)
        await asyncio.sleep(0.3)
        assert not pending.done()
        recorder = Recorder()
        server = cp.ControlPlaneServer("127.0.0.1", port, recorder)
        await server.start()
        try:
            assert (await asyncio.wait_for(pending, 5)).error_code == 0
            assert recorder.received == [request]
        finally:
            await channel.close()
            await server.stop()

    asyncio.run(scenario())
