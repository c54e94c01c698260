# Forge api: REST and live streams. Build from the repository root:
#   docker build -f deploy/api.Dockerfile -t forge-api .
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY trainers/sdk trainers/sdk
COPY libs/common libs/common
COPY services/api services/api
RUN pip install ./trainers/sdk ./libs/common ./services/api
RUN useradd --system --uid 10001 forge && mkdir -p /var/lib/forge && chown forge /var/lib/forge
USER forge
ENV FORGE_HOME=/var/lib/forge FORGE_API_HOST=0.0.0.0 FORGE_API_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]
CMD ["python", "-m", "forge_api"]
