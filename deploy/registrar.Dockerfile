# Forge registrar: turns uploaded artifacts into model versions.
#   docker build -f deploy/registrar.Dockerfile -t forge-registrar .
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY trainers/sdk trainers/sdk
COPY libs/common libs/common
COPY services/registrar services/registrar
RUN pip install ./trainers/sdk ./libs/common ./services/registrar
RUN useradd --system --uid 10001 forge && mkdir -p /var/lib/forge && chown forge /var/lib/forge
USER forge
ENV FORGE_HOME=/var/lib/forge FORGE_REGISTRAR_HEALTH_PORT=8083
EXPOSE 8083
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8083/readyz', timeout=2)"]
CMD ["python", "-m", "forge_registrar"]
