#!/usr/bin/env python3
"""A WebSocket upstream for tests (python3-websockets; run it with /usr/bin/python3).

--mode echo (default): a WebSocket server echoing every message back as it came (text as text,
    binary as binary). A message "close" makes it close the connection (1000).
--mode switch: a raw HTTP/1.1 server answering every request but /__stats with
    "101 Switching Protocols" and `Upgrade: <--token>`, then the bytes "UPSTREAM-SECRET": for a
    101 nobody asked for, or one with another protocol than asked.
GET /__stats (both modes): {"requests": N, "open": M}: requests seen (handshakes or not) and
    WebSocket connections open now.
With --tls-cert and --tls-key it speaks TLS (wss).
"""
import argparse
import asyncio
import http
import json
import os
import ssl

import websockets

STATS = {"requests": 0, "open": 0}


def stats_body():
    return json.dumps(STATS).encode()


async def echo(ws, path=None):
    STATS["open"] += 1
    try:
        async for message in ws:
            if message == "close":
                await ws.close(1000, "asked")
                break
            await ws.send(message)
    except websockets.ConnectionClosed:
        pass
    finally:
        STATS["open"] -= 1


def process_request(path, headers):
    if path == "/__stats":
        return http.HTTPStatus.OK, [("Content-Type", "application/json")], stats_body()
    STATS["requests"] += 1
    return None


async def switch_client(reader, writer, token):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.split(b" ", 2)[1] == b"/__stats":
            body = stats_body()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        else:
            STATS["requests"] += 1
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + token.encode()
                         + b"\r\nConnection: Upgrade\r\n\r\nUPSTREAM-SECRET")
            await writer.drain()
            await asyncio.sleep(5)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, IndexError):
        pass
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", default="echo", choices=["echo", "switch"])
    ap.add_argument("--token", default="websocket")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    args = ap.parse_args()
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    if args.mode == "echo":
        server = await websockets.serve(echo, "127.0.0.1", 0, process_request=process_request,
                                        ssl=ctx, ping_interval=None)
    else:
        server = await asyncio.start_server(
            lambda r, w: switch_client(r, w, args.token), "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(args.port_file + ".tmp", args.port_file)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
