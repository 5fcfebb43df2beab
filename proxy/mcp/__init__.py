"""The MCP server: the proxy's engine behind tools an agent calls (issue 24).

  server.py   the tools and their instructions (the official SDK's MCPServer)
  runner.py   running one command: argv, workspace root, process group, timeout, bytes held
  output.py   what it printed, decoded, cleaned and compacted by stage 1
  store.py    the bounded store `read_output` pages through
  context.py  estimate_context / trim_context / compact_context over the Shrinker façade
  stdio.py    `shrink-proxy mcp` (stdio)
  http.py     `/mcp` on the running proxy (Streamable HTTP)

Only `http` is imported by the proxy itself, and it imports the SDK (the `mcp` extra) only once
it is known to be installed.
"""
