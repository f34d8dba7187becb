#!/usr/bin/python3
"""A TCP proxy that puts a network distance between a client and a server: every byte is
forwarded after a fixed one-way delay in each direction (a round trip costs 2 x DELAY), in
order, at full speed (a delay, not a bandwidth cap). Standard library only.

  latency_proxy.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT --delay-ms 25
                   [--stats FILE]

With --stats the proxy also reads the SMTP conversations it carries and writes, to FILE, at
every change of a second and at exit (SIGTERM, SIGINT):

  connections=N messages=N client_turns=N turns_per_message=X max_bodies_awaiting_reply=N
  commands: MAIL=N RCPT=N DATA=N ...

* messages: ends of message data ("<CRLF>.<CRLF>") the client sent;
* client_turns: how often the client sent something after the server's last bytes had reached
  it: each is one round trip the client waited for (the greeting's wait counts as one);
  turns_per_message is client_turns / messages, the round trips one message costs;
* max_bodies_awaiting_reply: the most sessions at once whose message data had been sent and
  whose final reply had not come back yet (sessions uploading bodies concurrently).

Prints "ready PORT" once listening.
"""
import argparse
import asyncio
import signal
import time

parser = argparse.ArgumentParser()
parser.add_argument("--listen", required=True)
parser.add_argument("--upstream", required=True)
parser.add_argument("--delay-ms", type=float, required=True)
parser.add_argument("--stats")
args = parser.parse_args()
DELAY = args.delay_ms / 1000.0
EOM = b"\r\n.\r\n"

stats = {"connections": 0, "messages": 0, "client_turns": 0,
         "bodies_awaiting_reply": 0, "max_bodies_awaiting_reply": 0}
commands = {}


def write_stats():
    if not args.stats:
        return
    turns = stats["client_turns"] / stats["messages"] if stats["messages"] else 0.0
    line = ("connections=%d messages=%d client_turns=%d turns_per_message=%.2f "
            "max_bodies_awaiting_reply=%d\ncommands: %s\n" % (
                stats["connections"], stats["messages"], stats["client_turns"], turns,
                stats["max_bodies_awaiting_reply"],
                " ".join("%s=%d" % kv for kv in sorted(commands.items()))))
    with open(args.stats + ".tmp", "w") as f:
        f.write(line)
    import os
    os.replace(args.stats + ".tmp", args.stats)


class Session:
    """What the statistics need to know of one SMTP conversation."""

    def __init__(self):
        self.server_spoke = True   # the greeting is the first thing a client waits for
        self.in_data = False       # between the 354 and the end of message data
        self.awaiting_final = False
        self.tail = b""            # the last bytes of the client stream (markers across reads)
        self.line = b""            # a command line being read

    def from_client(self, data):
        if self.server_spoke:
            stats["client_turns"] += 1
            self.server_spoke = False
        buf = self.tail + data
        if self.in_data:
            if EOM in buf:
                self.in_data = False
                stats["messages"] += 1
                self.awaiting_final = True
                stats["bodies_awaiting_reply"] += 1
                stats["max_bodies_awaiting_reply"] = max(stats["max_bodies_awaiting_reply"],
                                                         stats["bodies_awaiting_reply"])
                data = buf[buf.index(EOM) + len(EOM):]
                self.line = b""
            else:
                self.tail = buf[-(len(EOM) - 1):]
                return
        self.tail = b""
        self.line += data
        while b"\n" in self.line:
            cmd, self.line = self.line.split(b"\n", 1)
            verb = cmd.split(b" ", 1)[0].strip().upper().decode("ascii", "replace")
            if verb.isalpha() and len(verb) <= 10:
                commands[verb] = commands.get(verb, 0) + 1
            if verb == "DATA":
                # Anything after DATA's line is message data (the client waited for the 354).
                self.in_data = True
                rest, self.line = self.line, b""
                if rest:
                    self.from_client(rest)
                return

    def from_server(self, data):
        self.server_spoke = True
        if self.awaiting_final:
            self.awaiting_final = False
            stats["bodies_awaiting_reply"] -= 1


async def pump(reader, writer, observe):
    """Forwards `reader` to `writer`, each chunk DELAY after it arrived, in order."""
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            if observe:
                observe(data)
            writer.write(data)
            await writer.drain()
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((time.monotonic() + DELAY, data or None))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def handle(client_reader, client_writer):
    host, port = args.upstream.rsplit(":", 1)
    try:
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
    except OSError:
        client_writer.close()
        return
    stats["connections"] += 1
    session = Session() if args.stats else None
    # The client's bytes are observed as they reach the server, the server's as they reach
    # the client: what each side has seen of the other.
    await asyncio.gather(
        pump(client_reader, server_writer, session.from_client if session else None),
        pump(server_reader, client_writer, session.from_server if session else None),
        return_exceptions=True)
    if session and session.awaiting_final:
        stats["bodies_awaiting_reply"] -= 1
    client_writer.close()
    server_writer.close()


async def report():
    while True:
        await asyncio.sleep(1)
        write_stats()


async def main():
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), backlog=1024)
    print("ready %d" % server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    reporter = asyncio.ensure_future(report())
    await stop
    reporter.cancel()
    write_stats()
    server.close()


asyncio.run(main())
