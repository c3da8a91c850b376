# syntax=docker/dockerfile:1
# conv1d-serve for AMD Instinct MI300 (gfx942): builds the HIP backend with
# ROCm's own compiler and runs on ubuntu:24.04 with only AMD's HIP runtime
# (hip-runtime-amd) plus the service's libraries.
#   docker build --build-arg GPU_ARCH=gfx942 \
#     -t conv1d-serve:rocm .
#   docker run --rm --device=/dev/kfd --device=/dev/dri --group-add video \
#     -p 50051:50051 -p 8002:8002 conv1d-serve:rocm
ARG ROCM_VERSION=6.4.3

FROM rocm/dev-ubuntu-24.04:${ROCM_VERSION}-complete AS build
ARG GPU_ARCH=gfx942
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY scripts/install_deps.sh /tmp/install_deps.sh
RUN /tmp/install_deps.sh && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/rocm/bin:$PATH \
    CMAKE_PREFIX_PATH=/opt/rocm
WORKDIR /src
COPY . .
# The source revision for the build info (the context has no .git), e.g.
# --build-arg GIT_SHA=$(git rev-parse --short=12 HEAD); empty: "unknown".
# Declared here, after the dependency layers, so that a new revision does not
# invalidate them (every RUN after an ARG sees it).
ARG GIT_SHA=
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONV1D_GPU=HIP \
      -DCMAKE_HIP_COMPILER=/opt/rocm/llvm/bin/clang++ \
      -DCMAKE_HIP_ARCHITECTURES="${GPU_ARCH}" \
      -DCONV1D_BUILD_TESTS=OFF -DCONV1D_BUILD_BENCH=OFF \
      -DCONV1D_GIT_SHA="${GIT_SHA}" \
 && cmake --build /build --parallel \
 && deploy/docker/stage.sh /build /opt/conv1d-serve -x '^/opt/(rocm|amdgpu)'

FROM ubuntu:24.04
ARG ROCM_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /opt/conv1d-serve /opt/conv1d-serve
# AMD's apt repositories (ROCm, and amdgpu for the user-space libdrm the HIP
# runtime depends on) for exactly the ROCm release the build stage used,
# preferred over Ubuntu's own ROCm packages. The key tools are removed again.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl gnupg \
 && install -d -m 0755 /etc/apt/keyrings \
 && curl -fsSL https://repo.radeon.com/rocm/rocm.gpg.key \
      | gpg --dearmor -o /etc/apt/keyrings/rocm.gpg \
 && echo "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg]" \
      "https://repo.radeon.com/rocm/apt/${ROCM_VERSION} noble main" \
      >/etc/apt/sources.list.d/rocm.list \
 && echo "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg]" \
      "https://repo.radeon.com/amdgpu/${ROCM_VERSION}/ubuntu noble main" \
      >/etc/apt/sources.list.d/amdgpu.list \
 && printf 'Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n' \
      >/etc/apt/preferences.d/rocm-pin-600 \
 && apt-get update \
 && xargs -a /opt/conv1d-serve/runtime-packages.txt \
      apt-get install -y --no-install-recommends hip-runtime-amd \
 && apt-get purge -y --auto-remove curl gnupg \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin conv1d
# /dev/kfd and /dev/dri belong to the host's video and render groups: add
# them at run time (--group-add video, and render where the host has it).
ENV PATH=/opt/conv1d-serve/bin:$PATH \
    LD_LIBRARY_PATH=/opt/rocm/lib
USER 10001:10001
EXPOSE 50051 8002
STOPSIGNAL SIGTERM
# The check asks the server (PID 1) on the port of its own --listen flag, so
# it follows arguments that replace CMD.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["conv1d_client", "health", "--listen_of_pid=1", "--attempts=1", "--timeout_s=2"]
ENTRYPOINT ["conv1d_server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:8002", "--backend=auto", \
     "--drain_timeout_s=25"]
