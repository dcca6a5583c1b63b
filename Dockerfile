# pipelearn container image: pipelearn-server, pipelearn-client, pipelearn-train,
# pipelearn-keygen and the network-profile tools, on Debian 12.
#
#   docker build -t pipelearn .                              # with Fashion-MNIST
#   docker build -t pipelearn --build-arg WITH_DATASET=0 .   # without (mount one)
#
# Used by deploy/compose/docker-compose.yml; docs/deploy.md has the details.
#
# amd64 and arm64 (Raspberry Pi 4/5, Graviton): debian:12 is a multi-arch
# image, every package below has an arm64 build and nothing is compiled for
# the builder's CPU, so `docker build` on an arm64 host needs nothing else.
# An arm64 image from an x86-64 host: `DOCKER_BUILDKIT=1 docker build
# --platform linux/arm64 -t pipelearn:arm64 .` with arm64 debian:12 images
# and qemu-user-static registered with binfmt_misc (deploy/setup cross-arm64
# does that); the build then runs emulated, several times slower. Neither
# has been tried yet: CI checks the arm64 build with deploy/setup cross-arm64.

# ---- build stage: compilers and -dev packages, never shipped -------------
FROM debian:12 AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        meson ninja-build pkg-config gcc libc6-dev \
        libzmq3-dev libczmq-dev libopenblas-dev libcjson-dev libsodium-dev zlib1g-dev \
        libzstd-dev libmicrohttpd-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Portable code (no -march=native: the image runs on other CPUs than the
# builder's); the binaries pick their fast kernels at run time. No tests:
# they run in CI (deploy/setup test), not in the image build.
RUN meson setup /build --prefix=/usr --sysconfdir=/etc --buildtype=release \
        -Dtests=false -Dnative_arch=false \
    && ninja -C /build \
    && DESTDIR=/staging meson install -C /build --no-rebuild \
    && install -m 0755 deploy/compose/pipelearn-entrypoint \
        deploy/compose/pipelearn-compose-keys /staging/usr/bin/

# ---- runtime stage: the shared libraries only ---------------------------
FROM debian:12-slim
# WITH_DATASET=1 adds Debian's dataset-fashion-mnist (about 30 MB), the
# default dataset; with 0, mount the IDX files and point data_dir at them.
ARG WITH_DATASET=1
# iproute2: tc and ip for the optional network profile (pipelearn-entrypoint).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libzmq5 libczmq4 libopenblas0 libcjson1 libsodium23 zlib1g libzstd1 libgomp1 iproute2 \
        libmicrohttpd12 \
        $(if [ "$WITH_DATASET" = 1 ]; then echo dataset-fashion-mnist; fi) \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /staging/usr/ /usr/
COPY --from=build /staging/etc/pipelearn/ /etc/pipelearn/
# A fixed, unprivileged uid; /keys and /results are owned by it so that a
# fresh named volume mounted there is writable by it too.
RUN groupadd --system --gid 10001 pipelearn \
    && useradd --system --uid 10001 --gid pipelearn --home-dir /var/lib/pipelearn \
        --create-home --shell /usr/sbin/nologin pipelearn \
    && install -d -o pipelearn -g pipelearn -m 0700 /keys \
    && install -d -o pipelearn -g pipelearn -m 0755 /results
USER pipelearn
WORKDIR /var/lib/pipelearn
# The daemons run in the foreground and log to stderr; the server listens
# on tcp://*:5555 (server.json "bind").
EXPOSE 5555
ENTRYPOINT ["/usr/bin/pipelearn-entrypoint"]
CMD ["pipelearn-server", "--help"]
