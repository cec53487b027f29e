# HAProxy for deploy/compose.yaml: Debian 12's HAProxy 2.6 (the version deploy/haproxy.cfg is
# tested with) on the same base as planfiles' image, running as uid 10001, the shards' user,
# which rewrites tenants.map in the shared volume /router during a move.
ARG BASE=planfiles-base:bookworm
FROM ${BASE}
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends haproxy curl > /dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
COPY deploy/compose/haproxy.cfg /etc/haproxy/haproxy.cfg
# The volume /router starts as a copy of this folder (owner included).
COPY --chown=10001:10001 deploy/compose/tenants.map /router/tenants.map
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
