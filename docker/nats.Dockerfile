# nats-server on an empty base image, built from the nats-server module in go.sum (docker/build.sh),
# for machines that cannot pull the public image. It runs like the public image does with a
# config given: docker run axbridge-nats:local --config /etc/nats/nats.conf
FROM scratch
COPY build/nats-server /nats-server
COPY build/probe /probe
# The JetStream store; a named volume mounted here starts with this owner.
COPY --chown=65532:65532 build/data /data
USER 65532:65532
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--config", "/etc/nats/nats.conf"]
