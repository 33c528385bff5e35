"""Tether as an MCP server (``tether mcp``): the tools over a producer (``server``) and the
bearer-token gate of its streamable-HTTP transport (``http``). Needs the ``mcp`` extra."""
