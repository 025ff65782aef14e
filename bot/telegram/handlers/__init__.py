"""PTB handlers, one module per feature: module-level callbacks reading what they use through `context.deps`
(`bot.telegram.handlers.deps`), and each module's `handlers(...) -> list[BaseHandler]` registering them."""
