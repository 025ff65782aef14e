"""Which handlers the bot has, in which groups and order: the handler modules' `handlers(...)` registered on
the application, with the `Deps` their callbacks read (`context.deps`). No I/O.

A feature that is off (its part of `Deps` None) has no handlers; the groups run lowest first.
"""

from __future__ import annotations

from typing import Any

from telegram.ext import Application

from bot.telegram.handlers import access, agents, audit, commands, consent, forms, second_factor, signin
from bot.telegram.handlers import approvals as approval_taps
from bot.telegram.handlers.deps import Context, Deps, provide
from bot.telegram.handlers.errors import on_error

__all__ = ["register"]

CODES_GROUP = -3
"""The approvers' `/2fa` and codes: before anything else (approvers need not be allowed to use the bot)."""
NAMES_GROUP = -2
"""The names approval cards show: before the access gate, for the same reason."""
GATE_GROUP = -1
"""The access gate: stops every update of anyone not allowed before the bot's own handlers (group 0)."""


def register(app: Application[Any, Context, Any, Any, Any, Any], deps: Deps) -> None:
    """Provide `deps` to `app` (once) and register every handler the features that are on have."""
    provide(app, deps)
    if deps.approvals is not None:
        app.add_handlers(approval_taps.name_handlers(), group=NAMES_GROUP)
        coded = frozenset[int]().union(*(r.approvers for r in deps.config.approvals if r.second_factor))
        if deps.codes is not None and coded:
            app.add_handlers(second_factor.handlers(coded), group=CODES_GROUP)
    app.add_handlers(access.handlers(), group=GATE_GROUP)
    # The handlers match disjoint updates; taps (two of every three updates) are checked first.
    app.add_handlers(
        (approval_taps.handlers() if deps.approvals is not None else [])
        + (signin.handlers() if deps.signins is not None else [])
        + agents.handlers()
        + (consent.handlers() if deps.grants is not None else [])
        + forms.handlers()
        + (audit.handlers() if deps.audit is not None else [])
        + commands.handlers()
    )
    app.add_error_handler(on_error)
