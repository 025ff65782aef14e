"""PTB handlers, one module per feature; each exposes `handlers(deps) -> list[BaseHandler]`."""
