# Numaplane controller image.
#   docker build -t quay.io/numaproj/numaplane-controller:latest .
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
