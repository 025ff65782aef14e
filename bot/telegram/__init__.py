"""The Telegram host: the PTB application, handlers, cards, rendering, callback data and flood control."""
