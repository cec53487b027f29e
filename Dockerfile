# planfiles' runtime image: `planfiles serve` as a non-root user, data on the volume /data,
# git inside (the service spawns it), a read-only root file system (only /data and a /tmp
# tmpfs are written), SIGTERM drained within Kubernetes' 30 s grace.
#
# It takes the binary built on the host, in the two lines that build it:
#   cargo build --release --locked
#   docker build -t planfiles .
# The base is Debian 12 with git, ca-certificates and curl: scripts/docker-base.sh makes it
# from Debian's packages where no image registry is reachable; elsewhere
#   docker build --build-arg BASE=debian:bookworm-slim ...
# works too: the first layer installs the three where the base lacks them.
ARG BASE=planfiles-base:bookworm
FROM ${BASE}

# git: the service spawns it (clones, pushes, repacks, fsck); curl: the health check;
# ca-certificates: https webhooks. A no-op on the base of scripts/docker-base.sh.
RUN if ! command -v git > /dev/null || ! command -v curl > /dev/null \
      || [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then \
      apt-get update -qq \
      && apt-get install -y -qq --no-install-recommends git ca-certificates curl > /dev/null \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*; \
    fi

# A user of its own, with no login and /data as its home (git reads $HOME/.gitconfig).
# /keys: where shards mount the keys they share (deploy/compose.yaml); a volume mounted there
# starts owned by this user.
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin planfiles \
 && mkdir -p /data /keys && chown planfiles:planfiles /data /keys

# The layers, smallest change last: the demo tenants and schemas, the config, the binary.
COPY repos-fixture /usr/share/planfiles/repos-fixture
COPY schemas /etc/planfiles/schemas
COPY deploy/container.toml /etc/planfiles/config.toml
# BINARY: another build of the same code (tests/container.rs passes a copy of the one its test
# run built, target/container/planfiles; .dockerignore lets in only these two).
ARG BINARY=target/release/planfiles
COPY ${BINARY} /usr/local/bin/planfiles

ENV PLANFILES_CONFIG=/etc/planfiles/config.toml \
    HOME=/data \
    TMPDIR=/tmp
USER planfiles:planfiles
VOLUME ["/data"]
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=2s --start-period=10s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/readyz > /dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/planfiles"]
CMD ["serve"]
