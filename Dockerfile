# syntax=docker/dockerfile:1
# The microbatch service images. One recipe, two final targets:
#
#   docker build -t microbatch:cpu .                   # the default target (the last stage): CPU only
#   docker build --target gpu -t microbatch:gpu .      # CUDA; needs an NVIDIA driver for CUDA 13 (R580+)
#
# Both run as uid 10001, hold no compiler, carry the reference models (package data of `service`) and
# log JSON. The GPU image is for linux/amd64 only: the CUDA build of ONNX Runtime exists for it alone.
ARG PYTHON_VERSION=3.11
ARG DEBIAN_RELEASE=trixie
# One ONNX Runtime version for both images, so that CPU and GPU replicas run the same operator kernels.
# The CUDA and cuDNN majors of the GPU image follow from it (1.31: CUDA 13, cuDNN 9).
ARG ORT_VERSION=1.31.1
ARG NVML_VERSION=13.615.71
ARG UV_VERSION=0.13.9

FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS base
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# ---------------------------------------------------------------------------------------------------------
# Build: a virtualenv under /opt/venv with the package and its runtime dependencies only. Never the
# `models` extra: torch has no place in a serving image.
FROM base AS build
ARG UV_VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN pip install --no-cache-dir "uv==${UV_VERSION}"
# Pre-compiled bytecode: the service user cannot write __pycache__ into the root-owned venv, and compiling
# at every start would slow it down.
ENV UV_NO_CACHE=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
RUN uv venv /opt/venv

FROM build AS build-gpu
ARG ORT_VERSION
ARG NVML_VERSION
# The CUDA and cuDNN libraries come as NVIDIA's pip wheels, through onnxruntime-gpu's own `cuda` and `cudnn`
# extras, rather than from an nvidia/cuda base image: the wheel's metadata names exactly the CUDA/cuDNN
# majors it was built against, so a new ONNX Runtime can never meet a base image of the wrong CUDA, and
# the image stays on the same slim Python base as the CPU one (the cudnn-runtime base images also carry
# libraries ONNX Runtime never loads: cuSPARSE, cuSOLVER, NPP).
# nvidia-ml-py: the device's memory and utilisation on the metrics port (microbatch_gpu_*), through the
# driver's NVML that the NVIDIA container runtime mounts.
RUN uv pip install --python /opt/venv/bin/python . "onnxruntime-gpu[cuda,cudnn]==${ORT_VERSION}" \
        "nvidia-ml-py==${NVML_VERSION}" \
    && /opt/venv/bin/microbatch models verify

FROM build AS build-cpu
ARG ORT_VERSION
# The package depends on onnxruntime-gpu on linux/amd64 (it falls back to CPU), but its CUDA provider alone
# is some 300 MB that a CPU image never loads: resolve without it and take the CPU build of the same
# version instead.
RUN printf 'onnxruntime-gpu\n' > /tmp/no-gpu.txt \
    && uv pip install --python /opt/venv/bin/python --excludes /tmp/no-gpu.txt . "onnxruntime==${ORT_VERSION}" \
    && /opt/venv/bin/microbatch models verify

# ---------------------------------------------------------------------------------------------------------
# Runtime: what both final images share. Nothing is installed here (no compiler, no curl); the venv comes
# from the build stages, root-owned and read-only to the service user.
FROM base AS runtime
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    microbatch
# An empty working directory: the service reads an optional .env from here (mount one to use it).
WORKDIR /srv/microbatch
ENV PATH=/opt/venv/bin:$PATH \
    MICROBATCH_LOG__FORMAT=json
# Prometheus metrics (/metrics) and the probes (/healthz, /readyz): MICROBATCH_METRICS__PORT.
EXPOSE 9400
# Liveness through the service's own /healthz, with the interpreter the image has anyway (no curl).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MICROBATCH_METRICS__PORT', '9400'), timeout=4)"]
ENTRYPOINT ["microbatch"]
CMD ["run"]

FROM runtime AS gpu
COPY --from=build-gpu /opt/venv /opt/venv
# ONNX Runtime dlopens cuBLAS, cuDNN, cuFFT and cuRAND by name; register the wheels' library folders with
# the dynamic loader, whatever their CUDA major, so that every process finds them without LD_LIBRARY_PATH.
RUN find /opt/venv/lib -path '*/site-packages/nvidia/*/lib' -type d > /etc/ld.so.conf.d/nvidia-wheels.conf \
    && test -s /etc/ld.so.conf.d/nvidia-wheels.conf \
    && ldconfig
# The driver libraries the NVIDIA container runtime mounts: CUDA (compute) and nvidia-smi/NVML (utility).
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    MICROBATCH_MODEL__PROVIDERS=CUDAExecutionProvider,CPUExecutionProvider
USER 10001:10001

# The default target comes last.
FROM runtime AS cpu
COPY --from=build-cpu /opt/venv /opt/venv
ENV MICROBATCH_MODEL__PROVIDERS=CPUExecutionProvider
USER 10001:10001
