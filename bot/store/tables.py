"""The database schema as SQLAlchemy Core tables (what the migrations build; read by the store). No I/O.

Keys are text ids made where the row is written (uuids, `elc-...` ids), never counters of one process, so
several bot processes may later share one database. The audit log's `seq` orders the chain; its uniqueness
makes two appenders racing for the same place fail instead of forking the chain.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "agent_calls",
    "agent_tokens",
    "approval_votes",
    "approvals",
    "audit",
    "audit_checkpoints",
    "audit_seal",
    "code_prompts",
    "fleet_instances",
    "fleet_partitions",
    "gateway_tasks",
    "metadata",
    "miniapp_answers",
    "miniapp_launches",
    "oauth_accounts",
    "oauth_clients",
    "oauth_consents",
    "oauth_pending",
    "oauth_tokens",
    "outbox",
    "people",
    "remembered_decisions",
    "rounds",
    "second_factors",
    "telegram_budget",
    "tool_lists",
    "updates_seen",
]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

audit = Table(
    "audit",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4"),
    Column("seq", BigInteger, nullable=False, unique=True, comment="place in the hash chain, from 1"),
    Column("at", String(32), nullable=False, comment="UTC, ISO 8601 with microseconds"),
    Column("event", String(32), nullable=False),
    Column("user_id", BigInteger),
    Column("chat_id", BigInteger),
    Column("server", String(64)),
    Column("tool", String(256)),
    Column("request_id", String(64), comment="the question's elc-... id"),
    Column("detail", Text, nullable=False, comment="canonical JSON object"),
    Column("prev_hash", String(64), nullable=False, comment="SHA-256 of the previous row's canonical form"),
    Column("hash", String(64), nullable=False, comment="SHA-256 of this row's canonical form"),
)
Index("ix_audit_user_id", audit.c.user_id)
Index("ix_audit_server", audit.c.server)

audit_seal = Table(
    "audit_seal",
    metadata,
    Column(
        "public_key",
        String(64),
        primary_key=True,
        comment="the key the chain is sealed with (Ed25519, base64)",
    ),
    Column("sealed_at", String(32), nullable=False),
    Column("rows", BigInteger, nullable=False, comment="rows re-chained when it was sealed"),
)

audit_checkpoints = Table(
    "audit_checkpoints",
    metadata,
    Column("count", BigInteger, primary_key=True, comment="rows in the chain"),
    Column("head", String(64), nullable=False, comment="the hash of row `count`"),
    Column("at", String(32), nullable=False),
    Column("key", String(64), primary_key=True, comment="the signer's Ed25519 public key"),
    Column("sig", String(128), nullable=False, comment="Ed25519 signature of the checkpoint line"),
)

rounds = Table(
    "rounds",
    metadata,
    Column("id", String(64), primary_key=True, comment="the question's elc-... id"),
    Column("server", String(64), nullable=False),
    Column("tool", String(256), nullable=False),
    Column("arguments", Text, nullable=False, comment="JSON"),
    Column("user_id", BigInteger, nullable=False, comment="who may answer"),
    Column("chat_id", BigInteger, nullable=False),
    Column("card_chat_id", BigInteger),
    Column("card_message_id", BigInteger),
    Column("era", String(16), nullable=False, comment="'2026-07-28' (resumable) or 'legacy'"),
    Column("progress", Text, nullable=False, comment="JSON: the form's answers so far"),
    Column("input_requests", Text, comment="JSON: the round's inputRequests"),
    Column("request_state", Text, comment="the server's opaque requestState"),
    Column("deadline", Float, nullable=False, comment="Unix time after which the question expires"),
    Column("round_id", String(36), comment="a uuid4 shared by the questions of one round"),
    Column("input_key", String(256), comment="this question's key in the round's inputRequests"),
    Column("token", String(32), comment="the card's callback-data token (random; never a counter)"),
    Column("answer", Text, comment="JSON: the ElicitResult once answered, until the round is resumed"),
    Column("agent", String(32), comment="the agent (token name) whose gateway call asked; null: the chat's"),
)
Index("ix_rounds_round_id", rounds.c.round_id)
Index("ix_rounds_token", rounds.c.token)

approvals = Table(
    "approvals",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4; also in the approval cards' callback data"),
    Column("status", String(16), nullable=False, comment="pending, approved, rejected, expired, cancelled"),
    Column(
        "revision", Integer, nullable=False, comment="bumped by every change: a change is a compare-and-set"
    ),
    Column("generation", Integer, nullable=False, comment="bumped by every change of the content"),
    Column("gate", String(16), nullable=False, comment="'call' or 'answers'"),
    Column("server", String(64), nullable=False),
    Column("tool", String(256), nullable=False),
    Column("content", Text, nullable=False, comment="JSON: exactly what will be sent"),
    Column("content_hash", String(64), nullable=False, comment="SHA-256 approvals are bound to"),
    Column("question", Text, comment="gate 'answers': the server's question"),
    Column("user_id", BigInteger, nullable=False, comment="the requester"),
    Column("user_name", String(256), nullable=False),
    Column("chat_id", BigInteger, nullable=False, comment="the requester's chat"),
    Column("approvers", Text, nullable=False, comment="JSON list of user ids"),
    Column("quorum", Integer, nullable=False),
    Column("self_approval", Boolean, nullable=False),
    Column("approval_chat", BigInteger, comment="the approval group; null: each approver privately"),
    Column("cards", Text, nullable=False, comment="JSON list of [chat_id, message_id]"),
    Column(
        "names", Text, nullable=False, comment="JSON object: user id -> display name, as known when asked"
    ),
    Column("deadline", Float, nullable=False, comment="Unix time after which the request expires"),
    Column("created_at", String(32), nullable=False),
    Column("decided_at", String(32)),
    Column("agent", String(32), comment="the agent (token name) whose gateway call asks; null: the chat's"),
    Column(
        "ran_by",
        String(64),
        comment="'due' once decided; then who carried the decision out (ran the call); null: decided before 0012",
    ),
    Column("second_factor", String(16), comment="'totp': each approval needs a one-time code; null: a tap"),
    Column("remind_at", Float, comment="Unix time approvers who have not voted are reminded; null: never"),
    Column("reminded_at", String(32), comment="when a process took the reminder to send (once)"),
    Column("escalate_at", Float, comment="Unix time escalate_to join the approvers; null: never"),
    Column("escalate_to", Text, comment="JSON list of user ids who join the approvers at escalate_at"),
    Column("escalated_at", String(32)),
    Column(
        "task", String(36), comment="the gateway task (gateway_tasks.id) the agent's call runs as; null: none"
    ),
)
Index("ix_approvals_status", approvals.c.status)

approval_votes = Table(
    "approval_votes",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4"),
    Column("approval_id", String(36), nullable=False),
    Column("user_id", BigInteger, nullable=False),
    Column("name", String(256), nullable=False),
    Column("vote", String(16), nullable=False, comment="'approve' or 'reject'"),
    Column("content_hash", String(64), nullable=False, comment="the content the vote was cast on"),
    Column("at", String(32), nullable=False),
    Column("factor", String(16), comment="'tap', 'totp' or 'recovery_code'; null: a tap (before 0016)"),
)
Index("ix_approval_votes_approval_id", approval_votes.c.approval_id)

people = Table(
    "people",
    metadata,
    Column("user_id", BigInteger, primary_key=True, comment="a Telegram user id"),
    Column("name", String(256), nullable=False, comment="the display name (first name) they last showed"),
    Column("seen", String(32), nullable=False, comment="UTC, ISO 8601: when that name was written"),
)

second_factors = Table(
    "second_factors",
    metadata,
    Column("user_id", BigInteger, primary_key=True, comment="a Telegram user id (an approver)"),
    Column(
        "secret", Text, comment="sealed TOTP secret (Fernet, [storage] secret_key); null: not enrolled yet"
    ),
    Column("pending", Text, comment="sealed secret of an enrolment not confirmed with a code yet"),
    Column("enrolled_at", String(32), comment="UTC, ISO 8601: when `secret` was confirmed"),
    Column(
        "last_step",
        BigInteger,
        nullable=False,
        comment="the last TOTP step accepted: no code of it or before",
    ),
    Column("recovery", Text, nullable=False, comment="JSON list: SHA-256 of each unused recovery code"),
    Column("failures", Integer, nullable=False, comment="wrong codes in a row"),
    Column("locked_until", Float, nullable=False, comment="Unix time: no code is tried before it"),
    Column(
        "revision", Integer, nullable=False, comment="bumped by every change: a change is a compare-and-set"
    ),
)


code_prompts = Table(
    "code_prompts",
    metadata,
    Column(
        "user_id", BigInteger, primary_key=True, comment="the approver asked for a code (one prompt each)"
    ),
    Column("approval_id", String(36), nullable=False, comment="the approval request the code approves"),
    Column(
        "generation",
        Integer,
        nullable=False,
        comment="the request's content generation Approve was tapped on",
    ),
    Column("content_hash", String(64), nullable=False, comment="the content hash Approve was tapped on"),
    Column("card_chat", BigInteger, comment="the card tapped: its chat (null: unknown)"),
    Column("card_message", BigInteger, comment="the card tapped: its message id"),
    Column("message_id", BigInteger, comment="the prompt's message in the approver's private chat"),
    Column("expires_at", Float, nullable=False, comment="Unix time after which a code no longer answers it"),
)

oauth_accounts = Table(
    "oauth_accounts",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4"),
    Column("user_id", BigInteger, nullable=False, comment="the Telegram user who signed in"),
    Column("server", String(64), nullable=False),
    Column("issuer", String(512), comment="the authorization server the tokens and registration belong to"),
    Column("tokens", Text, comment="sealed JSON (Fernet, [storage] secret_key): the OAuth token response"),
    Column("client", Text, comment="sealed JSON: the client registration used with this issuer"),
    Column("expires_at", Float, comment="Unix time the access token expires (the SDK keeps no expiry)"),
    Column("updated_at", String(32), nullable=False, comment="UTC, ISO 8601"),
    UniqueConstraint("user_id", "server", name="uq_oauth_accounts_user_id_server"),
)

agent_tokens = Table(
    "agent_tokens",
    metadata,
    Column(
        "id",
        Integer,
        primary_key=True,
        autoincrement=True,
        comment="given by the database (so several processes may share it); in the /agents buttons",
    ),
    Column("user_id", BigInteger, nullable=False, comment="the Telegram user the agent acts as"),
    Column("name", String(32), nullable=False, comment="unique among the person's live tokens"),
    Column(
        "token_hash",
        String(64),
        nullable=False,
        unique=True,
        comment="SHA-256 of the token's text (the text itself is never stored)",
    ),
    Column("created", String(32), nullable=False, comment="UTC, ISO 8601 with microseconds"),
    Column("expires", String(32), comment="null: until revoked"),
    Column("last_used", String(32)),
    Column("calls", Integer, nullable=False, comment="tool calls made with it"),
    Column("revoked", String(32), comment="when it was revoked; null: not revoked"),
    Column(
        "expiry_noted",
        String(32),
        comment="when a process first found it expired (and audited that); null: not yet",
    ),
)
Index("ix_agent_tokens_user_id", agent_tokens.c.user_id)

remembered_decisions = Table(
    "remembered_decisions",
    metadata,
    Column(
        "id",
        Integer,
        primary_key=True,
        autoincrement=True,
        comment="given by the database (so several processes may share it); in the /agents buttons",
    ),
    Column("user_id", BigInteger, nullable=False, comment="the person whose agent asked"),
    Column("agent_id", Integer, nullable=False, comment="the agent token (agent_tokens.id) that asked"),
    Column("tool", Text, nullable=False, comment="the tool the agent asked to use (Bash, Edit, mcp__x__y)"),
    Column(
        "input", Text, nullable=False, comment="the tool's input, canonical JSON (sorted keys, no spaces)"
    ),
    Column("input_hash", String(64), nullable=False, comment="SHA-256 of `input` (what recall looks up by)"),
    Column("allow", Boolean, nullable=False, comment="true: allowed; false: denied"),
    Column("span", String(16), nullable=False, comment="'session', 'hour' or 'always'"),
    Column(
        "session", Text, nullable=False, comment="the agent session it holds in (span 'session'), else ''"
    ),
    Column("made_at", String(32), nullable=False, comment="UTC, ISO 8601 with microseconds"),
    Column("made_by", BigInteger, comment="who decided, when not the person (an approver); null: the person"),
    Column("until", String(32), comment="when it stops holding (span 'hour'); null: it does not expire"),
    Column("forgotten", String(32), comment="when the person revoked it; null: not revoked"),
)
Index("ix_remembered_decisions_user_id", remembered_decisions.c.user_id, remembered_decisions.c.agent_id)

updates_seen = Table(
    "updates_seen",
    metadata,
    Column("bot_id", BigInteger, primary_key=True, comment="the bot whose update it is (its token's number)"),
    Column("update_id", BigInteger, primary_key=True, comment="Telegram's update_id"),
    Column("received", String(32), nullable=False, comment="UTC, ISO 8601 with microseconds"),
    Column("payload", Text, comment="JSON: the update, while it waits for its partition's owner"),
    Column("partition", Integer, comment="the partition of the update's user (chat) when routed"),
    Column("handled", Boolean, comment="false: waiting for the owner of `partition`; null or true: handled"),
)
Index("ix_updates_seen_received", updates_seen.c.received)

telegram_budget = Table(
    "telegram_budget",
    metadata,
    Column("bot_id", BigInteger, primary_key=True, comment="the bot whose budget it is (its token's number)"),
    Column(
        "bucket", String(64), primary_key=True, comment="'overall', or 'g:' and the group's chat id or @name"
    ),
    Column(
        "tat",
        Float,
        nullable=False,
        comment="Unix time (the database's clock) the bucket is empty again: the GCRA's theoretical arrival time",
    ),
    Column(
        "paused_until",
        Float,
        nullable=False,
        comment="the overall row: Unix time before which no instance sends (after a 429); 0: not paused",
    ),
    Column(
        "moved",
        Float,
        nullable=False,
        server_default="0",
        comment="seconds the places were moved back in all for sends that reached Telegram late",
    ),
)

miniapp_launches = Table(
    "miniapp_launches",
    metadata,
    Column("launch", String(64), primary_key=True, comment="SHA-256 of the launch data's signature"),
    Column(
        "used", Float, nullable=False, comment="Unix time it answered a form (the row is the compare-and-set)"
    ),
    Column("expires", Float, nullable=False, comment="Unix time after which the launch is too old anyway"),
)
Index("ix_miniapp_launches_expires", miniapp_launches.c.expires)

agent_calls = Table(
    "agent_calls",
    metadata,
    Column(
        "id",
        String(36),
        primary_key=True,
        comment="a uuid4; the payload of the bus topics 'agent_call(_done)'",
    ),
    Column("bot_id", BigInteger, nullable=False),
    Column(
        "user_id", BigInteger, nullable=False, comment="the person the agent acts for (whose owner runs it)"
    ),
    Column("token_id", Integer, nullable=False, comment="the agent token that made the call"),
    Column("agent", String(32), nullable=False, comment="the token's name"),
    Column("name", Text, nullable=False, comment="the tool as the agent called it"),
    Column("arguments", Text, nullable=False, comment="JSON"),
    Column(
        "receiver", String(36), nullable=False, comment="the instance whose agent waits (fleet_instances)"
    ),
    Column("runner", String(36), comment="the instance that claimed it"),
    Column("state", String(16), nullable=False, comment="sent, claimed, done, withdrawn, lost"),
    Column("left_as", String(32), comment="why its agent left while it ran (an Outcome value)"),
    Column("result", Text, comment="JSON: the CallToolResult"),
    Column("created", Float, nullable=False, comment="Unix time"),
)
Index("ix_agent_calls_state", agent_calls.c.bot_id, agent_calls.c.state)

miniapp_answers = Table(
    "miniapp_answers",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4; the payload of the bus topic 'miniapp'"),
    Column("token", String(32), nullable=False, comment="the prompt's token (as in the page's address)"),
    Column("user_id", BigInteger, nullable=False, comment="who answered (checked against the prompt again)"),
    Column("answer", Text, nullable=False, comment="JSON: ok, and the content or the reason"),
    Column("state", String(16), nullable=False, comment="sent, claimed, taken, gone (ended), expired"),
    Column("created", Float, nullable=False, comment="Unix time"),
)
Index("ix_miniapp_answers_created", miniapp_answers.c.created)

oauth_pending = Table(
    "oauth_pending",
    metadata,
    Column("state", String(64), primary_key=True, comment="SHA-256 of the sign-in's OAuth state"),
    Column("user_id", BigInteger, nullable=False),
    Column("server", String(64), nullable=False),
    Column("created", Float, nullable=False, comment="Unix time"),
    Column("expires", Float, nullable=False, comment="Unix time the card expires"),
    Column("status", String(16), nullable=False, comment="waiting, returned, taken, done, failed"),
    Column("params", Text, comment="sealed JSON ([storage] secret_key): the browser's code, state, iss"),
    Column("reason", Text, comment="why the sign-in failed (the browser's page says it)"),
)
Index("ix_oauth_pending_expires", oauth_pending.c.expires)

tool_lists = Table(
    "tool_lists",
    metadata,
    Column("token", String(16), primary_key=True, comment="random; in the list's callback data"),
    Column("user_id", BigInteger, nullable=False, comment="who asked for the list: only they may tap it"),
    Column("chat_id", BigInteger, nullable=False, comment="where the calls run"),
    Column("server", String(64), nullable=False),
    Column("tools", Text, nullable=False, comment="JSON list of tool names, in the buttons' order"),
    Column("created", Float, nullable=False, comment="Unix time"),
)
Index("ix_tool_lists_created", tool_lists.c.created)
Index("ix_updates_seen_partition", updates_seen.c.bot_id, updates_seen.c.partition, updates_seen.c.handled)

fleet_partitions = Table(
    "fleet_partitions",
    metadata,
    Column("bot_id", BigInteger, primary_key=True, comment="the bot whose users are partitioned"),
    Column("partition", Integer, primary_key=True, comment="user id % PARTITIONS"),
    Column("owner", String(36), comment="the instance that holds it; null: released"),
    Column("epoch", BigInteger, nullable=False, comment="bumped by every take: fenced writes compare it"),
    Column("heartbeat", Float, comment="database time (Unix seconds) of the owner's last heartbeat"),
)

fleet_instances = Table(
    "fleet_instances",
    metadata,
    Column("bot_id", BigInteger, primary_key=True),
    Column("instance", String(36), primary_key=True, comment="a uuid4 per process"),
    Column("pid", Integer, nullable=False, comment="the backend pid of its partition-lock session"),
    Column("heartbeat", Float, nullable=False, comment="database time (Unix seconds) of its last heartbeat"),
)

oauth_clients = Table(
    "oauth_clients",
    metadata,
    Column(
        "client_id",
        String(512),
        primary_key=True,
        comment="given at registration, or the https URL of the client's metadata document",
    ),
    Column("info", Text, nullable=False, comment="JSON: the client's registered (or fetched) metadata"),
    Column("created", Float, nullable=False, comment="Unix time it was registered or its document fetched"),
)

oauth_consents = Table(
    "oauth_consents",
    metadata,
    Column("id", String(32), primary_key=True, comment="random; in the consent card's buttons"),
    Column("page_hash", String(64), nullable=False, unique=True, comment="SHA-256 of the page's secret"),
    Column("link_hash", String(64), nullable=False, unique=True, comment="SHA-256 of the t.me start code"),
    Column("code_hash", String(64), unique=True, comment="SHA-256 of the authorization code, once issued"),
    Column("client_id", String(512), nullable=False),
    Column("client_name", String(200), nullable=False, comment="as the card and the page show it"),
    Column("request", Text, nullable=False, comment="JSON: redirect URI, state, PKCE challenge, resource"),
    Column("match", String(8), nullable=False, comment="the short code both the page and the card show"),
    Column(
        "state",
        String(16),
        nullable=False,
        comment="waiting, shown, allowed, denied, issued, exchanged, closed",
    ),
    Column("user_id", BigInteger, comment="who tapped the link (the grant is theirs); null: nobody yet"),
    Column("grant_id", Integer, comment="the agent_tokens row the code was exchanged for"),
    Column("expires", Float, nullable=False, comment="Unix time the request (or its code) expires"),
)
Index("ix_oauth_consents_expires", oauth_consents.c.expires)

oauth_tokens = Table(
    "oauth_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True, comment="SHA-256 of the token (never the token)"),
    Column("kind", String(8), nullable=False, comment="access or refresh"),
    Column("grant_id", Integer, nullable=False, comment="the agent_tokens row: its person, its revocation"),
    Column("client_id", String(512), nullable=False),
    Column("resource", String(512), nullable=False, comment="the RFC 8707 resource it is for"),
    Column("expires", Float, comment="Unix time; null: as long as its grant"),
    Column("rotated", Float, comment="a refresh token: Unix time it was exchanged (presented again: replay)"),
)
Index("ix_oauth_tokens_grant_id", oauth_tokens.c.grant_id)
outbox = Table(
    "outbox",
    metadata,
    Column(
        "instance", String(36), primary_key=True, comment="the process that wrote it (a uuid4 per process)"
    ),
    Column("seq", BigInteger, primary_key=True, comment="its order among that process's messages"),
    Column("bot_id", BigInteger, nullable=False, comment="the bot that sends it (its token's number)"),
    Column("user_id", BigInteger, nullable=False, comment="the person it is for: their owner sends it"),
    Column("partition", Integer, nullable=False, comment="user_id % PARTITIONS"),
    Column("method", String(64), nullable=False, comment="the Bot API method, e.g. sendMessage"),
    Column("params", Text, nullable=False, comment="JSON: the method's parameters"),
    Column("written", Float, nullable=False, comment="Unix time it was written (orders processes' messages)"),
)
Index("ix_outbox_bot_id", outbox.c.bot_id, outbox.c.partition)

gateway_tasks = Table(
    "gateway_tasks",
    metadata,
    Column("id", String(36), primary_key=True, comment="the task id the agent polls (a uuid4)"),
    Column(
        "token_id", Integer, nullable=False, comment="the agent token (agent_tokens.id): only it may read"
    ),
    Column("user_id", BigInteger, nullable=False, comment="the person the agent acts as"),
    Column("agent", String(32), nullable=False, comment="the agent's name"),
    Column(
        "tool", String(512), nullable=False, comment="the gateway tool called (<server>__<tool>, ask_person)"
    ),
    Column("status", String(16), nullable=False, comment="working, completed, failed, cancelled"),
    Column("message", Text, comment="the status line (why it failed or was cancelled)"),
    Column("result", Text, comment="JSON: the CallToolResult once completed"),
    Column("created", Float, nullable=False, comment="Unix time"),
    Column("updated", Float, nullable=False, comment="Unix time of the last status change"),
    Column("ttl_ms", Integer, nullable=False, comment="kept this long from created, then deleted"),
    Column(
        "alive",
        Float,
        comment="Unix time the process running its call last said so; null: not running (waiting for approvers)",
    ),
)
Index("ix_gateway_tasks_token_id", gateway_tasks.c.token_id)

tool_tasks = Table(
    "tool_tasks",
    metadata,
    Column("id", String(36), primary_key=True, comment="a uuid4 of the bot's own"),
    Column("server", String(64), nullable=False),
    Column("task_id", String(256), nullable=False, comment="the server's task id"),
    Column("tool", String(256), nullable=False),
    Column("arguments", Text, nullable=False, comment="JSON"),
    Column("user_id", BigInteger, nullable=False, comment="whose call it is"),
    Column("chat_id", BigInteger, nullable=False, comment="where its result goes"),
    Column("created", Float, nullable=False, comment="Unix time the server made the task"),
    Column("expires", Float, comment="Unix time the server forgets the task (its ttl); null: never"),
)
