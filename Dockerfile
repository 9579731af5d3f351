# The node and the CLI in a small image, run as a non-root user:
#   docker build -t plaudit:latest .
# The Kubernetes manifests (deploy/kubernetes) run it as user 10001.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p plaudit-node -p plaudit-client \
 && cp target/release/plaudit-node target/release/plaudit /usr/local/bin/ \
 && strip /usr/local/bin/plaudit-node /usr/local/bin/plaudit \
 && mkdir -p /data/var/lib/plaudit

# glibc and libgcc, nothing else (no shell): the binaries need no more.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/plaudit-node /usr/local/bin/plaudit /usr/local/bin/
# The data directory belongs to the node's user: a plain `docker run` (no
# fsGroup to fix ownership, as Kubernetes has) can write it.
COPY --from=build --chown=10001:10001 /data/var/lib/plaudit /var/lib/plaudit
USER 10001:10001
# client, admin (health, readiness, metrics), peer
EXPOSE 7401 7402 7403
VOLUME ["/var/lib/plaudit"]
ENTRYPOINT ["/usr/local/bin/plaudit-node"]
