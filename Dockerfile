# BoltMQ image: one image, every service; the pod picks one with its args
# (`boltmq serve store|broker|registry|ha ...`, deploy/k8s/).
#
#   docker build -t boltmq:0.1.0 .
#   docker run --rm boltmq:0.1.0 registry --host 0.0.0.0 --port 9876
#
# Stage 1 generates the gRPC stubs (`make proto`: boltmq/v1 and boltmq/rocketmq are
# gitignored, never committed) and builds wheels of BoltMQ with its `server` extra and every dependency,
# at the versions of requirements.lock; stage 2 installs them into a clean
# python:3.11-slim without compilers or build tools.

FROM python:3.11-slim AS builder
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The generator versions of requirements.lock (grpcio-tools, mypy-protobuf).
RUN pip install grpcio-tools==1.85.1 mypy-protobuf==5.1.0
COPY pyproject.toml setup.py requirements.lock README.md ./
COPY protos/ protos/
COPY boltmq/ boltmq/
COPY services/ services/
# The same protoc run as the Makefile's `proto` target.
RUN mkdir -p boltmq/v1 boltmq/rocketmq/v2 \
 && python -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. \
      --mypy_out=. protos/boltmq/v1/*.proto protos/boltmq/rocketmq/v2/*.proto \
 && touch boltmq/v1/__init__.py boltmq/rocketmq/__init__.py boltmq/rocketmq/v2/__init__.py
RUN pip wheel --wheel-dir /wheels --constraint requirements.lock ".[server]"

FROM python:3.11-slim
# A fixed numeric uid/gid: the manifests' runAsUser / runAsGroup / fsGroup (10001)
# and Kubernetes' runAsNonRoot check (it can only verify a numeric USER).
RUN groupadd --gid 10001 boltmq \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin boltmq
COPY --from=builder /wheels /wheels
# pip compiles every module to .pyc here, so nothing is written at run time
# under the read-only root filesystem of the pods.
RUN pip install --no-cache-dir --no-index --find-links /wheels "boltmq[server]" \
 && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
# registry, broker, HA, store gRPC ports (the services' defaults).
EXPOSE 9876 10911 10912 10913
ENTRYPOINT ["boltmq", "serve"]
CMD ["--help"]
