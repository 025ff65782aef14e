# toolnexus-bot: a Telegram bot that is an MCP client.
#   docker build -t toolnexus-bot .
#   docker run -d --init --stop-timeout 30 --name toolnexus -v toolnexus-data:/data -e TELEGRAM_BOT_TOKEN toolnexus-bot
# Put config.toml in the volume (/data/config.toml); the default database is created there too
# (STATE_DIRECTORY=/data). `--init` reaps the stdio MCP servers' processes. `docker stop` sends SIGTERM and the
# bot drains for [run] drain_s (default 20 s): give it drain_s + 10 s (`--stop-timeout 30`; compose:
# `stop_grace_period: 30s`; Docker's default is 10 s). Other commands: `docker run --rm -it -v toolnexus-data:/data
# -e TELEGRAM_BOT_TOKEN toolnexus-bot check` (or `console`; TOOLNEXUS_CONFIG names the config for every command).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY bot ./bot
COPY mapping ./mapping
RUN python -m venv /opt/toolnexus \
    && /opt/toolnexus/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin toolnexus \
    && mkdir -p /data \
    && chown toolnexus:toolnexus /data
COPY --from=build /opt/toolnexus /opt/toolnexus
COPY deploy/healthcheck.py /opt/toolnexus/healthcheck.py
ENV PATH="/opt/toolnexus/bin:$PATH" \
    PYTHONUNBUFFERED=1 \
    TOOLNEXUS_CONFIG=/data/config.toml \
    STATE_DIRECTORY=/data
WORKDIR /data
VOLUME ["/data"]
USER toolnexus
# Passes at once without a [web] table (polling mode); with one, /healthz must answer.
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 \
    CMD ["python", "/opt/toolnexus/healthcheck.py"]
# SIGTERM drains (open questions and approvals stay for the next container); SIGINT stops at once.
STOPSIGNAL SIGTERM
ENTRYPOINT ["toolnexus-bot"]
CMD ["--config", "/data/config.toml"]
