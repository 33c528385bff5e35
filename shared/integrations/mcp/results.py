"""An MCP tool's result as the text a Tether tool returns: the text blocks, the structured
result when there is no text, a short note for each image, sound or resource (their bytes do not
go into the conversation), limited to the server's ``max_result_bytes``, and with the server's
own credentials masked before anything is stored.

>>> as_text(mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="4")]))
'4'
"""

from __future__ import annotations

import json
from collections.abc import Callable

import mcp_types

from tether.runtime.redaction import MASK


def as_text(result: mcp_types.CallToolResult) -> str:
    """The result's text (see the module)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, omitted]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource {inner.uri}, {inner.mime_type or 'binary'}, omitted]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True, default=str)
    return "\n".join(parts)


def too_large(text: str, limit_bytes: int) -> int | None:
    """The size of ``text`` in UTF-8 bytes when it is over ``limit_bytes``, else None (cheap
    for short texts: a character is at most 4 bytes)."""
    if len(text) * 4 <= limit_bytes:
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit_bytes else None


def masker(secrets: list[str]) -> Callable[[str], str]:
    """A function masking each of ``secrets`` (the server's own credentials) in a text."""
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)

    def mask(text: str) -> str:
        for secret in ordered:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    return mask
