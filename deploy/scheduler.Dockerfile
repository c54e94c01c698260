# Forge scheduler. Its local executor runs trainers as processes in this container, so the image
# carries the built-in trainers (and torch) next to the scheduler package, which itself needs no
# torch. On Kubernetes the trainers run in their own images instead.
#   docker build -f deploy/scheduler.Dockerfile -t forge-scheduler .
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --index-url ${TORCH_INDEX} torch==2.14.1 torchvision==0.29.1
COPY trainers/sdk trainers/sdk
COPY libs/common libs/common
COPY services/scheduler services/scheduler
COPY trainers/builtin trainers/builtin
RUN pip install ./trainers/sdk ./libs/common ./services/scheduler ./trainers/builtin
RUN useradd --system --uid 10001 forge && mkdir -p /var/lib/forge/runs && chown -R forge /var/lib/forge
USER forge
ENV FORGE_HOME=/var/lib/forge FORGE_SCHEDULER_HEALTH_PORT=8081
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/readyz', timeout=2)"]
CMD ["python", "-m", "forge_scheduler"]
