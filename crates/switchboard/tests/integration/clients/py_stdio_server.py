"""A stdio MCP server on the Python SDK 1.x (FastMCP), as users run them: one tool."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("py-stdio")


@server.tool()
def echo(text: str) -> str:
    """Echoes its text."""
    return text


if __name__ == "__main__":
    server.run()
