"""Tests of the level-1 units: `bot.core` (registry, records), `bot.config` and `bot.logs`."""
