# Forge log-relay: follows trainer output (the scheduler's run folder, shared as a volume).
#   docker build -f deploy/log-relay.Dockerfile -t forge-log-relay .
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY trainers/sdk trainers/sdk
COPY libs/common libs/common
COPY services/log-relay services/log-relay
RUN pip install ./trainers/sdk ./libs/common ./services/log-relay
RUN useradd --system --uid 10001 forge && mkdir -p /var/lib/forge && chown forge /var/lib/forge
USER forge
ENV FORGE_HOME=/var/lib/forge FORGE_LOG_RELAY_HEALTH_PORT=8082
EXPOSE 8082
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8082/readyz', timeout=2)"]
CMD ["python", "-m", "forge_log_relay"]
