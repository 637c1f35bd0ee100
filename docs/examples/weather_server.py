"""weather_server.py: a small MCP server, written with the official SDK (mcp 2.x)."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def forecast(city: str, days: int = 1) -> dict[str, object]:
    """The weather forecast for a city."""
    return {"city": city, "days": days, "sky": "sunny"}


if __name__ == "__main__":
    server.run("stdio")  # or server.run("streamable-http"): http://127.0.0.1:8000/mcp
