"""The MCP side: sessions per (server, chat, user), tool calls, and servers' questions routed to their person."""
