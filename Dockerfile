# syntax=docker/dockerfile:1
# The microbatch service image (CPU). ONNX Runtime falls back to CPU when no GPU is present.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir uv
COPY pyproject.toml README.md ./
COPY service ./service
# Runtime dependencies only: torch (the models extra) is never installed in the image.
RUN uv venv /opt/venv && uv pip install --no-cache --python /opt/venv/bin/python .

FROM python:${PYTHON_VERSION}-slim AS runtime
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin microbatch
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MICROBATCH_LOG__FORMAT=json
USER 10001
ENTRYPOINT ["microbatch"]
CMD ["run"]
