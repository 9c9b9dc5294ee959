# syntax=docker/dockerfile:1
# Build stage: compile the release binary.
FROM rust:1.95-slim-bookworm AS build
# make: jemalloc, the service's allocator, is built from C sources with make (the slim
# image has gcc but not make).
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, from the manifest and the lock file alone, against empty targets:
# this layer is rebuilt only when Cargo.toml or Cargo.lock change, so a change in src/
# recompiles the service crate and nothing else.
COPY Cargo.toml Cargo.lock ./
COPY crates/hitl-domain/Cargo.toml ./crates/hitl-domain/Cargo.toml
RUN mkdir -p src bench/loadgen crates/hitl-domain/src \
    && touch crates/hitl-domain/src/lib.rs \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && echo 'fn main() {}' > bench/loadgen/main.rs \
    && echo 'fn main() {}' > bench/window_hit.rs \
    && cargo build --release --locked --bin hitl-telegram \
    && rm -rf src bench crates/hitl-domain/src
COPY crates/hitl-domain/src ./crates/hitl-domain/src
COPY build.rs ./
COPY src ./src
COPY migrations ./migrations
# The built-in defaults (`--demo` from any folder) are compiled in from this file.
COPY config/default.toml ./config/default.toml
# The commit `--version` and /healthz report (build.rs): the build context has no .git,
# so it is passed in (`--build-arg HITL_BUILD_COMMIT=$(git rev-parse --short=12 HEAD)`,
# as scripts/compose-check does); without it the binary says `unknown`. Declared after
# the dependency layer, so a new commit does not rebuild the dependencies.
ARG HITL_BUILD_COMMIT=
# COPY keeps the files' own modification times, which can be older than the empty
# targets just built; touching them makes cargo rebuild the crate for certain.
RUN touch src/main.rs src/lib.rs crates/hitl-domain/src/lib.rs \
    && cargo build --release --locked --bin hitl-telegram

# Runtime stage: the binary, the default config, nothing else. TLS roots are built in
# (rustls with webpki roots), so no CA package is needed.
FROM debian:bookworm-slim
# The release (Cargo.toml's version; a test holds the two equal): CHANGELOG.md.
LABEL org.opencontainers.image.title="hitl-telegram" \
      org.opencontainers.image.version="1.0.0" \
      org.opencontainers.image.licenses="MIT"
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin hitl \
    && mkdir -p /app/data /app/config \
    && chown -R hitl:hitl /app
WORKDIR /app
COPY --from=build /src/target/release/hitl-telegram /usr/local/bin/hitl-telegram
COPY config/default.toml /app/config/default.toml
USER hitl
# HITL_CONFIG names the config file for every command (serve, check-config, backup, …);
# compose points it at the mounted config/local.toml.
ENV HITL__SERVER__BIND=0.0.0.0:8080 \
    HITL__DATABASE__URL=sqlite:///app/data/hitl.db \
    HITL_CONFIG=/app/config/default.toml
EXPOSE 8080
VOLUME ["/app/data"]
ENTRYPOINT ["hitl-telegram"]
CMD ["serve"]
