"""Retrieval: the originals behind every elision, kept under their refs (proxy.pipeline.refs)
and served back by `GET /v1/retrieve/{hash}`, by the MCP server's `read_output`, and to the model
in flight through the `shrink_retrieve` tool."""
