#!/usr/bin/env bash
# Builds the static binaries into docker/build/ (gitignored) and the two images:
#   axbridge:local       the bridge (docker/Dockerfile)
#   axbridge-nats:local  nats-server from the module in go.sum (docker/nats.Dockerfile)
# Other tags: AX_BRIDGE_IMAGE=... NATS_IMAGE=... docker/build.sh
# Without docker/.env, and with no passwords in the environment, it writes one (gitignored, read
# by Compose) with the local NATS image and a fresh random password for each user.
set -euo pipefail
cd "$(dirname "$0")"
export CGO_ENABLED=0
mkdir -p build/data
go build -trimpath -o build/axbridge ../cmd/axbridge
go build -trimpath -o build/probe ./probe
go build -trimpath -o build/nats-server github.com/nats-io/nats-server/v2
docker build -q -f Dockerfile -t "${AX_BRIDGE_IMAGE:-axbridge:local}" .
docker build -q -f nats.Dockerfile -t "${NATS_IMAGE:-axbridge-nats:local}" .

if [ ! -f .env ] && [ -z "${AX_BRIDGE_PASSWORD:-}" ]; then
  pw() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }
  umask 077
  cat > .env <<END
NATS_IMAGE=${NATS_IMAGE:-axbridge-nats:local}
AX_BRIDGE_PASSWORD=$(pw)
AX_PRODUCER_PASSWORD=$(pw)
AX_CONSUMER_PASSWORD=$(pw)
AX_OPERATOR_PASSWORD=$(pw)
END
  echo "wrote docker/.env: the NATS image and fresh passwords for the four users"
fi
