# syntax=docker/dockerfile:1
# Build stage: compile the release binary.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
RUN cargo build --release --locked --bin hitl-telegram

# Runtime stage: the binary, the default config, nothing else. TLS roots are built in
# (rustls with webpki roots), so no CA package is needed.
FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin hitl \
    && mkdir -p /app/data /app/config \
    && chown -R hitl:hitl /app
WORKDIR /app
COPY --from=build /src/target/release/hitl-telegram /usr/local/bin/hitl-telegram
COPY config/default.toml /app/config/default.toml
USER hitl
ENV HITL__SERVER__BIND=0.0.0.0:8080 \
    HITL__DATABASE__URL=sqlite:///app/data/hitl.db
EXPOSE 8080
VOLUME ["/app/data"]
ENTRYPOINT ["hitl-telegram"]
CMD ["serve", "--config", "/app/config/default.toml"]
