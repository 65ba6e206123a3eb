# syntax=docker/dockerfile:1
#
# kpi-forecast images. BuildKit (or podman/buildah) builds only the stages the target needs.
#
#   serving, CPU (default target, the last stage):
#     docker build -t kpi-forecast:0.1.0 .
#   serving, NVIDIA GPU (linux/amd64 only; see "GPU variant" below):
#     docker build --build-arg VARIANT=gpu -t kpi-forecast:0.1.0-gpu .
#   training (CPU torch):
#     docker build --target train -t kpi-forecast-train:0.1.0 .
#
# Where no registry or GitHub can be reached (docs/images.md): any base with Python 3.11 and
# its venv module, e.g. Debian bookworm made with debootstrap (--build-arg PYTHON_BASE=...),
# RMR's source from the build context (--build-arg RMR_SOURCE=archive, its git archive in
# rmr-source/) and torch from a folder of wheels (--build-arg TORCH_INDEX= with
# --build-arg PIP_FIND_LINKS=/wheels and the folder mounted there by podman build --volume).
#
# The serving image reads the packaged xApp descriptor (controls.modelDir = /opt/ric/model)
# unless CONFIG_FILE or XAPP_DESCRIPTOR_PATH is set: the Helm chart sets CONFIG_FILE to its
# mounted ConfigMap, so the image itself sets neither.
#
# GPU variant: onnxruntime is swapped for onnxruntime-gpu with its [cuda,cudnn] extras, which
# pull the CUDA runtime, cuBLAS, cuFFT, cuRAND and cuDNN as NVIDIA's pip wheels into the venv.
# The runtime base therefore stays the same Python base for both variants: an
# nvidia/cuda:*-cudnn-runtime base would only duplicate those libraries, and it has no Python
# 3.11 (Ubuntu 24.04 ships 3.12), so the venv built here could not run on it. The driver
# (libcuda.so.1) is not in the image on either route: the NVIDIA container toolkit mounts the
# node's one at run time.

ARG PYTHON_VERSION=3.11
# Base of the build stages and of the training image: any with Python 3.11 as python3 and its
# venv module (python:3.11-slim, or Debian bookworm with python3-venv).
ARG PYTHON_BASE=python:${PYTHON_VERSION}-slim
# Base of the serving image, e.g. the same image pinned by digest
# (--build-arg RUNTIME_BASE=python:3.11-slim@sha256:...). It must provide the interpreter the
# builder used at the same path (/usr/local/bin/python3.11 in python:slim, /usr/bin/python3.11
# in Debian), since the copied venv links to it.
ARG RUNTIME_BASE=${PYTHON_BASE}
# Where librmr's source comes from: git (cloned from GitHub) or archive (the git archive of
# the same commit, rmr-source/ric-plt-lib-rmr-*.tar.gz in the build context).
ARG RMR_SOURCE=git


# --- the project's source and an empty venv, shared by both builders ---------------------------
FROM ${PYTHON_BASE} AS build-base
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    PATH=/opt/venv/bin:${PATH}
RUN python3 -m venv /opt/venv
WORKDIR /src
# Exactly what setuptools needs (pyproject.toml: readme, the folders its package-dir maps into
# the one import package kpi_forecast, and their package data). tests/test_image.py builds from a
# copy of this list, so a missing entry fails there before it fails here.
COPY pyproject.toml README.md ./
COPY cli/ cli/
COPY model/ model/
COPY training/ training/
COPY xapp/ xapp/
COPY data/ data/


# --- the serving venv: the `serve` extra only, so no torch ---------------------------------------
FROM build-base AS builder
# cpu | gpu
ARG VARIANT=cpu
# 1.26 is the last onnxruntime-gpu on PyPI built for CUDA 12 (cu12 wheels, NVIDIA driver
# >= 525); 1.27 and later are CUDA 13 builds that need driver >= 580. Raise it for CUDA 13 nodes.
ARG ONNXRUNTIME_GPU_VERSION=1.26.0
# For gpu the serve extra is first resolved against the CPU onnxruntime of the same version, so
# numpy and protobuf are chosen for that version, then the CPU wheel is swapped for the GPU one
# (both install the `onnxruntime` module: they must not sit side by side). The NVIDIA wheels'
# lib folders are listed for ldconfig in the serving stage: ONNX Runtime dlopens libcudnn.so.9
# and friends by name, and nothing else would tell the loader where pip put them.
RUN --mount=type=cache,target=/root/.cache/pip \
    set -eu; \
    mkdir -p /opt/ld.so.conf.d; \
    case "${VARIANT}" in \
      cpu) pip install "/src[serve]" ;; \
      gpu) pip install "/src[serve]" "onnxruntime==${ONNXRUNTIME_GPU_VERSION}" \
           && pip uninstall --yes onnxruntime \
           && pip install "onnxruntime-gpu[cuda,cudnn]==${ONNXRUNTIME_GPU_VERSION}" \
           && find /opt/venv -type d -path '*/site-packages/nvidia/*/lib' \
                > /opt/ld.so.conf.d/kpi-forecast-nvidia.conf ;; \
      *) echo "VARIANT must be cpu or gpu, not '${VARIANT}'" >&2; exit 2 ;; \
    esac
# What the server never loads goes, two thirds of the venv (tests/test_image.py runs this same
# instruction on the venv it builds, then serves from it):
# - pycrate's compiled modules of some ninety ASN.1 specifications but those the xApp imports
#   (E2AP, and F1AP for the cells an E2 node's F1 setup names: tests/test_image.py checks the
#   list against the imports in xapp/), and its packages of other protocols;
# - the translations of holiday names (the calendar features read only the dates);
# - the test suites and C headers numpy, pandas and pyarrow ship; the parts of Arrow nothing
#   here imports (Flight, the S3, GCS, Azure and HDFS filesystems, ORC, Parquet encryption) and
#   the copies of libarrow_python under names the loader never asks for;
# - ONNX Runtime's model tools (conversion, quantisation), pip and setuptools, and the
#   commands of what went (f2py, pycrate's).
# The closing checks run isolated (-I): from /src, a plain `python -c` would import the source
# tree instead of the installed package. ${part} is unquoted: its globs expand in site-packages.
# hadolint ignore=SC2086
RUN set -eu; \
    site="$(python -I -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
    find "${site}/pycrate_asn1dir" -type f ! -name '__init__.*' ! -name 'E2AP.*' ! -name 'F1AP.*' -delete; \
    for part in pycrate_corenet pycrate_crypto pycrate_csn1 pycrate_csn1dir pycrate_diameter \
      pycrate_ether pycrate_gmr1 pycrate_gmr1_csn1 pycrate_media pycrate_mobile pycrate_osmo \
      pycrate_sys \
      pandas/tests numpy/tests numpy/*/tests numpy/_core/include numpy/f2py \
      pyarrow/tests pyarrow/include pyarrow/src pyarrow/*.pyx pyarrow/*.pxd pyarrow/*.pxi \
      pyarrow/libarrow_flight.so* pyarrow/libarrow_python_flight.so* pyarrow/_flight.* \
      pyarrow/flight.py pyarrow/libarrow_s3.so* pyarrow/_s3fs.* pyarrow/_gcsfs.* \
      pyarrow/_azurefs.* pyarrow/_hdfs.* pyarrow/_orc.* pyarrow/_dataset_orc.* pyarrow/orc.py \
      pyarrow/*parquet_encryption* pyarrow/_pyarrow_cpp_tests.* \
      pyarrow/libarrow_python.so pyarrow/libarrow_python.so.*.*.* \
      onnxruntime/transformers onnxruntime/tools onnxruntime/quantization onnxruntime/datasets \
      holidays/locale; do rm -rf "${site}"/${part}; done; \
    rm -f "$(dirname "$(command -v python)")"/f2py "$(dirname "$(command -v python)")"/pycrate_*.py; \
    python -I -m pip uninstall --quiet --yes pip setuptools; \
    python -I -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"; \
    python -I -c "import onnxruntime, kpi_forecast.xapp.server; from pycrate_asn1dir import E2AP, F1AP"; \
    python -I -c "import pyarrow.dataset, pyarrow.parquet, pyarrow.csv, pyarrow.ipc, pyarrow.fs"; \
    python -I -c "from holidays import country_holidays as c, list_supported_countries as l; [c(k, years=2024) for k in l()]"


# --- librmr, the RIC message router, built from its public source ------------------------------
# RMR 4.9.4 (o-ran-sc/ric-plt-lib-rmr), the release the tests run against in ../shared/rmr, built
# the same way: SI95 transport, depends on libc only. The xApp loads librmr_si.so.4 through
# ctypes (xapp/ric/rmr.py); the build tools stay in these stages.
FROM ${PYTHON_BASE} AS rmr-tools
# The distribution's current toolchain: the library's ABI is libc's, not the compiler's.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates cmake g++ gcc git make \
    && rm -rf /var/lib/apt/lists/*

FROM rmr-tools AS rmr-source-git
ARG RMR_COMMIT=8b9a214906a40b338def981d5c16b4ea247176fb
RUN git init -q /rmr-src \
    && git -C /rmr-src fetch -q --depth 1 https://github.com/o-ran-sc/ric-plt-lib-rmr.git "${RMR_COMMIT}" \
    && git -C /rmr-src checkout -q FETCH_HEAD

FROM rmr-tools AS rmr-source-archive
COPY rmr-source/ /rmr-archive/
RUN mkdir /rmr-src \
    && tar -xzf /rmr-archive/ric-plt-lib-rmr-*.tar.gz -C /rmr-src --strip-components=1

# hadolint ignore=DL3006
FROM rmr-source-${RMR_SOURCE} AS rmr-builder
RUN cmake -S /rmr-src -B /rmr-build -DCMAKE_INSTALL_PREFIX=/opt/rmr \
    && make -C /rmr-build install \
    && rm -f /opt/rmr/lib/*.a


# --- the training venv: the `train` extra with the CPU build of the pinned torch --------------
FROM build-base AS train-builder
# The extra index offers torch==2.13.0+cpu, which pip prefers to PyPI's 2.13.0 (a local version
# sorts higher) and which does not pull the multi-gigabyte CUDA wheels. Without the index
# (TORCH_INDEX=""), the same wheel from a folder (PIP_FIND_LINKS, mounted into the build).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS=""
RUN --mount=type=cache,target=/root/.cache/pip \
    PIP_EXTRA_INDEX_URL="${TORCH_INDEX}" PIP_FIND_LINKS="${PIP_FIND_LINKS}" \
    pip install "/src[train]" \
    && python -I -c "import sys, torch; sys.exit(torch.version.cuda is not None)"


# --- training image: docker build --target train ------------------------------------------------
FROM ${PYTHON_BASE} AS train
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kpi-forecast-train" \
      org.opencontainers.image.description="Trains, backtests and exports the kpi-forecast model (CPU torch)." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:${PATH} \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=train-builder /opt/venv /opt/venv
# Outputs go to the working directory (mount a volume there), so it belongs to the user.
RUN groupadd --system --gid 10001 ric \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --home-dir /workspace \
         --shell /usr/sbin/nologin ric \
    && mkdir -p /workspace \
    && chown 10001:10001 /workspace
WORKDIR /workspace
USER 10001:10001
ENTRYPOINT ["kpi-forecast"]
CMD ["--help"]


# --- serving image (default target): docker build [--target serve] ------------------------------
FROM ${RUNTIME_BASE} AS serve
# Global ARGs reach only FROM lines: redeclared to be used in the label.
ARG RUNTIME_BASE
ARG VARIANT=cpu
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kpi-forecast" \
      org.opencontainers.image.description="Network KPI forecasting O-RAN near-RT RIC xApp (ONNX Runtime, ${VARIANT})." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${RUNTIME_BASE}"
# Made for a read-only root filesystem: the venv's bytecode was compiled by pip at build time
# and nothing is written at run time outside /tmp (an emptyDir in the chart).
# NVIDIA_DRIVER_CAPABILITIES asks the container toolkit for the compute libraries; it is inert
# without the NVIDIA runtime, i.e. in the CPU variant.
ENV PATH=/opt/venv/bin:${PATH} \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=builder /opt/venv /opt/venv
# librmr where the loader looks (ldconfig below): the E2 side speaks RMR, as on any O-RAN SC RIC.
COPY --from=rmr-builder /opt/rmr/lib/ /usr/local/lib/
# Empty for the CPU variant; for gpu, the venv's NVIDIA library folders (see the builder).
COPY --from=builder /opt/ld.so.conf.d/ /etc/ld.so.conf.d/
# A numeric, non-root user so that Kubernetes' runAsNonRoot can verify it. The image carries
# no model: the model folder is a mount point, or filled by an image built FROM this one, or
# at start from controls.modelUrl, for which it belongs to that user.
RUN groupadd --system --gid 10001 ric \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --home-dir /nonexistent \
         --shell /usr/sbin/nologin ric \
    && mkdir -p /opt/ric/model \
    && chown 10001:10001 /opt/ric/model \
    && ldconfig
WORKDIR /opt/ric
VOLUME ["/opt/ric/model"]
# http (REST, probes, metrics), rmr-data (RMR messages: E2, health checks), rmr-route
EXPOSE 8080 4560 4561
# For plain Docker; Kubernetes uses the chart's probes instead. Python, as slim has no curl.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/ric/v1/health/alive', timeout=2)"]
USER 10001:10001
# The server drains in-flight requests on SIGTERM and exits 0; exec form keeps it PID 1 so it
# receives the signal itself.
STOPSIGNAL SIGTERM
ENTRYPOINT ["kpi-forecast", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
