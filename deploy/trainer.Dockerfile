# Forge trainer images, one per accelerator: the Trainer SDK and the built-in trainers on the
# PyTorch build of the profile. The Kubernetes executor runs <FORGE_SCHEDULER_KUBE_IMAGE><suffix>:<tag>,
# the suffix being the profile's: "" (cpu), -cu (nvidia), -rocm (amd), -xpu (intel). From the
# repository root:
#   docker build -f deploy/trainer.Dockerfile -t ghcr.io/forge/trainer:latest .
#   docker build -f deploy/trainer.Dockerfile --build-arg VARIANT=cu   -t ghcr.io/forge/trainer-cu:latest .
#   docker build -f deploy/trainer.Dockerfile --build-arg VARIANT=rocm -t ghcr.io/forge/trainer-rocm:latest .
#   docker build -f deploy/trainer.Dockerfile --build-arg VARIANT=xpu  -t ghcr.io/forge/trainer-xpu:latest .
# TORCH_INDEX overrides the wheel index of the variant (e.g. another CUDA or ROCm release); the
# GPU drivers come from the node (device plugin), the CUDA/ROCm/oneAPI runtimes from the wheels.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
ARG VARIANT=cpu
ARG TORCH_INDEX=
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
RUN set -eu; \
    case "${VARIANT}" in \
      cpu) index=https://download.pytorch.org/whl/cpu ;; \
      cu) index=https://download.pytorch.org/whl/cu128 ;; \
      rocm) index=https://download.pytorch.org/whl/rocm6.4 ;; \
      xpu) index=https://download.pytorch.org/whl/xpu ;; \
      *) echo "VARIANT must be cpu, cu, rocm or xpu, not '${VARIANT}'" >&2; exit 1 ;; \
    esac; \
    pip install --index-url "${TORCH_INDEX:-$index}" "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
WORKDIR /src
COPY trainers/sdk trainers/sdk
COPY trainers/builtin trainers/builtin
RUN pip install "./trainers/sdk[s3,images]" ./trainers/builtin
# /forge/run is where the executor mounts the run's emptyDir (scratch folder, result file)
RUN useradd --system --uid 10001 --home-dir /forge forge && mkdir -p /forge/run && chown -R forge /forge
USER 10001
WORKDIR /forge
LABEL org.opencontainers.image.title="forge-trainer" org.opencontainers.image.description="Forge built-in trainers (${VARIANT})"
# The executor gives the command (python -m forge_trainers.<task>); this default only says so.
CMD ["python", "-c", "print('a Forge trainer image: run python -m forge_trainers.<task> with the trainer environment')"]
