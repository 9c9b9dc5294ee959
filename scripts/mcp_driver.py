"""Drives an MCP server with the official Python MCP SDK (`mcp`): a real MCP host that
nobody here wrote, for tests/integrations/mcp*.rs (hitl-telegram's own MCP server) and
the gateway's tests (hitl-telegram gateway in front of an upstream server).

  python mcp_driver.py [OPTIONS] stdio COMMAND [ARGS...]  # starts the server as a subprocess
  python mcp_driver.py [OPTIONS] http URL [TOKEN]         # streamable HTTP; TOKEN, when
                                                          #   given, as Authorization: Bearer
Options (before the mode word; everything after `stdio` is the server's command line):
  --mode auto|legacy        how the SDK negotiates: auto (the SDK's default) probes
                            server/discover first, legacy sends initialize at once
  --sampling-text TEXT      answer sampling/createMessage with this text
  --elicit-action ACTION    answer elicitation/create with accept, decline or cancel
  --elicit-content JSON     ... and with this content (a JSON object) when accepting
  --header NAME=VALUE       (http) an extra header on every request; may repeat
The host always declares the sampling and elicitation capabilities; a request that
arrives before an answer is configured gets an error ("... not configured").

Reads one JSON command per line on stdin and answers with JSON lines on stdout; first
  {"event": "ready", "protocol": P, "server": {"name", "version"}, "capabilities": {...},
   "instructions": I}
then per command:
  {"op": "list"}                               -> {"event": "tools", "tools": [{"name",
                                                  "description", "input_schema",
                                                  "annotations"}]}
  {"op": "call", "tool": T, "args": {...}}     -> {"event": "progress", "progress", "total",
    optional "progress": false (no progress        "message"}*, then
    token sent), "timeout": seconds                {"event": "result", "is_error", "texts"}
  {"op": "start", "id": I, "tool": T,          -> {"event": "started", "id": I} at once; later
   "args": {...}} (also "progress", "timeout")     {"event": "progress", "id": I, ...}*, then
                                                  {"event": "result", "id": I, "is_error",
                                                  "texts"}, or {"event": "cancelled", "id": I},
                                                  or {"event": "error", "id": I, ...}. Other
                                                  commands run meanwhile, so these events
                                                  may come between their answers.
  {"op": "cancel", "id": I}                    -> cancels the started call the SDK's way (its
                                                  task's cancel scope): the SDK sends
                                                  notifications/cancelled {"requestId",
                                                  "reason": "caller cancelled"} and drops a
                                                  late answer; then that call's
                                                  {"event": "cancelled", "id": I}
  {"op": "inbox"} (optional "wait_for":        -> {"event": "inbox", "notifications":
   METHOD, "timeout": seconds, default 10)         [{"method", "params"}], "requests":
                                                  [{"method", "params"}], "timed_out": bool}:
                                                  the server's notifications (e.g.
                                                  notifications/tools/list_changed,
                                                  notifications/message; not progress,
                                                  which is the call's) and requests
                                                  (sampling/createMessage,
                                                  elicitation/create) seen since the last
                                                  inbox; with wait_for, first waits until
                                                  one of that method is among them
  {"op": "set_sampling", "text": T}            -> {"event": "ok", "op": "set_sampling"}
  {"op": "set_elicitation", "action": A,       -> {"event": "ok", "op": "set_elicitation"}
   "content": {...}}
  {"op": "resources"}                          -> {"event": "resources", "resources":
                                                  [{"uri", "name", "description",
                                                  "mime_type"}]}
  {"op": "read", "uri": U}                     -> {"event": "resource", "contents": [{"uri",
                                                  "mime_type", "text"}]} ("blob" for binary)
  {"op": "prompts"}                            -> {"event": "prompts", "prompts": [{"name",
                                                  "description", "arguments": [{"name",
                                                  "description", "required"}]}]}
  {"op": "prompt", "name": N, "args": {...}}   -> {"event": "prompt", "description",
                                                  "messages": [{"role", "text"}]}
  {"op": "complete", "prompt": N,              -> {"event": "completion", "values": [...]}
   "argument": A, "value": V}
  {"op": "ping"}                               -> {"event": "pong"}
A failure to connect or a protocol error is {"event": "error", "message": ...} (with
"code" for an MCP error, "op" for the command, "id" for a started call); an unknown op
is such an error too.
"""

import json
import os
import sys
import warnings

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# ping and a few more are deprecated for the 2026 protocol revision, not for the
# handshake era these tests speak: no warning on stderr for each use.
warnings.simplefilter("ignore", MCPDeprecationWarning)

USAGE = "usage: mcp_driver.py [OPTIONS] stdio COMMAND [ARGS...] | [OPTIONS] http URL [TOKEN]"


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def dump(model) -> dict | None:
    return None if model is None else model.model_dump(by_alias=True, mode="json", exclude_none=True)


def error_event(e: BaseException, **extra) -> dict:
    event = {"event": "error", "message": f"{type(e).__name__}: {e}", **extra}
    if isinstance(e, MCPError):
        event["code"] = e.code
    return event


class Host:
    """What the host answers the server and what it has seen from it."""

    def __init__(self, sampling_text: str | None, elicit_action: str | None, elicit_content) -> None:
        self.sampling_text = sampling_text
        self.elicit_action = elicit_action
        self.elicit_content = elicit_content
        self.notifications: list[dict] = []
        self.requests: list[dict] = []
        self.arrived = anyio.Event()

    def _record(self, into: list[dict], entry: dict) -> None:
        into.append(entry)
        self.arrived.set()
        self.arrived = anyio.Event()

    async def on_message(self, message) -> None:
        if isinstance(message, types.ProgressNotification):
            return  # reported as the call's own progress events
        if isinstance(message, Exception):
            self._record(self.notifications, {"method": None, "error": f"{type(message).__name__}: {message}"})
        else:
            self._record(self.notifications, {"method": message.method, "params": dump(message.params)})

    async def on_sampling(self, context, params: types.CreateMessageRequestParams):
        self._record(self.requests, {"method": "sampling/createMessage", "params": dump(params)})
        if self.sampling_text is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="sampling not configured in the driver")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(text=self.sampling_text),
            model="hitl-mcp-driver",
            stop_reason="endTurn",
        )

    async def on_elicitation(self, context, params):
        self._record(self.requests, {"method": "elicitation/create", "params": dump(params)})
        if self.elicit_action is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="elicitation not configured in the driver")
        content = self.elicit_content if self.elicit_action == "accept" else None
        return types.ElicitResult(action=self.elicit_action, content=content)

    def _has(self, method: str) -> bool:
        return any(e.get("method") == method for e in self.notifications + self.requests)

    async def inbox(self, wait_for: str | None, timeout: float) -> dict:
        timed_out = False
        if wait_for is not None:
            with anyio.move_on_after(timeout) as scope:
                while not self._has(wait_for):
                    await self.arrived.wait()
            timed_out = scope.cancelled_caught
        event = {"event": "inbox", "notifications": self.notifications, "requests": self.requests,
                 "timed_out": timed_out}
        self.notifications, self.requests = [], []
        return event


def result_event(result, **extra) -> dict:
    return {
        "event": "result",
        **extra,
        "is_error": bool(result.is_error),
        "texts": [c.text for c in result.content if getattr(c, "type", None) == "text"],
    }


async def call(client: Client, command: dict, **extra) -> dict:
    async def progress(done, total, message):
        emit({"event": "progress", **extra, "progress": done, "total": total, "message": message})

    result = await client.call_tool(
        command["tool"],
        command.get("args", {}),
        read_timeout_seconds=command.get("timeout"),
        progress_callback=progress if command.get("progress", True) else None,
    )
    return result_event(result, **extra)


async def started_call(client: Client, command: dict, scope: anyio.CancelScope, calls: dict) -> None:
    cid = command["id"]
    try:
        with scope:
            emit(await call(client, command, id=cid))
        if scope.cancelled_caught:
            emit({"event": "cancelled", "id": cid})
    except Exception as e:  # reported to the test, which decides
        emit(error_event(e, op="start", id=cid))
    finally:
        calls.pop(cid, None)


async def answer(client: Client, host: Host, command: dict) -> dict | None:
    """One command's answer (None: answered elsewhere, as a started call's events)."""
    op = command.get("op")
    if op == "list":
        tools = await client.list_tools()
        return {
            "event": "tools",
            "tools": [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema,
                 "annotations": dump(t.annotations)}
                for t in tools.tools
            ],
        }
    if op == "call":
        return await call(client, command)
    if op == "set_sampling":
        host.sampling_text = command["text"]
        return {"event": "ok", "op": op}
    if op == "set_elicitation":
        host.elicit_action = command["action"]
        host.elicit_content = command.get("content")
        return {"event": "ok", "op": op}
    if op == "inbox":
        return await host.inbox(command.get("wait_for"), float(command.get("timeout", 10)))
    if op == "resources":
        listed = await client.list_resources()
        return {
            "event": "resources",
            "resources": [
                {"uri": str(r.uri), "name": r.name, "description": r.description, "mime_type": r.mime_type}
                for r in listed.resources
            ],
        }
    if op == "read":
        read = await client.read_resource(command["uri"])
        contents = []
        for c in read.contents:
            entry = {"uri": str(c.uri), "mime_type": c.mime_type}
            if hasattr(c, "text"):
                entry["text"] = c.text
            else:
                entry["blob"] = c.blob
            contents.append(entry)
        return {"event": "resource", "contents": contents}
    if op == "prompts":
        listed = await client.list_prompts()
        return {
            "event": "prompts",
            "prompts": [
                {"name": p.name, "description": p.description,
                 "arguments": [{"name": a.name, "description": a.description, "required": a.required}
                               for a in (p.arguments or [])]}
                for p in listed.prompts
            ],
        }
    if op == "prompt":
        got = await client.get_prompt(command["name"], command.get("args") or {})
        return {
            "event": "prompt",
            "description": got.description,
            "messages": [{"role": m.role, "text": getattr(m.content, "text", None)} for m in got.messages],
        }
    if op == "complete":
        done = await client.complete(
            types.PromptReference(type="ref/prompt", name=command["prompt"]),
            {"name": command["argument"], "value": command.get("value", "")},
        )
        return {"event": "completion", "values": done.completion.values}
    if op == "ping":
        await client.session.send_ping()
        return {"event": "pong"}
    return {"event": "error", "op": op, "message": f"unknown op {op!r}"}


async def serve(client: Client, host: Host) -> None:
    info = client.server_info
    emit({
        "event": "ready",
        "protocol": str(client.protocol_version),
        "server": None if info is None else {"name": info.name, "version": info.version},
        "capabilities": dump(client.server_capabilities),
        "instructions": client.instructions,
    })
    calls: dict[str, anyio.CancelScope] = {}
    async with anyio.create_task_group() as tg:
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            if not line.strip():
                continue
            try:
                command = json.loads(line)
            except json.JSONDecodeError as e:
                emit({"event": "error", "message": f"not a JSON command: {e}"})
                continue
            op = command.get("op")
            try:
                if op == "start":
                    cid = command["id"]
                    if cid in calls:
                        emit({"event": "error", "op": op, "id": cid, "message": f"call {cid!r} is in flight"})
                        continue
                    calls[cid] = scope = anyio.CancelScope()
                    emit({"event": "started", "id": cid})
                    tg.start_soon(started_call, client, command, scope, calls)
                elif op == "cancel":
                    scope = calls.get(command.get("id"))
                    if scope is None:
                        emit({"event": "error", "op": op, "id": command.get("id"),
                              "message": "no started call in flight with that id"})
                    else:
                        scope.cancel()
                else:
                    event = await answer(client, host, command)
                    if event is not None:
                        emit(event)
            except Exception as e:  # reported to the test, which decides
                emit(error_event(e, op=op))
        # End of input: the session ends; calls still in flight are abandoned.
        tg.cancel_scope.cancel()


def parse(argv: list[str]):
    options = {"mode": "auto", "sampling_text": None, "elicit_action": None, "elicit_content": None,
               "headers": {}}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        flag = argv[i]
        if i + 1 >= len(argv):
            sys.exit(f"{flag} needs a value\n{USAGE}")
        value = argv[i + 1]
        if flag == "--mode":
            if value not in ("auto", "legacy"):
                sys.exit(f"--mode is auto or legacy, not {value!r}")
            options["mode"] = value
        elif flag == "--sampling-text":
            options["sampling_text"] = value
        elif flag == "--elicit-action":
            if value not in ("accept", "decline", "cancel"):
                sys.exit(f"--elicit-action is accept, decline or cancel, not {value!r}")
            options["elicit_action"] = value
        elif flag == "--elicit-content":
            content = json.loads(value)
            if not isinstance(content, dict):
                sys.exit("--elicit-content takes a JSON object")
            options["elicit_content"] = content
        elif flag == "--header":
            name, sep, header_value = value.partition("=")
            if not sep or not name:
                sys.exit("--header takes NAME=VALUE")
            options["headers"][name] = header_value
        else:
            sys.exit(f"unknown option {flag}\n{USAGE}")
        i += 2
    rest = argv[i:]
    if not rest or rest[0] not in ("stdio", "http") or len(rest) < 2 or (rest[0] == "http" and len(rest) > 3):
        sys.exit(USAGE)
    return options, rest[0], rest[1:]


async def main() -> None:
    options, kind, rest = parse(sys.argv[1:])
    host = Host(options["sampling_text"], options["elicit_action"], options["elicit_content"])
    http = None
    if kind == "stdio":
        # The SDK passes the server only a few safe variables unless told: hand it ours
        # (the token variable above all), as an MCP client's config "env" would.
        server = StdioServerParameters(command=rest[0], args=rest[1:], env=dict(os.environ))
    else:
        headers = dict(options["headers"])
        if len(rest) == 2:
            headers["Authorization"] = f"Bearer {rest[1]}"
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30.0, read=300.0),
            trust_env=False,
        )
        server = streamable_http_client(rest[0], http_client=http)
    try:
        async with Client(
            server,
            read_timeout_seconds=300,
            mode=options["mode"],
            # A test host always asks the server: no response cache in between.
            cache=None,
            sampling_callback=host.on_sampling,
            elicitation_callback=host.on_elicitation,
            message_handler=host.on_message,
        ) as client:
            await serve(client, host)
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
