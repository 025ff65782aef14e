"""Alembic migrations of the bot's database (run by `bot.store.engine.upgrade`)."""
