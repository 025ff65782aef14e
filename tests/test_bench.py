"""The benchmark cannot rot: each scenario of `bench/` runs in miniature and every answer reaches its server.

Only correctness is asserted (counts, everyone answered); the timings the bench prints are never checked.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pytest_postgresql.executors.proc import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from bench import demo, fleet, gateway, report, scenarios, scene
from tests.zygote import open_bot, server_command

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(autouse=True)
def forked_bots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenarios' bots, `python -m bench.botproc ...`, and their MCP servers, `python -m bench.server ...`,
    forked by this process's zygote (tests/zygote.py) instead of started cold: the file starts ten bots and more
    servers, each spending a second or more of CPU importing, and checks what they do, not how they start.
    `python -m bench` itself (and the CPU guard, under callgrind) starts them cold."""
    monkeypatch.setattr(scene, "open_bot_process", open_bot)
    monkeypatch.setattr(scene, "server_command", server_command)


async def test_the_bridge_scenario_answers_every_single_choice_elicitation_through_the_bot_and_the_bare_client() -> (
    None
):
    """a: five elicitations through the bot process and a bare mcp Client; all reach the server correctly."""
    result = await scenarios.bridge_cost(elicitations=5, users=1, protocol="legacy", sequential=2)
    assert result["elicitations"] == 5
    assert result["answered_correctly"] == 5
    assert result["bare_client"]["elicitations"] == 5
    assert result["bot_api_calls_per_elicitation"]["answerCallbackQuery"] == 2  # choose, then Submit


# a (callgrind) has no test of its own: `python -m bench.guard`, which `.ci/run` runs after the tests, counts the
# same scenario and exits 1 unless every elicitation is answered right, a question counts more instructions than
# a plain call (more than none) and each takes two taps (a separate run under callgrind here took over a minute).


async def test_the_calls_per_kind_scenario_completes_every_form_kind() -> None:
    """b: a plain call, a single choice, a three-field form, a URL consent and a six-field form (in the chat
    and on the Mini App page, which costs at most 4 Bot API calls) each complete."""
    result = await scenarios.calls_per_kind(per_kind=2, protocol="legacy", people=1)
    kinds = ("plain_call_no_question", "single_choice", "three_field_form", "url_consent")
    for kind in (*kinds, "six_field_form_chat", "six_field_form_page"):
        assert result[kind]["completed"] == 2, kind
    assert result["three_field_form"]["typed_replies"] == 1
    page = result["six_field_form_page"]["bot_api_calls"]
    assert sum(page.values()) - page.get("getUpdates", 0) <= 4, page
    chat = result["six_field_form_chat"]["bot_api_calls"]
    assert sum(chat.values()) > sum(page.values())


async def test_the_pending_scenario_has_every_person_answered_in_their_own_session() -> None:
    """c: five people with a prompt pending at once over HTTP; each answer reaches that person's session."""
    result = await scenarios.pending_users(5)
    assert result["pending_at_once"] == 5
    # The bot keeps its audit log beside its config: each prompt writes its call, question, answer, outcome.
    assert result["store_rows_written_per_prompt"] == 4
    assert result["answered_correctly"] == 5
    assert result["distinct_server_sessions"] == 5


async def test_the_flood_scenario_delivers_every_card_and_loses_no_answer_under_rate_limits() -> None:
    """d: ten prompts against a fake enforcing Telegram's rate limits: all delivered, all answered."""
    result = await scenarios.flood(10)
    assert result["cards_delivered"] == 10
    assert result["answers_reached_server"] == 10
    assert result["other_errors"] == 0
    assert 0 <= result["first_question_asked_s"] <= result["last_question_asked_s"]
    assert result["cpu_s"]["bot"] > 0 and result["cpu_s"]["mcp_server"] > 0


def test_the_report_has_a_row_for_every_scenario_it_is_given() -> None:
    """The table names each scenario present in the results."""
    results = {
        "flood": {
            "protocol": "legacy",
            "prompts": 1,
            "started_within_s": 1.0,
            "cards_delivered": 1,
            "answers_reached_server": 1,
            "all_cards_delivered_s": 0.1,
            "theoretical_min_cards_s": 0.03,
            "messages_accepted": 5,
            "theoretical_min_all_messages_s": 0.17,
            "everything_answered_s": 0.2,
            "fake_429s": 0,
            "other_errors": 0,
        }
    }
    text = report.table(results)
    assert "d. flood legacy" in text
    assert "zero lost" in text


def test_the_report_compares_the_bot_api_clients_in_one_line_and_checks_the_instruction_guard() -> None:
    """Instruction counts of each client side by side (the shipped one first), the bare Client's beside the
    bot's, and the guard of the protocol's era (15 M in 2025, 16 M in 2026-07-28) judged."""

    def counted(protocol: str, client: str, instructions: int) -> dict[str, object]:
        return {
            "protocol": protocol,
            "client": client,
            "elicitations": 48,
            "answered_correctly": 48,
            "bot_instructions_per_elicitation": instructions,
            "bot_instructions_per_plain_call": 4_000_000,
        }

    results = {
        "instructions": [
            counted("legacy", "aiohttp", 14_900_000),
            counted("legacy", "httpx", 30_000_000),
            counted("2026-07-28", "aiohttp", 16_500_000),
            counted("2026-07-28", "httpx", 31_000_000),
        ],
        "bare_instructions": [{"protocol": "legacy", "instructions_per_elicitation": 2_400_000}],
    }
    rows = {(scenario, figure): (value, note) for scenario, figure, value, note in report.rows(results)}
    value, note = rows["a. bridge legacy", "Bot API client: aiohttp | httpx"]
    assert value == "14.90 M | 30.00 M"
    assert "2026-07-28: 16.50 M | 31.00 M" in note and "ships aiohttp" in note
    value, note = rows["a. bridge legacy", "instructions / elicitation: bot | bare"]
    assert value == "14.90 M | 2.40 M" and "within the 15.00 M guard" in note
    value, note = rows["a. bridge 2026-07-28", "bot instructions / elicitation"]
    assert value == "16.50 M" and "OVER the 16.00 M guard" in note
    assert not any("httpx" in figure for scenario, figure in rows if "instructions" in figure)


async def test_the_public_demo_scenario_has_every_stranger_complete_deploy_with_their_own_answers() -> None:
    """e: the shipped config with allow_everyone; three strangers each finish deploy with their own choice,
    served by one shared demo process beside the bot; the report has its table."""
    result = await demo.public_demo(3)
    assert (result["completed"], result["refused"], result["lost"], result["crossed"]) == (3, 0, 0, 0)
    assert demo.went_wrong(result) == 0
    # The bot, the shared demo server, and the small watcher that reports how a stdio server ended.
    assert result["processes_most"] == 3
    assert "e. public demo" in report.table({"public_demo": result})


def test_the_public_demo_table_says_who_was_refused_or_lost_and_why_and_counts_them_as_gone_wrong() -> None:
    """e: strangers refused (with what they were shown last) and lost (with the step each waited at when
    nothing moved any more) each get a row, and `went_wrong` (bench's exit status) counts them."""
    result = {
        "strangers": 10,
        "started_within_s": 1.0,
        "completed": 5,
        "refused": 3,
        "lost": 2,
        "crossed": 0,
        "refused_reasons": {"too many questions at once": 3},
        "lost_waiting_for": {"first question": 2},
        "stalled_after_s": 75.5,
        "peak_rss_mb_total": 200.0,
        "peak_rss_mb_bot": 130.0,
        "processes_most": 2,
        "last_result_s": 7.0,
        "messages_accepted": 50,
        "theoretical_min_s": 1.7,
        "fake_429s": 0,
    }
    rows = {
        (scenario, figure): (value, note)
        for scenario, figure, value, note in report.rows({"public_demo": result})
    }
    assert rows["e. public demo", "completed the deploy flow"] == (
        "5",
        "5 WRONG: 3 refused, 2 lost, 0 crossed",
    )
    value, note = rows["e. public demo", "refused: what they were shown last"]
    assert value == "3" and "too many questions at once" in note
    value, note = rows["e. public demo", "lost: still waiting, by step"]
    assert value == "2" and "2 at first question" in note and "75.5 s in" in note
    assert demo.went_wrong(result) == 5
    assert demo.went_wrong({**result, "completed": 10, "refused": 0, "lost": 0}) == 0


async def test_the_gateway_scenario_has_an_agent_call_through_the_bot_and_straight_to_the_server() -> None:
    """g: one agent's calls through the bot's /mcp and a Client's straight to the server each return the server's
    hello for their own tag, in the same number."""
    result = await gateway.gateway_overhead(3, "legacy", warm=1)
    assert result["completed"] == {"through_gateway": 3, "straight": 3}
    assert result["through_gateway_ms"]["p50"] > 0 and result["straight_ms"]["p50"] > 0


async def test_the_gateway_scenario_has_every_agent_calling_at_once_get_its_own_result() -> None:
    """g: three agents, each with its own person's token, connect and call at once, twice (2026-07-28): three
    results each round, each with its own tag, and no error; the report has its table."""
    result = await gateway.agents_at_once(3, "2026-07-28")
    calls = (result["completed"], result["warm"]["completed"], result["errors"])
    assert calls == (3, 3, 0), result["first_errors"]
    assert "g. The MCP gateway" in report.table({"gateway_agents": [result]})


# g's instruction count (the bot under callgrind, about 40 s for a few calls) has no test: it is the same
# callgrind machinery as bench a's, which `python -m bench.guard` exercises in `.ci/run`.


def test_the_gateway_table_sets_the_gateway_beside_the_straight_call_and_says_errors() -> None:
    """g: latency through /mcp beside the straight call with the difference, the instruction counts of an agent
    call beside a chat /call, and errors of agents at once spelled out."""
    results = {
        "gateway": [
            {
                "protocol": "legacy",
                "calls": 10,
                "completed": {"through_gateway": 10, "straight": 10},
                "through_gateway_ms": {"p50": 12.5, "p99": 20.0},
                "straight_ms": {"p50": 4.0, "p99": 9.0},
                "overhead_ms_p50": 8.5,
                "bot_cpu_ms_per_call": 6.0,
                "bot_cpu_ms_per_straight_call": 0.0,
                "server_cpu_ms_per_call": {"through_gateway": 2.0, "straight": 1.5},
            }
        ],
        "gateway_instructions": [
            {
                "protocol": "legacy",
                "calls": 4,
                "bot_instructions_per_agent_call": 15_500_000,
                "bot_instructions_per_chat_call": 11_000_000,
            }
        ],
        "gateway_agents": [
            {
                "protocol": "legacy",
                "agents": 4,
                "completed": 3,
                "errors": 1,
                "first_errors": ["agent 2: WrongResult: b__hello(many2): 'hello many3'"],
                "connect_all_s": 0.2,
                "all_calls_s": 0.3,
                "call_ms": {"p50": 250.0, "p99": 260.0},
                "cpu_s": {"bot": 0.2, "mcp_server": 0.05},
                "warm": {
                    "completed": 3,
                    "all_calls_s": 0.1,
                    "call_ms": {"p50": 50.0, "p99": 60.0},
                    "cpu_s": {"bot": 0.1, "mcp_server": 0.02},
                },
            }
        ],
    }
    rows = {(scenario, figure): (value, note) for scenario, figure, value, note in report.rows(results)}
    value, note = rows["g. gateway legacy", "ms p50 | p99: gateway"]
    assert value == "12.5 | 20.0" and "straight 4 | 9" in note and "adds 8.5 ms" in note
    value, _ = rows["g. gateway legacy", "bot instructions / call: agent | chat"]
    assert value == "15.50 M | 11.00 M"
    value, note = rows["g. agents legacy", "results | errors"]
    assert value == "3 | 1" and "1 ERRORS" in note and "many2" in note
    assert rows["g. agents legacy", "call ms p50 | p99"][0] == "250.0 | 260.0"
    assert rows["g. agents legacy", "again, call ms p50 | p99"][0] == "50.0 | 60.0"


@pytest.fixture
def second_postgresql_url(postgresql_server: PostgreSQLExecutor) -> Iterator[str]:
    """Another fresh database on the session's PostgreSQL server (each fleet run needs an empty one)."""
    server, name = postgresql_server, "t_" + uuid.uuid4().hex[:12]
    with DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name):
        yield f"postgresql://{server.user}@{server.host}:{server.port}/{name}"


async def test_the_fleet_scenario_runs_the_flood_through_two_instances_and_kills_one(
    postgresql_url: str, second_postgresql_url: str
) -> None:
    """f: ten prompts through two instances behind the proxy, each answered once with its own choice; then the
    same with instance 0 killed half-way: everyone answered or lost (none twice, none crossed), the kill's
    figures present; the report has its table. (Goals are printed, not asserted: some need the fleet's parts.)"""
    plain = await fleet.fleet_flood(10, store_url=postgresql_url)
    assert (plain["answered"], plain["lost"], plain["wrong"]) == (10, 0, 0)
    assert plain["duplicate_calls_at_server"] == plain["duplicate_results_in_chat"] == 0
    assert plain["messages_accepted"] >= 30 and 0 < plain["most_sends_in_1s"] <= plain["messages_accepted"]
    assert set(plain["calls_by_instance"]) == {"0", "1"}
    killed = await fleet.fleet_flood(10, kill=True, takeover_wait_s=5, store_url=second_postgresql_url)
    assert killed["answered"] + killed["lost"] == 10 and killed["wrong"] == 0
    assert killed["duplicate_calls_at_server"] == 0
    assert killed["its_people_taken_over"] + killed["its_people_lost"] <= killed["its_people"]
    text = report.table({"fleet": [plain, killed]})
    assert "f. A fleet" in text and "takeover s p50 | p99" in text


def test_the_fleet_table_judges_each_figure_against_its_goal() -> None:
    """f: the most sends in a second, 429s, the time against theory and the takeover each say met or NOT MET."""
    run = {
        "protocol": "2026-07-28",
        "instances": 2,
        "prompts": 300,
        "started_within_s": 1.0,
        "kill": True,
        "answered": 290,
        "lost": 10,
        "wrong": 0,
        "duplicate_calls_at_server": 0,
        "duplicate_results_in_chat": 0,
        "most_sends_in_1s": 52,
        "fake_429s": 3,
        "other_errors": 0,
        "messages_accepted": 900,
        "everything_answered_s": 33.0,
        "theoretical_min_s": 30.0,
        "over_theory": 1.1,
        "taps_refused": 5,
        "taps_unanswered": 0,
        "calls_by_instance": {"0": 150, "1": 150},
        "killed_at_s": 15.0,
        "its_people": 40,
        "its_people_with_a_tap_left": 8,
        "sent_again_not_modified": 0,
        "its_people_taken_over": 0,
        "its_people_lost": 10,
        "takeover_s_p50": None,
        "takeover_s_p99": None,
        "takeover_wait_s": 30.0,
    }
    rows = {
        (scenario, figure): (value, note) for scenario, figure, value, note in report.rows({"fleet": [run]})
    }
    s = "f. fleet 2026-07-28 kill"
    assert rows[s, "most sends in any 1 s"][0] == "52"
    assert rows[s, "most sends in any 1 s"][1].endswith("goal at most 30: NOT MET")
    assert rows[s, "429s from the fake"][1].startswith("goal 0: NOT MET")
    assert rows[s, "everything answered after s"][1].endswith("goal at most 1.15x: met")
    assert rows[s, "answered | lost | wrong"] == ("290 | 10 | 0", "10 LOST OR WRONG (goal 0)")
    assert rows[s, "takeover s p50 | p99"] == (
        "n/a",
        "from the kill to the first card or result the survivor sent each; goal under 5 s | 10 s: none measured",
    )
