"""Drives the fixture server with the official Python SDK (`mcp`, pinned in requirements.txt).

    python python_client.py CHECK ERA TARGET...

CHECK is `list`, `call` or `input-required`; ERA is `2025-11-25` (the initialize handshake)
or `2026-07-28` (stateless); TARGET is an `http://` URL or the fixture's command line (stdio).
Exits 0 when the check holds; otherwise prints what was wrong and exits 1.
"""

import sys

import anyio
import mcp
from mcp import Client, StdioServerParameters


class CheckFailed(Exception):
    """The server answered, but not what the check expects."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def text_of(result) -> str:
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    expect(len(texts) == 1, f"expected one text block, got {result.content!r}")
    return texts[0]


async def check_list(client: Client) -> None:
    listed = await client.list_tools()
    names = {t.name for t in listed.tools}
    for name in ("greet", "slow_compute", "confirm_delete", "test_simple_text"):
        expect(name in names, f"tools/list lacks {name!r}: {sorted(names)}")
    greet = next(t for t in listed.tools if t.name == "greet")
    expect(
        "name" in (greet.input_schema or {}).get("properties", {}),
        f"greet's input schema has no `name`: {greet.input_schema!r}",
    )


async def check_call(client: Client) -> None:
    result = await client.call_tool("greet", {"name": "python"})
    expect(not result.is_error, f"greet failed: {result!r}")
    got = text_of(result)
    expect(got == "Hello, python!", f"greet answered {got!r}")
    result = await client.call_tool("test_error_handling", {})
    expect(result.is_error, f"test_error_handling did not fail: {result!r}")


async def check_input_required(client: Client, asked: list) -> None:
    result = await client.call_tool("test_input_required_result_elicitation", {})
    expect(not result.is_error, f"the call failed: {result!r}")
    got = text_of(result)
    expect(got == "Hello, Ada!", f"the tool answered {got!r}")
    expect(len(asked) == 1, f"the question was asked {len(asked)} times")


async def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit(__doc__)
    check, era, *target = argv
    if target[0].startswith("http://"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:])
    asked = []

    async def on_elicit(_context, params):
        asked.append(params.message)
        return mcp.types.ElicitResult(action="accept", content={"name": "Ada"})

    mode = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}.get(era)
    expect(mode is not None, f"unknown era {era!r}")
    with anyio.fail_after(60):
        await run(check, era, server, mode, on_elicit, asked)


async def run(check, era, server, mode, on_elicit, asked) -> None:
    async with Client(server, mode=mode, elicitation_callback=on_elicit, cache=None) as client:
        expect(
            client.protocol_version == era,
            f"negotiated {client.protocol_version!r} instead of {era}",
        )
        if check == "list":
            await check_list(client)
        elif check == "call":
            await check_call(client)
        elif check == "input-required":
            await check_input_required(client, asked)
        else:
            raise SystemExit(f"unknown check {check!r}")


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1:])
    except CheckFailed as failure:
        print(f"python-sdk: {failure}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # noqa: BLE001 - any other failure is a failed check too
        print(f"python-sdk: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
