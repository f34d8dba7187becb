#!/usr/bin/python3
"""A fast HTTP sink for throughput runs (standard library only, one asyncio event loop, no
thread per connection): answers every request on kept-alive HTTP/1.1 connections as Postmark's
POST /email answers an accepted email (200 {"MessageID", "ErrorCode": 0, "Message": "OK"}),
after checking X-Postmark-Server-Token (401 otherwise). It parses only what it needs
(Content-Length bodies, no chunked encoding) and keeps nothing: the conformance of the
transports is tested against sender/transport/testing/provider_standin.py, not here.

  http_sink.py --port P --token T

Prints "ready PORT" once listening.
"""
import argparse
import asyncio
import itertools
import signal
import uuid

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--token", required=True)
args = parser.parse_args()
PREFIX = uuid.uuid4().hex[:8]
counter = itertools.count(1)


def answer(status, body):
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, b"OK" if status == 200 else b"Unauthorized", len(body), body))


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            authorized = False
            for line in head.split(b"\r\n")[1:]:
                lower = line.lower()
                if lower.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif lower.startswith(b"x-postmark-server-token:"):
                    authorized = line.split(b":", 1)[1].strip() == args.token.encode()
            if length:
                await reader.readexactly(length)
            if not authorized:
                writer.write(answer(401, b'{"ErrorCode": 10, "Message": "bad token"}'))
            else:
                n = next(counter)
                writer.write(answer(200, b'{"MessageID": "%s-%08d", "ErrorCode": 0, '
                                         b'"Message": "OK"}' % (PREFIX.encode(), n)))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", args.port, backlog=1024)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    print("ready %d" % args.port, flush=True)
    async with server:
        await stop


asyncio.run(main())
