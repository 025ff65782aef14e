"""The terminal host: the same bridge on stdin and stdout, for trying it without Telegram."""
