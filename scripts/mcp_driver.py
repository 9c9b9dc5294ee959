"""Drives hitl-telegram's MCP server with the official Python MCP SDK (`mcp`), for
tests/integrations/mcp.rs: a real MCP client that nobody here wrote.

  python mcp_driver.py stdio COMMAND [ARGS...]   # starts the server as a subprocess
  python mcp_driver.py http URL TOKEN            # streamable HTTP, Authorization: Bearer

Reads one JSON command per line on stdin and answers with JSON lines on stdout:
  {"op": "list"}                               -> {"event": "tools", "tools": [...]}
  {"op": "call", "tool": T, "args": {...}}     -> {"event": "progress", ...}*, then
                                                  {"event": "result", "is_error", "texts"}
A failure to connect or a protocol error is {"event": "error", "message": ...}.
"""

import json
import os
import sys

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def serve(client: Client) -> None:
    emit({"event": "ready", "protocol": str(client.protocol_version)})
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        try:
            if command["op"] == "list":
                tools = await client.list_tools()
                emit({
                    "event": "tools",
                    "tools": [
                        {"name": t.name, "description": t.description,
                         "input_schema": t.input_schema}
                        for t in tools.tools
                    ],
                })
            elif command["op"] == "call":
                async def progress(done, total, message):
                    emit({"event": "progress", "progress": done, "total": total,
                          "message": message})

                result = await client.call_tool(
                    command["tool"], command["args"], progress_callback=progress
                )
                emit({
                    "event": "result",
                    "is_error": bool(result.is_error),
                    "texts": [c.text for c in result.content
                              if getattr(c, "type", None) == "text"],
                })
        except Exception as e:  # reported to the test, which decides
            emit({"event": "error", "message": f"{type(e).__name__}: {e}"})


async def main() -> None:
    kind = sys.argv[1]
    http = None
    if kind == "stdio":
        # The SDK passes the server only a few safe variables unless told: hand it ours
        # (the token variable above all), as an MCP client's config "env" would.
        server = StdioServerParameters(
            command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ)
        )
    else:
        url, token = sys.argv[2], sys.argv[3]
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30.0, read=300.0),
            trust_env=False,
        )
        server = streamable_http_client(url, http_client=http)
    try:
        async with Client(server, read_timeout_seconds=300) as client:
            await serve(client)
    except BaseException as e:  # noqa: BLE001 - the test reads what failed
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        emit({"event": "error", "message": f"{type(e).__name__}: {e!r}"})
        sys.exit(1)
    finally:
        if http is not None:
            await http.aclose()


if __name__ == "__main__":
    anyio.run(main)
