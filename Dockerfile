# Numaplane controller image, for those who build with Docker:
#   docker build -t ghcr.io/numaproj/numaplane-rs:v<workspace version> .
# `make image` builds the image the manifests name without Docker (docs/image.md);
# crates/controller/tests/image.rs checks it has this file's ENTRYPOINT, USER and EXPOSE.
# Plain Dockerfile syntax (no BuildKit-only features), so the legacy builder works too.

# ---- build ---------------------------------------------------------------
FROM rust:1.95 AS builder
WORKDIR /src
COPY . .
# Build with the image's 1.95 toolchain instead of letting rustup fetch the exact
# channel (and the rustfmt/clippy components) pinned in rust-toolchain.toml.
RUN rm -f rust-toolchain.toml
# TLS is rustls (ring), so no OpenSSL is needed at build or run time.
RUN cargo build --release --locked -p numaplane --bin numaplane \
    && cp target/release/numaplane /numaplane

# ---- runtime -------------------------------------------------------------
# distroless/cc: glibc + libgcc + CA certificates, no shell, non-root user 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /numaplane /numaplane
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/numaplane"]
