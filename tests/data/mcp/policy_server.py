"""A small, real MCP server for the tests, written with the ``mcp`` package's server API.

Two tools: ``lookup_policy(topic)`` (the refund, privacy and unknown-topic answers are
fixed) and ``add(a, b)``. Runs over stdio by default, or over streamable HTTP on
127.0.0.1 with ``--http PORT``. Test switches:

``--pidfile PATH``  append the process id there first (the cleanup tests look for it)
``--linger``        once the MCP loop ends (stdin closed), keep running until killed:
                    a server that only goes when its client terminates it
``--crash``         write a line to stderr and exit 3 before speaking MCP
``--hang``          never answer: sleep before speaking MCP
``--big``           ``lookup_policy`` answers 5000 characters

mcp 1.x calls the server class ``FastMCP`` (``mcp.server.fastmcp``); mcp 2.x renamed it
``MCPServer`` (``mcp.server.mcpserver``) and moved host/port to ``run()``.
"""

# No `from __future__ import annotations`: mcp 1.x's FastMCP reads the tools' annotations
# as classes and fails on strings.
import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

Tool = TypeVar("Tool", bound=Callable[..., object])


class Server(Protocol):
    """What this script uses of ``FastMCP`` (mcp 1.x) and ``MCPServer`` (mcp 2.x)."""

    def tool(self) -> Callable[[Tool], Tool]: ...

    def run(self, transport: str = ..., **options: object) -> None: ...


POLICIES = {
    "refunds": "Refunds are possible within 30 days of purchase, with the receipt.",
    "privacy": "We never sell personal data; deletion requests are honoured within 30 days.",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--pidfile")
    parser.add_argument("--linger", action="store_true")
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--big", action="store_true")
    args = parser.parse_args()
    if args.pidfile:
        with open(args.pidfile, "a") as f:  # one line per process (xdist: one per worker)
            f.write(f"{os.getpid()}\n")
    if args.crash:
        print("policy-server: the policy database is unreachable", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.hang:
        time.sleep(3600)

    server: Server
    try:
        module = importlib.import_module("mcp.server.mcpserver")  # mcp >= 2
    except ImportError:  # mcp 1.x
        module = importlib.import_module("mcp.server.fastmcp")
        kwargs = {"host": "127.0.0.1", "port": args.http} if args.http else {}
        server = module.FastMCP("policy-server", log_level="WARNING", **kwargs)
        v2 = False
    else:
        server = module.MCPServer("policy-server", version="1.4.2", log_level="WARNING")
        v2 = True

    @server.tool()
    def lookup_policy(topic: str) -> str:
        """The company's policy on a topic (refunds, privacy)."""
        if args.big:
            return "x" * 5000
        return POLICIES.get(topic.strip().lower(), f"No policy is written about {topic!r}.")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    if args.http:
        if v2:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
        else:
            server.run("streamable-http")
    else:
        server.run()
    if args.linger:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
