"""Figures -> side-by-side tables, one per scenario (stdout). Pure formatting, no I/O."""

from __future__ import annotations

from typing import Any, Final

TARGETS: Final = {
    "rss_kb_per_pending_prompt": 100.0,
}
GUARD_INSTRUCTIONS: Final = {"2025": 15e6, "2026-07-28": 16e6}
"""The most instructions the bot may execute per single-choice elicitation with its call (issue 14): a guard
that keeps a costly client or shortcut out, not a race. "2025" covers both 2025 revisions (`legacy`)."""


def guard(protocol: str) -> float:
    return GUARD_INSTRUCTIONS.get(protocol, GUARD_INSTRUCTIONS["2025"])


def _m(instructions: float) -> str:
    return f"{instructions / 1e6:.2f} M"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:  # noqa: C901 - one flat block per scenario, each optional
    """(scenario, figure, value, note) rows, in the order of the issue."""
    out: list[tuple[str, str, str, str]] = []

    def add(scenario: str, figure: str, value: Any, note: str = "") -> None:
        out.append((scenario, figure, _fmt(value), note))

    for a in results.get("bridge", []):
        s = f"a. bridge {a['protocol']}"
        add(
            s,
            "single-choice elicitations",
            a["elicitations"],
            f"{a['people_in_parallel']} people in parallel, stdio server",
        )
        add(s, "answered correctly", a["answered_correctly"], "content checked in the server's log")
        add(s, "taps per elicitation", a["taps_per_elicitation"], "choose, then Submit on the review card")
        add(
            s,
            "bot CPU ms / elicitation",
            a["bot_cpu_ms_per_elicitation"],
            f"incl. its /call; Bot API client {a.get('client', 'aiohttp')}",
        )
        add(
            s,
            "fake Bot API CPU ms / elicitation",
            a["fake_and_people_cpu_ms_per_elicitation"],
            "the bench process: fake server and scripted people",
        )
        bare = a.get("bare_client")
        if bare is None:
            continue
        add(
            s,
            "bare Client CPU ms / elicitation",
            bare["client_cpu_ms_per_elicitation"],
            "mcp.Client + callback, same calls",
        )
        add(
            s,
            "wall ms / elicitation: bot | bare",
            f"{_fmt(a['wall_ms_per_elicitation'])} | {_fmt(bare['wall_ms_per_elicitation'])}",
            f"ratio {a['wall_ratio_bot_over_bare']}×",
        )
        add(
            s,
            "one at a time, ms p50: bot | bare",
            f"{_fmt(a['sequential_latency_ms_p50'])} | {_fmt(bare['sequential_latency_ms_p50'])}",
            f"ratio {a['sequential_latency_ratio_bot_over_bare']}×",
        )
        add(
            s,
            "latency ms p50 | p99 (loaded)",
            f"{_fmt(a['latency_ms_p50'])} | {_fmt(a['latency_ms_p99'])}",
            "/call sent -> result in chat",
        )
    counted = results.get("instructions", [])
    shipped = counted[0].get("client", "aiohttp") if counted else "aiohttp"
    bare_by_protocol = {b["protocol"]: b for b in results.get("bare_instructions", [])}
    for i in counted:
        if i.get("client", "aiohttp") != shipped:
            continue
        s = f"a. bridge {i['protocol']}"
        mine, limit = i["bot_instructions_per_elicitation"], guard(i["protocol"])
        bare_count = bare_by_protocol.get(i["protocol"])
        beside = f" | {_m(bare_count['instructions_per_elicitation'])}" if bare_count else ""
        add(
            s,
            "instructions / elicitation: bot | bare" if bare_count else "bot instructions / elicitation",
            _m(mine) + beside,
            f"callgrind, {i['elicitations']} elicitations ({i['answered_correctly']} answered correctly), "
            f"with its call; {'within' if mine <= limit else 'OVER'} the {_m(limit)} guard",
        )
        plain = i["bot_instructions_per_plain_call"]
        add(
            s,
            "… of which the /call itself",
            f"{plain / 1e6:.2f} M",
            f"a plain call (its result only); the question, 2 taps and the card: "
            f"{(i['bot_instructions_per_elicitation'] - plain) / 1e6:.2f} M",
        )
    comparison = _client_comparison(results)
    if comparison is not None:
        add(*comparison)
    b = results.get("calls_per_kind")
    if b:
        kinds = ("plain_call_no_question", "single_choice", "three_field_form", "url_consent")
        for kind in (*kinds, "six_field_form_chat", "six_field_form_page"):
            k = b.get(kind)
            if not k:
                continue
            calls = k["bot_api_calls"]
            text = " ".join(
                f"{m.removesuffix('Message').removesuffix('Query')}={calls[m]:g}" for m in calls if calls[m]
            )
            add(
                f"b. calls {b['protocol']}",
                kind.replace("_", " "),
                k["rate_limited_calls"],
                f"rate-limited; {text}; taps={k['taps']} typed={k['typed_replies']}; bot CPU {k['bot_cpu_ms']} ms"
                + (
                    "; answered with one submit on the Mini App page" if kind == "six_field_form_page" else ""
                ),
            )
            sent = k.get("messages")
            if sent:
                waited = k.get("submit_to_result_ms")
                add(
                    f"b. messages {b['protocol']}",
                    kind.replace("_", " "),
                    sent["total"],
                    f"sends={sent['sends']:g} edits={sent['edits']:g}, the result included"
                    + (f"; Submit -> result ms p50 {waited['p50']} p99 {waited['p99']}" if waited else ""),
                )
    c = results.get("pending")
    if c:
        s = f"c. pending {c['protocol']}"
        target = TARGETS["rss_kb_per_pending_prompt"]
        verdict = "meets" if c["rss_kb_per_pending_prompt"] < target else "MISSES"
        add(s, "people, each a prompt pending", c["pending_at_once"], c["transport"])
        failed = c.get("calls_failed_before_asking")
        if failed:  # the figures below are of the others
            reasons = "; ".join(f"{n}: {reason}" for reason, n in failed.items())
            add(
                s,
                "calls that ended before they asked",
                sum(failed.values()),
                f"not in the figures below ({reasons})",
            )
        lost = c.get("calls_failed_after_answering")
        if lost:  # their people were told; the answers they gave are not counted as answered correctly
            reasons = "; ".join(f"{n}: {reason}" for reason, n in lost.items())
            add(
                s,
                "calls that broke after the answer",
                sum(lost.values()),
                f"told so, with Run again ({reasons})",
            )
        add(
            s,
            "answered correctly",
            c["answered_correctly"],
            f"{c['distinct_server_sessions']} distinct server sessions",
        )
        add(
            s,
            "bot RSS KB: start | sessions | pending",
            f"{_fmt(c['rss_kb_bot_started'])} | {_fmt(c['rss_kb_sessions_open'])} | {_fmt(c['rss_kb_all_pending'])}",
            f"peak {_fmt(c['rss_kb_peak'])} KB",
        )
        add(s, "RSS KB per MCP session", c["rss_kb_per_session"], "open, idle")
        add(
            s,
            "RSS KB per pending prompt",
            c["rss_kb_per_pending_prompt"],
            f"{verdict} the < {target:g} KB target (beyond the session)",
        )
        if "store_cpu_ms_per_row" in c:  # results from before the store have none
            add(
                s,
                "store: audit rows | CPU ms per prompt",
                f"{c['store_rows_written_per_prompt']} | {c['store_cpu_ms_per_prompt']}",
                f"at most: {c['store_cpu_ms_per_row']} ms CPU per row committed alone (SQLite, measured apart)",
            )
        if "store_keeping_cpu_ms_per_prompt" in c:  # results from before questions were kept have none
            add(
                s,
                "store: kept questions | writes | CPU ms per prompt",
                f"{c['store_questions_kept_at_once']} | {c['store_keeping_writes_per_prompt']}"
                f" | {c['store_keeping_cpu_ms_per_prompt']}",
                "open questions kept for a restart, at once; keeping one (SQLite, measured apart)",
            )
        if "store_all_rows_cpu_ms_per_prompt" in c:  # results from before issue 35 have none
            add(
                s,
                "store: all rows of a prompt | CPU ms per prompt",
                f"{c['store_all_rows_transactions_per_prompt']} transactions | {c['store_all_rows_cpu_ms_per_prompt']}",
                "audit rows and kept question, 100 prompts in flight (SQLite, measured apart); target <= 1 ms",
            )
        add(
            s,
            "server request -> card ms p50 | p99",
            f"{_fmt(c['request_to_card_ms_p50'])} | {_fmt(c['request_to_card_ms_p99'])}",
            f"max {_fmt(c['request_to_card_ms_max'])}; all cards shown in {c['all_cards_shown_s']} s",
        )
        to_bot, to_card = c.get("request_to_bot_ms_p50_p99"), c.get("bot_to_card_ms_p50_p99")
        if to_bot and to_card:
            add(
                s,
                "of which: to the bot | bot to card ms p50",
                f"{to_bot[0]:,} | {to_card[0]:,}",
                f"p99 {to_bot[1]:,} | {to_card[1]:,}; split at the question's audit row (the bot has it, before the card)",
            )
        busy = c["cpu_s_while_showing"]
        add(
            s,
            "CPU s while showing: bot | server | fake",
            f"{_fmt(busy['bot'])} | {_fmt(busy['mcp_server'])} | {_fmt(busy['bench_fake_and_people'])}",
            f"in {_fmt(busy['wall'])} s wall; bot CPU ms per prompt shown {c['bot_cpu_ms_per_prompt_shown']}",
        )
        sent = c.get("bot_api_calls_per_prompt_shown", {}).get("sendMessage")
        if sent is not None:
            add(
                s,
                "messages sent per prompt shown",
                sent,
                "the card; a call not asking within a second gets a status once no card went for a second",
            )
    d = results.get("flood")
    if d:
        s = f"d. flood {d['protocol']}"
        lost = d["prompts"] - d["answers_reached_server"]
        add(s, "prompts started", d["prompts"], f"within {d['started_within_s']:g} s, fake at 30 messages/s")
        add(s, "cards delivered", d["cards_delivered"], "must be all")
        add(
            s,
            "answers reached the server",
            d["answers_reached_server"],
            "zero lost" if lost == 0 else f"{lost} LOST",
        )
        add(
            s,
            "all cards delivered after s",
            d["all_cards_delivered_s"],
            f"theory {d['theoretical_min_cards_s']} s for the cards alone (cards / 30 s⁻¹): "
            f"{d.get('cards_over_theory', '?')}x",
        )
        add(
            s,
            "everything answered after s",
            d["everything_answered_s"],
            f"{d['messages_accepted']} messages accepted ({d.get('messages_per_prompt', '?')} a prompt): "
            f"theory {d['theoretical_min_all_messages_s']} s (messages / 30 s⁻¹): "
            f"{d.get('everything_over_theory', '?')}x",
        )
        add(s, "429s from the fake", d["fake_429s"], f"other errors {d['other_errors']}")
        if "first_question_asked_s" in d:
            add(
                s,
                "questions asked from/until s",
                f"{d['first_question_asked_s']}-{d['last_question_asked_s']}",
                "the server's questions reaching the bot (sessions opening, calls reaching the server)",
            )
        if "cpu_s" in d:
            cpu, load = d["cpu_s"], d["load_average_1min"]
            add(
                s,
                "CPU s: bot / MCP server / fake",
                f"{cpu['bot']} / {cpu['mcp_server']} / {cpu['bench_fake_and_people']}",
                f"the fake and the scripted people in the bench's process; machine load average "
                f"{load['before']} -> {load['after']} (other jobs share the cores)",
            )
    e = results.get("public_demo")
    if e:
        s = "e. public demo"
        refused = e.get("refused", 0)
        wrong = refused + e["lost"] + e["crossed"]
        add(
            s,
            "strangers",
            e["strangers"],
            f"within {e['started_within_s']:g} s, shipped config, allow_everyone",
        )
        add(
            s,
            "completed the deploy flow",
            e["completed"],
            "zero refused, lost or crossed"
            if not wrong
            else f"{wrong} WRONG: {refused} refused, {e['lost']} lost, {e['crossed']} crossed",
        )
        if refused:
            reasons = "; ".join(f"{n} x {reason!r}" for reason, n in e.get("refused_reasons", {}).items())
            add(s, "refused: what they were shown last", refused, reasons)
        if e["lost"]:
            stalled = e.get("stalled_after_s")
            waiting = ", ".join(f"{n} at {step}" for step, n in e.get("lost_waiting_for", {}).items())
            add(
                s,
                "lost: still waiting, by step",
                e["lost"],
                waiting
                + (
                    f" (given up {stalled} s in: nothing had changed for {e.get('stall_s', 60):g} s)"
                    if stalled is not None
                    else ""
                ),
            )
        add(s, "peak RSS MB, bot and servers", e["peak_rss_mb_total"], f"bot alone {e['peak_rss_mb_bot']}")
        add(
            s,
            "processes",
            e["processes_most"],
            "the bot, its server processes and their exit watchers, most at once",
        )
        add(
            s,
            "last result after s",
            e["last_result_s"],
            f"{e['messages_accepted']} messages accepted: theory {e['theoretical_min_s']} s at 30/s",
        )
        add(s, "429s from the fake", e["fake_429s"])
    out += _fleet_rows(results)
    out += _gateway_rows(results)
    return out


def _goal(value: Any, met: bool, goal: str) -> str:
    return (
        f"goal {goal}: {'met' if met else 'NOT MET'}" if value is not None else f"goal {goal}: none measured"
    )


def _fleet_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """f: each run (without a kill, with one instance killed half-way), figures beside the issue's goals."""
    out: list[tuple[str, str, str, str]] = []

    def add(scenario: str, figure: str, value: Any, note: str = "") -> None:
        out.append((scenario, figure, "n/a" if value is None else _fmt(value), note))

    for f in results.get("fleet", []):
        s = f"f. fleet {f['protocol']}" + (" kill" if f["kill"] else "")
        add(
            s,
            "prompts | instances",
            f"{f['prompts']} | {f['instances']}",
            f"within {f['started_within_s']:g} s; /calls taken by instance: {f['calls_by_instance']}",
        )
        wrong = f["lost"] + f["wrong"]
        add(
            s,
            "answered | lost | wrong",
            f"{f['answered']} | {f['lost']} | {f['wrong']}",
            "goal 0 lost: met" if wrong == 0 else f"{wrong} LOST OR WRONG (goal 0)",
        )
        dups = f["duplicate_calls_at_server"] + f["duplicate_results_in_chat"]
        add(
            s,
            "duplicates: at the server | in the chat",
            f"{f['duplicate_calls_at_server']} | {f['duplicate_results_in_chat']}",
            "goal 0: met" if dups == 0 else "goal 0: NOT MET",
        )
        add(
            s,
            "most sends in any 1 s",
            f["most_sends_in_1s"],
            "sends and edits reaching the fake, 429s included; "
            + _goal(1, f["most_sends_in_1s"] <= 30, "at most 30"),
        )
        kinds = "; ".join(f"{n}x {kind}" for kind, n in f.get("other_errors_by_kind", {}).items())
        add(
            s,
            "429s from the fake",
            f["fake_429s"],
            _goal(1, f["fake_429s"] == 0, "0")
            + f"; other errors {f['other_errors']}"
            + (f": {kinds}" if kinds else ""),
        )
        ratio = f["over_theory"]
        add(
            s,
            "everything answered after s",
            f["everything_answered_s"],
            f"{f['messages_accepted']} messages accepted: theory {f['theoretical_min_s']} s at 30/s: {ratio}x; "
            + _goal(ratio, ratio is not None and ratio <= 1.15, "at most 1.15x"),
        )
        add(
            s,
            "taps refused | unanswered",
            f"{f['taps_refused']} | {f['taps_unanswered']}",
            "taps that landed on an instance without the question (tapped again); 0 with partition ownership",
        )
        if f["kill"]:
            add(
                s,
                "killed instance 0 after s | its people",
                f"{f['killed_at_s']} | {f['its_people']}",
                "half of the people had their result; its people: unfinished, in its partitions; "
                f"{f['its_people_with_a_tap_left']} with a tap left",
            )
            add(
                s,
                "sent again after the kill",
                f"{f['sent_again_not_modified']}",
                "kept edits the killed instance had sent but not marked: sent again, the same text "
                "(Telegram: not modified; nothing seen twice)",
            )
            add(
                s,
                "its people taken over | lost",
                f"{f['its_people_taken_over']} | {f['its_people_lost']}",
                f"given {f['takeover_wait_s']:g} s after the kill",
            )
            p50, p99 = f["takeover_s_p50"], f["takeover_s_p99"]
            add(
                s,
                "takeover s p50 | p99",
                "n/a" if p50 is None else f"{p50} | {p99}",
                "from the kill to the first card or result the survivor sent each; "
                + _goal(p50, p50 is not None and p50 < 5 and p99 < 10, "under 5 s | 10 s"),
            )
    return out


def _load(figures: dict[str, Any]) -> str:
    """ "; load average a -> b" when measured: these timings move with the machine's other jobs."""
    load = figures.get("load_average_1min")
    return "" if load is None else f"; machine load average {load['before']} -> {load['after']}"


def _gateway_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """g: one agent's calls through `/mcp` against the same calls straight to the server, then many agents."""
    out: list[tuple[str, str, str, str]] = []

    def add(scenario: str, figure: str, value: Any, note: str = "") -> None:
        out.append((scenario, figure, _fmt(value), note))

    counted = {i["protocol"]: i for i in results.get("gateway_instructions", [])}
    for g in results.get("gateway", []):
        s = f"g. gateway {g['protocol']}"
        done = g["completed"]
        add(
            s,
            "calls one at a time: gateway | straight",
            f"{done['through_gateway']} | {done['straight']}",
            f"of {g['calls']} each, results checked; an agent's b__hello through /mcp vs mcp.Client on the "
            "server, streamable HTTP both",
        )
        via, straight = g["through_gateway_ms"], g["straight_ms"]
        add(
            s,
            "ms p50 | p99: gateway",
            f"{_fmt(via['p50'])} | {_fmt(via['p99'])}",
            f"straight {_fmt(straight['p50'])} | {_fmt(straight['p99'])}; the gateway adds "
            f"{_fmt(g['overhead_ms_p50'])} ms at p50",
        )
        server = g["server_cpu_ms_per_call"]
        add(
            s,
            "bot CPU ms / agent call",
            g["bot_cpu_ms_per_call"],
            f"MCP server CPU ms per call {_fmt(server['through_gateway'])} from the bot, "
            f"{_fmt(server['straight'])} straight{_load(g)}",
        )
        i = counted.get(g["protocol"])
        if i is not None:
            add(
                s,
                "bot instructions / call: agent | chat",
                f"{_m(i['bot_instructions_per_agent_call'])} | {_m(i['bot_instructions_per_chat_call'])}",
                f"callgrind, {i['calls']} calls each: through /mcp, and the same person's /call of the tool",
            )
    for a in results.get("gateway_agents", []):
        s = f"g. agents {a['protocol']}"
        add(
            s,
            "agents calling at once",
            a["agents"],
            "each its own person's token and /mcp session; its call opens the person's server session",
        )
        errors = a["errors"]
        add(
            s,
            "results | errors",
            f"{a['completed']} | {errors}",
            "zero errors" if not errors else f"{errors} ERRORS: " + "; ".join(a["first_errors"]),
        )
        for name, r in (("", a), ("again, ", a["warm"])):
            add(
                s,
                f"{name}all calls done after s",
                r["all_calls_s"],
                f"from the go; {r['completed']} results"
                + (
                    f"; all connected in {a['connect_all_s']} s first"
                    if not name
                    else "; the same agents at once on their open sessions"
                ),
            )
            add(
                s,
                f"{name}call ms p50 | p99",
                f"{_fmt(r['call_ms']['p50'])} | {_fmt(r['call_ms']['p99'])}",
                f"CPU s from the go: bot {_fmt(r['cpu_s']['bot'])}, MCP server {_fmt(r['cpu_s']['mcp_server'])}"
                + ("" if name else _load(a)),
            )
    return out


def _client_comparison(results: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """One line: each Bot API client measured, instructions per elicitation (and CPU ms) side by side."""
    counted = results.get("instructions", [])
    clients = list(dict.fromkeys(i.get("client", "aiohttp") for i in counted))
    if len(clients) < 2:
        return None
    protocols = list(dict.fromkeys(i["protocol"] for i in counted))
    by = {(i["protocol"], i.get("client", "aiohttp")): i["bot_instructions_per_elicitation"] for i in counted}

    def side_by_side(protocol: str) -> str:
        return " | ".join(_m(by[protocol, c]) if (protocol, c) in by else "?" for c in clients)

    notes = [f"instructions / elicitation ({protocols[0]})"]
    notes += [f"{p}: {side_by_side(p)}" for p in protocols[1:]]
    cpu = {a.get("client", "aiohttp"): a for a in [*results.get("bridge", []), *results.get("bridge_other_clients", [])]
           if a["protocol"] == protocols[0]}  # fmt: skip
    if len(cpu) > 1:
        figures = " | ".join(_fmt(cpu[c]["bot_cpu_ms_per_elicitation"]) if c in cpu else "?" for c in clients)
        notes.append(f"bot CPU ms {figures} ({protocols[0]})")
    notes.append(f"the bot ships {clients[0]}")
    return (
        f"a. bridge {protocols[0]}",
        f"Bot API client: {' | '.join(clients)}",
        side_by_side(protocols[0]),
        "; ".join(notes),
    )


TITLES: Final = {
    "a": "a. Bridge cost per single-choice elicitation (bot vs a bare mcp Client)",
    "b": "b. Bot API calls per elicitation, by form kind",
    "c": "c. People with a prompt pending at the same time",
    "d": "d. Flood against a fake enforcing Telegram's rate limits",
    "e": "e. The public demo: strangers through deploy with the shipped config",
    "f": "f. A fleet: 2 instances on PostgreSQL behind a round-robin proxy, the flood at 30 messages/s",
    "g": "g. The MCP gateway: an agent's call through /mcp vs straight to the server, and agents at once",
}


def table(results: dict[str, Any]) -> str:
    """One table per scenario, each with aligned columns."""
    body = rows(results)
    header = ("scenario", "figure", "value", "note")
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(3)]

    def line(r: tuple[str, str, str, str]) -> str:
        return f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip()

    blocks = []
    for letter, title in TITLES.items():
        mine = [r for r in body if r[0].startswith(f"{letter}.")]
        if mine:
            rule = "  ".join("-" * w for w in widths) + "  " + "-" * 4
            blocks.append("\n".join([title, line(header), rule, *map(line, mine)]))
    return "\n\n".join(blocks)
