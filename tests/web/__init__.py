"""Tests of `bot.web`: the webhook endpoint, /metrics, and the Mini App (in headless Chromium)."""
